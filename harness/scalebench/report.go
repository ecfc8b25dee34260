//go:build linux

package main

import (
	"fmt"
	"strings"
)

// markdown writes the scale section of docs/benchmarks.md.
func markdown(res *Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Scale: attach, detach and memory by locations and targets\n\n")
	if res.Smoke {
		fmt.Fprintf(&b, "**Smoke run: too short to judge; it only proves the benchmark works.**\n\n")
	}
	fmt.Fprintf(&b, "Machine: %s, %d CPUs; kernel %s; %s. Produced by `make bench` (harness/scalebench).\n\n", res.Machine, res.CPUs, res.Kernel, res.Date)
	fmt.Fprintf(&b, "Each point runs the receiver in a fresh process of its own (pipelines that drop what they get, the counters collected every second), %s. "+
		"Start is the receiver's Start (resolve the targets, load the engine, attach every location); Shutdown detaches, drains, collects once more and unloads; each with the process's CPU time beside it (this machine is shared: the wall time also counts waits for a CPU). "+
		"RSS is the process's resident memory: before Start (the Go runtime and the collector's libraries, after a garbage collection), while attached (just after the second collection of the counters), the same once the garbage is collected and returned (settled), and the high-water mark from Start on; the live heap is read while attached. "+
		"KiB per location is (RSS attached − RSS before) / locations, the fixed cost of a receiver included (its 8 MiB ring buffer, mapped twice: 16 MiB; the engine; the runtime's threads); marginal is what each location added since the row above. Kernel memory (uprobes, BPF maps) is not in RSS.\n\n", repeats(res))
	fmt.Fprintf(&b, "Locations: one generated C program with count/2 functions (`push %%rbp` entries, `-O1 -g`), one span `function: \"fn_*\"` over them: each function's entry and its kernel return probe (`max_sites_per_file` raised to 100,000). ")
	fmt.Fprintf(&b, "PostgreSQL: `function: \"*\"` on PostgreSQL 15's `postgres`. Targets: as many copies of one small C program (a uprobe belongs to an inode, so each copy is a file of its own), each a target with a USDT span, a function span and a USDT counter (5 locations, 3 links).\n\n")
	table := func(kind, title, countName string) {
		var rows []Point
		for _, p := range res.Points {
			if p.Kind == kind {
				rows = append(rows, p)
			}
		}
		if len(rows) == 0 {
			return
		}
		fmt.Fprintf(&b, "### %s\n\n", title)
		fmt.Fprintf(&b, "| %s | locations | files | Start | its CPU | Shutdown | its CPU | RSS before | RSS attached | settled | peak | live heap | KiB per location | marginal |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n", countName)
		for _, p := range rows {
			count := fmt.Sprint(p.Count)
			if p.Kind == kindPostgres {
				count = "`postgres`"
			}
			marg := "—"
			if p.MarginalKiBPerLocation != 0 {
				marg = fmt.Sprintf("%.2f", p.MarginalKiBPerLocation)
			}
			fmt.Fprintf(&b, "| %s | %d | %d | %.3f s | %.3f s | %.3f s | %.3f s | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %.2f | %s |\n",
				count, p.Locations, p.Files, p.StartSeconds, p.StartCPUSeconds, p.ShutdownSeconds, p.ShutdownCPUSeconds,
				p.BaseRSSMiB, p.AttachedRSSMiB, p.SettledRSSMiB, p.PeakRSSMiB, p.HeapMiB, p.KiBPerLocation, marg)
		}
		b.WriteString("\n")
	}
	table(kindLocations, "Locations in one file (a function pattern)", "locations asked")
	table(kindPostgres, "PostgreSQL 15: `function: \"*\"`", "file")
	table(kindTargets, "Targets (distinct files)", "targets")
	fmt.Fprintf(&b, "| goal | target | measured | met |\n|---|---|---|---|\n")
	for _, g := range res.Goals {
		met := "yes"
		if !g.Met {
			met = "**no**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", g.Name, g.Target, g.Measured, met)
	}
	return b.String()
}

func repeats(res *Result) string {
	n := 0
	for _, p := range res.Points {
		n = max(n, len(p.Runs))
	}
	if n <= 1 {
		return "measured once"
	}
	return fmt.Sprintf("%d times (medians)", n)
}
