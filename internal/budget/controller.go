package budget

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// Tuning of the Controller. Costs are fractions of one CPU.
const (
	// DefaultPeriod is the duty-cycle period: a throttled group is
	// attached at the start of each period for its duty cycle's share.
	DefaultPeriod = time.Second
	// Headroom is the share of the budget the controller aims at when it
	// throttles, leaving room for estimation errors and samples.
	Headroom = 0.9
	// CalmShare and CalmPeriods: throttling ends (every group fully
	// attached again) once the estimated full cost stayed at most
	// CalmShare of the budget for CalmPeriods periods in a row.
	CalmShare   = 0.7
	CalmPeriods = 3
	// MaxRise is the number of levels a throttled group's duty cycle may
	// rise in one period (4: it doubles), so that a rate measured low by
	// chance costs at most one period at twice the share.
	MaxRise = 4
	// MinDuty is the smallest duty cycle; a group that would get less is
	// detached and only sampled.
	MinDuty = 0.01
	// dutyStep is the ratio of two neighbouring duty-cycle levels (2^¼):
	// a group moves a level down as soon as it must, and up only when
	// its cost leaves room for a level more than that (hysteresis).
	dutyStep = 1.189207115002721
	// AverageWindow is the window the budget is an average over.
	AverageWindow = 10 * time.Second
	// A detached group is attached for a sample of at most SampleWindow
	// (at least MinSampleWindow) every AverageWindow or less often, so
	// that its samples cost at most SampleShare of the budget over any
	// AverageWindow; never less often than every MaxSampleEvery.
	SampleWindow    = 20 * time.Millisecond
	MinSampleWindow = time.Millisecond
	MaxSampleEvery  = 5 * time.Minute
	SampleShare     = 0.1
	// History is the number of observation windows (periods with attached
	// time) a group's cost is estimated over: its rate is the higher of
	// the last window's and the average over History windows, so that a
	// rise counts at once and a dip (the traced program kept off its CPU
	// for part of a short window) only when it lasts.
	History = 5
	// minObserved is the attached time over which a rate is measured at
	// least; a shorter window keeps the previous rate.
	minObserved = 2 * time.Millisecond
)

// Settings configure a Controller.
type Settings struct {
	// Budget is the CPU time all probes may add to traced programs, as a
	// fraction of one CPU (0.02 is 2% of a CPU). It must be positive.
	Budget float64
	// Period is the duty-cycle period (DefaultPeriod when 0).
	Period time.Duration
	// Groups are the throttle groups (Groups), all attached when the
	// Controller is made.
	Groups []Group
	// ProbeCostNs is what one hit of each probe costs, in nanoseconds, by
	// probe id (ProbeCosts).
	ProbeCostNs []float64
	// Now reads the clock.
	Now func() time.Time
	// Hits returns the hit counts so far of the given probes, in that
	// order; of every probe, by probe id, when probes is nil.
	Hits func(probes []int) ([]uint64, error)
	// Attach attaches (on) or detaches a group; the probes stop firing
	// when it is called for detaching (it may return before the kernel
	// is done) and fire from its return when attaching.
	Attach func(group int, on bool) error
	// Log is told every change: one per change, never one per period.
	Log func(Change)
}

// ChangeKind says what a Change is.
type ChangeKind uint8

const (
	// Exceeded: the estimated full cost went over the budget; throttling
	// starts.
	Exceeded ChangeKind = iota + 1
	// Calm: the estimated full cost stayed low; every group is fully
	// attached again.
	Calm
	// Duty: a group's duty cycle changed (From, To; 0 is detached).
	Duty
	// Failed: attaching or detaching a group failed (Err); logged once
	// until it succeeds or fails otherwise.
	Failed
)

// Change is one change of the Controller's state, for the log.
type Change struct {
	Kind ChangeKind
	// Group is the group's index (Duty, Failed), -1 otherwise.
	Group int
	Name  string
	// From and To are the group's duty cycles before and after (Duty).
	From, To float64
	// GroupCost is the group's estimated cost if fully attached, and
	// Demand the total over all groups, as fractions of one CPU.
	GroupCost, Demand float64
	// Cost is the estimated total at the duty cycles set now.
	Cost float64
	Err  error
}

