// Package floor is the benchmark's floor: the cheapest useful uprobe, a
// per-CPU counter attached by itself (bpf/floor.bpf.c, bpf2go output
// committed here). It lives under internal/tracer, the receiver's door to the
// kernel, but outside the tracer package, so that the collector never links
// it: only the benchmark imports it.
package floor

//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -target bpfel -go-package floor -output-stem floor -no-global-types floor ../../../bpf/floor.bpf.c -- -I/usr/include/x86_64-linux-gnu -O2 -g -Wall -Werror -mcpu=v3

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/otel-uprobe/uprobereceiver/internal/tracer"
)

// Floor is the benchmark's bare counting probe: one per-CPU counter,
// attached by itself, the least any uprobe can cost. It owns its program,
// map and links.
type Floor struct {
	coll  *ebpf.Collection
	links []link.Link
}

// Open attaches the floor program at a file offset of path as a uprobe,
// and also as a uretprobe of the same function when withReturn is set (the
// floor of an entry/exit pair).
func Open(path string, fileOffset uint64, withReturn bool) (_ *Floor, err error) {
	spec, err := loadFloor()
	if err != nil {
		return nil, fmt.Errorf("reading the floor program: %w", err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return nil, tracer.ErrPermission
		}
		return nil, fmt.Errorf("loading the floor program: %w", err)
	}
	f := &Floor{coll: coll}
	defer func() {
		if err != nil {
			err = errors.Join(err, f.Close())
		}
	}()
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	prog := coll.Programs[floorProgFloorCount]
	opts := &link.UprobeOptions{Address: fileOffset, TraceFSPrefix: "otelcol_uprobe"}
	l, err := ex.Uprobe("floor", prog, opts)
	if err != nil {
		return nil, fmt.Errorf("attaching uprobe %s:%#x: %w", path, fileOffset, err)
	}
	f.links = append(f.links, l)
	if withReturn {
		l, err := ex.Uretprobe("floor", prog, opts)
		if err != nil {
			return nil, fmt.Errorf("attaching uretprobe %s:%#x: %w", path, fileOffset, err)
		}
		f.links = append(f.links, l)
	}
	return f, nil
}

// Hits returns the number of times the floor program ran, over all CPUs.
func (f *Floor) Hits() (uint64, error) {
	var per []uint64
	if err := f.coll.Maps[floorMapFloorHits].Lookup(uint32(0), &per); err != nil {
		return 0, fmt.Errorf("reading floor hits: %w", err)
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n, nil
}

// Close detaches and unloads the floor program.
func (f *Floor) Close() error {
	errs := make([]error, 0, len(f.links))
	for _, l := range f.links {
		errs = append(errs, l.Close())
	}
	f.links = nil
	f.coll.Close()
	return errors.Join(errs...)
}
