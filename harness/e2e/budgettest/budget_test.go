//go:build e2e

// Package budgettest holds the overhead budget's privileged test: the
// collector distribution built by make build (otelcol-uprobe) traces a
// program whose probed function would cost half a CPU, under
// overhead_budget: 0.05. make test-budget runs it with OTELCOL_UPROBE_BIN
// set; it needs root and two CPUs.
package budgettest

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/budgetrun"
	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

const (
	budget = 0.05
	probe  = "uprobe:hot_fn"
	// The CPUs: the collector and the test on one, the program on the other.
	collectorCPU, programCPU = 0, 1
)

// Metric names as the collector exports its own telemetry.
const (
	dutyCycle  = "otelcol_receiver_uprobe_probe_duty_cycle"
	throttled  = "otelcol_receiver_uprobe_budget_throttled"
	budgetCost = "otelcol_receiver_uprobe_budget_cost"
	demand     = "otelcol_receiver_uprobe_budget_demand"
	hitCost    = "otelcol_receiver_uprobe_calibrated_hit_cost"
	hits       = "uprobe.probe.hits"
	estimated  = "uprobe.probe.hits.estimated"
)

// A function called at a rate that would cost half a CPU if every call
// were probed (ten times the budget), like requests arriving: within 10 s
// the program runs at ≥ 90% of its unprobed speed measured in the same
// run, its calls are still counted and estimated close to what it made,
// the throttling shows in self-telemetry, and when the rate drops the
// probe is fully attached again.
func TestOverheadBudget(t *testing.T) {
	testutil.RequireRoot(t)
	bin := os.Getenv("OTELCOL_UPROBE_BIN")
	if bin == "" {
		testutil.SkipOrFail(t, "OTELCOL_UPROBE_BIN is not set: run make test-budget")
	}
	if runtime.NumCPU() < 2 {
		testutil.SkipOrFail(t, "the budget test needs two CPUs, one for the program and one for the collector; this machine has %d", runtime.NumCPU())
	}
	require.NoError(t, budgetrun.PinSelf(collectorCPU), "the test, and the collector it starts, on one CPU")
	dir := t.TempDir()
	path, err := budgetrun.BuildHot(testutil.RepoRoot(), dir)
	require.NoError(t, err)
	hot, err := budgetrun.StartHot(path, programCPU)
	require.NoError(t, err)
	defer func() { assert.NoError(t, hot.Close()) }()
	sink, err := budgetrun.NewSink()
	require.NoError(t, err)
	defer sink.Close()

	col, err := budgetrun.StartCollector(bin, dir, budgetrun.Config(path, budget, sink.Addr))
	require.NoError(t, err)
	defer func() {
		if t.Failed() {
			t.Logf("collector log:\n%s", col.Log())
		}
	}()
	p, ok := sink.Wait(hitCost, map[string]string{"site.class": "emulated"}, 10*time.Second, func(budgetrun.Point) bool { return true })
	require.True(t, ok, "the calibrated cost of an emulated hit is in self-telemetry")
	emulatedNs := p.Value
	t.Logf("calibration: %s", calibrationLine(col.Log()))
	require.Greater(t, emulatedNs, 10.0)

	// Half a CPU if every call were probed.
	rate := int64(math.Min(5e6, 0.5e9/emulatedNs))
	t.Logf("an emulated hit costs %.0f ns: %d calls a second would cost 0.5 CPU", emulatedNs, rate)

	// The unprobed speed at that rate, before and right after the
	// overload: the same calls, of an identical function never probed.
	require.NoError(t, hot.SetTwinRate(rate))
	before := median(budgetrun.PerSecond(hot.Run(4 * time.Second)))

	require.NoError(t, hot.SetRate(rate))
	overloaded := time.Now()
	perSecond := budgetrun.PerSecond(hot.Run(20 * time.Second))
	require.GreaterOrEqual(t, len(perSecond), 19)
	perSecond = perSecond[:19]

	// The rate of the probed function drops to none, then to a tenth of
	// the budget: the probe comes back fully attached.
	require.NoError(t, hot.SetTwinRate(rate))
	dropped := time.Now()
	after := median(budgetrun.PerSecond(hot.Run(4 * time.Second)))
	low := int64(0.005e9 / emulatedNs)
	require.NoError(t, hot.SetRate(low))
	_, back := sink.Wait(dutyCycle, map[string]string{"probe.name": probe}, 20*time.Second, func(p budgetrun.Point) bool {
		return p.At.After(dropped) && p.Value == 1
	})
	backAfter := time.Since(dropped)
	_, unthrottled := sink.Wait(throttled, nil, 5*time.Second, func(p budgetrun.Point) bool { return p.At.After(dropped) && p.Value == 0 })
	fullyAttached := time.Now()
	time.Sleep(3 * time.Second) // fully attached for a while: every call counted
	calls, err := hot.Stop()
	require.NoError(t, err)
	require.NoError(t, col.Stop(30*time.Second), "the collector stops cleanly")

	unprobed := (before + after) / 2
	t.Logf("unprobed speed: %.3g work/CPU-s before the overload, %.3g after (%.1f%% apart)", before, after, 100*math.Abs(after-before)/unprobed)
	var lines []string
	for s, v := range perSecond {
		lines = append(lines, fmt.Sprintf("%d:%.1f%%", s+1, 100*v/unprobed))
	}
	t.Logf("speed per second after the overload, as a share of the unprobed speed: %s", strings.Join(lines, " "))
	late := perSecond[10:]
	t.Logf("from 10 s after the overload on: %.1f%% of the unprobed speed", 100*mean(late)/unprobed)
	assert.GreaterOrEqual(t, mean(late)/unprobed, 0.90, "from 10 s after the overload on, the program runs at 90%% of its unprobed speed or more")
	for s, v := range late {
		assert.GreaterOrEqual(t, v/unprobed, 0.80, "second %d after the overload", s+11)
	}

	// Self-telemetry showed the throttling.
	minDuty := 1.0
	var maxThrottled float64
	for _, p := range sink.Points(dutyCycle, map[string]string{"probe.name": probe}) {
		if p.At.After(overloaded.Add(10*time.Second)) && p.At.Before(dropped) {
			minDuty = math.Min(minDuty, p.Value)
		}
	}
	for _, p := range sink.Points(throttled, nil) {
		if p.At.After(overloaded.Add(10*time.Second)) && p.At.Before(dropped) {
			maxThrottled = math.Max(maxThrottled, p.Value)
		}
	}
	assert.Less(t, minDuty, 0.2, "the probe was duty-cycled")
	assert.Greater(t, minDuty, 0.0, "and not detached")
	assert.Equal(t, 1.0, maxThrottled, "one throttled group")
	lastCost, ok := latestBefore(sink, budgetCost, dropped)
	require.True(t, ok)
	lastDemand, ok := latestBefore(sink, demand, dropped)
	require.True(t, ok)
	assert.LessOrEqual(t, lastCost, budget, "the estimated cost is within the budget")
	assert.InDelta(t, 0.5, lastDemand, 0.25, "fully attached, the probe would cost about half a CPU")
	t.Logf("while throttled: duty cycle %.4f, estimated cost %.4f CPU of a demand of %.3f CPU", minDuty, lastCost, lastDemand)

	// Every change is logged once, not every second.
	changes := 0
	for _, l := range strings.Split(col.Log(), "\n") {
		if strings.Contains(l, "Overhead budget") {
			changes++
		}
	}
	t.Logf("%d budget changes logged", changes)
	assert.GreaterOrEqual(t, changes, 3, "exceeded, duty-cycled, back")
	assert.LessOrEqual(t, changes, 15, "one line per change over about 40 s, not one per second")

	// Back up when the rate dropped.
	assert.True(t, back, "the probe is fully attached again after the rate dropped")
	assert.True(t, unthrottled, "nothing is throttled after the rate dropped")
	t.Logf("fully attached again %v after the rate dropped", backAfter.Round(100*time.Millisecond))
	for _, p := range sink.Points(dutyCycle, map[string]string{"probe.name": probe}) {
		if p.At.After(fullyAttached) {
			assert.Equal(t, 1.0, p.Value, "the low rate keeps the probe fully attached")
		}
	}

	// The calls were still counted, and estimated close to what the
	// program made.
	counted, ok := sink.Latest(hits, map[string]string{"probe.name": probe})
	require.True(t, ok)
	est, ok := sink.Latest(estimated, map[string]string{"probe.name": probe})
	require.True(t, ok)
	t.Logf("the program made %d calls; %d were counted, %d estimated (%.2f%% off)", calls, int64(counted.Value), int64(est.Value), 100*(est.Value-float64(calls))/float64(calls))
	assert.Greater(t, counted.Value, 0.0)
	assert.Less(t, counted.Value, 0.5*float64(calls), "most calls were made while the probe was detached")
	assert.InDelta(t, float64(calls), est.Value, 0.1*float64(calls), "counted + estimated is within 10% of the calls made")
}

func latestBefore(s *budgetrun.Sink, name string, before time.Time) (float64, bool) {
	v, ok := 0.0, false
	for _, p := range s.Points(name, nil) {
		if p.At.Before(before) {
			v, ok = p.Value, true
		}
	}
	return v, ok
}

// calibrationLine returns the collector's log line with the calibration.
func calibrationLine(log string) string {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "Probe hit costs calibrated") {
			return l
		}
	}
	return ""
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}

func mean(v []float64) float64 {
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	return sum / float64(len(v))
}
