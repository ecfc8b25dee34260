package receiver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"golang.org/x/sys/unix"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/harness/testutil/hostile"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/receiver/internal/metadatatest"
)

// statusHost records the component's status events.
type statusHost struct {
	component.Host
	mu     sync.Mutex
	events []*componentstatus.Event
}

func (h *statusHost) Report(ev *componentstatus.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, ev)
}

// recoverable returns the errors of the recoverable-error events so far.
func (h *statusHost) recoverable() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, ev := range h.events {
		if ev.Status() == componentstatus.StatusRecoverableError {
			out = append(out, ev.Err().Error())
		}
	}
	return out
}

// startWithStatus starts a receiver on targets with a host that records
// its status, and returns the Start error too.
func startWithStatus(t *testing.T, targets []config.Target) (started, *statusHost, error) {
	t.Helper()
	cfg := createDefaultConfig()
	cfg.Targets = targets
	require.NoError(t, cfg.Validate())
	s := started{traces: new(consumertest.TracesSink), metrics: new(consumertest.MetricsSink), telemetry: componenttest.NewTelemetry()}
	t.Cleanup(func() { require.NoError(t, s.telemetry.Shutdown(context.Background())) })
	f := NewFactory()
	tr, err := f.CreateTraces(context.Background(), metadatatest.NewSettings(s.telemetry), cfg, s.traces)
	require.NoError(t, err)
	host := &statusHost{Host: componenttest.NewNopHost()}
	s.rcv = tr.(*uprobeReceiver)
	t.Cleanup(func() { _ = s.rcv.Shutdown(context.Background()) })
	return s, host, tr.Start(context.Background(), host)
}

// unplanned returns the receiver's count of files left out, by reason.
func unplanned(s started) map[string]int64 {
	out := map[string]int64{}
	m, err := s.telemetry.GetMetric("otelcol_receiver_uprobe_files_unplanned")
	if err != nil {
		return out
	}
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		v, _ := dp.Attributes.Value("unplanned.reason")
		out[v.AsString()] = dp.Value
	}
	return out
}

// inContainer runs file as dir/app in a private mount namespace (a tmpfs
// over dir, empty on the host): a container whose image has its own file
// at the target's path.
func inContainer(t *testing.T, dir, file string) *testutil.Program {
	t.Helper()
	if _, err := exec.LookPath("unshare"); err != nil {
		testutil.SkipOrFail(t, "unshare not found")
	}
	return testutil.StartCommand(t, "ready", "unshare", "-m", "--propagation", "private", "sh", "-c",
		fmt.Sprintf("mount -t tmpfs none %s && cp %s %s/app && exec %s/app", dir, file, dir, dir))
}

// hostileCases are the files a tenant can give: each is left out, never
// fatal, while the collector keeps tracing everything else. Each took the
// collector down on main: a fatal stack overflow (types), 3.1 and 5.6 GiB
// (bombs), 25 s of Start (the typedef chain).
func hostileCases(t *testing.T, prog string) map[string]string {
	t.Helper()
	bomb, err := hostile.Compressed(".debug_str", nil, 1<<30)
	require.NoError(t, err)
	bombs := func(names ...string) []hostile.Section {
		var out []hostile.Section
		for _, n := range names {
			s := bomb
			s.Name = n
			out = append(out, s)
		}
		return out
	}
	long := func(u *hostile.Unit) uint32 { return u.Base("long", 8) }
	return map[string]string{
		"typedef of itself":            hostile.WithType(t, prog, func(u *hostile.Unit) uint32 { return u.Typedef("t", u.Next()) }),
		"const of itself":              hostile.WithType(t, prog, func(u *hostile.Unit) uint32 { return u.Const(u.Next()) }),
		"pointer to itself":            hostile.WithType(t, prog, func(u *hostile.Unit) uint32 { return u.Pointer(u.Next()) }),
		"1,000,000-deep pointer chain": hostile.WithType(t, prog, func(u *hostile.Unit) uint32 { return u.PointerChain(1_000_000, u.Base("long", 8)) }),
		"100,000-long typedef chain":   hostile.WithType(t, prog, func(u *hostile.Unit) uint32 { return u.TypedefChain(100_000, u.Base("long", 8)) }),
		"compressed-section bomb":      hostile.WithType(t, prog, long, bombs(".debug_str")...),
		"three bombs":                  hostile.WithType(t, prog, long, bombs(".debug_str", ".debug_line", ".debug_ranges")...),
	}
}

// wantReason is the unplanned.reason each hostile case is counted under;
// "" for one that is not left out (a pointer to itself is a pointer).
var wantReason = map[string]string{
	"typedef of itself": "malformed", "const of itself": "malformed", "pointer to itself": "",
	"1,000,000-deep pointer chain": "over_limit", "100,000-long typedef chain": "malformed",
	"compressed-section bomb": "over_limit", "three bombs": "over_limit",
}

