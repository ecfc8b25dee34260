package tracer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/planner"
)

// A call that head sampling leaves out pays its entry only (issue 21, item
// 7): the entry of a function span with a sample_ratio below 1 attaches as
// a session uprobe (Linux 6.12) and makes the kernel skip the return of a
// call left out. Such a call opens no frame, so the thread remembers where
// it is: the spans nested in it (inner, called then tail-called by outer)
// follow its decision, and a call its caller makes after it returned
// (count_iteration, at the same stack position) decides afresh. The
// duration histogram counts the spans recorded; the hits and the unsampled
// counter count every call. Without sessions (per-location: every return
// runs) every count is the same.
func TestUnsampledCallSkipsItsReturn(t *testing.T) {
	testutil.RequireRoot(t)
	const n = 100_000
	ratio := 0.01
	for _, mode := range attachModes {
		t.Run(mode.name, func(t *testing.T) {
			b := testutil.BuildDemo(t, "-O2")
			demo := testutil.StartDemo(t, b.Program)
			targets := []config.Target{{Path: b.Program, Spans: []config.Span{
				{Name: "outer", Function: "outer", SampleRatio: &ratio},                        // from run_query, once per iteration
				{Name: "inner", Function: "inner"},                                             // inner(i) and inner(i+1) in outer
				{Name: "count_iteration", Function: "count_iteration", MinDuration: time.Hour}, // after outer, from run_query
			}}}
			require.NoError(t, config.Validate(targets))
			pl, err := planner.Resolve(targets)
			require.NoError(t, err)
			tr, err := Open(pl.Plan, Options{RingBufferSize: testRing, PerLocation: mode.perLocation, ProgramStats: true})
			require.NoError(t, err)
			defer func() { assert.NoError(t, tr.Close()) }()
			assert.Equal(t, !mode.perLocation && HaveUprobeMulti() && HaveUprobeSession(), tr.session)

			demo.Run(n)
			st, err := tr.Stats()
			require.NoError(t, err)
			outer, inner, after := spanIndex(t, pl.Plan, "outer"), spanIndex(t, pl.Plan, "inner"), spanIndex(t, pl.Plan, "count_iteration")
			def := pl.Plan.Spans[outer]
			assert.Equal(t, uint64(n), st.Probes[def.Entry].Hits, "entry hits: every call")
			assert.Equal(t, uint64(n), st.Probes[def.Exit].Hits, "return hits: every call, skipped returns included")
			recorded := st.Spans[outer].Count
			// Binomial(100,000, 0.01): mean 1,000, standard deviation 31.5;
			// 6 of them is ±189.
			assert.InDelta(t, n*ratio, float64(recorded), 189, "outer spans recorded")
			assert.Equal(t, uint64(n)-recorded, st.Spans[outer].Unsampled, "the calls left out")
			assert.Equal(t, 2*recorded, st.Spans[inner].Count, "inner spans recorded: those of recorded outer spans")
			assert.Equal(t, 2*(uint64(n)-recorded), st.Spans[inner].Unsampled, "inner spans follow outer's decision")
			assert.Equal(t, uint64(n), st.Spans[after].Count, "count_iteration decides afresh: its ratio is 1")
			assert.Equal(t, uint64(n), st.Spans[after].Short)
			assert.Zero(t, st.Spans[after].Unsampled)
			for _, i := range []int{outer, inner, after} {
				assert.Zero(t, st.Spans[i].Unmatched, pl.Plan.Spans[i].Name)
				assert.Zero(t, st.Spans[i].Abandoned, pl.Plan.Spans[i].Name)
				assert.Zero(t, st.Spans[i].Lost, pl.Plan.Spans[i].Name)
			}

			spans := drainAll(t, tr)
			starts := map[uint64]bool{}
			for _, s := range spans {
				if int(s.Def) == outer {
					assert.Zero(t, s.Depth, "outer is the outermost span")
					starts[s.StartNs] = true
				}
			}
			require.Len(t, starts, int(recorded))
			nested := 0
			for _, s := range spans {
				if int(s.Def) == inner {
					assert.Equal(t, uint16(1), s.Depth, "no inner span is a root of its own")
					assert.True(t, starts[s.ParentStartNs], "an inner span's parent is a recorded outer span")
					nested++
				}
			}
			assert.Equal(t, 2*int(recorded), nested)
			assert.Len(t, spans, 3*int(recorded), "outer and inner spans only: count_iteration's are short")

			if !tr.session {
				return
			}
			runs, err := tr.sessionProg.Load().Stats()
			require.NoError(t, err)
			require.True(t, tr.statsOn(), "BPF run-time statistics are on (root)")
			assert.Equal(t, n+recorded, runs.RunCount, "the session program runs at every entry and at the returns of the calls recorded")
		})
	}
}
