//go:build linux && (amd64 || arm64)

package receiver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/planner"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
)

// Bounds of the file watcher.
const (
	// maxFileRequests bounds the exec'd processes waiting to be looked at.
	maxFileRequests = 4096
	// libraryRecheck is when a process is looked at again after its exec:
	// the dynamic loader maps its libraries after the exec record is sent.
	libraryRecheck = 200 * time.Millisecond
	// upgradeSettle is how long a changed directory is left to settle
	// before its targets are located again (a package manager writes, then
	// renames).
	upgradeSettle = 100 * time.Millisecond
	// detachCheckEvery is how often files replaced at their path are
	// checked for processes still mapping them.
	detachCheckEvery = 5 * time.Second
)

// fileChange is what the watcher hands the drain goroutine, the plan's owner.
type fileChange struct {
	spec   *plan.FileSpec // a new file to append and attach
	detach procfs.FileID  // or a replaced file no process maps any more
	how    string
}

// fileWatcher finds targets' files that appear while the receiver runs: in
// processes that start (containers of a new image, an optional target's
// file), and at targets' paths when a file is replaced (an upgrade, within
// a second through inotify). It reads them (pure work, beside the drain
// goroutine) and hands them to the drain goroutine to attach. A replaced
// file stays attached until no process maps it.
type fileWatcher struct {
	log      *zap.Logger
	planner  *planner.Planner
	targets  []config.Target
	locator  planner.HostLocator
	matchers []*procfs.Matcher // by target: the process selector, compiled
	changes  chan fileChange
	notify   func()   // after a change is sent; nil for none
	requests chan int // pids that execed
	// leftOut says a file could not be read or planned (nil: only logged).
	leftOut func(ti int, c planner.Candidate, err error)
	// pidStarts holds by target the start time of a pid: target's process
	// (plan.PlannedTarget ProcessStart; 0: not known): a process that
	// took its pid later is not looked into for it.
	pidStarts []uint64

	ownMounts uint64 // the collector's mount namespace, 0 if unknown
	ownRoot   string // and its root directory as /proc shows it

	known map[knownFile]bool // files attached or refused, of each target
	// failed holds, per target, the files that could not be read or
	// planned, with their size and modification time: one is read again
	// only once it changed (it may have been half written), not at every
	// exec of a process that has it.
	failed   map[int]map[procfs.FileVersion]bool
	current  map[string]procfs.FileID // SeenAs path → file attached for it
	replaced map[procfs.FileID]string // files replaced at their path
	// stamps holds the identity (with size and modification time) of
	// each attached host file, by path, and its target: a file written in
	// place keeps its inode, and only these say it changed.
	stamps  map[string]fileStamp
	dirs    map[int]string   // inotify watch descriptor → directory
	byDir   map[string][]int // directory → targets with a file there
	inotify int
	// inotifyFile owns the inotify descriptor once watchDirs made it;
	// run closes it when ctx ends, which ends readInotify.
	inotifyFile *os.File
	events      chan int // watch descriptors of changed directories
	// writable holds, per watch descriptor, the names of the attached
	// files in that directory (see modifyMatters). run publishes it,
	// readInotify reads it.
	writable atomic.Pointer[map[int]map[string]bool]
	wg       sync.WaitGroup
}

