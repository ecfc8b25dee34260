//go:build linux

// Command scalebench measures how the receiver scales with what it
// attaches: the time of Start (resolve, load, attach) and of Shutdown
// (detach), and the resident memory the attached receiver keeps, for a
// growing number of locations in one file (a function pattern over a
// generated C program, and over PostgreSQL 15's postgres when installed)
// and for a growing number of targets (distinct files). Each point runs in
// a fresh process of its own (this program, with -point), so that one
// point's heap does not weigh on the next. It writes its section of
// docs/benchmarks.md (between the scale markers, see harness/benchdoc) and
// docs/scale.json. Run it as root: make bench runs it, make bench-smoke a
// short version.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/otel-uprobe/uprobereceiver/harness/benchdoc"
	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

// The kinds of points.
const (
	kindLocations = "locations" // one file, a function pattern over generated functions
	kindPostgres  = "postgres"  // function: "*" on PostgreSQL 15's postgres
	kindTargets   = "targets"   // distinct files, a USDT span, a function span and a counter each
)

// postgresPath is PostgreSQL 15's server binary on Debian.
const postgresPath = "/usr/lib/postgresql/15/bin/postgres"

func main() {
	var (
		out       = flag.String("out", "", "directory for benchmarks.md and scale.json (default: print only)")
		smoke     = flag.Bool("smoke", false, "a short run that only proves the benchmark works")
		point     = flag.String("point", "", "measure one point in this process: KIND:N (internal)")
		dir       = flag.String("dir", "", "with -point: the directory of the generated programs (internal)")
		heap      = flag.String("memprofile", "", "with -point: write a heap profile after Start to this file")
		locations = flag.String("locations", "100,1000,10000,20000", "location counts to measure")
		targets   = flag.String("targets", "10,100,1000,2000", "target counts to measure")
		repeat    = flag.Int("repeat", 3, "measurements of each point (the median is reported)")
	)
	flag.Parse()
	if *point != "" {
		kind, n, _ := strings.Cut(*point, ":")
		count, err := strconv.Atoi(n)
		if err == nil {
			err = measurePoint(kind, count, *dir, *heap)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "scalebench:", err)
			os.Exit(1)
		}
		return
	}
	testutil.RequireRootOrExit()
	s := settings{out: *out, smoke: *smoke, repeat: *repeat}
	var err error
	if s.locations, err = counts(*locations); err == nil {
		s.targets, err = counts(*targets)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "scalebench:", err)
		os.Exit(2)
	}
	if s.smoke {
		s.locations, s.targets, s.repeat = []int{100, 1000}, []int{10, 100}, 1
	}
	if err := run(s); err != nil {
		fmt.Fprintln(os.Stderr, "scalebench:", err)
		os.Exit(1)
	}
}

type settings struct {
	out                string
	smoke              bool
	repeat             int
	locations, targets []int
}

func counts(s string) ([]int, error) {
	var v []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("count %q: want a positive integer", f)
		}
		v = append(v, n)
	}
	return v, nil
}

// Result is everything one run measured.
type Result struct {
	Date    string  `json:"date"`
	Machine string  `json:"machine"`
	CPUs    int     `json:"cpus"`
	Kernel  string  `json:"kernel"`
	Smoke   bool    `json:"smoke"`
	Points  []Point `json:"points"`
	Goals   []Goal  `json:"goals"`
}

// Point is the median of the measurements of one count of one kind.
type Point struct {
	Kind string `json:"kind"`
	// Count is the count asked for: locations or targets.
	Count int `json:"count"`
	// Locations and Files are what the plan attached.
	Locations int `json:"locations"`
	Files     int `json:"files"`
	// StartSeconds is the receiver's Start (resolve, load the engine,
	// attach); ShutdownSeconds its Shutdown (detach, last drain and
	// collection, unload). The CPU seconds are the process's CPU time over
	// each (every thread, user and kernel): on a busy machine the wall
	// time also counts the waits for a CPU.
	StartSeconds       float64 `json:"start_seconds"`
	StartCPUSeconds    float64 `json:"start_cpu_seconds"`
	ShutdownSeconds    float64 `json:"shutdown_seconds"`
	ShutdownCPUSeconds float64 `json:"shutdown_cpu_seconds"`
	// BaseRSSMiB is the process's resident memory before Start;
	// AttachedRSSMiB while attached, just after the second collection of
	// the counters; SettledRSSMiB just after that once the garbage is
	// collected and returned (runtime.GC and debug.FreeOSMemory);
	// PeakRSSMiB the high-water mark from Start on. HeapMiB is the live
	// heap while attached.
	BaseRSSMiB     float64 `json:"base_rss_mib"`
	AttachedRSSMiB float64 `json:"attached_rss_mib"`
	SettledRSSMiB  float64 `json:"settled_rss_mib"`
	PeakRSSMiB     float64 `json:"peak_rss_mib"`
	HeapMiB        float64 `json:"heap_mib"`
	// KiBPerLocation is (AttachedRSSMiB - BaseRSSMiB) per location: the
	// fixed cost of a receiver (its ring buffer, mapped twice, the
	// engine, the runtime's threads) included. MarginalKiBPerLocation is
	// what each location added to AttachedRSSMiB since the previous point
	// of the same kind (0 for the first).
	KiBPerLocation         float64 `json:"kib_per_location"`
	MarginalKiBPerLocation float64 `json:"marginal_kib_per_location,omitempty"`
	// Runs are the single measurements.
	Runs []Run `json:"runs"`
}

