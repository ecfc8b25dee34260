package tracer

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/planner"
)

func TestSetProbeAttached(t *testing.T) {
	for _, mode := range attachModes {
		t.Run(mode.name, func(t *testing.T) { testSetProbeAttached(t, mode.perLocation) })
	}
}

func testSetProbeAttached(t *testing.T, perLocation bool) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	demo := testutil.StartDemo(t, b.Program)
	targets := []config.Target{{
		Path:     b.Program,
		Counters: config.CountersOf("usdt:demo:tick", "uprobe:inner"),
		Spans:    []config.Span{{Name: "query", Entry: "usdt:demo:query__start", Exit: "usdt:demo:query__done"}},
	}}
	require.NoError(t, config.Validate(targets))
	pl, err := planner.Resolve(targets)
	require.NoError(t, err)
	tr, err := Open(pl.Plan, Options{RingBufferSize: testRing, PerLocation: perLocation, ProbeControl: true, ProgramStats: true})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, tr.Close()) })
	tick, inner := probeIndex(t, pl.Plan, "usdt:demo:tick"), probeIndex(t, pl.Plan, "uprobe:inner")
	start, done := probeIndex(t, pl.Plan, "usdt:demo:query__start"), probeIndex(t, pl.Plan, "usdt:demo:query__done")
	hits := func() []uint64 {
		t.Helper()
		h, err := tr.ProbeHits(nil, nil)
		require.NoError(t, err)
		return h
	}
	added := func(before []uint64) map[int]uint64 {
		t.Helper()
		after := hits()
		return map[int]uint64{tick: after[tick] - before[tick], inner: after[inner] - before[inner],
			start: after[start] - before[start], done: after[done] - before[done]}
	}

	require.Equal(t, [3]int{1, 1, 2}, demo.Semaphores())
	h := hits()
	demo.Run(3)
	assert.Equal(t, map[int]uint64{tick: 6, inner: 6, start: 3, done: 3}, added(h))

	// The span's probes go, entry first; then inner. Tick stays.
	require.NoError(t, tr.SetProbeAttached(start, false))
	require.NoError(t, tr.SetProbeAttached(done, false))
	require.NoError(t, tr.SetProbeAttached(inner, false))
	require.NoError(t, tr.SetProbeAttached(inner, false), "idempotent")
	assert.Equal(t, [3]int{0, 0, 2}, demo.Semaphores(), "only the detached probes' semaphores are lowered")
	h = hits()
	demo.Run(3)
	assert.Equal(t, map[int]uint64{tick: 6, inner: 0, start: 0, done: 0}, added(h))

	// A file attached meanwhile (a copy of the program: another inode)
	// leaves the detached probes out.
	copyPath := filepath.Join(t.TempDir(), "demo-copy")
	copyFile(t, b.Program, copyPath)
	copyFile(t, b.Library, filepath.Join(filepath.Dir(copyPath), filepath.Base(b.Library))) // for a run path of $ORIGIN
	c, err := planner.OpenPath(copyPath)
	require.NoError(t, err)
	spec, err := pl.ReadFile(0, c)
	require.NoError(t, err)
	fi := pl.Append(spec)
	require.NoError(t, tr.AttachFile(fi))
	demo2 := testutil.StartDemo(t, copyPath)
	assert.Equal(t, [3]int{0, 0, 2}, demo2.Semaphores())
	h = hits()
	demo2.Run(2)
	assert.Equal(t, map[int]uint64{tick: 4, inner: 0, start: 0, done: 0}, added(h))

	// Attached again, exit first, in both files.
	require.NoError(t, tr.SetProbeAttached(done, true))
	require.NoError(t, tr.SetProbeAttached(start, true))
	require.NoError(t, tr.SetProbeAttached(inner, true))
	assert.Equal(t, [3]int{1, 1, 2}, demo.Semaphores())
	assert.Equal(t, [3]int{1, 1, 2}, demo2.Semaphores())
	h = hits()
	demo.Run(1)
	demo2.Run(1)
	assert.Equal(t, map[int]uint64{tick: 4, inner: 4, start: 2, done: 2}, added(h))
	st, err := tr.Stats()
	require.NoError(t, err)
	q := st.Spans[spanIndex(t, pl.Plan, "query")]
	assert.Equal(t, uint64(3+2), q.Count, "spans of the attached times only")
	assert.Zero(t, q.Unmatched, "the entry went first and came back last")

	// With BPF run-time statistics on, every hit of a counter ran the
	// count program.
	runs, on, err := tr.ProgramRuns()
	require.NoError(t, err)
	require.True(t, on)
	all := hits()
	some, err := tr.ProbeHits([]int{inner, tick}, nil)
	require.NoError(t, err)
	assert.Equal(t, []uint64{all[inner], all[tick]}, some)
	assert.Equal(t, all[tick]+all[inner], runs[plan.ProgramCount].Count)
	assert.Equal(t, all[start]+all[done], runs[plan.ProgramSite].Count)

	// A file changed in place since it was read is refused, and the probe
	// stays detached everywhere (all or none).
	require.NoError(t, tr.SetProbeAttached(inner, false))
	later := time.Now().Add(time.Hour)
	require.NoError(t, os.Chtimes(copyPath, later, later))
	err = tr.SetProbeAttached(inner, true)
	require.ErrorIs(t, err, ErrFileChanged)
	h = hits()
	demo.Run(1)
	assert.Equal(t, map[int]uint64{tick: 2, inner: 0, start: 1, done: 1}, added(h))

	// After Detach nothing comes back.
	require.NoError(t, tr.Detach())
	require.NoError(t, tr.SetProbeAttached(start, false))
	require.NoError(t, tr.SetProbeAttached(start, true))
	assert.Equal(t, [3]int{0, 0, 0}, demo.Semaphores())
}

// Without ProbeControl, links are by file and probes cannot be switched.
func TestSetProbeAttachedNeedsProbeControl(t *testing.T) {
	b := testutil.BuildDemo(t, "-O2")
	tr, _ := openDemo(t, []config.Target{{Path: b.Program, Counters: config.CountersOf("uprobe:inner")}})
	require.ErrorContains(t, tr.SetProbeAttached(0, false), "ProbeControl")
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	require.NoError(t, err)
	_, err = io.Copy(out, in)
	require.NoError(t, errors.Join(err, out.Close()))
}
