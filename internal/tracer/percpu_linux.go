package tracer

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// perCPUBatch is how many elements of a per-CPU array one system call
// reads (a span's statistics are ~600 bytes per CPU).
const perCPUBatch = 256

// readPerCPU reads elements [0, n) of per-CPU array map m and calls each
// with every element's per-CPU values, valid only during the call. It
// reads perCPUBatch elements per system call into one buffer the kernel
// writes directly (BPF_MAP_LOOKUP_BATCH, Linux 5.6): one lookup per element,
// each allocating its values, made 30,000 system calls and 20 MiB of
// garbage per collection for 20,000 probes of a function pattern. Where the
// kernel refuses batches it reads one element at a time.
func readPerCPU[T any](m *ebpf.Map, n int, each func(i int, perCPU []T)) error {
	if n == 0 {
		return nil
	}
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return err
	}
	batch := min(n, perCPUBatch)
	keys := make([]uint32, batch)
	vals := make([]T, batch*cpus)
	var cursor ebpf.MapBatchCursor
	for done := 0; done < n; {
		want := min(batch, n-done)
		got, err := m.BatchLookup(&cursor, keys[:want], vals[:want*cpus], nil)
		if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			if done == 0 && errors.Is(err, ebpf.ErrNotSupported) {
				return readPerCPUEach(m, n, cpus, each)
			}
			return fmt.Errorf("reading elements from %d: %w", done, err)
		}
		for k := 0; k < got; k++ {
			i := int(keys[k])
			if i >= n {
				continue
			}
			each(i, vals[k*cpus:(k+1)*cpus])
		}
		done += got
		if got == 0 || errors.Is(err, ebpf.ErrKeyNotExist) {
			if done < n {
				return fmt.Errorf("read %d elements of %d", done, n)
			}
			break
		}
	}
	return nil
}

// readPerCPUEach is readPerCPU one element at a time.
func readPerCPUEach[T any](m *ebpf.Map, n, cpus int, each func(i int, perCPU []T)) error {
	vals := make([]T, cpus)
	for i := 0; i < n; i++ {
		if err := m.Lookup(uint32(i), vals); err != nil {
			return fmt.Errorf("reading element %d: %w", i, err)
		}
		each(i, vals)
	}
	return nil
}
