//go:build linux

// Command budgetbench shows what an overhead budget does to a traced
// program over time: testdata/budget/hot.c, on one CPU, calls a function
// at a rate that would cost half a CPU if every call were probed, and its
// speed is recorded second by second for 30 s — without a probe, under the
// collector's probe without a budget, and with overhead_budget: 0.05 —
// with the budget's duty cycle from the collector's self-telemetry. It
// writes the budget section of docs/benchmarks.md and docs/budget.json.
// Run it as root with the distro built: make bench-budget.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/otel-uprobe/uprobereceiver/harness/benchdoc"
	"github.com/otel-uprobe/uprobereceiver/harness/budgetrun"
	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

func main() {
	var s settings
	flag.StringVar(&s.distro, "distro", "", "the collector binary (make build)")
	flag.StringVar(&s.out, "out", "", "directory of benchmarks.md and budget.json (default: print only)")
	flag.DurationVar(&s.run, "run", 30*time.Second, "how long each run calls the probed function")
	flag.Float64Var(&s.budget, "budget", 0.05, "overhead_budget of the budgeted run")
	render := flag.String("render", "", "only write the markdown of this budget.json again")
	flag.Parse()
	if *render != "" {
		if err := rerender(*render, s.out); err != nil {
			fmt.Fprintln(os.Stderr, "budgetbench:", err)
			os.Exit(1)
		}
		return
	}
	testutil.RequireRootOrExit()
	if s.distro == "" {
		fmt.Fprintln(os.Stderr, "budgetbench: -distro is required")
		os.Exit(2)
	}
	res, err := run(s)
	if err != nil {
		fmt.Fprintln(os.Stderr, "budgetbench:", err)
		os.Exit(1)
	}
	md := markdown(res)
	fmt.Print(md)
	if s.out != "" {
		if err := write(s.out, res, md); err != nil {
			fmt.Fprintln(os.Stderr, "budgetbench:", err)
			os.Exit(1)
		}
	}
}

type settings struct {
	distro, out string
	run         time.Duration
	budget      float64
}

// Result is what one run of the benchmark measured.
type Result struct {
	Date    string  `json:"date"`
	Machine string  `json:"machine"`
	CPUs    int     `json:"cpus"`
	Budget  float64 `json:"budget"`
	// EmulatedNs is the collector's calibrated cost of an emulated hit,
	// Calibration its log line.
	EmulatedNs  float64 `json:"calibrated_emulated_hit_ns"`
	Calibration string  `json:"calibration"`
	// Rate is the calls of hot_fn a second: half a CPU at EmulatedNs.
	Rate int64 `json:"calls_per_second"`
	Runs []Run `json:"runs"`
}

// Run is one configuration's run.
type Run struct {
	Name string `json:"name"`
	// Unprobed is the program's speed calling an identical unprobed
	// function at the same rate, before and after the run (mean).
	Unprobed float64 `json:"unprobed_work_per_cpu_second"`
	// Speed is the speed in each second of the run, as a share of Unprobed.
	Speed []float64 `json:"speed_share_per_second"`
	// Duty is the probe's duty cycle at the end of each second (budget
	// only).
	Duty []float64 `json:"duty_cycle_per_second,omitempty"`
	// Calls are the calls made in the run; Counted the hits counted and
	// Estimated the estimate (budget only), from the last metrics.
	Calls     int64 `json:"calls"`
	Counted   int64 `json:"hits_counted"`
	Estimated int64 `json:"hits_estimated,omitempty"`
	// ThrottledAfter is the time from the start of the calls to the
	// first duty cycle under 1 (budget only).
	ThrottledAfterSeconds float64 `json:"throttled_after_seconds,omitempty"`
}

const (
	probe     = "uprobe:hot_fn"
	dutyCycle = "otelcol_receiver_uprobe_probe_duty_cycle"
	hitCost   = "otelcol_receiver_uprobe_calibrated_hit_cost"
)

