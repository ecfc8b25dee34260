//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/insn"
	"github.com/otel-uprobe/uprobereceiver/internal/planner"
	"github.com/otel-uprobe/uprobereceiver/internal/tracer"
)

// The floors: what the kernel costs before the receiver does anything.
const (
	floorCount = "floor: bare counting uprobe"
	floorPair  = "floor pair: bare uprobe + uretprobe"
	floorSpan  = "floor: delivered span (task-storage pairing, one 64-byte ring record, batched reader)"
)

// Trap is what one probe hit costs on this machine, by site class, with
// the per-CPU counter (tracer.CalibrateMachine): the unit every other row
// is a multiple of.
type Trap struct {
	EmulatedNs      float64 `json:"emulated_ns"`
	OptimizableNs   float64 `json:"optimizable_ns"`
	SingleSteppedNs float64 `json:"single_stepped_ns"`
	ReturnNs        float64 `json:"return_ns"`
	Multi           bool    `json:"uprobe_multi"`
}

// trapCost measures Trap.
func trapCost(res *Result) error {
	c, err := tracer.CalibrateMachine()
	if err != nil {
		return err
	}
	res.Trap = &Trap{
		EmulatedNs:      c.HitNs[insn.Emulated],
		OptimizableNs:   c.HitNs[insn.Optimizable],
		SingleSteppedNs: c.HitNs[insn.SingleStepped],
		ReturnNs:        c.ReturnNs,
		Multi:           floorMulti,
	}
	fmt.Fprintf(os.Stderr, "trap: emulated %.0f ns, optimizable (nop5) %.0f ns, single-stepped %.0f ns, return leg %.0f ns\n",
		res.Trap.EmulatedNs, res.Trap.OptimizableNs, res.Trap.SingleSteppedNs, res.Trap.ReturnNs)
	return nil
}

// fnSet is a triple of identical functions of one workload process: a
// configuration runs on the first (probed), its floors on the others (twin,
// twin2), all timed in the same rounds of the process's measure3.
type fnSet struct {
	name string
	w    *workload
	// path is the file the functions are in, as the receiver attaches it;
	// floorPath the same file as the floors open it (another path for a
	// file in a private mount namespace).
	path, floorPath string
	// set is measure3's SET word ("" for probed, twin and twin2).
	set string
	// fns are the three functions' names in a probe reference.
	fns [3]string
	// perCall is the number of functions one call runs (a call tree's
	// root: treeFunctions): rows say what each costs. callsDiv divides the
	// calls per round (single-stepped sites cost microseconds each).
	perCall, callsDiv int
	// floors attach each floor to role 1 (twin) or 2 (twin2).
	floors map[string]attacher
}

// setup is one configuration measured per hit, and the floors it is
// compared with.
type setup struct {
	name string
	set  *fnSet
	// args are the workload's measure3 arguments (ints, names, yes1).
	args string
	// floors run on twin and on twin2 in the same rounds as the
	// configuration on probed; the row's ratio is to the first.
	floors []string
	attach attacher
	// feature and dominates make the row one of the feature cost matrix.
	feature, dominates string
	// goal and goalRatio are the bound on the row's ratio.
	goal      string
	goalRatio float64
}

// attacher attaches a configuration to one function of a set (role 0:
// probed, 1: twin, 2: twin2) and returns what detaches it.
type attacher func(role int) (func() error, error)

// cycleSample is what one cycle measured of a setup: ns added to probed
// and to each floor's function, per function called.
type cycleSample struct {
	added  float64
	floors []float64
	// With -program-stats: the BPF run time of the setup's own programs
	// per call of probed, and their runs per call.
	programNs, programRuns float64
	// floorProgramNs is, with -program-stats, the BPF run time of each
	// floor's programs per call of its twin (by program name: floors
	// whose programs share a name, the bare counter and the pair, read
	// each other's too when both run).
	floorProgramNs []float64
}