func newFileWatcher(log *zap.Logger, pl *planner.Planner, targets []config.Target, locator planner.HostLocator) *fileWatcher {
	w := &fileWatcher{
		log: log, planner: pl, targets: targets, locator: locator,
		changes:  make(chan fileChange, 64),
		requests: make(chan int, maxFileRequests),
		known:    map[knownFile]bool{},
		failed:   map[int]map[procfs.FileVersion]bool{},
		current:  map[string]procfs.FileID{},
		replaced: map[procfs.FileID]string{},
		stamps:   map[string]fileStamp{},
		dirs:     map[int]string{},
		byDir:    map[string][]int{},
		inotify:  -1,
	}
	w.ownMounts, _ = locator.FS.MountNamespace(os.Getpid())
	w.ownRoot, _ = os.Readlink(locator.FS.ProcessRoot(os.Getpid()).Dir())
	w.matchers = make([]*procfs.Matcher, len(targets))
	w.pidStarts = make([]uint64, len(targets))
	for ti := range min(len(targets), len(pl.Targets)) {
		w.pidStarts[ti] = pl.Targets[ti].ProcessStart
	}
	for ti, t := range targets {
		if t.Process != nil {
			w.matchers[ti], _ = t.Process.Compile() // valid: Start compiled it
		}
	}
	for _, f := range pl.Files {
		id := f.ID.FileID
		w.known[knownFile{f.Target, id}] = true
		w.current[f.SeenAs] = id
		w.stamp(f)
	}
	return w
}

// knownFile is a file of a target the watcher attached or refused: one
// map of them all (a map per target was ~290 bytes of each of 2,000).
type knownFile struct {
	target int
	id     procfs.FileID
}

// fileStamp is what an attached file was when it was read.
type fileStamp struct {
	id     procfs.FileVersion
	target int
}

// stamp remembers an attached file read at a path of the collector's own
// view (not through a process's root).
func (w *fileWatcher) stamp(f plan.File) {
	if !f.ThroughRoot && len(w.stamps) < maxFileRequests {
		w.stamps[f.Path] = fileStamp{id: f.ID, target: f.Target}
	}
}

// checkWritten detaches at once the attached files of directory dir that
// were written in place (the same inode, another size or modification
// time): their probes sit at offsets of the old contents, where in the
// new ones they could land inside an instruction. Their targets are
// located again once the directory settles, which reads the new contents.
// It returns the targets to locate again.
func (w *fileWatcher) checkWritten(ctx context.Context, dir string) []int {
	var again []int
	for path, st := range w.stamps {
		if filepath.Dir(path) != dir {
			continue
		}
		fi, err := os.Stat(path)
		if err != nil {
			continue // gone or renamed: the replacement is found by locating
		}
		id := procfs.IDOf(fi)
		if id != st.id.FileID {
			continue // another file at the path: an upgrade by rename
		}
		if fi.Size() == st.id.Size && fi.ModTime().UnixNano() == st.id.ModTimeNs {
			continue
		}
		delete(w.stamps, path)
		w.publishWritable()
		delete(w.known, knownFile{st.target, id})
		w.send(ctx, fileChange{detach: id, how: "written in place: " + path})
		again = append(again, st.target)
	}
	return again
}

// publishWritable publishes the names of the attached files of each
// watched directory for readInotify; run calls it when files are attached,
// detached or watched.
func (w *fileWatcher) publishWritable() {
	wdOf := make(map[string]int, len(w.dirs))
	for wd, dir := range w.dirs {
		wdOf[dir] = wd
	}
	m := map[int]map[string]bool{}
	for path := range w.stamps {
		wd, ok := wdOf[filepath.Dir(path)]
		if !ok {
			continue
		}
		if m[wd] == nil {
			m[wd] = map[string]bool{}
		}
		m[wd][filepath.Base(path)] = true
	}
	w.writable.Store(&m)
}

// modifyMatters says whether an inotify event can change what is attached:
// any event but a bare IN_MODIFY (created, moved in, closed after writing,
// attributes), and IN_MODIFY only of an attached file (written in place).
// Every write to any file of the directory is an IN_MODIFY: a log growing
// next to a traced binary must not make its target be located again.
// The name is the event's, NUL-padded.
func (w *fileWatcher) modifyMatters(wd int, mask uint32, name []byte) bool {
	if mask&^unix.IN_MODIFY != 0 {
		return true
	}
	m := w.writable.Load()
	return m != nil && (*m)[wd][string(bytes.TrimRight(name, "\x00"))]
}

