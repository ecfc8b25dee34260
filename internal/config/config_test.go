package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
)

// errLines returns the joined errors of err, one per line.
func errLines(err error) []string {
	if err == nil {
		return nil
	}
	return strings.Split(err.Error(), "\n")
}

const bin = "/usr/lib/postgresql/15/bin/postgres"

// queryTarget is a valid target to mutate.
func queryTarget() Target {
	return Target{
		Path:        bin,
		ServiceName: "postgres",
		Spans: []Span{{
			Name:           "pg.query",
			Entry:          "usdt:postgresql:query__start",
			Exit:           "usdt:postgresql:query__done",
			Attributes:     map[string]string{"db.query.text": "arg0:string"},
			ExitAttributes: map[string]string{"done.text": "arg0:string"},
		}},
		Counters: CountersOf("usdt:postgresql:transaction__start"),
	}
}

// attrs returns n attributes k0..k(n-1) = expr.
func attrs(n int, expr string) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("k%d", i)] = expr
	}
	return m
}

// nest wraps root in n dereferences +0(…).
func nest(n int, root string) string {
	return strings.Repeat("+0(", n) + root + strings.Repeat(")", n)
}

func TestValidateValid(t *testing.T) {
	for _, c := range []struct {
		name    string
		targets []Target
	}{
		{"issue contract", []Target{{
			Path: bin, PID: 0, ServiceName: "postgres",
			Spans: []Span{
				{
					Name: "pg.query", Entry: "usdt:postgresql:query__start", Exit: "usdt:postgresql:query__done",
					Attributes:     map[string]string{"db.query.text": "arg0:string"},
					ExitAttributes: map[string]string{"done.text": "arg0:string"},
				},
				{
					Name: "palloc", Function: "palloc",
					Attributes:     map[string]string{"size": "arg0:u64"},
					ExitAttributes: map[string]string{"ptr": "retval:x64"},
				},
			},
			Counters: CountersOf("usdt:postgresql:transaction__start", "uprobe:palloc"),
		}}},
		{"counters only", []Target{{Path: bin, Counters: CountersOf("usdt:a:b")}}},
		{"spans only", []Target{{Path: bin, Spans: []Span{{Name: "f", Function: "f"}}}}},
		{"a pid", []Target{{Path: bin, PID: 1234, Counters: CountersOf("usdt:a:b")}}},
		{"two targets on one file", []Target{
			{Path: bin, Counters: CountersOf("usdt:a:b")},
			{Path: bin, PID: 7, Counters: CountersOf("usdt:a:b")},
		}},
		{"a counter that also opens a span", []Target{{
			Path:     bin,
			Spans:    []Span{{Name: "work", Function: "work"}},
			Counters: CountersOf("uprobe:work", "uretprobe:work"),
		}}},
		{"uprobe entry and uretprobe exit", []Target{{Path: bin, Spans: []Span{{
			Name: "f", Entry: "uprobe:f", Exit: "uretprobe:f",
			Attributes: map[string]string{"a6": "arg6", "a7": "arg7:s32", "sp": "%sp", "rip": "%rip"}, ExitAttributes: map[string]string{"r": "retval:s64", "ax": "%ax"},
		}}}}},
		{"inside a function: register arguments", []Target{{Path: bin, Spans: []Span{{
			Name: "f", Entry: "uprobe:f+0x4", Exit: "uprobe:f+0x20",
			Attributes: map[string]string{"a0": "arg0", "a5": "arg5"}, ExitAttributes: map[string]string{"a1": "arg1"},
		}}}}},
		{"usdt entry, uretprobe exit", []Target{{Path: bin, Spans: []Span{{
			Name: "f", Entry: "usdt:p:start", Exit: "uretprobe:f", ExitAttributes: map[string]string{"r": "retval"},
		}}}}},
		{"a probe that closes one span and opens the next", []Target{{Path: bin, Spans: []Span{
			{Name: "a", Entry: "usdt:p:one", Exit: "usdt:p:two"},
			{Name: "b", Entry: "usdt:p:two", Exit: "usdt:p:three"},
		}}}},
		{"the limits exactly", []Target{{Path: bin, Spans: []Span{{
			Name: "max", Entry: "usdt:p:start", Exit: "usdt:p:done",
			Attributes:     attrs(bpfobj.MaxFetches, nest(bpfobj.MaxDerefs, "arg0")+fmt.Sprintf(":string[%d]", bpfobj.StringMax)),
			ExitAttributes: map[string]string{"b": fmt.Sprintf("arg1:bytes[%d]", bpfobj.StringMax)},
		}}}}},
		{"a default-length string", []Target{{Path: bin, Spans: []Span{{
			Name: "s", Entry: "usdt:p:start", Exit: "usdt:p:done", Attributes: map[string]string{"s": "arg0:string"},
		}}}}},
		{"names", []Target{{Path: bin, Spans: []Span{{
			Function: "handle_request",
			Attributes: map[string]string{
				"id": "$req->id", "path": "$req->path", "len": "$req->hdr->len:x16", "name": "$req.hdr.name",
				"codes": "$req->codes[2]", "params": "$$params", "go": "$r.URL.Path:gostring[64]",
			},
			ExitAttributes: map[string]string{"ret": "$return", "g": "$main.counter"},
			StatusError:    "$return < 0",
		}}}}},
		{"names at lines and USDT sites", []Target{{Path: bin, Spans: []Span{
			{Name: "l", Entry: "line:server.c:120", Exit: "line:src/server.c:140",
				Attributes: map[string]string{"n": "$n", "a": "arg5"}, ExitAttributes: map[string]string{"m": "$req->hdr->len"}},
			{Name: "u", Entry: "usdt:p:start", Exit: "usdt:p:done", Attributes: map[string]string{"local": "$total"}},
		}, Counters: CountersOf("line:server.c:121")}}},
		{"function patterns", []Target{{Path: bin, Spans: []Span{
			{Function: "handle_*", ExitAttributes: map[string]string{"ret": "$return"}},
			{Name: "srv.", Function: "main.(*Server).*", MaxFunctions: 5000},
			{Function: "*", SourceFile: "*/net/*.c", Returns: ReturnsRet},
			{Function: "handle_get", SourceFile: "server.c"},
		}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.NoError(t, Validate(c.targets))
		})
	}
}

func TestValidateErrors(t *testing.T) {
	const (
		t0  = "targets[0]"
		s0  = "targets[0].spans[0]"
		s1  = "targets[0].spans[1]"
		c0  = "targets[0].counters[0]"
		c1  = "targets[0].counters[1]"
		pg  = "usdt:postgresql:query__start"
		pgd = "usdt:postgresql:query__done"
	)
	span := func(s Span) []Target {
		return []Target{{Path: bin, Spans: []Span{s}}}
	}
	for _, c := range []struct {
		name    string
		targets []Target
		want    []string // every error line, exactly, in order
	}{
		{"no targets", nil, []string{"targets: at least one target is required"}},
		{"empty targets", []Target{}, []string{"targets: at least one target is required"}},
		{"empty path", []Target{{Counters: CountersOf("usdt:a:b")}}, []string{t0 + ": path is required"}},
		{"relative path", []Target{{Path: "bin/postgres", Counters: CountersOf("usdt:a:b")}},
			[]string{t0 + `: path "bin/postgres" must be absolute, or a bare name (an executable in PATH, a library such as libc)`}},
		{"negative pid", []Target{{Path: bin, PID: -1, Counters: CountersOf("usdt:a:b")}},
			[]string{t0 + ": pid -1 must be 0 (every process) or a process id"}},
		{"nothing to trace", []Target{{Path: bin}},
			[]string{t0 + ": nothing to trace: add spans or counters"}},
		{"nothing to trace, empty lists", []Target{{Path: bin, Spans: []Span{}, Counters: CountersOf()}},
			[]string{t0 + ": nothing to trace: add spans or counters"}},
		{"thread context attributes without the context", []Target{{Path: bin, Counters: CountersOf("usdt:a:b"),
			ThreadContext: &ThreadContext{Enabled: new(bool), Attributes: true}}},
			[]string{t0 + ": thread_context: attributes: true needs enabled: true (attributes come with the context)"}},
		{"reserved attribute names", span(Span{Name: "s", Entry: pg, Exit: pgd,
			Attributes: map[string]string{"thread.id": "arg0", "service.name": "arg1:string"}}),
			[]string{
				s0 + `.attributes["service.name"]: "service.name" is reserved: it is a resource attribute the receiver sets (service_name:); choose another key`,
				s0 + `.attributes["thread.id"]: "thread.id" is reserved: the receiver sets it on every span to the thread the span ended on; choose another key`,
			}},
		{"returns without function", span(Span{Name: "s", Entry: "uprobe:f", Exit: "uretprobe:f", Returns: "ret"}),
			[]string{s0 + ": returns: only a function: span chooses how its return is probed; with exit:, write uretprobe:SYMBOL or ret:SYMBOL"}},
		{"unknown returns", span(Span{Name: "s", Function: "f", Returns: "kernel"}),
			[]string{s0 + `: returns "kernel": want auto, uretprobe or ret`}},
		{"retval at a ret: exit is fine, arguments are not", span(Span{Name: "s", Entry: "uprobe:f", Exit: "ret:f",
			ExitAttributes: map[string]string{"r": "retval", "a": "arg1"}}),
			[]string{s0 + `.exit_attributes["a"]: "arg1": arguments are gone when a function returns; capture arg1 in attributes (at entry)`}},
		{"unknown probe kind in a counter", []Target{{Path: bin, Counters: CountersOf("kprobe:x")}},
			[]string{c0 + `: probe "kprobe:x": unknown probe kind "kprobe" (want usdt, uprobe, uretprobe, ret or line)`}},
		{"unknown probe kind at entry and exit",
			span(Span{Name: "s", Entry: "kprobe:x", Exit: "kretprobe:x"}),
			[]string{
				s0 + `: entry: probe "kprobe:x": unknown probe kind "kprobe" (want usdt, uprobe, uretprobe, ret or line)`,
				s0 + `: exit: probe "kretprobe:x": unknown probe kind "kretprobe" (want usdt, uprobe, uretprobe, ret or line)`,
			}},
		{"bad fetch expression in attributes",
			span(Span{Name: "s", Entry: pg, Exit: pgd, Attributes: map[string]string{"q": "arg0:strin"}}),
			[]string{s0 + `.attributes["q"]: fetch expression "arg0:strin" at column 6: unknown type "strin" (want u8..u64, s8..s64, x8..x64, string, string[N], bytes[N], gostring, gostring[N])`}},
		{"bad fetch expression in exit_attributes",
			span(Span{Name: "s", Entry: pg, Exit: pgd, ExitAttributes: map[string]string{"d": "+8(%di"}}),
			[]string{s0 + `.exit_attributes["d"]: fetch expression "+8(%di" at column 7: expected ")"`}},
		{"several bad fetch expressions, in key order",
			span(Span{Name: "s", Entry: pg, Exit: pgd, Attributes: map[string]string{"b": "arg", "a": "%eax", "c": "arg0"}}),
			[]string{
				s0 + `.attributes["a"]: fetch expression "%eax" at column 1: partial register "%eax" (want the whole register %rax)`,
				s0 + `.attributes["b"]: fetch expression "arg" at column 4: expected a number after "arg"`,
			}},
		{"retval in entry attributes",
			span(Span{Name: "f", Function: "f", Attributes: map[string]string{"r": "retval"}}),
			[]string{s0 + `.attributes["r"]: "retval": retval is only known at exit`}},
		{"retval at a usdt exit",
			span(Span{Name: "s", Entry: pg, Exit: pgd, ExitAttributes: map[string]string{"r": "retval:x64"}}),
			[]string{s0 + `.exit_attributes["r"]: "retval:x64": retval needs a uretprobe: or ret: exit (this exit is usdt:postgresql:query__done)`}},
		{"retval at a uprobe exit",
			span(Span{Name: "s", Entry: "uprobe:f", Exit: "uprobe:f+0x10", ExitAttributes: map[string]string{"r": "retval"}}),
			[]string{s0 + `.exit_attributes["r"]: "retval": retval needs a uretprobe: or ret: exit (this exit is uprobe:f+0x10)`}},
		{"argN at a uretprobe",
			span(Span{Name: "f", Function: "f", ExitAttributes: map[string]string{"a": "arg0", "b": "+8(arg1):u32"}}),
			[]string{
				s0 + `.exit_attributes["a"]: "arg0": arguments are gone when a function returns; capture arg0 in attributes (at entry)`,
				s0 + `.exit_attributes["b"]: "+8(arg1):u32": arguments are gone when a function returns; capture arg1 in attributes (at entry)`,
			}},
		{"stack argument inside a function",
			span(Span{Name: "s", Entry: "uprobe:f+0x4", Exit: "uretprobe:f", Attributes: map[string]string{"a": "arg6"}}),
			[]string{s0 + `.attributes["a"]: "arg6": stack argument arg6 is only known at the function's first instruction`}},
		{"exit without entry", span(Span{Name: "s", Exit: pgd}),
			[]string{s0 + ": exit without entry: add entry (usdt:… or uprobe:…)"}},
		{"entry without exit", span(Span{Name: "s", Entry: pg}),
			[]string{s0 + ": entry without exit: add exit (usdt:… or uretprobe:…), or use function: for a whole function"}},
		{"neither entry, exit nor function", span(Span{Name: "s"}),
			[]string{s0 + ": entry and exit (or function) are required"}},
		{"function together with entry", span(Span{Name: "s", Function: "f", Entry: "uprobe:f"}),
			[]string{s0 + ": function and entry/exit are exclusive: use one or the other"}},
		{"function together with exit", span(Span{Name: "s", Function: "f", Exit: "uretprobe:f"}),
			[]string{s0 + ": function and entry/exit are exclusive: use one or the other"}},
		{"function with a space", span(Span{Name: "s", Function: "f g"}),
			[]string{s0 + `: function: "f g" contains a space or control character`}},
		{"entry is a return probe", span(Span{Name: "s", Entry: "uretprobe:f", Exit: "uprobe:g"}),
			[]string{s0 + ": entry: uretprobe:f is a return probe; a span opens at usdt: or uprobe:"}},
		{"no name", span(Span{Entry: pg, Exit: pgd}),
			[]string{s0 + ": name is required"}},
		{"empty attribute key", span(Span{Name: "s", Entry: pg, Exit: pgd, Attributes: map[string]string{"": "arg0"}}),
			[]string{s0 + `.attributes[""]: empty attribute key`}},
		{"duplicate span names", []Target{{Path: bin, Spans: []Span{
			{Name: "x", Entry: "usdt:p:a", Exit: "usdt:p:b"},
			{Name: "x", Entry: "usdt:p:c", Exit: "usdt:p:d"},
		}}}, []string{s1 + `: duplicate span name "x" (also spans[0])`}},
		{"the same probe opens two spans", []Target{{Path: bin, Spans: []Span{
			{Name: "a", Entry: "usdt:p:start", Exit: "usdt:p:b"},
			{Name: "b", Entry: "usdt:p:start", Exit: "usdt:p:d"},
		}}}, []string{s1 + `: probe usdt:p:start already opens span "a"`}},
		{"a function and an entry open the same probe", []Target{{Path: bin, Spans: []Span{
			{Name: "a", Function: "f"},
			{Name: "b", Entry: "uprobe:f+0x0", Exit: "usdt:p:d"},
		}}}, []string{s1 + `: probe uprobe:f already opens span "a"`}},
		{"the same probe closes two spans", []Target{{Path: bin, Spans: []Span{
			{Name: "a", Entry: "usdt:p:a", Exit: "usdt:p:done"},
			{Name: "b", Entry: "usdt:p:b", Exit: "usdt:p:done"},
		}}}, []string{s1 + `: probe usdt:p:done already closes span "a"`}},
		{"a function and an exit close the same probe", []Target{{Path: bin, Spans: []Span{
			{Name: "a", Function: "f"},
			{Name: "b", Entry: "usdt:p:b", Exit: "uretprobe:f"},
		}}}, []string{s1 + `: probe uretprobe:f already closes span "a"`}},
		{"entry == exit", span(Span{Name: "s", Entry: pg, Exit: pg}),
			[]string{s0 + ": entry and exit are the same probe usdt:postgresql:query__start"}},
		{"entry == exit, spelled differently", span(Span{Name: "s", Entry: "uprobe:f+16", Exit: "uprobe:f+0x10"}),
			[]string{s0 + ": entry and exit are the same probe uprobe:f+0x10"}},
		{"duplicate counters", []Target{{Path: bin, Counters: CountersOf("usdt:a:b", "usdt:a:b")}},
			[]string{c1 + ": probe usdt:a:b is already counted (counters[0])"}},
		{"duplicate counters, uprobe:f and uprobe:f+0x0", []Target{{Path: bin, Counters: CountersOf("uprobe:f", "uprobe:f+0x0")}},
			[]string{c1 + ": probe uprobe:f is already counted (counters[0])"}},
		{"too many attributes",
			span(Span{Name: "s", Entry: pg, Exit: pgd, Attributes: attrs(bpfobj.MaxFetches+1, "arg0")}),
			[]string{fmt.Sprintf("%s: attributes: %d values to fetch, at most %d per span end (carrier ids and status_error count too)", s0, bpfobj.MaxFetches+1, bpfobj.MaxFetches)}},
		{"too many exit attributes",
			span(Span{Name: "s", Entry: pg, Exit: pgd, ExitAttributes: attrs(bpfobj.MaxFetches+3, "arg0")}),
			[]string{fmt.Sprintf("%s: exit_attributes: %d values to fetch, at most %d per span end (carrier ids and status_error count too)", s0, bpfobj.MaxFetches+3, bpfobj.MaxFetches)}},
		{"too many dereferences",
			span(Span{Name: "s", Entry: pg, Exit: pgd, Attributes: map[string]string{"d": nest(bpfobj.MaxDerefs+1, "%di")}}),
			[]string{fmt.Sprintf("%s.attributes[\"d\"]: %q: %d dereferences, at most %d", s0, nest(bpfobj.MaxDerefs+1, "%di"), bpfobj.MaxDerefs+1, bpfobj.MaxDerefs)}},
		{"string above the capture limit",
			span(Span{Name: "s", Entry: pg, Exit: pgd, Attributes: map[string]string{"q": fmt.Sprintf("arg0:string[%d]", bpfobj.StringMax+1)}}),
			[]string{fmt.Sprintf("%s.attributes[\"q\"]: \"arg0:string[%d]\": string[%d] is longer than the %d-byte capture limit", s0, bpfobj.StringMax+1, bpfobj.StringMax+1, bpfobj.StringMax)}},
		{"bytes above the capture limit",
			span(Span{Name: "s", Entry: pg, Exit: pgd, ExitAttributes: map[string]string{"b": "arg0:bytes[4096]"}}),
			[]string{fmt.Sprintf("%s.exit_attributes[\"b\"]: \"arg0:bytes[4096]\": bytes[4096] is longer than the %d-byte capture limit", s0, bpfobj.StringMax)}},
		{"a key in both attributes and exit_attributes",
			span(Span{Name: "s", Entry: pg, Exit: pgd, Attributes: map[string]string{"k": "arg0"}, ExitAttributes: map[string]string{"k": "arg1"}}),
			[]string{s0 + `.exit_attributes["k"]: key is also in attributes`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Validate(c.targets)
			require.Error(t, err)
			assert.Equal(t, c.want, errLines(err))
		})
	}
}

// TestValidateAllAtOnce checks that a configuration with many problems gets
// every one of them in one error, in configuration order.
func TestValidateAllAtOnce(t *testing.T) {
	targets := []Target{
		{
			Path: "rel/ative", PID: -3,
			Spans: []Span{
				{Name: "dup", Entry: "kprobe:x", Exit: "usdt:p:done", Attributes: map[string]string{"r": "retval", "bad": "arg0:"}},
				{Name: "dup", Function: "f", Entry: "uprobe:f"},
				{Name: "dup2", Exit: "usdt:p:done2"},
				{Name: "same", Entry: "usdt:p:x", Exit: "usdt:p:x", ExitAttributes: map[string]string{"s": "arg0:string[9999]"}},
			},
			Counters: CountersOf("uprobe:f", "uprobe:f+0x0", "bogus"),
		},
		{Path: ""},
		{Path: bin, Spans: []Span{{Name: "f", Function: "f", ExitAttributes: map[string]string{"a": "arg2"}}}},
	}
	err := Validate(targets)
	require.Error(t, err)
	want := []string{
		`targets[0]: path "rel/ative" must be absolute, or a bare name (an executable in PATH, a library such as libc)`,
		`targets[0]: pid -3 must be 0 (every process) or a process id`,
		`targets[0].spans[0]: entry: probe "kprobe:x": unknown probe kind "kprobe" (want usdt, uprobe, uretprobe, ret or line)`,
		`targets[0].spans[0].attributes["bad"]: fetch expression "arg0:" at column 6: expected a type after ":"`,
		`targets[0].spans[0].attributes["r"]: "retval": retval is only known at exit`,
		`targets[0].spans[1]: duplicate span name "dup" (also spans[0])`,
		`targets[0].spans[1]: function and entry/exit are exclusive: use one or the other`,
		`targets[0].spans[2]: exit without entry: add entry (usdt:… or uprobe:…)`,
		`targets[0].spans[3]: entry and exit are the same probe usdt:p:x`,
		`targets[0].spans[3].exit_attributes["s"]: "arg0:string[9999]": string[9999] is longer than the 256-byte capture limit`,
		`targets[0].counters[1]: probe uprobe:f is already counted (counters[0])`,
		`targets[0].counters[2]: probe "bogus": want usdt:PROVIDER:NAME, uprobe:SYMBOL[+OFFSET], uretprobe:SYMBOL, ret:SYMBOL or line:FILE:LINE`,
		`targets[1]: path is required`,
		`targets[1]: nothing to trace: add spans or counters`,
		`targets[2].spans[0].exit_attributes["a"]: "arg2": arguments are gone when a function returns; capture arg2 in attributes (at entry)`,
	}
	assert.Equal(t, want, errLines(err))

	// Each part is its own error, reachable through errors.Join's Unwrap.
	j, ok := err.(interface{ Unwrap() []error })
	require.True(t, ok, "Validate joins its errors")
	assert.Len(t, j.Unwrap(), len(want))
}

// TestValidateDeterministic checks that the same configuration always gives
// the same error text, whatever the order of Go's map iteration.
func TestValidateDeterministic(t *testing.T) {
	targets := []Target{{Path: bin, Spans: []Span{{
		Name: "s", Entry: "usdt:p:a", Exit: "usdt:p:b",
		Attributes:     map[string]string{"k1": "arg0", "k2": "arg1", "k3": "arg2", "k4": "arg3", "r": "retval", "e": "%eax"},
		ExitAttributes: map[string]string{"k1": "arg0", "k2": "arg1", "k3": "arg2", "k4": "arg3", "r": "retval", "e": "%eax"},
	}}}}
	first := Validate(targets)
	require.Error(t, first)
	for range 50 {
		err := Validate(targets)
		require.Error(t, err)
		if !assert.Equal(t, first.Error(), err.Error(), "Validate's error text changes from call to call") {
			break
		}
	}
}

func TestValidateErrorsAreSyntaxErrors(t *testing.T) {
	err := Validate([]Target{{Path: bin, Spans: []Span{{
		Name: "s", Entry: "usdt:p:a", Exit: "usdt:p:b", Attributes: map[string]string{"x": "arg0:u7"},
	}}}})
	require.Error(t, err)
	var se *fetch.SyntaxError
	require.True(t, errors.As(err, &se), "the fetch error is kept: %v", err)
	assert.Equal(t, 6, se.Column)
	assert.Contains(t, err.Error(), "at column 6")
}

func TestFunctionPatterns(t *testing.T) {
	for name, want := range map[string]bool{
		"handle_*": true, "main.(*Server).*": true, "main.(*Server).Handle": false, "handle": false,
		"ns::f": false, "f?": true, "f[ab]": true, `f\*`: false, "[x": true,
	} {
		assert.Equal(t, want, FunctionIsPattern(name), name)
	}
	assert.True(t, Span{Function: "f", SourceFile: "a.c"}.IsPattern(), "source_file makes a pattern")
	assert.False(t, Span{Entry: "uprobe:f"}.IsPattern())
	assert.Equal(t, "app.handle_get", Span{Name: "app.", Function: "handle_*"}.SpanName("handle_get"))
	assert.Equal(t, "handle_get", Span{Function: "handle_*"}.SpanName("handle_get"))
	assert.Equal(t, "f", Span{Function: "f"}.SpanName(""), "a function span is named after it")
	assert.Equal(t, "x", Span{Name: "x", Function: "f"}.SpanName(""))
	assert.Equal(t, DefaultMaxFunctions, Span{}.FunctionLimit())
	assert.Equal(t, 7, Span{MaxFunctions: 7}.FunctionLimit())
}

func TestParseComparisonNames(t *testing.T) {
	for text, want := range map[string]string{
		"$return < 0":          "$return < 0",
		"$req->id > 5":         "$req->id > 5",
		"$req->hdr->len >= 10": "$req->hdr->len >= 10",
		"$a->b->c==-1":         "$a->b->c == -1",
		"$r.Code != 200":       "$r.Code != 200",
		"retval:s64 <= 0x10":   "retval:s64 <= 16",
	} {
		c, err := ParseComparison(text)
		require.NoError(t, err, text)
		assert.Equal(t, want, c.String(), text)
	}
	_, err := ParseComparison("$a->b")
	require.ErrorContains(t, err, `want EXPR OP INTEGER`, "the > of -> is no operator")
}

func FuzzParseComparison(f *testing.F) {
	for _, s := range []string{"retval:s64 < 0", "$return < 0", "$a->b > 1", "$a->b", "->", "$a-> >= 3", "x == y", "< 0", "$$params == 1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		c, err := ParseComparison(text)
		if err != nil {
			return
		}
		again, err := ParseComparison(c.String())
		if err != nil {
			t.Fatalf("%q parses as %q, which does not parse: %v", text, c.String(), err)
		}
		if again.String() != c.String() || again.Op != c.Op || again.Value != c.Value {
			t.Fatalf("%q: %q then %q", text, c.String(), again.String())
		}
	})
}

