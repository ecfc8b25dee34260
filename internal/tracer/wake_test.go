package tracer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/event"
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

	// The process's first span asks where its thread context is, a
	// record to act on at once (TestWaitRecordsUrgent): asked and read
	// before what is measured.
	demo.Run(1)
	assert.Len(t, drainAll(t, tr), 1)
	tr.TakeUrgent()
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

// A record to act on at once (here a process's question of where its
// thread context is, sent at its first span) ends a wait on the timer at
// once, far from a quarter of the ring; TakeUrgent says so once, and a
// wait after the record was read sleeps again.
func TestWaitRecordsUrgent(t *testing.T) {
	b := testutil.BuildDemo(t, "-O2")
	demo := testutil.StartDemo(t, b.Program)
	tr, _ := openDemo(t, []config.Target{{Path: b.Program, Spans: []config.Span{{Name: "outer", Function: "outer"}}}})

	const never = time.Minute
	require.False(t, tr.TakeUrgent())
	done := waitDone(tr, time.Now().Add(never), false)
	demo.Run(1)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(never / 2):
		t.Fatal("the engine did not wake the reader at the thread-context question")
	}
	assert.Less(t, tr.ring.buffered(), testRing/wakeFraction)
	assert.True(t, tr.TakeUrgent())
	assert.False(t, tr.TakeUrgent(), "said once")
	var batch testutil.Batch
	tr.Read(1000, &batch)
	require.Len(t, batch.Spans, 1)
	require.Len(t, batch.Processes, 1)
	assert.Equal(t, event.ProcessThreadContext, batch.Processes[0].Event)

	start := time.Now()
	require.NoError(t, tr.WaitRecords(start.Add(200*time.Millisecond), false))
	assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "nothing to act on: it slept until the deadline")
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
