package planner

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
	"github.com/otel-uprobe/uprobereceiver/internal/usdt"
)

var (
	s16    = fetch.Type{Kind: fetch.KindSigned, Size: 2}
	s32    = fetch.Type{Kind: fetch.KindSigned, Size: 4}
	s64    = fetch.Type{Kind: fetch.KindSigned, Size: 8}
	u32    = fetch.Type{Kind: fetch.KindUnsigned, Size: 4}
	str256 = fetch.Type{Kind: fetch.KindString, MaxLen: fetch.DefaultStringLen}
)

// requireArgs skips the test when gcc placed the arguments of a demo probe
// differently from what the expectations below were written for.
func requireArgs(t *testing.T, probes map[string]usdt.Probe, name string, want ...string) usdt.Location {
	t.Helper()
	p, ok := probes[name]
	require.True(t, ok, name)
	require.Len(t, p.Locations, 1, name)
	l := p.Locations[0]
	require.NoError(t, l.ArgsErr)
	if l.ArgsText != strings.Join(want, " ") {
		testutil.SkipOrFail(t, "this gcc gives %s the arguments %q, not %q", name, l.ArgsText, strings.Join(want, " "))
	}
	return l
}

func TestCompileDemoO2(t *testing.T) {
	b := testutil.BuildDemo(t, "-O2")
	probes := notes(t, b.Program)
	start := requireArgs(t, probes, "demo:query__start", "8@%rsi", "-8@%rax", "-2@%dx", "-4@$5")
	done := requireArgs(t, probes, "demo:query__done", "8@%r12", "-8@%rbp", "-8@iterations(%rip)")

	pl, err := Resolve(demoTargets(b))
	require.NoError(t, err)

	entry := pl.Sites[0]
	require.Equal(t, 0, entry.EntrySpan)
	assert.Equal(t, []plan.Fetch{
		{
			Key: "five", Text: "arg3", Base: plan.BaseConstant, Register: regs.None, Disp: 5,
			Store: plan.StoreInt, ReadSize: 4, Value: plan.Value{Type: s32, FromArg: true, ArgSize: 4, ArgSigned: true},
		},
		{
			Key: "id", Text: "arg1", Base: plan.BaseRegister, Register: regs.RAX,
			Store: plan.StoreInt, ReadSize: 8, Value: plan.Value{Type: s64, FromArg: true, ArgSize: 8, ArgSigned: true},
		},
		{
			Key: "query", Text: "arg0:string", Base: plan.BaseRegister, Register: regs.RSI,
			Store: plan.StoreString, MaxLen: fetch.DefaultStringLen, Value: plan.Value{Type: str256, FromArg: true, ArgSize: 8},
		},
		{
			Key: "small", Text: "arg2", Base: plan.BaseRegister, Register: regs.RDX,
			Store: plan.StoreInt, ReadSize: 2, Value: plan.Value{Type: s16, FromArg: true, ArgSize: 2, ArgSigned: true},
		},
	}, entry.Entry, "fetches in key order")
	assert.Empty(t, entry.Exit)

	// arg2 of query__done is iterations(%rip): %rip at the site plus the
	// distance from the site to the symbol, then one read.
	iterations := lookup(t, b.Program, "iterations")
	exit := pl.Sites[1]
	require.Equal(t, 0, exit.ExitSpan)
	assert.Empty(t, exit.Entry)
	assert.Equal(t, []plan.Fetch{
		{
			Key: "done.id", Text: "arg1", Base: plan.BaseRegister, Register: regs.RBP,
			Store: plan.StoreInt, ReadSize: 8, Value: plan.Value{Type: s64, FromArg: true, ArgSize: 8, ArgSigned: true},
		},
		{
			Key: "iterations", Text: "arg2", Base: plan.BaseRegister, Register: regs.RIP,
			Derefs: []int64{int64(iterations.Value - done.Address)},
			Store:  plan.StoreInt, ReadSize: 8, Value: plan.Value{Type: s64, FromArg: true, ArgSize: 8, ArgSigned: true},
		},
	}, exit.Exit)
	assert.Equal(t, start.Address, pl.Attachments[0].Address)
	assert.Equal(t, done.Address, pl.Attachments[1].Address)

	// Function spans: SysV registers, retval in RAX.
	work := pl.Sites[2]
	assert.Equal(t, []plan.Fetch{
		{
			Key: "label", Text: "arg1:string", Base: plan.BaseRegister, Register: regs.RSI,
			Store: plan.StoreString, MaxLen: fetch.DefaultStringLen, Value: plan.Value{Type: str256},
		},
		{
			Key: "n", Text: "arg0", Base: plan.BaseRegister, Register: regs.RDI,
			Store: plan.StoreInt, ReadSize: 8, Value: plan.Value{Type: u64},
		},
	}, work.Entry)
	assert.Equal(t, []plan.Fetch{{
		Key: "ret", Text: "retval:s64", Base: plan.BaseRegister, Register: regs.RAX,
		Store: plan.StoreInt, ReadSize: 8, Value: plan.Value{Type: s64},
	}}, pl.Sites[3].Exit)
	assert.Equal(t, []plan.Fetch{{
		Key: "depth", Text: "arg0:s32", Base: plan.BaseRegister, Register: regs.RDI,
		Store: plan.StoreInt, ReadSize: 4, Value: plan.Value{Type: s32},
	}}, pl.Sites[4].Entry)
	assert.Equal(t, []plan.Fetch{{
		Key: "i", Text: "arg0:u32", Base: plan.BaseRegister, Register: regs.RDI,
		Store: plan.StoreInt, ReadSize: 4, Value: plan.Value{Type: u32},
	}}, pl.Sites[8].Entry)
}

