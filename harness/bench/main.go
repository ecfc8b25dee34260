//go:build linux

// Command bench holds the uprobe receiver to the kernel's own cost floor. In
// one run it measures, side by side and as ratios: the nanoseconds a probe
// adds per hit (no probe, a bare counting uprobe, the receiver's count-only
// and span probes, bpftrace), the spans per second the receiver delivers
// into a pipeline and its CPU per span, the time to attach a thousand USDT
// sites, and the collector's resident memory under a flood. It writes a
// markdown table and JSON. Run it as root: make bench, or make bench-smoke
// for a seconds-long version.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"golang.org/x/sys/unix"

	"github.com/otel-uprobe/uprobereceiver/harness/benchdoc"
	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/planner"
	"github.com/otel-uprobe/uprobereceiver/internal/tracer/floor"
	uprobereceiver "github.com/otel-uprobe/uprobereceiver/receiver"
)

// settings of one run.
type settings struct {
	out         string
	distro      string
	smoke       bool
	cycles      int
	calls       int
	rounds      int
	paceSeconds float64
	memSeconds  int
	sites       int
	cpuProfile  string
	only        string
	rows        string
	// programStats turns BPF run-time statistics on during the per-hit
	// rows and prints each setup's program time per call.
	programStats bool

	// The collector measurement (-only collector).
	flushInterval   string
	floorDistro     string
	before          string
	profileDir      string
	commit          string
	floorSeconds    float64
	idleSeconds     float64
	floodSeconds    float64
	collectorRounds int
	profileSeconds  int
}

