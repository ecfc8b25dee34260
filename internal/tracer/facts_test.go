package tracer

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/planner"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
)

// openFacts opens a tracer that sends process facts, naming the cgroup v1
// hierarchy of controller (none for "").
func openFacts(t *testing.T, controller string) *Tracer {
	t.Helper()
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	targets := []config.Target{{Path: b.Program, Counters: config.CountersOf("uprobe:inner")}}
	require.NoError(t, config.Validate(targets))
	pl, err := planner.Resolve(targets)
	require.NoError(t, err)
	tr, err := Open(pl.Plan, Options{RingBufferSize: testRing, ProcessFacts: true, Cgroup1Controller: controller})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, tr.Close()) })
	return tr
}

// inode returns the inode number and device of path.
func inode(t *testing.T, path string) (ino, dev uint64) {
	t.Helper()
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(path, &st), path)
	return st.Ino, st.Dev
}

// cgroupDir returns the directory of process pid's cgroup in the
// hierarchy mounted at m.
func cgroupDir(t *testing.T, pid int, m procfs.CgroupMount, v1 string) string {
	t.Helper()
	groups, err := procfs.FS{}.Cgroups(pid)
	require.NoError(t, err)
	for _, g := range groups {
		if (v1 == "" && g.Hierarchy == 0) || (v1 != "" && len(g.Controllers) > 0 && g.Controllers[0] == v1) {
			return filepath.Join(m.Point, g.Path)
		}
	}
	t.Fatalf("process %d has no cgroup in %s", pid, m.Point)
	return ""
}

// hybridCgroups returns the host's cgroup mounts when they hold the
// unified hierarchy and a v1 one, with the v1 controller the receiver would
// choose. A root test on a host that lacks either (the busybox initramfs of
// make test-arm64 mounts none; a cgroup v2 host has no v1 hierarchy) mounts
// what is missing under a temporary directory for the test's duration: a
// cgroup2 mount, and the v1 hierarchy of the first controller the kernel
// lets go of (one enabled in the unified hierarchy is busy there).
func hybridCgroups(t *testing.T) (procfs.CgroupMounts, string) {
	t.Helper()
	mounts, err := procfs.FS{}.CgroupMounts()
	require.NoError(t, err)
	controller, ok := mounts.PreferredV1()
	if ok && mounts.Unified.Point != "" {
		return mounts, controller
	}
	if os.Geteuid() != 0 {
		testutil.SkipOrFail(t, "this test needs a hybrid cgroup host (v1 %q, unified %q), or root to mount one", controller, mounts.Unified.Point)
	}
	dir := t.TempDir()
	mount := func(name, fstype, data string) error {
		point := filepath.Join(dir, name)
		if err := os.Mkdir(point, 0o755); err != nil {
			return err
		}
		if err := syscall.Mount(fstype, point, fstype, 0, data); err != nil {
			return fmt.Errorf("mounting %s (%s) at %s: %w", fstype, data, point, err)
		}
		t.Cleanup(func() { assert.NoError(t, syscall.Unmount(point, 0), "unmounting %s", point) })
		return nil
	}
	if mounts.Unified.Point == "" {
		require.NoError(t, mount("unified", "cgroup2", ""))
	}
	if !ok {
		var errs []error
		for _, c := range []string{"pids", "memory", "cpu", "cpuacct", "blkio", "devices", "freezer", "perf_event", "net_cls", "hugetlb"} {
			err := mount(c, "cgroup", c)
			if err == nil {
				errs = nil
				break
			}
			errs = append(errs, err)
		}
		if len(errs) > 0 {
			testutil.SkipOrFail(t, "this test needs a cgroup v1 hierarchy and none could be mounted: %v", errors.Join(errs...))
		}
	}
	mounts, err = procfs.FS{}.CgroupMounts()
	require.NoError(t, err)
	controller, ok = mounts.PreferredV1()
	require.True(t, ok && mounts.Unified.Point != "", "mounted, yet the mount table shows v1 %q, unified %q", controller, mounts.Unified.Point)
	t.Logf("mounted the missing cgroup hierarchies under %s: v1 %s at %s, unified at %s", dir, controller, mounts.V1[controller].Point, mounts.Unified.Point)
	return mounts, controller
}

