package receiver

import (
	"context"
	"fmt"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/harness/testutil/testconfig"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/insn"
	"github.com/otel-uprobe/uprobereceiver/internal/tracer"
	"github.com/otel-uprobe/uprobereceiver/receiver/internal/metadatatest"
)

// demoTargets traces every kind of probe the demo has.
var demoTargets = testconfig.DemoTargets

type started struct {
	rcv       *uprobeReceiver
	traces    *consumertest.TracesSink
	metrics   *consumertest.MetricsSink
	telemetry *componenttest.Telemetry
}

func startReceiver(t *testing.T, targets []config.Target) started {
	t.Helper()
	cfg := createDefaultConfig()
	cfg.Targets = targets
	return startReceiverConfig(t, cfg)
}

// startReceiverConfig starts a receiver with both pipelines on cfg.
func startReceiverConfig(t *testing.T, cfg *Config) started {
	t.Helper()
	require.NoError(t, cfg.Validate())
	s := started{traces: new(consumertest.TracesSink), metrics: new(consumertest.MetricsSink), telemetry: componenttest.NewTelemetry()}
	t.Cleanup(func() { require.NoError(t, s.telemetry.Shutdown(context.Background())) })
	set := metadatatest.NewSettings(s.telemetry)
	f := NewFactory()
	tr, err := f.CreateTraces(context.Background(), set, cfg, s.traces)
	require.NoError(t, err)
	mr, err := f.CreateMetrics(context.Background(), set, cfg, s.metrics)
	require.NoError(t, err)
	require.Same(t, tr, mr, "traces and metrics share one instance")
	require.NoError(t, tr.Start(context.Background(), componenttest.NewNopHost()))
	require.NoError(t, mr.Start(context.Background(), componenttest.NewNopHost()))
	s.rcv = tr.(*uprobeReceiver)
	t.Cleanup(func() { _ = s.rcv.Shutdown(context.Background()) })
	return s
}

// flatSpan is a span with its resource, for assertions.
type flatSpan struct {
	ptrace.Span
	resource pcommon.Map
}

func allSpans(sink *consumertest.TracesSink) []flatSpan {
	var out []flatSpan
	for _, td := range sink.AllTraces() {
		for i := 0; i < td.ResourceSpans().Len(); i++ {
			rs := td.ResourceSpans().At(i)
			for j := 0; j < rs.ScopeSpans().Len(); j++ {
				ss := rs.ScopeSpans().At(j).Spans()
				for k := 0; k < ss.Len(); k++ {
					out = append(out, flatSpan{ss.At(k), rs.Resource().Attributes()})
				}
			}
		}
	}
	return out
}

func attrInt(t *testing.T, m pcommon.Map, key string) int64 {
	t.Helper()
	v, ok := m.Get(key)
	require.True(t, ok, "attribute %q missing in %v", key, m.AsRaw())
	require.Equal(t, pcommon.ValueTypeInt, v.Type(), key)
	return v.Int()
}

func attrStr(t *testing.T, m pcommon.Map, key string) string {
	t.Helper()
	v, ok := m.Get(key)
	require.True(t, ok, "attribute %q missing in %v", key, m.AsRaw())
	require.Equal(t, pcommon.ValueTypeStr, v.Type(), key)
	return v.Str()
}

// sumPoints returns the value of each data point of a sum metric, by probe.name.
func sumPoints(md pmetric.Metrics, name string) map[string]int64 {
	out := map[string]int64{}
	for i := 0; i < md.ResourceMetrics().Len(); i++ {
		sms := md.ResourceMetrics().At(i).ScopeMetrics()
		for j := 0; j < sms.Len(); j++ {
			ms := sms.At(j).Metrics()
			for k := 0; k < ms.Len(); k++ {
				m := ms.At(k)
				if m.Name() != name {
					continue
				}
				for p := 0; p < m.Sum().DataPoints().Len(); p++ {
					dp := m.Sum().DataPoints().At(p)
					v, _ := dp.Attributes().Get("probe.name")
					out[v.Str()] = dp.IntValue()
				}
			}
		}
	}
	return out
}

func durations(md pmetric.Metrics) map[string]pmetric.ExponentialHistogramDataPoint {
	return histogramPoints(md, spanDurationMetric, "span.name")
}

// histogramPoints returns the points of an exponential histogram metric by
// the value of attribute key.
func histogramPoints(md pmetric.Metrics, name, key string) map[string]pmetric.ExponentialHistogramDataPoint {
	out := map[string]pmetric.ExponentialHistogramDataPoint{}
	for i := 0; i < md.ResourceMetrics().Len(); i++ {
		sms := md.ResourceMetrics().At(i).ScopeMetrics()
		for j := 0; j < sms.Len(); j++ {
			ms := sms.At(j).Metrics()
			for k := 0; k < ms.Len(); k++ {
				m := ms.At(k)
				if m.Name() != name {
					continue
				}
				for p := 0; p < m.ExponentialHistogram().DataPoints().Len(); p++ {
					dp := m.ExponentialHistogram().DataPoints().At(p)
					v, _ := dp.Attributes().Get(key)
					out[v.Str()] = dp
				}
			}
		}
	}
	return out
}