// String returns the change as one sentence.
func (c Change) String() string {
	switch c.Kind {
	case Exceeded:
		return fmt.Sprintf("probes would cost %.4f CPU, over the budget: throttling the costliest", c.Demand)
	case Calm:
		return fmt.Sprintf("probes would cost %.4f CPU: every probe is fully attached again", c.Demand)
	case Duty:
		switch {
		case c.To == 0:
			return fmt.Sprintf("%s detached (sampled now and then): it would cost %.4f CPU", c.Name, c.GroupCost)
		case c.To == 1:
			return fmt.Sprintf("%s fully attached again: it would cost %.4f CPU", c.Name, c.GroupCost)
		}
		return fmt.Sprintf("%s attached %.1f%% of the time: it would cost %.4f CPU", c.Name, 100*c.To, c.GroupCost)
	case Failed:
		return fmt.Sprintf("%s: %v", c.Name, c.Err)
	}
	return "unknown change"
}

// ProbeState is one probe's part of a Snapshot.
type ProbeState struct {
	// Rate is the probe's hits per second while attached that its cost is
	// estimated from (0 until known).
	Rate float64
	// Demand is its estimated cost if fully attached, Cost at its group's
	// duty cycle, as fractions of one CPU.
	Demand, Cost float64
	// Duty is its group's duty cycle: 1 fully attached, 0 detached.
	Duty float64
	// Missed is the hits estimated for the time it was detached, so far.
	Missed float64
}

// Snapshot is the Controller's state for self-telemetry.
type Snapshot struct {
	Budget float64
	// Demand is the estimated cost of every probe fully attached, Cost the
	// estimate at the duty cycles now (samples included), as fractions of
	// one CPU.
	Demand, Cost float64
	// Throttled is the number of groups not fully attached.
	Throttled int
	// Probes are by probe id.
	Probes []ProbeState
}

// group is the Controller's state of one throttle group.
type group struct {
	Group
	duty     float64   // the level set; 0 detached
	on       bool      // attached now
	onSince  time.Time // when it was last attached, or the window start
	attached time.Duration
	// onHits are its probes' hits when it was last attached (or at the
	// window start), attachedHits the hits they made attached in this
	// window; precise is false when a switch could not read them.
	onHits       []uint64
	attachedHits []uint64
	precise      bool
	offAt        time.Time // when to detach it in this period; zero: never
	known        bool      // its rates were measured
	demand       float64   // its estimated full cost (fraction of one CPU)
	// hist holds the last History windows: attached time, and hits per
	// probe (in Probes order); next is where the next one goes.
	histAttached [History]time.Duration
	histHits     [History][]uint64
	next, filled int
	sampled      time.Time // its last sample while detached
	failure      string
	// loggedAt is when its duty cycle was last logged, and loggedDuty
	// what it was.
	loggedAt   time.Time
	loggedDuty float64
}

// LogEvery bounds how often a group's duty cycle is logged while it moves
// between throttled levels; throttling it, halving its duty cycle,
// detaching it and attaching it fully again are always logged.
const LogEvery = 10 * time.Second

// Controller keeps the probes' estimated cost under the budget by
// attaching and detaching throttle groups. Step drives it; Snapshot and
// Missed may be called from other goroutines.
type Controller struct {
	s          Settings
	mu         sync.Mutex
	groups     []group
	rate       []float64 // per probe, hits per second while attached, last window
	costRate   []float64 // per probe, the rate costs are estimated from
	missed     []float64 // per probe, hits estimated while detached
	lastHits   []uint64
	windowAt   time.Time
	nextPeriod time.Time
	throttling bool
	calm       int
	demand     float64
}

