package receiver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"golang.org/x/sys/unix"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
	"github.com/otel-uprobe/uprobereceiver/receiver/internal/metadatatest"
)

// Bounds of the container tests: a Start or a Shutdown that takes longer
// is stuck (normal ones take well under a second here).
const (
	containerStartBound    = 10 * time.Second
	containerShutdownBound = 5 * time.Second
)

// createdBounded creates the receiver of cfg without starting it, like
// created, but its cleanup waits for Shutdown at most containerShutdownBound: a
// stuck receiver fails the test instead of hanging it.
func createdBounded(t *testing.T, cfg *Config) started {
	t.Helper()
	require.NoError(t, cfg.Validate())
	s := started{traces: new(consumertest.TracesSink), metrics: new(consumertest.MetricsSink), telemetry: componenttest.NewTelemetry()}
	set := metadatatest.NewSettings(s.telemetry)
	tr, err := NewFactory().CreateTraces(context.Background(), set, cfg, s.traces)
	require.NoError(t, err)
	_, err = NewFactory().CreateMetrics(context.Background(), set, cfg, s.metrics)
	require.NoError(t, err)
	s.rcv = tr.(*uprobeReceiver)
	t.Cleanup(func() {
		if _, err := within(containerShutdownBound, func() error { return s.rcv.Shutdown(context.Background()) }); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return s
}

var errStuck = errors.New("still running")

// within runs fn and waits for it at most bound: errStuck when it is not
// done by then (it goes on in the background).
func within(bound time.Duration, fn func() error) (time.Duration, error) {
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return time.Since(start), err
	case <-time.After(bound):
		return bound, errStuck
	}
}

// startBounded starts s within containerStartBound.
func startBounded(s started) (time.Duration, error) {
	return within(containerStartBound, func() error { return s.rcv.Start(context.Background(), componenttest.NewNopHost()) })
}

func idOf(t *testing.T, path string) procfs.FileID {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Lstat(path, &st))
	return procfs.FileID{Dev: st.Dev, Ino: st.Ino}
}

func install(t *testing.T, from, to string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(to), 0o755))
	copyFile(t, from, to)
}

// A container swaps its entry /app/prog between its own file and an
// absolute symbolic link to a host binary (renameat2 RENAME_EXCHANGE in a
// tight loop) while the receiver starts 50 times: every file planned and
// attached is the container's own, never the host's (both are builds of
// one program: only their identity tells them apart).
func TestContainerSwapsItsEntryAtStart(t *testing.T) {
	testutil.RequireRoot(t)
	const starts = 50
	bin := testutil.BuildStatic(t, "hardening", "-pthread")
	host := filepath.Join(t.TempDir(), "host-prog")
	install(t, bin, host)
	root := t.TempDir()
	inside, link := filepath.Join(root, appDir, "prog"), filepath.Join(root, appDir, "prog.swap")
	install(t, bin, inside)
	require.NoError(t, os.Symlink(host, link))
	testutil.StartContainer(t, root, "ready", "/"+appDir+"/prog")
	hostID, ownID := idOf(t, host), idOf(t, inside)

	var stop atomic.Bool
	var swaps atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if err := unix.Renameat2(unix.AT_FDCWD, inside, unix.AT_FDCWD, link, unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("renameat2: %v", err)
				return
			}
			swaps.Add(1)
		}
	}()
	defer func() { stop.Store(true); wg.Wait() }()

	hostFiles, ownFiles, failed := 0, 0, 0
	for range starts {
		cfg := createDefaultConfig()
		cfg.Targets = []config.Target{{Path: "/" + appDir + "/prog", Optional: true, Counters: config.CountersOf("uprobe:four")}}
		s := createdBounded(t, cfg)
		if _, err := startBounded(s); err != nil {
			if failed++; failed == 1 {
				t.Errorf("Start: %v", err)
			}
			continue
		}
		for fi, f := range s.rcv.plan.Files {
			switch f.ID.FileID {
			case hostID:
				hostFiles++
			case ownID:
				ownFiles++
			default:
				t.Errorf("a file of neither: %+v (%s)", f.ID, f.Path)
			}
			attached, ok := s.rcv.tracer.AttachedFileID(fi)
			if assert.True(t, ok, "file %d attached", fi) {
				assert.Equal(t, f.ID, attached, "the kernel got the descriptor of the file the plan read")
			}
		}
		_, err := within(containerShutdownBound, func() error { return s.rcv.Shutdown(context.Background()) })
		require.NoError(t, err)
	}
	t.Logf("%d starts, %d swaps: %d files of the container, %d of the host, %d starts failed", starts, swaps.Load(), ownFiles, hostFiles, failed)
	assert.Zero(t, hostFiles, "a host binary was attached as the container's")
	assert.Zero(t, failed, "a file swapped for a link is found or not, never half")
	assert.NotZero(t, ownFiles, "the container's own file was found")
}