func TestEndToEndDemo(t *testing.T) {
	testutil.RequireRoot(t)
	for _, opt := range []string{"-O2", "-O0"} {
		t.Run(opt, func(t *testing.T) { testEndToEnd(t, opt) })
	}
}

func testEndToEnd(t *testing.T, opt string) {
	b := testutil.BuildDemo(t, opt)
	demo := testutil.StartDemo(t, b.Program)
	require.Equal(t, [3]int{0, 0, 0}, demo.Semaphores(), "semaphores before Start")

	s := startReceiver(t, demoTargets(b))
	require.Equal(t, [3]int{1, 1, 2}, demo.Semaphores(), "semaphores while attached: one per attached location (tick has two)")

	const n = 10
	demo.Run(n)
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	require.Equal(t, [3]int{0, 0, 0}, demo.Semaphores(), "semaphores after Shutdown")

	spans := allSpans(s.traces)
	accepted, err := s.telemetry.GetMetric("otelcol_receiver_accepted_spans")
	require.NoError(t, err)
	assert.Equal(t, int64(len(spans)), accepted.Data.(metricdata.Sum[int64]).DataPoints[0].Value, "obsreport counts the accepted spans")
	byName := map[string][]flatSpan{}
	for _, sp := range spans {
		byName[sp.Name()] = append(byName[sp.Name()], sp)
	}
	counts := map[string]int{}
	for k, v := range byName {
		counts[k] = len(v)
	}
	require.Equal(t, map[string]int{"query": n, "work": n, "recurse": 4 * n, "outer": n, "inner": 2 * n, "lib_call": n}, counts)

	byID := map[pcommon.SpanID]flatSpan{}
	for _, sp := range spans {
		byID[sp.SpanID()] = sp
		assert.Greater(t, sp.EndTimestamp(), sp.StartTimestamp(), "%s has a duration", sp.Name())
		assert.Equal(t, int64(demo.PID), attrInt(t, sp.resource, "process.pid"))
		assert.Equal(t, sp.Span.Attributes().AsRaw()["thread.id"], int64(demo.PID), "single-threaded demo")
	}
	parentName := func(sp flatSpan) string {
		if sp.ParentSpanID().IsEmpty() {
			return ""
		}
		p, ok := byID[sp.ParentSpanID()]
		require.True(t, ok, "parent of %s is among the spans", sp.Name())
		require.Equal(t, p.TraceID(), sp.TraceID(), "%s shares its parent's trace", sp.Name())
		require.LessOrEqual(t, p.StartTimestamp(), sp.StartTimestamp())
		require.GreaterOrEqual(t, p.EndTimestamp(), sp.EndTimestamp())
		return p.Name()
	}

	queries := byName["query"]
	sort.Slice(queries, func(i, j int) bool { return queries[i].StartTimestamp() < queries[j].StartTimestamp() })
	traces := map[pcommon.TraceID]bool{}
	for i, q := range queries {
		a := q.Attributes()
		assert.Equal(t, fmt.Sprintf("SELECT %d FROM demo", i), attrStr(t, a, "query"))
		assert.Equal(t, int64(1000+i), attrInt(t, a, "id"))
		assert.Equal(t, int64(-i), attrInt(t, a, "small"), "2-byte signed argument")
		assert.Equal(t, int64(5), attrInt(t, a, "five"), "constant argument")
		assert.Equal(t, int64((1000+i)*10), attrInt(t, a, "done.id"), "exit attribute")
		assert.Equal(t, int64(i+1), attrInt(t, a, "iterations"), "a global read through %%rip at -O2")
		assert.Equal(t, "", parentName(q), "query is a root")
		assert.Equal(t, "demo", attrStr(t, q.resource, "service.name"))
		assert.Equal(t, b.Program, attrStr(t, q.resource, "process.executable.path"))
		traces[q.TraceID()] = true
	}
	assert.Len(t, traces, n, "every query starts its own trace")

	for _, w := range byName["work"] {
		nArg := attrInt(t, w.Attributes(), "n")
		assert.Equal(t, fmt.Sprintf("SELECT %d FROM demo", nArg), attrStr(t, w.Attributes(), "label"))
		assert.Equal(t, 2*nArg, attrInt(t, w.Attributes(), "ret"))
		assert.Equal(t, "query", parentName(w))
	}
	depths := map[int64]int{}
	for _, r := range byName["recurse"] {
		d := attrInt(t, r.Attributes(), "depth")
		depths[d]++
		want := "recurse"
		if d == 3 {
			want = "query"
		}
		assert.Equal(t, want, parentName(r), "recurse(%d)", d)
	}
	assert.Equal(t, map[int64]int{3: n, 2: n, 1: n, 0: n}, depths)
	for _, sp := range byName["outer"] {
		assert.Equal(t, "query", parentName(sp))
	}
	for _, sp := range byName["inner"] {
		assert.Equal(t, "outer", parentName(sp))
	}
	for _, sp := range byName["lib_call"] {
		assert.Equal(t, "query", parentName(sp), "a library span nests under the program's span on the same thread")
		assert.Equal(t, "libdemo.so", attrStr(t, sp.resource, "service.name"))
		assert.Equal(t, b.Program, attrStr(t, sp.resource, "process.executable.path"), "a library's spans name the executable")
	}

	require.NotEmpty(t, s.metrics.AllMetrics(), "a run shorter than the interval still reports its counts")
	last := s.metrics.AllMetrics()[len(s.metrics.AllMetrics())-1]
	assert.Equal(t, map[string]int64{
		"usdt:demo:query__start": n, "usdt:demo:query__done": n,
		"uprobe:work": n, "uretprobe:work": n,
		"uprobe:recurse": 4 * n, "uretprobe:recurse": 4 * n,
		"uprobe:outer": n, "uretprobe:outer": n,
		"uprobe:inner": 2 * n, "uretprobe:inner": 2 * n,
		"usdt:demo:tick":  2 * n,
		"uprobe:lib_call": n, "uretprobe:lib_call": n, "usdt:demolib:call": n,
	}, sumPoints(last, "uprobe.probe.hits"))
	lost := sumPoints(last, "uprobe.events.lost")
	for _, v := range lost {
		assert.Zero(t, v)
	}
	assert.Len(t, lost, 6, "one lost counter per exit probe")
	d := durations(last)
	require.Len(t, d, 6)
	for name, want := range map[string]uint64{"query": n, "work": n, "recurse": 4 * n, "outer": n, "inner": 2 * n, "lib_call": n} {
		dp := d[name]
		assert.Equal(t, want, dp.Count(), name)
		var buckets uint64
		for _, c := range dp.Positive().BucketCounts().AsRaw() {
			buckets += c
		}
		assert.Equal(t, want, buckets, "%s: buckets add up to the count", name)
		assert.Greater(t, dp.Sum(), 0.0)
	}
}

