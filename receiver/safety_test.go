package receiver

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/insn"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
	"github.com/otel-uprobe/uprobereceiver/internal/tracer"
	"github.com/otel-uprobe/uprobereceiver/receiver/internal/metadata"
)

// A probe in the middle of an instruction, or past the function, is refused
// before anything is attached; the target runs on untouched.
func TestRefusedOffsetsLeaveTheTargetUntouched(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O0")
	demo := testutil.StartDemo(t, b.Program)
	for _, ref := range []string{"uprobe:work+0x2", "uprobe:work+0x10000"} {
		cfg := createDefaultConfig()
		cfg.Targets = []config.Target{{
			Path:     b.Program,
			Counters: config.CountersOf("usdt:demo:tick", ref), // tick is fine: it must not stay attached either
		}}
		require.NoError(t, cfg.Validate())
		r, err := NewFactory().CreateMetrics(context.Background(), receivertest.NewNopSettings(metadata.Type), cfg, consumertest.NewNop())
		require.NoError(t, err)
		err = r.Start(context.Background(), componenttest.NewNopHost())
		require.Error(t, err, ref)
		assert.Contains(t, err.Error(), ref)
		require.NoError(t, r.Shutdown(context.Background()))
		assert.Equal(t, [3]int{0, 0, 0}, demo.Semaphores(), "nothing attached")
	}
	demo.Run(3) // and the program still works
}

// functionCode returns the code of a function of an ELF file, its
// instructions decoded for the file's architecture, and that architecture.
func functionCode(t *testing.T, path, name string) ([]byte, []insn.Inst, regs.Arch) {
	t.Helper()
	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	arch, err := regs.ArchOf(f.Machine)
	require.NoError(t, err)
	syms, err := f.Symbols()
	require.NoError(t, err)
	for _, s := range syms {
		if s.Name != name || elf.ST_TYPE(s.Info) != elf.STT_FUNC {
			continue
		}
		sec := f.Sections[s.Section]
		data, err := sec.Data()
		require.NoError(t, err)
		code := data[s.Value-sec.Addr : s.Value-sec.Addr+s.Size]
		insts, err := insn.DecodeFor(arch, code)
		require.NoError(t, err)
		return code, insts, arch
	}
	t.Fatalf("no function %s in %s", name, path)
	return nil, nil, 0
}

// An instruction the kernel refuses to probe (arm64: the exclusive load
// ldaxr; x86-64: a lock prefix), and on arm64 one inside an exclusive
// load/store sequence (where a uprobe would make the store fail forever),
// is refused before anything is attached: Start fails naming it, and the
// program's code stays as the file has it and runs right.
func TestRefusedInstructionsLeaveTheTargetUntouched(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildC(t, "refuse")
	code, insts, arch := functionCode(t, bin, "bump")
	p := testutil.StartProgram(t, bin, "ready")
	addr, err := strconv.ParseUint(strings.TrimPrefix(p.Ask("addr", "addr "), "addr 0x"), 16, 64)
	require.NoError(t, err)
	running := func() []byte {
		mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", p.PID))
		require.NoError(t, err)
		defer mem.Close()
		b := make([]byte, len(code))
		_, err = mem.ReadAt(b, int64(addr))
		require.NoError(t, err)
		return b
	}
	require.Equal(t, code, running(), "the process runs the file's code")

	want := map[insn.SiteClass]string{
		insn.Unsupported: "is one the kernel refuses to probe; choose another offset",
		insn.Unsafe:      "is one the kernel would run wrongly under a uprobe; choose another offset",
	}
	tried := map[insn.SiteClass]bool{}
	for _, in := range insts {
		msg, ok := want[in.Class]
		if !ok || tried[in.Class] {
			continue
		}
		tried[in.Class] = true
		ref := fmt.Sprintf("uprobe:bump+%#x", in.Offset)
		if in.Offset == 0 {
			ref = "uprobe:bump"
		}
		cfg := createDefaultConfig()
		cfg.Targets = []config.Target{{Path: bin, Counters: config.CountersOf(ref)}}
		require.NoError(t, cfg.Validate())
		r, err := NewFactory().CreateMetrics(context.Background(), receivertest.NewNopSettings(metadata.Type), cfg, consumertest.NewNop())
		require.NoError(t, err)
		err = r.Start(context.Background(), componenttest.NewNopHost())
		require.Error(t, err, ref)
		assert.Contains(t, err.Error(), fmt.Sprintf("the instruction at bump+%#x (%s) %s", in.Offset, in.Text, msg))
		require.NoError(t, r.Shutdown(context.Background()))
		assert.Equal(t, code, running(), "%s: the code is untouched", ref)
	}
	assert.True(t, tried[insn.Unsupported], "bump holds an instruction the kernel refuses")
	if arch == regs.ArchARM64 {
		assert.True(t, tried[insn.Unsafe], "bump holds an instruction inside an exclusive sequence")
	}
	assert.Equal(t, "bumped 5", p.Ask("bump 5", "bumped "), "the program runs right")
}