// programs returns the name prefixes of the BPF programs st runs.
func (st setup) programs() []string {
	switch st.name {
	case floorCount, floorPair:
		return []string{"floor_count"}
	case floorSpan:
		return []string{"floor_span"}
	}
	return []string{"site_hit", "count_hit"}
}

// plannedOffsets returns the file offsets the planner attaches target t
// at, in its plan's order.
func plannedOffsets(t config.Target) ([]uint64, error) {
	pl, err := planner.Resolve([]config.Target{t})
	if err != nil {
		return nil, err
	}
	defer pl.Close()
	var out []uint64
	for _, a := range pl.Attachments {
		out = append(out, a.FileOffset)
	}
	return out, nil
}

// entryFloors gives set the standard floors at its three functions'
// entries, as the planner places an entry probe.
func (set *fnSet) entryFloors() error {
	var offsets [3][]uint64
	for role, fn := range set.fns {
		off, err := plannedOffsets(config.Target{Path: set.path, Counters: config.CountersOf("uprobe:" + fn)})
		if err != nil {
			return err
		}
		offsets[role] = off
	}
	set.floors = standardFloors(set.floorPath, offsets, offsets)
	return nil
}

// standardFloors returns the floors of a set whose three functions are
// attached at the offsets of the same role: the bare counter (and pair) at
// the sites offsets[role] and the delivered-span floor at the functions
// entries[role].
func standardFloors(floorPath string, offsets, entries [3][]uint64) map[string]attacher {
	counting := func(ret bool) attacher {
		return func(role int) (func() error, error) {
			f, err := openFloor(floorPath, offsets[role], ret)
			if err != nil {
				return nil, err
			}
			return f.Close, nil
		}
	}
	return map[string]attacher{
		floorCount: counting(false),
		floorPair:  counting(true),
		floorSpan: func(role int) (func() error, error) {
			f, err := OpenSpanFloor(floorPath, entries[role])
			if err != nil {
				return nil, err
			}
			return f.Close, nil
		},
	}
}

// receiverAttacher starts the receiver with the target t returns for a
// function of the set.
func receiverAttacher(set *fnSet, t func(fn string) config.Target) attacher {
	return func(role int) (func() error, error) {
		r, _, err := startReceiver(t(set.fns[role]), 8<<20)
		if err != nil {
			return nil, err
		}
		return func() error { return r.Shutdown(context.Background()) }, nil
	}
}

