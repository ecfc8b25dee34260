//go:build !linux

package procfs

import (
	"errors"
	"os"
)

// ExecutableID returns the identity (device and inode) of process pid's
// executable: stat(2) of /proc/PID/exe.
func (f FS) ExecutableID(pid int) (FileID, error) {
	fi, err := os.Stat(f.pidPath(pid, "exe"))
	if err != nil {
		return FileID{}, err
	}
	return IDOf(fi), nil
}

// ReadAt is only implemented on Linux.
func (m ProcessMemory) ReadAt(p []byte, addr uint64) error {
	return errors.New("reading another process's memory is a Linux feature")
}
