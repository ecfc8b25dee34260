package receiver

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/receiver/internal/metadata"
)

var update = flag.Bool("update", false, "rewrite golden files")

func metricsPlan() *plan.Plan {
	return &plan.Plan{
		Targets: []plan.PlannedTarget{
			{Path: "/usr/bin/app", ServiceName: "app", Executable: true},
			{Path: "/usr/lib/libx.so", ServiceName: "libx.so"},
		},
		Probes: []plan.Probe{
			{Target: 0, Ref: "usdt:app:start", Kind: config.KindUSDT, Locations: 2},
			{Target: 0, Ref: "usdt:app:done", Kind: config.KindUSDT, Locations: 1},
			{Target: 0, Ref: "uprobe:tick", Kind: config.KindUprobe, Locations: 1},
			{Target: 1, Ref: "uprobe:lib", Kind: config.KindUprobe, Locations: 1},
			{Target: 1, Ref: "uretprobe:lib", Kind: config.KindUretprobe, Locations: 1},
		},
		Spans: []plan.SpanDef{
			{Target: 0, Name: "request", Entry: 0, Exit: 1},
			{Target: 1, Name: "lib", Entry: 3, Exit: 4},
		},
	}
}

func bucketsWith(counts map[int]uint64) []uint64 {
	b := make([]uint64, 64)
	for i, c := range counts {
		b[i] = c
	}
	return b
}