func run(s settings) (_ *Result, err error) {
	if runtime.NumCPU() < 2 {
		return nil, fmt.Errorf("needs two CPUs, one for the program and one for the collector; this machine has %d", runtime.NumCPU())
	}
	if err := budgetrun.PinSelf(0); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "uprobe-budget-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path, err := budgetrun.BuildHot(testutil.RepoRoot(), dir)
	if err != nil {
		return nil, err
	}
	hot, err := budgetrun.StartHot(path, 1)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, hot.Close()) }()

	res := &Result{Date: time.Now().UTC().Format(time.RFC3339), Machine: machine(), CPUs: runtime.NumCPU(), Budget: s.budget}
	// The rate comes from the collector's own calibration.
	sink, err := budgetrun.NewSink()
	if err != nil {
		return nil, err
	}
	col, err := budgetrun.StartCollector(s.distro, dir, budgetrun.Config(path, s.budget, sink.Addr))
	if err != nil {
		return nil, err
	}
	p, ok := sink.Wait(hitCost, map[string]string{"site.class": "emulated"}, 10*time.Second, func(budgetrun.Point) bool { return true })
	res.Calibration = calibrationLine(col.Log())
	if err := errors.Join(col.Stop(30*time.Second), sink.Close()); err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New("the collector reported no calibrated hit cost")
	}
	res.EmulatedNs = p.Value
	res.Rate = int64(math.Min(5e6, 0.5e9/p.Value))
	fmt.Fprintf(os.Stderr, "an emulated hit costs %.0f ns: %d calls a second would cost half a CPU\n", p.Value, res.Rate)

	for _, c := range []struct {
		name   string
		probed bool
		budget float64
	}{
		{"no probe", false, 0},
		{"probe, no budget", true, 0},
		{fmt.Sprintf("probe, overhead_budget: %g", s.budget), true, s.budget},
	} {
		r, err := runOne(s, hot, dir, path, res.Rate, c.name, c.probed, c.budget)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.name, err)
		}
		res.Runs = append(res.Runs, r)
		fmt.Fprintf(os.Stderr, "%s: %v\n", c.name, r.Speed)
	}
	return res, nil
}

// runOne runs one configuration: the unprobed speed at the rate for 5 s
// (an identical function never probed), the probed function at the rate
// for s.run, the unprobed speed again for 5 s.
func runOne(s settings, hot *budgetrun.Hot, dir, path string, rate int64, name string, probed bool, budget float64) (_ Run, err error) {
	r := Run{Name: name}
	sink, err := budgetrun.NewSink()
	if err != nil {
		return r, err
	}
	defer sink.Close()
	var col *testutil.Collector
	if probed {
		if col, err = budgetrun.StartCollector(s.distro, dir, budgetrun.Config(path, budget, sink.Addr)); err != nil {
			return r, err
		}
		defer func() {
			if col != nil {
				err = errors.Join(err, col.Stop(30*time.Second))
			}
		}()
	}
	if err := hot.SetTwinRate(rate); err != nil {
		return r, err
	}
	before := median(budgetrun.PerSecond(hot.Run(5 * time.Second)))
	if err := hot.SetRate(rate); err != nil {
		return r, err
	}
	start := time.Now()
	ticks := hot.Run(s.run)
	if err := hot.SetTwinRate(rate); err != nil {
		return r, err
	}
	after := median(budgetrun.PerSecond(hot.Run(5 * time.Second)))
	r.Unprobed = (before + after) / 2
	for _, v := range budgetrun.PerSecond(ticks) {
		r.Speed = append(r.Speed, v/r.Unprobed)
	}
	if len(ticks) > 0 {
		r.Calls = ticks[len(ticks)-1].Calls - ticks[0].Calls
	}
	if col == nil {
		return r, nil
	}
	err = col.Stop(30 * time.Second)
	col = nil
	if err != nil {
		return r, err
	}
	if p, ok := sink.Latest("uprobe.probe.hits", map[string]string{"probe.name": probe}); ok {
		r.Counted = int64(p.Value)
	}
	if budget > 0 {
		if p, ok := sink.Latest("uprobe.probe.hits.estimated", map[string]string{"probe.name": probe}); ok {
			r.Estimated = int64(p.Value)
		}
		points := sink.Points(dutyCycle, map[string]string{"probe.name": probe})
		for sec := range r.Speed {
			end := ticks[0].At.Add(time.Duration(sec+1) * time.Second)
			d := 1.0
			for _, p := range points {
				if p.At.After(end) {
					break
				}
				d = p.Value
			}
			r.Duty = append(r.Duty, d)
		}
		for _, p := range points {
			if p.At.After(start) && p.Value < 1 {
				r.ThrottledAfterSeconds = p.At.Sub(start).Seconds()
				break
			}
		}
	}
	return r, nil
}

