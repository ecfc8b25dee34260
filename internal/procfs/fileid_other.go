//go:build !unix

package procfs

import "io/fs"

// IDOf returns the zero FileID: only Unix systems have device and inode
// numbers.
func IDOf(fs.FileInfo) FileID { return FileID{} }
