//go:build !linux

package procfs

import "os"

const oPath = 0

// open resolves name in user space ([Root.Join]); only Linux has openat2.
// Outside Linux the receiver only reads test trees, so a final component
// swapped for a symbolic link meanwhile is not guarded against.
func (r Root) open(name string, flags int) (*os.File, error) {
	p, err := r.Join(name)
	if err != nil {
		return nil, err
	}
	return os.OpenFile(p, flags, 0)
}