// TestGoStackGrowth traces a Go function whose calls grow (and so move) the
// goroutine's stack and yield between threads: a million calls under entry
// and return probes (20,000 in the emulated arm64 VM), without a crash and
// with exact counts, pairing by goroutine; and one call with its int and
// string arguments and result.
func TestGoStackGrowth(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildGo(t, "goprog", false)
	prog := testutil.StartProgram(t, bin, "ready")
	s := startReceiver(t, []config.Target{{
		Path: bin,
		Spans: []config.Span{{
			Name: "probed", Function: "main.Probed",
			Attributes:     map[string]string{"n": "arg0", "s": "arg1:gostring"},
			ExitAttributes: map[string]string{"ret": "retval:s64"},
		}},
	}})
	require.Equal(t, "args 92", prog.Ask("args", "args "))
	// In the emulated arm64 VM every hit costs tens of microseconds: fewer
	// calls there, the stack still grows hundreds of times.
	calls, goroutines := testutil.Scaled(1_000_000, 20_000), testutil.Scaled(1000, 100)
	require.Equal(t, fmt.Sprintf("done %d", calls), prog.Ask(fmt.Sprintf("run %d %d", calls, goroutines), "done "))
	require.NoError(t, s.rcv.Shutdown(context.Background()))

	spans := allSpans(s.traces)
	require.Len(t, spans, calls+1, "every call is one span")
	found := false
	for _, sp := range spans {
		if v, _ := sp.Attributes().Get("s"); v.Str() == "hello go" {
			found = true
			assert.Equal(t, int64(42), attrInt(t, sp.Attributes(), "n"))
			assert.Equal(t, int64(92), attrInt(t, sp.Attributes(), "ret"))
		} else {
			assert.Equal(t, "x", v.Str())
		}
		assert.True(t, sp.ParentSpanID().IsEmpty(), "Probed does not nest in itself")
	}
	assert.True(t, found, "the args call has its arguments")
	last := s.metrics.AllMetrics()[len(s.metrics.AllMetrics())-1]
	assert.Equal(t, uint64(calls+1), durations(last)["probed"].Count())
	hits := sumPoints(last, "uprobe.probe.hits")
	assert.Equal(t, int64(calls+1), hits["uprobe:main.Probed"])
	assert.Equal(t, int64(calls+1), hits["uretprobe:main.Probed"])
}

// measureAdded returns the ns per call a probe adds to probed() (or
// probed_cet()), against its identical twin, in the bench workload.
func measureAdded(t *testing.T, w *testutil.Program, cmd string) float64 {
	t.Helper()
	var probed, twin float64
	_, err := fmt.Sscanf(w.Ask(cmd+" 100000 5", "ns "), "ns %f %f", &probed, &twin)
	require.NoError(t, err)
	return probed - twin
}

// A function compiled with CET starts with endbr64, which the kernel would
// single-step (~20x the cost): its probe costs what a push-site probe costs.
func TestCETCostsLikePush(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "workload")
	testutil.Gcc(t, dir, "-O2", "-o", bin, testutil.Testdata("bench", "workload.c"))
	w := testutil.StartProgram(t, bin, "ready")
	run := func(counter, cmd string) float64 {
		s := startReceiver(t, []config.Target{{Path: bin, Counters: config.CountersOf(counter)}})
		defer func() { require.NoError(t, s.rcv.Shutdown(context.Background())) }()
		return measureAdded(t, w, cmd)
	}
	var ratios []float64
	for range 3 {
		push := run("uprobe:probed", "measure")
		cet := run("uprobe:probed_cet", "measure_cet")
		ratios = append(ratios, cet/push)
		t.Logf("ns added per hit: push site %.0f, CET function %.0f", push, cet)
	}
	assert.Less(t, median(ratios), 1.5, "a CET function's probe costs about what a push-site probe costs: %v", ratios)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// On a kernel with the optimized uprobe path, a USDT site of the newer