func TestSortedAttributes(t *testing.T) {
	got, err := SortedAttributes(map[string]string{"b": "arg1", "a": "arg0:string", "c": "retval:x64"})
	require.NoError(t, err)
	require.Len(t, got, 3)
	assert.Equal(t, []string{"a", "b", "c"}, []string{got[0].Key, got[1].Key, got[2].Key})
	assert.Equal(t, fetch.RootArg, got[0].Expr.Root)
	assert.Equal(t, fetch.KindString, got[0].Expr.Type.Kind)
	assert.Equal(t, 1, got[1].Expr.Arg)
	assert.Equal(t, fetch.RootRetval, got[2].Expr.Root)

	got, err = SortedAttributes(nil)
	require.NoError(t, err)
	assert.Empty(t, got)

	got, err = SortedAttributes(map[string]string{"z": "nope", "ok": "arg0", "a": "arg0:"})
	require.Error(t, err)
	assert.Equal(t, []string{
		`attribute "a": fetch expression "arg0:" at column 6: expected a type after ":"`,
		`attribute "z": fetch expression "nope" at column 1: unknown name "nope" (want argN, retval, %register, OFF(EXPR) or a $name)`,
	}, errLines(err))
	require.Len(t, got, 1, "the good ones are still returned")
	assert.Equal(t, "ok", got[0].Key)
}