// Run is one measurement of one point, in a process of its own.
type Run struct {
	Locations       int     `json:"locations"`
	Files           int     `json:"files"`
	StartSeconds    float64 `json:"start_seconds"`
	ShutdownSeconds float64 `json:"shutdown_seconds"`
	// StartCPUSeconds and ShutdownCPUSeconds are the process's CPU time
	// over Start and Shutdown (every thread, user and kernel).
	StartCPUSeconds    float64 `json:"start_cpu_seconds"`
	ShutdownCPUSeconds float64 `json:"shutdown_cpu_seconds"`
	BaseRSSMiB         float64 `json:"base_rss_mib"`
	AttachedRSSMiB     float64 `json:"attached_rss_mib"`
	SettledRSSMiB      float64 `json:"settled_rss_mib"`
	PeakRSSMiB         float64 `json:"peak_rss_mib"`
	HeapMiB            float64 `json:"heap_mib"`
	// DataPoints are the metrics' data points of a collection.
	DataPoints int `json:"data_points"`
}

// Goal is one target of the issue and whether this run met it.
type Goal struct {
	Name     string `json:"name"`
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
}

func run(s settings) error {
	dir, err := os.MkdirTemp("", "uprobe-scalebench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	res := &Result{Date: time.Now().UTC().Format(time.RFC3339), Machine: machine(), CPUs: runtime.NumCPU(), Kernel: kernel(), Smoke: s.smoke}
	if err := buildPrograms(dir, s); err != nil {
		return err
	}
	type job struct {
		kind  string
		count int
	}
	var jobs []job
	for _, n := range s.locations {
		jobs = append(jobs, job{kindLocations, n})
	}
	if _, err := os.Stat(postgresPath); err == nil && !s.smoke {
		jobs = append(jobs, job{kindPostgres, 0})
	}
	for _, n := range s.targets {
		jobs = append(jobs, job{kindTargets, n})
	}
	for _, j := range jobs {
		p := Point{Kind: j.kind, Count: j.count}
		for r := 0; r < s.repeat; r++ {
			run, err := measureChild(j.kind, j.count, dir)
			if err != nil {
				return fmt.Errorf("%s %d: %w", j.kind, j.count, err)
			}
			fmt.Fprintf(os.Stderr, "%s %d: %d locations in %d files: Start %.3f s, Shutdown %.3f s, RSS %.1f → %.1f MiB (settled %.1f, peak %.1f, heap %.1f)\n",
				j.kind, j.count, run.Locations, run.Files, run.StartSeconds, run.ShutdownSeconds, run.BaseRSSMiB, run.AttachedRSSMiB, run.SettledRSSMiB, run.PeakRSSMiB, run.HeapMiB)
			p.Runs = append(p.Runs, run)
		}
		p.summarize()
		res.Points = append(res.Points, p)
	}
	goals(res)
	md := markdown(res)
	fmt.Print(md)
	if s.out == "" {
		return nil
	}
	js, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(s.out, "scale.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	path := filepath.Join(s.out, "benchmarks.md")
	old, _ := os.ReadFile(path)
	return os.WriteFile(path, []byte(benchdoc.Scale.Replace(string(old), md)), 0o644)
}

// measureChild measures one point in a new process.
func measureChild(kind string, count int, dir string) (Run, error) {
	self, err := os.Executable()
	if err != nil {
		return Run{}, err
	}
	cmd := exec.Command(self, "-point", fmt.Sprintf("%s:%d", kind, count), "-dir", dir)
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return Run{}, err
	}
	var r Run
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return Run{}, fmt.Errorf("reading the point's result %q: %w", stdout.String(), err)
	}
	return r, nil
}

