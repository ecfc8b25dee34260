//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/otel-uprobe/uprobereceiver/internal/tracer"
)

// Counter is a bare counting program attached by itself: the benchmark's
// floor, the least any uprobe can cost. It owns its program, map and links.
// It lives with the benchmark, its only user: the collector never links it.
type Counter struct {
	coll  *ebpf.Collection
	hits  *ebpf.Map
	links []link.Link
}

// OpenCounter loads spec, whose program prog counts into element 0 of the
// per-CPU map hits, and attaches it at a file offset of path as a uprobe,
// and also as a uretprobe of the same function when withReturn is set (the
// floor of an entry/exit pair).
func OpenCounter(spec *ebpf.CollectionSpec, prog, hits, path string, fileOffset uint64, withReturn bool) (_ *Counter, err error) {
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
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	p := coll.Programs[prog]
	opts := &link.UprobeOptions{Address: fileOffset, TraceFSPrefix: "otelcol_uprobe"}
	l, err := ex.Uprobe("floor", p, opts)
	if err != nil {
		return nil, fmt.Errorf("attaching uprobe %s:%#x: %w", path, fileOffset, err)
	}
	c.links = append(c.links, l)
	if withReturn {
		l, err := ex.Uretprobe("floor", p, opts)
		if err != nil {
			return nil, fmt.Errorf("attaching uretprobe %s:%#x: %w", path, fileOffset, err)
		}
		c.links = append(c.links, l)
	}
	return c, nil
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
