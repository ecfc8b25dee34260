package tracer

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/planner"
)

const testRing = 1 << 20

// attachModes are the two ways the tracer attaches: uprobe_multi links
// where the kernel has them, and one perf event per location.
var attachModes = []struct {
	name        string
	perLocation bool
}{{"multi", false}, {"per-location", true}}

func openDemo(t *testing.T, targets []config.Target, perLocation ...bool) (*Tracer, *planner.Planner) {
	t.Helper()
	testutil.RequireRoot(t)
	require.NoError(t, config.Validate(targets))
	pl, err := planner.Resolve(targets)
	require.NoError(t, err)
	tr, err := Open(pl.Plan, Options{RingBufferSize: testRing, PerLocation: len(perLocation) > 0 && perLocation[0]})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, tr.Close()) })
	return tr, pl
}

func drainAll(t *testing.T, tr *Tracer) []event.SpanRecord {
	t.Helper()
	var out []event.SpanRecord
	var b testutil.Batch
	for {
		b.Reset()
		n, malformed := tr.Read(1000, &b)
		require.Zero(t, malformed)
		for _, s := range b.Spans {
			s.Entry = append([]byte(nil), s.Entry...)
			s.Exit = append([]byte(nil), s.Exit...)
			out = append(out, s)
		}
		if n == 0 {
			return out
		}
	}
}

func spanIndex(t *testing.T, plan *plan.Plan, name string) int {
	t.Helper()
	for i, s := range plan.Spans {
		if s.Name == name {
			return i
		}
	}
	t.Fatalf("no span %q", name)
	return -1
}

func probeIndex(t *testing.T, plan *plan.Plan, ref string) int {
	t.Helper()
	for i, p := range plan.Probes {
		if p.Ref == ref {
			return i
		}
	}
	t.Fatalf("no probe %q", ref)
	return -1
}

func TestCheckKernel(t *testing.T) {
	testutil.RequireRoot(t)
	require.NoError(t, CheckKernel(), "this kernel has everything the engine needs")
}

func TestCountOnly(t *testing.T) {
	for _, mode := range attachModes {
		t.Run(mode.name, func(t *testing.T) { testCountOnly(t, mode.perLocation) })
	}
}

func testCountOnly(t *testing.T, perLocation bool) {
	b := testutil.BuildDemo(t, "-O2")
	demo := testutil.StartDemo(t, b.Program)
	tr, pl := openDemo(t, []config.Target{{
		Path:     b.Program,
		Counters: config.CountersOf("usdt:demo:tick", "uprobe:inner", "uretprobe:outer"),
		Spans:    []config.Span{{Name: "query", Entry: "usdt:demo:query__start", Exit: "usdt:demo:query__done"}},
	}}, perLocation)
	assert.Equal(t, [3]int{1, 1, 2}, demo.Semaphores())
	demo.Run(7)
	require.NoError(t, tr.Detach())
	st, err := tr.Stats()
	require.NoError(t, err)
	assert.Equal(t, uint64(14), st.Probes[probeIndex(t, pl.Plan, "usdt:demo:tick")].Hits, "two sites per iteration")
	assert.Equal(t, uint64(14), st.Probes[probeIndex(t, pl.Plan, "uprobe:inner")].Hits)
	assert.Equal(t, uint64(7), st.Probes[probeIndex(t, pl.Plan, "uretprobe:outer")].Hits)
	assert.Len(t, drainAll(t, tr), 7, "only the span makes records")
	assert.Equal(t, [3]int{0, 0, 0}, demo.Semaphores(), "Detach lowers the semaphores")
	demo.Run(3)
	st2, err := tr.Stats()
	require.NoError(t, err)
	assert.Equal(t, st, st2, "nothing counts after Detach")
}

// An exit with no open entry is counted, and the pairing carries on.
func TestUnmatchedExit(t *testing.T) {
	b := testutil.BuildDemo(t, "-O2")
	demo := testutil.StartDemo(t, b.Program)
	// Reversed on purpose: the first query__start of a thread closes nothing.
	tr, pl := openDemo(t, []config.Target{{
		Path:  b.Program,
		Spans: []config.Span{{Name: "between", Entry: "usdt:demo:query__done", Exit: "usdt:demo:query__start"}},
	}})
	const n = 5
	demo.Run(n)
	st, err := tr.Stats()
	require.NoError(t, err)
	sc := st.Spans[spanIndex(t, pl.Plan, "between")]
	assert.Equal(t, uint64(1), sc.Unmatched)
	assert.Equal(t, uint64(n-1), sc.Count)
	assert.Len(t, drainAll(t, tr), n-1)
}