func TestCompileDemoO0(t *testing.T) {
	b := testutil.BuildDemo(t, "-O0")
	probes := notes(t, b.Program)
	requireArgs(t, probes, "demo:query__start", "8@-32(%rbp)", "-8@-8(%rbp)", "-2@-10(%rbp)", "-4@$5")

	pl, err := Resolve(demoTargets(b))
	require.NoError(t, err)
	entry := pl.Sites[0]
	assert.Equal(t, plan.Fetch{
		Key: "id", Text: "arg1", Base: plan.BaseRegister, Register: regs.RBP, Derefs: []int64{-8},
		Store: plan.StoreInt, ReadSize: 8, Value: plan.Value{Type: s64, FromArg: true, ArgSize: 8, ArgSigned: true},
	}, fetchByKey(t, entry.Entry, "id"))
	assert.Equal(t, plan.Fetch{
		Key: "small", Text: "arg2", Base: plan.BaseRegister, Register: regs.RBP, Derefs: []int64{-10},
		Store: plan.StoreInt, ReadSize: 2, Value: plan.Value{Type: s16, FromArg: true, ArgSize: 2, ArgSigned: true},
	}, fetchByKey(t, entry.Entry, "small"))
	assert.Equal(t, plan.Fetch{
		Key: "query", Text: "arg0:string", Base: plan.BaseRegister, Register: regs.RBP, Derefs: []int64{-32},
		Store: plan.StoreString, MaxLen: fetch.DefaultStringLen, Value: plan.Value{Type: str256, FromArg: true, ArgSize: 8},
	}, fetchByKey(t, entry.Entry, "query"), "the pointer is loaded from the stack, then the string read at it")
}

