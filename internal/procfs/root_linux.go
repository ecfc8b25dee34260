package procfs

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

const (
	oPath           = unix.O_PATH
	oDirectory      = unix.O_DIRECTORY
	oNonblockNoctty = unix.O_NONBLOCK | unix.O_NOCTTY
)

// maxOpenRetries bounds the retries of an openat2 that answered EAGAIN
// (a rename elsewhere in the tree raced the resolution of ".."): a
// container renaming in a loop must not hold the collector in one.
const maxOpenRetries = 64

// openat2Refused is set once openat2 answered ENOSYS or EPERM (a seccomp
// profile that does not know it): later opens go straight to the fallback.
var openat2Refused atomic.Bool

// OpenDir opens the root's directory once, as a path-only descriptor
// (O_PATH): the Dir resolves every later path from it. The caller owns the
// Dir. For /proc/PID/root this is the root of process PID at the time of
// the call, whatever becomes of the pid afterwards.
func (r Root) OpenDir() (*Dir, error) {
	fd, err := unix.Open(r.Dir(), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: r.Dir(), Err: err}
	}
	return &Dir{fd: os.NewFile(uintptr(fd), r.Dir()), name: r}, nil
}

// reopen opens the file of the path-only descriptor p anew with flags,
// through /proc/self/fd: the very file p holds, whatever its path has
// become. The file is named name.
func reopen(p *os.File, flags int, name string) (*os.File, error) {
	var fd int
	var err error
	for range maxOpenRetries {
		fd, err = unix.Open("/proc/self/fd/"+strconv.Itoa(int(p.Fd())), flags|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

func (d *Dir) open(name string, flags int) (*os.File, error) {
	flags |= unix.O_CLOEXEC
	if !openat2Refused.Load() {
		f, err := d.openat2(name, flags)
		if !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EPERM) {
			return f, err
		}
		openat2Refused.Store(true)
	}
	f, _, err := d.walk(name, flags)
	return f, err
}

func (d *Dir) openat2(name string, flags int) (*os.File, error) {
	rel := strings.TrimLeft(name, "/")
	if rel == "" {
		rel = "."
	}
	how := unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	if d.noXDev {
		how.Resolve |= unix.RESOLVE_NO_XDEV
	}
	var fd int
	var err error
	for range maxOpenRetries {
		fd, err = unix.Openat2(d.Fd(), rel, &how)
		if err != unix.EINTR && err != unix.EAGAIN {
			break
		}
	}
	if err == unix.EXDEV && d.noXDev {
		err = ErrCrossesMount
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: d.Display(name), Err: err}
	}
	return os.NewFile(uintptr(fd), d.Display(name)), nil
}

// mountID returns the id of the mount the directory's descriptor is on.
func (d *Dir) mountID() (uint64, error) { return mountIDOf(d.Fd()) }

// mountIDOf returns the id of the mount descriptor fd is on, from
// /proc/self/fdinfo (Linux 3.15), which asks no file system.
func mountIDOf(fd int) (uint64, error) {
	data, err := readFileLimited("/proc/self/fdinfo/"+strconv.Itoa(fd), 4<<10)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "mnt_id:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, errors.New("no mnt_id in its fdinfo")
}

// walk resolves name inside the root in user space, one component at a
// time from the root's descriptor, and opens the file with flags: each
// component is opened with O_PATH|O_NOFOLLOW from the directory before
// it; a symbolic link is read (readlinkat) and its text resolved in its
// place, from the root when absolute; ".." goes back to the directory the
// walk came from, and stops at the root; at most maxSymlinks links. The
// final file is opened with flags and O_NOFOLLOW from its directory and
// must be the very file the walk found. It returns the file and its path
// inside the root.
func (d *Dir) walk(name string, flags int) (*os.File, string, error) {
	fail := func(err error) (*os.File, string, error) {
		return nil, "", &fs.PathError{Op: "open", Path: d.Display(name), Err: err}
	}
	// dirs[i] is the descriptor of the directory names[:i] leads to;
	// dirs[0] is the root's, which the Dir owns.
	dirs := []int{d.Fd()}
	var names []string
	defer func() {
		for _, fd := range dirs[1:] {
			unix.Close(fd)
		}
	}()
	pending := splitPath(name)
	links := 0
	for len(pending) > 0 {
		part := pending[0]
		pending = pending[1:]
		if part == ".." {
			if len(dirs) > 1 {
				unix.Close(dirs[len(dirs)-1])
				dirs, names = dirs[:len(dirs)-1], names[:len(names)-1]
			}
			continue
		}
		parent := dirs[len(dirs)-1]
		fd, err := unix.Openat(parent, part, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(err)
		}
		if d.noXDev {
			// Before fstat, which a FUSE server would answer.
			if mnt, err := mountIDOf(fd); err != nil || mnt != d.mnt {
				unix.Close(fd)
				return fail(ErrCrossesMount)
			}
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return fail(err)
		}
		switch {
		case st.Mode&unix.S_IFMT == unix.S_IFLNK:
			links++
			target, err := readlinkFd(fd)
			unix.Close(fd)
			if err != nil {
				return fail(err)
			}
			if links > maxSymlinks {
				return fail(unix.ELOOP)
			}
			if path.IsAbs(target) {
				for _, fd := range dirs[1:] {
					unix.Close(fd)
				}
				dirs, names = dirs[:1], nil
			}
			pending = append(splitPath(target), pending...)
		case len(pending) == 0:
			defer unix.Close(fd)
			final := "/" + strings.Join(append(names, part), "/")
			if flags&unix.O_PATH != 0 && flags&unix.O_DIRECTORY == 0 {
				dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
				if err != nil {
					return fail(err)
				}
				return os.NewFile(uintptr(dup), d.Display(name)), final, nil
			}
			f, err := openSame(parent, part, flags, &st)
			if err != nil {
				return fail(err)
			}
			return os.NewFile(uintptr(f), d.Display(name)), final, nil
		case st.Mode&unix.S_IFMT != unix.S_IFDIR:
			unix.Close(fd)
			return fail(unix.ENOTDIR)
		default:
			dirs, names = append(dirs, fd), append(names, part)
		}
	}
	// The name led to a directory of the walk (the root itself, "/..").
	f, err := unix.Openat(dirs[len(dirs)-1], ".", flags, 0)
	if err != nil {
		return fail(err)
	}
	return os.NewFile(uintptr(f), d.Display(name)), "/" + strings.Join(names, "/"), nil
}

// openSame opens name in directory dir with flags (and O_NOFOLLOW) and
// checks it is the file whose status was want: a name exchanged in the
// meantime is refused.
func openSame(dir int, name string, flags int, want *unix.Stat_t) (int, error) {
	fd, err := unix.Openat(dir, name, flags|unix.O_NOFOLLOW, 0)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if st.Dev != want.Dev || st.Ino != want.Ino {
		unix.Close(fd)
		return -1, unix.EAGAIN
	}
	return fd, nil
}

// readlinkFd reads the symbolic link an O_PATH|O_NOFOLLOW descriptor refers
// to (readlinkat with an empty path, Linux 2.6.39).
func readlinkFd(fd int) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(fd, "", buf)
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		if len(buf) >= unix.PathMax {
			return "", unix.ENAMETOOLONG
		}
		buf = make([]byte, 2*len(buf))
	}
}

// splitPath returns the components of a path but empty ones and ".".
func splitPath(p string) []string {
	var out []string
	for _, part := range strings.Split(p, "/") {
		if part != "" && part != "." {
			out = append(out, part)
		}
	}
	return out
}
