//go:build linux && (amd64 || arm64)

package receiver

import (
	"errors"
	"io/fs"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
)

// The identity of a process in its spans and metrics (container.id,
// process.executable.path) is taken from what the engine read of it while
// it was alive, in its exec, fork and exit records and, for the processes
// that ran before Start, the task iterator: never from /proc when a span
// is built, when the process may be gone and its pid another's.

// procKey names one process: a pid and the start time of its thread group
// leader (CLOCK_MONOTONIC ns). A reused pid has another start time.
type procKey struct {
	pid     uint32
	startNs uint64
}

// imageIdentity is the identity of one program image of a process.
type imageIdentity struct {
	execID    uint64
	exe       string // process.executable.path; "" unknown
	container string // container.id; "" none
}

// processIdentity is what is known of one process: its last images,
// newest first.
type processIdentity struct {
	images [maxImages]imageIdentity
	n      int
	exited bool
}

// maxImages bounds the images kept per process: spans of an image read
// after the process execed again are rare, and never more than one back.
const maxImages = 2

// image returns the image with execID (0: the newest).
func (p *processIdentity) image(execID uint64) (imageIdentity, bool) {
	for i := 0; i < p.n; i++ {
		if execID == 0 || p.images[i].execID == execID {
			return p.images[i], true
		}
	}
	return imageIdentity{}, false
}

// add keeps an image, newest (highest exec id) first, unless it is known:
// the task iterator at Start may list a process in an image whose exec or
// fork record comes after.
func (p *processIdentity) add(im imageIdentity) {
	if _, ok := p.image(im.execID); ok && im.execID != 0 {
		return
	}
	i := 0
	for i < p.n && p.images[i].execID > im.execID {
		i++
	}
	if i == maxImages {
		return // older than every image kept
	}
	copy(p.images[i+1:], p.images[i:maxImages-1])
	p.images[i] = im
	p.n = min(p.n+1, maxImages)
}

// Bounds of the identity table.
const (
	// maxExitedIdentities is how many exited processes are remembered, for
	// their spans and hits still to be read (at 600 exits a second, about
	// half a minute of them).
	maxExitedIdentities = 16384
	// maxLiveIdentities bounds the processes remembered as running: only
	// lost exit records leave entries beyond the host's processes.
	maxLiveIdentities = 1 << 17
	// maxCgroupNames bounds the cgroup ids whose container is remembered.
	maxCgroupNames = 1 << 14
)

// identities is the table of process identities, by pid and start time.
// The drain goroutine fills it from process events; the builder (drain
// goroutine) and the per-container hit counts (collecting goroutine) read
// it.
type identities struct {
	mu     sync.Mutex
	procs  map[procKey]*processIdentity
	exited []procKey // in exit order, oldest first
	// needExe says whether process.executable.path is wanted (a target is
	// a shared library): it costs a readlink and a stat per exec.
	needExe bool
	fs      procfs.FS
	// The hierarchies cgroup ids are resolved in, and the container of
	// each id met (cgroup ids are never reused).
	v1, unified procfs.CgroupMount
	names       map[cgroupName]string
	// unknown counts lookups of processes the table did not know (their
	// records were lost, or came after the span): left without identity.
	unknown uint64
}

// cgroupName is a cgroup id in one hierarchy.
type cgroupName struct {
	v1 bool
	id uint64
}

func newIdentities(fsys procfs.FS, mounts procfs.CgroupMounts, v1Controller string, needExe bool) *identities {
	return &identities{
		procs:   map[procKey]*processIdentity{},
		needExe: needExe,
		fs:      fsys,
		v1:      mounts.V1[v1Controller],
		unified: mounts.Unified,
		names:   map[cgroupName]string{},
	}
}