func TestProcessStartedAfterStart(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	s := startReceiver(t, demoTargets(b))
	demo := testutil.StartDemo(t, b.Program)
	require.Equal(t, [3]int{1, 1, 2}, demo.Semaphores(), "semaphores raised in a process started later")
	demo.Run(3)
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	count := 0
	for _, sp := range allSpans(s.traces) {
		assert.Equal(t, int64(demo.PID), attrInt(t, sp.resource, "process.pid"))
		count++
	}
	assert.Equal(t, 3*10, count, "every span of the first call on")
	require.Equal(t, [3]int{0, 0, 0}, demo.Semaphores(), "semaphores after Shutdown")
}

// Every location is counted with the class of its site, as the running
// kernel handles it: a USDT site's nop is emulated (simulated in the
// breakpoint handler) on x86-64 and on arm64 from Linux 6.13, and stepped
// out of line by older arm64 kernels, such as the arm64 VM's 6.1.
func TestSiteClassesReported(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	s := startReceiver(t, []config.Target{{Path: b.Program, Counters: config.CountersOf("usdt:demo:tick")}})
	class := insn.Emulated
	if tracer.ARM64StepsNop() {
		class = insn.SingleStepped
	}
	metadatatest.AssertEqualReceiverUprobeLocations(t, s.telemetry, []metricdata.DataPoint[int64]{
		{Value: 2, Attributes: attribute.NewSet(attribute.String("probe.name", "usdt:demo:tick"), attribute.String("site.class", class.String()))},
	}, metricdatatest.IgnoreTimestamp())
	require.NoError(t, s.rcv.Shutdown(context.Background()))
}

// explainFailure logs, when t has failed by the end of the test, what the
// receiver of s says of itself: its self-telemetry, the chooser's count of
// processes whose mask could not be set, the process records the engine
// lost, and the probe hits of each metrics snapshot it emitted. A failure
// on a CI machine then says where the counts went.
func explainFailure(t *testing.T, s started) {
	t.Helper()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var rm metricdata.ResourceMetrics
		if err := s.telemetry.Reader.Collect(context.Background(), &rm); err != nil {
			t.Logf("self-telemetry: %v", err)
		}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				switch d := m.Data.(type) {
				case metricdata.Sum[int64]:
					for _, dp := range d.DataPoints {
						t.Logf("self-telemetry %s{%s} = %d", m.Name, dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Value)
					}
				case metricdata.Gauge[int64]:
					for _, dp := range d.DataPoints {
						t.Logf("self-telemetry %s{%s} = %d", m.Name, dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Value)
					}
				}
			}
		}
		if s.rcv.chooser != nil {
			t.Logf("chooser: %d processes undecided", s.rcv.chooser.undecided)
		}
		for i, md := range s.metrics.AllMetrics() {
			var total int64
			for _, n := range sumPoints(md, "uprobe.probe.hits") {
				total += n
			}
			t.Logf("metrics snapshot %d of %d: %d resources, %d probe hits", i+1, len(s.metrics.AllMetrics()), md.ResourceMetrics().Len(), total)
		}
	})
}
