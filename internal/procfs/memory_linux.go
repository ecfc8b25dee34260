package procfs

import (
	"fmt"
	"io"
	"io/fs"

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

// ExecutableID returns the identity (device and inode) of process pid's
// executable: statx(2) of /proc/PID/exe with AT_STATX_DONT_SYNC, which
// takes the attributes the kernel holds and never asks a file system's
// server (a FUSE server that stopped answering, a tenant's on purpose,
// would hold the caller for good: its GETATTR waits uninterruptibly).
func (f FS) ExecutableID(pid int) (FileID, error) {
	var stx unix.Statx_t
	p := f.pidPath(pid, "exe")
	if err := unix.Statx(unix.AT_FDCWD, p, unix.AT_STATX_DONT_SYNC, unix.STATX_INO, &stx); err != nil {
		return FileID{}, &fs.PathError{Op: "statx", Path: p, Err: err}
	}
	return FileID{Dev: unix.Mkdev(stx.Dev_major, stx.Dev_minor), Ino: stx.Ino}, nil
}