func main() {
	var s settings
	flag.StringVar(&s.out, "out", "", "directory for benchmarks.md and benchmarks.json (default: print only)")
	flag.StringVar(&s.distro, "distro", "", "path of otelcol-uprobe, for the memory measurement (skipped when empty)")
	flag.BoolVar(&s.smoke, "smoke", false, "a seconds-long run that only proves the benchmark works")
	flag.StringVar(&s.cpuProfile, "cpuprofile", "", "write a CPU profile of the throughput runs to this file")
	flag.StringVar(&s.only, "only", "", "run only this part: per-hit, thread-context, throughput, collector, attach or memory")
	flag.BoolVar(&s.programStats, "program-stats", false, "turn BPF run-time statistics on during the per-hit rows and print each setup's BPF time per call (distorts the ratios)")
	flag.StringVar(&s.rows, "rows", "", "measure only the per-hit rows whose names match this regular expression (their floors run anyway)")
	flag.StringVar(&s.floorDistro, "floor-distro", "", "path of otelcol-floor (the collector built with the spanfloor receiver), for the collector floor (skipped when empty)")
	flag.StringVar(&s.flushInterval, "flush-interval", "", "the receiver's flush_interval in the collector measurement (default: the receiver's)")
	flag.StringVar(&s.before, "before", "", "a benchmarks.json of an earlier run, shown next to this one's collector measurement")
	flag.StringVar(&s.profileDir, "profile-dir", "", "directory for the collector's CPU and allocation profiles (default: -out)")
	flag.StringVar(&s.commit, "commit", "", "the commit the measured code was built from (default: git describe of the current directory)")
	cycles := flag.Int("cycles", 0, "per-hit cycles (default: 9, 1 with -smoke)")
	render := flag.String("render", "", "write benchmarks.md (and benchmarks.json) to -out again from this benchmarks.json, its goals recomputed, measuring nothing")
	floorSecs := flag.Float64("pdata-floor", 0, "run as the standalone pdata floor for this many seconds and print it as JSON")
	flag.Parse()
	if *floorSecs > 0 {
		if err := floorMain(*floorSecs); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	s.cycles, s.calls, s.rounds, s.paceSeconds, s.memSeconds, s.sites = 9, 100_000, 6, 2, 30, 1000
	s.floorSeconds, s.idleSeconds, s.floodSeconds, s.collectorRounds, s.profileSeconds = 1, 5, 4, 7, 30
	if s.smoke {
		s.cycles, s.calls, s.rounds, s.paceSeconds, s.memSeconds, s.sites = 1, 20_000, 3, 0.3, 3, 200
		s.floorSeconds, s.idleSeconds, s.floodSeconds, s.collectorRounds, s.profileSeconds = 0.3, 1, 1, 1, 2
	}
	if *cycles > 0 {
		s.cycles = *cycles
	}
	if *render != "" {
		if err := renderAgain(*render, s.out); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if s.profileDir == "" {
		s.profileDir = s.out
	}
	if out, err := exec.Command("git", "describe", "--always", "--dirty").Output(); err == nil && s.commit == "" {
		s.commit = strings.TrimSpace(string(out))
	}
	if err := run(s); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// Result is everything one run measured.
type Result struct {
	Date     string `json:"date"`
	Machine  string `json:"machine"`
	CPUs     int    `json:"cpus"`
	Kernel   string `json:"kernel"`
	Bpftrace string `json:"bpftrace"`
	Smoke    bool   `json:"smoke"`
	// Commit is what the measured code was built from (git describe).
	Commit string `json:"commit,omitempty"`
	// Trap is what a probe hit costs on this machine by site class,
	// measured first (tracer.CalibrateMachine).
	Trap       *Trap        `json:"trap,omitempty"`
	PerHit     []PerHit     `json:"per_hit"`
	Throughput []Throughput `json:"throughput"`
	Collector  *Collector   `json:"collector,omitempty"`
	// Before is the collector measurement of an earlier run (-before).
	Before *Collector `json:"before,omitempty"`
	Attach *Attach    `json:"attach,omitempty"`
	// ThreadContext is what reading a published thread context costs.
	ThreadContext *ThreadContext `json:"thread_context,omitempty"`
	Memory        *Memory        `json:"memory,omitempty"`
	Goals         []Goal         `json:"goals"`
	Notes         []string       `json:"notes,omitempty"`
}

// PerHit is the cost one configuration adds per call of the probed function.
type PerHit struct {
	Name     string    `json:"name"`
	AddedNs  float64   `json:"added_ns"`
	Cycles   []float64 `json:"cycles_ns"`
	Baseline string    `json:"baseline,omitempty"`
	// Ratio is the median over cycles of AddedNs / what the baseline adds
	// to the twin function in the same rounds.
	Ratio  float64   `json:"ratio,omitempty"`
	Ratios []float64 `json:"cycle_ratios,omitempty"`
	// Also is the ratio to a second floor, timed in the same rounds
	// (twin2()).
	Also *Against `json:"also,omitempty"`
	// Feature names the row of the feature cost matrix this is, with what
	// dominates its cost; empty for the main rows.
	Feature   string `json:"feature,omitempty"`
	Dominates string `json:"dominates,omitempty"`
	// Goal names the goal for this row's ratio, GoalRatio its
	// bound; empty for none.
	Goal      string  `json:"goal,omitempty"`
	GoalRatio float64 `json:"goal_ratio,omitempty"`
	// Recipe names the recipe of a recipe row (recipes.go), timed on its
	// own workload: UnprobedNs is a call's median time without probes,
	// Traps the traps of each site class a call takes (its floor's hits).
	Recipe     string  `json:"recipe,omitempty"`
	UnprobedNs float64 `json:"unprobed_ns,omitempty"`
	Traps      string  `json:"traps_per_call,omitempty"`
}

// Against is a row's ratio to one floor: the median over cycles of what
// the row adds / what the floor adds in the same rounds.
type Against struct {
	Floor  string    `json:"floor"`
	Ratio  float64   `json:"ratio"`
	Ratios []float64 `json:"cycle_ratios"`
}

// Throughput is one paced run of span delivery into a counting pipeline.
type Throughput struct {
	TargetRate   int     `json:"target_rate"`
	Seconds      float64 `json:"seconds"`
	Fired        int64   `json:"fired"`
	Delivered    int64   `json:"delivered"`
	Lost         int64   `json:"lost"`
	FiredPerSec  float64 `json:"fired_per_second"`
	CPUSeconds   float64 `json:"receiver_cpu_seconds"`
	CPUNsPerSpan float64 `json:"receiver_cpu_ns_per_span"`
}

// Attach is the time to attach one probe with many USDT sites.
type Attach struct {
	Sites      int     `json:"sites"`
	ResolveMs  float64 `json:"resolve_ms"`
	StartMs    float64 `json:"start_ms"`
	ShutdownMs float64 `json:"shutdown_ms"`
}

// Memory is the collector's resident memory while a probe fires at full rate.
type Memory struct {
	Seconds     int       `json:"seconds"`
	Spans       int64     `json:"spans_fired"`
	RSSStartMiB float64   `json:"rss_start_mib"`
	RSSWarmMiB  float64   `json:"rss_after_warmup_mib"`
	RSSPeakMiB  float64   `json:"rss_peak_mib"`
	RSSEndMiB   float64   `json:"rss_end_mib"`
	SamplesMiB  []float64 `json:"rss_samples_mib"`
}

// Goal is one target of the issue and whether this run met it.
type Goal struct {
	Name     string `json:"name"`
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
}

func run(s settings) error {
	testutil.RequireRootOrExit()
	// bpftrace 0.17 detaches through tracefs even when it attached through
	// perf events; mount it where bpftrace looks if nothing is there.
	if _, err := os.Stat("/sys/kernel/tracing/uprobe_events"); err != nil {
		_ = unix.Mount("tracefs", "/sys/kernel/tracing", "tracefs", 0, "")
	}
	dir, err := os.MkdirTemp("", "uprobe-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	workloadPath := filepath.Join(dir, "workload")
	treePath := filepath.Join(dir, "tree.s")
	if err := os.WriteFile(treePath, []byte(treeAsm()), 0o644); err != nil {
		return err
	}
	// -g: the line probe row finds its line in the DWARF.
	if err := gcc("-O2", "-g", "-o", workloadPath, testutil.Testdata("bench", "workload.c"), treePath); err != nil {
		return err
	}
	defer stopFeatureWorkloads()
	// The probed program runs pinned to CPU 0, the readers of the
	// receiver and of the floors on the other CPUs.
	wcpu := -1
	if runtime.NumCPU() >= 2 {
		wcpu = 0
	}
	w, err := startWorkloadOn(workloadPath, wcpu)
	if err != nil {
		return err
	}
	defer w.stop()

	res := &Result{
		Date:    time.Now().UTC().Format(time.RFC3339),
		Machine: machine(),
		CPUs:    runtime.NumCPU(),
		Kernel:  kernel(),
		Smoke:   s.smoke,
		Commit:  s.commit,
	}
	if out, err := exec.Command("bpftrace", "--version").Output(); err == nil {
		res.Bpftrace = strings.TrimSpace(string(out))
	}

	part := func(name string) bool { return s.only == "" || s.only == name }
	if err := trapCost(res); err != nil {
		// Not fatal: the rows below still compare with their floors.
		res.Notes = append(res.Notes, fmt.Sprintf("The trap cost could not be measured: %v", err))
	}
	if part("per-hit") {
		if err := perHit(s, res, w, workloadPath); err != nil {
			return fmt.Errorf("per-hit costs: %w", err)
		}
	}
	if part("thread-context") {
		if err := threadContextCost(s, res, dir); err != nil {
			return fmt.Errorf("thread context: %w", err)
		}
	}
	if part("throughput") {
		if err := throughput(s, res, w, workloadPath); err != nil {
			return fmt.Errorf("throughput: %w", err)
		}
	}
	if s.distro != "" && part("collector") {
		if err := collectorCPU(s, res, workloadPath, dir); err != nil {
			return fmt.Errorf("collector CPU per span: %w", err)
		}
		if s.before != "" {
			b, err := os.ReadFile(s.before)
			if err != nil {
				return err
			}
			var before Result
			if err := json.Unmarshal(b, &before); err != nil {
				return fmt.Errorf("reading %s: %w", s.before, err)
			}
			res.Before = before.Collector
		}
	}
	if part("attach") {
		if err := attachTime(s, res, dir); err != nil {
			return fmt.Errorf("attach time: %w", err)
		}
	}
	if s.distro != "" && part("memory") {
		if err := memory(s, res, workloadPath, dir); err != nil {
			return fmt.Errorf("memory: %w", err)
		}
	}
	goals(res)
	return write(res, s.out)
}

// renderAgain writes the documents of an earlier run (its benchmarks.json
// at path) to out again, with its goals recomputed.
func renderAgain(path, out string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var res Result
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	res.Goals = nil
	goals(&res)
	seen := map[string]bool{} // goals adds its notes again
	notes := res.Notes[:0]
	for _, n := range res.Notes {
		if !seen[n] {
			seen[n] = true
			notes = append(notes, n)
		}
	}
	res.Notes = notes
	return write(&res, out)
}

// write prints the markdown of res and, with out set, writes
// benchmarks.md and benchmarks.json there.
func write(res *Result, out string) error {
	s := settings{out: out}
	md := markdown(res)
	fmt.Print(md)
	if s.out != "" {
		if err := os.MkdirAll(s.out, 0o755); err != nil {
			return err
		}
		js, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(s.out, "benchmarks.json"), append(js, '\n'), 0o644); err != nil {
			return err
		}
		path := filepath.Join(s.out, "benchmarks.md")
		old, _ := os.ReadFile(path) // the machine kinds, soak and budget sections stay
		doc := benchdoc.KeepSections(string(old), md)
		if key, block := machineBlock(res); block != "" && !res.Smoke {
			doc = benchdoc.Machines.Replace(doc, benchdoc.UpsertBlock(benchdoc.Machines.Body(doc), key, block))
		}
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func gcc(args ...string) error {
	out, err := exec.Command("gcc", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("gcc %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

func machine() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func kernel() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}

// workload drives testdata/bench/workload.c over its stdin.
type workload struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	// readyLine is the line that said the workload is ready ("ready …").
	readyLine string
}

func startWorkload(path string) (*workload, error) {
	return startWorkloadCmd(exec.Command(path))
}

func startWorkloadCmd(cmd *exec.Cmd) (*workload, error) {
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	w := &workload{cmd: cmd, in: in, lines: make(chan string, 4)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			w.lines <- sc.Text()
		}
		close(w.lines)
	}()
	line, err := w.expect("ready")
	if err != nil {
		return nil, err
	}
	w.readyLine = line
	return w, nil
}

func (w *workload) expect(prefix string) (string, error) {
	select {
	case line, ok := <-w.lines:
		if !ok {
			return "", errors.New("workload exited")
		}
		if !strings.HasPrefix(line, prefix) {
			return "", fmt.Errorf("workload said %q, want %q", line, prefix)
		}
		return line, nil
	case <-time.After(10 * time.Minute):
		return "", fmt.Errorf("workload did not say %q", prefix)
	}
}

// measure3 returns the median ns of CPU time per call of probed(), twin()
// and twin2() (or of the set named), called with the arguments args names
// (see workload.c).
func (w *workload) measure3(args string, calls, rounds int, set string) (probed, twin, twin2 float64, err error) {
	fmt.Fprintf(w.in, "measure3 %s %d %d %s\n", args, calls, rounds, set)
	line, err := w.expect("ns ")
	if err != nil {
		return 0, 0, 0, err
	}
	_, err = fmt.Sscanf(line, "ns %f %f %f", &probed, &twin, &twin2)
	return probed, twin, twin2, err
}

// pace calls probed() at rate per second for secs seconds.
func (w *workload) pace(rate int, secs float64) (calls int64, took time.Duration, err error) {
	fmt.Fprintf(w.in, "pace %d %g\n", rate, secs)
	line, err := w.expect("paced ")
	if err != nil {
		return 0, 0, err
	}
	var ns int64
	_, err = fmt.Sscanf(line, "paced %d %d", &calls, &ns)
	return calls, time.Duration(ns), err
}

func (w *workload) ping() error {
	fmt.Fprintln(w.in, "ping")
	_, err := w.expect("pong")
	return err
}

func (w *workload) stop() {
	fmt.Fprintln(w.in, "exit")
	w.in.Close()
	_ = w.cmd.Wait()
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// startBpftrace runs a bpftrace program and returns once its probes fire:
// it pokes the workload's ping() until bpftrace prints "ping".
func startBpftrace(w *workload, prog string) (func() error, error) {
	cmd := exec.Command("bpftrace", "-e", prog)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	pinged := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 64<<10)
		for sc.Scan() {
			if sc.Text() == "ping" {
				select {
				case pinged <- struct{}{}:
				default:
				}
			}
		}
	}()
	stop := func() error {
		_ = cmd.Process.Signal(os.Interrupt)
		<-done
		return cmd.Wait()
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := w.ping(); err != nil {
			return nil, errors.Join(err, stop())
		}
		select {
		case <-pinged:
			return func() error {
				err := stop()
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					return nil // bpftrace exits non-zero on SIGINT
				}
				return err
			}, nil
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, errors.Join(errors.New("bpftrace did not attach within 60s"), stop())
		}
	}
}

// startReceiver runs the receiver in this process with a counting traces
// consumer and a metrics sink that gets only the final snapshot.
func startReceiver(t config.Target, ring int) (component.Component, *counts, error) {
	return startReceiverEvery(t, ring, time.Hour)
}

// startReceiverEvery is startReceiver with metrics collected every
// interval.
func startReceiverEvery(t config.Target, ring int, interval time.Duration) (component.Component, *counts, error) {
	f := uprobereceiver.NewFactory()
	cfg := f.CreateDefaultConfig().(*uprobereceiver.Config)
	cfg.Targets = []config.Target{t}
	cfg.RingBufferSize = ring
	cfg.CollectionInterval = interval
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	c := &counts{}
	traces, err := consumer.NewTraces(func(_ context.Context, td ptrace.Traces) error {
		c.spans.Add(int64(td.SpanCount()))
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	set := receivertest.NewNopSettings(component.MustNewType("uprobe"))
	r, err := f.CreateTraces(context.Background(), set, cfg, traces)
	if err != nil {
		return nil, nil, err
	}
	if _, err := f.CreateMetrics(context.Background(), set, cfg, &c.metrics); err != nil {
		return nil, nil, err
	}
	if err := r.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		return nil, nil, err
	}
	return r, c, nil
}

// counts is what a benchmark pipeline saw.
type counts struct {
	spans   atomic.Int64
	metrics consumertest.MetricsSink
}

// sum returns the last value of a sum metric's data point for a probe.
func (c *counts) sum(metric, probe string) int64 {
	all := c.metrics.AllMetrics()
	if len(all) == 0 {
		return 0
	}
	md := all[len(all)-1]
	var v int64
	for i := 0; i < md.ResourceMetrics().Len(); i++ {
		sms := md.ResourceMetrics().At(i).ScopeMetrics()
		for j := 0; j < sms.Len(); j++ {
			for k := 0; k < sms.At(j).Metrics().Len(); k++ {
				m := sms.At(j).Metrics().At(k)
				if m.Name() != metric {
					continue
				}
				for p := 0; p < m.Sum().DataPoints().Len(); p++ {
					dp := m.Sum().DataPoints().At(p)
					if name, ok := dp.Attributes().Get("probe.name"); ok && name.Str() == probe {
						v = dp.IntValue()
					}
				}
			}
		}
	}
	return v
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func throughput(s settings, res *Result, w *workload, path string) error {
	rates := []int{100_000, 250_000, 500_000, 1_000_000, 0}
	if s.smoke {
		rates = []int{100_000, 0}
	}
	span := config.Target{Path: path, Spans: []config.Span{{
		Name: "probed", Function: "probed",
		Attributes: map[string]string{"a": "arg0"}, ExitAttributes: map[string]string{"ret": "retval"},
	}}}
	if s.cpuProfile != "" {
		f, err := os.Create(s.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	for _, rate := range rates {
		r, c, err := startReceiver(span, 8<<20)
		if err != nil {
			return err
		}
		cpu0 := cpuSeconds()
		fired, took, err := w.pace(rate, s.paceSeconds)
		if err != nil {
			return errors.Join(err, r.Shutdown(context.Background()))
		}
		if err := r.Shutdown(context.Background()); err != nil {
			return err
		}
		cpu := cpuSeconds() - cpu0
		row := Throughput{
			TargetRate:  rate,
			Seconds:     took.Seconds(),
			Fired:       fired,
			Delivered:   c.spans.Load(),
			Lost:        c.sum("uprobe.events.lost", "uretprobe:probed"),
			FiredPerSec: float64(fired) / took.Seconds(),
			CPUSeconds:  cpu,
		}
		if row.Delivered > 0 {
			row.CPUNsPerSpan = cpu * 1e9 / float64(row.Delivered)
		}
		fmt.Fprintf(os.Stderr, "rate %8d: fired %9d (%.0f/s) delivered %9d lost %8d cpu %.3fs (%.0f ns/span)\n",
			rate, row.Fired, row.FiredPerSec, row.Delivered, row.Lost, cpu, row.CPUNsPerSpan)
		res.Throughput = append(res.Throughput, row)
	}
	return nil
}

// attachTime measures the receiver's Start (resolve, load, attach) and
// Shutdown for one USDT probe with s.sites call sites.
func attachTime(s settings, res *Result, dir string) error {
	var src strings.Builder
	src.WriteString("#include <sys/sdt.h>\nvolatile long sink;\n__attribute__((noinline)) void sites(long x)\n{\n")
	for i := 0; i < s.sites; i++ {
		fmt.Fprintf(&src, "\tDTRACE_PROBE1(gen, site, x + %d);\n", i)
	}
	src.WriteString("\tsink = x;\n}\nint main(int argc, char **argv) { (void)argv; sites(argc); return 0; }\n")
	cfile := filepath.Join(dir, "sites.c")
	bin := filepath.Join(dir, "sites")
	if err := os.WriteFile(cfile, []byte(src.String()), 0o644); err != nil {
		return err
	}
	if err := gcc("-O2", "-o", bin, cfile); err != nil {
		return err
	}
	t := config.Target{Path: bin, Counters: config.CountersOf("usdt:gen:site")}
	t0 := time.Now()
	pl, err := planner.Resolve([]config.Target{t})
	if err != nil {
		return err
	}
	resolve := time.Since(t0)
	pl.Close()
	if len(pl.Attachments) != s.sites {
		return fmt.Errorf("resolved %d sites, want %d", len(pl.Attachments), s.sites)
	}
	t0 = time.Now()
	r, _, err := startReceiver(t, 1<<20)
	if err != nil {
		return err
	}
	start := time.Since(t0)
	t0 = time.Now()
	err = r.Shutdown(context.Background())
	res.Attach = &Attach{
		Sites:      s.sites,
		ResolveMs:  float64(resolve.Microseconds()) / 1000,
		StartMs:    float64(start.Microseconds()) / 1000,
		ShutdownMs: float64(time.Since(t0).Microseconds()) / 1000,
	}
	fmt.Fprintf(os.Stderr, "attach %d sites: resolve %.1f ms, start %.1f ms, shutdown %.1f ms\n", s.sites, res.Attach.ResolveMs, res.Attach.StartMs, res.Attach.ShutdownMs)
	return err
}

// memory runs the distro on the workload at full rate and samples its RSS.
func memory(s settings, res *Result, workloadPath, dir string) error {
	cfg := fmt.Sprintf(`receivers:
  uprobe:
    targets:
      - path: %s
        spans:
          - name: probed
            function: probed
            attributes: {a: arg0}
            exit_attributes: {ret: retval}
processors:
  batch: {}
exporters:
  debug:
    verbosity: basic
    sampling_initial: 1
    sampling_thereafter: 1000
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces: {receivers: [uprobe], processors: [batch], exporters: [debug]}
    metrics: {receivers: [uprobe], exporters: [debug]}
`, workloadPath)
	cfgPath := filepath.Join(dir, "memory.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	col, err := testutil.RunCollector(exec.Command(s.distro, "--config", cfgPath))
	if err != nil {
		return err
	}
	defer func() { _ = col.Stop(time.Minute) }()

	w, err := startWorkload(workloadPath)
	if err != nil {
		return err
	}
	defer w.stop()
	m := &Memory{Seconds: s.memSeconds, RSSStartMiB: rssMiB(col.PID())}
	type paced struct {
		calls int64
		err   error
	}
	done := make(chan paced, 1)
	go func() {
		calls, _, err := w.pace(0, float64(s.memSeconds))
		done <- paced{calls, err}
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			v := rssMiB(col.PID())
			m.SamplesMiB = append(m.SamplesMiB, v)
			m.RSSPeakMiB = max(m.RSSPeakMiB, v)
			if len(m.SamplesMiB) == min(5, s.memSeconds) {
				m.RSSWarmMiB = v
			}
		case p := <-done:
			if p.err != nil {
				return p.err
			}
			m.Spans = p.calls
			m.RSSEndMiB = rssMiB(col.PID())
			res.Memory = m
			fmt.Fprintf(os.Stderr, "memory: %d spans in %ds, RSS start %.1f warm %.1f peak %.1f end %.1f MiB\n",
				m.Spans, m.Seconds, m.RSSStartMiB, m.RSSWarmMiB, m.RSSPeakMiB, m.RSSEndMiB)
			return nil
		}
	}
}

func rssMiB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kib float64
			fmt.Sscanf(strings.TrimSpace(v), "%f", &kib)
			return kib / 1024
		}
	}
	return 0
}

func goals(res *Result) {
	find := func(name string) (PerHit, bool) {
		for _, p := range res.PerHit {
			if p.Name == name {
				return p, true
			}
		}
		return PerHit{}, false
	}
	// Ratios to three places: a goal of 1.00× is missed by 1.003×.
	if p, ok := find("receiver: count-only probe"); ok {
		res.Goals = append(res.Goals, Goal{"count-only probe vs bare counting uprobe", "≤ 1.00×", fmt.Sprintf("%.3f×", p.Ratio), p.Ratio <= 1.00})
	}
	if p, ok := find("receiver: span probe (entry+exit, 2 attributes)"); ok {
		res.Goals = append(res.Goals, Goal{"span probe vs the delivered-span floor", "≤ 1.00×", fmt.Sprintf("%.3f×", p.Ratio), p.Ratio <= 1.00})
	}
	for _, p := range res.PerHit {
		if p.Goal != "" {
			res.Goals = append(res.Goals, Goal{p.Goal, fmt.Sprintf("≤ %.2f×", p.GoalRatio), fmt.Sprintf("%.3f×", p.Ratio), p.Ratio <= p.GoalRatio})
		}
	}
	if tc := res.ThreadContext; tc != nil {
		res.Goals = append(res.Goals, Goal{"reading a published thread context at a span's entry (BPF time, published − none)", "< 50 ns",
			fmt.Sprintf("%.1f ns (median of %d paired cycles; per call with the trap: %+.0f ns)", tc.Added, tc.Cycles, tc.AddedWall), tc.Added < 50})
	}
	for _, t := range res.Throughput {
		if t.TargetRate == 0 {
			loss := float64(t.Lost) / float64(max(1, t.Fired))
			res.Goals = append(res.Goals,
				Goal{"no loss at the full rate of one probed thread", "0 lost", fmt.Sprintf("%d lost of %d (%.2f%%) at %.0f spans/s", t.Lost, t.Fired, 100*loss, t.FiredPerSec), t.Lost == 0})
		}
	}
	if c := res.Collector; c != nil && len(c.Rounds) > 0 {
		res.Goals = append(res.Goals, Goal{"collector CPU per delivered span vs building the same spans with pdata alone (standalone, same run)", "≤ 2.0×",
			fmt.Sprintf("%.2f× (%.0f ns / %.0f ns; rounds %.2f–%.2f)", c.Ratio, c.NsPerSpan, c.FloorNsPerSpan, c.RatioMin, c.RatioMax), c.Ratio <= 2.0})
		if c.CollectorFloorNsPerSpan > 0 {
			res.Goals = append(res.Goals, Goal{"collector CPU per delivered span vs the collector floor (the same collector, a receiver that only builds the spans; per-round ratios)", "≤ 1.10×",
				fmt.Sprintf("%.2f× (median of %d rounds, %.2f–%.2f; %.0f ns / %.0f ns)", c.VsCollectorFloor, len(c.Rounds), c.VsCollectorFloorMin, c.VsCollectorFloorMax, c.NsPerSpan, c.CollectorFloorNsPerSpan), c.VsCollectorFloor <= 1.10})
			res.Notes = append(res.Notes, fmt.Sprintf("The same collector with a receiver that only builds the spans with pdata (the collector floor) costs %.0f ns per span, %.2f× the standalone pdata floor: that much of the ratio is the collector process's, not the receiver's (the receiver's own cost is %.0f ns per span).",
				c.CollectorFloorNsPerSpan, c.CollectorFloorRatio, c.NsPerSpan-c.CollectorFloorNsPerSpan))
		}
	}
	if a := res.Attach; a != nil {
		res.Goals = append(res.Goals, Goal{fmt.Sprintf("attach %d USDT sites", a.Sites), "< 1 s", fmt.Sprintf("%.0f ms", a.StartMs), a.StartMs < 1000})
	}
	if m := res.Memory; m != nil {
		growth := m.RSSEndMiB - m.RSSWarmMiB
		res.Goals = append(res.Goals, Goal{"collector memory bounded under a flood", "no growth after warm-up", fmt.Sprintf("%+.1f MiB (warm %.1f → end %.1f, peak %.1f)", growth, m.RSSWarmMiB, m.RSSEndMiB, m.RSSPeakMiB), growth <= 0.1*m.RSSWarmMiB})
	}
}

func markdown(res *Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Benchmark results\n\n")
	if res.Smoke {
		fmt.Fprintf(&b, "**Smoke run: too short to judge; it only proves the benchmark works.**\n\n")
	}
	fmt.Fprintf(&b, "Machine: %s, %d CPUs; kernel %s; %s; %s. Produced by `make bench` (harness/bench).\n\n", res.Machine, res.CPUs, res.Kernel, orNone(res.Bpftrace), res.Date)
	perHitMarkdown(&b, res)
	if tc := res.ThreadContext; tc != nil {
		fmt.Fprintf(&b, "\n## Thread context (OTEP 4947) at a span's entry\n\nThe span probe above on probed() of a build of the workload whose executable exports otel_thread_ctx_v1 (static TLS): %d cycles of %d calls with a context published and %d with none, alternating; then a build that does not export it (a program without an SDK), and `thread_context: {enabled: false}`; medians over cycles. \"BPF\" is the engine's run time per call (entry and exit programs together), from the kernel's BPF run-time statistics (which add their own clock reads to every run); \"per call\" is the workload's own time per call, the trap included. The cost of taking a context is the median of published − none within each cycle: %.1f ns of BPF time.\n\n", tc.Cycles, tc.Calls, tc.Calls, tc.Added)
		fmt.Fprintf(&b, "| thread context | BPF ns per call | ns per call |\n|---|---:|---:|\n")
		fmt.Fprintf(&b, "| published (read, joins its trace) | %.1f | %.0f |\n| none published (NULL pointer) | %.1f | %.0f |\n| no otel_thread_ctx_v1 in the program | %.1f | %.0f |\n| `enabled: false` | %.1f | %.0f |\n",
			tc.BPFPublished, tc.WallPublished, tc.BPFNone, tc.WallNone, tc.BPFNoVariable, tc.WallNoVariable, tc.BPFDisabled, tc.WallDisabled)
	}
	fmt.Fprintf(&b, "\n## Spans delivered into a pipeline (entry+exit with 2 attributes, counting consumer in the benchmark's process)\n\n")
	fmt.Fprintf(&b, "| target rate | fired/s | fired | delivered | lost | receiver CPU | CPU per span |\n|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, t := range res.Throughput {
		rate := fmt.Sprint(t.TargetRate)
		if t.TargetRate == 0 {
			rate = "max (one thread)"
		}
		fmt.Fprintf(&b, "| %s | %.0f | %d | %d | %d | %.3f s | %.0f ns |\n", rate, t.FiredPerSec, t.Fired, t.Delivered, t.Lost, t.CPUSeconds, t.CPUNsPerSpan)
	}
	if len(res.Throughput) > 0 {
		fmt.Fprintf(&b, "\nThe receiver runs in the benchmark's own process here, so \"receiver CPU\" is that process's CPU time; the collector's own cost per span is measured below, in its own process.\n")
	}
	collectorMarkdown(&b, res)
	if a := res.Attach; a != nil {
		fmt.Fprintf(&b, "\n## Attach\n\n| USDT sites | resolve | Start (resolve+load+attach) | Shutdown |\n|---:|---:|---:|---:|\n| %d | %.1f ms | %.1f ms | %.1f ms |\n", a.Sites, a.ResolveMs, a.StartMs, a.ShutdownMs)
	}
	if m := res.Memory; m != nil {
		fmt.Fprintf(&b, "\n## Collector memory under a flood (%d s at full rate, %d spans)\n\n| start | after warm-up | peak | end |\n|---:|---:|---:|---:|\n| %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB |\n", m.Seconds, m.Spans, m.RSSStartMiB, m.RSSWarmMiB, m.RSSPeakMiB, m.RSSEndMiB)
	}
	fmt.Fprintf(&b, "\n## Goals\n\n| goal | target | measured | met |\n|---|---|---|---|\n")
	for _, g := range res.Goals {
		met := "yes"
		if !g.Met {
			met = "**no**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", g.Name, g.Target, g.Measured, met)
	}
	for _, n := range res.Notes {
		fmt.Fprintf(&b, "\n- %s", n)
	}
	if len(res.Notes) > 0 {
		b.WriteString("\n")
	}
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "bpftrace not installed"
	}
	return s
}

// openFloor attaches the benchmark's floor program (a bare per-CPU counter)
// at file offsets of path, with return probes when withReturn is set.
func openFloor(path string, fileOffsets []uint64, withReturn bool) (*Counter, error) {
	spec, err := floor.Spec()
	if err != nil {
		return nil, fmt.Errorf("reading the floor program: %w", err)
	}
	return OpenCounter(spec, floor.Program, floor.Map, path, fileOffsets, withReturn)
}
