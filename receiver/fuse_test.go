//go:build linux && (amd64 || arm64)

package receiver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
)

// mountHungFUSE mounts at dir a FUSE file system whose server never
// answers (not even the kernel's FUSE_INIT): every lookup under dir waits
// until the connection is aborted, which the test's cleanup does (closing
// the last /dev/fuse descriptor) before it unmounts dir.
func mountHungFUSE(t *testing.T, dir string) {
	t.Helper()
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		testutil.SkipOrFail(t, "opening /dev/fuse: %v", err)
	}
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0", fd)
	if err := unix.Mount("hung", dir, "fuse", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		unix.Close(fd)
		testutil.SkipOrFail(t, "mounting FUSE at %s: %v", dir, err)
	}
	t.Cleanup(func() {
		unix.Close(fd) // aborts the connection: waiting lookups fail
		_ = unix.Unmount(dir, unix.MNT_DETACH)
	})
}

// A container whose target path lies on a FUSE file system that never
// answers (a tenant's hung or hostile FUSE mount) holds neither Start nor
// the file watcher: Start returns within its bound (on main it waited for
// good: a lookup under a FUSE mount whose server does not answer waits
// until the connection is aborted), a container started later with the
// same mount does not stop the watcher from attaching the next one's file,
// and Shutdown returns promptly.
func TestContainerHungFUSEAtTargetPath(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildStatic(t, "hardening", "-pthread")
	hostProg := filepath.Join(t.TempDir(), "prog")
	install(t, buildHardening(t), hostProg)
	root := t.TempDir()
	install(t, bin, filepath.Join(root, "runner"))
	require.NoError(t, os.MkdirAll(filepath.Join(root, appDir), 0o755))
	mountHungFUSE(t, filepath.Join(root, appDir))
	testutil.StartContainer(t, root, "ready", "/runner")

	cfg := createDefaultConfig()
	cfg.Targets = []config.Target{
		{Path: hostProg, Counters: config.CountersOf("uprobe:four")},
		{Path: "/" + appDir + "/prog", Optional: true, Counters: config.CountersOf("uprobe:four")},
	}
	s := createdBounded(t, cfg)
	took, err := startBounded(s)
	t.Logf("Start took %v", took)
	require.NoError(t, err)

	// Another such container started later, then one with the target's
	// file: the watcher, not held by the first, attaches the second's.
	later := t.TempDir()
	install(t, bin, filepath.Join(later, "runner"))
	require.NoError(t, os.MkdirAll(filepath.Join(later, appDir), 0o755))
	mountHungFUSE(t, filepath.Join(later, appDir))
	testutil.StartContainer(t, later, "ready", "/runner")
	good := t.TempDir()
	install(t, bin, filepath.Join(good, appDir, "prog"))
	testutil.StartContainer(t, good, "ready", "/"+appDir+"/prog")
	assert.Eventually(t, func() bool { return fileChanges(s, "attached") == 1 }, 5*time.Second, 5*time.Millisecond,
		"the file of the container started after the hung one is attached")
	took, err = within(containerShutdownBound, func() error { return s.rcv.Shutdown(context.Background()) })
	t.Logf("Shutdown took %v", took)
	require.NoError(t, err)
}

// A process that runs a program from a FUSE file system whose server
// then stops answering (a tenant's, on purpose, or one that hung) does not
// hold the receiver: with a shared-library target the receiver looks up
// the executable of every exec on the host, and on main its stat of
// /proc/PID/exe waited for the server for good, stopping the drain of
// every span and Shutdown. The traced process's calls are counted and
// Shutdown returns promptly.
func TestExecFromHungFUSE(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	bin := buildDlopener(t, b.Dir)
	static, err := os.ReadFile(testutil.BuildStatic(t, "hardening", "-pthread"))
	require.NoError(t, err)
	mnt := t.TempDir()
	srv := mountOneFileFUSE(t, mnt, "prog", static)

	traced := testutil.StartProgram(t, bin, "ready")
	cfg := createDefaultConfig()
	cfg.Targets = []config.Target{{Path: "libc", PID: traced.PID, Counters: config.CountersOf("uprobe:getpid")}}
	s := createdBounded(t, cfg)
	_, err = startBounded(s)
	require.NoError(t, err)
	srv.stall.Store(true)
	testutil.StartProgram(t, filepath.Join(mnt, "prog"), "ready")
	assert.Equal(t, "getpid 10", traced.Ask("getpid 10", "getpid "))
	took, err := within(containerShutdownBound, func() error { return s.rcv.Shutdown(context.Background()) })
	t.Logf("Shutdown took %v", took)
	require.NoError(t, err)
	hits := sumPoints(s.metrics.AllMetrics()[len(s.metrics.AllMetrics())-1], "uprobe.probe.hits")
	assert.Equal(t, int64(10), hits["uprobe:getpid"])
}