// execed asks the watcher to look at a process that execed; it never
// blocks (a full queue drops the request, and says so).
func (w *fileWatcher) execed(pid int) bool {
	select {
	case w.requests <- pid:
		return true
	default:
		return false
	}
}

// run watches until ctx ends.
func (w *fileWatcher) run(ctx context.Context) {
	w.watchDirs()
	if w.inotify >= 0 {
		w.wg.Add(1)
		go w.readInotify(ctx)
	}
	type recheck struct {
		pid int
		at  time.Time
	}
	var rechecks []recheck
	dirty := map[int]bool{} // targets to locate again
	var settle <-chan time.Time
	detach := time.NewTicker(detachCheckEvery)
	defer detach.Stop()
	for {
		var next <-chan time.Time
		if len(rechecks) > 0 {
			next = time.After(time.Until(rechecks[0].at))
		}
		select {
		case <-ctx.Done():
			if w.inotifyFile != nil {
				_ = w.inotifyFile.Close() // ends readInotify's read
			}
			w.wg.Wait()
			return
		case pid := <-w.requests:
			if !w.lookAt(ctx, pid) {
				continue // nothing more to find once its libraries are mapped
			}
			if len(rechecks) < maxFileRequests {
				rechecks = append(rechecks, recheck{pid, time.Now().Add(libraryRecheck)})
			}
		case <-next:
			w.lookAt(ctx, rechecks[0].pid)
			rechecks = rechecks[1:]
		case wd := <-w.events:
			for _, ti := range w.byDir[w.dirs[wd]] {
				dirty[ti] = true
			}
			for _, ti := range w.checkWritten(ctx, w.dirs[wd]) {
				dirty[ti] = true
			}
			if settle == nil {
				settle = time.After(upgradeSettle)
			}
		case <-settle:
			settle = nil
			for ti := range dirty {
				w.relocate(ctx, ti)
			}
			clear(dirty)
		case <-detach.C:
			w.checkReplaced(ctx)
		}
	}
}

// lookAt looks for the targets' files as process pid sees them, and says
// whether looking again once its dynamic loader has mapped its libraries
// may find more.
func (w *fileWatcher) lookAt(ctx context.Context, pid int) (again bool) {
	same := -1 // whether pid sees the collector's file system; -1: not asked yet
	for ti, t := range w.targets {
		if t.PID != 0 && t.PID != pid {
			continue
		}
		if t.PID != 0 && w.pidStarts[ti] != 0 {
			if start, err := w.locator.FS.StartTime(pid); err != nil || start != w.pidStarts[ti] {
				continue // the target's process exited: its pid is another's
			}
		}
		byName := !strings.ContainsRune(t.Path, '/')
		if !byName {
			// A path names, in a process that sees the collector's file
			// system, the very file the collector located at start, and
			// inotify follows what happens at that path since: looking
			// inside the process finds nothing new. Most execs on a host
			// are such, and this spares them a dozen system calls each.
			if same < 0 {
				view, gone := w.sameView(pid)
				if gone {
					// Exited already (most execs of a busy host are
					// short-lived): nothing to find inside it.
					return false
				}
				same = boolInt(view)
			}
			if same == 1 {
				continue
			}
		}
		again = again || byName
		if m := w.matchers[ti]; m != nil {
			if ok, err := m.MatchProcess(w.locator.FS, pid); err != nil || !ok {
				continue
			}
		}
		c, err := w.locator.LocateInProcess(t, pid)
		if err != nil || c == nil {
			continue
		}
		w.consider(ctx, ti, *c)
	}
	return again
}