// A container whose file at the target's path is hostile (types of
// themselves, a million-deep chain, a 100,000-long typedef chain,
// compressed-section bombs), running when the collector starts: that
// file is left out (a warning, a count by reason, a recoverable error as
// status) and the host's file is traced; Start takes well under the 25 s
// the typedef chain cost, and the collector's heap stays far from the
// gigabytes a bomb took. On main every case but the pointer to itself
// killed the collector or took gigabytes.
func TestHostileContainerFileAtStart(t *testing.T) {
	testutil.RequireRoot(t)
	prog := hostile.Program(t)
	good := hostile.WithType(t, prog, func(u *hostile.Unit) uint32 { return u.Base("long", 8) })
	for name, file := range hostileCases(t, prog) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			copyFile(t, good, filepath.Join(dir, "app"))
			host := testutil.StartProgram(t, filepath.Join(dir, "app"), "ready")
			tenant := inContainer(t, dir, file)

			resetPeakRSS(t)
			startCPU := processCPU(t)
			s, status, err := startWithStatus(t, []config.Target{{Path: filepath.Join(dir, "app"), Spans: []config.Span{{
				Name: "work", Function: "work", Attributes: map[string]string{"x": "$x"},
			}}}})
			require.NoError(t, err, "a tenant's file never fails Start while the host's file is good")
			assert.Less(t, processCPU(t)-startCPU, 5*time.Second, "Start's CPU time")
			peak := peakRSS(t)
			t.Logf("peak RSS of the test binary: %d MiB", peak>>20)
			assert.Less(t, peak, uint64(400<<20), "peak RSS of the test binary through Start")

			reason := wantReason[name]
			if reason == "" {
				require.Len(t, s.rcv.plan.Files, 2, "both files planned")
				assert.Empty(t, unplanned(s))
			} else {
				require.Len(t, s.rcv.plan.Files, 1)
				assert.Equal(t, filepath.Join(dir, "app"), s.rcv.plan.Files[0].Path, "the host's file")
				require.Len(t, s.rcv.watcher.planner.Unplanned, 1)
				assert.Equal(t, map[string]int64{reason: 1}, unplanned(s))
				require.Len(t, status.recoverable(), 1)
				assert.Contains(t, status.recoverable()[0], "left out ("+reason+"; the other files are traced)")
			}

			assert.Equal(t, "work 100 sum=5050", host.Ask("work 100", "work "))
			assert.Equal(t, "work 10 sum=55", tenant.Ask("work 10", "work "), "the tenant's program runs as built")
			require.NoError(t, s.rcv.Shutdown(context.Background()))
			perPID := map[int64]int{}
			for _, sp := range allSpans(s.traces) {
				perPID[attrInt(t, sp.resource, "process.pid")]++
				if name != "pointer to itself" {
					attrInt(t, sp.Attributes(), "x")
				}
			}
			assert.Equal(t, 100, perPID[int64(host.PID)], "the host's program is traced")
			if reason != "" {
				assert.Len(t, perPID, 1, "nothing from the left-out file")
			}
		})
	}
}