// Open spans whose exit never comes are dropped when an enclosing span
// closes, and counted.
func TestAbandoned(t *testing.T) {
	b := testutil.BuildDemo(t, "-O2")
	demo := testutil.StartDemo(t, b.Program)
	tr, pl := openDemo(t, []config.Target{{
		Path: b.Program,
		Spans: []config.Span{
			{Name: "outer", Function: "outer"},
			// Opens at each inner() and would close at query__done, after outer returned.
			{Name: "stray", Entry: "uprobe:inner", Exit: "usdt:demo:query__done"},
		},
	}})
	const n = 4
	demo.Run(n)
	st, err := tr.Stats()
	require.NoError(t, err)
	outer, stray := st.Spans[spanIndex(t, pl.Plan, "outer")], st.Spans[spanIndex(t, pl.Plan, "stray")]
	assert.Equal(t, uint64(n), outer.Count)
	assert.Equal(t, uint64(2*n), stray.Abandoned, "both inner() entries of each iteration")
	assert.Equal(t, uint64(n), stray.Unmatched, "query__done finds no open stray span")
	assert.Zero(t, stray.Count)
	spans := drainAll(t, tr)
	assert.Len(t, spans, n)
	for _, s := range spans {
		assert.Equal(t, uint32(spanIndex(t, pl.Plan, "outer")), s.Def)
		assert.Zero(t, s.ParentStartNs, "an abandoned span is nobody's parent")
	}
}

// Recursion deeper than the per-thread stack records the outermost
// MaxDepth spans and counts the rest; pairing stays right.
func TestOverflow(t *testing.T) {
	b := testutil.BuildDemo(t, "-O0")
	demo := testutil.StartDemo(t, b.Program)
	tr, pl := openDemo(t, []config.Target{{
		Path:  b.Program,
		Spans: []config.Span{{Name: "recurse", Function: "recurse", Attributes: map[string]string{"depth": "arg0:s32"}}},
	}})
	depth := bpfobj.MaxDepth + 44 // MaxDepth+45 nested calls
	demo.Deep(depth)
	demo.Deep(2) // after the overflow, pairing still works
	st, err := tr.Stats()
	require.NoError(t, err)
	sc := st.Spans[spanIndex(t, pl.Plan, "recurse")]
	extra := depth + 1 - bpfobj.MaxDepth
	assert.Equal(t, uint64(extra), sc.Overflow)
	assert.Equal(t, uint64(bpfobj.MaxDepth+3), sc.Count)
	assert.Zero(t, sc.Unmatched)
	assert.Zero(t, sc.Abandoned)
	spans := drainAll(t, tr)
	require.Len(t, spans, bpfobj.MaxDepth+3)
	byStart := map[uint64]event.SpanRecord{}
	for _, s := range spans {
		byStart[s.StartNs] = s
	}
	for _, s := range spans[:bpfobj.MaxDepth] {
		if s.Depth == 0 {
			assert.Zero(t, s.ParentStartNs)
			continue
		}
		p, ok := byStart[s.ParentStartNs]
		require.True(t, ok)
		assert.Equal(t, s.Depth-1, p.Depth)
		assert.Equal(t, p.RootStartNs, s.RootStartNs)
	}
}

// If one attachment fails, nothing stays attached and every semaphore
// raised on the way is lowered.
func TestOpenAllOrNothing(t *testing.T) {
	for _, mode := range attachModes {
		t.Run(mode.name, func(t *testing.T) { testOpenAllOrNothing(t, mode.perLocation) })
	}
}

func testOpenAllOrNothing(t *testing.T, perLocation bool) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	demo := testutil.StartDemo(t, b.Program)
	targets := []config.Target{{
		Path:     b.Program,
		Spans:    []config.Span{{Name: "query", Entry: "usdt:demo:query__start", Exit: "usdt:demo:query__done"}},
		Counters: config.CountersOf("usdt:demo:tick"),
	}}
	pl, err := planner.Resolve(targets)
	require.NoError(t, err)
	fi, err := os.Stat(b.Program)
	require.NoError(t, err)
	bad := pl.Attachments[0]
	bad.FileOffset = uint64(fi.Size()) + 4096 // the kernel refuses offsets beyond the file
	bad.RefCtrOffset = 0
	pl.Attachments = append(pl.Attachments, bad)
	pl.Files[0].Attachments.End++

	_, err = Open(pl.Plan, Options{RingBufferSize: testRing, PerLocation: perLocation})
	var ae *AttachError
	require.True(t, errors.As(err, &ae), "got %v", err)
	require.Len(t, ae.Failures, 1)
	assert.Equal(t, "usdt:demo:query__start", ae.Failures[0].Probe)
	assert.Contains(t, err.Error(), "attaching usdt:demo:query__start in "+b.Program)
	assert.Equal(t, [3]int{0, 0, 0}, demo.Semaphores(), "no semaphore stays raised")
	demo.Run(2) // and the program runs on unharmed
}