// TestCompileMemoryArgs checks every memory argument of the -O0 demo's
// probes: BaseRegister with the note's base, one dereference of the note's
// displacement, reading the argument's size.
func TestCompileMemoryArgs(t *testing.T) {
	b := testutil.BuildDemo(t, "-O0")
	probes := notes(t, b.Program)
	checked := 0
	for name, p := range probes {
		for li, l := range p.Locations {
			require.NoError(t, l.ArgsErr)
			if len(l.Args) == 0 {
				continue
			}
			m := map[string]string{}
			typed := map[string]string{}
			for n := range l.Args {
				m[fmt.Sprintf("a%d", n)] = fmt.Sprintf("arg%d", n)
				typed[fmt.Sprintf("t%d", n)] = fmt.Sprintf("arg%d:s64", n)
			}
			for k, v := range typed {
				m[k] = v
			}
			prov, pname, _ := strings.Cut(name, ":")
			pl, err := Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{{
				Name: "s", Entry: "usdt:" + prov + ":" + pname, Exit: "uretprobe:main", Attributes: m,
			}}}})
			require.NoError(t, err, name)
			site := pl.Sites[li]
			for n, arg := range l.Args {
				for _, key := range []string{fmt.Sprintf("a%d", n), fmt.Sprintf("t%d", n)} {
					f := fetchByKey(t, site.Entry, key)
					assert.True(t, f.Value.FromArg, "%s %s", name, arg.Text)
					assert.Equal(t, arg.Size, f.Value.ArgSize, "%s %s", name, arg.Text)
					if arg.Operand.Kind != usdt.OperandMemory {
						continue
					}
					require.Equal(t, regs.RBP, arg.Operand.Base, "-O0 keeps locals at N(%%rbp): %s", arg.Text)
					assert.Equal(t, plan.BaseRegister, f.Base, "%s %s", name, arg.Text)
					assert.Equal(t, regs.RBP, f.Register, "%s %s", name, arg.Text)
					assert.Equal(t, []int64{arg.Operand.Disp}, f.Derefs, "%s %s", name, arg.Text)
					assert.Equal(t, arg.Size, f.ReadSize, "%s: ReadSize is the argument's size whatever the type", arg.Text)
					assert.Equal(t, plan.StoreInt, f.Store)
					checked++
				}
			}
		}
	}
	assert.GreaterOrEqual(t, checked, 2*4, "memory arguments checked")
}

// TestCompileUprobeArgs checks the SysV mapping of argN at a function's
// entry and that stack arguments are only known there.
func TestCompileUprobeArgs(t *testing.T) {
	b := testutil.BuildDemo(t, "-O2")
	m := map[string]string{}
	for n := range 8 {
		m[fmt.Sprintf("a%d", n)] = fmt.Sprintf("arg%d", n)
	}
	m["deref6"] = "+4(arg6):u32"
	m["rsp"] = "%sp"
	m["rip"] = "+0x10(%rip):x64"
	pl, err := Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{{
		Name: "work", Function: "work", Attributes: m,
	}}}})
	require.NoError(t, err)
	entry := pl.Sites[0].Entry
	for n, r := range []regs.Register{regs.RDI, regs.RSI, regs.RDX, regs.RCX, regs.R8, regs.R9} {
		f := fetchByKey(t, entry, fmt.Sprintf("a%d", n))
		assert.Equal(t, plan.BaseRegister, f.Base)
		assert.Equal(t, r, f.Register, "arg%d", n)
		assert.Empty(t, f.Derefs, "arg%d", n)
		assert.False(t, f.Value.FromArg)
	}
	assert.Equal(t, plan.Fetch{
		Key: "a6", Text: "arg6", Base: plan.BaseRegister, Register: regs.RSP, Derefs: []int64{8},
		Store: plan.StoreInt, ReadSize: 8, Value: plan.Value{Type: u64},
	}, fetchByKey(t, entry, "a6"))
	assert.Equal(t, []int64{16}, fetchByKey(t, entry, "a7").Derefs)
	d := fetchByKey(t, entry, "deref6")
	assert.Equal(t, regs.RSP, d.Register)
	assert.Equal(t, []int64{8, 4}, d.Derefs, "the stack slot first, then the expression's dereference")
	assert.Equal(t, uint8(4), d.ReadSize)
	assert.Equal(t, plan.Fetch{
		Key: "rsp", Text: "%sp", Base: plan.BaseRegister, Register: regs.RSP,
		Store: plan.StoreInt, ReadSize: 8, Value: plan.Value{Type: u64},
	}, fetchByKey(t, entry, "rsp"))
	assert.Equal(t, plan.Fetch{
		Key: "rip", Text: "+0x10(%rip):x64", Base: plan.BaseRegister, Register: regs.RIP, Derefs: []int64{16},
		Store: plan.StoreInt, ReadSize: 8, Value: plan.Value{Type: fetch.Type{Kind: fetch.KindHex, Size: 8}},
	}, fetchByKey(t, entry, "rip"))

	// Inside the function, register arguments still compile...
	pl, err = Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{{
		Name: "w", Entry: "uprobe:work+0x4", Exit: "uretprobe:work", Attributes: map[string]string{"a5": "arg5"},
	}}}})
	require.NoError(t, err)
	assert.Equal(t, regs.R9, pl.Sites[0].Entry[0].Register)
	w := lookup(t, b.Program, "work")
	assert.Equal(t, w.Value+4, pl.Attachments[0].Address)
	assert.Equal(t, w.FileOffset+4, pl.Attachments[0].FileOffset)

	// ...but a stack argument is an error.
	_, err = Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{{
		Name: "w", Entry: "uprobe:work+0x4", Exit: "uretprobe:work", Attributes: map[string]string{"a6": "arg6"},
	}}}})
	require.Error(t, err)
	assert.Equal(t, fmt.Sprintf(`target %s: span "w": uprobe:work+0x4: attribute "a6": "arg6": stack argument arg6 is only known at the function's first instruction`, b.Program), err.Error())
}

