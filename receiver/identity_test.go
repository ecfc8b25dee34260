package receiver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
)

// containerCgroup makes a cgroup named as a container runtime names one for
// a new container id, in the v1 pids hierarchy (cgroupfs driver:
// /docker/ID) or in the unified one (systemd driver:
// /system.slice/docker-ID.scope), and returns its directory and the id.
func containerCgroup(t *testing.T, v1 bool) (dir, id string) {
	t.Helper()
	mounts, err := procfs.FS{}.CgroupMounts()
	require.NoError(t, err)
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	id = hex.EncodeToString(raw)
	if v1 {
		m, ok := mounts.V1["pids"]
		if !ok {
			testutil.SkipOrFail(t, "no cgroup v1 pids hierarchy")
		}
		dir = filepath.Join(m.Point, "docker", id)
	} else {
		if mounts.Unified.Point == "" {
			testutil.SkipOrFail(t, "no cgroup2 mount")
		}
		dir = filepath.Join(mounts.Unified.Point, "uprobe-test.slice", "docker-"+id+".scope")
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	t.Cleanup(func() {
		_ = os.Remove(dir)
		_ = os.Remove(filepath.Dir(dir)) // the parent, once no test uses it
	})
	return dir, id
}

// inCgroup returns a command that moves itself into the cgroup dir, then
// execs argv.
func inCgroup(dir string, argv ...string) *exec.Cmd {
	args := append([]string{"-c", fmt.Sprintf(`echo $$ > %s/cgroup.procs && exec "$@"`, dir), "sh"}, argv...)
	return exec.Command("/bin/sh", args...)
}

// runDemo10 runs the demo in cmd: 10 iterations, then it exits.
func runDemo10(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	cmd.Stdin = strings.NewReader("go 10\nexit\n")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "done 10")
	return cmd.Process.Pid
}

// spansByPID returns the spans delivered, by process.pid.
func spansByPID(t *testing.T, s started) map[int64][]flatSpan {
	out := map[int64][]flatSpan{}
	for _, sp := range allSpans(s.traces) {
		pid := attrInt(t, sp.resource, "process.pid")
		out[pid] = append(out[pid], sp)
	}
	return out
}

// A process in a container that makes its 10 calls and exits before the
// receiver reads any of its spans keeps its container.id on every span:
// the engine read its cgroup at its exec, in the v1 pids hierarchy
// (cgroupfs) or in the unified one. Reading /proc when the spans were
// built found nothing (the process was gone).
func TestShortLivedProcessKeepsItsContainer(t *testing.T) {
	for _, v1 := range []bool{true, false} {
		name := map[bool]string{true: "v1", false: "unified"}[v1]
		t.Run(name, func(t *testing.T) {
			testutil.RequireRoot(t)
			b := testutil.BuildDemo(t, "-O2")
			dir, id := containerCgroup(t, v1)
			cfg := createDefaultConfig()
			cfg.Targets = []config.Target{{Path: b.Program, Spans: []config.Span{{Name: "outer", Function: "outer"}}}}
			g := newGate()
			s := startGated(t, cfg, g)

			pid := runDemo10(t, inCgroup(dir, b.Program)) // gone before any drain
			g.release()
			require.Eventually(t, func() bool { return len(spansByPID(t, s)[int64(pid)]) == 10 }, 10*time.Second, 10*time.Millisecond)
			require.NoError(t, s.rcv.Shutdown(context.Background()))
			spans := spansByPID(t, s)[int64(pid)]
			require.Len(t, spans, 10)
			for _, sp := range spans {
				cid, ok := sp.resource.Get("container.id")
				require.True(t, ok, "span of process %d has no container.id", pid)
				assert.Equal(t, id, cid.Str())
			}
		})
	}
}

