package receiver

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"golang.org/x/sync/errgroup"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/spans"
)

// buildHardening builds testdata/hardening (prebuilt in the arm64 VM).
func buildHardening(t *testing.T) string {
	t.Helper()
	return testutil.BuildC(t, "hardening", "-pthread")
}

// spanStats returns the kernel's counters of one span definition, read now.
func spanStats(t *testing.T, s started, name string) event.SpanCounts {
	t.Helper()
	st, err := s.rcv.tracer.Stats()
	require.NoError(t, err)
	for i, sp := range s.rcv.plan.Spans {
		if sp.Name == name {
			return st.Spans[i]
		}
	}
	t.Fatalf("no span definition %q", name)
	return event.SpanCounts{}
}

// checkRecursion checks spans of rounds recursions of depth+1 nested calls,
// whose attribute "depth" is the callee's argument: depth at the outermost
// call, 0 at the innermost. Every span but the outermost is a child of the
// call one level up, and each recursion is one trace.
func checkRecursion(t *testing.T, spans []flatSpan, rounds, depth int) {
	t.Helper()
	require.Len(t, spans, rounds*(depth+1), "every call of every recursion is a span")
	byID := map[pcommon.SpanID]flatSpan{}
	perDepth := map[int64]int{}
	traces := map[pcommon.TraceID]int{}
	for _, sp := range spans {
		byID[sp.SpanID()] = sp
	}
	for _, sp := range spans {
		d := attrInt(t, sp.Attributes(), "depth")
		perDepth[d]++
		traces[sp.TraceID()]++
		if d == int64(depth) {
			assert.True(t, sp.ParentSpanID().IsEmpty(), "the outermost call is a root")
			continue
		}
		parent, ok := byID[sp.ParentSpanID()]
		if assert.True(t, ok, "the parent of depth %d was recorded", d) {
			assert.Equal(t, d+1, attrInt(t, parent.Attributes(), "depth"))
			assert.Equal(t, parent.TraceID(), sp.TraceID())
			assert.LessOrEqual(t, parent.StartTimestamp(), sp.StartTimestamp())
			assert.GreaterOrEqual(t, parent.EndTimestamp(), sp.EndTimestamp())
		}
	}
	for d := 0; d <= depth; d++ {
		assert.Equal(t, rounds, perDepth[int64(d)], "spans at depth %d", d)
	}
	assert.Len(t, traces, rounds, "one trace per recursion")
}

// Recursion 256 deep in C, 300 times: every call is a span, nested as the
// calls nest. The function calls itself, so its returns are probed on its
// RET instructions (the kernel reports at most 64 nested return probes).
func TestDeepRecursionC(t *testing.T) {
	testutil.RequireRoot(t)
	const depth = 256
	rounds := testutil.Scaled(300, 20) // fewer in the emulated arm64 VM
	for _, opt := range []string{"-O0", "-O2"} {
		t.Run(opt, func(t *testing.T) {
			b := testutil.BuildDemo(t, opt)
			demo := testutil.StartDemo(t, b.Program)
			s := startReceiver(t, []config.Target{{Path: b.Program, Spans: []config.Span{{
				Name: "recurse", Function: "recurse", Attributes: map[string]string{"depth": "arg0:s32"},
			}}}})
			for range rounds {
				demo.Deep(depth)
			}
			st := spanStats(t, s, "recurse")
			require.NoError(t, s.rcv.Shutdown(context.Background()))
			checkRecursion(t, allSpans(s.traces), rounds, depth)
			assert.Equal(t, uint64(rounds*(depth+1)), st.Count)
			assert.Zero(t, st.Overflow+st.ReturnLimit+st.Abandoned+st.Unmatched+st.Lost)
		})
	}
}

// With the kernel's return probes chosen explicitly, a recursion deeper
// than the kernel's 64 pending return probes is recorded to that depth, and
// the deeper calls are counted, never paired with the wrong return.
func TestDeepRecursionKernelReturnLimit(t *testing.T) {
	testutil.RequireRoot(t)
	const depth, rounds = 256, 10
	b := testutil.BuildDemo(t, "-O2")
	demo := testutil.StartDemo(t, b.Program)
	s := startReceiver(t, []config.Target{{Path: b.Program, Spans: []config.Span{{
		Name: "recurse", Function: "recurse", Returns: config.ReturnsUretprobe,
		Attributes: map[string]string{"depth": "arg0:s32"},
	}}}})
	for range rounds {
		demo.Deep(depth)
	}
	demo.Deep(3) // pairing is right afterwards
	st := spanStats(t, s, "recurse")
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	assert.Equal(t, uint64(rounds*64+4), st.Count, "the outer 64 calls of each recursion")
	assert.Equal(t, uint64(rounds*(depth+1-64)), st.ReturnLimit, "the rest are counted")
	assert.Zero(t, st.Abandoned+st.Unmatched+st.Overflow)
	spans := allSpans(s.traces)
	require.Len(t, spans, rounds*64+4)
	for _, sp := range spans {
		if d := attrInt(t, sp.Attributes(), "depth"); d < 4 {
			continue // the last, short recursion
		} else {
			assert.GreaterOrEqual(t, d, int64(depth+1-64), "only the outer calls are recorded")
		}
	}
}