func markdown(res *Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Overhead budget: a program's speed over time\n\n")
	fmt.Fprintf(&b, "Machine: %s, %d CPUs; %s. Produced by `make bench-budget` (harness/budgetbench).\n\n", res.Machine, res.CPUs, res.Date)
	fmt.Fprintf(&b, "testdata/budget/hot.c runs on CPU 1 (nice -20 in an autogroup of its own, so that other processes take next to none of it) and calls `hot_fn` "+
		"(first instruction `push %%rbp`, emulated) %d times a second, catching up when it falls behind, like requests arriving; between calls it does units of work. "+
		"The collector (on CPU 0) calibrated an emulated hit at %.0f ns, so that rate costs half a CPU when every call is probed (`counters: [uprobe:hot_fn]`). "+
		"Speed is the work done per second of the program's CPU time, as a share of its speed calling an identical function that is never probed at the same rate, "+
		"measured for 5 s just before and just after each run. Each run starts calling `hot_fn` at second 0; the collector was started before.\n\n", res.Rate, res.EmulatedNs)
	b.WriteString("| second |")
	for _, r := range res.Runs {
		fmt.Fprintf(&b, " %s |", r.Name)
	}
	b.WriteString(" duty cycle |\n|---:|")
	for range res.Runs {
		b.WriteString("---:|")
	}
	b.WriteString("---:|\n")
	var budgeted *Run
	for i := range res.Runs {
		if res.Runs[i].Duty != nil {
			budgeted = &res.Runs[i]
		}
	}
	n := 0
	for _, r := range res.Runs {
		n = max(n, len(r.Speed))
	}
	for sec := range n {
		fmt.Fprintf(&b, "| %d |", sec+1)
		for _, r := range res.Runs {
			if sec < len(r.Speed) {
				fmt.Fprintf(&b, " %.1f%% |", 100*r.Speed[sec])
			} else {
				b.WriteString(" |")
			}
		}
		if budgeted != nil && sec < len(budgeted.Duty) {
			fmt.Fprintf(&b, " %.3f |\n", budgeted.Duty[sec])
		} else {
			b.WriteString(" |\n")
		}
	}
	b.WriteString("\n| run | mean speed, seconds 11 to end | calls | hits counted | hits estimated |\n|---|---:|---:|---:|---:|\n")
	for _, r := range res.Runs {
		late := r.Speed[min(10, len(r.Speed)):]
		est := "—"
		if r.Estimated > 0 {
			est = fmt.Sprintf("%d (%+.1f%%)", r.Estimated, 100*float64(r.Estimated-r.Calls)/float64(r.Calls))
		}
		counted := "—"
		if r.Counted > 0 {
			counted = fmt.Sprint(r.Counted)
		}
		fmt.Fprintf(&b, "| %s | %.1f%% | %d | %s | %s |\n", r.Name, 100*mean(late), r.Calls, counted, est)
	}
	if budgeted != nil {
		fmt.Fprintf(&b, "\nWith the budget the probe was duty-cycled %.1f s after the calls began (the controller decides once a second). "+
			"Hits counted are those made while the probe was attached; the estimate adds its hit rate while attached × the time it was detached "+
			"(compared here with the calls the program counted itself over the run's whole seconds; the collector's counts also cover the moments around them). "+
			"The budget allows %g%% of a CPU: a program that has a whole CPU keeps about %g%% of its speed.\n", budgeted.ThrottledAfterSeconds, 100*res.Budget, 100-100*res.Budget)
	}
	if res.Calibration != "" {
		if i := strings.Index(res.Calibration, "{"); i >= 0 {
			fmt.Fprintf(&b, "\nCalibration at Start (the collector's log): `%s`\n", trimCalibration(res.Calibration[i:]))
		}
	}
	return b.String()
}

// trimCalibration keeps the calibration's own fields of its log line.
func trimCalibration(fields string) string {
	var m map[string]any
	if err := json.Unmarshal([]byte(fields), &m); err != nil {
		return fields
	}
	var keys []string
	for k := range m {
		if strings.HasSuffix(k, "_ns") || k == "bpf_stats" || k == "took" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		switch v := m[k].(type) {
		case float64:
			parts = append(parts, fmt.Sprintf("%s=%.0f", k, v))
			if k == "took" {
				parts[len(parts)-1] = fmt.Sprintf("took=%.0fms", 1000*v)
			}
		default:
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
	}
	return strings.Join(parts, " ")
}

// rerender writes the markdown of a saved result again (into dir's
// benchmarks.md, or to stdout).
func rerender(path, dir string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var res Result
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	md := markdown(&res)
	if dir == "" {
		fmt.Print(md)
		return nil
	}
	return write(dir, &res, md)
}

func write(dir string, res *Result, md string) error {
	js, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "budget.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	path := filepath.Join(dir, "benchmarks.md")
	old, _ := os.ReadFile(path)
	return os.WriteFile(path, []byte(benchdoc.Budget.Replace(string(old), md)), 0o644)
}

func calibrationLine(log string) string {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "Probe hit costs calibrated") {
			return l
		}
	}
	return ""
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

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	return sum / float64(len(v))
}
