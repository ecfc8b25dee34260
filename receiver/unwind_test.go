package receiver

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
)

// The symbols of testdata/unwind.
const (
	unwindMiddle  = "_ZN3app6middleEl"
	unwindAttempt = "_ZN3app7attemptElPl"
	unwindLeaf    = "_ZN3app4leafEl"
)

// exitProbe returns the plan's exit probe of the span named name.
func exitProbe(t *testing.T, pl *plan.Plan, name string) plan.Probe {
	t.Helper()
	for _, sp := range pl.Spans {
		if sp.Name == name {
			return pl.Probes[sp.Exit]
		}
	}
	t.Fatalf("no span %q", name)
	return plan.Probe{}
}

// An exception that unwinds through a function whose return a kernel
// return probe replaced makes the program abort (the unwinder finds no
// call-frame information for the trampoline). With returns: auto, a
// function of a C++ file that calls other code is closed at its RET
// instructions instead, and says why: 10,000 exceptions thrown through
// middle into attempt's handler are all caught and the program's results
// are right; each such call of middle never returns (its span is
// abandoned, counted, when attempt's span closes), 10,000 calls that do
// not throw are 10,000 middle spans inside 20,000 attempt spans. leaf,
// which calls nothing, keeps its kernel return probe.
func TestExceptionsUnwindThroughProbedFunctions(t *testing.T) {
	testutil.RequireRoot(t)
	const n = 10_000
	bin := testutil.BuildCXX(t, "unwind")
	p := testutil.StartProgram(t, bin, "ready")
	cfg := createDefaultConfig()
	cfg.Targets = []config.Target{{Path: bin, Spans: []config.Span{
		{Name: "middle", Function: unwindMiddle, Attributes: map[string]string{"x": "arg0:s64"}},
		{Name: "attempt", Function: unwindAttempt},
		{Name: "leaf", Function: unwindLeaf},
	}}}
	s, logs := createdWith(t, cfg)
	require.NoError(t, s.rcv.Start(context.Background(), componenttest.NewNopHost()))

	plan := s.rcv.plan
	middle := exitProbe(t, plan, "middle")
	assert.Equal(t, "ret:"+unwindMiddle, middle.Ref)
	assert.Contains(t, middle.Why, "returns: auto probes the RET instructions: an exception may unwind through "+unwindMiddle+", which a kernel return probe would make abort the program: "+unwindMiddle+" runs other code (")
	assert.Contains(t, middle.Why, "call")
	assert.Contains(t, middle.Why, "_ZN3app7throwerEl) and its file unwinds exceptions (it imports __cxa_")
	assert.Equal(t, "ret:"+unwindAttempt, exitProbe(t, plan, "attempt").Ref)
	leaf := exitProbe(t, plan, "leaf")
	assert.Equal(t, "uretprobe:"+unwindLeaf, leaf.Ref)
	assert.Empty(t, leaf.Why)
	for _, a := range plan.Attachments {
		switch plan.Probes[a.Probe].Ref {
		case middle.Ref:
			assert.False(t, a.Return, "a RET instruction")
			assert.Equal(t, "single-stepped", a.Class.String())
		case leaf.Ref:
			assert.True(t, a.Return, "a kernel return probe")
		}
	}
	logged := map[string]string{}
	for _, e := range logs.FilterMessage("Probe sites").All() {
		logged[e.ContextMap()["probe"].(string)], _ = e.ContextMap()["why"].(string)
	}
	assert.Equal(t, middle.Why, logged[middle.Ref], "the log says why")
	assert.Contains(t, logged, leaf.Ref)
	assert.Empty(t, logged[leaf.Ref])

	assert.Equal(t, fmt.Sprintf("caught %d sum 0", n), p.Ask(fmt.Sprintf("run %d", n), "caught "), "every exception is caught")
	assert.Equal(t, fmt.Sprintf("calm %d caught 0", n*n), p.Ask(fmt.Sprintf("calm %d", n), "calm "))
	assert.Equal(t, "leaf 1499500", p.Ask("leaf 1000", "leaf "))
	stMiddle, stAttempt, stLeaf := spanStats(t, s, "middle"), spanStats(t, s, "attempt"), spanStats(t, s, "leaf")
	require.NoError(t, s.rcv.Shutdown(context.Background()))

	count := map[string]int{}
	attempts := map[pcommon.SpanID]bool{}
	spans := allSpans(s.traces)
	for _, sp := range spans {
		count[sp.Name()]++
		if sp.Name() == "attempt" {
			attempts[sp.SpanID()] = true
		}
	}
	assert.Equal(t, map[string]int{"middle": n, "attempt": 2 * n, "leaf": 1000}, count)
	for _, sp := range spans {
		if sp.Name() == "middle" {
			assert.True(t, attempts[sp.ParentSpanID()], "a middle span nests in its attempt")
		}
	}
	assert.Equal(t, uint64(n), stMiddle.Abandoned, "the calls an exception unwound are abandoned, counted")
	assert.Zero(t, stAttempt.Abandoned+stLeaf.Abandoned)
}

