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
// or a directory in tests. The zero Root is "/". A Root is a name: each of
// its methods opens the directory anew. To resolve several paths in one
// tree (a process's root, which a reused pid could make another's), open
// it once with [Root.OpenDir] and use the [Dir].
//
// Paths are resolved inside the root, as chroot(2) would: ".." stops at
// the root and an absolute symbolic link starts again at the root, so a
// file system the collector does not trust (a container's) cannot lead it
// to a file outside; magic links (/proc/PID/root, /proc/PID/fd/N) are
// refused. On Linux this is openat2(2) with RESOLVE_IN_ROOT and
// RESOLVE_NO_MAGICLINKS (Linux 5.6; the receiver needs 5.15), resolved by
// the kernel without races. Where openat2 is refused (a seccomp profile
// that predates it) the path is walked in user space one component at a
// time from the root's descriptor (openat with O_NOFOLLOW, symbolic links
// read and resolved from the root, ".." taken back along the walk):
// that walk never leaves the root either, but it is not atomic: a tree
// that changes meanwhile can make it open another file of the root than
// the one the path named at any single instant, and a symbolic link's
// text is followed as written, with no kernel check of magic links beyond
// O_NOFOLLOW.
type Root string

// Tree is a file system tree paths are resolved in: a [Root] (opened at
// each call) or a [Dir] (opened once).
type Tree interface {
	// Open opens name for reading, resolved inside the tree, without
	// blocking ([Dir.Open]).
	Open(name string) (*os.File, error)
	// OpenRegular opens the regular file name for reading without
	// blocking, and refuses anything else ([Dir.OpenRegular]).
	OpenRegular(name string) (*os.File, fs.FileInfo, error)
	// Stat returns the information and identity of name resolved inside
	// the tree, following a final symbolic link inside it.
	Stat(name string) (fs.FileInfo, FileID, error)
	// ReadFile reads at most limit bytes of name and says whether the
	// file is longer.
	ReadFile(name string, limit int64) ([]byte, bool, error)
	// Display returns name as the collector sees it, for messages only:
	// never open it.
	Display(name string) string
}

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
// path lead elsewhere, so it is for tests and messages only: reach files
// through a [Dir].
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
	d, err := r.OpenDir()
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Open(name)
}

// OpenRegular opens the regular file name for reading without blocking
// ([Dir.OpenRegular]).
func (r Root) OpenRegular(name string) (*os.File, fs.FileInfo, error) {
	d, err := r.OpenDir()
	if err != nil {
		return nil, nil, err
	}
	defer d.Close()
	return d.OpenRegular(name)
}

// Stat returns the file information and identity of name resolved inside
// the root, following a final symbolic link. It needs search permission on
// the directories on the way, not read permission on the file.
func (r Root) Stat(name string) (fs.FileInfo, FileID, error) {
	d, err := r.OpenDir()
	if err != nil {
		return nil, FileID{}, err
	}
	defer d.Close()
	return d.Stat(name)
}

// ReadFile reads at most limit bytes of name resolved inside the root and
// says whether the file is longer than that.
func (r Root) ReadFile(name string, limit int64) (data []byte, truncated bool, err error) {
	d, err := r.OpenDir()
	if err != nil {
		return nil, false, err
	}
	defer d.Close()
	return d.ReadFile(name, limit)
}

// Display returns name as the collector sees it, for messages.
func (r Root) Display(name string) string { return r.display(name) }

// Dir is a root directory opened once: every path resolved in it is
// resolved from its descriptor (an O_PATH descriptor of the directory on
// Linux), so the tree cannot be exchanged under the resolutions that
// follow (a process that exits and whose pid is reused, a container that
// swaps a name for a symbolic link meanwhile). Paths are resolved as in
// [Root]. A Dir owns its descriptor until Close; the files it opens are
// the caller's.
type Dir struct {
	fd   *os.File
	name Root
	// noXDev says paths are resolved without crossing a mount point
	// (OpenProcessRoot: a process with FUSE mounts), mnt being the id of
	// the root's mount.
	noXDev bool
	mnt    uint64
}

// Close closes the directory's descriptor.
func (d *Dir) Close() error { return d.fd.Close() }

// Root returns the name the directory was opened as, for messages.
func (d *Dir) Root() Root { return d.name }