func perHit(s settings, res *Result, w *workload, path string) error {
	plain := &fnSet{name: "asm", w: w, path: path, floorPath: path, fns: [3]string{"probed", "twin", "twin2"}, perCall: 1, callsDiv: 1}
	if err := plain.entryFloors(); err != nil {
		return err
	}
	recv := func(t func(fn string) config.Target) attacher { return receiverAttacher(plain, t) }
	counter := func(fn string) config.Target {
		return config.Target{Path: path, Counters: config.CountersOf("uprobe:" + fn)}
	}
	span := func(fn string) config.Target {
		return config.Target{Path: path, Spans: []config.Span{{
			Name: fn, Function: fn,
			Attributes: map[string]string{"a": "arg0"}, ExitAttributes: map[string]string{"ret": "retval"},
		}}}
	}
	setups := []setup{
		{name: floorCount, set: plain, args: "ints", attach: plain.floors[floorCount]},
		{name: floorPair, set: plain, args: "ints", attach: plain.floors[floorPair]},
		{name: floorSpan, set: plain, args: "ints", floors: []string{floorPair}, attach: plain.floors[floorSpan]},
		// A/A: how far from 1.00 the method itself reads (probed() is timed
		// first in each round, twin() second).
		{name: "A/A: bare counting uprobe on probed() against itself on twin()", set: plain, args: "ints", floors: []string{floorCount}, attach: plain.floors[floorCount]},
		{name: "receiver: count-only probe", set: plain, args: "ints", floors: []string{floorCount}, attach: recv(counter)},
		{name: "receiver: span probe (entry+exit, 2 attributes)", set: plain, args: "ints", floors: []string{floorSpan, floorPair}, attach: recv(span)},
	}
	features, err := featureSetups(s, res, plain)
	if err != nil {
		return err
	}
	setups = append(setups, features...)
	if res.Bpftrace != "" && os.Getenv("BENCH_NO_BPFTRACE") == "" {
		pingProbe := fmt.Sprintf(`uprobe:%s:ping { printf("ping\n"); }`, path)
		bt := func(prog string) attacher {
			return func(role int) (func() error, error) {
				return startBpftrace(w, pingProbe+" "+strings.ReplaceAll(prog, "FN", path+":"+plain.fns[role]))
			}
		}
		setups = append(setups,
			setup{name: "bpftrace: count()", set: plain, args: "ints", floors: []string{floorCount}, attach: bt(`uprobe:FN { @c = count(); }`)},
			setup{name: "bpftrace: printf per event", set: plain, args: "ints", floors: []string{floorCount}, attach: bt(`uprobe:FN { printf("%d %d\n", arg0, arg1); }`)},
			setup{name: "bpftrace: latency hist() (uprobe+uretprobe)", set: plain, args: "ints", floors: []string{floorPair}, attach: bt(
				`uprobe:FN { @s[tid] = nsecs; } uretprobe:FN /@s[tid]/ { @h = hist(nsecs - @s[tid]); delete(@s[tid]); }`)},
		)
	} else {
		res.Notes = append(res.Notes, "bpftrace is not installed: its rows are missing (make bench installs it)")
	}
	if s.rows != "" {
		re, err := regexp.Compile(s.rows)
		if err != nil {
			return fmt.Errorf("-rows: %w", err)
		}
		var kept []setup
		for _, st := range setups {
			if re.MatchString(st.name) {
				kept = append(kept, st)
			}
		}
		setups = kept
	}

	// A configuration runs on probed while its floors run on twin and
	// twin2, so that all are timed in the same interleaved rounds and the
	// ratio of what each adds does not drift with the VM. What a call costs
	// unprobed is measured once per cycle for each set and arguments.
	if s.programStats {
		stats, err := enableProgramStats()
		if err != nil {
			return fmt.Errorf("turning BPF run-time statistics on: %w", err)
		}
		defer stats.Close()
		res.Notes = append(res.Notes, "BPF run-time statistics were on (-program-stats): every program paid two clock reads per run, so the ratios are not this machine's.")
	}
	const noProbe = "no probe (identical twin function)"
	samples := map[string][]cycleSample{}
	var unprobed []float64
	for c := 0; c < s.cycles; c++ {
		base := map[string][3]float64{}
		for _, st := range setups {
			key := st.set.name + " " + st.args
			if _, ok := base[key]; ok {
				continue
			}
			p, t, t2, err := st.set.w.measure3(st.args, st.calls(s), s.rounds, st.set.set)
			if err != nil {
				return err
			}
			base[key] = [3]float64{p, t, t2}
			if st.set == plain && st.args == "ints" {
				unprobed = append(unprobed, p-t)
			}
		}
		for _, st := range setups {
			sample, err := measureSetup(s, st, base[st.set.name+" "+st.args])
			if err != nil {
				return fmt.Errorf("%s: %w", st.name, err)
			}
			samples[st.name] = append(samples[st.name], sample)
			line := fmt.Sprintf("cycle %d: %-60s %8.1f ns added", c+1, st.name, sample.added)
			if s.programStats {
				line += fmt.Sprintf(" [BPF %.1f ns in %.2f runs per call; floors' BPF %.1f ns]", sample.programNs, sample.programRuns, sample.floorProgramNs)
			}
			for i, f := range st.floors {
				line += fmt.Sprintf(", %.2f × %s (%.1f)", sample.added/sample.floors[i], shortFloor(f), sample.floors[i])
			}
			fmt.Fprintln(os.Stderr, line)
		}
	}
	res.PerHit = append(res.PerHit, PerHit{Name: noProbe, AddedNs: median(unprobed), Cycles: unprobed})
	for _, st := range setups {
		row := PerHit{Name: st.name, Feature: st.feature, Dominates: st.dominates, Goal: st.goal, GoalRatio: st.goalRatio}
		ratios := make([][]float64, len(st.floors))
		for _, sm := range samples[st.name] {
			row.Cycles = append(row.Cycles, sm.added)
			for i := range st.floors {
				ratios[i] = append(ratios[i], sm.added/sm.floors[i])
			}
		}
		row.AddedNs = median(row.Cycles)
		if len(st.floors) > 0 {
			row.Baseline, row.Ratio, row.Ratios = st.floors[0], median(ratios[0]), ratios[0]
		}
		if len(st.floors) > 1 {
			row.Also = &Against{Floor: st.floors[1], Ratio: median(ratios[1]), Ratios: ratios[1]}
		}
		res.PerHit = append(res.PerHit, row)
	}
	return recipeCosts(s, res)
}