// process follows one process event.
func (t *identities) process(p *event.Process) {
	k := procKey{p.PID, p.Image.StartNs}
	switch p.Event {
	case event.ProcessExit:
		t.mu.Lock()
		defer t.mu.Unlock()
		if e := t.procs[k]; e != nil && !e.exited {
			e.exited = true
			t.exited = append(t.exited, k)
			t.bound()
		}
		return
	case event.ProcessCgroup:
		container := t.container(p.Facts)
		t.mu.Lock()
		e := t.procs[k]
		if e != nil && e.n > 0 {
			// It moved: its spans from now on are in the new cgroup's
			// container (its exec and fork records came before).
			e.images[0].container = container
			t.mu.Unlock()
			return
		}
		t.mu.Unlock()
	case event.ProcessExec, event.ProcessFork, event.ProcessSeen:
	default:
		return
	}
	// Read outside the lock: a resolution may read the file system.
	im := imageIdentity{execID: p.Image.ExecID, container: t.container(p.Facts)}
	if t.needExe {
		if p.Event == event.ProcessFork {
			t.mu.Lock()
			if parent := t.procs[procKey{p.Parent, p.ParentStartNs}]; parent != nil {
				if pim, ok := parent.image(p.Image.ExecID); ok {
					im.exe = pim.exe // forked, not execed: the same program
				}
			}
			t.mu.Unlock()
		}
		if im.exe == "" {
			im.exe = t.executable(p)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.procs[k]
	if e == nil {
		e = &processIdentity{}
		t.procs[k] = e
		t.bound()
	}
	e.add(im)
}

// bound drops the oldest exited processes beyond maxExitedIdentities, and
// the processes /proc no longer has when the table is full; t.mu is held.
func (t *identities) bound() {
	for len(t.exited) > maxExitedIdentities {
		delete(t.procs, t.exited[0])
		t.exited = t.exited[1:]
	}
	if len(t.procs) <= maxLiveIdentities+maxExitedIdentities {
		return
	}
	for k, e := range t.procs {
		if !e.exited && !t.alive(k.pid) {
			delete(t.procs, k)
		}
	}
	if len(t.procs) > maxLiveIdentities+maxExitedIdentities {
		clear(t.procs) // never expected: lost exit records of live pids
		t.exited = t.exited[:0]
	}
}

func (t *identities) alive(pid uint32) bool {
	_, err := syscall.Getpgid(int(pid))
	return err == nil
}

// lookup returns the identity of a process image; false when the process
// is not known.
func (t *identities) lookup(pid uint32, image event.Image) (imageIdentity, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.procs[procKey{pid, image.StartNs}]
	if e == nil {
		t.unknown++
		return imageIdentity{}, false
	}
	im, ok := e.image(image.ExecID)
	if !ok {
		im, ok = e.image(0) // an older image than those kept: the newest is closest
	}
	return im, ok
}

// executable returns process.executable.path of the image of a process
// event for the builder.
func (t *identities) executable(p *event.Process) string {
	if p.Facts.ExeIno != 0 {
		// /proc/PID/exe is this process's only if it names the file the
		// engine saw: the process may be gone and its pid another's.
		// Its identity without asking the file system (a FUSE server may
		// never answer): ExecutableID.
		path, _, err := t.fs.Executable(int(p.PID))
		if err == nil {
			if id, err := t.fs.ExecutableID(int(p.PID)); err == nil && id.Ino == p.Facts.ExeIno && id.Dev == p.Facts.ExeDev {
				return path
			}
		}
	}
	if p.Event == event.ProcessExec && filepath.IsAbs(p.Filename) {
		return filepath.Clean(p.Filename) // the name it was execed by
	}
	return ""
}

// container returns container.id of a process with facts: from its cgroup
// in the v1 hierarchy, or else in the unified one.
func (t *identities) container(f event.Facts) string {
	if id := t.cgroupContainer(cgroupName{v1: true, id: f.Cgroup1ID}); id != "" {
		return id
	}
	return t.cgroupContainer(cgroupName{id: f.CgroupID})
}

// cgroupContainer returns the container of a cgroup, "" for none.
func (t *identities) cgroupContainer(n cgroupName) string {
	m := t.unified
	if n.v1 {
		m = t.v1
	}
	if n.id == 0 || m.Point == "" {
		return ""
	}
	t.mu.Lock()
	id, ok := t.names[n]
	t.mu.Unlock()
	if ok {
		return id
	}
	path, err := procfs.CgroupPath(m, n.id)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "" // not remembered: may work next time
	}
	if err == nil {
		id = procfs.ContainerIDFromPath(path)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.names) >= maxCgroupNames {
		clear(t.names)
	}
	t.names[n] = id
	return id
}

// Executable returns process.executable.path of a process image (the
// builder's Settings.Executable).
func (t *identities) Executable(pid uint32, image event.Image) string {
	im, _ := t.lookup(pid, image)
	return im.exe
}

// ContainerID returns container.id of a process image (the builder's
// Settings.ContainerID).
func (t *identities) ContainerID(pid uint32, image event.Image) string {
	im, _ := t.lookup(pid, image)
	return im.container
}

// identity returns the container of a process, whether the process is
// known and whether it exited (containerCounts' identity).
func (t *identities) identity(pid uint32, startNs uint64) (container string, known, exited bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.procs[procKey{pid, startNs}]
	if e == nil {
		t.unknown++
		return "", false, false
	}
	im, _ := e.image(0)
	return im.container, true, e.exited
}

// unknownLookups returns how many lookups found no process.
func (t *identities) unknownLookups() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.unknown
}