func (p *Point) summarize() {
	pick := func(f func(Run) float64) float64 {
		v := make([]float64, len(p.Runs))
		for i, r := range p.Runs {
			v[i] = f(r)
		}
		return median(v)
	}
	p.Locations, p.Files = p.Runs[0].Locations, p.Runs[0].Files
	p.StartSeconds = pick(func(r Run) float64 { return r.StartSeconds })
	p.StartCPUSeconds = pick(func(r Run) float64 { return r.StartCPUSeconds })
	p.ShutdownSeconds = pick(func(r Run) float64 { return r.ShutdownSeconds })
	p.ShutdownCPUSeconds = pick(func(r Run) float64 { return r.ShutdownCPUSeconds })
	p.BaseRSSMiB = pick(func(r Run) float64 { return r.BaseRSSMiB })
	p.AttachedRSSMiB = pick(func(r Run) float64 { return r.AttachedRSSMiB })
	p.SettledRSSMiB = pick(func(r Run) float64 { return r.SettledRSSMiB })
	p.PeakRSSMiB = pick(func(r Run) float64 { return r.PeakRSSMiB })
	p.HeapMiB = pick(func(r Run) float64 { return r.HeapMiB })
	p.KiBPerLocation = pick(func(r Run) float64 { return 1024 * (r.AttachedRSSMiB - r.BaseRSSMiB) / float64(max(1, r.Locations)) })
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// marginal sets each point's marginal memory per location, from the
// previous point of its kind.
func marginal(res *Result) {
	last := map[string]*Point{}
	for i := range res.Points {
		p := &res.Points[i]
		if q := last[p.Kind]; q != nil && p.Locations > q.Locations {
			p.MarginalKiBPerLocation = 1024 * (p.AttachedRSSMiB - q.AttachedRSSMiB) / float64(p.Locations-q.Locations)
		}
		last[p.Kind] = p
	}
}

// slope returns the resident memory each location adds from the first
// point of a kind to its last, in KiB (attached, and settled), and the two
// counts.
func slope(res *Result, kind string) (kib, settledKiB float64, from, to int, ok bool) {
	var first, last *Point
	for i := range res.Points {
		if p := &res.Points[i]; p.Kind == kind {
			if first == nil {
				first = p
			}
			last = p
		}
	}
	if first == nil || last.Locations <= first.Locations {
		return 0, 0, 0, 0, false
	}
	n := float64(last.Locations - first.Locations)
	return 1024 * (last.AttachedRSSMiB - first.AttachedRSSMiB) / n, 1024 * (last.SettledRSSMiB - first.SettledRSSMiB) / n, first.Count, last.Count, true
}

func goals(res *Result) {
	marginal(res)
	for _, k := range []struct{ kind, what string }{{kindLocations, "locations of one pattern"}, {kindTargets, "targets"}} {
		if kib, settled, from, to, ok := slope(res, k.kind); ok {
			res.Goals = append(res.Goals, Goal{fmt.Sprintf("RSS each attached location adds (%s, from %d to %d)", k.what, from, to), "≤ 2 KiB",
				fmt.Sprintf("%.2f KiB (settled: %.2f KiB)", kib, settled), kib <= 2})
		}
	}
	for _, p := range res.Points {
		if p.Kind == kindLocations && p.Count == 20_000 {
			res.Goals = append(res.Goals, Goal{"Start with 20,000 locations (wall; its CPU time beside it)", "≤ 1 s",
				fmt.Sprintf("%.3f s (CPU %.3f s)", p.StartSeconds, p.StartCPUSeconds), p.StartSeconds <= 1})
		}
	}
	var worst Point
	for _, p := range res.Points {
		if p.ShutdownSeconds > worst.ShutdownSeconds {
			worst = p
		}
	}
	if worst.Kind != "" {
		res.Goals = append(res.Goals, Goal{"Shutdown of any point (the slowest)", "≤ 1 s",
			fmt.Sprintf("%.3f s, %s (CPU %.3f s)", worst.ShutdownSeconds, worst.name(), worst.ShutdownCPUSeconds), worst.ShutdownSeconds <= 1})
	}
}

// name names a point for the goals.
func (p Point) name() string {
	switch p.Kind {
	case kindPostgres:
		return `postgres function: "*"`
	case kindTargets:
		return fmt.Sprintf("%d targets", p.Count)
	}
	return fmt.Sprintf("%d locations", p.Count)
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
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

var errNoPoint = errors.New("unknown point kind")