// calls returns the calls per round of a setup's measure3.
func (st setup) calls(s settings) int {
	return max(1, s.calls/st.set.callsDiv)
}

// measureSetup attaches st to probed and its floors to twin and twin2,
// times one measure3, detaches all and returns what each added over the
// unprobed times in base, per function called.
func measureSetup(s settings, st setup, base [3]float64) (_ cycleSample, err error) {
	detach, err := st.attach(0)
	if err != nil {
		return cycleSample{}, err
	}
	detaches := []func() error{detach}
	defer func() {
		for _, d := range detaches {
			err = errors.Join(err, d())
		}
	}()
	for i, f := range st.floors {
		d, err := st.set.floors[f](i + 1)
		if err != nil {
			return cycleSample{}, fmt.Errorf("%s: %w", f, err)
		}
		detaches = append(detaches, d)
	}
	var before map[ebpf.ProgramID]progRun
	floorBefore := make([]map[ebpf.ProgramID]progRun, len(st.floors))
	if s.programStats {
		before, _ = programRuns(st.programs())
		for i, f := range st.floors {
			floorBefore[i], _ = programRuns(setup{name: f}.programs())
		}
	}
	p, t, t2, err := st.set.w.measure3(st.args, st.calls(s), s.rounds, st.set.set)
	if err != nil {
		return cycleSample{}, err
	}
	per := float64(st.set.perCall)
	sample := cycleSample{added: (p - base[0]) / per}
	if s.programStats {
		after, _ := programRuns(st.programs())
		rt, runs := programDelta(before, after)
		calls := float64(st.calls(s)*s.rounds) * per
		sample.programNs, sample.programRuns = float64(rt.Nanoseconds())/calls, float64(runs)/calls
		for i, f := range st.floors {
			fafter, _ := programRuns(setup{name: f}.programs())
			frt, _ := programDelta(floorBefore[i], fafter)
			sample.floorProgramNs = append(sample.floorProgramNs, float64(frt.Nanoseconds())/calls)
		}
	}
	for i := range st.floors {
		sample.floors = append(sample.floors, []float64{(t - base[1]) / per, (t2 - base[2]) / per}[i])
	}
	return sample, nil
}

// shortFloor is a floor's name for progress lines.
func shortFloor(f string) string {
	switch f {
	case floorCount:
		return "bare counting"
	case floorPair:
		return "bare pair"
	case floorSpan:
		return "delivered span"
	}
	return f
}

