package procfs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Root is a directory that stands for "/" when paths are resolved in it:
// "/" for the collector's own view of the file system, /proc/PID/root for
// the view of process PID (another mount namespace, a container's image),
// or a directory in tests. The zero Root is "/".
//
// Open and Stat resolve every path component inside the root, as chroot(2)
// would: ".." stops at the root and an absolute symbolic link starts again
// at the root, so a file system the collector does not trust (a
// container's) cannot lead it to a file outside. On Linux they use
// openat2(2) with RESOLVE_IN_ROOT (Linux 5.6; the receiver needs 5.15),
// which the kernel resolves without races; where openat2 is refused (a
// seccomp profile that predates it) they fall back to [Root.Join], which
// walks the same way in user space but can be raced by a process that
// changes the tree meanwhile.
type Root string

// maxSymlinks bounds the symbolic links followed by one resolution, as
// MAXSYMLINKS (40) does in the kernel; the kernel's own bound applies to
// openat2.
const maxSymlinks = 40

// Dir returns the directory the root stands for ("/" for the zero Root).
func (r Root) Dir() string {
	if r == "" {
		return "/"
	}
	return string(r)
}

// display returns name as the collector sees it, for error messages.
func (r Root) display(name string) string {
	if r.Dir() == "/" {
		return filepath.Join("/", name)
	}
	return r.Dir() + filepath.Join("/", name)
}

// Join returns the path, below the root's directory, that name resolves to
// when the root is "/": symbolic links are followed inside the root (at
// most 40 of them), ".." stops at the root, and components that do not
// exist are kept as written. Join only computes a path (the semantics of
// github.com/cyphar/filepath-securejoin's SecureJoin): a process that
// changes the tree between Join and the use of its result can make the
// path lead elsewhere, so reach files through [Root.Open] or [Root.Stat].
func (r Root) Join(name string) (string, error) {
	root := filepath.Clean(r.Dir())
	var current string // resolved so far: no symlinks, relative to root, starts with "/"
	remaining := name
	links := 0
	for remaining != "" {
		var part string
		if i := strings.IndexByte(remaining, '/'); i >= 0 {
			part, remaining = remaining[:i], remaining[i+1:]
		} else {
			part, remaining = remaining, ""
		}
		next := filepath.Join("/", current, part)
		if next == "/" {
			current = ""
			continue
		}
		full := filepath.Join(root, next)
		fi, err := os.Lstat(full)
		if err != nil {
			if isNotExistOrNotDir(err) {
				current = next
				continue
			}
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			current = next
			continue
		}
		links++
		if links > maxSymlinks {
			return "", &fs.PathError{Op: "resolve", Path: r.display(name), Err: syscall.ELOOP}
		}
		dest, err := os.Readlink(full)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(dest) {
			current = ""
		}
		remaining = dest + "/" + remaining
	}
	return filepath.Join(root, filepath.Join("/", current)), nil
}

func isNotExistOrNotDir(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

// Open opens the file name (absolute or relative, both taken from the root)
// for reading, resolving it inside the root. The caller owns the file.
func (r Root) Open(name string) (*os.File, error) {
	return r.open(name, os.O_RDONLY)
}

// Stat returns the file information and identity of name resolved inside
// the root, following a final symbolic link. It needs search permission on
// the directories on the way, not read permission on the file.
func (r Root) Stat(name string) (fs.FileInfo, FileID, error) {
	f, err := r.open(name, oPath)
	if err != nil {
		return nil, FileID{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, FileID{}, err
	}
	return fi, IDOf(fi), nil
}

// ReadFile reads at most limit bytes of name resolved inside the root and
// says whether the file is longer than that.
func (r Root) ReadFile(name string, limit int64) (data []byte, truncated bool, err error) {
	f, err := r.Open(name)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	return readLimited(f, limit)
}

// readLimited reads at most limit bytes and says whether there was more.
func readLimited(rd io.Reader, limit int64) ([]byte, bool, error) {
	data, err := io.ReadAll(io.LimitReader(rd, limit+1))
	if err != nil {
		return nil, false, err
	}
	if int64(len(data)) > limit {
		return data[:limit], true, nil
	}
	return data, false, nil
}

// readFileLimited reads at most limit bytes of path (no root) and fails when
// the file is longer.
func readFileLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, truncated, err := readLimited(f, limit)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if truncated {
		return nil, fmt.Errorf("reading %s: longer than %d bytes", path, limit)
	}
	return data, nil
}

// FileID identifies a file: its device, as stat(2)'s st_dev encodes it
// ([Mkdev] of the major and minor numbers), and its inode number.
type FileID struct {
	Dev uint64
	Ino uint64
}

// String formats the id as MAJOR:MINOR:INODE.
func (id FileID) String() string {
	return fmt.Sprintf("%d:%d:%d", DevMajor(id.Dev), DevMinor(id.Dev), id.Ino)
}

// Mkdev encodes a device's major and minor numbers as Linux's st_dev does
// (glibc's makedev).
func Mkdev(major, minor uint32) uint64 {
	ma, mi := uint64(major), uint64(minor)
	return (ma&0x00000fff)<<8 | (ma&0xfffff000)<<32 | (mi & 0x000000ff) | (mi&0xffffff00)<<12
}

// DevMajor returns the major number of a device encoded as st_dev.
func DevMajor(dev uint64) uint32 {
	return uint32((dev>>8)&0x00000fff | (dev>>32)&0xfffff000)
}

// DevMinor returns the minor number of a device encoded as st_dev.
func DevMinor(dev uint64) uint32 {
	return uint32(dev&0x000000ff | (dev>>12)&0xffffff00)
}