func TestSpanProbes(t *testing.T) {
	e, x := Span{Function: "palloc"}.Probes()
	assert.Equal(t, "uprobe:palloc", e)
	assert.Equal(t, "uretprobe:palloc", x)
	e, x = Span{Entry: "usdt:a:b", Exit: "usdt:a:c"}.Probes()
	assert.Equal(t, "usdt:a:b", e)
	assert.Equal(t, "usdt:a:c", x)
}

func TestServiceNameOrDefault(t *testing.T) {
	assert.Equal(t, "postgres", Target{Path: bin}.ServiceNameOrDefault())
	assert.Equal(t, "db", Target{Path: bin, ServiceName: "db"}.ServiceNameOrDefault())
	assert.Equal(t, "libdemo.so", Target{Path: "/tmp/x/libdemo.so"}.ServiceNameOrDefault())
}

// TestValidateFunctionIsASymbol checks that function: takes a bare symbol.
// The span expands to uprobe:FUNCTION and uretprobe:FUNCTION, which Resolve
// parses again: with function "palloc+0x10" that is an offset into palloc
// (where arg6 is unknown) and a uretprobe with an offset, which ParseProbe
// rejects, yet Validate accepted the span.
func TestValidateFunctionIsASymbol(t *testing.T) {
	for _, fn := range []string{"palloc+0x10", "palloc+16"} {
		targets := []Target{{Path: bin, Spans: []Span{{Name: "s", Function: fn, Attributes: map[string]string{"a": "arg6"}}}}}
		entry, exit := targets[0].Spans[0].Probes()
		_, entryErr := ParseProbe(entry)
		_, exitErr := ParseProbe(exit)
		require.NoError(t, entryErr)
		require.Error(t, exitErr, "%s does not parse", exit)
		err := Validate(targets)
		if assert.Error(t, err, "Validate accepts function %q, whose exit %s does not parse", fn, exit) {
			assert.Contains(t, err.Error(), "targets[0].spans[0]: function:")
		}
	}
}

// thread_context is enabled, ids only, by default; attributes come only
// with it.
func TestThreadContextDefaults(t *testing.T) {
	off, on := false, true
	for _, tc := range []struct {
		name           string
		tc             *ThreadContext
		enabled, attrs bool
	}{
		{"default", nil, true, false},
		{"empty", &ThreadContext{}, true, false},
		{"attributes", &ThreadContext{Attributes: true}, true, true},
		{"enabled with attributes", &ThreadContext{Enabled: &on, Attributes: true}, true, true},
		{"disabled", &ThreadContext{Enabled: &off}, false, false},
	} {
		tg := Target{ThreadContext: tc.tc}
		assert.Equal(t, tc.enabled, tg.ThreadContextEnabled(), tc.name)
		assert.Equal(t, tc.attrs, tg.ThreadContextAttributes(), tc.name)
	}
}
