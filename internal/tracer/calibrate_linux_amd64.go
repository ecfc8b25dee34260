package tracer

import "github.com/otel-uprobe/uprobereceiver/internal/insn"

// The functions of calibrate_linux_amd64.s. They are never called directly,
// only through callN, by their addresses.
func calibEmulated()
func calibEmulatedTwin()
func calibOptimizable()
func calibOptimizableTwin()
func calibSingleStepped()
func calibSingleSteppedTwin()
func calibReturn()
func calibReturnTwin()

// callN calls the function at fn n times.
func callN(fn uintptr, n int)

// calibAddresses writes the addresses of the eight functions above, in
// that order: the assembly's own symbols, not the Go wrappers a func value
// would give.
func calibAddresses(out *[8]uintptr)

// calibrationFunctions returns the functions Calibrate probes, each with
// its unprobed twin and the bytes it starts with.
func calibrationFunctions() ([]calibFunction, error) {
	var a [8]uintptr
	calibAddresses(&a)
	return []calibFunction{
		{leg: legEmulated, class: insn.Emulated, probed: a[0], twin: a[1], code: []byte{0x55, 0x5d, 0xc3}},
		{leg: legOptimizable, class: insn.Optimizable, probed: a[2], twin: a[3], code: []byte{0x0f, 0x1f, 0x44, 0x00, 0x00, 0xc3}},
		{leg: legSingleStepped, class: insn.SingleStepped, probed: a[4], twin: a[5], code: []byte{0x48, 0x89, 0xf8, 0xc3}},
		{leg: legPair, class: insn.Emulated, probed: a[6], twin: a[7], code: []byte{0x55, 0x5d, 0xc3}, withReturn: true},
	}, nil
}
