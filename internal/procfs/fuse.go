package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// FUSEMount is a mount of a file system a user-space server answers for
// (FUSE: types fuse, fuse.NAME, fuseblk), which may never answer: a hung
// server, or a tenant's on purpose.
type FUSEMount struct {
	// ID is the mount's id (mountinfo field 1).
	ID uint64
	// Point is where it is mounted, as the process whose mountinfo it
	// comes from sees it.
	Point string
	// Type is the file system type ("fuse.sshfs").
	Type string
}

// isFUSE says whether a mountinfo file system type is FUSE's.
func isFUSE(typ string) bool {
	return typ == "fuse" || typ == "fuseblk" || strings.HasPrefix(typ, "fuse.") || strings.HasPrefix(typ, "fuseblk.")
}

// ParseFUSEMounts returns the FUSE mounts of a mountinfo file (proc(5)):
// their ids, mount points (unescaped) and types. Lines that do not parse
// are skipped.
func ParseFUSEMounts(mountinfo []byte) []FUSEMount {
	var out []FUSEMount
	for len(mountinfo) > 0 {
		line := mountinfo
		if i := bytes.IndexByte(mountinfo, '\n'); i >= 0 {
			line, mountinfo = mountinfo[:i], mountinfo[i+1:]
		} else {
			mountinfo = nil
		}
		if !bytes.Contains(line, []byte(" - fuse")) {
			continue // the usual line: no FUSE type after the separator
		}
		pre, post, ok := strings.Cut(string(line), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 6 || len(g) < 1 || !isFUSE(g[0]) {
			continue
		}
		id, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		out = append(out, FUSEMount{ID: id, Point: unescapeMount(f[4]), Type: g[0]})
	}
	return out
}

// FUSEMounts returns the FUSE mounts of process pid's mount namespace
// (/proc/PID/mountinfo, which the kernel writes without asking any file
// system), their points as the process sees them.
func (f FS) FUSEMounts(pid int) ([]FUSEMount, error) {
	data, err := readFileLimited(f.pidPath(pid, "mountinfo"), maxMountinfo)
	if err != nil {
		return nil, err
	}
	return ParseFUSEMounts(data), nil
}

// fuseMountsTTL is how long the FUSE mounts of a mount namespace are
// taken as read: a mount table costs ~65 us to read here, and the
// receiver looks into one process per namespace for every target at
// Start, and into every process that execs.
const fuseMountsTTL = time.Second

// maxFUSECache bounds the namespaces whose FUSE mounts are remembered.
const maxFUSECache = 4096

type fuseCacheKey struct {
	root string // FS.Root
	ns   uint64 // the mount namespace's inode
}

type fuseCacheEntry struct {
	mounts []FUSEMount
	at     time.Time
}

var fuseCache struct {
	sync.Mutex
	m map[fuseCacheKey]fuseCacheEntry
}

// fuseMountsOf returns FUSEMounts of process pid, read at most
// fuseMountsTTL ago for its mount namespace.
func (f FS) fuseMountsOf(pid int) ([]FUSEMount, error) {
	ns, err := f.MountNamespace(pid)
	if err != nil {
		return f.FUSEMounts(pid)
	}
	key := fuseCacheKey{f.Root, ns}
	fuseCache.Lock()
	e, ok := fuseCache.m[key]
	fuseCache.Unlock()
	if ok && time.Since(e.at) < fuseMountsTTL {
		return e.mounts, nil
	}
	at := time.Now()
	mounts, err := f.FUSEMounts(pid)
	if err != nil {
		return nil, err
	}
	if again, err := f.MountNamespace(pid); err != nil || again != ns {
		return mounts, nil // it moved meanwhile: not remembered
	}
	fuseCache.Lock()
	if fuseCache.m == nil || len(fuseCache.m) >= maxFUSECache {
		fuseCache.m = map[fuseCacheKey]fuseCacheEntry{}
	}
	fuseCache.m[key] = fuseCacheEntry{mounts, at}
	fuseCache.Unlock()
	return mounts, nil
}

// ErrFUSERoot says a process's root directory is on a FUSE file system,
// which the collector does not read.
var ErrFUSERoot = errors.New("its root is a FUSE file system, which the collector does not read: a user-space server answers every lookup there and may never answer")

// ErrCrossesMount says a path in the root of a process that has FUSE
// mounts crosses a mount point, which the collector does not do there.
var ErrCrossesMount = errors.New("the path crosses a mount point, which the collector does not do in a process with FUSE mounts (a user-space server may never answer a lookup)")

// OpenProcessRoot opens the root directory of process pid as
// [Root.OpenDir] does, for reading the process's files, so that no lookup
// ever waits for a FUSE server (a tenant's, hung or hostile, which would
// hold the caller for good): a root on FUSE is refused (ErrFUSERoot, found
// by the mount id of the opened root, which asks no file system), and the
// root of a process with any FUSE mount resolves paths without crossing a
// mount point (RESOLVE_NO_XDEV; ErrCrossesMount): its targets must lie on
// its root file system. A FUSE file system mounted after the mount table
// was read (the table of a mount namespace is read at most once a
// second) is not seen.
func (f FS) OpenProcessRoot(pid int) (*Dir, error) {
	d, err := f.ProcessRoot(pid).OpenDir()
	if err != nil {
		return nil, err
	}
	mounts, err := f.fuseMountsOf(pid)
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("reading the mounts of process %d: %w", pid, err)
	}
	if len(mounts) == 0 {
		return d, nil
	}
	id, err := d.mountID()
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("the mount of the root of process %d: %w", pid, err)
	}
	for _, m := range mounts {
		if m.ID == id {
			d.Close()
			return nil, fmt.Errorf("process %d: %w (%s)", pid, ErrFUSERoot, m.Type)
		}
	}
	d.noXDev, d.mnt = true, id
	return d, nil
}
