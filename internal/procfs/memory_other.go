//go:build !linux

package procfs

import "errors"

// ReadAt is only implemented on Linux.
func (m ProcessMemory) ReadAt(p []byte, addr uint64) error {
	return errors.New("reading another process's memory is a Linux feature")
}
