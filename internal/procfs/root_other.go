//go:build !linux

package procfs

import (
	"errors"
	"io/fs"
	"os"
	"strings"
)

const (
	oPath           = 0
	oDirectory      = 0
	oNonblockNoctty = 0
)

// OpenDir opens the root's directory. Outside Linux the receiver only
// reads test trees: paths are resolved in user space ([Root.Join]) and a
// component swapped for a symbolic link meanwhile is not guarded against.
func (r Root) OpenDir() (*Dir, error) {
	f, err := os.Open(r.Dir())
	if err != nil {
		return nil, err
	}
	return &Dir{fd: f, name: r}, nil
}

func reopen(p *os.File, flags int, name string) (*os.File, error) {
	return os.OpenFile(p.Name(), flags, 0)
}

func (d *Dir) open(name string, flags int) (*os.File, error) {
	p, err := d.name.Join(name)
	if err != nil {
		return nil, err
	}
	return os.OpenFile(p, flags, 0)
}

func (d *Dir) walk(name string, flags int) (*os.File, string, error) {
	p, err := d.name.Join(name)
	if err != nil {
		return nil, "", err
	}
	f, err := os.OpenFile(p, flags, 0)
	if err != nil {
		return nil, "", &fs.PathError{Op: "open", Path: d.Display(name), Err: err}
	}
	return f, "/" + strings.TrimLeft(strings.TrimPrefix(p, d.name.Dir()), "/"), nil
}

// mountID is Linux's: outside Linux no process has FUSE mounts to check.
func (d *Dir) mountID() (uint64, error) { return 0, errors.ErrUnsupported }
