package planner

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/insn"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
	"github.com/otel-uprobe/uprobereceiver/internal/usdt"
)

// These tests read arm64 files (cross-built on any host): the plan's
// registers are arm64 registers, from the AAPCS64 and Go's arm64 ABI, USDT
// arguments from the notes' arm64 operands, and sites follow the arm64
// kernel's rules. harness/armvm runs the same files in an arm64 kernel.

// wantArg checks that fetch f reads USDT argument spec arg of an arm64 note
// the way the note says: a register, memory at a register plus an offset,
// or a constant.
func wantArg(t *testing.T, arg usdt.Arg, f plan.Fetch) {
	t.Helper()
	op := arg.Operand
	switch op.Kind {
	case usdt.OperandRegister:
		assert.Equal(t, plan.BaseRegister, f.Base, arg.Text)
		assert.Equal(t, op.Register.Reg, f.Register, arg.Text)
		assert.Equal(t, regs.ArchARM64, f.Register.Arch(), arg.Text)
		assert.Empty(t, f.Derefs, arg.Text)
	case usdt.OperandMemory:
		assert.Equal(t, plan.BaseRegister, f.Base, arg.Text)
		assert.Equal(t, op.Base, f.Register, arg.Text)
		if !op.SymbolLow12 {
			assert.Equal(t, []int64{op.Disp}, f.Derefs, arg.Text)
		}
		if f.Store == plan.StoreInt {
			assert.Equal(t, arg.Size, f.ReadSize, arg.Text)
		}
	case usdt.OperandConstant:
		assert.Equal(t, plan.BaseConstant, f.Base, arg.Text)
		assert.Equal(t, op.Value, f.Disp, arg.Text)
	}
	assert.True(t, f.Value.FromArg, arg.Text)
	assert.Equal(t, arg.Signed, f.Value.ArgSigned, arg.Text)
}

// TestARM64DemoPlan resolves the demo built for arm64 at -O2 and -O0:
// every USDT argument form gcc writes there (x0, w1 as -4@x0, [sp, 16],
// constants, and a global through [x0, #:lo12:iterations]), AAPCS64
// arguments and return values of uprobes, and sites on the nops of USDT
// probes and at the first instruction of C functions.
func TestARM64DemoPlan(t *testing.T) {
	for _, opt := range []string{"-O2", "-O0"} {
		t.Run(opt, func(t *testing.T) {
			b := testutil.BuildDemoARM64(t, opt, "-fno-section-anchors")
			pl, err := Resolve(demoTargets(b))
			require.NoError(t, err)
			require.Len(t, pl.Files, 2)
			for _, f := range pl.Files {
				assert.Equal(t, regs.ArchARM64, f.Arch, f.Path)
			}
			probes := notes(t, b.Program)
			ids := probeIDs(pl.Plan)
			sites := map[int]plan.Site{}
			for _, s := range pl.Sites {
				sites[s.Probe] = s
			}

			start := probes["demo:query__start"].Locations[0]
			done := probes["demo:query__done"].Locations[0]
			q := sites[ids["usdt:demo:query__start"]]
			for i, key := range []string{"query", "id", "small", "five"} {
				wantArg(t, start.Args[i], fetchByKey(t, q.Entry, key))
			}
			qd := sites[ids["usdt:demo:query__done"]]
			wantArg(t, done.Args[1], fetchByKey(t, qd.Exit, "done.id"))
			it := fetchByKey(t, qd.Exit, "iterations")
			wantArg(t, done.Args[2], it)
			if op := done.Args[2].Operand; op.SymbolLow12 {
				// [x0, #:lo12:iterations]: x0 holds the page, the
				// offset is the low 12 bits of the variable's address.
				assert.Equal(t, "iterations", op.Symbol)
				assert.Equal(t, []int64{int64(lookup(t, b.Program, "iterations").Value & 0xfff)}, it.Derefs)
			}
			if opt == "-O0" {
				assert.Equal(t, regs.SP, fetchByKey(t, q.Entry, "id").Register, "-O0 keeps locals on the stack: %s", start.ArgsText)
			}

			// work(long n, const char *label): x0, x1; its result in x0.
			w := sites[ids["uprobe:work"]]
			assert.Equal(t, regs.X0, fetchByKey(t, w.Entry, "n").Register)
			assert.Equal(t, regs.X1, fetchByKey(t, w.Entry, "label").Register)
			assert.Equal(t, regs.X0, fetchByKey(t, sites[ids["uretprobe:work"]].Exit, "ret").Register)

			// USDT sites are on their nop (simulated by Linux 6.13 and
			// later); uprobes on C functions at the first instruction.
			for _, a := range attachmentsOf(pl.Plan, ids["usdt:demo:query__start"]) {
				assert.Equal(t, start.Address, a.Address)
				assert.Equal(t, insn.Emulated, a.Class)
			}
			work := lookup(t, b.Program, "work")
			for _, a := range attachmentsOf(pl.Plan, ids["uprobe:work"]) {
				assert.Equal(t, work.Value, a.Address)
				assert.Equal(t, work.FileOffset, a.FileOffset)
				assert.Zero(t, a.Address%4)
			}
			assert.Len(t, attachmentsOf(pl.Plan, ids["usdt:demo:tick"]), 2, "two call sites")
		})
	}
}

