package procfs

import (
	"errors"
	"io/fs"
	"os"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

const oPath = unix.O_PATH

// openat2Refused is set once openat2 answered ENOSYS or EPERM (a seccomp
// profile that does not know it): later opens go straight to the fallback.
var openat2Refused atomic.Bool

func (r Root) open(name string, flags int) (*os.File, error) {
	flags |= unix.O_CLOEXEC
	if !openat2Refused.Load() {
		f, err := r.openat2(name, flags)
		if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EPERM) {
			return f, err
		}
		openat2Refused.Store(true)
	}
	return r.openJoined(name, flags)
}

func (r Root) openat2(name string, flags int) (*os.File, error) {
	dir, err := unix.Open(r.Dir(), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: r.Dir(), Err: err}
	}
	defer unix.Close(dir)
	rel := strings.TrimLeft(name, "/")
	if rel == "" {
		rel = "."
	}
	how := unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	var fd int
	for {
		fd, err = unix.Openat2(dir, rel, &how)
		if err != unix.EINTR && err != unix.EAGAIN {
			break
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: r.display(name), Err: err}
	}
	return os.NewFile(uintptr(fd), r.display(name)), nil
}

// openJoined is the fallback without openat2: resolve in user space, then
// refuse a final component that became a symbolic link meanwhile.
func (r Root) openJoined(name string, flags int) (*os.File, error) {
	p, err := r.Join(name)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open(p, flags|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: r.display(name), Err: err}
	}
	return os.NewFile(uintptr(fd), r.display(name)), nil
}