func TestMetricsGolden(t *testing.T) {
	plan := metricsPlan()
	start := pcommon.Timestamp(1_700_000_000_000_000_000)
	now := start + 10_000_000_000
	e := newMetricsEmitter(metadata.DefaultMetricsBuilderConfig(), receivertest.NewNopSettings(metadata.Type), plan, "host-1", start)
	st := event.Stats{
		Probes: []event.ProbeCounts{{Hits: 20}, {Hits: 19, Lost: 2}, {Hits: 7}, {Hits: 3}, {Hits: 3}},
		Spans: []event.SpanCounts{
			{Count: 19, SumNs: 19 * 3000, Lost: 2, Buckets: bucketsWith(map[int]uint64{11: 15, 12: 4})},
			{Count: 3, SumNs: 300, Buckets: bucketsWith(map[int]uint64{6: 3})},
		},
	}
	md := e.emit(st, now)

	require.Equal(t, 2, md.ResourceMetrics().Len(), "one resource per target")
	app := md.ResourceMetrics().At(0)
	assert.Equal(t, map[string]any{"service.name": "app", "process.executable.path": "/usr/bin/app", "host.name": "host-1"}, app.Resource().Attributes().AsRaw())
	assert.Equal(t, map[string]int64{"usdt:app:start": 20, "usdt:app:done": 19, "uprobe:tick": 7, "uprobe:lib": 3, "uretprobe:lib": 3}, sumPoints(md, "uprobe.probe.hits"))
	assert.Equal(t, map[string]int64{"usdt:app:done": 2, "uretprobe:lib": 0}, sumPoints(md, "uprobe.events.lost"), "lost only for exit probes")
	d := durations(md)
	req := d["request"]
	assert.Equal(t, int32(0), req.Scale())
	assert.Equal(t, int32(11), req.Positive().Offset())
	assert.Equal(t, []uint64{15, 4}, req.Positive().BucketCounts().AsRaw())
	assert.Equal(t, uint64(19), req.Count())
	assert.Equal(t, float64(19*3000), req.Sum())
	assert.Equal(t, start, req.StartTimestamp())
	assert.Equal(t, now, req.Timestamp())

	got, err := (&pmetric.JSONMarshaler{}).MarshalMetrics(md)
	require.NoError(t, err)
	var pretty bytes.Buffer
	require.NoError(t, json.Indent(&pretty, got, "", "  "))
	golden := filepath.Join("testdata", "metrics.golden.json")
	if *update {
		require.NoError(t, os.WriteFile(golden, pretty.Bytes(), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, string(want), pretty.String())
}

func TestMetricsWithSumsDisabled(t *testing.T) {
	cfg := metadata.DefaultMetricsBuilderConfig()
	cfg.Metrics.UprobeProbeHits.Enabled = false
	cfg.Metrics.UprobeEventsLost.Enabled = false
	e := newMetricsEmitter(cfg, receivertest.NewNopSettings(metadata.Type), metricsPlan(), "", 1)
	st := event.Stats{
		Probes: make([]event.ProbeCounts, 5),
		Spans:  []event.SpanCounts{{Buckets: make([]uint64, 64)}, {Count: 1, SumNs: 5, Buckets: bucketsWith(map[int]uint64{2: 1})}},
	}
	md := e.emit(st, 2)
	require.Equal(t, 2, md.ResourceMetrics().Len(), "the histogram still gets its resource")
	assert.Equal(t, 2, md.MetricCount(), "one histogram metric per target, nothing else")
	d := durations(md)
	assert.Equal(t, uint64(0), d["request"].Count())
	assert.Equal(t, 0, d["request"].Positive().BucketCounts().Len(), "no buckets without spans")
	assert.Equal(t, uint64(1), d["lib"].Count())
}

// A counter's value histogram: kernel bucket 0 (the value 1) is bucket -1
// of the exponential histogram, kernel bucket i is bucket i-1.
func TestValueHistogramPoints(t *testing.T) {
	pl := metricsPlan()
	pl.Probes = append(pl.Probes, plan.Probe{Target: 1, Ref: "uretprobe:lib if retval:s64 != 0", Kind: config.KindUretprobe, Filtered: true})
	pl.Histograms = []plan.Histogram{{Probe: len(pl.Probes) - 1, Expr: "retval:s64"}}
	e := newMetricsEmitter(metadata.DefaultMetricsBuilderConfig(), receivertest.NewNopSettings(metadata.Type), pl, "", 1)
	st := event.Stats{
		Probes: make([]event.ProbeCounts, len(pl.Probes)),
		Spans:  make([]event.SpanCounts, len(pl.Spans)),
		Values: []event.ValueCounts{{
			Count: 9, Zero: 2, SumLo: 1 + 1 + 4 + 1000 - 1 - 2 - 3,
			Positive: bucketsWith(map[int]uint64{0: 2, 2: 1, 10: 1}), // 1, 1, 4, 1000
			Negative: bucketsWith(map[int]uint64{0: 1, 1: 1, 2: 1}),  // -1, -2, -3
		}},
	}
	for i := range st.Spans {
		st.Spans[i].Buckets = bucketsWith(nil)
	}
	dp, ok := valuePoints(e.emit(st, 2))["uretprobe:lib if retval:s64 != 0"]
	require.True(t, ok)
	assert.Equal(t, uint64(9), dp.Count())
	assert.Equal(t, uint64(2), dp.ZeroCount())
	assert.Equal(t, float64(1000), dp.Sum())
	assert.Equal(t, int32(-1), dp.Positive().Offset(), "1 is in (0.5, 1]")
	assert.Equal(t, []uint64{2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1}, dp.Positive().BucketCounts().AsRaw(), "4 in (2, 4], 1000 in (512, 1024]")
	assert.Equal(t, int32(-1), dp.Negative().Offset())
	assert.Equal(t, []uint64{1, 1, 1}, dp.Negative().BucketCounts().AsRaw())
	v, _ := dp.Attributes().Get("probe.value")
	assert.Equal(t, "retval:s64", v.Str())

	// A 128-bit sum: 2^64 - 1 three times and -2^63 twice.
	var big event.ValueCounts
	for range 3 {
		big.AddSum(1<<64-1, 0)
	}
	for range 2 {
		big.AddSum(1<<63, -1)
	}
	assert.InDelta(t, 3*(1<<64-1.0)-2*(1<<63), big.Sum(), 1e5)
}

// With a budget, every probe also gets its estimated hits: counted plus
// what the budget estimated for the time it was detached, rounded.
func TestMetricsEstimatedHits(t *testing.T) {
	plan := metricsPlan()
	e := newMetricsEmitter(metadata.DefaultMetricsBuilderConfig(), receivertest.NewNopSettings(metadata.Type), plan, "", 1)
	st := event.Stats{
		Probes: []event.ProbeCounts{{Hits: 20}, {Hits: 19}, {Hits: 7}, {Hits: 3}, {Hits: 3}},
		Spans:  []event.SpanCounts{{Buckets: make([]uint64, 64)}, {Buckets: make([]uint64, 64)}},
	}
	assert.Empty(t, sumPoints(e.emit(st, 2), "uprobe.probe.hits.estimated"), "no estimate without a budget")
	e.missed = func(p int) float64 { return []float64{1000.4, 999.6, 0, 0, 0}[p] }
	md := e.emit(st, 3)
	assert.Equal(t, map[string]int64{"usdt:app:start": 1020, "usdt:app:done": 1019, "uprobe:tick": 7, "uprobe:lib": 3, "uretprobe:lib": 3},
		sumPoints(md, "uprobe.probe.hits.estimated"))
	assert.Equal(t, map[string]int64{"usdt:app:start": 20, "usdt:app:done": 19, "uprobe:tick": 7, "uprobe:lib": 3, "uretprobe:lib": 3},
		sumPoints(md, "uprobe.probe.hits"), "the counts stay counts")
}

func TestConfigBudgetBounds(t *testing.T) {
	for _, tc := range []struct {
		budget float64
		ok     bool
	}{{0, true}, {0.02, true}, {0.001, true}, {1024, true}, {0.0009, false}, {1e-9, false}, {-0.01, false}, {1025, false}, {math.NaN(), false}, {math.Inf(1), false}} {
		cfg := createDefaultConfig()
		cfg.Targets = []config.Target{{Path: "/bin/true", Counters: config.CountersOf("uprobe:main")}}
		cfg.OverheadBudget = tc.budget
		err := cfg.Validate()
		if tc.ok {
			assert.NoError(t, err, "%v", tc.budget)
		} else {
			assert.ErrorContains(t, err, "overhead_budget", "%v", tc.budget)
		}
	}
}
