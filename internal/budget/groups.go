// Package budget keeps the CPU time probes add to traced programs under an
// overhead budget. It is plain Go: it never touches the kernel, and is
// driven by a clock, the probes' hit counters and a function that attaches
// or detaches a throttle group, all given by its user (the receiver, with
// internal/tracer; tests, with fakes).
//
// Probes are throttled in groups: a probe together with every probe it
// pairs with in a span, so that a span's entry and exit are always
// attached together (the entry detached first and attached last). Each
// period (one second) the Controller estimates every group's full cost —
// the hit rate it observed while the group was attached, times the cost of
// one hit of each of its probes as calibrated on this machine (the trap by
// site class, a uretprobe's return leg, the BPF program) — and when the
// total exceeds the budget it duty-cycles the costliest groups: each is
// attached for a fraction of every period, down to detached (attached only
// for a short sample now and then, so that its rate stays known), and goes
// back up, with hysteresis, when the load falls. Hits a group missed while
// detached are estimated from its rate.
package budget

import (
	"cmp"
	"slices"
	"strings"

	"github.com/otel-uprobe/uprobereceiver/internal/insn"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
)

// Group is one throttle group: probes that are attached and detached
// together because spans pair them.
type Group struct {
	// Probes are the group's probe ids in the order they are detached:
	// probes that open spans (and close none) first, then the others. They
	// are attached in the reverse order, so that no span opens while its
	// exit is detached.
	Probes []int
	// Name names the group for logs: its probe references, joined by ", ".
	Name string
}

// Groups returns the throttle groups of a plan, ordered by their first
// probe id: probes linked by a span (its entry and exit) are in one group,
// transitively; every other probe is a group of its own.
func Groups(plan *plan.Plan) []Group {
	parent := make([]int, len(plan.Probes))
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		if parent[i] != i {
			parent[i] = find(parent[i])
		}
		return parent[i]
	}
	entry := make([]bool, len(plan.Probes))
	exit := make([]bool, len(plan.Probes))
	for _, s := range plan.Spans {
		entry[s.Entry], exit[s.Exit] = true, true
		a, b := find(s.Entry), find(s.Exit)
		if a != b {
			parent[max(a, b)] = min(a, b)
		}
		// An error exit closes the span too: it goes with it.
		for _, x := range s.ErrorExits {
			exit[x] = true
			a, b := find(s.Entry), find(x)
			if a != b {
				parent[max(a, b)] = min(a, b)
			}
		}
	}
	index := map[int]int{}
	var groups []Group
	for p := range plan.Probes {
		r := find(p)
		gi, ok := index[r]
		if !ok {
			gi = len(groups)
			index[r] = gi
			groups = append(groups, Group{})
		}
		groups[gi].Probes = append(groups[gi].Probes, p)
	}
	rank := func(p int) int {
		switch {
		case entry[p] && !exit[p]:
			return 0
		case entry[p]:
			return 1
		}
		return 2
	}
	for gi := range groups {
		g := &groups[gi]
		slices.SortStableFunc(g.Probes, func(a, b int) int { return cmp.Compare(rank(a), rank(b)) })
		names := make([]string, len(g.Probes))
		for i, p := range g.Probes {
			names[i] = plan.Probes[p].Ref
		}
		g.Name = strings.Join(names, ", ")
	}
	return groups
}

// Costs are what probe hits cost the traced threads on this machine, in
// nanoseconds: the tracer's calibration, and what the engine's programs
// cost beyond the calibration's counter.
type Costs struct {
	// HitNs is the cost of one hit by site class (insn.Optimizable,
	// insn.Emulated, insn.SingleStepped), with the cheapest program.
	HitNs [3]float64
	// ReturnNs is what a uretprobe adds to an entry uprobe at the same
	// function.
	ReturnNs float64
	// ProgramNs is what each engine program costs per run beyond the
	// calibration's counter (from BPF run-time statistics); 0 when unknown.
	ProgramNs map[plan.Program]float64
}

// Leg is one way a hit of a probe is paid for: at a location of a site
// class, as an entry uprobe or as a uretprobe (whose entry trap an entry
// uprobe of its group at the same place may share), running a program.
type Leg struct {
	Class insn.SiteClass
	// Return is a uretprobe; SharedTrap says an entry uprobe of the same
	// group sits at the same function, so the uretprobe adds only its
	// return leg.
	Return, SharedTrap bool
	Program            plan.Program
}

// Legs returns the distinct legs of each probe's locations, by probe id.
func Legs(plan *plan.Plan, groups []Group) [][]Leg {
	groupOf := make([]int, len(plan.Probes))
	for gi, g := range groups {
		for _, p := range g.Probes {
			groupOf[p] = gi
		}
	}
	type place struct {
		file   int
		offset uint64
		group  int
	}
	entries := map[place]bool{}
	for _, a := range plan.Attachments {
		if !a.Return {
			entries[place{a.File, a.FileOffset, groupOf[a.Probe]}] = true
		}
	}
	out := make([][]Leg, len(plan.Probes))
	for _, a := range plan.Attachments {
		l := Leg{Class: min(a.Class, insn.SingleStepped), Return: a.Return, Program: a.Program}
		l.SharedTrap = a.Return && entries[place{a.File, a.FileOffset, groupOf[a.Probe]}]
		if !slices.Contains(out[a.Probe], l) {
			out[a.Probe] = append(out[a.Probe], l)
		}
	}
	return out
}

// Cost returns what one hit through leg l costs, in nanoseconds: the trap
// of its site class (for a uretprobe its return leg, plus the trap at the
// function's entry unless an entry uprobe shares it) and its program's run.
func (c Costs) Cost(l Leg) float64 {
	ns := c.ProgramNs[l.Program]
	switch {
	case !l.Return:
		ns += c.HitNs[l.Class]
	case l.SharedTrap:
		ns += c.ReturnNs
	default:
		ns += c.HitNs[l.Class] + c.ReturnNs
	}
	return ns
}

// ProbeCosts returns what one hit of each probe costs, in nanoseconds, by
// probe id: its costliest leg (a probe with several locations pays, per
// hit, at most that); 0 for a probe without locations.
func (c Costs) ProbeCosts(legs [][]Leg) []float64 {
	out := make([]float64, len(legs))
	for p, ls := range legs {
		for _, l := range ls {
			out[p] = max(out[p], c.Cost(l))
		}
	}
	return out
}

// ProbeCosts returns what one hit of each probe of a plan costs (see
// Costs.ProbeCosts and Legs).
func ProbeCosts(plan *plan.Plan, groups []Group, c Costs) []float64 {
	return c.ProbeCosts(Legs(plan, groups))
}