// perHitMarkdown writes the trap costs, the per-hit table and the feature
// cost matrix.
func perHitMarkdown(b *strings.Builder, res *Result) {
	if t := res.Trap; t != nil {
		how := "perf-event uprobes"
		if t.Multi {
			how = "uprobe_multi links"
		}
		fmt.Fprintf(b, "## This machine's trap\n\nWhat one hit of a bare counting uprobe (a per-CPU counter) costs the traced thread, by site class, attached through %s as the engine and the floors below are (tracer.CalibrateMachine: functions of the benchmark's own executable against unprobed twins, the thread's CPU time, median of 9 rounds). Every ratio below is taken against a floor of the same class measured in the same rounds, so tables of different machines can be read side by side.\n\n", how)
		fmt.Fprintf(b, "| site class | ns per hit |\n|---|---:|\n| emulated (push %%rbp) | %.0f |\n| optimizable (5-byte nop) | %.0f |\n| single-stepped (mov, lea, cmp, …) | %.0f |\n| return leg of a uretprobe (added to an entry) | %.0f |\n\n",
			t.EmulatedNs, t.OptimizableNs, t.SingleSteppedNs, t.ReturnNs)
	}
	fmt.Fprintf(b, "## Cost added per hit\n\nThe workload (pinned to CPU 0) calls three identical functions, probed(), twin() and twin2() (each starts with push %%rbp, an emulated site), in interleaved rounds, each round starting with the next of them (so that none is always timed after the others' traps: with probed() always first, the A/A row read 1.02 ×), and times each by the thread's CPU time. A configuration runs on probed() while its floors run on twin() and twin2() at the same time, so all are timed in the same rounds; \"ns added\" is a function's time per call minus its unprobed time in the same cycle, medians over cycles. Ratios are taken per cycle, then the median reported: this VM drifts between cycles, not within one. The floors attach as the engine does (uprobe_multi links where the kernel has them). The delivered-span floor is the least a program can do that delivers each call as a span: task-local storage pairs entry and return, the return reserves one 64-byte ring-buffer record (start, end, pid, tid, the argument, the return value) and submits it without a wakeup, and the receiver's own batched reader drains the ring every 5 ms on another CPU (bpf/spanfloor.bpf.c).\n\n")
	fmt.Fprintf(b, "| probe | ns added per hit | ratio | also |\n|---|---:|---|---|\n")
	for _, p := range res.PerHit {
		if p.Feature != "" {
			continue
		}
		fmt.Fprintf(b, "| %s | %.0f | %s | %s |\n", p.Name, p.AddedNs, ratioText(p.Baseline, p.Ratio), alsoText(p.Also))
	}
	var features, recipes []PerHit
	for _, p := range res.PerHit {
		switch {
		case p.Recipe != "":
			recipes = append(recipes, p)
		case p.Feature != "":
			features = append(features, p)
		}
	}
	if len(features)+len(recipes) == 0 {
		return
	}
	fmt.Fprintf(b, "\n## What each feature costs\n\nEach row is one configuration on probed() (or the workload named), timed in the same rounds as the floor of its own site class on a twin; the ratio is to that floor.\n\n")
	fmt.Fprintf(b, "| feature | configuration | ns added per call | ratio | also | what dominates |\n|---|---|---:|---|---|---|\n")
	for _, p := range features {
		fmt.Fprintf(b, "| %s | %s | %.0f | %s | %s | %s |\n", p.Feature, p.Name, p.AddedNs, ratioText(p.Baseline, p.Ratio), alsoText(p.Also), p.Dominates)
	}
	recipeMarkdown(b, recipes)
}

