//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/planner"
	"github.com/otel-uprobe/uprobereceiver/internal/tracer"
	uprobereceiver "github.com/otel-uprobe/uprobereceiver/receiver"
)

// locationsPerFunction is what a span over a generated function attaches:
// its entry and its kernel return probe (returns: auto picks the kernel's
// return probe for a C function that neither recurses nor unwinds).
const locationsPerFunction = 2

// buildPrograms compiles the programs the points attach to: for each
// location count, a C program with count/2 functions (fns-COUNT), and the
// program whose copies the target points attach (target).
func buildPrograms(dir string, s settings) error {
	for _, n := range s.locations {
		if err := buildFunctions(dir, n/locationsPerFunction); err != nil {
			return err
		}
	}
	return buildTarget(dir, slicesMax(s.targets))
}

func slicesMax(v []int) int {
	m := 0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// buildFunctions writes and compiles fns-N: N functions fn_00000… that
// begin with push %rbp (frame pointers), each called from main.
func buildFunctions(dir string, n int) error {
	var src strings.Builder
	src.WriteString("volatile long sink;\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&src, "__attribute__((noinline)) long fn_%05d(long x) { sink += x; return x * %d; }\n", i, i+3)
	}
	src.WriteString("int main(int argc, char **argv)\n{\n\t(void)argv;\n\tlong x = argc;\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&src, "\tx += fn_%05d(x);\n", i)
	}
	src.WriteString("\treturn (int)(x & 1);\n}\n")
	c := filepath.Join(dir, fmt.Sprintf("fns-%d.c", n))
	if err := os.WriteFile(c, []byte(src.String()), 0o644); err != nil {
		return err
	}
	return gcc("-O1", "-g", "-fno-omit-frame-pointer", "-o", filepath.Join(dir, fmt.Sprintf("fns-%d", n)), c)
}

// targetSource is the program of the target points: a USDT pair, a
// function and a USDT counter, like the demo TestShutdownManyFiles copies.
const targetSource = `#include <sys/sdt.h>
volatile long sink;
__attribute__((noinline)) long work(long x) { sink += x; return x * 3; }
int main(int argc, char **argv)
{
	(void)argv;
	DTRACE_PROBE1(scale, query__start, argc);
	long x = work(argc);
	DTRACE_PROBE1(scale, tick, x);
	DTRACE_PROBE1(scale, query__done, x);
	return (int)(x & 1);
}
`

// buildTarget compiles the target program and makes n copies of it,
// target-0000…: a uprobe belongs to an inode, so each copy is a file of
// its own to attach.
func buildTarget(dir string, n int) error {
	c := filepath.Join(dir, "target.c")
	if err := os.WriteFile(c, []byte(targetSource), 0o644); err != nil {
		return err
	}
	bin := filepath.Join(dir, "target")
	if err := gcc("-O2", "-g", "-o", bin, c); err != nil {
		return err
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		if err := os.WriteFile(targetPath(dir, i), b, 0o755); err != nil {
			return err
		}
	}
	return nil
}

func targetPath(dir string, i int) string { return filepath.Join(dir, fmt.Sprintf("target-%04d", i)) }

func gcc(args ...string) error {
	out, err := exec.Command("gcc", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("gcc %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// targetsOf returns the configuration of one point.
func targetsOf(kind string, count int, dir string) ([]config.Target, error) {
	switch kind {
	case kindLocations:
		n := count / locationsPerFunction
		return []config.Target{{
			Path:  filepath.Join(dir, fmt.Sprintf("fns-%d", n)),
			Spans: []config.Span{{Name: "f.", Function: "fn_*", MaxFunctions: n}},
		}}, nil
	case kindPostgres:
		return []config.Target{{
			Path:  postgresPath,
			Spans: []config.Span{{Name: "pg.", Function: "*", MaxFunctions: 100_000}},
		}}, nil
	case kindTargets:
		targets := make([]config.Target, count)
		for i := range targets {
			targets[i] = config.Target{
				Path: targetPath(dir, i), ServiceName: fmt.Sprintf("target-%04d", i),
				Spans: []config.Span{
					{Name: "query", Entry: "usdt:scale:query__start", Exit: "usdt:scale:query__done"},
					{Name: "work", Function: "work"},
				},
				Counters: config.CountersOf("usdt:scale:tick"),
			}
		}
		return targets, nil
	}
	return nil, fmt.Errorf("%w %q", errNoPoint, kind)
}

// measurePoint runs the receiver on one point in this process and prints
// the Run as JSON.
func measurePoint(kind string, count int, dir, heapProfile string) error {
	if heapProfile != "" && os.Getenv("SCALEBENCH_EVERY_ALLOCATION") != "" {
		runtime.MemProfileRate = 1 // every allocation in the profile (slow)
	}
	targets, err := targetsOf(kind, count, dir)
	if err != nil {
		return err
	}
	f := uprobereceiver.NewFactory()
	cfg := f.CreateDefaultConfig().(*uprobereceiver.Config)
	cfg.Targets = targets
	// Collections while attached: the receiver keeps state per probe and
	// span between them, and each makes garbage, which is part of what it
	// costs. The memory is read just after the second, a second before the
	// third.
	cfg.CollectionInterval = time.Second
	// A pattern over 10,000 functions has 20,000 locations in one file,
	// more than the default bound on a file's locations.
	cfg.MaxSitesPerFile = 100_000
	if err := cfg.Validate(); err != nil {
		return err
	}
	set := receivertest.NewNopSettings(component.MustNewType("uprobe"))
	traces, err := consumer.NewTraces(func(context.Context, ptrace.Traces) error { return nil })
	if err != nil {
		return err
	}
	collected := make(chan int, 1)
	var collections int
	metrics, err := consumer.NewMetrics(func(_ context.Context, md pmetric.Metrics) error {
		collections++
		select {
		case collected <- md.DataPointCount():
		default:
		}
		return nil
	})
	if err != nil {
		return err
	}
	r, err := f.CreateTraces(context.Background(), set, cfg, traces)
	if err != nil {
		return err
	}
	if _, err := f.CreateMetrics(context.Background(), set, cfg, metrics); err != nil {
		return err
	}
	runtime.GC()
	debug.FreeOSMemory()
	var run Run
	run.BaseRSSMiB = statusMiB("VmRSS")
	if err := resetPeak(); err != nil {
		return err
	}
	if p := os.Getenv("SCALEBENCH_CPUPROFILE"); p != "" {
		cf, err := os.Create(p)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(cf); err != nil {
			return err
		}
		defer cf.Close()
	}
	begun, cpu := time.Now(), cpuSeconds()
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		return err
	}
	run.StartSeconds, run.StartCPUSeconds = time.Since(begun).Seconds(), cpuSeconds()-cpu
	pprof.StopCPUProfile()
	// Two collections: their garbage is part of the steady state.
	for i := 0; i < 2; i++ {
		select {
		case run.DataPoints = <-collected:
		case <-time.After(time.Minute):
			return errors.New("no metrics collected within a minute of Start")
		}
	}
	run.AttachedRSSMiB = statusMiB("VmRSS")
	run.PeakRSSMiB = statusMiB("VmHWM")
	if os.Getenv("SCALEBENCH_SMAPS") != "" {
		printSmaps()
	}
	runtime.GC()
	debug.FreeOSMemory()
	run.SettledRSSMiB = statusMiB("VmRSS")
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	run.HeapMiB = float64(ms.HeapAlloc) / (1 << 20)
	if heapProfile != "" {
		hf, err := os.Create(heapProfile)
		if err != nil {
			return err
		}
		if err := pprof.Lookup("heap").WriteTo(hf, 0); err != nil {
			return err
		}
		hf.Close()
	}
	begun, cpu = time.Now(), cpuSeconds()
	if err := r.Shutdown(context.Background()); err != nil {
		return err
	}
	run.ShutdownSeconds, run.ShutdownCPUSeconds = time.Since(begun).Seconds(), cpuSeconds()-cpu
	// What was attached, counted by resolving the same targets again
	// once the measurement is over.
	pl, err := planner.Resolve(cfg.Targets, planner.Options{
		OptimizedUprobes: tracer.HaveOptimizedUprobes(), Arch: tracer.Arch(),
		MaxSitesPerProbe: cfg.MaxSitesPerProbe, MaxSitesPerFile: cfg.MaxSitesPerFile,
	})
	if err != nil {
		return fmt.Errorf("resolving the targets again to count their locations: %w", err)
	}
	run.Locations, run.Files = len(pl.Attachments), len(pl.Files)
	pl.Close()
	return json.NewEncoder(os.Stdout).Encode(run)
}

// statusMiB reads a "kB" line of /proc/self/status, in MiB.
func statusMiB(key string) float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			kib, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kib / 1024
		}
	}
	return 0
}

// resetPeak resets the process's high-water mark of resident memory
// (VmHWM) to its current RSS: writing 5 to /proc/self/clear_refs.
func resetPeak() error {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// printSmaps prints the mappings of the process with the most resident
// memory to stderr (SCALEBENCH_SMAPS=1): where RSS that is not the heap is.
func printSmaps() {
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return
	}
	type mapping struct {
		name string
		kib  int
	}
	var all []mapping
	var cur string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			cur = line
			continue
		}
		if len(f) >= 2 && f[0] == "Rss:" {
			n, _ := strconv.Atoi(f[1])
			all = append(all, mapping{cur, n})
		}
	}
	for i := range all {
		for j := i + 1; j < len(all); j++ {
			if all[j].kib > all[i].kib {
				all[i], all[j] = all[j], all[i]
			}
		}
	}
	for i := 0; i < len(all) && i < 12; i++ {
		fmt.Fprintf(os.Stderr, "%8d kB  %s\n", all[i].kib, all[i].name)
	}
}

// cpuSeconds is the CPU time of the process so far (every thread, user and
// kernel): on a shared machine the time a step waits for a CPU inflates
// its wall-clock time, not this.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
