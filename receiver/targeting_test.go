package receiver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	nooptrace "go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/sync/errgroup"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
)

// buildDlopener builds testdata/dlopener with libDir in its DT_RUNPATH.
func buildDlopener(t *testing.T, libDir string) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "dlopener")
	testutil.Gcc(t, dir, "-O2", "-o", bin, testutil.Testdata("dlopener", "dlopener.c"), "-ldl", "-Wl,--enable-new-dtags,-rpath,"+libDir)
	return bin
}

// fileChanges returns the receiver's count of file changes of one kind.
func fileChanges(s started, change string) int64 {
	m, err := s.telemetry.GetMetric("otelcol_receiver_uprobe_file_changes")
	if err != nil {
		return 0
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		return 0
	}
	for _, dp := range sum.DataPoints {
		if v, _ := dp.Attributes.Value("change"); v.AsString() == change {
			return dp.Value
		}
	}
	return 0
}

// A target named "libc" for one process counts that process's calls only,
// while another process calls the same function in the same file.
func TestLibcByNameForOneProcess(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	bin := buildDlopener(t, b.Dir)
	chosen := testutil.StartProgram(t, bin, "ready")
	other := testutil.StartProgram(t, bin, "ready")
	s := startReceiver(t, []config.Target{{Path: "libc", PID: chosen.PID, Counters: config.CountersOf("uprobe:getpid")}})
	require.Equal(t, "libc.so.6", filepath.Base(s.rcv.plan.Files[0].SeenAs), "libc as its process sees it")
	assert.Equal(t, "getpid 1000", chosen.Ask("getpid 1000", "getpid "))
	assert.Equal(t, "getpid 5000", other.Ask("getpid 5000", "getpid "))
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	hits := sumPoints(s.metrics.AllMetrics()[len(s.metrics.AllMetrics())-1], "uprobe.probe.hits")
	assert.Equal(t, int64(1000), hits["uprobe:getpid"], "the other process's 5,000 calls are not counted")
}

// A program that exists only inside a private mount namespace (a tmpfs
// over a directory that is empty on the host) is found through the root of
// its process: one started before the collector and one after are traced
// with their own pids, and the one in a docker-style cgroup carries its
// container.id.
func TestProgramInAPrivateMountNamespace(t *testing.T) {
	testutil.RequireRoot(t)
	const cgroups = "/sys/fs/cgroup/pids"
	if _, err := os.Stat(cgroups); err != nil {
		testutil.SkipOrFail(t, "no cgroup v1 pids hierarchy at %s: %v", cgroups, err)
	}
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
	line := first.Ask("four 0", "four ") // ready came first; this makes sure the program runs
	require.Equal(t, "four 0", line)
	firstPID := pidOfChild(t, first.PID)
	_, err := os.Stat(app)
	require.ErrorIs(t, err, os.ErrNotExist, "the program is nowhere on the host")

	s := startReceiver(t, []config.Target{{Path: app, Spans: []config.Span{{
		Name: "four", Function: "four", Attributes: map[string]string{"a": "+0(arg0):bytes[2]"},
	}}}})
	require.Len(t, s.rcv.plan.Files, 1)
	assert.Equal(t, app, s.rcv.plan.Files[0].SeenAs)
	assert.Equal(t, fmt.Sprintf("/proc/%d/root%s", firstPID, app), s.rcv.plan.Files[0].Path)
	first.Ask("four 3", "four 3")

	// A second process of the same image, started after the collector, in
	// a container's cgroup.
	id := make([]byte, 32)
	_, _ = rand.Read(id)
	container := hex.EncodeToString(id)
	cg := filepath.Join(cgroups, "docker", container)
	require.NoError(t, os.MkdirAll(cg, 0o755))
	t.Cleanup(func() { _ = os.Remove(cg) })
	second := testutil.StartCommand(t, "ready", "nsenter", "-t", strconv.Itoa(firstPID), "-m", "--", app)
	require.NoError(t, os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(second.PID)), 0o644))
	second.Ask("four 5", "four 5")
	// The process exits before the next collection: its hits keep its
	// container once they were read.
	require.Eventually(t, func() bool {
		var st event.Stats
		s.rcv.byContainer.stats(&st)
		return len(st.ContainerHits) == 2 // uprobe:four and uretprobe:four
	}, 10*time.Second, 50*time.Millisecond)
	second.Stop()
	require.NoError(t, s.rcv.Shutdown(context.Background()))

	perPID := map[int64]int{}
	for _, sp := range allSpans(s.traces) {
		pid := attrInt(t, sp.resource, "process.pid")
		perPID[pid]++
		cid, hasCID := sp.resource.Get("container.id")
		if pid == int64(second.PID) {
			assert.Equal(t, container, cid.Str())
		} else {
			assert.False(t, hasCID, "the first process is in no container")
		}
		assert.Equal(t, app, attrStr(t, sp.resource, "process.executable.path"), "the path as the process sees it")
	}
	assert.Equal(t, map[int64]int{int64(firstPID): 3, int64(second.PID): 5}, perPID)

	// Metrics too: the hits in the container under a resource with its
	// container.id, the others under the target's own resource.
	last := s.metrics.AllMetrics()[len(s.metrics.AllMetrics())-1]
	assert.Equal(t, map[string]int64{"": 3, container: 5}, hitsByContainer(last, "uprobe:four"))
	assert.Equal(t, map[string]int64{"": 3, container: 5}, hitsByContainer(last, "uretprobe:four"))
}

