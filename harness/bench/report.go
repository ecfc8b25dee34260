//go:build linux

package main

import (
	"fmt"
	"strings"
)

// collectorMarkdown writes the collector measurement, with the earlier
// run's next to it when there is one.
func collectorMarkdown(b *strings.Builder, res *Result) {
	c := res.Collector
	if c == nil {
		return
	}
	fmt.Fprintf(b, "\n## Collector CPU per delivered span (receiver + debug exporter, in its own process)\n\n")
	where := "not pinned (fewer than 2 CPUs)"
	if c.CPU >= 0 {
		where = fmt.Sprintf("pinned to CPU %d while the probed program runs pinned to CPU %d", c.CPU, c.WorkloadCPU)
	}
	flush := "its default flush_interval"
	if c.FlushInterval != "" {
		flush = "flush_interval " + c.FlushInterval
	}
	fmt.Fprintf(b, "The built collector (`otelcol-uprobe`: the receiver with %s, the debug exporter at `verbosity: basic`; the pprof extension and the collector's Prometheus self-metrics let the benchmark look inside) runs %s and calls probed() as fast as one thread can (a span per call: entry+exit, 2 attributes). "+
		"Collector CPU is the CPU time of all its threads (their scheduler statistics: user, kernel and garbage collection) from just before a flood until its pipeline took every span fired (accepted spans in its self-metrics, equal to fired in every round), per delivered span. "+
		"The pdata floor builds the same spans with pdata alone (a resource with the receiver's five attributes, its scope, %d spans with name, kind, trace and span ids, start and end times and three integer attributes: thread.id and the two fetched values), GC on, in a process of its own pinned to the collector's CPU (so GOMAXPROCS is 1 in both), just before each flood; its CPU time per span. "+
		"The ratio is taken per round, its median reported with the range.\n\n", flush, where, floorBatch)
	hasFloor := c.CollectorFloorNsPerSpan > 0
	if hasFloor {
		fmt.Fprintf(b, "The collector floor is the same collector (`otelcol-floor`: the distro's components built by ocb with one more receiver, harness/bench/spanfloor) whose spanfloor receiver builds the same spans with pdata alone (the same code as the standalone floor: the resource, scope, span fields and attribute types the receiver delivers here) and hands them to the same debug exporter with the same obsreport calls, at the round's rate, in batches of %d, with the receiver's cadence: every flush interval, or every %d spans when that comes first, as the receiver drains when a quarter of its ring buffer is full (%d-byte records in its default ring). No eBPF, no ring buffer, no decoding, no id derivation. Rounds alternate the two (flood, then floor: ABAB), both pinned to the same CPU with the same environment (GOMAXPROCS 1); the floor runs while the measured collector is idle and the probed program's CPU is idle too, so it is the least this collector can cost on this machine; its CPU time per delivered span over as many seconds, after a second of warm-up. The goal's ratio is taken per round (collector over the floor measured next to it), its median reported with the range.\n\n", floorBatch, c.FloorSpansPerDrain, c.FloorRecordBytes)
		fmt.Fprintf(b, "| round | spans/s | delivered | collector CPU | ns per span | context switches per 1,000 spans | pdata floor (standalone) | ratio | collector floor | its ratio | collector / collector floor |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	} else {
		fmt.Fprintf(b, "| round | spans/s | delivered | collector CPU | ns per span | context switches per 1,000 spans | pdata floor (standalone) | ratio |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	}
	for i, r := range c.Rounds {
		fmt.Fprintf(b, "| %d | %.0f | %d | %.3f s | %.0f | %.1f | %.0f ns | %.2f |", i+1, r.SpansPerSec, r.Delivered, r.CPUSeconds, r.NsPerSpan, r.SwitchesPerSpan, r.Floor.NsPerSpan, r.Ratio)
		if hasFloor {
			fmt.Fprintf(b, " %.0f ns | %.2f | %.2f |", r.CollectorFloorNsPerSpan, r.CollectorFloorNsPerSpan/r.Floor.NsPerSpan, r.VsCollectorFloor)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(b, "\n| | ns per span | allocations per span |\n|---|---:|---:|\n")
	allocs := "—"
	if c.Profile != nil {
		allocs = fmt.Sprintf("%.1f", c.Profile.AllocsPerSpan)
	}
	fmt.Fprintf(b, "| collector (receiver + debug exporter), median | %.0f | %s |\n", c.NsPerSpan, allocs)
	fmt.Fprintf(b, "| pdata alone, standalone process pinned to one CPU, median | %.0f | %.1f |\n", c.FloorNsPerSpan, floorAllocs(c))
	if f := c.FloorInProcess; f != nil {
		fmt.Fprintf(b, "| pdata alone, in the benchmark's own process (GOMAXPROCS %d, not pinned) | %.0f | %.1f |\n", f.GOMAXPROCS, f.NsPerSpan, f.AllocsPerSpn)
	}
	if hasFloor {
		fmt.Fprintf(b, "| collector floor: the same collector, a receiver that only builds the spans with pdata, median | %.0f | |\n", c.CollectorFloorNsPerSpan)
		fmt.Fprintf(b, "| the receiver's own cost: collector − collector floor | %.0f | |\n", c.NsPerSpan-c.CollectorFloorNsPerSpan)
		fmt.Fprintf(b, "| ratio collector floor / standalone pdata (a receiver that cost nothing) | %.2f | |\n", c.CollectorFloorRatio)
		fmt.Fprintf(b, "| **ratio collector / collector floor** (median of the rounds' ratios) | **%.2f** (rounds %.2f–%.2f) | |\n", c.VsCollectorFloor, c.VsCollectorFloorMin, c.VsCollectorFloorMax)
		if rate := medianRate(c); rate > 0 {
			fmt.Fprintf(b, "| of the receiver's own cost, what the collector spends idle (per second, not per span: exec watching, tickers), at the median round's rate | %.0f | |\n", c.IdleCPUMsPerSecond*1e6/rate)
		}
	}
	fmt.Fprintf(b, "| **ratio collector / standalone pdata** | **%.2f** (rounds %.2f–%.2f) | |\n", c.Ratio, c.RatioMin, c.RatioMax)
	fmt.Fprintf(b, "\nThe in-process floor is the same code timed in the benchmark's own process, as earlier versions of this benchmark reported it: there the process has GOMAXPROCS %d and a larger heap, and its CPU time includes what the garbage collector's workers do on the other CPU while it builds, so it is not the data model's cost; the standalone figure is. ", inProcessProcs(c))
	fmt.Fprintf(b, "With nothing traced, the collector used %.2f ms of CPU per second (%.0f context switches per second). While the rounds ran, the machine started %.0f processes per second (the receiver looks at every exec for targets' files).\n", c.IdleCPUMsPerSecond, c.IdleSwitchesPerSec, c.ProcessesStartedPerS)

	if p := c.Profile; p != nil {
		fmt.Fprintf(b, "\n### Where the collector's CPU goes\n\n")
		fmt.Fprintf(b, "A CPU profile and an allocation profile (the pprof extension) of %.0f s of flood, %d spans delivered: per delivered span. A sample belongs to the stage of the innermost function on its stack that a stage names (harness/bench/profile.go); garbage collection wherever it is on the stack (background marking, assists, sweeping, scavenging). The process's CPU time in the same seconds is what its threads' scheduler statistics say; the profiler misses part of it (mostly kernel time around context switches).\n\n", p.Seconds, p.Spans)
		var bp *Profile
		if res.Before != nil {
			bp = res.Before.Profile
		}
		stageTable(b, p, bp)
		if fp := c.FloorProfile; fp != nil {
			fmt.Fprintf(b, "\nThe collector floor profiled as long at the median round's rate (%d spans), stage by stage beside the collector (the same stages; the profiler's own share is in both):\n\n", fp.Spans)
			floorStageTable(b, p, fp)
		}
		fmt.Fprintf(b, "\nTop functions by CPU (flat), ns per span:\n\n")
		funcTable(b, p.Top)
		fmt.Fprintf(b, "\nTop allocating functions (first function above the runtime), per span:\n\n")
		allocTable(b, p.TopAllocs)
	}
	if bc := res.Before; bc != nil {
		fmt.Fprintf(b, "\n### Before and after\n\n")
		fmt.Fprintf(b, "Before: the same benchmark, run on %s at %s (an earlier run on this machine, kept in docs/benchmarks-baseline.json).\n\n", orUnknown(bc.Commit), orUnknownDate(bc.Date))
		fmt.Fprintf(b, "| | before | after |\n|---|---:|---:|\n")
		fmt.Fprintf(b, "| collector ns per delivered span (median) | %.0f | %.0f |\n", bc.NsPerSpan, c.NsPerSpan)
		fmt.Fprintf(b, "| pdata floor, standalone (median) | %.0f | %.0f |\n", bc.FloorNsPerSpan, c.FloorNsPerSpan)
		fmt.Fprintf(b, "| ratio (median, range) | %.2f (%.2f–%.2f) | %.2f (%.2f–%.2f) |\n", bc.Ratio, bc.RatioMin, bc.RatioMax, c.Ratio, c.RatioMin, c.RatioMax)
		fmt.Fprintf(b, "| spans per second (median round) | %.0f | %.0f |\n", medianRate(bc), medianRate(c))
		fmt.Fprintf(b, "| idle CPU, ms per second | %.2f | %.2f |\n", bc.IdleCPUMsPerSecond, c.IdleCPUMsPerSecond)
		fmt.Fprintf(b, "| idle context switches per second | %.0f | %.0f |\n", bc.IdleSwitchesPerSec, c.IdleSwitchesPerSec)
		if bc.Profile != nil && c.Profile != nil {
			fmt.Fprintf(b, "| allocations per span (profile) | %.1f | %.1f |\n", bc.Profile.AllocsPerSpan, c.Profile.AllocsPerSpan)
			fmt.Fprintf(b, "| bytes allocated per span (profile) | %.0f | %.0f |\n", bc.Profile.BytesPerSpan, c.Profile.BytesPerSpan)
		}
		if p := bc.Profile; p != nil {
			fmt.Fprintf(b, "\n<details><summary>Before: top functions and allocations</summary>\n\n")
			funcTable(b, p.Top)
			b.WriteString("\n")
			allocTable(b, p.TopAllocs)
			fmt.Fprintf(b, "\n</details>\n")
		}
	}
}

// floorStageTable writes the collector's stages beside the collector
// floor's, with their difference: where the receiver's own cost is.
func floorStageTable(b *strings.Builder, p, floor *Profile) {
	var names []string
	seen := map[string]bool{}
	for _, list := range [][]Stage{p.Stages, floor.Stages} {
		for _, s := range list {
			if !seen[s.Name] {
				names = append(names, s.Name)
				seen[s.Name] = true
			}
		}
	}
	get := func(list []Stage, name string) Stage {
		for _, s := range list {
			if s.Name == name {
				return s
			}
		}
		return Stage{}
	}
	fmt.Fprintf(b, "| stage | collector: ns per span | collector floor: ns per span | difference | collector: allocations | floor: allocations |\n|---|---:|---:|---:|---:|---:|\n")
	for _, n := range names {
		a, f := get(p.Stages, n), get(floor.Stages, n)
		fmt.Fprintf(b, "| %s | %.0f | %.0f | %+.0f | %.2f | %.2f |\n", n, a.NsPerSpan, f.NsPerSpan, a.NsPerSpan-f.NsPerSpan, a.AllocsPerSpan, f.AllocsPerSpan)
	}
	fmt.Fprintf(b, "| **total: the process's CPU time** | **%.0f** | **%.0f** | **%+.0f** | **%.2f** | **%.2f** |\n", p.ProcessNsPerSpan, floor.ProcessNsPerSpan, p.ProcessNsPerSpan-floor.ProcessNsPerSpan, p.AllocsPerSpan, floor.AllocsPerSpan)
}

func stageTable(b *strings.Builder, p, before *Profile) {
	var names []string
	seen := map[string]bool{}
	for _, s := range p.Stages {
		names = append(names, s.Name)
		seen[s.Name] = true
	}
	if before != nil {
		for _, s := range before.Stages {
			if !seen[s.Name] {
				names = append(names, s.Name)
			}
		}
	}
	find := func(p *Profile, name string) (Stage, bool) {
		if p == nil {
			return Stage{}, false
		}
		for _, s := range p.Stages {
			if s.Name == name {
				return s, true
			}
		}
		return Stage{}, false
	}
	if before != nil {
		fmt.Fprintf(b, "| stage | before: ns per span | before: allocations | after: ns per span | after: allocations | after: bytes |\n|---|---:|---:|---:|---:|---:|\n")
	} else {
		fmt.Fprintf(b, "| stage | ns per span | share | allocations | bytes |\n|---|---:|---:|---:|---:|\n")
	}
	cell := func(s Stage, ok bool, f string, v func(Stage) float64) string {
		if !ok {
			return "—"
		}
		return fmt.Sprintf(f, v(s))
	}
	ns := func(s Stage) float64 { return s.NsPerSpan }
	al := func(s Stage) float64 { return s.AllocsPerSpan }
	by := func(s Stage) float64 { return s.BytesPerSpan }
	for _, name := range names {
		a, aok := find(p, name)
		if before != nil {
			bs, bok := find(before, name)
			fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", name, cell(bs, bok, "%.0f", ns), cell(bs, bok, "%.2f", al), cell(a, aok, "%.0f", ns), cell(a, aok, "%.2f", al), cell(a, aok, "%.0f", by))
		} else {
			fmt.Fprintf(b, "| %s | %.0f | %.0f%% | %.2f | %.0f |\n", name, a.NsPerSpan, 100*a.NsPerSpan/p.ProcessNsPerSpan, a.AllocsPerSpan, a.BytesPerSpan)
		}
	}
	if before != nil {
		fmt.Fprintf(b, "| **total: the process's CPU time** | **%.0f** | **%.2f** | **%.0f** | **%.2f** | **%.0f** |\n", before.ProcessNsPerSpan, before.AllocsPerSpan, p.ProcessNsPerSpan, p.AllocsPerSpan, p.BytesPerSpan)
	} else {
		fmt.Fprintf(b, "| **total: the process's CPU time** | **%.0f** | 100%% | **%.2f** | **%.0f** |\n", p.ProcessNsPerSpan, p.AllocsPerSpan, p.BytesPerSpan)
	}
}

func funcTable(b *strings.Builder, fs []Func) {
	fmt.Fprintf(b, "| function | flat ns per span | cumulative ns per span |\n|---|---:|---:|\n")
	for _, f := range fs {
		fmt.Fprintf(b, "| `%s` | %.1f | %.1f |\n", f.Name, f.FlatNsPerSpan, f.CumNsPerSpan)
	}
}

func allocTable(b *strings.Builder, fs []Func) {
	fmt.Fprintf(b, "| function | allocations per span | bytes per span |\n|---|---:|---:|\n")
	for _, f := range fs {
		fmt.Fprintf(b, "| `%s` | %.2f | %.0f |\n", f.Name, f.AllocsPerSpan, f.BytesPerSpan)
	}
}

func floorAllocs(c *Collector) float64 {
	var v []float64
	for _, r := range c.Rounds {
		v = append(v, r.Floor.AllocsPerSpn)
	}
	if len(v) == 0 {
		return 0
	}
	return median(v)
}

func inProcessProcs(c *Collector) int {
	if c.FloorInProcess == nil {
		return 0
	}
	return c.FloorInProcess.GOMAXPROCS
}

func medianRate(c *Collector) float64 {
	var v []float64
	for _, r := range c.Rounds {
		v = append(v, r.SpansPerSec)
	}
	return median(v)
}

func orUnknownDate(s string) string {
	if s == "" {
		return "an unknown date"
	}
	return s
}

func orUnknown(s string) string {
	if s == "" {
		return "an unknown commit"
	}
	return "commit " + s
}
