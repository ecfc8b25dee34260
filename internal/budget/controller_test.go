package budget

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// world is a fake of the traced programs and the kernel: each probe fires
// at its rate (hits per second) while its group is attached, each hit
// costing its probe's cost. It keeps the true calls, the counted hits and
// the CPU time the hits added, per second.
type world struct {
	t       *testing.T
	now     time.Time
	start   time.Time
	rate    []float64 // per probe, now
	costNs  []float64
	groupOf []int
	on      []bool // per group
	calls   []float64
	counted []float64
	added   []float64 // per whole second since start: CPU seconds added
	attachs int       // calls of Attach
	fail    map[int]error
	log     []Change
	// attachTakes is how long attaching takes (the clock moves on);
	// detachLag how long a detached group goes on firing.
	attachTakes, detachLag time.Duration
	offAt                  map[int]time.Time
}

func newWorld(t *testing.T, groups []Group, costNs, rate []float64) *world {
	w := &world{t: t, now: time.Unix(1000, 0), rate: rate, costNs: costNs, fail: map[int]error{}, offAt: map[int]time.Time{}}
	w.start = w.now
	w.groupOf = make([]int, len(costNs))
	for gi, g := range groups {
		for _, p := range g.Probes {
			w.groupOf[p] = gi
		}
		w.on = append(w.on, true)
	}
	w.calls = make([]float64, len(costNs))
	w.counted = make([]float64, len(costNs))
	return w
}

// advance moves the clock to to, integrating calls, hits and cost.
func (w *world) advance(to time.Time) {
	for w.now.Before(to) {
		// Integrate up to the next whole second, so that costs land in
		// the second they were spent in.
		sec := w.now.Sub(w.start) / time.Second
		end := w.start.Add((sec + 1) * time.Second)
		if end.After(to) {
			end = to
		}
		for g, at := range w.offAt {
			if !at.After(w.now) {
				w.on[g] = false
				delete(w.offAt, g)
			} else if at.Before(end) {
				end = at
			}
		}
		dt := end.Sub(w.now).Seconds()
		for len(w.added) <= int(sec) {
			w.added = append(w.added, 0)
		}
		for p, r := range w.rate {
			w.calls[p] += r * dt
			if w.on[w.groupOf[p]] {
				w.counted[p] += r * dt
				w.added[sec] += r * dt * w.costNs[p] * 1e-9
			}
		}
		w.now = end
	}
}

func (w *world) settings(budget float64, groups []Group) Settings {
	return Settings{
		Budget:      budget,
		Groups:      groups,
		ProbeCostNs: w.costNs,
		Now:         func() time.Time { return w.now },
		Hits: func(probes []int) ([]uint64, error) {
			if probes == nil {
				for p := range w.counted {
					probes = append(probes, p)
				}
			}
			var out []uint64
			for _, p := range probes {
				out = append(out, uint64(math.Floor(w.counted[p])))
			}
			return out, nil
		},
		Attach: func(g int, on bool) error {
			w.attachs++
			if err := w.fail[g]; err != nil && on {
				return err
			}
			if on {
				w.advance(w.now.Add(w.attachTakes))
				delete(w.offAt, g)
			}
			if !on && w.detachLag > 0 {
				w.offAt[g] = w.now.Add(w.detachLag)
				return nil
			}
			w.on[g] = on
			return nil
		},
		Log: func(c Change) { w.log = append(w.log, c) },
	}
}

// run drives the controller until the clock reads start+until, calling
// change at the given offsets (in order) to change the world.
func (w *world) run(c *Controller, until time.Duration, changes ...worldChange) {
	next := c.Step()
	for {
		stop := w.start.Add(until)
		if len(changes) > 0 && w.start.Add(changes[0].at).Before(stop) {
			stop = w.start.Add(changes[0].at)
		}
		if next.Before(stop) {
			stop = next
		}
		if stop.After(w.start.Add(until)) {
			return
		}
		w.advance(stop)
		if len(changes) > 0 && !w.now.Before(w.start.Add(changes[0].at)) {
			changes[0].do(w)
			changes = changes[1:]
		}
		if !w.now.Before(next) {
			next = c.Step()
		}
		if !w.now.Before(w.start.Add(until)) {
			return
		}
	}
}

type worldChange struct {
	at time.Duration
	do func(*world)
}

