//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"

	"github.com/otel-uprobe/uprobereceiver/internal/tracer"
	"github.com/otel-uprobe/uprobereceiver/internal/tracer/floor"
)

// floorMulti says whether the floors attach through uprobe_multi links,
// as the engine does where the kernel has them (Linux 6.6): a hit through
// such a link costs less than one through a perf event, and a floor must
// not cost more than the engine's way of attaching.
var floorMulti = features.HaveBPFLinkUprobeMulti() == nil

// Counter is a bare counting program attached by itself: the benchmark's
// floor, the least any uprobe can cost. It owns its program, map and links.
// It lives with the benchmark, its only user: the collector never links it.
type Counter struct {
	coll  *ebpf.Collection
	hits  *ebpf.Map
	links []link.Link
}

// OpenCounter loads spec, whose program prog counts into element 0 of the
// per-CPU map hits, and attaches it at file offsets of path as uprobes,
// and also as uretprobes of the same functions when withReturn is set (the
// floor of an entry/exit pair).
func OpenCounter(spec *ebpf.CollectionSpec, prog, hits, path string, fileOffsets []uint64, withReturn bool) (_ *Counter, err error) {
	if floorMulti {
		spec.Programs[prog].AttachType = ebpf.AttachTraceUprobeMulti
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return nil, tracer.ErrPermission
		}
		return nil, fmt.Errorf("loading the counter: %w", err)
	}
	c := &Counter{coll: coll, hits: coll.Maps[hits]}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()
	p := coll.Programs[prog]
	c.links, err = attachPair(path, fileOffsets, p, p, withReturn)
	return c, err
}

// attachPair attaches entry at file offsets of path, and ret at the
// returns of the functions there when withReturn is set, through
// uprobe_multi links when floorMulti says so (the programs must have been
// loaded for them), through perf events otherwise.
func attachPair(path string, fileOffsets []uint64, entry, ret *ebpf.Program, withReturn bool) ([]link.Link, error) {
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	var links []link.Link
	if floorMulti {
		opts := &link.UprobeMultiOptions{Addresses: fileOffsets}
		l, err := ex.UprobeMulti(nil, entry, opts)
		if err != nil {
			return nil, fmt.Errorf("attaching uprobes %s:%#x: %w", path, fileOffsets, err)
		}
		links = append(links, l)
		if withReturn {
			l, err := ex.UretprobeMulti(nil, ret, opts)
			if err != nil {
				return links, fmt.Errorf("attaching uretprobes %s:%#x: %w", path, fileOffsets, err)
			}
			links = append(links, l)
		}
		return links, nil
	}
	for _, off := range fileOffsets {
		opts := &link.UprobeOptions{Address: off, TraceFSPrefix: "otelcol_uprobe"}
		l, err := ex.Uprobe("floor", entry, opts)
		if err != nil {
			return links, fmt.Errorf("attaching uprobe %s:%#x: %w", path, off, err)
		}
		links = append(links, l)
		if withReturn {
			l, err := ex.Uretprobe("floor", ret, opts)
			if err != nil {
				return links, fmt.Errorf("attaching uretprobe %s:%#x: %w", path, off, err)
			}
			links = append(links, l)
		}
	}
	return links, nil
}

// Hits returns the number of times the counter ran, over all CPUs.
func (c *Counter) Hits() (uint64, error) {
	var per []uint64
	if err := c.hits.Lookup(uint32(0), &per); err != nil {
		return 0, fmt.Errorf("reading counter hits: %w", err)
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n, nil
}

// Close detaches and unloads the counter.
func (c *Counter) Close() error {
	errs := make([]error, 0, len(c.links))
	for _, l := range c.links {
		errs = append(errs, l.Close())
	}
	c.links = nil
	c.coll.Close()
	return errors.Join(errs...)
}

// spanFloorDrain is how often the delivered-span floor's reader drains its
// ring: records flow without wakeups, as the engine's do while the ring
// fills, and a reader on a 1 to 10 ms timer keeps up with one probed
// thread (docs/perf-facts).
const spanFloorDrain = 5 * time.Millisecond

// SpanFloor is the delivered-span floor attached by itself: task-local
// pairing of a function's entry and return, one fixed-size ring record per
// call (bpf/spanfloor.bpf.c), drained by the receiver's own batched reader
// on a timer in a goroutine of the benchmark. It owns its programs, map,
// links and reader.
type SpanFloor struct {
	coll    *ebpf.Collection
	links   []link.Link
	reader  *tracer.RingReader
	stop    chan struct{}
	done    sync.WaitGroup
	records atomic.Int64
}

// OpenSpanFloor loads the delivered-span floor and attaches it to the
// functions at file offsets of path.
func OpenSpanFloor(path string, fileOffsets []uint64) (_ *SpanFloor, err error) {
	spec, err := floor.SpanSpec()
	if err != nil {
		return nil, fmt.Errorf("reading the delivered-span floor: %w", err)
	}
	if floorMulti {
		spec.Programs[floor.SpanEntry].AttachType = ebpf.AttachTraceUprobeMulti
		spec.Programs[floor.SpanExit].AttachType = ebpf.AttachTraceUprobeMulti
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return nil, tracer.ErrPermission
		}
		return nil, fmt.Errorf("loading the delivered-span floor: %w", err)
	}
	f := &SpanFloor{coll: coll, stop: make(chan struct{})}
	defer func() {
		if err != nil {
			err = errors.Join(err, f.Close())
		}
	}()
	if f.reader, err = tracer.NewRingReader(coll.Maps[floor.SpanRing]); err != nil {
		return nil, err
	}
	f.done.Add(1)
	go f.drain()
	f.links, err = attachPair(path, fileOffsets, coll.Programs[floor.SpanEntry], coll.Programs[floor.SpanExit], true)
	return f, err
}

// drain reads the ring every spanFloorDrain until stopped, and once more
// then.
func (f *SpanFloor) drain() {
	defer f.done.Done()
	tick := time.NewTicker(spanFloorDrain)
	defer tick.Stop()
	count := func(record []byte) {
		if len(record) == floor.SpanRecordSize {
			f.records.Add(1)
		}
	}
	for {
		select {
		case <-f.stop:
			for f.reader.Read(4096, count) > 0 {
			}
			return
		case <-tick.C:
			for f.reader.Read(4096, count) == 4096 {
			}
		}
	}
}

// Spans returns the records delivered and the records the ring refused so
// far (exact once Close returned).
func (f *SpanFloor) Spans() (delivered, lost uint64, err error) {
	var l uint64
	if err := f.coll.Variables[floor.SpanLost].Get(&l); err != nil {
		return 0, 0, fmt.Errorf("reading the floor's lost records: %w", err)
	}
	return uint64(f.records.Load()), l, nil
}

// Close detaches the floor, drains its ring and unloads it.
func (f *SpanFloor) Close() error {
	var errs []error
	for _, l := range f.links {
		errs = append(errs, l.Close())
	}
	f.links = nil
	if f.reader != nil {
		close(f.stop)
		f.done.Wait()
		errs = append(errs, f.reader.Close())
		f.reader = nil
	}
	f.coll.Close()
	return errors.Join(errs...)
}