// 1,000 short-lived processes in 20 containers (half of them in v1 pids
// cgroups, half in unified ones), four at a time: every one of their
// 10,000 spans carries its process's container.id, exactly.
func TestManyShortLivedProcessesInContainers(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	type container struct{ dir, id string }
	var containers []container
	for i := range 20 {
		dir, id := containerCgroup(t, i%2 == 0)
		containers = append(containers, container{dir, id})
	}
	cfg := createDefaultConfig()
	cfg.Targets = []config.Target{{Path: b.Program, Spans: []config.Span{{Name: "outer", Function: "outer"}}}}
	s := startGated(t, cfg, nil)

	const processes = 1000
	want := make([]string, processes) // container id by process index
	pids := make([]int, processes)
	var g errgroup.Group
	g.SetLimit(4)
	for i := range processes {
		c := containers[i%len(containers)]
		want[i] = c.id
		g.Go(func() error {
			cmd := inCgroup(c.dir, b.Program)
			cmd.Stdin = strings.NewReader("go 10\nexit\n")
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "done 10") {
				return fmt.Errorf("process %d: %v: %s", i, err, out)
			}
			pids[i] = cmd.Process.Pid
			return nil
		})
	}
	require.NoError(t, g.Wait())
	require.Eventually(t, func() bool { return s.traces.SpanCount() >= 10*processes }, time.Minute, 50*time.Millisecond)
	require.NoError(t, s.rcv.Shutdown(context.Background()))

	byPID := spansByPID(t, s)
	wrong, missing := 0, 0
	for i, pid := range pids {
		spans := byPID[int64(pid)]
		require.Len(t, spans, 10, "process %d (pid %d)", i, pid)
		for _, sp := range spans {
			cid, ok := sp.resource.Get("container.id")
			switch {
			case !ok:
				missing++
			case cid.Str() != want[i]:
				wrong++
			}
		}
	}
	assert.Zero(t, missing, "spans without container.id")
	assert.Zero(t, wrong, "spans with another container's id")
	assert.Equal(t, 10*processes, s.traces.SpanCount())
}

// buildHeld builds testdata-free held: main calls request(argv[1]) in
// libheld.so, which makes 10 calls of call(), says "held" and, for
// "hold", waits there forever (the process is killed inside the request).
func buildHeld(t *testing.T) (program, lib string) {
	t.Helper()
	dir := t.TempDir()
	libSrc := filepath.Join(dir, "held_lib.c")
	require.NoError(t, os.WriteFile(libSrc, []byte(`#include <stdio.h>
#include <unistd.h>
__attribute__((noinline)) int call(int i) { asm volatile("" ::: "memory"); return i * 2; }
__attribute__((noinline)) int request(const char *ctx) {
	int s = 0;
	for (int i = 0; i < 10; i++) s += call(i);
	puts("held");
	fflush(stdout);
	while (ctx[0] == 'h') pause();
	return s;
}
`), 0o644))
	mainSrc := filepath.Join(dir, "held.c")
	require.NoError(t, os.WriteFile(mainSrc, []byte(`#include <stdio.h>
int request(const char *ctx);
int main(int argc, char **argv) { return request(argc > 1 ? argv[1] : "run") < 0; }
`), 0o644))
	lib = filepath.Join(dir, "libheld.so")
	program = filepath.Join(dir, "held")
	testutil.Gcc(t, dir, "-O2", "-fPIC", "-shared", "-o", lib, libSrc)
	testutil.Gcc(t, dir, "-O2", "-o", program, mainSrc, "-L"+dir, "-lheld", "-Wl,-rpath,"+dir)
	return program, lib
}

// startWithPID starts cmd as process pid, which must be free: it sets the
// host's last allocated pid (/proc/sys/kernel/ns_last_pid) just below it
// and starts cmd, again while another process took the pid first.
func startWithPID(t *testing.T, pid int, cmd func() *exec.Cmd) *exec.Cmd {
	t.Helper()
	for range 1000 {
		c := cmd()
		require.NoError(t, os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0o644))
		require.NoError(t, c.Start())
		if c.Process.Pid == pid {
			return c
		}
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	t.Fatalf("pid %d was never had", pid)
	return nil
}

// A process in a container is killed while its 10 calls wait for the
// trace context of their enclosing request (a carrier span that never
// ends); its pid goes to another process, in another container, running
// another program, before the receiver reads any of it. The held spans
// are released by the first process's exit and keep its identity: its
// container.id and its process.executable.path (the target is a shared
// library), none of the new process's.
func TestReusedPIDLendsNothing(t *testing.T) {
	testutil.RequireRoot(t)
	program, lib := buildHeld(t)
	dirA, idA := containerCgroup(t, true)
	dirB, idB := containerCgroup(t, true)
	cfg := createDefaultConfig()
	cfg.Targets = []config.Target{{Path: lib, Spans: []config.Span{
		{Name: "request", Function: "request", Attributes: map[string]string{"traceparent": "arg0:string"}, TraceContext: "traceparent"},
		{Name: "call", Function: "call"},
	}}}
	g := newGate()
	s := startGated(t, cfg, g)

	a := inCgroup(dirA, program, "hold")
	out, err := a.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, a.Start())
	line := make([]byte, 5)
	_, err = out.Read(line)
	require.NoError(t, err)
	require.Equal(t, "held\n", string(line), "its 10 calls are done, its request open")
	pid := a.Process.Pid
	require.NoError(t, a.Process.Kill())
	_ = a.Wait()

	// Another program in another container takes the pid.
	b := startWithPID(t, pid, func() *exec.Cmd { return inCgroup(dirB, "/bin/sleep", "60") })
	t.Cleanup(func() { _ = b.Process.Kill(); _ = b.Wait() })
	require.Eventually(t, func() bool {
		exe, _, err := procfs.FS{}.Executable(pid)
		id, _ := procfs.FS{}.ContainerID(pid)
		return err == nil && filepath.Base(exe) == "sleep" && id == idB
	}, 10*time.Second, 5*time.Millisecond, "pid %d runs sleep in container %s", pid, idB)

	g.release()
	require.Eventually(t, func() bool { return len(spansByPID(t, s)[int64(pid)]) == 10 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	spans := spansByPID(t, s)[int64(pid)]
	require.Len(t, spans, 10, "the 10 calls; the request never ended")
	for _, sp := range spans {
		assert.Equal(t, "call", sp.Name())
		cid, _ := sp.resource.Get("container.id")
		assert.Equal(t, idA, cid.Str(), "the killed process's container, not %s", idB)
		exe, _ := sp.resource.Get("process.executable.path")
		assert.Equal(t, program, exe.Str(), "the killed process's program")
	}
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(fmt.Sprintf("/proc/%d", pid), &st), "the pid's new process still runs")
}

