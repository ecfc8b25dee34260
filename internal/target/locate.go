package target

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
)

// HostLocator finds the files of targets on this host and in the mount
// namespaces (containers) of its processes:
//   - a name ("libc", "python3") through PATH and the library cache and
//     directories of the host, and, for a pid: target, as that process
//     sees it (the library it has mapped, or its own executable);
//   - an absolute path on the host and inside the root of every other
//     mount namespace (one process of each), or only inside the target's
//     process for a pid: target.
//
// Files are reported once per device and inode: every container of one
// image shares one file.
type HostLocator struct {
	// FS reads /proc ("" is the live system).
	FS procfs.FS
	// Resolver resolves names on the host.
	Resolver procfs.Resolver
}

// Locate implements Locator.
func (l HostLocator) Locate(t config.Target) ([]Candidate, error) {
	var out []Candidate
	seen := map[procfs.FileID]bool{}
	add := func(path, seenAs, how string, id procfs.FileID) {
		if !seen[id] {
			seen[id] = true
			out = append(out, Candidate{Path: path, SeenAs: seenAs, How: how})
		}
	}
	name := !strings.ContainsRune(t.Path, '/')
	if t.PID != 0 {
		if _, err := l.FS.StartTime(t.PID); err != nil {
			return nil, fmt.Errorf("process %d does not exist", t.PID)
		}
		c, id, err := l.inProcess(t.PID, t.Path, name)
		if err != nil {
			return nil, err
		}
		if c != nil {
			add(c.Path, c.SeenAs, c.How, id)
		}
		return out, nil
	}
	var hostErr error
	if name {
		r, err := l.Resolver.Resolve(t.Path)
		if err == nil {
			add(r.Path, r.Path, string(r.Source), r.ID)
		}
		hostErr = err
	} else {
		st, err := os.Stat(t.Path)
		switch {
		case err == nil && st.Mode().IsRegular():
			add(t.Path, t.Path, "path", procfs.IDOf(st))
		case err == nil:
			return nil, fmt.Errorf("not a regular file (%s)", fileKind(st.Mode()))
		case !errors.Is(err, fs.ErrNotExist):
			return nil, readError(err)
		}
	}
	// The processes a selector chooses, as each sees the target: the
	// library its loader would load (DT_RUNPATH, LD_LIBRARY_PATH).
	if t.Process != nil {
		if m, err := t.Process.Compile(); err == nil {
			pids, _ := l.FS.PIDs()
			for _, pid := range pids {
				if ok, err := m.MatchProcess(l.FS, pid); err != nil || !ok {
					continue
				}
				if c, id, err := l.inProcess(pid, t.Path, name); err == nil && c != nil {
					add(c.Path, c.SeenAs, c.How, id)
				}
			}
		}
	}
	// The other mount namespaces: one process of each.
	for _, pid := range l.namespaces() {
		c, id, err := l.inProcess(pid, t.Path, name)
		if err == nil && c != nil {
			add(c.Path, c.SeenAs, c.How, id)
		}
	}
	if len(out) == 0 && hostErr != nil && !t.Optional {
		return nil, hostErr
	}
	return out, nil
}

// LocateInProcess returns the file of target t as process pid sees it, or
// nil when the process has none: a target discovered when a process starts
// (a container of a new image, a file that appeared).
func (l HostLocator) LocateInProcess(t config.Target, pid int) (*Candidate, error) {
	c, _, err := l.inProcess(pid, t.Path, !strings.ContainsRune(t.Path, '/'))
	return c, err
}

// inProcess finds the target's file as process pid sees it: a library
// name among its mappings, an executable name as its own executable, a path
// inside its root.
func (l HostLocator) inProcess(pid int, path string, name bool) (*Candidate, procfs.FileID, error) {
	root := l.FS.ProcessRoot(pid)
	how := "the root of process " + strconv.Itoa(pid)
	if name {
		r, err := l.FS.LibraryInProcess(pid, path)
		how = "the mappings of process " + strconv.Itoa(pid)
		if err != nil {
			if exe, _, err2 := l.FS.Executable(pid); err2 == nil && baseName(exe) == path {
				r, err, how = procfs.Resolved{Path: exe}, nil, "the executable of process "+strconv.Itoa(pid)
			}
		}
		if err != nil {
			// Not mapped (yet): the name as the process's dynamic loader
			// would find it, in its own file system, which it may load later.
			in := l.Resolver
			in.Root = root
			in.LibraryPath = l.FS.LibraryPath(pid)
			if r, err = in.Resolve(path); err != nil {
				return nil, procfs.FileID{}, fmt.Errorf("in process %d: %w", pid, err)
			}
			how = string(r.Source) + " of process " + strconv.Itoa(pid)
		}
		path = r.Path
	}
	hostPath, err := root.Join(path)
	if err != nil {
		return nil, procfs.FileID{}, fmt.Errorf("resolving %s in process %d: %w", path, pid, err)
	}
	own, err1 := l.FS.MountNamespace(os.Getpid())
	theirs, err2 := l.FS.MountNamespace(pid)
	if err1 == nil && err2 == nil && own == theirs && l.FS.Root == "" {
		// The collector sees what the process sees: the host path stays
		// valid when the process exits.
		hostPath, how = path, how+" (the host's path)"
	}
	st, id, err := root.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, procfs.FileID{}, nil
		}
		return nil, procfs.FileID{}, readError(err)
	}
	if !st.Mode().IsRegular() {
		return nil, procfs.FileID{}, fmt.Errorf("%s in process %d: not a regular file (%s)", path, pid, fileKind(st.Mode()))
	}
	return &Candidate{Path: hostPath, SeenAs: path, How: how}, id, nil
}

// namespaces returns one process of every mount namespace but the
// collector's own.
func (l HostLocator) namespaces() []int {
	own, _ := l.FS.MountNamespace(os.Getpid())
	pids, err := l.FS.PIDs()
	if err != nil {
		return nil
	}
	seen := map[uint64]bool{own: true}
	var out []int
	for _, pid := range pids {
		ns, err := l.FS.MountNamespace(pid)
		if err != nil || seen[ns] {
			continue
		}
		seen[ns] = true
		out = append(out, pid)
	}
	return out
}

func baseName(p string) string {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}
