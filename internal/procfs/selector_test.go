//go:build linux

package procfs

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSelectorMatch(t *testing.T) {
	tests := []struct {
		name     string
		sel      Selector
		exe, cmd string
		want     bool
	}{
		{"exact path", Selector{Executable: "/usr/bin/python3.11"}, "/usr/bin/python3.11", "", true},
		{"exact path, other file", Selector{Executable: "/usr/bin/python3.11"}, "/usr/bin/python3.12", "", false},
		{"star in last element", Selector{Executable: "/usr/bin/python3*"}, "/usr/bin/python3.11", "", true},
		{"star does not cross /", Selector{Executable: "/usr/*/python3"}, "/usr/local/bin/python3", "", false},
		{"star in a middle element", Selector{Executable: "/usr/*/bin/python3"}, "/usr/local/bin/python3", "", true},
		{"double star: none", Selector{Executable: "/opt/**/bin/java"}, "/opt/bin/java", "", true},
		{"double star: several", Selector{Executable: "/opt/**/bin/java"}, "/opt/jdk/21/bin/java", "", true},
		{"double star: other root", Selector{Executable: "/opt/**/bin/java"}, "/usr/lib/jvm/bin/java", "", false},
		{"leading double star", Selector{Executable: "**/bin/java"}, "/usr/lib/jvm/java-17/bin/java", "", true},
		{"trailing double star", Selector{Executable: "/app/**"}, "/app/server/bin/run", "", true},
		{"base name only", Selector{Executable: "python3*"}, "/usr/local/bin/python3.12", "", true},
		{"base name only, no match", Selector{Executable: "python3*"}, "/usr/bin/perl", "", false},
		{"character class", Selector{Executable: "/usr/sbin/[a-n]ginx"}, "/usr/sbin/nginx", "", true},
		{"question mark", Selector{Executable: "/usr/bin/node??"}, "/usr/bin/node18", "", true},
		{"not cleaned path is cleaned", Selector{Executable: "/usr/bin/app"}, "/usr//bin/./app", "", true},
		{"kernel thread never matches a pattern", Selector{Executable: "*"}, "", "", false},
		{"relative executable never matches a path pattern", Selector{Executable: "/a/b"}, "a/b", "", false},
		{"command line found anywhere", Selector{CommandLine: `-m http\.server`}, "/usr/bin/python3", "python3 -m http.server 8080", true},
		{"command line anchored", Selector{CommandLine: `^postgres: checkpointer`}, "/usr/lib/postgresql/15/bin/postgres", "postgres: checkpointer ", true},
		{"command line anchored, no match", Selector{CommandLine: `^checkpointer`}, "/x", "postgres: checkpointer", false},
		{"both must match", Selector{Executable: "java", CommandLine: `com\.example\.Main`}, "/usr/bin/java", "java -cp a.jar com.example.Main", true},
		{"both must match: command line differs", Selector{Executable: "java", CommandLine: `com\.example\.Main`}, "/usr/bin/java", "java -jar other.jar", false},
		{"both must match: executable differs", Selector{Executable: "java", CommandLine: `Main`}, "/usr/bin/python3", "Main", false},
		{"escaped star", Selector{Executable: `/x/a\*`}, "/x/a*", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := tt.sel.Compile()
			require.NoError(t, err)
			assert.Equal(t, tt.want, m.Match(tt.exe, tt.cmd))
			assert.Equal(t, tt.sel.CommandLine != "", m.NeedsCommandLine())
			assert.Equal(t, tt.sel, m.Selector())
		})
	}
}

func TestSelectorErrors(t *testing.T) {
	tests := []struct {
		sel  Selector
		want string
	}{
		{Selector{}, "process selector: set executable, command_line or both"},
		{Selector{Executable: "usr/bin/x"}, `executable: pattern "usr/bin/x": a pattern with '/' must be absolute or start with "**/" (a pattern without '/' matches the base name)`},
		{Selector{Executable: "/usr/bin/[x"}, `executable: pattern "/usr/bin/[x": element "[x": syntax error in pattern`},
		{Selector{Executable: "[x"}, `executable: pattern "[x": element "[x": syntax error in pattern`},
		{Selector{Executable: "/usr//x"}, `executable: pattern "/usr//x": empty element ("//" or a trailing '/')`},
		{Selector{Executable: "/usr/bin/"}, `executable: pattern "/usr/bin/": empty element ("//" or a trailing '/')`},
		{Selector{Executable: "/opt/a**/x"}, `executable: pattern "/opt/a**/x": "**" must be a whole element, as in /opt/**/bin`},
		{Selector{Executable: "**"}, `executable: pattern "**": "**" matches whole paths; use "*" for any base name`},
		{Selector{CommandLine: "("}, "command_line: error parsing regexp: missing closing ): `(`"},
		{Selector{Executable: "/[", CommandLine: "a++"}, "executable: pattern \"/[\": element \"[\": syntax error in pattern\ncommand_line: error parsing regexp: invalid nested repetition operator: `++`"},
	}
	for _, tt := range tests {
		_, err := tt.sel.Compile()
		require.Error(t, err, "%+v", tt.sel)
		assert.Equal(t, tt.want, err.Error())
	}
}

func TestMatchProcess(t *testing.T) {
	tr := newTree(t)
	tr.symlink("proc/10/exe", "/usr/bin/python3.11")
	tr.file("proc/10/cmdline", "python3\x00app.py\x00", 0o444)
	tr.file("proc/11/cmdline", "", 0o444) // kernel thread
	fs := FS{Root: tr.dir}

	exeOnly, err := Selector{Executable: "python3*"}.Compile()
	require.NoError(t, err)
	ok, err := exeOnly.MatchProcess(fs, 10)
	require.NoError(t, err)
	assert.True(t, ok)
	_, err = exeOnly.MatchProcess(fs, 11)
	require.ErrorIs(t, err, os.ErrNotExist)

	cmdOnly, err := Selector{CommandLine: `app\.py$`}.Compile()
	require.NoError(t, err)
	ok, err = cmdOnly.MatchProcess(fs, 10)
	require.NoError(t, err)
	assert.True(t, ok)
	ok, err = cmdOnly.MatchProcess(fs, 11)
	require.NoError(t, err)
	assert.False(t, ok)
}
