// Package floor holds the floor probe: the cheapest useful uprobe program,
// one per-CPU counter (bpf/floor.bpf.c, bpf2go output committed here).
// The tracer times probe hits with it (Calibrate, when an overhead budget
// is set) and runs the uretprobe canary with it; the benchmark
// (harness/bench) attaches it by itself as the floor of every cost.
package floor

import "github.com/cilium/ebpf"

//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -target bpfel,bpfeb -go-package floor -output-stem floor -no-global-types floor ../../../bpf/floor.bpf.c -- -I/usr/include/x86_64-linux-gnu -O2 -g -Wall -Werror -mcpu=v3

// Names of the floor's program and map in its collection spec.
const (
	Program = floorProgFloorCount
	Map     = floorMapFloorHits
)

// Spec returns a fresh copy of the floor's collection spec: Program
// counting into the one-entry per-CPU map Map.
func Spec() (*ebpf.CollectionSpec, error) { return loadFloor() }
