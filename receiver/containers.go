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
	dropped   map[int]uint64
	container func(pid uint32, image event.Image) string
	alive     func(pid uint32) bool
}

func newContainerCounts(container func(pid uint32, image event.Image) string) *containerCounts {
	return &containerCounts{
		last:      map[tracer.ProcessHits]uint64{},
		series:    map[containerKey]*containerSeries{},
		dropped:   map[int]uint64{},
		container: container,
		alive: func(pid uint32) bool {
			_, err := os.Stat("/proc/" + strconv.FormatUint(uint64(pid), 10))
			return err == nil
		},
	}
}

// fold adds what the engine counted since the last call and returns the
// entries of processes that are gone, for the caller to delete from the
// engine (their counts are folded).
func (c *containerCounts) fold(hits []tracer.ProcessHits) (gone []tracer.ProcessHits) {
	c.mu.Lock()
	defer c.mu.Unlock()
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
		c.last[key] = h.Hits
		if id := c.container(h.PID, event.Image{StartNs: h.StartNs}); id != "" && delta > 0 {
			k := containerKey{h.Probe, id}
			s := c.series[k]
			if s == nil {
				s = &containerSeries{}
				c.series[k] = s
			}
			s.hits += delta
			s.idle = 0
		}
		if !c.alive(h.PID) {
			gone = append(gone, h)
			delete(c.last, key)
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
}