// New makes a Controller for groups that are all attached now.
func New(s Settings) (*Controller, error) {
	if !(s.Budget > 0) || math.IsInf(s.Budget, 0) {
		return nil, fmt.Errorf("overhead budget %v: want a positive fraction of a CPU", s.Budget)
	}
	if s.Period <= 0 {
		s.Period = DefaultPeriod
	}
	if s.Now == nil || s.Hits == nil || s.Attach == nil {
		return nil, errors.New("a budget controller needs a clock, hit counts and a way to attach")
	}
	if s.Log == nil {
		s.Log = func(Change) {}
	}
	n := len(s.ProbeCostNs)
	for _, g := range s.Groups {
		for _, p := range g.Probes {
			if p < 0 || p >= n {
				return nil, fmt.Errorf("group %s: probe %d has no cost", g.Name, p)
			}
		}
	}
	hits, err := s.Hits(nil)
	if err != nil {
		return nil, fmt.Errorf("reading hit counts: %w", err)
	}
	if len(hits) < n {
		return nil, fmt.Errorf("%d hit counts for %d probes", len(hits), n)
	}
	now := s.Now()
	c := &Controller{
		s:          s,
		rate:       make([]float64, n),
		costRate:   make([]float64, n),
		missed:     make([]float64, n),
		lastHits:   hits[:n:n],
		windowAt:   now,
		nextPeriod: now.Add(s.Period),
	}
	for _, g := range s.Groups {
		gs := group{Group: g, duty: 1, on: true, onSince: now, precise: true,
			onHits: make([]uint64, len(g.Probes)), attachedHits: make([]uint64, len(g.Probes))}
		for j, p := range g.Probes {
			gs.onHits[j] = hits[p]
		}
		c.groups = append(c.groups, gs)
	}
	return c, nil
}

// Step does what is due now — detaching groups whose share of the period
// is over, and at each period's end measuring rates, estimating costs,
// setting duty cycles and starting the next period — and returns when to
// call it next.
func (c *Controller) Step() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.s.Now()
	for gi := range c.groups {
		g := &c.groups[gi]
		if g.on && !g.offAt.IsZero() && !now.Before(g.offAt) {
			c.set(gi, false, now)
		}
	}
	if !now.Before(c.nextPeriod) {
		if c.account(now) {
			c.decide()
		}
		c.startPeriod(now)
		c.nextPeriod = c.nextPeriod.Add(c.s.Period)
		if !c.nextPeriod.After(now) {
			c.nextPeriod = now.Add(c.s.Period)
		}
	}
	next := c.nextPeriod
	for _, g := range c.groups {
		if g.on && !g.offAt.IsZero() && g.offAt.Before(next) {
			next = g.offAt
		}
	}
	return next
}

// Flush accounts for the time since the last period's end (the hits
// missed meanwhile), as at the end of a period, without changing
// anything: call it before reading Missed a last time.
func (c *Controller) Flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.account(c.s.Now())
}

// set attaches or detaches group gi at now, and accounts its attached time
// and the hits its probes made while attached (read before the switch:
// nothing fires before an attach, and what fires while a detach takes
// effect is counted, not estimated).
func (c *Controller) set(gi int, on bool, now time.Time) {
	g := &c.groups[gi]
	if g.on == on {
		return
	}
	hits, herr := c.s.Hits(g.Probes)
	if herr != nil || len(hits) < len(g.Probes) {
		g.precise = false
	}
	err := c.s.Attach(gi, on)
	if err != nil {
		if msg := err.Error(); msg != g.failure {
			g.failure = msg
			c.s.Log(Change{Kind: Failed, Group: gi, Name: g.Name, Err: err})
		}
		if on {
			return // still detached; tried again next period
		}
	} else {
		g.failure = ""
	}
	if on {
		g.on, g.onSince = true, c.s.Now() // it fires from the return on
		if g.precise {
			copy(g.onHits, hits)
		}
		return
	}
	g.on = false
	g.offAt = time.Time{}
	if now.After(g.onSince) {
		g.attached += now.Sub(g.onSince) // it stopped firing at the call
	}
	if g.precise {
		for j := range g.Probes {
			g.attachedHits[j] += hits[j] - g.onHits[j]
		}
	}
}

