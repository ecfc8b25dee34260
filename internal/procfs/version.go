package procfs

import (
	"fmt"
	"os"
)

// FileVersion identifies the exact contents of a file: the file (FileID)
// and its size and modification time. A file replaced at its path (a
// package upgrade writes a new inode) or changed in place has another
// FileVersion, and offsets read from the old one do not apply to it.
type FileVersion struct {
	FileID
	Size      int64
	ModTimeNs int64
}

// VersionOf returns the version of an open regular file (fstat); it
// refuses anything else.
func VersionOf(f *os.File) (FileVersion, error) {
	fi, err := f.Stat()
	if err != nil {
		return FileVersion{}, fmt.Errorf("stat %s: %w", f.Name(), err)
	}
	if !fi.Mode().IsRegular() {
		return FileVersion{}, fmt.Errorf("%s: not a regular file", f.Name())
	}
	return FileVersion{FileID: IDOf(fi), Size: fi.Size(), ModTimeNs: fi.ModTime().UnixNano()}, nil
}