// hitsByContainer returns a probe's uprobe.probe.hits by the container.id
// of their resource ("" for none).
func hitsByContainer(md pmetric.Metrics, probe string) map[string]int64 {
	out := map[string]int64{}
	for i := 0; i < md.ResourceMetrics().Len(); i++ {
		rm := md.ResourceMetrics().At(i)
		id, _ := rm.Resource().Attributes().Get("container.id")
		if v, ok := sumPoints(singleResource(rm), "uprobe.probe.hits")[probe]; ok {
			out[id.Str()] += v
		}
	}
	return out
}

// singleResource returns metrics holding a copy of rm alone.
func singleResource(rm pmetric.ResourceMetrics) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm.CopyTo(md.ResourceMetrics().AppendEmpty())
	return md
}

// pidOfChild returns the pid of the program a wrapper (unshare, sh) execs:
// the wrapper's own pid once it has execed, or its only child.
func pidOfChild(t *testing.T, pid int) int {
	t.Helper()
	fs := procfs.FS{}
	for range 100 {
		if exe, _, err := fs.Executable(pid); err == nil && filepath.Base(exe) == "app" {
			return pid
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
		require.NoError(t, err)
		var child int
		if _, err := fmt.Sscan(string(b), &child); err == nil {
			pid = child
			continue
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no program under pid %d", pid)
	return 0
}

// tracedDemoCopy copies an -O0 build of the demo to a path of its own,
// traces its work() there and returns the path, the receiver and an -O2
// build (another layout) to put at the path.
func tracedDemoCopy(t *testing.T) (string, started, testutil.DemoBuild) {
	t.Helper()
	oldBuild, newBuild := testutil.BuildDemo(t, "-O0"), testutil.BuildDemo(t, "-O2")
	path := filepath.Join(t.TempDir(), "demo")
	copyFile(t, oldBuild.Program, path)
	s := startReceiver(t, []config.Target{{Path: path, Spans: []config.Span{{
		Name: "work", Function: "work", Attributes: map[string]string{"n": "arg0", "label": "arg1:string"},
	}}}})
	return path, s, newBuild
}

// workSpansPerPID counts the work() spans of tracedDemoCopy by process,
// checking each one's values.
func workSpansPerPID(t *testing.T, s started) map[int64]int {
	t.Helper()
	perPID := map[int64]int{}
	for _, sp := range allSpans(s.traces) {
		n := attrInt(t, sp.Attributes(), "n")
		assert.Equal(t, fmt.Sprintf("SELECT %d FROM demo", n), attrStr(t, sp.Attributes(), "label"))
		perPID[attrInt(t, sp.resource, "process.pid")]++
	}
	return perPID
}

// A file replaced at its path by a build with another layout is read and
// attached again within a second: a process of the new build started two
// seconds later gives spans with the right values, and a process still
// running the old build goes on being traced.
func TestBinaryReplacedInPlace(t *testing.T) {
	testutil.RequireRoot(t)
	path, s, newBuild := tracedDemoCopy(t)
	oldProc := testutil.StartDemo(t, path)
	oldProc.Run(4)

	next := path + ".new"
	copyFile(t, newBuild.Program, next)
	require.NoError(t, os.Rename(next, path), "the upgrade: a new inode at the path")
	start := time.Now()
	require.Eventually(t, func() bool { return fileChanges(s, "attached") == 1 }, time.Second, 5*time.Millisecond,
		"the new file is attached within a second")
	t.Logf("attached %v after the rename", time.Since(start))
	time.Sleep(2*time.Second - time.Since(start)) // the scenario: the new version starts two seconds later
	newProc := testutil.StartDemo(t, path)
	newProc.Run(6)
	oldProc.Run(3)
	require.NoError(t, s.rcv.Shutdown(context.Background()))

	perPID := workSpansPerPID(t, s)
	assert.Equal(t, map[int64]int{int64(oldProc.PID): 7, int64(newProc.PID): 6}, perPID)
}

// A binary written over in place (the same inode, as cp onto an existing
// file does) while no process runs it: its probes, at offsets of the old
// contents, are detached at the first write, and the new contents are read
// and attached once written. A process of the new program then runs
// normally and is traced exactly.
func TestBinaryWrittenInPlace(t *testing.T) {
	testutil.RequireRoot(t)
	path, s, newBuild := tracedDemoCopy(t)
	oldProc := testutil.StartDemo(t, path)
	oldProc.Run(3)
	oldProc.Stop()
	before, err := os.Stat(path)
	require.NoError(t, err)

	data, err := os.ReadFile(newBuild.Program)
	require.NoError(t, err)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	require.NoError(t, err)
	_, err = f.Write(data)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	after, err := os.Stat(path)
	require.NoError(t, err)
	require.True(t, os.SameFile(before, after), "written in place: the same inode")

	require.Eventually(t, func() bool { return fileChanges(s, "detached") == 1 && fileChanges(s, "attached") == 1 },
		5*time.Second, 5*time.Millisecond, "the old contents' probes detached, the new ones attached")
	newProc := testutil.StartDemo(t, path)
	newProc.Run(5)
	newProc.Stop()
	require.NoError(t, s.rcv.Shutdown(context.Background()))

	perPID := workSpansPerPID(t, s)
	assert.Equal(t, map[int64]int{int64(oldProc.PID): 3, int64(newProc.PID): 5}, perPID)
}

// A library a chosen process opens with dlopen after Start, found by name
// as its dynamic loader finds it (DT_RUNPATH), is traced from its first
// call; and so is it in a matching process started later.
func TestDlopenAfterStart(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	bin := buildDlopener(t, b.Dir)
	before := testutil.StartProgram(t, bin, "ready")
	s := startReceiver(t, []config.Target{{
		Path: "libdemo", Process: &procfs.Selector{Executable: "dlopener"},
		Spans: []config.Span{{Name: "lib_call", Function: "lib_call", Attributes: map[string]string{"i": "arg0:s32"}}},
	}})
	require.Len(t, s.rcv.plan.Files, 1)
	assert.Equal(t, b.Library, s.rcv.plan.Files[0].SeenAs)
	before.Ask("open", "opened")
	before.Ask("call 10", "called 10")
	after := testutil.StartProgram(t, bin, "ready")
	after.Ask("open", "opened")
	after.Ask("call 7", "called 7")
	require.NoError(t, s.rcv.Shutdown(context.Background()))

	got := map[int64][]int64{}
	for _, sp := range allSpans(s.traces) {
		pid := attrInt(t, sp.resource, "process.pid")
		got[pid] = append(got[pid], attrInt(t, sp.Attributes(), "i"))
	}
	assert.ElementsMatch(t, []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, got[int64(before.PID)], "from its first call")
	assert.ElementsMatch(t, []int64{0, 1, 2, 3, 4, 5, 6}, got[int64(after.PID)])
	assert.Len(t, got, 2)
}

// 5,000 short-lived processes chosen by a process selector, among 1,000 of
// the same program it does not choose: every chosen call is traced and
// counted, no other is, and the engine's process maps and the collector's
// memory are back to where they started.
func TestShortLivedProcessesBySelector(t *testing.T) {
	testutil.RequireRoot(t)
	const chosen, others = 5000, 1000
	bin := buildHardening(t)
	// The collector's own tracing is off, as it is by default: the test
	// telemetry would keep a span of every delivery in memory.
	s := created(t, []config.Target{{
		Path: bin, Process: &procfs.Selector{CommandLine: " once$"},
		Spans: []config.Span{{Name: "four", Function: "four"}},
	}}, func(set *receiver.Settings) { set.TracerProvider = nooptrace.NewTracerProvider() })
	require.NoError(t, s.rcv.Start(context.Background(), componenttest.NewNopHost()))
	var pids []int
	var mu sync.Mutex
	run := func(chosen, others int) {
		var g errgroup.Group
		g.SetLimit(4)
		for i := range chosen + others {
			arg := "once"
			if i >= chosen {
				arg = "once-not-chosen"
			}
			g.Go(func() error {
				cmd := exec.Command(bin, arg)
				out, err := cmd.CombinedOutput()
				mu.Lock()
				pids = append(pids, cmd.Process.Pid)
				mu.Unlock()
				if err != nil {
					return fmt.Errorf("%s %s: %w: %s", bin, arg, err, out)
				}
				return nil
			})
		}
		require.NoError(t, g.Wait())
	}
	// quiet waits until the receiver has taken in everything the
	// processes did: their spans, and their exits (which drop their
	// pending counters).
	quiet := func(spans int) {
		var pending int
		var err error
		if !assert.Eventually(t, func() bool {
			pending, err = s.rcv.tracer.PendingEntries()
			return err == nil && pending == 0 && s.traces.SpanCount() >= spans
		}, time.Minute, 10*time.Millisecond) {
			t.Fatalf("after a minute: pending entries %d (%v), spans %d of %d", pending, err, s.traces.SpanCount(), spans)
		}
	}
	// A warm-up round, so that what the receiver keeps for good (pools,
	// caches) is measured before.
	run(500, 100)
	quiet(500)
	spans := s.traces.SpanCount()
	s.traces.Reset()
	heapBefore := heapInUse()

	run(chosen, others)
	quiet(chosen)
	spans += s.traces.SpanCount()
	s.traces.Reset()
	heapAfter := heapInUse()
	left := 0
	for _, pid := range pids {
		if _, _, ok := s.rcv.tracer.ProcessMask(uint32(pid)); ok {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
				left++ // exited, still known (a live pid is a reuse by another process)
			}
		}
	}
	require.NoError(t, s.rcv.Shutdown(context.Background()))

	assert.Zero(t, left, "exited processes are forgotten")
	for k := range s.rcv.chooser.decisions {
		assert.NotContains(t, pids, int(k.pid), "an exited process's decision is forgotten")
	}
	assert.Less(t, heapAfter, heapBefore+2<<20, "the collector's heap is back (%d → %d bytes)", heapBefore, heapAfter)
	assert.Equal(t, chosen+500, spans+s.traces.SpanCount(), "every chosen call, and no other")
	last := s.metrics.AllMetrics()[len(s.metrics.AllMetrics())-1]
	hits := sumPoints(last, "uprobe.probe.hits")
	assert.Equal(t, int64(chosen+500), hits["uprobe:four"], "hits of chosen processes only, pending ones included")
	assert.Equal(t, uint64(chosen+500), durations(last)["four"].Count())
}

// heapInUse returns the bytes of heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// An optional target whose file is nowhere at Start waits, counted; it is
// attached when a process that has it starts (here, a program that exists
// only in the process's private mount namespace), and traced from then on.
func TestOptionalTargetAppearsLater(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		testutil.SkipOrFail(t, "unshare not found")
	}
	bin := buildHardening(t)
	mnt := t.TempDir()
	app := filepath.Join(mnt, "app")
	s := startReceiver(t, []config.Target{{Path: app, Optional: true, Spans: []config.Span{{Name: "four", Function: "four"}}}})
	require.Empty(t, s.rcv.plan.Files)
	waiting := func() int64 {
		m, err := s.telemetry.GetMetric("otelcol_receiver_uprobe_targets_waiting")
		require.NoError(t, err)
		return m.Data.(metricdata.Sum[int64]).DataPoints[0].Value
	}
	assert.Equal(t, int64(1), waiting(), "counted while it waits")

	p := testutil.StartCommand(t, "ready", "unshare", "-m", "--propagation", "private", "sh", "-c",
		fmt.Sprintf("mount -t tmpfs none %s && cp %s %s && exec %s", mnt, bin, app, app))
	require.Eventually(t, func() bool { return fileChanges(s, "attached") == 1 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, int64(0), waiting())
	p.Ask("four 4", "four 4")
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	spans := allSpans(s.traces)
	require.Len(t, spans, 4)
	assert.Equal(t, app, attrStr(t, spans[0].resource, "process.executable.path"))
}

// build_id pins a target to one build: a file with another build id is not
// attached (said and counted); the right one is, and its spans carry the
// build id.
func TestBuildIDPinning(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "hardening")
	testutil.Gcc(t, dir, "-O2", "-pthread", "-Wl,--build-id=0x0123456789abcdef", "-o", bin, testutil.Testdata("hardening", "hardening.c"))
	span := []config.Span{{Name: "four", Function: "four"}}

	s := startReceiver(t, []config.Target{{Path: bin, BuildID: "ffffffffffffffff", Spans: span}})
	assert.Empty(t, s.rcv.plan.Files, "another build: not attached")
	assert.Equal(t, int64(1), fileChanges(s, "refused"), "and counted")
	require.NoError(t, s.rcv.Shutdown(context.Background()))

	s = startReceiver(t, []config.Target{{Path: bin, BuildID: "0123456789abcdef", Spans: span}})
	require.Len(t, s.rcv.plan.Files, 1)
	p := testutil.StartProgram(t, bin, "ready")
	p.Ask("four 2", "four 2")
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	spans := allSpans(s.traces)
	require.Len(t, spans, 2)
	assert.Equal(t, "0123456789abcdef", attrStr(t, spans[0].resource, "process.executable.build_id.gnu"))
}

// A process chosen by executable name that execs itself through
// /proc/self/exe, again and again, and is gone before the receiver reads
// most of its exec records: every image is still judged by the program it
// runs (not by the name /proc/self/exe), so every call is a span and a hit.
func TestSelfExecChainByExecutable(t *testing.T) {
	testutil.RequireRoot(t)
	const images = 301
	bin := buildHardening(t)
	s := created(t, []config.Target{{
		Path: bin, Process: &procfs.Selector{Executable: filepath.Base(bin)},
		Spans: []config.Span{{Name: "four", Function: "four"}},
	}})
	require.NoError(t, s.rcv.Start(context.Background(), componenttest.NewNopHost()))
	out, err := exec.Command(bin, "chain", strconv.Itoa(images-1)).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Eventually(t, func() bool {
		pending, err := s.rcv.tracer.PendingEntries()
		return err == nil && pending == 0 && s.traces.SpanCount() >= images
	}, time.Minute, 10*time.Millisecond, "spans: %d", s.traces.SpanCount())
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	assert.Equal(t, images, s.traces.SpanCount(), "one span per image")
	last := s.metrics.AllMetrics()[len(s.metrics.AllMetrics())-1]
	assert.Equal(t, int64(images), sumPoints(last, "uprobe.probe.hits")["uprobe:four"], "one hit per image")
}

// A process a selector chooses is decided as soon as its exec record is
// written, not at the drain's flush timer: with flush_interval at its
// longest (1 s), the engine has the process's mask within a few
// milliseconds of its exec and counts its calls itself, none of them as
// pending (counted apart until a decision folds them), five times over.
func TestSelectorDecidesAtExec(t *testing.T) {
	testutil.RequireRoot(t)
	bin := buildHardening(t)
	cfg := createDefaultConfig()
	cfg.FlushInterval = time.Second
	cfg.Targets = []config.Target{{
		Path: bin, Process: &procfs.Selector{Executable: filepath.Base(bin)},
		Counters: []config.Counter{{Probe: "uprobe:four"}},
	}}
	s := startReceiverConfig(t, cfg)
	started := time.Now()
	for round := range 5 {
		begun := time.Now()
		p := testutil.StartProgram(t, bin, "ready ")
		var decided time.Duration
		require.Eventually(t, func() bool {
			mask, _, ok := s.rcv.tracer.ProcessMask(uint32(p.PID))
			decided = time.Since(begun)
			return ok && mask != 0 && mask&(1<<bpfobj.ProcPendingBit) == 0
		}, 5*time.Second, time.Millisecond, "round %d: the process is never decided", round)
		t.Logf("round %d: decided %v after the program was started", round, decided.Round(time.Microsecond))
		assert.Less(t, decided, 300*time.Millisecond, "round %d: decided long before flush_interval (1 s) ends", round)

		before, err := s.rcv.tracer.Stats()
		require.NoError(t, err)
		require.Equal(t, "four 100", p.Ask("four 100", "four "))
		after, err := s.rcv.tracer.Stats()
		require.NoError(t, err)
		assert.Equal(t, uint64(100), after.Probes[0].Hits-before.Probes[0].Hits, "round %d: the engine counted every call itself", round)
		pids, err := s.rcv.tracer.PendingPIDs()
		require.NoError(t, err)
		assert.NotContains(t, pids, uint32(p.PID), "round %d: nothing counted as pending after the decision", round)
		p.Stop()
	}
	// An exec storm of processes the selector does not choose, then a
	// quiet time: the drain goroutine woke for the execs at most every
	// urgentGap (two wakeups each: the record, and the drain), and never
	// spun on a flag whose record it had read already.
	for range 300 {
		require.NoError(t, exec.Command("/bin/true").Run())
	}
	time.Sleep(200 * time.Millisecond) // the quiet time measured, not a wait for an event
	elapsed := time.Since(started)
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	t.Logf("%d wakeups in %v", s.rcv.wakeups, elapsed)
	assert.LessOrEqual(t, s.rcv.wakeups, 2*int(elapsed/urgentGap)+100, "wakeups in %v", elapsed)
}