// account closes the observation window at now: every probe's rate from
// the hits it made over its group's attached time, and the hits it
// missed while detached. It returns false when the hit counts could not be
// read (the window then goes on).
func (c *Controller) account(now time.Time) bool {
	hits, err := c.s.Hits(nil)
	if err != nil || len(hits) < len(c.lastHits) {
		if err == nil {
			err = fmt.Errorf("%d hit counts for %d probes", len(hits), len(c.lastHits))
		}
		c.s.Log(Change{Kind: Failed, Group: -1, Name: "reading hit counts", Err: err})
		return false
	}
	window := now.Sub(c.windowAt)
	for gi := range c.groups {
		g := &c.groups[gi]
		attached := g.attached
		if g.on && now.After(g.onSince) {
			attached += now.Sub(g.onSince)
		}
		g.attached = 0
		// The hits made attached, and those counted while detached (a
		// detach taking effect): these are no estimate.
		made := make([]uint64, len(g.Probes))
		leaked := make([]uint64, len(g.Probes))
		for j, p := range g.Probes {
			total := hits[p] - c.lastHits[p]
			made[j] = total
			if g.precise {
				made[j] = g.attachedHits[j]
				if g.on {
					made[j] += hits[p] - g.onHits[j]
				}
				made[j] = min(made[j], total)
				leaked[j] = total - made[j]
			}
			g.attachedHits[j] = 0
			g.onHits[j] = hits[p]
		}
		g.precise = true
		if g.on {
			g.onSince = now
		}
		measured := attached >= minObserved
		if measured {
			i := g.next
			g.histAttached[i] = attached
			if g.histHits[i] == nil {
				g.histHits[i] = make([]uint64, len(g.Probes))
			}
			copy(g.histHits[i], made)
			g.next, g.filled = (i+1)%History, min(History, g.filled+1)
		}
		var total time.Duration
		for i := range g.filled {
			total += g.histAttached[i]
		}
		g.demand = 0
		for j, p := range g.Probes {
			if measured {
				c.rate[p] = float64(made[j]) / attached.Seconds()
				var n uint64
				for i := range g.filled {
					n += g.histHits[i][j]
				}
				c.costRate[p] = max(c.rate[p], float64(n)/total.Seconds())
			}
			if (measured || g.known) && window > attached {
				c.missed[p] += max(0, c.rate[p]*(window-attached).Seconds()-float64(leaked[j]))
			}
			g.demand += c.costRate[p] * c.s.ProbeCostNs[p] * 1e-9
		}
		g.known = g.known || measured
	}
	copy(c.lastHits, hits)
	c.windowAt = now
	return true
}

// decide sets every group's duty cycle from the estimated costs.
func (c *Controller) decide() {
	c.demand = 0
	for _, g := range c.groups {
		c.demand += g.demand
	}
	b := c.s.Budget
	if !c.throttling {
		if c.demand <= b {
			return
		}
		c.throttling, c.calm = true, 0
		c.s.Log(Change{Kind: Exceeded, Group: -1, Demand: c.demand, Cost: c.cost()})
	} else {
		if c.demand <= CalmShare*b {
			c.calm++
		} else {
			c.calm = 0
		}
		if c.calm >= CalmPeriods {
			c.throttling = false
			for gi := range c.groups {
				c.setDuty(gi, 1)
			}
			c.s.Log(Change{Kind: Calm, Group: -1, Demand: c.demand, Cost: c.cost()})
			return
		}
	}
	level := waterLevel(c.groups, Headroom*b)
	for gi := range c.groups {
		g := &c.groups[gi]
		want := math.Inf(1)
		if g.demand > 0 {
			want = level / g.demand
		}
		// Down at once; up with a level's margin, at most MaxRise
		// levels a period (from detached: to the lowest level).
		down, up := dutyLevel(want), dutyLevel(want/dutyStep)
		up = min(up, dutyLevel(max(g.duty, MinDuty)*math.Pow(dutyStep, MaxRise)))
		switch {
		case down < g.duty:
			c.setDuty(gi, down)
		case up > g.duty:
			c.setDuty(gi, up)
		}
	}
}

// setDuty sets and logs a group's duty cycle; it takes effect at the next
// period's start.
func (c *Controller) setDuty(gi int, d float64) {
	g := &c.groups[gi]
	if g.duty == d {
		return
	}
	from := g.duty
	g.duty = d
	if d == 0 {
		g.sampled = c.windowAt // the rate was just measured
	}
	// Falls by half or more are logged, and the ends; rises on the way
	// back up and small moves at most every LogEvery.
	if d == 0 || d == 1 || from == 1 || d <= g.loggedDuty/2 || c.windowAt.Sub(g.loggedAt) >= LogEvery {
		g.loggedAt, g.loggedDuty = c.windowAt, d
		c.s.Log(Change{Kind: Duty, Group: gi, Name: g.Name, From: from, To: d, GroupCost: g.demand, Demand: c.demand, Cost: c.cost()})
	}
}

