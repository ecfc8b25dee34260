//go:build linux && (amd64 || arm64)

package receiver

import (
	"maps"
	"os"
	"sort"
	"strconv"
	"sync"

	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/tracer"
)

// maxContainerSeries bounds the (probe, container.id) pairs whose hits the
// receiver reports apart; beyond it, pairs that stopped changing (their
// container is gone) are dropped first.
const maxContainerSeries = 4096

// staleCollections is how many collections without a new hit make a
// (probe, container.id) pair droppable.
const staleCollections = 30

// containerKey names the hits of one probe in one container.
type containerKey struct {
	probe     int
	container string
}

// containerSeries is the cumulative hits of one probe in one container.
type containerSeries struct {
	hits uint64
	// idle counts the collections since the last new hit.
	idle int
}

// containerCounts turns the engine's hits per process (files found
// through a process's root) into cumulative hits per probe and
// container.id. Its methods may run beside each other.
type containerCounts struct {
	mu sync.Mutex
	// last is what was folded of each (probe, process) entry so far.
	last   map[tracer.ProcessHits]uint64
	series map[containerKey]*containerSeries
	// dropped counts, per probe, the hits of series dropped for the bound:
	// they stay out of the probe's hits without a container.
	dropped map[int]uint64
	// waiting holds the entries of processes whose identity is not known
	// yet (their process records are still in the ring buffer), with the
	// folds they waited and their hits, kept out of every resource's hits
	// meanwhile.
	waiting map[tracer.ProcessHits]waitingHits
	folds   uint64 // calls of fold
	// identity returns the container of a process, whether the process is
	// known and whether it exited.
	identity func(pid uint32, startNs uint64) (container string, known, exited bool)
	// alive says whether a process of unknown identity is still running.
	alive func(pid uint32) bool
}

// waitingHits are the hits of a process whose identity is awaited.
type waitingHits struct {
	folds int    // folds it waited
	fold  uint64 // the last fold that saw it
	hits  uint64 // not yet folded
}

// maxIdentityWait is how many folds the hits of a process wait for its
// identity before they are folded without a container (its records were
// lost).
const maxIdentityWait = 10

func newContainerCounts(identity func(pid uint32, startNs uint64) (string, bool, bool)) *containerCounts {
	return &containerCounts{
		last:     map[tracer.ProcessHits]uint64{},
		series:   map[containerKey]*containerSeries{},
		dropped:  map[int]uint64{},
		waiting:  map[tracer.ProcessHits]waitingHits{},
		identity: identity,
		alive: func(pid uint32) bool {
			_, err := os.Stat("/proc/" + strconv.FormatUint(uint64(pid), 10))
			return err == nil
		},
	}
}

// fold adds what the engine counted since the last call and returns the
// entries of processes that are gone, for the caller to delete from the
// engine (their counts are folded). The hits of a process whose identity
// is not known yet wait for it, at most maxIdentityWait folds.
func (c *containerCounts) fold(hits []tracer.ProcessHits) (gone []tracer.ProcessHits) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.folds++
	for _, s := range c.series {
		s.idle++
	}
	for _, h := range hits {
		key := h
		key.Hits = 0
		delta := h.Hits - c.last[key]
		if h.Hits < c.last[key] {
			delta = h.Hits // deleted and made again meanwhile
		}
		id, known, exited := c.identity(h.PID, h.StartNs)
		if !known {
			w := c.waiting[key]
			if w.folds < maxIdentityWait {
				c.waiting[key] = waitingHits{folds: w.folds + 1, fold: c.folds, hits: delta}
				continue
			}
			exited = !c.alive(h.PID) // given up: it counts without a container
		}
		delete(c.waiting, key)
		c.last[key] = h.Hits
		if id != "" && delta > 0 {
			k := containerKey{h.Probe, id}
			s := c.series[k]
			if s == nil {
				s = &containerSeries{}
				c.series[k] = s
			}
			s.hits += delta
			s.idle = 0
		}
		if exited {
			gone = append(gone, h)
			delete(c.last, key)
		}
	}
	for key, w := range c.waiting {
		if w.fold != c.folds {
			delete(c.waiting, key) // not in the engine any more
		}
	}
	c.bound()
	return gone
}

// bound drops the series idle longest while there are too many.
func (c *containerCounts) bound() {
	if len(c.series) <= maxContainerSeries {
		return
	}
	keys := make([]containerKey, 0, len(c.series))
	for k, s := range c.series {
		if s.idle >= staleCollections {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return c.series[keys[i]].idle > c.series[keys[j]].idle })
	for _, k := range keys {
		if len(c.series) <= maxContainerSeries {
			break
		}
		c.dropped[k.probe] += c.series[k].hits
		delete(c.series, k)
	}
}

// stats adds the containers' hits to st.
func (c *containerCounts) stats(st *event.Stats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	st.ContainerHits = st.ContainerHits[:0]
	for k, s := range c.series {
		st.ContainerHits = append(st.ContainerHits, event.ContainerHits{Probe: k.probe, ContainerID: k.container, Hits: s.hits})
	}
	sort.Slice(st.ContainerHits, func(i, j int) bool {
		a, b := st.ContainerHits[i], st.ContainerHits[j]
		if a.ContainerID != b.ContainerID {
			return a.ContainerID < b.ContainerID
		}
		return a.Probe < b.Probe
	})
	st.DroppedContainerHits = maps.Clone(c.dropped)
	for k, w := range c.waiting {
		// Hits whose container is not known yet count in no resource.
		if w.hits > 0 {
			if st.DroppedContainerHits == nil {
				st.DroppedContainerHits = map[int]uint64{}
			}
			st.DroppedContainerHits[k.Probe] += w.hits
		}
	}
}