// Kernels before Linux 6.13 single-step a uprobe on an arm64 nop.
func TestARM64NopStepped(t *testing.T) {
	b := testutil.BuildDemoARM64(t, "-O2", "-fno-section-anchors")
	pl, err := Resolve([]config.Target{counting(b.Program, "usdt:demo:tick")}, Options{ARM64StepsNop: true})
	require.NoError(t, err)
	require.Len(t, pl.Attachments, 2)
	for _, a := range pl.Attachments {
		assert.Equal(t, insn.SingleStepped, a.Class)
	}
}

// gcc's section anchors (the default at -O2) make an argument name an
// assembler-local label instead of the variable: refused with a sentence
// that says what to do.
func TestARM64SectionAnchorRefused(t *testing.T) {
	b := testutil.BuildDemoARM64(t, "-O2")
	done := notes(t, b.Program)["demo:query__done"].Locations[0]
	if !strings.Contains(done.ArgsText, ".LANCHOR") {
		testutil.SkipOrFail(t, "this gcc wrote %q without a section anchor", done.ArgsText)
	}
	_, err := Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{{
		Name: "q", Entry: "usdt:demo:query__start", Exit: "usdt:demo:query__done",
		ExitAttributes: map[string]string{"iterations": "arg2"},
	}}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `symbol ".LANCHOR0" is not in the symbol table: it is an assembler-local label (a gcc section anchor)`)
	assert.Contains(t, err.Error(), "-fno-section-anchors")
}