// startPeriod attaches the groups the new period begins with, and plans
// when each throttled one is detached.
func (c *Controller) startPeriod(now time.Time) {
	for gi := range c.groups {
		g := &c.groups[gi]
		switch {
		case g.duty >= 1:
			c.set(gi, true, now)
			g.offAt = time.Time{}
		case g.duty > 0:
			c.set(gi, true, now)
			if g.on {
				g.offAt = g.onSince.Add(time.Duration(g.duty * float64(c.s.Period)))
			}
		default:
			window, every := sampling(g.demand, c.s.Budget)
			if now.Sub(g.sampled) >= every {
				c.set(gi, true, now)
				if g.on {
					g.sampled = now
					g.offAt = g.onSince.Add(window)
				}
			} else {
				c.set(gi, false, now)
			}
		}
	}
}

// cost returns the estimated total at the duty cycles set now, samples
// of detached groups included.
func (c *Controller) cost() float64 {
	total := 0.0
	for _, g := range c.groups {
		total += g.demand * c.share(g)
	}
	return total
}

// share returns the fraction of the time a group is attached at its duty
// cycle.
func (c *Controller) share(g group) float64 {
	if g.duty > 0 {
		return g.duty
	}
	window, every := sampling(g.demand, c.s.Budget)
	return window.Seconds() / every.Seconds()
}

// Snapshot returns the Controller's state now.
func (c *Controller) Snapshot() Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Snapshot{Budget: c.s.Budget, Demand: c.demand, Cost: c.cost(), Probes: make([]ProbeState, len(c.rate))}
	for _, g := range c.groups {
		if g.duty < 1 {
			s.Throttled++
		}
		share := c.share(g)
		for _, p := range g.Probes {
			d := c.costRate[p] * c.s.ProbeCostNs[p] * 1e-9
			s.Probes[p] = ProbeState{Rate: c.costRate[p], Demand: d, Cost: d * share, Duty: g.duty, Missed: c.missed[p]}
		}
	}
	return s
}

// Missed returns the hits estimated so far for the time probe p was
// detached.
func (c *Controller) Missed(p int) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.missed[p]
}

// SetProbeCosts replaces what one hit of each probe costs (files gained
// while running may have other site classes); it applies from the next
// period on.
func (c *Controller) SetProbeCosts(ns []float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	copy(c.s.ProbeCostNs, ns)
}

// waterLevel returns the cost level L at which capping every group's
// demand at L makes the total target: groups that cost less than L keep
// all of it, the costlier ones are cut to L. Without demand above target
// it returns +Inf.
func waterLevel(groups []group, target float64) float64 {
	d := make([]float64, 0, len(groups))
	total := 0.0
	for _, g := range groups {
		if g.demand > 0 {
			d = append(d, g.demand)
			total += g.demand
		}
	}
	if total <= target {
		return math.Inf(1)
	}
	// Cheapest first: each group below the level keeps its demand.
	slices.Sort(d)
	rest := target
	for i, v := range d {
		n := float64(len(d) - i)
		if v*n >= rest {
			return rest / n
		}
		rest -= v
	}
	return rest
}

// dutyLevel returns the highest level at most d: 1, 2^(-k/4) down to
// MinDuty, or 0 below it.
func dutyLevel(d float64) float64 {
	if d >= 1 {
		return 1
	}
	if d < MinDuty || math.IsNaN(d) {
		return 0
	}
	k := math.Ceil(-4*math.Log2(d) - 1e-9)
	l := math.Pow(2, -k/4)
	if l < MinDuty {
		return 0
	}
	return l
}

// sampling returns how long a detached group of the given full cost (a
// fraction of one CPU) is attached for each sample, and how often.
func sampling(demand, budget float64) (window, every time.Duration) {
	allowed := SampleShare * budget * AverageWindow.Seconds() // CPU seconds per sample
	window = SampleWindow
	if demand > 0 {
		window = min(window, time.Duration(allowed/demand*float64(time.Second)))
	}
	window = max(MinSampleWindow, window)
	every = time.Duration(demand * window.Seconds() / (SampleShare * budget) * float64(time.Second))
	return window, min(MaxSampleEvery, max(AverageWindow, every))
}
