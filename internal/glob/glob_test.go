package glob

import (
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGlob(t *testing.T) {
	cases := []struct {
		pattern string
		match   []string
		nomatch []string
	}{
		{"handle_request", []string{"handle_request"}, []string{"handle_request2", "xhandle_request", ""}},
		{"handle_*", []string{"handle_", "handle_request", "handle_a.b/c"}, []string{"handle", "xhandle_a"}},
		{"main.*", []string{"main.main", "main.(*Server).Handle", "main.Sum.func1"}, []string{"runtime.main", "main"}},
		{"main.(*Server).*", []string{"main.(*Server).Handle", "main.(*Server).Close"}, []string{"main.Server.Handle", "main.(*Client).Handle", "main.(Server).Handle"}},
		{`main.(\*Server).Handle`, []string{"main.(*Server).Handle"}, []string{"main.(xServer).Handle"}},
		{"main.(**).Handle", []string{"main.(*Server).Handle", "main.(*).Handle"}, []string{"main.(Server).Handle"}},
		{"srv::*", []string{"srv::Server::handle", "srv::Server::handle(int)"}, []string{"xsrv::a", "std::srv::a"}},
		{"srv::Server::handle(int)", []string{"srv::Server::handle(int)"}, []string{"srv::Server::handle(long)"}},
		{"*::handle", []string{"srv::Server::handle", "::handle"}, []string{"handle"}},
		{"h?ndle", []string{"handle", "hündle"}, []string{"hndle", "haandle"}},
		{"[a-c]*", []string{"a", "bcd", "c.x"}, []string{"d", "", "A"}},
		{"[^a-c]*", []string{"d", "Z.x"}, []string{"a", ""}},
		{"[!a-c]*", []string{"d"}, []string{"b"}},
		{`main.Map\[*\]`, []string{"main.Map[go.shape.int]", "main.Map[]"}, []string{"main.Map"}},
		{"*a*b*c*", []string{"abc", "xxaxxbxxcxx", "a.b/c"}, []string{"acb", "ab"}},
		{"**", []string{"", "anything at all"}, nil},
		{"*", []string{"", "x.y.z", "a/b"}, nil},
		// "[]" is itself: Go's slice types.
		{"f[]*", []string{"f[]", "f[]int"}, []string{"f", "fx"}},
		{`f\[[]]`, []string{"f[[]]"}, []string{"f[]"}},
	}
	for _, c := range cases {
		g, err := Compile(c.pattern)
		require.NoError(t, err, c.pattern)
		for _, s := range c.match {
			assert.True(t, g.Match(s), "%q should match %q", c.pattern, s)
		}
		for _, s := range c.nomatch {
			assert.False(t, g.Match(s), "%q should not match %q", c.pattern, s)
		}
	}
	for _, lit := range []string{"handle_request", `main.(\*Server).Handle`, "main.(*Server).Handle", "srv::x(int)", "f[]int"} {
		g, err := Compile(lit)
		require.NoError(t, err)
		assert.True(t, g.Literal(), "%q is literal", lit)
	}
	// Every Go function name compiles, so that config.Validate takes it
	// (the planner then takes a pattern that is exactly a function's name
	// as that function): these generic instantiations of a Go HTTP server
	// were refused with "empty character class" before "[]" was literal.
	for _, name := range []string{
		"slices.BinarySearchFunc[go.shape.[]go.shape.*net.IPNet,go.shape.*uint8,go.shape.[]uint8]",
		"slices.DeleteFunc[go.shape.[][]*crypto/x509.Certificate,go.shape.[]*crypto/x509.Certificate]",
		"mime/multipart.(*Writer).CreatePart.Keys[go.shape.map[string][]string,go.shape.string,go.shape.[]string].func1",
	} {
		_, err := Compile(name)
		assert.NoError(t, err, name)
	}
	for _, pat := range []string{"a*", "a?", "[ab]"} {
		g, err := Compile(pat)
		require.NoError(t, err)
		assert.False(t, g.Literal(), "%q is a pattern", pat)
	}
}

func TestGlobErrors(t *testing.T) {
	for _, c := range []struct {
		pattern string
		column  int
	}{
		{"abc\\", 4}, {"[abc", 1}, {"a[^]", 4}, {"a[!]", 4}, {"[z-a]", 4}, {"x[a-", 2}, {strings.Repeat("a", maxGlobLen+1), maxGlobLen + 1},
	} {
		_, err := Compile(c.pattern)
		var ge *Error
		if assert.ErrorAs(t, err, &ge, c.pattern) {
			assert.Equal(t, c.column, ge.Column, c.pattern)
		}
	}
}

func TestGlobMatchPath(t *testing.T) {
	for _, c := range []struct {
		pattern, path string
		want          bool
	}{
		{"prog.c", "/src/testdata/debuginfo/prog.c", true},
		{"*.c", "/src/app/server.c", true},
		{"*.c", "/src/app/server.cc", false},
		{"*/debuginfo/*.c", "/src/testdata/debuginfo/prog.c", true},
		{"/src/*", "/src/a/b.c", true},
		{"app/*.c", "/src/app/server.c", true},
		{"pp/*.c", "/src/app/server.c", false},
		{"*/app/*.c", "/src/app/server.c", true},
		{"src", "/src/app/server.c", false},
		{"/app/*.c", "/src/app/server.c", false},
		// Debian's glibc: DW_AT_comp_dir "./libio", DW_AT_name "fileops.c".
		{"libio/fileops.c", "libio/fileops.c", true},
		{"*/libio/fileops.c", "libio/fileops.c", true},
		{"fileops.c", "libio/fileops.c", true},
		{"*/fileops.c", "libio/fileops.c", true},
		{"/libio/*", "libio/fileops.c", false},
		// Fedora's: an absolute DW_AT_comp_dir.
		{"libio/fileops.c", "/usr/src/debug/glibc-2.38/libio/fileops.c", true},
		{"*/libio/fileops.c", "/usr/src/debug/glibc-2.38/libio/fileops.c", true},
		{"libio/fileops.c", "/usr/src/debug/glibc-2.38/libio/wfileops.c", false},
		// Go's compile units are package paths.
		{"net/http", "net/http", true},
		{"http", "net/http", true},
		{"*/http", "net/http", true},
		{"ttp", "net/http", false},
	} {
		g, err := Compile(c.pattern)
		require.NoError(t, err)
		assert.Equal(t, c.want, g.MatchPath(c.path), "%q on %q", c.pattern, c.path)
	}
}

// FuzzGlob checks that compiling never panics, that a pattern without
// metacharacters matches exactly itself, and that "*" agrees with a
// reference on patterns made of literals and stars.
func FuzzGlob(f *testing.F) {
	for _, s := range [][2]string{{"main.(*Server).*", "main.(*Server).Handle"}, {"[a-c]?*", "bx"}, {"a\\*", "a*"}, {"*a*b", "xaxb"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		g, err := Compile(pattern)
		if err != nil {
			return
		}
		got := g.Match(name)
		if !strings.ContainsAny(pattern, `*?[\`) && got != (pattern == name) {
			t.Fatalf("literal %q on %q: %v", pattern, name, got)
		}
		// Against path.Match where both agree on the syntax: no "/", no
		// "(*", no classes, no escapes.
		if !strings.ContainsAny(pattern+name, `/[\`) && !strings.Contains(pattern, "(*") {
			want, err := path.Match(pattern, name)
			if err == nil && want != got {
				t.Fatalf("%q on %q: %v, path.Match says %v", pattern, name, got, want)
			}
		}
	})
}