// AAPCS64 passes integer arguments 0 to 7 in x0 to x7, later ones on the
// stack from [sp] at the first instruction; fetch expressions name arm64
// registers, and registers of the other architecture are refused.
func TestARM64UprobeArgs(t *testing.T) {
	b := testutil.BuildDemoARM64(t, "-O2", "-fno-section-anchors")
	attrs := map[string]string{"a8": "arg8", "a9": "+4(arg9):u32", "x5": "%x5", "sp": "%sp", "lr": "%lr", "pc": "+8(%pc):x64"}
	for n := range 8 {
		attrs[fmt.Sprintf("a%d", n)] = fmt.Sprintf("arg%d", n)
	}
	pl, err := Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{{Name: "work", Function: "work", Attributes: attrs}}}})
	require.NoError(t, err)
	entry := pl.Sites[0].Entry
	for n, r := range regs.AAPCS64IntArgs {
		f := fetchByKey(t, entry, fmt.Sprintf("a%d", n))
		assert.Equal(t, r, f.Register, "arg%d", n)
		assert.Empty(t, f.Derefs)
	}
	a8 := fetchByKey(t, entry, "a8")
	assert.Equal(t, regs.SP, a8.Register)
	assert.Equal(t, []int64{0}, a8.Derefs, "arg8 is at [sp]: no return address on the stack")
	a9 := fetchByKey(t, entry, "a9")
	assert.Equal(t, []int64{8, 4}, a9.Derefs)
	assert.Equal(t, regs.X5, fetchByKey(t, entry, "x5").Register)
	assert.Equal(t, regs.SP, fetchByKey(t, entry, "sp").Register, "%sp is the arm64 stack pointer here")
	assert.Equal(t, regs.X30, fetchByKey(t, entry, "lr").Register)
	assert.Equal(t, regs.PC, fetchByKey(t, entry, "pc").Register)

	for _, c := range []struct{ expr, want string }{
		{"%di", `"%di": %rdi is an x86-64 register, and the file is arm64 (registers: %x0…%x30, %fp, %lr, %sp, %pc)`},
		{"%rip", `"%rip": %rip is an x86-64 register, and the file is arm64`},
	} {
		_, err := Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{{Name: "work", Function: "work",
			Attributes: map[string]string{"r": c.expr}}}}})
		require.Error(t, err, c.expr)
		assert.Contains(t, err.Error(), c.want)
	}
	x86 := testutil.BuildDemo(t, "-O2")
	_, err = Resolve([]config.Target{{Path: x86.Program, Spans: []config.Span{{Name: "work", Function: "work",
		Attributes: map[string]string{"r": "%x0"}}}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"%x0": %x0 is an arm64 register, and the file is x86-64`)
}

// On arm64 a uprobe offset must be a multiple of 4 inside the function, and
// instructions the kernel refuses (the exclusive load ldaxr) or would run
// wrongly (the add between ldaxr and stlxr: the store would fail forever)
// are refused with the instruction named.
func TestARM64RefusedSites(t *testing.T) {
	b := testutil.BuildDemoARM64(t, "-O2", "-fno-section-anchors")
	work := lookup(t, b.Program, "work")
	for _, c := range []struct{ ref, want string }{
		{"uprobe:work+0x2", "uprobe:work+0x2: work: offset 0x2 is not a multiple of 4 (arm64 instructions are 4 bytes and aligned): it is inside the instruction at 0x0 ("},
		{"uprobe:work+0x6", "offset 0x6 is not a multiple of 4 (arm64 instructions are 4 bytes and aligned): it is inside the instruction at 0x4 ("},
		{fmt.Sprintf("uprobe:work+%#x", work.Size), fmt.Sprintf("offset %#x is beyond the end of work (%d bytes)", work.Size, work.Size)},
	} {
		lines := resolveErr(t, counting(b.Program, c.ref))
		require.Len(t, lines, 1, c.ref)
		assert.Contains(t, lines[0], c.want, c.ref)
	}

	bin := testutil.BuildCARM64(t, "refuse")
	for _, c := range []struct{ ref, want string }{
		{"uprobe:bump", "the instruction at bump+0x0 (ldaxr x1, [x0]) is one the kernel refuses to probe; choose another offset"},
		{"uprobe:bump+0x4", "the instruction at bump+0x4 (add x2, x1, #0x1) is one the kernel would run wrongly under a uprobe; choose another offset"},
		{"uprobe:bump+0x8", "the instruction at bump+0x8 (stlxr w3, x2, [x0]) is one the kernel refuses to probe"},
	} {
		lines := resolveErr(t, counting(bin, c.ref))
		require.Len(t, lines, 1, c.ref)
		assert.Contains(t, lines[0], c.want, c.ref)
	}
	// After the sequence, the same function is fine; its return probe is
	// not, since a uretprobe starts at the first instruction.
	pl, err := Resolve([]config.Target{counting(bin, "uprobe:bump+0xc")})
	require.NoError(t, err)
	assert.Equal(t, insn.Emulated, pl.Attachments[0].Class, "cbnz is simulated")
}

// A recursive arm64 function (bl to its own first instruction) closes its
// spans at its RET instructions under returns: auto, as on x86-64.
func TestARM64RecursionUsesRet(t *testing.T) {
	b := testutil.BuildDemoARM64(t, "-O2", "-fno-section-anchors")
	pl, err := Resolve([]config.Target{{Path: b.Program, Spans: []config.Span{
		{Name: "recurse", Function: "recurse"},
		{Name: "work", Function: "work"},
	}}})
	require.NoError(t, err)
	ids := probeIDs(pl.Plan)
	require.Contains(t, ids, "ret:recurse")
	require.Contains(t, ids, "uretprobe:work", "work does not recurse")
	rets := attachmentsOf(pl.Plan, ids["ret:recurse"])
	require.NotEmpty(t, rets)
	recurse := lookup(t, b.Program, "recurse")
	for _, a := range rets {
		assert.False(t, a.Return)
		assert.Equal(t, insn.Emulated, a.Class, "ret is simulated")
		assert.Less(t, a.Address, recurse.Value+recurse.Size)
	}
}

// Go on arm64: arguments and results in R0 to R15 (x0…x15), a string in two
// of them, entry probes after the stack check, returns at every RET, spans
// paired by the goroutine in R28.
func TestARM64GoPlan(t *testing.T) {
	bin := testutil.BuildGoARM64(t, "goprog")
	pl, err := Resolve([]config.Target{{Path: bin, Spans: []config.Span{{
		Name: "probed", Function: "main.Probed",
		Attributes:     map[string]string{"n": "arg0", "s": "arg1:gostring"},
		ExitAttributes: map[string]string{"ret": "retval:s64"},
	}}}})
	require.NoError(t, err)
	require.Len(t, pl.Files, 1)
	assert.True(t, pl.Files[0].Go)
	assert.Equal(t, regs.ArchARM64, pl.Files[0].Arch)
	ids := probeIDs(pl.Plan)
	entry := attachmentsOf(pl.Plan, ids["uprobe:main.Probed"])
	require.Len(t, entry, 1)
	probed := lookup(t, bin, "main.Probed")
	assert.Greater(t, entry[0].Address, probed.Value, "after the stack check")
	assert.Zero(t, entry[0].Address%4)
	rets := attachmentsOf(pl.Plan, ids["uretprobe:main.Probed"])
	require.NotEmpty(t, rets, "every RET")
	for _, a := range rets {
		assert.False(t, a.Return, "never a kernel return probe in Go")
		assert.Equal(t, insn.Emulated, a.Class)
	}
	var entrySite, exitSite plan.Site
	for _, s := range pl.Sites {
		if s.EntrySpan >= 0 {
			entrySite = s
		} else {
			exitSite = s
		}
	}
	n, s := fetchByKey(t, entrySite.Entry, "n"), fetchByKey(t, entrySite.Entry, "s")
	assert.Equal(t, regs.X0, n.Register)
	assert.Equal(t, regs.X1, s.Register)
	assert.Equal(t, regs.X2, s.LenRegister)
	assert.Equal(t, plan.StoreGoString, s.Store)
	assert.Equal(t, regs.X0, fetchByKey(t, exitSite.Exit, "ret").Register)

	_, err = Resolve([]config.Target{{Path: bin, Spans: []config.Span{{Name: "p", Function: "main.Probed",
		Attributes: map[string]string{"a16": "arg16"}}}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"arg16": Go passes 16 integer arguments in registers on arm64; arg16 is on the stack`)
}