func TestCompileErrors(t *testing.T) {
	b := testutil.BuildDemo(t, "-O0")
	probes := notes(t, b.Program)
	start := requireArgs(t, probes, "demo:query__start", "8@-32(%rbp)", "-8@-8(%rbp)", "-2@-10(%rbp)", "-4@$5")
	bin := b.Program
	for _, c := range []struct {
		name string
		span config.Span
		want []string
	}{
		{
			"argN beyond the site's arguments",
			config.Span{Name: "q", Entry: "usdt:demo:query__start", Exit: "usdt:demo:query__done", Attributes: map[string]string{"x": "arg4"}},
			[]string{fmt.Sprintf(`target %s: span "q": usdt:demo:query__start: attribute "x": "arg4": site at %#x has 4 arguments ("8@-32(%%rbp) -8@-8(%%rbp) -2@-10(%%rbp) -4@$5"); arg4 does not exist`, bin, start.Address)},
		},
		{
			"argN beyond the arguments of both tick sites",
			config.Span{Name: "t", Entry: "usdt:demo:tick", Exit: "uretprobe:tick", Attributes: map[string]string{"x": "arg2"}},
			[]string{"has 2 arguments", "has 2 arguments"},
		},
		{
			"a memory argument plus the engine's dereferences is one too many",
			config.Span{Name: "q", Entry: "usdt:demo:query__start", Exit: "usdt:demo:query__done", Attributes: map[string]string{"x": "+0(+0(+0(+0(arg1))))"}},
			[]string{`attribute "x": "+0(+0(+0(+0(arg1))))": 5 dereferences here, at most 4`},
		},
		{
			"a stack argument plus four dereferences",
			config.Span{Name: "w", Function: "work", Attributes: map[string]string{"x": "+0(+0(+0(+0(arg6))))"}},
			[]string{`attribute "x": "+0(+0(+0(+0(arg6))))": 5 dereferences here, at most 4`},
		},
		{
			"retval at a uprobe",
			config.Span{Name: "w", Entry: "uprobe:work", Exit: "uprobe:recurse", ExitAttributes: map[string]string{"r": "retval"}},
			[]string{`span "w": uprobe:recurse: attribute "r": "retval": retval needs a uretprobe: or ret: exit`},
		},
		{
			"argN at a uretprobe",
			config.Span{Name: "w", Function: "work", ExitAttributes: map[string]string{"a": "arg0"}},
			[]string{`span "w": uretprobe:work: attribute "a": "arg0": arguments are gone when a function returns`},
		},
		{
			"string above the capture limit",
			config.Span{Name: "w", Function: "work", Attributes: map[string]string{"s": "arg1:string[300]"}},
			[]string{`attribute "s": "arg1:string[300]": string[300] is longer than the 256-byte capture limit`},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Resolve([]config.Target{{Path: bin, Spans: []config.Span{c.span}}})
			require.Error(t, err)
			lines := strings.Split(err.Error(), "\n")
			require.Len(t, lines, len(c.want), "%v", err)
			for i, w := range c.want {
				assert.Contains(t, lines[i], w)
				assert.True(t, strings.HasPrefix(lines[i], "target "+bin+": "), lines[i])
			}
		})
	}
}