// sameView says whether process pid sees the file system as the collector
// does: the same mount namespace and the same root directory; gone says
// the process exited before it could tell.
func (w *fileWatcher) sameView(pid int) (same, gone bool) {
	fs := w.locator.FS
	if fs.Root != "" || w.ownMounts == 0 || w.ownRoot == "" {
		return false, false
	}
	theirs, err := fs.MountNamespace(pid)
	if err != nil || theirs != w.ownMounts {
		return false, errors.Is(err, iofs.ErrNotExist) || errors.Is(err, unix.ESRCH)
	}
	root, err := os.Readlink(fs.ProcessRoot(pid).Dir())
	return err == nil && root == w.ownRoot, errors.Is(err, iofs.ErrNotExist) || errors.Is(err, unix.ESRCH)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// relocate locates target ti again after its directory changed.
func (w *fileWatcher) relocate(ctx context.Context, ti int) {
	cands, err := w.locator.Locate(w.targets[ti])
	if err != nil {
		w.log.Warn("Locating a target again after its file changed", zap.String("target", w.targets[ti].Path), zap.Error(err))
		return
	}
	for _, c := range cands {
		w.consider(ctx, ti, c)
	}
}

// consider reads a candidate file of target ti that the receiver has not
// seen, and hands it on. It takes c: its identity is that of the file the
// locator opened, and that very file is read and, if it is new, attached.
func (w *fileWatcher) consider(ctx context.Context, ti int, c planner.Candidate) {
	id := c.ID.FileID
	if w.known[knownFile{ti, id}] {
		c.Close()
		return
	}
	full := c.ID // with its size and modification time
	if w.failed[ti][full] {
		c.Close()
		return // the same contents failed already
	}
	w.known[knownFile{ti, id}] = true
	thisDir := filepath.Dir(c.SeenAs)
	throughRoot := c.ThroughRoot
	readCtx, cancel := context.WithTimeout(ctx, debuginfodFileBound)
	spec, err := w.planner.ReadFileContext(readCtx, ti, c)
	cancel()
	switch {
	case errors.Is(err, planner.ErrBuildIDMismatch):
		w.log.Warn("File not attached: another build than the target's build_id", zap.String("path", c.Path), zap.Error(err))
		w.send(ctx, fileChange{how: "refused"})
		return
	case err != nil:
		if w.leftOut != nil {
			w.leftOut(ti, c, err)
		} else {
			w.log.Warn("File not attached", zap.String("path", c.Path), zap.String("found", c.How), zap.Error(err))
		}
		w.send(ctx, fileChange{how: "failed"})
		delete(w.known, knownFile{ti, id}) // read again at its next change: it may be half written
		if w.failed[ti] == nil {
			w.failed[ti] = map[procfs.FileVersion]bool{} // on the target's first failure
		}
		if len(w.failed[ti]) >= maxFileRequests {
			clear(w.failed[ti])
		}
		w.failed[ti][full] = true
		return
	}
	w.stamp(spec.File)
	if old, ok := w.current[c.SeenAs]; ok && old != id {
		w.replaced[old] = c.SeenAs
	}
	w.current[c.SeenAs] = id
	if !throughRoot {
		w.watchDir(ti, thisDir)
	}
	w.publishWritable()
	w.send(ctx, fileChange{spec: spec, how: c.How})
}

func (w *fileWatcher) send(ctx context.Context, ch fileChange) {
	select {
	case w.changes <- ch:
		if w.notify != nil {
			w.notify()
		}
	case <-ctx.Done():
		if ch.spec != nil {
			ch.spec.Close()
		}
	}
}

// closePending closes the files of the changes nobody will apply, once
// run has returned.
func (w *fileWatcher) closePending() {
	for {
		select {
		case ch := <-w.changes:
			if ch.spec != nil {
				ch.spec.Close()
			}
		default:
			return
		}
	}
}

// checkReplaced hands on the replaced files no process maps any more.
func (w *fileWatcher) checkReplaced(ctx context.Context) {
	if len(w.replaced) == 0 {
		return
	}
	mapped := map[procfs.FileID]bool{}
	fs := w.locator.FS
	pids, err := fs.PIDs()
	if err != nil {
		return
	}
	for _, pid := range pids {
		files, err := fs.MappedFiles(pid)
		if err != nil {
			continue
		}
		for _, f := range files {
			if _, ok := w.replaced[f.ID]; ok {
				mapped[f.ID] = true
			}
		}
	}
	for id, path := range w.replaced {
		if !mapped[id] {
			delete(w.replaced, id)
			w.send(ctx, fileChange{detach: id, how: "no process maps the old " + path})
		}
	}
}

// watchDirs watches the directories of the targets' host paths.
func (w *fileWatcher) watchDirs() {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		w.log.Warn("Upgrades of traced files are not followed: inotify", zap.Error(err))
		return
	}
	w.inotify = fd
	// A pollable File (the descriptor is non-blocking): its reader parks
	// in the runtime's poller instead of a thread in poll(2) that would
	// wake every so often to look at ctx.
	w.inotifyFile = os.NewFile(uintptr(fd), "inotify")
	w.events = make(chan int, 256)
	for _, f := range w.planner.Files {
		if !f.ThroughRoot {
			w.watchDir(f.Target, filepath.Dir(f.SeenAs))
		}
	}
	for ti, t := range w.targets {
		if filepath.IsAbs(t.Path) {
			w.watchDir(ti, filepath.Dir(t.Path)) // an optional target's file may appear there
		}
	}
	w.publishWritable()
}

