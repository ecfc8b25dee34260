package tracer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
)

// waitDone runs WaitRecords in the background and returns when it ended.
func waitDone(tr *Tracer, deadline time.Time, first bool) <-chan error {
	done := make(chan error, 1)
	go func() { done <- tr.WaitRecords(deadline, first) }()
	return done
}

// A reader that waits for the first record sleeps while nothing comes,
// until its deadline, and is woken by the engine when a record comes.
func TestWaitRecordsFirst(t *testing.T) {
	b := testutil.BuildDemo(t, "-O2")
	demo := testutil.StartDemo(t, b.Program)
	tr, _ := openDemo(t, []config.Target{{Path: b.Program, Spans: []config.Span{{Name: "outer", Function: "outer"}}}})

	start := time.Now()
	require.NoError(t, tr.WaitRecords(start.Add(200*time.Millisecond), true))
	assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "nothing came: it slept until the deadline")
	assert.Zero(t, tr.Buffered())

	const never = time.Minute
	done := waitDone(tr, time.Now().Add(never), true)
	demo.Run(1)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(never / 2):
		t.Fatal("the engine did not wake the reader at the first record")
	}
	assert.NotZero(t, tr.Buffered())

	// With a record in the ring, a wait for the first one returns at once.
	start = time.Now()
	require.NoError(t, tr.WaitRecords(time.Now().Add(never), true))
	assert.Less(t, time.Since(start), never/2)
	assert.Len(t, drainAll(t, tr), 1)
}

// A reader that drains on a timer is not woken by records until a quarter
// of the ring is full.
func TestWaitRecordsFill(t *testing.T) {
	b := testutil.BuildDemo(t, "-O2")
	demo := testutil.StartDemo(t, b.Program)
	tr, _ := openDemo(t, []config.Target{{Path: b.Program, Spans: []config.Span{{Name: "outer", Function: "outer"}}}})

	demo.Run(3)
	start := time.Now()
	require.NoError(t, tr.WaitRecords(start.Add(200*time.Millisecond), false))
	assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "three records are not a quarter of the ring")
	assert.Len(t, drainAll(t, tr), 3)

	// Each record here is a span trailer and its header, no values.
	perRecord := ringHeaderSize + 88
	n := testRing/wakeFraction/perRecord + 10
	const never = time.Minute
	done := waitDone(tr, time.Now().Add(never), false)
	demo.Run(n)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(never / 2):
		t.Fatal("the engine did not wake the reader when the ring was a quarter full")
	}
	assert.GreaterOrEqual(t, tr.ring.buffered(), testRing/wakeFraction)
	assert.Len(t, drainAll(t, tr), n)
}

// Interrupt ends a wait that has no deadline, from another goroutine.
func TestWaitRecordsInterrupt(t *testing.T) {
	b := testutil.BuildDemo(t, "-O2")
	tr, _ := openDemo(t, []config.Target{{Path: b.Program, Spans: []config.Span{{Name: "outer", Function: "outer"}}}})
	done := waitDone(tr, time.Time{}, true)
	tr.Interrupt()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Interrupt did not end the wait")
	}
	// An Interrupt with nobody waiting ends the next wait at once.
	tr.Interrupt()
	start := time.Now()
	require.NoError(t, tr.WaitRecords(time.Time{}, true))
	assert.Less(t, time.Since(start), 30*time.Second)
}
