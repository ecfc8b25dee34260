package tracer

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/planner"
)

// A call whose entry condition does not hold pays its entry only: the
// entry of a function span with a condition attaches as a session uprobe
// (Linux 6.12) and makes the kernel skip the return, so the engine's
// session program runs once per call plus once per return of a call that
// passed. Every count stays what a uretprobe gives (the per-location mode,
// without sessions, counts the same): both probes' hits, the filtered
// calls, the spans that pass, and the spans nested in them with their
// parents.
func TestRejectedCallSkipsItsReturn(t *testing.T) {
	testutil.RequireRoot(t)
	const n = 1000
	targets := []config.Target{{Path: "", Spans: []config.Span{
		{Name: "outer", Function: "outer", Filter: []string{"arg0 < 10"}}, // outer(i) for i in 0..n-1
		{Name: "inner", Function: "inner"},                                // inner(i) and inner(i+1) in outer
	}}}
	for _, mode := range attachModes {
		t.Run(mode.name, func(t *testing.T) {
			b := testutil.BuildDemo(t, "-O2")
			demo := testutil.StartDemo(t, b.Program)
			targets[0].Path = b.Program
			require.NoError(t, config.Validate(targets))
			pl, err := planner.Resolve(targets)
			require.NoError(t, err)
			tr, err := Open(pl.Plan, Options{RingBufferSize: testRing, PerLocation: mode.perLocation, ProgramStats: true})
			require.NoError(t, err)
			defer func() { assert.NoError(t, tr.Close()) }()
			// Without session uprobes (before Linux 6.12: the arm64 VM's
			// 6.1) the counts are the same, the returns all run.
			assert.Equal(t, !mode.perLocation && HaveUprobeMulti() && HaveUprobeSession(), tr.session)

			demo.Run(n)
			st, err := tr.Stats()
			require.NoError(t, err)
			outer, inner := spanIndex(t, pl.Plan, "outer"), spanIndex(t, pl.Plan, "inner")
			def := pl.Plan.Spans[outer]
			assert.Equal(t, uint64(n), st.Probes[def.Entry].Hits, "entry hits")
			assert.Equal(t, uint64(n), st.Probes[def.Exit].Hits, "return hits, rejected calls included")
			assert.Equal(t, uint64(10), st.Spans[outer].Count, "calls that passed")
			assert.Equal(t, uint64(n-10), st.Spans[outer].Filtered)
			assert.Zero(t, st.Spans[outer].Unmatched)
			assert.Zero(t, st.Spans[outer].Abandoned)
			assert.Equal(t, uint64(2*n), st.Spans[inner].Count)

			spans := drainAll(t, tr)
			starts := map[uint64]bool{}
			for _, s := range spans {
				if int(s.Def) == outer {
					starts[s.StartNs] = true
				}
			}
			require.Len(t, starts, 10)
			nested := 0
			for _, s := range spans {
				if int(s.Def) == inner && s.ParentStartNs != 0 {
					assert.True(t, starts[s.ParentStartNs], "an inner span's parent is a recorded outer span")
					nested++
				}
			}
			assert.Equal(t, 20, nested, "inner spans of the calls that passed have their parent")
			assert.Len(t, spans, 10+2*n)

			if !tr.session {
				return
			}
			runs, err := tr.sessionProg.Load().Stats()
			require.NoError(t, err)
			require.True(t, tr.statsOn(), "BPF run-time statistics are on (root)")
			assert.Equal(t, uint64(n+10), runs.RunCount, "the session program runs at every entry and at the returns of the calls that passed")
		})
	}
}