// watchDir watches directory dir, in the collector's own view, for target
// ti. The directory is opened by descriptor ([procfs.Dir.OpenDirectory]:
// no magic link, nothing but a directory) and watched through that
// descriptor (/proc/self/fd/N); a file found through a process's root is
// not watched: its changes are found when processes start.
func (w *fileWatcher) watchDir(ti int, dir string) {
	if w.inotify < 0 {
		return
	}
	for _, t := range w.byDir[dir] {
		if t == ti {
			return
		}
	}
	if len(w.byDir[dir]) == 0 {
		d, err := procfs.Root("").OpenDir()
		if err != nil {
			return
		}
		fd, err := d.OpenDirectory(dir)
		d.Close()
		if err != nil {
			return
		}
		wd, err := unix.InotifyAddWatch(w.inotify, fmt.Sprintf("/proc/self/fd/%d", fd.Fd()), unix.IN_CREATE|unix.IN_MOVED_TO|unix.IN_CLOSE_WRITE|unix.IN_ATTRIB|unix.IN_MODIFY)
		fd.Close()
		if err != nil {
			return
		}
		w.dirs[wd] = dir
	}
	w.byDir[dir] = append(w.byDir[dir], ti)
}

// readInotify passes on the watch descriptors of changed directories,
// until run closes the inotify File.
func (w *fileWatcher) readInotify(ctx context.Context) {
	defer w.wg.Done()
	conn, err := w.inotifyFile.SyscallConn()
	if err != nil {
		w.log.Warn("Upgrades of traced files are not followed: inotify", zap.Error(err))
		return
	}
	buf := make([]byte, 64<<10)
	for ctx.Err() == nil {
		var n int
		var rerr error
		err := conn.Read(func(fd uintptr) bool {
			n, rerr = unix.Read(int(fd), buf)
			return !errors.Is(rerr, unix.EAGAIN) // else wait in the poller
		})
		if err != nil {
			return // closed: ctx ended
		}
		if errors.Is(rerr, unix.EINTR) || rerr == nil && n <= 0 {
			continue
		}
		if rerr != nil {
			w.log.Warn("Upgrades of traced files are no longer followed: reading inotify", zap.Error(rerr))
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+unix.SizeofInotifyEvent : min(off+unix.SizeofInotifyEvent+int(ev.Len), n)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if !w.modifyMatters(int(ev.Wd), ev.Mask, name) {
				continue
			}
			select {
			case w.events <- int(ev.Wd):
			case <-ctx.Done():
				return
			default: // the directory is already being looked at
			}
		}
	}
}

// describe names a file change for the log.
func describe(f plan.File) string {
	if f.Path == f.SeenAs {
		return f.Path
	}
	return fmt.Sprintf("%s (%s)", f.SeenAs, f.Path)
}