// stripLinked copies bin to path stripped of its symbols and debuginfo
// (strip --strip-all: the receiver then looks for its debug file to read
// its functions) with a .gnu_debuglink naming link.
func stripLinked(t *testing.T, bin, path, link string) {
	t.Helper()
	install(t, bin, path)
	testutil.Run(t, filepath.Dir(path), "strip", "--strip-all", path)
	dummy := filepath.Join(t.TempDir(), link)
	require.NoError(t, os.WriteFile(dummy, []byte("not the debug file\n"), 0o644))
	testutil.Run(t, filepath.Dir(path), "objcopy", "--add-gnu-debuglink="+dummy, path)
}

// canary watches host files that no container may make the collector
// open: it counts their opens and reads (inotify).
type canary struct {
	fd int
}

func watchCanaries(t *testing.T, paths ...string) *canary {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	for _, p := range paths {
		_, err := unix.InotifyAddWatch(fd, p, unix.IN_OPEN|unix.IN_ACCESS)
		require.NoError(t, err)
	}
	return &canary{fd: fd}
}

// touched returns the number of opens and reads since the last call.
func (c *canary) touched(t *testing.T) int {
	t.Helper()
	buf := make([]byte, 64<<10)
	n := 0
	for {
		k, err := unix.Read(c.fd, buf)
		if errors.Is(err, unix.EAGAIN) {
			return n
		}
		require.NoError(t, err)
		n += k / unix.SizeofInotifyEvent // events have no names: watches on files
	}
}

