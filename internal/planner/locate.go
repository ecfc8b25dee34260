package planner

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"

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
// image shares one file. Each is opened once, inside the root it was found
// in (a process's root opened as one descriptor, openat2 RESOLVE_IN_ROOT):
// a container cannot swap a name for a link to a host file between the
// lookup and the read, since nothing is looked up again.
type HostLocator struct {
	// FS reads /proc ("" is the live system).
	FS procfs.FS
	// Resolver resolves names on the host.
	Resolver procfs.Resolver

	// scan, when set, holds the mount namespaces found by the first
	// Locate that looked, for the others of one Resolve (see batch).
	scan *namespaceScan
}

// namespaceScan is one look at the machine's mount namespaces: one
// process of each other than the collector's.
type namespaceScan struct {
	done bool
	pids []int
}

// batch returns a copy of l that looks at the machine's mount namespaces
// once for every target it locates: Resolve locates all its targets within
// moments, and looking once per target read every process's namespace
// link once per target (2,000 targets on a node of 200 processes: 400,000
// readlinks, 0.6 s of Start).
func (l HostLocator) batch() HostLocator {
	l.scan = &namespaceScan{}
	return l
}

// Locate implements Locator. Each file is opened once, inside the tree it
// was found in (see Candidate).
func (l HostLocator) Locate(t config.Target) (_ []Candidate, err error) {
	var out []Candidate
	defer func() {
		if err != nil {
			closeAll(out)
		}
	}()
	seen := map[procfs.FileID]bool{}
	add := func(c *Candidate) {
		id := c.ID.FileID
		if seen[id] {
			c.Close()
			return
		}
		seen[id] = true
		out = append(out, *c)
	}
	name := !strings.ContainsRune(t.Path, '/')
	if t.PID != 0 {
		// Read before the process's root is opened: a pid reused after
		// this shows a later start time (see Candidate.ProcessStart).
		start, err := l.FS.StartTime(t.PID)
		if err != nil {
			return nil, fmt.Errorf("process %d does not exist", t.PID)
		}
		c, err := l.inProcess(t.PID, t.Path, name, searchOf(t))
		if err != nil {
			return nil, err
		}
		if c != nil {
			c.ProcessStart = start
			add(c)
		}
		return out, nil
	}
	host, err := procfs.Root("").OpenDir()
	if err != nil {
		return nil, readError(err)
	}
	defer host.Close()
	var hostErr error
	if name {
		res := l.Resolver
		if res.Root == nil {
			res.Root = host
		}
		r, err := res.Resolve(t.Path)
		if err == nil {
			c, err := openCandidate(host, r.Path, string(r.Source))
			switch {
			case err != nil:
				return nil, err
			case c != nil:
				add(c)
			}
		}
		hostErr = err
		if err != nil && t.FromRecipe != nil {
			// The recipe's usual places of a file PATH does not know.
			found := searchRecipe(host, t.FromRecipe.Search)
			for _, c := range found {
				add(&c)
			}
			if len(found) > 0 {
				hostErr = nil
			}
		}
	} else {
		c, err := openCandidate(host, t.Path, "path")
		if err != nil {
			return nil, err
		}
		if c != nil {
			add(c)
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
				if c, err := l.inProcess(pid, t.Path, name, searchOf(t)); err == nil && c != nil {
					add(c)
				}
			}
		}
	}
	// The other mount namespaces: one process of each.
	for _, pid := range l.namespaces() {
		c, err := l.inProcess(pid, t.Path, name, searchOf(t))
		if err == nil && c != nil {
			add(c)
		}
	}
	if len(out) == 0 && hostErr != nil && !t.Optional {
		return nil, hostErr
	}
	return out, nil
}

