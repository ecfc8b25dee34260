//go:build linux && (amd64 || arm64)

package receiver

import (
	"runtime/debug"
	"runtime/metrics"
)

// startGarbageBytes is how much Start may allocate before it hands its
// garbage back to the system when it ends. Reading a large file's code
// (function: "*" on PostgreSQL decodes every instruction of 9,500
// functions) allocates hundreds of MiB that are garbage once the probes
// are attached; the Go runtime would keep them resident until its next
// collection, which the heap goal Start raised puts off for minutes.
const startGarbageBytes = 64 << 20

// heapAllocated returns the bytes the process has allocated on the heap
// since it started.
func heapAllocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// returnStartGarbage collects the garbage of a Start that allocated
// startGarbageBytes or more since allocatedBefore (heapAllocated) and
// returns the memory to the system: a collection of the heap Start leaves
// live (tens of milliseconds), once.
func returnStartGarbage(allocatedBefore uint64) bool {
	if heapAllocated()-allocatedBefore < startGarbageBytes {
		return false
	}
	debug.FreeOSMemory()
	return true
}