// "nop; nop5" form is probed on its nop5, which the kernel turns into a
// call after the first hit.
func TestNop5UsesTheOptimizedPath(t *testing.T) {
	testutil.RequireRoot(t)
	if !tracer.HaveOptimizedUprobes() {
		testutil.SkipOrFail(t, "the kernel has no optimized uprobe path (arch_uprobe_optimize)")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "nop5")
	testutil.Gcc(t, dir, "-O2", "-no-pie", "-o", bin, testutil.Testdata("nop5", "nop5.c"))
	p := testutil.StartProgram(t, bin, "ready")
	addr, err := strconv.ParseUint(strings.TrimPrefix(p.Ask("site", "site "), "site 0x"), 16, 64)
	require.NoError(t, err)
	siteBytes := func() []byte {
		mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", p.PID))
		require.NoError(t, err)
		defer mem.Close()
		b := make([]byte, 6)
		_, err = mem.ReadAt(b, int64(addr))
		require.NoError(t, err)
		return b
	}
	require.Equal(t, []byte{0x90, 0x0f, 0x1f, 0x44, 0x00, 0x00}, siteBytes())
	s := startReceiver(t, []config.Target{{Path: bin, Counters: config.CountersOf("usdt:nop5:hit")}})
	p.Ask("hit 10", "hit 10")
	b := siteBytes()
	assert.Equal(t, byte(0x90), b[0], "the 1-byte nop is left alone")
	assert.Equal(t, byte(0xe8), b[1], "the nop5 became a call: % x", b)
	p.Ask("hit 5", "hit 5")
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	last := s.metrics.AllMetrics()[len(s.metrics.AllMetrics())-1]
	assert.Equal(t, int64(15), sumPoints(last, "uprobe.probe.hits")["usdt:nop5:hit"], "every hit counts, optimized or not")
	assert.Equal(t, []byte{0x90, 0x0f, 0x1f, 0x44, 0x00, 0x00}, siteBytes(), "detaching restores the nop5")
}

// redZoneProgram builds testdata/redzone (non-PIE: symbols are run-time
// addresses) and returns it with the addresses of leaf and safe.
func redZoneProgram(t *testing.T) (bin string, leaf, safe uint64) {
	t.Helper()
	dir := t.TempDir()
	bin = filepath.Join(dir, "redzone")
	testutil.Gcc(t, dir, "-O2", "-no-pie", "-o", bin, testutil.Testdata("redzone", "redzone.c"))
	f, err := elf.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	syms, err := f.Symbols()
	require.NoError(t, err)
	for _, s := range syms {
		switch s.Name {
		case "leaf":
			leaf = s.Value
		case "safe":
			safe = s.Value
		}
	}
	require.NotZero(t, leaf)
	require.NotZero(t, safe)
	return bin, leaf, safe
}

// processBytes reads n bytes of process pid's memory at addr.
func processBytes(t *testing.T, pid int, addr uint64, n int) []byte {
	t.Helper()
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	require.NoError(t, err)
	defer mem.Close()
	b := make([]byte, n)
	_, err = mem.ReadAt(b, int64(addr))
	require.NoError(t, err)
	return b
}

