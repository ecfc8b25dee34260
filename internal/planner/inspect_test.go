package planner

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/glob"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

// A Go function's string result is read without DWARF as retval:gostring:
// its pointer and length in the first two result registers (RAX, RBX).
// Before, a stripped Go binary's string result was refused both ways:
// retval:gostring ("a gostring needs its length") and argN:gostring at the
// exit ("arguments are gone when a function returns"). A C file's
// retval:gostring is still refused.
func TestRetvalGoString(t *testing.T) {
	bin := testutil.BuildGo(t, "httpserver", true)
	pl, err := Resolve([]config.Target{{Path: bin, Spans: []config.Span{{
		Function: "main.Greeting", ExitAttributes: map[string]string{"greeting": "retval:gostring"},
	}}}}, noDebug)
	require.NoError(t, err)
	defer pl.Close()
	var exits []plan.Fetch
	for _, s := range pl.Sites {
		exits = append(exits, s.Exit...)
	}
	require.NotEmpty(t, exits, "one site per RET")
	for _, f := range exits {
		assert.Equal(t, plan.StoreGoString, f.Store)
		assert.Equal(t, regs.RAX, f.Register, "the string's pointer: the first result")
		assert.Equal(t, regs.RBX, f.LenRegister, "its length: the second")
		assert.Empty(t, f.Derefs)
	}

	b := testutil.BuildNames(t, "-O2")
	_, err = Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{{
		Function: "handle_request", ExitAttributes: map[string]string{"s": "retval:gostring"},
	}}}}, noDebug)
	assert.ErrorContains(t, err, "a gostring needs its length")
}

// A Go generic instantiation is listed by its exact name, as span's
// function: takes it: "main.Keys[go.shape.string,go.shape.[]string]" is that
// one function, not a pattern matching nothing.
func TestInspectGenericByExactName(t *testing.T) {
	bin := testutil.BuildGo(t, "httpserver", false)
	in, err := Inspect(bin, noDebug)
	require.NoError(t, err)
	defer in.Close()
	for _, name := range []string{
		"main.Keys[go.shape.string,go.shape.[]string]",
		"main.Keys[go.shape.string,go.shape.int]",
		"main.Sum[go.shape.int]",
	} {
		g, err := glob.Compile(name)
		require.NoError(t, err, name)
		fns := in.Functions(g)
		require.Len(t, fns, 1, name)
		assert.Equal(t, name, fns[0].Name)
		assert.NoError(t, in.Check(config.Target{Path: bin, Spans: []config.Span{{Function: name}}}), name)
	}
	g, err := glob.Compile("main.Sum[*]")
	require.NoError(t, err)
	assert.Empty(t, in.Functions(g), `a class matches one character: main.Sum\[*\] matches them all`)
	g, err = glob.Compile(`main.Sum\[*\]`)
	require.NoError(t, err)
	assert.Len(t, in.Functions(g), 3)
}

// Check accepts exactly what Resolve accepts on the same file.
func TestInspectCheckAgreesWithResolve(t *testing.T) {
	b := testutil.BuildNames(t, "-O2")
	opts := Options{DebugDirs: []string{b.DebugDir}}
	in, err := Inspect(b.Program, opts)
	require.NoError(t, err)
	defer in.Close()
	for _, tc := range []struct {
		name   string
		target config.Target
		refuse string
	}{
		{"function", config.Target{Spans: []config.Span{{Function: "handle_request"}}}, ""},
		{"names", config.Target{Spans: []config.Span{{Function: "handle_request",
			Attributes: map[string]string{"id": "$req->id", "all": "$$params"}, ExitAttributes: map[string]string{"ret": "$return"}}}}, ""},
		{"no such name", config.Target{Spans: []config.Span{{Function: "handle_request", Attributes: map[string]string{"x": "$nope"}}}}, `no variable "nope"`},
		{"$return at entry", config.Target{Spans: []config.Span{{Function: "handle_request", Attributes: map[string]string{"x": "$return"}}}}, "$return is only known at"},
		{"counter", config.Target{Counters: config.CountersOf("usdt:names:request")}, ""},
		{"usdt span", config.Target{Spans: []config.Span{{Name: "r", Entry: "usdt:names:request", Exit: "uretprobe:handle_request",
			Attributes: map[string]string{"id": "$req->id", "a": "arg0"}}}}, ""},
		{"pattern", config.Target{Spans: []config.Span{{Function: "ct_0*", SourceFile: "*/names/calltree.c"}}}, ""},
		{"pattern over max_functions", config.Target{Spans: []config.Span{{Function: "ct_*", MaxFunctions: 10}}}, "more than max_functions (10)"},
		{"configuration", config.Target{Spans: []config.Span{{Function: "handle_request", Attributes: map[string]string{"": "arg0"}}}}, "empty attribute key"},
		{"no function", config.Target{Spans: []config.Span{{Function: "nope"}}}, "nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.target.Path = b.Program
			checked := in.Check(tc.target)
			resolved := config.Validate([]config.Target{tc.target})
			if resolved == nil {
				var pl *Planner
				if pl, resolved = Resolve([]config.Target{tc.target}, opts); resolved == nil {
					pl.Close()
				}
			}
			if tc.refuse == "" {
				assert.NoError(t, checked)
				assert.NoError(t, resolved)
				return
			}
			assert.ErrorContains(t, checked, tc.refuse)
			assert.ErrorContains(t, resolved, tc.refuse)
		})
	}
}

// In Debian's glibc debuginfo a compile unit is named relative to a
// relative directory (DW_AT_comp_dir "./libio", DW_AT_name "fileops.c"):
// source_file: "*/libio/fileops.c" matched nothing while "libio/fileops.c"
// matched its functions. Every spelling now selects the same functions,
// in Resolve's patterns and in the probe browser's selection.
func TestSourceFileSpellingsLibc(t *testing.T) {
	const libc = "/lib/x86_64-linux-gnu/libc.so.6"
	opts := Options{DebugDirs: []string{"/usr/lib/debug"}}
	in, err := Inspect(libc, opts)
	if err == nil {
		defer in.Close()
		_, err = in.Debug()
	}
	if err != nil {
		testutil.SkipOrFail(t, "%s with its debug symbols (libc6-dbg): %v", libc, err)
	}
	var want, wantSelected []string
	for i, src := range []string{"libio/fileops.c", "*/libio/fileops.c", "./libio/fileops.c", "fileops.c", "*/fileops.c"} {
		pl, err := Resolve([]config.Target{{Path: libc, Spans: []config.Span{{Function: "*", SourceFile: src}}}}, opts)
		require.NoError(t, err, src)
		var names []string
		for _, s := range pl.Spans {
			names = append(names, s.Name)
		}
		pl.Close()
		sel, err := in.Select(mustCompile(t, "*"), mustCompile(t, src))
		require.NoError(t, err)
		var selected []string
		for _, fn := range sel {
			selected = append(selected, fn.Name)
		}
		assert.Subset(t, selected, names, "%s: the browser selects what Resolve plans (and those it leaves out)", src)
		if i == 0 {
			want, wantSelected = names, selected
			assert.GreaterOrEqual(t, len(want), 20, "fileops.c's functions")
			continue
		}
		assert.ElementsMatch(t, want, names, src)
		assert.ElementsMatch(t, wantSelected, selected, src)
	}
}

func mustCompile(t *testing.T, p string) *glob.Glob {
	t.Helper()
	g, err := glob.Compile(p)
	require.NoError(t, err)
	return g
}