func setRate(at time.Duration, p int, rate float64) worldChange {
	return worldChange{at, func(w *world) { w.rate[p] = rate }}
}

// addedIn returns the CPU seconds added in each whole second [from, to).
func (w *world) addedIn(from, to int) []float64 {
	return w.added[from:min(to, len(w.added))]
}

func kinds(log []Change) []ChangeKind {
	var out []ChangeKind
	for _, c := range log {
		out = append(out, c.Kind)
	}
	return out
}

func single(n int) []Group {
	var g []Group
	for p := range n {
		g = append(g, Group{Probes: []int{p}, Name: string(rune('a' + p))})
	}
	return g
}

func TestUnderBudgetChangesNothing(t *testing.T) {
	groups := single(2)
	w := newWorld(t, groups, []float64{5000, 1400}, []float64{1000, 2000}) // 0.005 + 0.0028 CPU
	c, err := New(w.settings(0.02, groups))
	require.NoError(t, err)
	w.run(c, 30*time.Second)
	assert.Zero(t, w.attachs, "nothing attached or detached")
	assert.Empty(t, w.log)
	s := c.Snapshot()
	assert.InDelta(t, 0.0078, s.Demand, 1e-6)
	assert.InDelta(t, 0.0078, s.Cost, 1e-6)
	assert.Zero(t, s.Throttled)
	assert.Equal(t, 1.0, s.Probes[0].Duty)
	assert.InDelta(t, 1000, s.Probes[0].Rate, 1)
	assert.Zero(t, s.Probes[0].Missed)
}

// A probe that would cost a whole CPU under a 5% budget: within two
// periods every second costs less than the budget, with one log line for
// the overload and one for the duty cycle; the missed hits are estimated.
func TestOverloadIsThrottledWithinTwoPeriods(t *testing.T) {
	groups := single(1)
	w := newWorld(t, groups, []float64{5000}, []float64{0})
	c, err := New(w.settings(0.05, groups))
	require.NoError(t, err)
	w.run(c, 60*time.Second, setRate(10500*time.Millisecond, 0, 200_000)) // 1 CPU from 10.5 s on
	for sec, v := range w.addedIn(0, 10) {
		assert.Zero(t, v, "second %d", sec)
	}
	assert.Greater(t, w.added[10], 0.4, "the overload starts")
	for sec, v := range w.addedIn(12, 60) {
		assert.LessOrEqual(t, v, 0.05, "second %d: the added cost is back under the budget", sec+12)
		assert.Greater(t, v, 0.035, "second %d: the probe still runs for most of its budget", sec+12)
	}
	// The first decision saw half a second of overload, the second all of
	// it; nothing changes after that.
	require.Equal(t, []ChangeKind{Exceeded, Duty, Duty}, kinds(w.log), "one line per change, not per period")
	assert.Equal(t, 1.0, w.log[1].From)
	assert.InDelta(t, 0.5, w.log[1].GroupCost, 0.01)
	assert.InDelta(t, 0.0442, w.log[2].To, 0.0001, "2^(-18/4): the highest level under 0.9 × 0.05 / 1")
	assert.InDelta(t, 1.0, w.log[2].GroupCost, 0.01)

	s := c.Snapshot()
	assert.Equal(t, 1, s.Throttled)
	assert.InDelta(t, 1.0, s.Demand, 0.01)
	assert.InDelta(t, 0.0442, s.Cost, 0.0002)
	assert.InDelta(t, 0.0442, s.Probes[0].Duty, 0.0001)
	assert.InDelta(t, 200_000, s.Probes[0].Rate, 200)
	c.Flush()
	estimated := w.counted[0] + c.Missed(0)
	assert.InDelta(t, w.calls[0], estimated, 0.01*w.calls[0], "counted + missed is the true call count")
	assert.Less(t, w.counted[0], 0.1*w.calls[0], "most calls were not counted")
}