// The task iterator lists the running processes with their facts: the
// ids of their cgroups (the inode numbers of the cgroups' directories),
// and their executable's inode.
func TestRunningProcessesFacts(t *testing.T) {
	mounts, err := procfs.FS{}.CgroupMounts()
	require.NoError(t, err)
	controller, _ := mounts.PreferredV1()
	tr := openFacts(t, controller)
	seen := map[uint32]event.Process{}
	require.NoError(t, tr.RunningProcesses(func(p *event.Process) { seen[p.PID] = *p }))
	assert.Greater(t, len(seen), 5)
	self, ok := seen[uint32(os.Getpid())]
	require.True(t, ok, "this process is listed")
	assert.Equal(t, event.ProcessSeen, self.Event)
	assert.NotZero(t, self.Image.StartNs)
	ino, dev := inode(t, "/proc/self/exe")
	assert.Equal(t, ino, self.Facts.ExeIno)
	assert.Equal(t, dev, self.Facts.ExeDev)
	if mounts.Unified.Point != "" {
		ino, _ := inode(t, cgroupDir(t, os.Getpid(), mounts.Unified, ""))
		assert.Equal(t, ino, self.Facts.CgroupID, "the unified hierarchy's cgroup id is its directory's inode")
	}
	if controller != "" {
		ino, _ := inode(t, cgroupDir(t, os.Getpid(), mounts.V1[controller], controller))
		assert.Equal(t, ino, self.Facts.Cgroup1ID, "the %s hierarchy's cgroup id is its directory's inode", controller)
	} else {
		assert.Zero(t, self.Facts.Cgroup1ID)
	}
	for pid, p := range seen {
		assert.Equal(t, pid, p.PID)
	}
}

// A process moved to a cgroup of its own before it execs and exits at
// once: each move sends its facts again, its exec record names that
// cgroup, in the v1 hierarchy and in the unified one, and fork, exec and
// exit records come in order with the process's images.
func TestProcessRecordsCarryCgroups(t *testing.T) {
	testutil.RequireRoot(t)
	mounts, controller := hybridCgroups(t)
	tr := openFacts(t, controller)
	name := fmt.Sprintf("facts-test-%x", rand.Uint64())
	dirs := []string{filepath.Join(mounts.V1[controller].Point, name), filepath.Join(mounts.Unified.Point, name)}
	for _, d := range dirs {
		require.NoError(t, os.Mkdir(d, 0o755))
		t.Cleanup(func() { _ = os.Remove(d) })
	}
	ino1, _ := inode(t, dirs[0])
	ino2, _ := inode(t, dirs[1])

	// sh writes its pid into both cgroups, then execs true.
	cmd := exec.Command("/bin/sh", "-c", fmt.Sprintf("echo $$ > %s/cgroup.procs && echo $$ > %s/cgroup.procs && exec /bin/true", dirs[0], dirs[1]))
	require.NoError(t, cmd.Run())
	pid := uint32(cmd.Process.Pid)

	var got []event.Process
	var b testutil.Batch
	for {
		b.Reset()
		n, malformed := tr.Read(1000, &b)
		require.Zero(t, malformed)
		for _, p := range b.Processes {
			if p.PID == pid {
				got = append(got, p)
			}
		}
		if n < 1000 {
			break
		}
	}
	var events []event.ProcessEvent
	for _, p := range got {
		events = append(events, p.Event)
	}
	// Forked by this process, execed sh, which moves to the two cgroups
	// and execs true.
	require.Equal(t, []event.ProcessEvent{event.ProcessFork, event.ProcessExec, event.ProcessCgroup, event.ProcessCgroup,
		event.ProcessExec, event.ProcessExit}, events)
	fork, sh, moved1, moved2, execed, exit := got[0], got[1], got[2], got[3], got[4], got[5]
	assert.Equal(t, fork.Facts.Cgroup1ID, sh.Facts.Cgroup1ID, "sh starts in its parent's cgroup")
	assert.Equal(t, ino1, moved1.Facts.Cgroup1ID, "the move in the v1 hierarchy is followed")
	assert.Equal(t, sh.Facts.CgroupID, moved1.Facts.CgroupID)
	assert.Equal(t, ino2, moved2.Facts.CgroupID, "the move in the unified hierarchy is followed")
	assert.Equal(t, sh.Image, moved2.Image)
	assert.Equal(t, uint32(os.Getpid()), fork.Parent)
	assert.NotZero(t, fork.ParentStartNs)
	assert.Equal(t, fork.Image.StartNs, execed.Image.StartNs)
	assert.Equal(t, execed.Image, exit.Image)
	assert.Greater(t, execed.Image.ExecID, fork.Image.ExecID, "exec makes a new image")
	assert.NotEqual(t, ino1, fork.Facts.Cgroup1ID, "forked in this process's cgroup")
	assert.Equal(t, ino1, execed.Facts.Cgroup1ID)
	assert.Equal(t, ino2, execed.Facts.CgroupID)
	trueIno, trueDev := inode(t, "/bin/true")
	assert.Equal(t, trueIno, execed.Facts.ExeIno)
	assert.Equal(t, trueDev, execed.Facts.ExeDev)
	assert.True(t, strings.HasSuffix(execed.Filename, "true"), execed.Filename)
}