// A target whose only file is hostile fails Start with the reason: a
// configuration that traces nothing stays loud.
func TestHostileOnlyFileFailsStart(t *testing.T) {
	testutil.RequireRoot(t)
	prog := hostile.Program(t)
	file := hostile.WithType(t, prog, func(u *hostile.Unit) uint32 { return u.Typedef("t", u.Next()) })
	_, _, err := startWithStatus(t, []config.Target{{Path: file, Spans: []config.Span{{
		Name: "work", Function: "work", Attributes: map[string]string{"x": "$x"},
	}}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "a typedef refers back to itself through typedefs, qualifiers or arrays: malformed debuginfo")
}

// A container started after the collector with a hostile file at the
// target's path is left out when the file watcher finds it (warned,
// counted, status), while another target and the host's file go on being
// traced; a good container started after it is still found and attached:
// the watcher lives on. On main the typedef of itself killed the
// collector, and each restart again.
func TestHostileContainerFileLater(t *testing.T) {
	testutil.RequireRoot(t)
	prog := hostile.Program(t)
	good := hostile.WithType(t, prog, func(u *hostile.Unit) uint32 { return u.Base("long", 8) })
	bad := hostile.WithType(t, prog, func(u *hostile.Unit) uint32 { return u.Typedef("t", u.Next()) })
	dir := t.TempDir()
	copyFile(t, good, filepath.Join(dir, "app"))
	other := filepath.Join(t.TempDir(), "other")
	copyFile(t, good, other)
	host := testutil.StartProgram(t, filepath.Join(dir, "app"), "ready")
	otherProc := testutil.StartProgram(t, other, "ready")
	span := config.Span{Name: "work", Function: "work", Attributes: map[string]string{"x": "$x"}}
	s, status, err := startWithStatus(t, []config.Target{
		{Path: filepath.Join(dir, "app"), Spans: []config.Span{span}},
		{Path: other, Spans: []config.Span{span}},
	})
	require.NoError(t, err)
	require.Len(t, s.rcv.plan.Files, 2)

	tenant := inContainer(t, dir, bad)
	require.Eventually(t, func() bool { return unplanned(s)["malformed"] == 1 }, 20*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return len(status.recoverable()) == 1 }, 10*time.Second, 10*time.Millisecond)
	assert.Contains(t, status.recoverable()[0], "a typedef refers back to itself")
	assert.Equal(t, int64(1), fileChanges(s, "failed"))
	// The same file in another process of that container is not read
	// again.
	tenant2 := testutil.StartCommand(t, "ready", "nsenter", "-t", fmt.Sprint(pidOfChild(t, tenant.PID)), "-m", "--", filepath.Join(dir, "app"))

	fine := inContainer(t, dir, good)
	require.Eventually(t, func() bool { return fileChanges(s, "attached") == 1 }, 20*time.Second, 10*time.Millisecond)
	host.Ask("work 7", "work 7")
	otherProc.Ask("work 5", "work 5")
	tenant.Ask("work 3", "work 3")
	tenant2.Ask("work 3", "work 3")
	fine.Ask("work 4", "work 4")
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	assert.Equal(t, map[string]int64{"malformed": 1}, unplanned(s), "read once")
	perPID := map[int64]int{}
	for _, sp := range allSpans(s.traces) {
		perPID[attrInt(t, sp.resource, "process.pid")]++
	}
	assert.Equal(t, map[int64]int{int64(host.PID): 7, int64(otherProc.PID): 5, int64(pidOfChild(t, fine.PID)): 4}, perPID)
}

// 100,000 copies of one USDT note are one site: attached once, each call
// counted once, and the traced program's cost per call that of one probe.
// On main they were 100,000 sites at one address (the program went from
// ~0 to 75% of a CPU).
func TestUSDTNoteCopies(t *testing.T) {
	testutil.RequireRoot(t)
	prog := hostile.Program(t)
	copies := hostile.WithNotes(t, prog, 100_000)
	one := hostile.WithNotes(t, prog, 1)
	cost := map[string]time.Duration{}
	for name, file := range map[string]string{"one": one, "copies": copies} {
		p := testutil.StartProgram(t, file, "ready")
		s := startReceiver(t, []config.Target{{Path: file, Counters: config.CountersOf("usdt:hostile:tick")}})
		require.Equal(t, 1, len(s.rcv.plan.Attachments), name)
		require.Equal(t, 1, s.rcv.plan.Probes[0].Locations)
		start := threadCPU(t, p.PID)
		p.Ask("tick 100000", "tick 100000")
		cost[name] = threadCPU(t, p.PID) - start
		require.NoError(t, s.rcv.Shutdown(context.Background()))
		hits := sumPoints(s.metrics.AllMetrics()[len(s.metrics.AllMetrics())-1], "uprobe.probe.hits")
		assert.Equal(t, int64(100_000), hits["usdt:hostile:tick"], name)
	}
	t.Logf("100,000 calls: %v with one note, %v with 100,000 copies", cost["one"], cost["copies"])
	assert.Less(t, cost["copies"], 2*cost["one"]+100*time.Millisecond)
}

// resetPeakRSS resets the test binary's peak resident set size
// (VmHWM), after a garbage collection that returns what earlier tests
// left to the system.
func resetPeakRSS(t *testing.T) {
	t.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	require.NoError(t, os.WriteFile("/proc/self/clear_refs", []byte("5"), 0))
}

// peakRSS returns the test binary's peak resident set size (VmHWM) since
// resetPeakRSS.
func peakRSS(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb uint64
			_, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}

// processCPU returns the CPU time of the test binary.
func processCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru unix.Rusage
	require.NoError(t, unix.Getrusage(unix.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// threadCPU returns the CPU time of a process (utime + stime from
// /proc/PID/stat, in clock ticks of 10 ms).
func threadCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	var utime, stime int64
	// The command may hold blanks: fields after its closing parenthesis.
	i := len(b) - 1
	for i > 0 && b[i] != ')' {
		i--
	}
	var state string
	var skip [10]int64
	_, err = fmt.Sscan(string(b[i+2:]), &state, &skip[0], &skip[1], &skip[2], &skip[3], &skip[4], &skip[5], &skip[6], &skip[7], &skip[8], &skip[9], &utime, &stime)
	require.NoError(t, err)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}
