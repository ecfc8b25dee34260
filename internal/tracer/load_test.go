package tracer

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/planner"
)

// Open loads the span programs (the verifier's ~0.4 s each) only when its
// plan's attachments run them: counters alone load neither, a span without
// an entry condition the span program alone. A file appended later whose
// spans need them loads them then, and its counts are exact: a function
// span with an entry condition, attached as a session uprobe where the
// kernel has them.
func TestSpanProgramsLoadWhenUsed(t *testing.T) {
	testutil.RequireRoot(t)
	const n = 100
	b := testutil.BuildDemo(t, "-O2")
	for _, mode := range attachModes {
		t.Run(mode.name, func(t *testing.T) {
			later := filepath.Join(t.TempDir(), "demo-later")
			targets := []config.Target{
				{Path: b.Program, Counters: config.CountersOf("usdt:demo:tick")},
				{Path: later, Optional: true, Spans: []config.Span{
					{Name: "outer", Function: "outer", Filter: []string{"arg0 < 10"}}, // outer(i) for i in 0..n-1
					{Name: "inner", Function: "inner"},
				}},
			}
			require.NoError(t, config.Validate(targets))
			// An optional target's missing file is the host locator's to wait for.
			pl, err := planner.Resolve(targets, planner.Options{Locator: planner.HostLocator{}})
			require.NoError(t, err)
			defer pl.Close()
			tr, err := Open(pl.Plan, Options{RingBufferSize: testRing, PerLocation: mode.perLocation})
			require.NoError(t, err)
			defer func() { assert.NoError(t, tr.Close()) }()
			assert.Nil(t, tr.siteProg.Load(), "counters alone load no span program")
			assert.Nil(t, tr.sessionProg.Load(), "counters alone load no session program")
			assert.Nil(t, tr.plainProg.Load(), "counters alone load no plain span program")

			copyFile(t, b.Program, later)
			copyFile(t, b.Library, filepath.Join(filepath.Dir(later), filepath.Base(b.Library))) // for a run path of $ORIGIN
			c, err := planner.OpenPath(later)
			require.NoError(t, err)
			spec, err := pl.ReadFile(1, c)
			require.NoError(t, err)
			require.NoError(t, tr.AttachFile(pl.Append(spec)))
			session := !mode.perLocation && HaveUprobeMulti() && HaveUprobeSession()
			// inner's span is plain: the plain span program runs it where
			// uprobe_multi links are used, the span program otherwise.
			plain := !mode.perLocation && HaveUprobeMulti()
			assert.Equal(t, plain, tr.plainProg.Load() != nil, "inner's span runs the plain span program with uprobe_multi links")
			assert.Equal(t, !plain, tr.siteProg.Load() != nil, "inner's span runs the span program without them")
			assert.Equal(t, session, tr.sessionProg.Load() != nil, "outer's entry runs the session program where the kernel has it")

			testutil.StartDemo(t, later).Run(n)
			st, err := tr.Stats()
			require.NoError(t, err)
			outer, inner := spanIndex(t, pl.Plan, "outer"), spanIndex(t, pl.Plan, "inner")
			def := pl.Plan.Spans[outer]
			assert.Equal(t, uint64(n), st.Probes[def.Entry].Hits, "entry hits")
			assert.Equal(t, uint64(n), st.Probes[def.Exit].Hits, "return hits, rejected calls included")
			assert.Equal(t, uint64(10), st.Spans[outer].Count, "calls that passed")
			assert.Equal(t, uint64(n-10), st.Spans[outer].Filtered)
			assert.Equal(t, uint64(2*n), st.Spans[inner].Count)
			assert.Len(t, drainAll(t, tr), 10+2*n)
			assert.Zero(t, tr.PlainRefused(), "the plain span program ran plain sites only")
		})
	}
}

// The plain span program runs only what its plain_site takes and has no
// fallback (the general program inside it doubled its load time): a site
// that is not plain is refused and counted, never run. Here the spec of
// a plain span's sites is replaced, after attaching, by one with an
// entry condition.
func TestPlainProgramRefusesOtherSites(t *testing.T) {
	if !HaveUprobeMulti() {
		t.Skip("the plain span program runs on uprobe_multi links (Linux 6.6)")
	}
	const n = 100
	b := testutil.BuildDemo(t, "-O2")
	tr, pl := openDemo(t, []config.Target{{Path: b.Program, Spans: []config.Span{{Name: "inner", Function: "inner"}}}})
	require.NotNil(t, tr.plainProg.Load())
	testutil.StartDemo(t, b.Program).Run(n)
	st, err := tr.Stats()
	require.NoError(t, err)
	inner := spanIndex(t, pl.Plan, "inner")
	require.Equal(t, uint64(2*n), st.Spans[inner].Count)
	require.Zero(t, tr.PlainRefused())

	for i := range pl.Plan.Sites {
		enc, err := encodeSite(pl.Plan.Sites[i], pl.Plan)
		require.NoError(t, err)
		enc.FilterCount = 1
		require.False(t, plainSpec(enc))
		require.NoError(t, tr.sites.Put(uint32(i), enc))
	}
	testutil.StartDemo(t, b.Program).Run(n)
	after, err := tr.Stats()
	require.NoError(t, err)
	assert.Equal(t, st.Spans[inner], after.Spans[inner], "no span was opened or closed")
	assert.Equal(t, uint64(2*n*2), tr.PlainRefused(), "each entry and return refused and counted")
}

// A plan whose spans have no entry condition loads the span program but
// not the session program.
func TestSessionProgramOnlyForConditions(t *testing.T) {
	b := testutil.BuildDemo(t, "-O2")
	tr, _ := openDemo(t, []config.Target{{Path: b.Program, Spans: []config.Span{{Name: "inner", Function: "inner"}}}})
	if HaveUprobeMulti() {
		assert.NotNil(t, tr.plainProg.Load(), "a plain span runs the plain span program")
	} else {
		assert.NotNil(t, tr.siteProg.Load())
	}
	assert.Nil(t, tr.sessionProg.Load())
}

// Open takes what Prepare made in the background; a second Open with the
// same preparation parses a spec of its own (the first changed its).
func TestOpenPrepared(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	targets := []config.Target{{Path: b.Program, Spans: []config.Span{{Name: "inner", Function: "inner"}}}}
	require.NoError(t, config.Validate(targets))
	prep := Prepare()
	for range 2 {
		pl, err := planner.Resolve(targets)
		require.NoError(t, err)
		tr, err := Open(pl.Plan, Options{RingBufferSize: testRing, Prepared: prep})
		require.NoError(t, err)
		testutil.StartDemo(t, b.Program).Run(3)
		st, err := tr.Stats()
		require.NoError(t, err)
		assert.Equal(t, uint64(6), st.Spans[spanIndex(t, pl.Plan, "inner")].Count)
		require.NoError(t, tr.Close())
		pl.Close()
	}
}