func TestOpenRejectsBadRingSize(t *testing.T) {
	_, err := Open(&plan.Plan{}, Options{RingBufferSize: 3000})
	require.ErrorContains(t, err, "ring buffer size 3000 is not a power of two")
}

func ratio(r float64) *float64 { return &r }

// Head sampling decides once per trace (the outermost span on the thread);
// nested spans follow. The duration histogram counts the spans recorded,
// the unsampled counter the others.
func TestSampling(t *testing.T) {
	b := testutil.BuildDemo(t, "-O2")
	demo := testutil.StartDemo(t, b.Program)
	tr, pl := openDemo(t, []config.Target{{
		Path: b.Program,
		Spans: []config.Span{
			{Name: "recurse", Function: "recurse", SampleRatio: ratio(0.5)},
			{Name: "never", Function: "outer", SampleRatio: ratio(0)},
			{Name: "inner", Function: "inner"}, // nested under outer: follows its decision
		},
	}})
	const n = 2000
	demo.Run(n)
	st, err := tr.Stats()
	require.NoError(t, err)
	rec := st.Spans[spanIndex(t, pl.Plan, "recurse")]
	assert.Equal(t, uint64(4*n), rec.Count+rec.Unsampled, "every span is in the histogram or unsampled")
	never, inner := st.Spans[spanIndex(t, pl.Plan, "never")], st.Spans[spanIndex(t, pl.Plan, "inner")]
	assert.Equal(t, uint64(n), never.Unsampled)
	assert.Equal(t, uint64(2*n), inner.Unsampled, "nested spans follow the outer span's decision")

	spans := drainAll(t, tr)
	assert.Equal(t, 4*n, len(spans)+int(rec.Unsampled))
	roots := 0
	byStart := map[uint64]bool{}
	for _, s := range spans {
		require.Equal(t, uint32(spanIndex(t, pl.Plan, "recurse")), s.Def, "only recurse spans are recorded")
		byStart[s.StartNs] = true
		if s.Depth == 0 {
			roots++
		}
	}
	for _, s := range spans {
		if s.ParentStartNs != 0 {
			assert.True(t, byStart[s.ParentStartNs], "a sampled span's parent is sampled too")
		}
	}
	assert.Equal(t, 4*roots, len(spans), "whole traces are kept or dropped")
	assert.Equal(t, uint64(len(spans)), rec.Count, "the histogram counts the spans recorded")
	// Binomial(2000, 0.5): 5 standard deviations is ±112.
	assert.InDelta(t, n/2, roots, 112)
}

func TestMinDuration(t *testing.T) {
	b := testutil.BuildDemo(t, "-O2")
	demo := testutil.StartDemo(t, b.Program)
	tr, pl := openDemo(t, []config.Target{{
		Path: b.Program,
		Spans: []config.Span{
			{Name: "query", Entry: "usdt:demo:query__start", Exit: "usdt:demo:query__done"},
			{Name: "inner", Function: "inner", MinDuration: time.Hour},
		},
	}})
	demo.Run(10)
	st, err := tr.Stats()
	require.NoError(t, err)
	inner := st.Spans[spanIndex(t, pl.Plan, "inner")]
	assert.Equal(t, uint64(20), inner.Count, "short spans still count")
	assert.Equal(t, uint64(20), inner.Short)
	spans := drainAll(t, tr)
	require.Len(t, spans, 10)
	for _, s := range spans {
		assert.Equal(t, uint32(spanIndex(t, pl.Plan, "query")), s.Def)
	}
}

