// Package floor holds the floor probes (bpf2go output committed here): the
// cheapest useful uprobe program, one per-CPU counter (bpf/floor.bpf.c),
// and the delivered-span floor (bpf/spanfloor.bpf.c). The tracer times
// probe hits with the counter (Calibrate, when an overhead budget is set)
// and runs the uretprobe canary with it; the benchmark (harness/bench)
// attaches both by themselves as the floors of every cost.
package floor

import "github.com/cilium/ebpf"

//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -target bpfel,bpfeb -go-package floor -output-stem floor -no-global-types floor ../../../bpf/floor.bpf.c -- -I/usr/include/x86_64-linux-gnu -O2 -g -Wall -Werror -mcpu=v3
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -target bpfel,bpfeb -go-package floor -output-stem spanfloor -no-global-types spanFloor ../../../bpf/spanfloor.bpf.c -- -D__TARGET_ARCH_x86 -I../../../bpf -I/usr/include/x86_64-linux-gnu -O2 -g -Wall -Werror -mcpu=v3

// Names of the floor's program and map in its collection spec.
const (
	Program = floorProgFloorCount
	Map     = floorMapFloorHits
)

// Spec returns a fresh copy of the floor's collection spec: Program
// counting into the one-entry per-CPU map Map.
func Spec() (*ebpf.CollectionSpec, error) { return loadFloor() }

// Names of the delivered-span floor's programs, ring buffer and counters
// in its collection spec.
const (
	SpanEntry     = spanFloorProgFloorSpanEntry
	SpanExit      = spanFloorProgFloorSpanExit
	SpanRing      = spanFloorMapFloorSpans
	SpanLost      = spanFloorVarFloorLost
	SpanUnmatched = spanFloorVarFloorUnmatched
	// SpanRecordSize is the bytes of one record in SpanRing.
	SpanRecordSize = 64
)

// SpanSpec returns a fresh copy of the delivered-span floor's collection
// spec: SpanEntry at a function's entry keeps the start time and the first
// argument in task-local storage, SpanExit at its return writes one
// SpanRecordSize-byte record to the ring buffer SpanRing (a reserve and a
// submit without wakeup) and counts in SpanLost what the ring refused. It
// reads the x86-64 registers.
func SpanSpec() (*ebpf.CollectionSpec, error) { return loadSpanFloor() }