// No probe changes what a program computes (issue 17): a leaf function that
// keeps a value below %rsp across a "nop; nop5" USDT site returns the right
// value on each of 100,000 calls with the probe attached, and the probe
// counts each. Before, the probe went on the nop5, which the kernel's
// optimized path turned into a call whose return address overwrote the
// value: 99,999 of 100,000 calls returned the wrong value. A function that
// keeps nothing there still gets the optimized path (its nop5 becomes a
// call), and every slot of the red zone survives a probe at slots' site.
func TestNoProbeChangesWhatAProgramComputes(t *testing.T) {
	testutil.RequireRoot(t)
	if !tracer.HaveOptimizedUprobes() {
		testutil.SkipOrFail(t, "the kernel has no optimized uprobe path (arch_uprobe_optimize)")
	}
	const calls = 100000
	bin, leaf, safe := redZoneProgram(t)
	p := testutil.StartProgram(t, bin, "ready")
	require.Equal(t, []byte{0x90, 0x0f, 0x1f, 0x44, 0x00, 0x00}, processBytes(t, p.PID, leaf+5, 6))
	s := startReceiver(t, []config.Target{{Path: bin, Counters: config.CountersOf("usdt:redzone:leaf", "usdt:redzone:safe", "usdt:redzone:slots")}})
	classes := map[string]string{}
	for _, a := range s.rcv.plan.Attachments {
		classes[s.rcv.plan.Probes[a.Probe].Ref] = fmt.Sprintf("%s at %#x", a.Class, a.Address)
	}
	assert.Equal(t, map[string]string{
		"usdt:redzone:leaf":  fmt.Sprintf("emulated at %#x", leaf+5),
		"usdt:redzone:safe":  fmt.Sprintf("optimizable at %#x", safe+5),
		"usdt:redzone:slots": classes["usdt:redzone:slots"], // its address is the compiler's
	}, classes)
	assert.Contains(t, classes["usdt:redzone:slots"], "emulated")

	assert.Equal(t, fmt.Sprintf("leaf %d wrong=0", calls), p.Ask(fmt.Sprintf("leaf %d", calls), "leaf "))
	assert.Equal(t, fmt.Sprintf("safe %d wrong=0", calls), p.Ask(fmt.Sprintf("safe %d", calls), "safe "))
	assert.Equal(t, "slots 0", p.Ask("slots", "slots "), "no slot of the red zone changed")
	assert.Equal(t, byte(0xe8), processBytes(t, p.PID, safe+5, 1)[0], "safe's nop5 became a call: the optimized path")
	assert.Equal(t, []byte{0xcc, 0x0f, 0x1f, 0x44, 0x00, 0x00}, processBytes(t, p.PID, leaf+5, 6), "leaf's probe is an int3 on its 1-byte nop; the nop5 is untouched")

	require.NoError(t, s.rcv.Shutdown(context.Background()))
	hits := sumPoints(s.metrics.AllMetrics()[len(s.metrics.AllMetrics())-1], "uprobe.probe.hits")
	assert.Equal(t, int64(calls), hits["usdt:redzone:leaf"])
	assert.Equal(t, int64(calls), hits["usdt:redzone:safe"])
	assert.Equal(t, int64(3), hits["usdt:redzone:slots"])
}

// A uprobe: that names a 5-byte nop where its function keeps data below
// %rsp is refused with one sentence naming the safe places; nothing is
// attached and the program computes right. The same nop5 in a function
// that keeps nothing there is probed, optimized.
func TestUprobeOnARedZoneNop5IsRefused(t *testing.T) {
	testutil.RequireRoot(t)
	if !tracer.HaveOptimizedUprobes() {
		testutil.SkipOrFail(t, "the kernel has no optimized uprobe path (arch_uprobe_optimize)")
	}
	const calls = 100000
	bin, _, safe := redZoneProgram(t)
	p := testutil.StartProgram(t, bin, "ready")

	cfg := createDefaultConfig()
	cfg.Targets = []config.Target{{Path: bin, Counters: config.CountersOf("uprobe:leaf+0x6")}}
	require.NoError(t, cfg.Validate())
	r, err := NewFactory().CreateMetrics(context.Background(), receivertest.NewNopSettings(metadata.Type), cfg, consumertest.NewNop())
	require.NoError(t, err)
	err = r.Start(context.Background(), componenttest.NewNopHost())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "uprobe:leaf+0x6: leaf+0x6 is a 5-byte nop, which this kernel rewrites after the first hit into a call that writes below %rsp, "+
		"where leaf may keep live data (mov %rdi,-0x8(%rsp) at +0x0 accesses memory 0x8 bytes below %rsp), so a probe there would change what it computes; "+
		"probe uprobe:leaf (its entry) or uprobe:leaf+0xb (the next instruction, mov -0x8(%rsp),%rax) instead")
	require.NoError(t, r.Shutdown(context.Background()))
	assert.Equal(t, fmt.Sprintf("leaf %d wrong=0", calls), p.Ask(fmt.Sprintf("leaf %d", calls), "leaf "))

	s := startReceiver(t, []config.Target{{Path: bin, Counters: config.CountersOf("uprobe:safe+0x5", "uprobe:leaf")}})
	for _, a := range s.rcv.plan.Attachments {
		if a.Address == safe+5 {
			assert.Equal(t, insn.Optimizable, a.Class)
		}
	}
	assert.Equal(t, fmt.Sprintf("leaf %d wrong=0", calls), p.Ask(fmt.Sprintf("leaf %d", calls), "leaf "))
	assert.Equal(t, fmt.Sprintf("safe %d wrong=0", calls), p.Ask(fmt.Sprintf("safe %d", calls), "safe "))
	assert.Equal(t, byte(0xe8), processBytes(t, p.PID, safe+5, 1)[0], "safe+0x5 became a call")
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	hits := sumPoints(s.metrics.AllMetrics()[len(s.metrics.AllMetrics())-1], "uprobe.probe.hits")
	assert.Equal(t, int64(calls), hits["uprobe:safe+0x5"])
	assert.Equal(t, int64(calls), hits["uprobe:leaf"], "the entry is safe")
}