// Display returns name as the collector sees it, for messages only: never
// open it.
func (d *Dir) Display(name string) string { return d.name.display(name) }

// Fd returns the directory's descriptor, valid until Close.
func (d *Dir) Fd() int { return int(d.fd.Fd()) }

// ID returns the identity of the directory itself (fstat of its
// descriptor).
func (d *Dir) ID() (FileID, error) {
	fi, err := d.fd.Stat()
	if err != nil {
		return FileID{}, err
	}
	return IDOf(fi), nil
}

// Open opens the file name (absolute or relative, both taken from the root)
// for reading, without blocking (O_NONBLOCK, O_NOCTTY: a FIFO or a device
// found where a directory or file was expected cannot hold the caller).
// The caller owns the file.
func (d *Dir) Open(name string) (*os.File, error) {
	return d.open(name, os.O_RDONLY|oNonblockNoctty)
}

// ErrNotRegular says a path leads to something other than a regular file
// (a directory, a FIFO, a device, a socket): it is not read.
var ErrNotRegular = errors.New("not a regular file")

// NotRegularError says which path led to something other than a regular
// file, and what that is. It matches ErrNotRegular.
type NotRegularError struct {
	// Path is the path as the collector shows it.
	Path string
	// Kind is what the file is: "a FIFO", "a character device", ….
	Kind string
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s: %v (%s)", e.Path, ErrNotRegular, e.Kind)
}

// Is makes errors.Is(err, ErrNotRegular) true.
func (e *NotRegularError) Is(target error) bool { return target == ErrNotRegular }

// OpenRegular opens the regular file name for reading, without blocking,
// and refuses anything else with an error that wraps ErrNotRegular and
// says what it is. It opens name as a path-only descriptor (O_PATH), which
// runs no driver's or FIFO's open, checks that fstat calls it a regular
// file, and only then opens that very file for reading (through
// /proc/self/fd/N, O_NONBLOCK and O_NOCTTY): a container's node of a
// device (the host's watchdog, armed by an open) or its FIFO (whose open
// releases a waiting writer) is never opened. The caller owns the file;
// its reads never block on a regular file.
func (d *Dir) OpenRegular(name string) (*os.File, fs.FileInfo, error) {
	p, err := d.open(name, oPath)
	if err != nil {
		return nil, nil, err
	}
	defer p.Close()
	fi, err := p.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, &NotRegularError{Path: d.Display(name), Kind: FileKind(fi.Mode())}
	}
	f, err := reopen(p, os.O_RDONLY|oNonblockNoctty, d.Display(name))
	if err != nil {
		return nil, nil, err
	}
	opened, err := f.Stat()
	if err == nil && !os.SameFile(fi, opened) {
		err = fmt.Errorf("%s: reopened as another file", d.Display(name))
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, opened, nil
}

// OpenDirectory opens the directory name as a path-only descriptor (to
// watch it with inotify through /proc/self/fd/N, say). The caller owns it.
func (d *Dir) OpenDirectory(name string) (*os.File, error) {
	return d.open(name, oPath|oDirectory)
}

// Stat returns the file information and identity of name resolved inside
// the root, following a final symbolic link. It needs search permission on
// the directories on the way, not read permission on the file.
func (d *Dir) Stat(name string) (fs.FileInfo, FileID, error) {
	f, err := d.open(name, oPath)
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

// ReadFile reads at most limit bytes of the regular file name and says
// whether the file is longer than that.
func (d *Dir) ReadFile(name string, limit int64) (data []byte, truncated bool, err error) {
	f, _, err := d.OpenRegular(name)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	return readLimited(f, limit)
}

// Realpath returns the path, inside the root, that name leads to: its
// symbolic links resolved inside the root. It is computed by descriptor
// (each component opened with O_NOFOLLOW from the one before) and names a
// file only as it was during the call: open the result through the Dir.
func (d *Dir) Realpath(name string) (string, error) {
	f, p, err := d.walk(name, oPath)
	if err != nil {
		return "", err
	}
	f.Close()
	return p, nil
}

// FileKind names what a mode says a file is, for messages: "a directory",
// "a FIFO", "a character device", ….
func FileKind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m&fs.ModeDir != 0:
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return m.Type().String()
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