// Debug links of a container's files that lead to host files, to
// /dev/zero or to a FIFO: Start returns promptly, plans the container's
// file without them, and never opens a host file (two canaries, one next
// to a host path the container's file shares and one in the host's debug
// directory, are neither opened nor read).
func TestContainerDebuglinksStayInside(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tool := range []string{"strip", "objcopy"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.SkipOrFail(t, "%s not found", tool)
		}
	}
	bin := testutil.BuildStatic(t, "hardening", "-pthread")
	hostDir, debugDir := t.TempDir(), t.TempDir()
	secret := filepath.Join(hostDir, "secret")
	debugSecret := filepath.Join(debugDir, hostDir, "secret")
	for _, p := range []string{secret, debugSecret} {
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte("host secret\n"), 0o600))
	}
	install(t, bin, filepath.Join(hostDir, "prog")) // the host has the path too

	root := t.TempDir()
	install(t, bin, filepath.Join(root, appDir, "prog"))
	stripLinked(t, bin, filepath.Join(root, hostDir, "prog"), "secret")
	stripLinked(t, bin, filepath.Join(root, appDir, "abs"), "abs.debug")
	require.NoError(t, os.Symlink(secret, filepath.Join(root, appDir, "abs.debug")))
	stripLinked(t, bin, filepath.Join(root, appDir, "up"), "up.debug")
	require.NoError(t, os.Symlink("../../../../../../../../.."+secret, filepath.Join(root, appDir, "up.debug")))
	stripLinked(t, bin, filepath.Join(root, appDir, "zero"), "zero.debug")
	require.NoError(t, os.Symlink("/dev/zero", filepath.Join(root, appDir, "zero.debug")))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "dev"), 0o755))
	require.NoError(t, unix.Mknod(filepath.Join(root, "dev", "zero"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5))))
	stripLinked(t, bin, filepath.Join(root, appDir, "fifo"), "fifo.debug")
	require.NoError(t, unix.Mkfifo(filepath.Join(root, appDir, "fifo.debug"), 0o644))
	testutil.StartContainer(t, root, "ready", "/"+appDir+"/prog")
	watch := watchCanaries(t, secret, debugSecret)

	for _, tt := range []struct{ name, path string }{
		{"debuglink name next to a path the host has too", filepath.Join(hostDir, "prog")},
		{"absolute symlink to a host file", "/" + appDir + "/abs"},
		{"dot-dot symlink to a host file", "/" + appDir + "/up"},
		{"symlink to /dev/zero", "/" + appDir + "/zero"},
		{"FIFO", "/" + appDir + "/fifo"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := createDefaultConfig()
			cfg.DebugDirectories = []string{debugDir}
			cfg.Targets = []config.Target{{Path: tt.path, Counters: config.CountersOf("usdt:hex:start")}}
			s := createdBounded(t, cfg)
			took, err := startBounded(s)
			t.Logf("Start took %v", took)
			require.NoError(t, err)
			own := idOf(t, filepath.Join(root, tt.path))
			found := false
			for _, f := range s.rcv.plan.Files {
				found = found || f.ID.FileID == own
			}
			assert.True(t, found, "the container's file is planned without its debug file")
			assert.Zero(t, watch.touched(t), "a host canary was opened or read")
		})
	}
}

// A container started after Start whose target file's debuglink is a
// FIFO leaves the file watcher free: its file is attached (without debug
// symbols), a host target's upgrade is still followed, and Shutdown
// returns promptly.
func TestContainerFIFODebuglinkLeavesTheWatcherFree(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildStatic(t, "hardening", "-pthread")
	hostProg := filepath.Join(t.TempDir(), "prog")
	install(t, buildHardening(t), hostProg)
	root := t.TempDir()
	install(t, bin, filepath.Join(root, appDir, "prog"))
	stripLinked(t, bin, filepath.Join(root, appDir, "fifo"), "fifo.debug")
	require.NoError(t, unix.Mkfifo(filepath.Join(root, appDir, "fifo.debug"), 0o644))

	cfg := createDefaultConfig()
	cfg.Targets = []config.Target{
		{Path: hostProg, Counters: config.CountersOf("uprobe:four")},
		{Path: "/" + appDir + "/fifo", Optional: true, Counters: config.CountersOf("usdt:hex:start")},
	}
	s := createdBounded(t, cfg)
	_, err := startBounded(s)
	require.NoError(t, err)

	testutil.StartContainer(t, root, "ready", "/"+appDir+"/prog")
	assert.Eventually(t, func() bool { return fileChanges(s, "attached") == 1 }, 5*time.Second, 5*time.Millisecond,
		"the container's file is attached without its debug file")
	next := hostProg + ".new"
	install(t, buildHardening(t), next)
	require.NoError(t, os.Rename(next, hostProg), "an upgrade: a new inode at the path")
	assert.Eventually(t, func() bool { return fileChanges(s, "attached") == 2 }, 5*time.Second, 5*time.Millisecond,
		"the host target's upgrade is followed")
	took, err := within(containerShutdownBound, func() error { return s.rcv.Shutdown(context.Background()) })
	t.Logf("Shutdown took %v", took)
	require.NoError(t, err)
}

// appDir is the directory of the test containers' files, its name unique to
// this test process: a target path is looked for in every mount namespace of
// the host, and another package's tests may run a container at the same time.
var appDir = fmt.Sprintf("app-%d", os.Getpid())
