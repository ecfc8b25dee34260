//go:build unix

package procfs

import (
	"io/fs"
	"syscall"
)

// IDOf returns the identity of a file from its information; zero when the
// information does not come from stat(2).
func IDOf(fi fs.FileInfo) FileID {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return FileID{Dev: uint64(st.Dev), Ino: uint64(st.Ino)}
	}
	return FileID{}
}
