package procfs

import (
	"fmt"
	"io"

	"golang.org/x/sys/unix"
)

// ReadAt fills p with the bytes at address addr of the process's memory,
// with process_vm_readv(2): a read that the process's mappings end early
// fails with io.ErrUnexpectedEOF.
func (m ProcessMemory) ReadAt(p []byte, addr uint64) error {
	if len(p) == 0 {
		return nil
	}
	local := []unix.Iovec{{Base: &p[0]}}
	local[0].SetLen(len(p))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: len(p)}}
	n, err := unix.ProcessVMReadv(m.PID, local, remote, 0)
	if err != nil {
		return fmt.Errorf("reading %d bytes at %#x of process %d: %w", len(p), addr, m.PID, err)
	}
	if n != len(p) {
		return fmt.Errorf("reading %d bytes at %#x of process %d: %w", len(p), addr, m.PID, io.ErrUnexpectedEOF)
	}
	return nil
}