func TestNoRecords(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	demo := testutil.StartDemo(t, b.Program)
	pl, err := planner.Resolve([]config.Target{{
		Path:  b.Program,
		Spans: []config.Span{{Name: "recurse", Function: "recurse", Attributes: map[string]string{"d": "arg0"}}},
	}})
	require.NoError(t, err)
	tr, err := Open(pl.Plan, Options{RingBufferSize: testRing, NoRecords: true})
	require.NoError(t, err)
	defer tr.Close()
	demo.Run(5)
	st, err := tr.Stats()
	require.NoError(t, err)
	assert.Equal(t, uint64(20), st.Spans[0].Count)
	assert.Equal(t, uint64(20), st.Spans[0].Unsampled)
	assert.Empty(t, drainAll(t, tr))
}

// Spans whose exit never comes because the program longjmps out (as
// PostgreSQL does on ERROR) are dropped, counted, and never become the
// parents of what follows.
func TestLongjmpDoesNotPoison(t *testing.T) {
	for _, opt := range []string{"-O2", "-O0"} {
		t.Run(opt, func(t *testing.T) {
			b := testutil.BuildDemo(t, opt)
			demo := testutil.StartDemo(t, b.Program)
			tr, pl := openDemo(t, []config.Target{{
				Path: b.Program,
				Spans: []config.Span{
					{Name: "query", Entry: "usdt:demo:query__start", Exit: "usdt:demo:query__done"},
					{Name: "fail_deep", Function: "fail_deep"},
					{Name: "work", Function: "work"},
				},
			}})
			demo.Fail()
			demo.Fail()
			demo.Run(2)
			st, err := tr.Stats()
			require.NoError(t, err)
			q, f := st.Spans[spanIndex(t, pl.Plan, "query")], st.Spans[spanIndex(t, pl.Plan, "fail_deep")]
			assert.Equal(t, uint64(2), q.Abandoned, "each failed query is dropped when the next one starts")
			assert.Equal(t, uint64(6), f.Abandoned, "three unwound fail_deep calls per failure")
			assert.Equal(t, uint64(2), q.Count)
			assert.Zero(t, q.Unmatched)
			spans := drainAll(t, tr)
			queries := 0
			for _, s := range spans {
				switch pl.Spans[s.Def].Name {
				case "query":
					queries++
					assert.Zero(t, s.Depth, "a query after failures is a root again")
					assert.Zero(t, s.ParentStartNs)
				case "work":
					assert.Equal(t, uint16(1), s.Depth, "work is nested in its query only")
				}
			}
			assert.Equal(t, 2, queries)
		})
	}
}

// A file replaced at its path after the plan was read from it is not
// attached in its place: the very file that was read is (the plan says it
// was replaced); a file changed in place is not attached at all: the
// plan's offsets belong to the contents that were read. In both attach
// modes.
func TestOpenRefusesAChangedFile(t *testing.T) {
	testutil.RequireRoot(t)
	for _, mode := range attachModes {
		t.Run(mode.name, func(t *testing.T) {
			b := testutil.BuildDemo(t, "-O0")
			other := testutil.BuildDemo(t, "-O2")
			targets := []config.Target{{Path: b.Program, Counters: config.CountersOf("uprobe:work")}}
			pl, err := planner.Resolve(targets)
			require.NoError(t, err)
			require.NoError(t, os.Rename(other.Program, b.Program))
			require.ErrorIs(t, pl.Replaced(), planner.ErrReplaced)
			tr, err := Open(pl.Plan, Options{RingBufferSize: testRing, PerLocation: mode.perLocation})
			require.NoError(t, err)
			attached, ok := tr.AttachedFileID(0)
			require.True(t, ok)
			assert.Equal(t, pl.Files[0].ID, attached, "the file that was read, not the one at its path now")
			require.NoError(t, tr.Close())

			pl, err = planner.Resolve(targets)
			require.NoError(t, err)
			f, err := os.OpenFile(b.Program, os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			_, err = f.Write([]byte{0}) // changed in place: same inode, another size
			require.NoError(t, err)
			require.NoError(t, f.Close())
			_, err = Open(pl.Plan, Options{RingBufferSize: testRing, PerLocation: mode.perLocation})
			require.ErrorIs(t, err, ErrFileChanged)
		})
	}
}

// TestEngineLoads loads the engine of the running architecture with no
// probes: the kernel's verifier accepts it, and its exec, fork and exit
// programs attach.
func TestEngineLoads(t *testing.T) {
	testutil.RequireRoot(t)
	for _, perLocation := range []bool{false, true} {
		tr, err := Open(&plan.Plan{}, Options{RingBufferSize: testRing, PerLocation: perLocation})
		require.NoError(t, err)
		require.NoError(t, tr.Close())
	}
}