// Hits that come while a detach takes effect (the kernel is slow to take
// a probe out, or the detach starts late) are counted, not estimated
// again, and do not inflate the rate.
func TestSlowDetachIsNotEstimatedTwice(t *testing.T) {
	groups := single(1)
	w := newWorld(t, groups, []float64{5000}, []float64{200_000})
	w.detachLag, w.attachTakes = 5*time.Millisecond, time.Millisecond
	c, err := New(w.settings(0.05, groups))
	require.NoError(t, err)
	w.run(c, 60*time.Second)
	c.Flush()
	assert.InDelta(t, w.calls[0], w.counted[0]+c.Missed(0), 0.005*w.calls[0])
	assert.InDelta(t, 200_000, c.Snapshot().Probes[0].Rate, 200)
}

// The costliest group is throttled first; a cheap one keeps running.
func TestCostliestFirst(t *testing.T) {
	groups := single(2)
	w := newWorld(t, groups, []float64{5000, 5000}, []float64{100_000, 2_000}) // 0.5 and 0.01 CPU
	c, err := New(w.settings(0.05, groups))
	require.NoError(t, err)
	w.run(c, 30*time.Second)
	s := c.Snapshot()
	assert.Equal(t, 1.0, s.Probes[1].Duty, "the cheap probe is left alone")
	assert.InDelta(t, dutyLevel((0.045-0.01)/0.5), s.Probes[0].Duty, 1e-9)
	for sec, v := range w.addedIn(2, 30) {
		assert.LessOrEqual(t, v, 0.05, "second %d", sec+2)
	}
}

// A group that would cost 50 CPUs (many threads on a single-stepped
// site) is detached and only sampled, so that its samples cost a tenth of
// the budget over any 10 s.
func TestDetachedAndSampled(t *testing.T) {
	groups := single(1)
	w := newWorld(t, groups, []float64{50_000}, []float64{1_000_000})
	c, err := New(w.settings(0.05, groups))
	require.NoError(t, err)
	w.run(c, 120*time.Second)
	require.Equal(t, []ChangeKind{Exceeded, Duty}, kinds(w.log))
	assert.Zero(t, w.log[1].To, "detached")
	s := c.Snapshot()
	assert.Zero(t, s.Probes[0].Duty)
	assert.InDelta(t, 1_000_000, s.Probes[0].Rate, 1000, "the samples keep the rate known")
	window, every := sampling(50, 0.05)
	assert.Equal(t, time.Millisecond, window)
	assert.Equal(t, 10*time.Second, every)
	for start := 2; start+10 <= 120; start++ {
		sum := 0.0
		for _, v := range w.addedIn(start, start+10) {
			sum += v
		}
		assert.LessOrEqual(t, sum/10, 0.1*0.05+1e-9, "samples over [%d, %d)", start, start+10)
	}
	c.Flush()
	assert.InDelta(t, w.calls[0], w.counted[0]+c.Missed(0), 0.01*w.calls[0])
}

// When the load falls, the group's duty cycle doubles each period (its
// estimated cost falls as the windows of the high rate leave its history)
// until, after CalmPeriods calm periods, every group is fully attached.
func TestBackUpWithHysteresis(t *testing.T) {
	groups := single(1)
	w := newWorld(t, groups, []float64{5000}, []float64{200_000})
	c, err := New(w.settings(0.05, groups))
	require.NoError(t, err)
	w.run(c, 60*time.Second,
		setRate(20*time.Second, 0, 2_000), // 0.01 CPU
	)
	k := kinds(w.log)
	require.GreaterOrEqual(t, len(k), 4)
	assert.Equal(t, Exceeded, k[0])
	assert.Equal(t, Calm, k[len(k)-1])
	for i, l := range w.log[1 : len(w.log)-1] {
		require.Equal(t, Duty, l.Kind)
		if i > 0 {
			assert.Greater(t, l.To, l.From, "only up after the drop")
			assert.LessOrEqual(t, l.To, 2*l.From+1e-9, "at most doubled per period")
		}
	}
	assert.Equal(t, 1.0, w.log[len(w.log)-2].To)
	s := c.Snapshot()
	assert.Zero(t, s.Throttled)
	assert.Equal(t, 1.0, s.Probes[0].Duty)
	// Fully attached from the calm decision on: every later second counts
	// every call; never over the budget on the way.
	back := -1
	for sec := 20; sec < 60; sec++ {
		assert.LessOrEqual(t, w.added[sec], 0.05)
		if back < 0 && math.Abs(w.added[sec]-0.01) < 1e-6 {
			back = sec
		}
	}
	assert.GreaterOrEqual(t, back, 23, "not at once")
	assert.LessOrEqual(t, back, 28, "within 8 s")
}