// An explicit kernel return probe on a function an exception may unwind
// through is refused with one sentence, before anything is attached; with
// accept_kernel_hazards: [uretprobe_unwind] it is attached, and the first
// exception through it aborts the program, as the sentence says.
func TestUretprobeUnwindHazard(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildCXX(t, "unwind")
	p := testutil.StartProgram(t, bin, "ready")
	span := config.Span{Name: "middle", Function: unwindMiddle, Returns: config.ReturnsUretprobe}
	cfg := createDefaultConfig()
	cfg.Targets = []config.Target{{Path: bin, Spans: []config.Span{span}}}
	s, _ := createdWith(t, cfg)
	err := s.rcv.Start(context.Background(), componenttest.NewNopHost())
	require.Error(t, err)
	msg := err.Error()
	assert.Contains(t, msg, "uretprobe:"+unwindMiddle+": a kernel return probe on "+unwindMiddle+" would abort the program when an exception unwinds through it, "+
		"since the unwinder cannot step through the kernel's return trampoline and calls std::terminate ("+unwindMiddle+" runs other code (+0x")
	assert.Contains(t, msg, "and its file unwinds exceptions (it imports __cxa_")
	assert.Contains(t, msg, "); probe its returns with ret:"+unwindMiddle+" instead (returns: ret or auto; the kernel single-steps RET: about 9 µs per return instead of 0.4 µs), ")
	assert.Contains(t, msg, "), or accept the hazard with accept_kernel_hazards: [uretprobe_unwind]")
	assert.Equal(t, 1, strings.Count(msg, ". ")+1, "one sentence: %s", msg)
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	assert.Equal(t, "caught 10 sum 0", p.Ask("run 10", "caught "), "nothing was attached")

	// Accepted: attached as a kernel return probe. A program that throws
	// through it aborts (its own process, not the test's helper).
	cmd := exec.Command(bin)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	require.True(t, lines.Scan())
	require.True(t, strings.HasPrefix(lines.Text(), "ready "), lines.Text())

	cfg.AcceptKernelHazards = []string{hazardUretprobeUnwind}
	s = startReceiverConfig(t, cfg)
	require.Equal(t, "uretprobe:"+unwindMiddle, exitProbe(t, s.rcv.plan, "middle").Ref)
	for _, a := range s.rcv.plan.Attachments {
		if s.rcv.plan.Probes[a.Probe].Ref == "uretprobe:"+unwindMiddle {
			assert.True(t, a.Return)
		}
	}
	assert.Equal(t, "calm 10000 caught 0", p.Ask("calm 100", "calm "), "without exceptions it runs right")
	fmt.Fprintln(stdin, "run 1")
	for lines.Scan() {
		t.Logf("the aborting program printed %q", lines.Text())
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the program aborts at the first exception through the kernel return probe")
	ws := exit.Sys().(syscall.WaitStatus)
	assert.True(t, ws.Signaled() && ws.Signal() == syscall.SIGABRT, "%v", err)
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	assert.Len(t, allSpans(s.traces), 100, "the calm calls' spans")
}

// What a return costs, on a small C++ function (leaf, whose entry is an
// emulated push): a kernel return probe (its cost less that of its entry
// uprobe) against a probe on its RET instruction, which the kernel
// single-steps. The README states these numbers.
func TestReturnProbeCosts(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildCXX(t, "unwind")
	p := testutil.StartProgram(t, bin, "ready")
	added := func(counter string) float64 {
		s := startReceiver(t, []config.Target{{Path: bin, Counters: config.CountersOf(counter)}})
		defer func() { require.NoError(t, s.rcv.Shutdown(context.Background())) }()
		var probed, twin float64
		_, err := fmt.Sscanf(p.Ask("time 2000 40", "ns "), "ns %f %f", &probed, &twin)
		require.NoError(t, err)
		return probed - twin
	}
	var entry, kernel, ret []float64
	for range 3 {
		e := added("uprobe:" + unwindLeaf)
		entry = append(entry, e)
		kernel = append(kernel, added("uretprobe:"+unwindLeaf)-e)
		ret = append(ret, added("ret:"+unwindLeaf))
	}
	t.Logf("ns added per call of leaf: entry uprobe %.0f; per return: kernel return probe %.0f, RET probe %.0f (runs: %.0f, %.0f, %.0f)",
		median(entry), median(kernel), median(ret), entry, kernel, ret)
	assert.Greater(t, median(ret), median(kernel), "a single-stepped RET costs more than a kernel return probe")
}

// A C++ program whose qsort comparator throws, 1,000 times, each caught:
// glibc's qsort jumps to qsort_r (it has no RET of its own), which reaches
// the comparator through a pointer, so returns: auto closes qsort_r at its
// RET instructions and every exception is caught; malloc, which reaches no
// code an exception could come from, keeps its kernel return probe (it
// closed at its RETs before, as every libc function that calls another),
// and its calls in the loop (one per throw: the exception object) are
// 1,000 spans. The spans of qsort_r that exceptions unwound are abandoned,
// counted, when the next call opens at the same place; the 1,000 calls that
// do not throw are 1,000 spans.
func TestExceptionsThroughLibcCallback(t *testing.T) {
	testutil.RequireRoot(t)
	const n = 1000
	bin := testutil.BuildCXX(t, "unwind")
	p := testutil.StartProgram(t, bin, "ready")
	cfg := createDefaultConfig()
	cfg.Targets = []config.Target{{Path: "libc", PID: p.PID, Spans: []config.Span{
		{Name: "qsort_r", Function: "qsort_r"},
		{Name: "malloc", Function: "malloc"},
	}}}
	s, _ := createdWith(t, cfg)
	require.NoError(t, s.rcv.Start(context.Background(), componenttest.NewNopHost()))

	plan := s.rcv.plan
	qsort, malloc := exitProbe(t, plan, "qsort_r"), exitProbe(t, plan, "malloc")
	assert.Equal(t, "ret:qsort_r", qsort.Ref)
	assert.Contains(t, qsort.Why, "an exception may unwind through qsort_r, which a kernel return probe would make abort the program: qsort_r reaches a call through a pointer (")
	assert.Equal(t, "uretprobe:malloc", malloc.Ref)
	assert.Empty(t, malloc.Why)
	for _, a := range plan.Attachments {
		switch plan.Probes[a.Probe].Ref {
		case qsort.Ref:
			assert.False(t, a.Return, "a RET instruction")
		case malloc.Ref:
			assert.True(t, a.Return, "a kernel return probe")
		}
	}

	assert.Equal(t, fmt.Sprintf("qsort caught %d", n), p.Ask(fmt.Sprintf("qsort %d", n), "qsort "), "every exception is caught")
	assert.Equal(t, fmt.Sprintf("qcalm %d", n), p.Ask(fmt.Sprintf("qcalm %d", n), "qcalm "))
	stQsort := spanStats(t, s, "qsort_r")
	require.NoError(t, s.rcv.Shutdown(context.Background()))

	count := map[string]int{}
	for _, sp := range allSpans(s.traces) {
		count[sp.Name()]++
	}
	assert.Equal(t, map[string]int{"qsort_r": n, "malloc": n}, count)
	assert.Equal(t, uint64(n), stQsort.Abandoned, "the calls an exception unwound are abandoned, counted")
}