// A program inside a private mount namespace is traced through its
// process's root, and its hits are counted per process for per-container
// metrics. A second process of it, in a container, makes its 7 calls and
// exits before its hits are read: they still go to its container's
// resource (read at its exec, not from /proc once it is gone), and its
// spans carry its container.id.
func TestShortLivedProcessHitsKeepTheirContainer(t *testing.T) {
	testutil.RequireRoot(t)
	for _, tool := range []string{"unshare", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.SkipOrFail(t, "%s not found", tool)
		}
	}
	bin := buildHardening(t)
	mnt := t.TempDir() // empty on the host
	app := filepath.Join(mnt, "app")
	first := testutil.StartCommand(t, "ready", "unshare", "-m", "--propagation", "private", "sh", "-c",
		fmt.Sprintf("mount -t tmpfs none %s && cp %s %s && exec %s", mnt, bin, app, app))
	require.Equal(t, "four 0", first.Ask("four 0", "four "))
	firstPID := pidOfChild(t, first.PID)
	dir, id := containerCgroup(t, true)

	cfg := createDefaultConfig()
	cfg.Targets = []config.Target{{Path: app, Spans: []config.Span{{Name: "four", Function: "four"}}}}
	g := newGate()
	s := startGated(t, cfg, g)
	require.Len(t, s.rcv.plan.Files, 1)

	second := inCgroup(dir, "nsenter", "-t", strconv.Itoa(firstPID), "-m", "--", app)
	second.Stdin = strings.NewReader("four 7\nexit\n")
	out, err := second.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "four 7")
	s.rcv.foldContainers(context.Background()) // before its records are read: its hits wait
	g.release()
	require.Eventually(t, func() bool { return len(spansByPID(t, s)[int64(second.Process.Pid)]) == 7 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, s.rcv.Shutdown(context.Background()))

	for _, sp := range spansByPID(t, s)[int64(second.Process.Pid)] {
		cid, _ := sp.resource.Get("container.id")
		assert.Equal(t, id, cid.Str())
	}
	last := s.metrics.AllMetrics()[len(s.metrics.AllMetrics())-1]
	assert.Equal(t, map[string]int64{"": 0, id: 7}, hitsByContainer(last, "uprobe:four"), "its 7 hits in its container, none in the target's own resource")
	assert.Equal(t, map[string]int64{"": 0, id: 7}, hitsByContainer(last, "uretprobe:four"))
}