func TestHoveringLoadKeepsItsLevel(t *testing.T) {
	groups := single(1)
	w := newWorld(t, groups, []float64{5000}, []float64{200_000})
	c, err := New(w.settings(0.05, groups))
	require.NoError(t, err)
	var changes []worldChange
	for s := 5; s < 60; s++ {
		r := 200_000.0
		if s%2 == 0 {
			r = 190_000 // ±5%
		}
		changes = append(changes, setRate(time.Duration(s)*time.Second+300*time.Millisecond, 0, r))
	}
	w.run(c, 60*time.Second, changes...)
	assert.Equal(t, []ChangeKind{Exceeded, Duty}, kinds(w.log), "no change back and forth")
}

// A dip in one short window (the program kept off its CPU for part of
// it) does not let the group up: the cost comes from its history.
func TestDipInOneWindowChangesNothing(t *testing.T) {
	groups := single(1)
	w := newWorld(t, groups, []float64{5000}, []float64{200_000})
	c, err := New(w.settings(0.05, groups))
	require.NoError(t, err)
	w.run(c, 40*time.Second,
		setRate(30*time.Second, 0, 50_000),
		setRate(30*time.Second+30*time.Millisecond, 0, 200_000),
	)
	assert.Equal(t, []ChangeKind{Exceeded, Duty}, kinds(w.log))
}

// A group that cannot be attached again is logged once, tried every
// period, and attached when it can be.
func TestAttachFailureLoggedOnce(t *testing.T) {
	groups := single(1)
	w := newWorld(t, groups, []float64{5000}, []float64{200_000})
	c, err := New(w.settings(0.05, groups))
	require.NoError(t, err)
	gone := errors.New("the file changed")
	w.run(c, 30*time.Second,
		worldChange{5 * time.Second, func(w *world) { w.fail[0] = gone }},
		worldChange{15 * time.Second, func(w *world) { delete(w.fail, 0) }},
	)
	require.Equal(t, []ChangeKind{Exceeded, Duty, Failed}, kinds(w.log))
	assert.Equal(t, gone, w.log[2].Err)
	assert.Equal(t, 0, w.log[2].Group)
	for sec := 7; sec < 15; sec++ {
		assert.Zero(t, w.added[sec], "second %d: not attached", sec)
	}
	assert.Greater(t, w.added[20], 0.03, "attached again")
}

// A group's cost is its probes' together, and they share its duty cycle.
func TestGroupCostAddsItsProbes(t *testing.T) {
	groups := []Group{{Probes: []int{1, 0}, Name: "entry, exit"}}
	w := newWorld(t, groups, []float64{1000, 4000}, []float64{100_000, 100_000})
	c, err := New(w.settings(0.05, groups))
	require.NoError(t, err)
	w.run(c, 5*time.Second)
	s := c.Snapshot()
	assert.InDelta(t, 0.5, s.Demand, 0.01, "0.1 + 0.4 CPU")
	assert.InDelta(t, 0.1, s.Probes[0].Demand, 0.001)
	assert.InDelta(t, 0.4, s.Probes[1].Demand, 0.001)
	assert.Equal(t, s.Probes[0].Duty, s.Probes[1].Duty)
	assert.Less(t, s.Probes[0].Duty, 0.1)
	assert.Equal(t, 1, s.Throttled)
}