// Recursion 256 deep in Go, growing (and so moving) the goroutine's stack on
// the way down, 300 times on fresh goroutines: every call is a span.
func TestDeepRecursionGo(t *testing.T) {
	testutil.RequireRoot(t)
	const depth = 256
	rounds := testutil.Scaled(300, 20) // fewer in the emulated arm64 VM
	bin := testutil.BuildGo(t, "goprog", false)
	prog := testutil.StartProgram(t, bin, "ready")
	s := startReceiver(t, []config.Target{{Path: bin, Spans: []config.Span{{
		Name: "deep", Function: "main.Deep", Attributes: map[string]string{"depth": "arg0"},
	}}}})
	require.Equal(t, fmt.Sprintf("deep %d %d %d", depth, rounds, rounds*depth), prog.Ask(fmt.Sprintf("deep %d %d", depth, rounds), "deep "))
	st := spanStats(t, s, "deep")
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	checkRecursion(t, allSpans(s.traces), rounds, depth)
	assert.Zero(t, st.Overflow+st.NoState+st.Abandoned+st.Unmatched+st.Lost)
}

// 5,000 short-lived Go processes with one probed call each: 5,000 spans, and
// no goroutine state outlives its span.
func TestShortLivedGoProcesses(t *testing.T) {
	testutil.RequireRoot(t)
	const processes = 5000
	bin := testutil.BuildGo(t, "goprog", false)
	s := startReceiver(t, []config.Target{{Path: bin, Spans: []config.Span{{
		Name: "probed", Function: "main.Probed", Attributes: map[string]string{"n": "arg0"},
	}}}})
	before, err := s.rcv.tracer.GoroutineStates()
	require.NoError(t, err)
	var g errgroup.Group
	g.SetLimit(4)
	for i := range processes {
		g.Go(func() error {
			if out, err := exec.Command(bin, "once").CombinedOutput(); err != nil {
				return fmt.Errorf("process %d: %w: %s", i, err, out)
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	after, err := s.rcv.tracer.GoroutineStates()
	require.NoError(t, err)
	st := spanStats(t, s, "probed")
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	assert.Equal(t, before, after, "goroutine states back to their starting count")
	assert.Equal(t, uint64(processes), st.Count)
	assert.Zero(t, st.NoState+st.Overflow+st.Abandoned+st.Unmatched)
	spans := allSpans(s.traces)
	require.Len(t, spans, processes)
	pids := map[int64]bool{}
	for _, sp := range spans {
		assert.Equal(t, int64(1), attrInt(t, sp.Attributes(), "n"))
		pids[attrInt(t, sp.resource, "process.pid")] = true
	}
	assert.Len(t, pids, processes, "one span per process")
}

// A probed Go function that panics into its caller's recover never returns:
// its span is abandoned, and calls from the goroutines that later reuse its
// g are roots of their own traces, not children of the dead span.
func TestGoPanicRecover(t *testing.T) {
	testutil.RequireRoot(t)
	const calls = 200
	bin := testutil.BuildGo(t, "goprog", false)
	prog := testutil.StartProgram(t, bin, "ready")
	s := startReceiver(t, []config.Target{{Path: bin, Spans: []config.Span{{
		Name: "panicky", Function: "main.Panicky", Attributes: map[string]string{"n": "arg0"},
	}}}})
	prog.Ask("panic", "recovered")
	prog.Ask(fmt.Sprintf("calm %d", calls), "calm ")
	st := spanStats(t, s, "panicky")
	states, err := s.rcv.tracer.GoroutineStates()
	require.NoError(t, err)
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	spans := allSpans(s.traces)
	require.Len(t, spans, calls)
	traces := map[pcommon.TraceID]bool{}
	for _, sp := range spans {
		assert.True(t, sp.ParentSpanID().IsEmpty(), "n=%d is a root", attrInt(t, sp.Attributes(), "n"))
		traces[sp.TraceID()] = true
	}
	assert.Len(t, traces, calls, "each call is its own trace")
	// The panicked call's span is abandoned when a goroutine on its g probes
	// again (as here, usually); until then, or the process's exit, it is
	// the one goroutine state left.
	assert.Equal(t, uint64(1), st.Abandoned+uint64(states), "abandoned %d, states left %d", st.Abandoned, states)
}

// exec ends what the old image had open: a span opened before exec is never
// closed by the new image's exit probe, and the new image's spans are roots.
func TestExecEndsOpenSpans(t *testing.T) {
	testutil.RequireRoot(t)
	bin := buildHardening(t)
	p := testutil.StartProgram(t, bin, "ready")
	s := startReceiver(t, []config.Target{{Path: bin, Spans: []config.Span{{
		Name: "hex", Entry: "usdt:hex:start", Exit: "usdt:hex:done",
		Attributes: map[string]string{"start": "arg0"}, ExitAttributes: map[string]string{"done": "arg0"},
	}}}})
	assert.Equal(t, fmt.Sprintf("second %d", p.PID), p.Ask("exec", "second "), "exec keeps the pid")
	st := spanStats(t, s, "hex")
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	spans := allSpans(s.traces)
	require.Len(t, spans, 1, "only the new image's own span")
	assert.Equal(t, int64(3), attrInt(t, spans[0].Attributes(), "start"))
	assert.Equal(t, int64(4), attrInt(t, spans[0].Attributes(), "done"))
	assert.True(t, spans[0].ParentSpanID().IsEmpty())
	assert.Equal(t, uint64(1), st.Abandoned, "the old image's open span")
	assert.Equal(t, uint64(1), st.Unmatched, "the new image's first done has no start")
}

// A span waiting for the trace context of an enclosing carrier span leaves
// as soon as its process execs (the carrier can never end), not after
// the 10 s context wait.
func TestExecReleasesSpansWaitingForContext(t *testing.T) {
	testutil.RequireRoot(t)
	bin := buildHardening(t)
	p := testutil.StartProgram(t, bin, "ready")
	s := startReceiver(t, []config.Target{{Path: bin, Spans: []config.Span{
		{Name: "hex", Entry: "usdt:hex:start", Exit: "usdt:hex:done",
			Attributes: map[string]string{"tp": "arg0:string"}, TraceContext: "tp"},
		{Name: "four", Function: "four"},
	}}})
	start := time.Now()
	assert.Equal(t, fmt.Sprintf("second %d", p.PID), p.Ask("exec", "second "), "exec keeps the pid")
	var four []flatSpan
	require.Eventually(t, func() bool {
		four = nil
		for _, sp := range allSpans(s.traces) {
			if sp.Name() == "four" {
				four = append(four, sp)
			}
		}
		return len(four) == 1
	}, 5*time.Second, 10*time.Millisecond, "the span nested in the abandoned carrier")
	assert.Less(t, time.Since(start), spans.DefaultContextWait/2)
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	assert.Equal(t, 0, s.rcv.builder.Waiting())
	assert.Equal(t, uint64(1), s.rcv.builder.Counts().Context[spans.ContextTimeout])
}

// Entry values of exactly the record's capacity (four bytes[256]) fit.
func TestFullRecord(t *testing.T) {
	testutil.RequireRoot(t)
	const calls = 1000
	bin := buildHardening(t)
	p := testutil.StartProgram(t, bin, "ready")
	s := startReceiver(t, []config.Target{{Path: bin, Spans: []config.Span{{
		Name: "four", Function: "four",
		Attributes: map[string]string{
			"a": "+0(arg0):bytes[256]", "b": "+0(arg1):bytes[256]", "c": "+0(arg2):bytes[256]", "d": "+0(arg3):bytes[256]",
		},
	}}}})
	p.Ask(fmt.Sprintf("four %d", calls), fmt.Sprintf("four %d", calls))
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	spans := allSpans(s.traces)
	require.Len(t, spans, calls)
	for _, sp := range spans {
		for k, key := range []string{"a", "b", "c", "d"} {
			v, ok := sp.Attributes().Get(key)
			require.True(t, ok, key)
			want := make([]byte, 256)
			for i := range want {
				want[i] = byte(i + k)
			}
			assert.Equal(t, want, v.Bytes().AsRaw(), key)
		}
	}
	c := s.rcv.builder.Counts()
	assert.Zero(t, c.Truncated+c.FetchErrors+c.Malformed, "%+v", c)
	_, err := s.telemetry.GetMetric("otelcol_receiver_uprobe_records_malformed")
	assert.Error(t, err, "no record was malformed")
}

// A parent shorter than its min_duration is recorded anyway when a span
// nested in it was recorded, so that its children's parent exists; a short
// span without recorded children is dropped as configured.
func TestShortParentsOfRecordedChildren(t *testing.T) {
	testutil.RequireRoot(t)
	const n = 50
	b := testutil.BuildDemo(t, "-O2")
	demo := testutil.StartDemo(t, b.Program)
	s := startReceiver(t, []config.Target{{Path: b.Program, Spans: []config.Span{
		{Name: "outer", Function: "outer", MinDuration: 3600e9},
		{Name: "inner", Function: "inner"},
		{Name: "work", Function: "work", MinDuration: 3600e9},
	}}})
	demo.Run(n)
	outer, work := spanStats(t, s, "outer"), spanStats(t, s, "work")
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	byName := map[string][]flatSpan{}
	byID := map[pcommon.SpanID]bool{}
	for _, sp := range allSpans(s.traces) {
		byName[sp.Name()] = append(byName[sp.Name()], sp)
		byID[sp.SpanID()] = true
	}
	assert.Len(t, byName["inner"], 2*n)
	assert.Len(t, byName["outer"], n, "kept for their children")
	assert.Empty(t, byName["work"], "short, and nobody's parent")
	for _, sp := range byName["inner"] {
		assert.True(t, byID[sp.ParentSpanID()], "the parent of every child exists")
	}
	assert.Zero(t, outer.Short)
	assert.Equal(t, uint64(n), work.Short)
}