// openCandidate opens path in the collector's own view (host) as a
// candidate; nil when there is no such file.
func openCandidate(host *procfs.Dir, path, how string) (*Candidate, error) {
	f, _, err := host.OpenRegular(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		return nil, notRegular(err)
	}
	id, err := procfs.VersionOf(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Candidate{Path: path, SeenAs: path, How: how, File: f, ID: id}, nil
}

// notRegular explains an error opening a target's file without repeating
// its path.
func notRegular(err error) error {
	var nr *procfs.NotRegularError
	if errors.As(err, &nr) {
		return fmt.Errorf("%w (%s)", procfs.ErrNotRegular, nr.Kind)
	}
	return readError(err)
}

func closeAll(cands []Candidate) {
	for _, c := range cands {
		c.Close()
	}
}

// LocateInProcess returns the file of target t as process pid sees it, or
// nil when the process has none: a target discovered when a process starts
// (a container of a new image, a file that appeared). The caller owns the
// Candidate.
func (l HostLocator) LocateInProcess(t config.Target, pid int) (*Candidate, error) {
	return l.inProcess(pid, t.Path, !strings.ContainsRune(t.Path, '/'), searchOf(t))
}

// searchOf returns the usual places of target t's recipe, if it has one.
func searchOf(t config.Target) []string {
	if t.FromRecipe == nil {
		return nil
	}
	return t.FromRecipe.Search
}

// inProcess finds the target's file as process pid sees it: a library
// name among its mappings, an executable name as its own executable, a path
// inside its root; a name found nowhere else in the first regular file of
// the globs of search (a recipe's usual places) inside its root. The root
// is opened once, and every name is resolved, every directory of a glob
// read, and the file opened from that descriptor.
func (l HostLocator) inProcess(pid int, path string, name bool, search []string) (_ *Candidate, err error) {
	ownNS, err1 := l.FS.MountNamespace(os.Getpid())
	theirNS, err2 := l.FS.MountNamespace(pid)
	root, err := l.FS.OpenProcessRoot(pid)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil // the process is gone
		}
		return nil, fmt.Errorf("in process %d: %w", pid, readError(err))
	}
	keepRoot := false
	defer func() {
		if !keepRoot {
			root.Close()
		}
	}()
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
			in.LibraryPath = l.FS.LibraryPath(pid, root)
			r, err = in.Resolve(path)
			how = string(r.Source) + " of process " + strconv.Itoa(pid)
			if err != nil {
				// The recipe's usual places, in the process's own tree.
				found, pattern := firstRegular(root, search)
				if found == "" {
					return nil, fmt.Errorf("in process %d: %w", pid, err)
				}
				r, how = procfs.Resolved{Path: found}, "the recipe's usual place "+pattern+" in the root of process "+strconv.Itoa(pid)
			}
		}
		path = r.Path
	}
	f, _, err := root.OpenRegular(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		return nil, nil
	case errors.Is(err, procfs.ErrNotRegular):
		return nil, fmt.Errorf("%s in process %d: %w", path, pid, notRegular(err))
	case err != nil:
		return nil, readError(err)
	}
	id, err := procfs.VersionOf(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	c := &Candidate{Path: root.Display(path), SeenAs: path, How: how, File: f, ID: id}
	// The mount namespace read before and after the root was opened: a
	// pid reused meanwhile does not lend the collector's view to another
	// process's root.
	ownAfter, err3 := l.FS.MountNamespace(pid)
	if err1 == nil && err2 == nil && err3 == nil && ownNS == theirNS && theirNS == ownAfter && l.sameRoot(root) {
		// The collector sees what the process sees: the host path stays
		// valid when the process exits.
		c.Path, c.How = path, how+" (the host's path)"
	} else {
		c.Root, c.ThroughRoot, keepRoot = root, true, true
	}
	return c, nil
}

// sameRoot says whether a process's root directory is the collector's own.
func (l HostLocator) sameRoot(root *procfs.Dir) bool {
	if l.FS.Root != "" && l.FS.Root != "/" {
		return false
	}
	theirs, err := root.ID()
	if err != nil {
		return false
	}
	fi, err := os.Stat("/")
	if err != nil {
		return false
	}
	own := procfs.IDOf(fi)
	return own != procfs.FileID{} && theirs == own
}

// namespaces returns one process of every mount namespace but the
// collector's own.
func (l HostLocator) namespaces() []int {
	if l.scan == nil {
		return l.scanNamespaces()
	}
	if !l.scan.done {
		l.scan.pids, l.scan.done = l.scanNamespaces(), true
	}
	return l.scan.pids
}

func (l HostLocator) scanNamespaces() []int {
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