// The identity table: an exec's image and its executable, a fork that
// inherits its parent's program, a move to another cgroup, an exit that
// keeps the process known for its spans still to be built, and a pid
// reused by another process (another start time) that shares nothing.
func TestIdentities(t *testing.T) {
	ids := newIdentities(procfs.FS{}, procfs.CgroupMounts{
		V1: map[string]procfs.CgroupMount{"pids": {Point: "/nonexistent/pids", Root: "/"}}, Unified: procfs.CgroupMount{Point: "/nonexistent/unified", Root: "/"},
	}, "pids", true)
	// Resolved cgroups (the resolution itself is procfs's).
	ids.names[cgroupName{v1: true, id: 11}] = "c-v1"
	ids.names[cgroupName{id: 22}] = "c-v2"
	ids.names[cgroupName{v1: true, id: 12}] = ""
	ids.names[cgroupName{id: 23}] = "c-moved"

	var self syscall.Stat_t
	require.NoError(t, syscall.Stat("/proc/self/exe", &self))
	selfExe, err := os.Executable()
	require.NoError(t, err)
	selfPID := uint32(os.Getpid())

	const start = 1000
	exec1 := event.Process{Event: event.ProcessExec, PID: selfPID, Image: event.Image{StartNs: start, ExecID: 2},
		Filename: "./relative", Facts: event.Facts{Cgroup1ID: 11, CgroupID: 22, ExeIno: self.Ino, ExeDev: self.Dev}}
	ids.process(&exec1)
	im, ok := ids.lookup(selfPID, exec1.Image)
	require.True(t, ok)
	assert.Equal(t, imageIdentity{execID: 2, exe: selfExe, container: "c-v1"}, im, "/proc/PID/exe names the file the engine saw; v1 first")

	// The same pid's next image: the file the engine saw is not the one
	// /proc/PID/exe names (the pid is another process's now), so the name
	// it was execed by counts; its cgroup is in no container in v1, in one
	// in the unified hierarchy.
	exec2 := exec1
	exec2.Image.ExecID = 3
	exec2.Filename = "/usr/bin/../bin/prog"
	exec2.Facts = event.Facts{Cgroup1ID: 12, CgroupID: 22, ExeIno: self.Ino + 1, ExeDev: self.Dev}
	ids.process(&exec2)
	im, _ = ids.lookup(selfPID, exec2.Image)
	assert.Equal(t, imageIdentity{execID: 3, exe: "/usr/bin/prog", container: "c-v2"}, im)
	im, _ = ids.lookup(selfPID, exec1.Image)
	assert.Equal(t, selfExe, im.exe, "the previous image is kept for its spans still to come")

	// A fork of the second image: the same program, its own cgroup.
	fork := event.Process{Event: event.ProcessFork, PID: 77, Parent: selfPID, ParentStartNs: start,
		Image: event.Image{StartNs: 2000, ExecID: 3}, Facts: event.Facts{Cgroup1ID: 11}}
	ids.process(&fork)
	im, _ = ids.lookup(77, fork.Image)
	assert.Equal(t, imageIdentity{execID: 3, exe: "/usr/bin/prog", container: "c-v1"}, im)

	// It moves to another cgroup.
	ids.process(&event.Process{Event: event.ProcessCgroup, PID: 77, Image: fork.Image, Facts: event.Facts{CgroupID: 23}})
	assert.Equal(t, "c-moved", ids.ContainerID(77, fork.Image))

	// It exits, and pid 77 is another process's.
	ids.process(&event.Process{Event: event.ProcessExit, PID: 77, Image: fork.Image})
	other := event.Image{StartNs: 3000, ExecID: 1}
	ids.process(&event.Process{Event: event.ProcessExec, PID: 77, Image: other, Filename: "/bin/other", Facts: event.Facts{CgroupID: 22}})
	assert.Equal(t, "c-moved", ids.ContainerID(77, fork.Image), "an exited process keeps its identity")
	assert.Equal(t, "/usr/bin/prog", ids.Executable(77, fork.Image))
	assert.Equal(t, "c-v2", ids.ContainerID(77, other))
	assert.Equal(t, "/bin/other", ids.Executable(77, other))
	c, known, exited := ids.identity(77, fork.Image.StartNs)
	assert.Equal(t, []any{"c-moved", true, true}, []any{c, known, exited})

	// A process never seen is unknown, and counted.
	assert.Equal(t, "", ids.ContainerID(78, other))
	assert.Equal(t, uint64(1), ids.unknownLookups())
}

// A process's images are kept newest first whatever order their records
// come in (the task iterator at Start may list a process in an image whose
// fork record comes after), two of them.
func TestProcessIdentityImages(t *testing.T) {
	var p processIdentity
	for _, id := range []uint64{5, 4, 6, 5, 3} {
		p.add(imageIdentity{execID: id, exe: strconv.FormatUint(id, 10)})
	}
	assert.Equal(t, 2, p.n)
	assert.Equal(t, [maxImages]imageIdentity{{execID: 6, exe: "6"}, {execID: 5, exe: "5"}}, p.images)
	im, ok := p.image(0)
	assert.True(t, ok)
	assert.Equal(t, uint64(6), im.execID, "0 asks for the newest")
}

// The exited processes kept are bounded: the oldest go first.
func TestIdentitiesBound(t *testing.T) {
	ids := newIdentities(procfs.FS{}, procfs.CgroupMounts{}, "", false)
	for i := range maxExitedIdentities + 10 {
		p := event.Process{Event: event.ProcessExec, PID: uint32(i + 1), Image: event.Image{StartNs: uint64(i + 1)}}
		ids.process(&p)
		p.Event = event.ProcessExit
		ids.process(&p)
	}
	assert.Len(t, ids.procs, maxExitedIdentities)
	_, known, _ := ids.identity(1, 1)
	assert.False(t, known, "the first to exit went first")
	_, known, _ = ids.identity(maxExitedIdentities+10, maxExitedIdentities+10)
	assert.True(t, known)
}
