package receiver

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/receiver/internal/metadatatest"
)

// startedWithBudget creates and starts the shared instance of targets with
// an overhead budget, collecting metrics every 200 ms.
func startedWithBudget(t *testing.T, targets []config.Target, budget float64) started {
	t.Helper()
	cfg := createDefaultConfig()
	cfg.Targets = targets
	cfg.OverheadBudget = budget
	cfg.CollectionInterval = 200 * time.Millisecond
	require.NoError(t, cfg.Validate())
	s := started{traces: new(consumertest.TracesSink), metrics: new(consumertest.MetricsSink), telemetry: componenttest.NewTelemetry()}
	t.Cleanup(func() { require.NoError(t, s.telemetry.Shutdown(context.Background())) })
	set := metadatatest.NewSettings(s.telemetry)
	tr, err := NewFactory().CreateTraces(context.Background(), set, cfg, s.traces)
	require.NoError(t, err)
	_, err = NewFactory().CreateMetrics(context.Background(), set, cfg, s.metrics)
	require.NoError(t, err)
	s.rcv = tr.(*uprobeReceiver)
	t.Cleanup(func() { _ = s.rcv.Shutdown(context.Background()) })
	require.NoError(t, s.rcv.Start(context.Background(), componenttest.NewNopHost()))
	return s
}

// gauge returns a float gauge's points of self-telemetry by the value of
// attribute key ("" for a gauge without attributes).
func gauge(t *testing.T, tel *componenttest.Telemetry, name, key string) map[string]float64 {
	t.Helper()
	m, err := tel.GetMetric(name)
	require.NoError(t, err)
	out := map[string]float64{}
	switch d := m.Data.(type) {
	case metricdata.Gauge[float64]:
		for _, dp := range d.DataPoints {
			v, _ := dp.Attributes.Value(attribute.Key(key))
			out[v.AsString()] = dp.Value
		}
	case metricdata.Gauge[int64]:
		for _, dp := range d.DataPoints {
			v, _ := dp.Attributes.Value(attribute.Key(key))
			out[v.AsString()] = float64(dp.Value)
		}
	default:
		t.Fatalf("%s is a %T", name, m.Data)
	}
	return out
}

// A budget above what the probes cost changes nothing: every probe stays
// attached, spans are whole, and the estimated hits are the counted ones.
// Self-telemetry has the calibration and the budget's state.
func TestBudgetAboveDemandChangesNothing(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	demo := testutil.StartDemo(t, b.Program)
	s := startedWithBudget(t, []config.Target{{
		Path:     b.Program,
		Counters: config.CountersOf("uprobe:inner"),
		Spans:    []config.Span{{Name: "query", Entry: "usdt:demo:query__start", Exit: "usdt:demo:query__done"}},
	}}, 1)
	const n = 50
	demo.Run(n)
	time.Sleep(1500 * time.Millisecond) // a controller period: nothing may change in it
	assert.Equal(t, [3]int{1, 1, 0}, demo.Semaphores(), "still attached")

	assert.Equal(t, map[string]float64{"": 1}, gauge(t, s.telemetry, "otelcol_receiver_uprobe_budget", ""))
	assert.Equal(t, map[string]float64{"": 0}, gauge(t, s.telemetry, "otelcol_receiver_uprobe_budget_throttled", ""))
	assert.Equal(t, map[string]float64{"uprobe:inner": 1, "usdt:demo:query__start": 1, "usdt:demo:query__done": 1},
		gauge(t, s.telemetry, "otelcol_receiver_uprobe_probe_duty_cycle", "probe.name"))
	costs := gauge(t, s.telemetry, "otelcol_receiver_uprobe_calibrated_hit_cost", "site.class")
	require.Len(t, costs, 3)
	for class, ns := range costs {
		assert.Greater(t, ns, 10.0, class)
	}
	assert.Greater(t, costs["single-stepped"], costs["emulated"])
	ret := gauge(t, s.telemetry, "otelcol_receiver_uprobe_calibrated_return_cost", "")
	assert.Greater(t, ret[""], 10.0)
	demand := gauge(t, s.telemetry, "otelcol_receiver_uprobe_budget_demand", "")[""]
	assert.Less(t, demand, 0.01, "fifty iterations cost next to nothing")

	require.NoError(t, s.rcv.Shutdown(context.Background()))
	assert.Equal(t, n, s.traces.SpanCount(), "spans are whole")
	last := lastMetrics(t, s)
	hits := sumPoints(last, "uprobe.probe.hits")
	assert.Equal(t, map[string]int64{"uprobe:inner": 2 * n, "usdt:demo:query__start": n, "usdt:demo:query__done": n}, hits)
	assert.Equal(t, hits, sumPoints(last, "uprobe.probe.hits.estimated"), "never detached: the estimate is the count")
}

// A budget far below what a span's probes cost throttles them as one group
// within a couple of periods: both are detached (their semaphores fall),
// the counter next to them is not, and their estimated hits grow while
// they are detached.
func TestBudgetDetachesASpanGroup(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	demo := testutil.StartDemo(t, b.Program)
	s := startedWithBudget(t, []config.Target{{
		Path:     b.Program,
		Counters: config.CountersOf("usdt:demo:tick"),
		Spans:    []config.Span{{Name: "query", Entry: "usdt:demo:query__start", Exit: "usdt:demo:query__done"}},
	}}, minOverheadBudget)
	// Both groups cost far more than the budget; the costliest (the span's
	// pair, two probes per iteration) is cut first, down to detached.
	deadline := time.Now().Add(10 * time.Second)
	var duty map[string]float64
	for time.Now().Before(deadline) {
		demo.Run(200)
		duty = gauge(t, s.telemetry, "otelcol_receiver_uprobe_probe_duty_cycle", "probe.name")
		if duty["usdt:demo:query__start"] == 0 && duty["usdt:demo:tick"] == 0 {
			break
		}
	}
	require.Equal(t, map[string]float64{"usdt:demo:query__start": 0, "usdt:demo:query__done": 0, "usdt:demo:tick": 0}, duty,
		"at the smallest budget everything is detached")
	assert.Equal(t, 2.0, gauge(t, s.telemetry, "otelcol_receiver_uprobe_budget_throttled", "")[""])
	// The detach runs in the background; the kernel lowers the semaphores
	// when it is done.
	require.Eventually(t, func() bool { return demo.Semaphores() == [3]int{0, 0, 0} }, 5*time.Second, 50*time.Millisecond,
		"detached: the kernel lowered every semaphore")

	counted, err := s.rcv.tracer.ProbeHits(nil, nil)
	require.NoError(t, err)
	demo.Run(500)
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	last := lastMetrics(t, s)
	hits, est := sumPoints(last, "uprobe.probe.hits"), sumPoints(last, "uprobe.probe.hits.estimated")
	for i, p := range s.rcv.plan.Probes {
		assert.Equal(t, int64(counted[i]), hits[p.Ref], "%s: nothing counted while detached", p.Ref)
		assert.Greater(t, est[p.Ref], hits[p.Ref], "%s: hits estimated for the time detached", p.Ref)
	}
	assert.InEpsilon(t, est["usdt:demo:query__start"], est["usdt:demo:query__done"], 0.05, "entry and exit estimated alike")
}

func lastMetrics(t *testing.T, s started) pmetric.Metrics {
	t.Helper()
	md := s.metrics.AllMetrics()
	require.NotEmpty(t, md)
	return md[len(md)-1]
}