func TestNewRefuses(t *testing.T) {
	groups := single(1)
	w := newWorld(t, groups, []float64{5000}, []float64{0})
	for _, tc := range []struct {
		name string
		edit func(*Settings)
		want string
	}{
		{"zero budget", func(s *Settings) { s.Budget = 0 }, "positive"},
		{"NaN budget", func(s *Settings) { s.Budget = math.NaN() }, "positive"},
		{"no clock", func(s *Settings) { s.Now = nil }, "clock"},
		{"probe without cost", func(s *Settings) { s.Groups = single(2) }, "no cost"},
		{"hits fail", func(s *Settings) { s.Hits = func([]int) ([]uint64, error) { return nil, errors.New("eperm") } }, "eperm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := w.settings(0.05, groups)
			tc.edit(&s)
			_, err := New(s)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestDutyLevel(t *testing.T) {
	for _, tc := range []struct{ in, want float64 }{
		{2, 1},
		{1, 1},
		{0.9999, math.Pow(2, -0.25)},
		{math.Pow(2, -0.25), math.Pow(2, -0.25)},
		{0.5, 0.5},
		{0.49, math.Pow(2, -1.25)},
		{0.045, math.Pow(2, -4.5)},
		{0.0111, math.Pow(2, -6.5)},
		{0.0105, 0},
		{0, 0},
		{math.NaN(), 0},
	} {
		assert.InDelta(t, tc.want, dutyLevel(tc.in), 1e-12, "dutyLevel(%v)", tc.in)
	}
}

func TestWaterLevel(t *testing.T) {
	g := func(d ...float64) []group {
		var out []group
		for _, v := range d {
			out = append(out, group{demand: v})
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		groups []group
		target float64
		want   float64
	}{
		{"under target", g(0.01, 0.02), 0.045, math.Inf(1)},
		{"one over", g(1), 0.045, 0.045},
		{"cheap one kept", g(0.5, 0.01), 0.045, 0.035},
		{"two alike", g(0.5, 0.5), 0.045, 0.0225},
		{"all cut", g(0.1, 0.2, 0.3), 0.06, 0.02},
		{"no demand", g(0, 0), 0.045, math.Inf(1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.InDelta(t, tc.want, waterLevel(tc.groups, tc.target), 1e-12)
		})
	}
}

func TestSampling(t *testing.T) {
	for _, tc := range []struct {
		demand, budget float64
		window, every  time.Duration
	}{
		{0.5, 0.05, 20 * time.Millisecond, 10 * time.Second},
		{5, 0.05, 10 * time.Millisecond, 10 * time.Second},
		{50, 0.05, time.Millisecond, 10 * time.Second},
		{5000, 0.05, time.Millisecond, 5 * time.Minute},
		{0, 0.05, 20 * time.Millisecond, 10 * time.Second},
	} {
		window, every := sampling(tc.demand, tc.budget)
		assert.Equal(t, tc.window, window, "window at %v CPU", tc.demand)
		assert.InDelta(t, tc.every.Seconds(), every.Seconds(), 1e-6, "every at %v CPU", tc.demand)
	}
}

func TestChangeString(t *testing.T) {
	for _, tc := range []struct {
		c    Change
		want string
	}{
		{Change{Kind: Exceeded, Demand: 0.5}, "probes would cost 0.5000 CPU, over the budget: throttling the costliest"},
		{Change{Kind: Calm, Demand: 0.01}, "probes would cost 0.0100 CPU: every probe is fully attached again"},
		{Change{Kind: Duty, Name: "uprobe:f", To: 0.042, GroupCost: 1}, "uprobe:f attached 4.2% of the time: it would cost 1.0000 CPU"},
		{Change{Kind: Duty, Name: "uprobe:f", To: 0, GroupCost: 50}, "uprobe:f detached (sampled now and then): it would cost 50.0000 CPU"},
		{Change{Kind: Duty, Name: "uprobe:f", From: 0.5, To: 1, GroupCost: 0.01}, "uprobe:f fully attached again: it would cost 0.0100 CPU"},
		{Change{Kind: Failed, Name: "uprobe:f", Err: errors.New("gone")}, "uprobe:f: gone"},
	} {
		assert.Equal(t, tc.want, tc.c.String())
	}
}

// A load that swings every second keeps moving the duty cycle, but the log
// gets a line for the overload, the halvings and at most one more every
// LogEvery, not one a second.
func TestSwingingLoadLogsSparingly(t *testing.T) {
	groups := single(1)
	w := newWorld(t, groups, []float64{5000}, []float64{200_000})
	c, err := New(w.settings(0.05, groups))
	require.NoError(t, err)
	var changes []worldChange
	for sec := 1; sec < 60; sec++ {
		changes = append(changes, setRate(time.Duration(sec)*time.Second, 0, []float64{400_000, 60_000, 180_000}[sec%3]))
	}
	w.run(c, 60*time.Second, changes...)
	duty := 0
	for _, l := range w.log {
		if l.Kind == Duty {
			duty++
		}
	}
	assert.LessOrEqual(t, duty, 2+60/int(LogEvery/time.Second), "duty lines in 60 s: %v", w.log)
	assert.Positive(t, duty)
}
