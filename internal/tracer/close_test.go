package tracer

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/planner"
)

// closeEach overlaps the closes, never more than closerSlots at once even
// for several callers together, and keeps every error in its place.
func TestCloseEach(t *testing.T) {
	slots := closerSlots()
	n := 3 * slots
	var mu sync.Mutex
	now, peak := 0, 0
	release := make(chan struct{})
	closeOne := func(i int) error {
		mu.Lock()
		now++
		peak = max(peak, now)
		mu.Unlock()
		<-release // a grace period that ends for every waiting close at once
		mu.Lock()
		now--
		mu.Unlock()
		if i%100 == 7 {
			return fmt.Errorf("close %d", i)
		}
		return nil
	}
	var errs [2][]error
	var wg sync.WaitGroup
	for c := range errs {
		wg.Go(func() { errs[c] = closeEach(n, closeOne) })
	}
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return now == slots }, 10*time.Second, time.Millisecond,
		"closerSlots closes wait side by side")
	close(release)
	wg.Wait()
	assert.Equal(t, slots, peak, "two callers together stay within the bound")
	var want []string
	for i := 7; i < n; i += 100 {
		want = append(want, fmt.Sprintf("close %d", i))
	}
	for c := range errs {
		require.Len(t, errs[c], n)
		var failed []string
		for _, err := range errs[c] {
			if err != nil {
				failed = append(failed, err.Error())
			}
		}
		assert.Equal(t, want, failed, "every error, in place")
	}
	assert.Equal(t, []error{nil, nil}, closeEach(2, func(int) error { return nil }))
	assert.Empty(t, closeEach(0, func(int) error { return errors.New("never") }))
}

// After Detach, a file the plan gains is not attached: its probes would
// outlive the tracer's links (and Close).
func TestAttachFileAfterDetach(t *testing.T) {
	b := testutil.BuildDemo(t, "-O2")
	tr, pl := openDemo(t, []config.Target{{Path: b.Program, Counters: config.CountersOf("usdt:demo:tick")}})
	require.NoError(t, tr.Detach())
	copyPath := filepath.Join(t.TempDir(), "demo-copy")
	copyFile(t, b.Program, copyPath)
	copyFile(t, b.Library, filepath.Join(filepath.Dir(copyPath), filepath.Base(b.Library)))
	c, err := planner.OpenPath(copyPath)
	require.NoError(t, err)
	spec, err := pl.ReadFile(0, c)
	require.NoError(t, err)
	fi := pl.Append(spec)
	require.ErrorIs(t, tr.AttachFile(fi), ErrDetached)
	demo := testutil.StartDemo(t, copyPath)
	assert.Equal(t, [3]int{0, 0, 0}, demo.Semaphores(), "nothing attached")
}
