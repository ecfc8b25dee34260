package receiver

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/tracer"
)

// The engine's hits per process become cumulative hits per container:
// deltas are folded once, processes that are gone are handed back for
// deletion, a reused pid (another start time) is another process, and the
// series bound drops idle containers first, keeping their hits out of the
// target's own count.
func TestContainerCounts(t *testing.T) {
	containers := map[event.Image]string{{StartNs: 1}: "c1", {StartNs: 2}: "c2", {StartNs: 3}: ""}
	alive := map[uint32]bool{10: true, 20: true, 30: true}
	c := newContainerCounts(func(pid uint32, start uint64) (string, bool, bool) {
		id, ok := containers[event.Image{StartNs: start}]
		return id, ok, !alive[pid]
	})
	c.alive = func(pid uint32) bool { return alive[pid] }
	hits := func(probe int, pid uint32, start, n uint64) tracer.ProcessHits {
		return tracer.ProcessHits{Probe: probe, PID: pid, StartNs: start, Hits: n}
	}
	snapshot := func() map[containerKey]uint64 {
		var st event.Stats
		c.stats(&st)
		out := map[containerKey]uint64{}
		for _, h := range st.ContainerHits {
			out[containerKey{h.Probe, h.ContainerID}] = h.Hits
		}
		return out
	}

	gone := c.fold([]tracer.ProcessHits{hits(0, 10, 1, 5), hits(0, 20, 2, 7), hits(1, 20, 2, 1), hits(0, 30, 3, 9)})
	assert.Empty(t, gone)
	assert.Equal(t, map[containerKey]uint64{{0, "c1"}: 5, {0, "c2"}: 7, {1, "c2"}: 1}, snapshot(), "a process in no container is not a series")

	alive[10] = false
	gone = c.fold([]tracer.ProcessHits{hits(0, 10, 1, 8), hits(0, 20, 2, 7), hits(1, 20, 2, 4)})
	assert.Equal(t, []tracer.ProcessHits{hits(0, 10, 1, 8)}, gone, "pid 10 is gone: its entry is folded, then deleted")
	assert.Equal(t, map[containerKey]uint64{{0, "c1"}: 8, {0, "c2"}: 7, {1, "c2"}: 4}, snapshot())

	// Pid 10 again, another process (start 2: container c2).
	alive[10] = true
	c.fold([]tracer.ProcessHits{hits(0, 10, 2, 2)})
	assert.Equal(t, map[containerKey]uint64{{0, "c1"}: 8, {0, "c2"}: 9, {1, "c2"}: 4}, snapshot())

	// Over the bound, idle series go first and their hits are remembered.
	for range staleCollections {
		c.fold(nil)
	}
	for i := range maxContainerSeries {
		containers[event.Image{StartNs: uint64(100 + i)}] = "n" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
		c.fold([]tracer.ProcessHits{hits(2, uint32(1000+i), uint64(100+i), 1)})
	}
	var st event.Stats
	c.stats(&st)
	assert.Len(t, st.ContainerHits, maxContainerSeries)
	assert.Equal(t, map[int]uint64{0: 8 + 9, 1: 4}, st.DroppedContainerHits, "the idle series were dropped, their hits kept apart")
}

// The hits of a process whose identity is not known yet (its records are
// still to be read) wait for it, counted in no resource meanwhile, then go
// to its container; after maxIdentityWait folds they count without one.
func TestContainerCountsWaitForIdentity(t *testing.T) {
	containers := map[uint64]string{}
	alive := map[uint32]bool{10: true, 20: false}
	c := newContainerCounts(func(pid uint32, start uint64) (string, bool, bool) {
		id, ok := containers[start]
		return id, ok, !alive[pid]
	})
	c.alive = func(pid uint32) bool { return alive[pid] }
	h := func(pid uint32, start, n uint64) tracer.ProcessHits {
		return tracer.ProcessHits{Probe: 0, PID: pid, StartNs: start, Hits: n}
	}
	var st event.Stats
	assert.Empty(t, c.fold([]tracer.ProcessHits{h(10, 1, 5), h(20, 2, 3)}))
	c.stats(&st)
	assert.Empty(t, st.ContainerHits)
	assert.Equal(t, map[int]uint64{0: 8}, st.DroppedContainerHits, "waiting hits count in no resource")

	containers[1] = "c1" // its exec record was read
	gone := c.fold([]tracer.ProcessHits{h(10, 1, 6), h(20, 2, 3)})
	assert.Empty(t, gone)
	c.stats(&st)
	assert.Equal(t, []event.ContainerHits{{Probe: 0, ContainerID: "c1", Hits: 6}}, st.ContainerHits)
	assert.Equal(t, map[int]uint64{0: 3}, st.DroppedContainerHits)

	for range maxIdentityWait - 2 { // it waited two folds already
		assert.Empty(t, c.fold([]tracer.ProcessHits{h(20, 2, 3)}))
	}
	gone = c.fold([]tracer.ProcessHits{h(20, 2, 3)})
	assert.Equal(t, []tracer.ProcessHits{h(20, 2, 3)}, gone, "given up: folded without a container, and gone")
	c.stats(&st)
	assert.Empty(t, st.DroppedContainerHits)
}
