//go:build linux && !amd64

package tracer

import (
	"fmt"
	"runtime"

	"github.com/cilium/ebpf"
)

// calibrationFunctions has no functions to probe but on x86-64.
func calibrationFunctions() ([]calibFunction, error) {
	return nil, fmt.Errorf("calibrating probe costs on %s: %w", runtime.GOARCH, ebpf.ErrNotSupported)
}

// callN is never called on this architecture.
func callN(uintptr, int) {}