// recipeMarkdown writes the recipe rows of the feature cost matrix.
func recipeMarkdown(b *strings.Builder, recipes []PerHit) {
	if len(recipes) == 0 {
		return
	}
	fmt.Fprintf(b, "\n### Each recipe\n\n"+
		"Each recipe (`recipe: NAME`, scoped to the workload's process by `pid:`) on the real program or library it was written for, in the same run as the rows above (harness/bench/recipes.go). "+
		"A real getaddrinfo or PostgreSQL statement has no identical twin to time a floor on in the same rounds, so each cycle (%d here) times the workload five times: unprobed, with the recipe attached, unprobed, with its floor attached, unprobed again, and compares the recipe and the floor each with the unprobed times either side of it (\"unprobed\" is the middle one; medians over cycles). "+
		"The floor is the bare counting program at every site the recipe's plan attaches (uprobes, uretprobes and USDT semaphores as the receiver plans them, scoped to the same process), one counter per site class: its hits say how many traps of each class a call takes, and what it adds is the floor of the recipe's own site classes. "+
		"\"× trap by class\" divides instead by those traps times this machine's trap by site class (the first table). "+
		"The C library rows (dns, malloc, tls) and python and jvm are timed by the calling thread's CPU time (the workload pinned to CPU 0); postgresql and go-http are servers, timed per request by the server's CPU time (the backend's, the Go process's: every thread), the requests sent one at a time over one connection by a thread on the same CPU, so that the time is the server's own work end to end but not the client's. "+
		"The floors are scoped to the workload's process by the kernel, as the receiver's sites of a `pid:` target are (Linux 6.11 with uprobe_multi links): other processes that map the same file take no trap of either.\n\n", len(recipes[0].Cycles))
	fmt.Fprintf(b, "| recipe | workload, per call | unprobed ns per call | ns added per call (cycles' range) | traps per call | × floor at its sites | × trap by class | what dominates |\n|---|---|---:|---:|---|---:|---:|---|\n")
	for _, p := range recipes {
		trap := "—"
		if p.Also != nil {
			trap = fmt.Sprintf("%.2f", p.Also.Ratio)
		}
		added := fmt.Sprintf("%.0f", p.AddedNs)
		if len(p.Cycles) > 1 {
			added += fmt.Sprintf(" (%.0f to %.0f)", slices.Min(p.Cycles), slices.Max(p.Cycles))
		}
		fmt.Fprintf(b, "| %s | %s | %.0f | %s | %s | %.2f | %s | %s |\n", p.Recipe, strings.TrimPrefix(p.Name, "recipe: "+p.Recipe+", "), p.UnprobedNs, added, p.Traps, p.Ratio, trap, p.Dominates)
	}
}

func ratioText(floor string, ratio float64) string {
	if floor == "" {
		return "—"
	}
	return fmt.Sprintf("%.2f × %s", ratio, floor)
}

func alsoText(a *Against) string {
	if a == nil {
		return ""
	}
	return fmt.Sprintf("%.2f × %s", a.Ratio, a.Floor)
}

// machineBlock returns this run's block of the machine kinds section of
// docs/benchmarks.md and its key: the machine and its trap cost (to the
// microsecond: machines of one name may trap in 0.8 or 5 µs), then the
// trap by site class and the ratios of the main rows, so that runs on
// different machine kinds can be read side by side. "" without a trap.
func machineBlock(res *Result) (key, block string) {
	t := res.Trap
	if t == nil {
		return "", ""
	}
	key = fmt.Sprintf("%s, trap ~%.0f µs", res.Machine, max(1, math.Round(t.EmulatedNs/1000)))
	var b strings.Builder
	commit := res.Commit
	if commit == "" {
		commit = "commit unknown"
	}
	fmt.Fprintf(&b, "### %s\n\nKernel %s, %s, %s.\n\n", key, res.Kernel, res.Date, commit)
	fmt.Fprintf(&b, "| | measured |\n|---|---:|\n")
	fmt.Fprintf(&b, "| trap, emulated site (push) | %.0f ns |\n| trap, optimizable site (nop5) | %.0f ns |\n| trap, single-stepped site | %.0f ns |\n| return leg of a uretprobe | %.0f ns |\n",
		t.EmulatedNs, t.OptimizableNs, t.SingleSteppedNs, t.ReturnNs)
	for _, p := range res.PerHit {
		if p.Baseline == "" || (p.Feature != "" && p.Goal == "") {
			continue
		}
		fmt.Fprintf(&b, "| %s vs %s | %.2f× |\n", p.Name, p.Baseline, p.Ratio)
	}
	if c := res.Collector; c != nil && len(c.Rounds) > 0 {
		fmt.Fprintf(&b, "| collector CPU per span vs standalone pdata | %.2f× |\n", c.Ratio)
	}
	return key, b.String()
}
