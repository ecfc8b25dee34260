//go:build linux && (amd64 || arm64)

package receiver

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
)

// TestSpanMetricSeries: a span metric's points are its spans' attribute
// sets, across the definitions that share its name, bounded by
// maxSpanMetricSeries with one overflow point beyond; durations in seconds
// in exponential buckets of scale 3.
func TestSpanMetricSeries(t *testing.T) {
	metric := &config.SpanMetric{Name: "dns.lookup.duration", Attributes: []string{"dns.question.name", "error.type"}}
	p := &plan.Plan{
		Targets: []plan.PlannedTarget{{ServiceName: "libc"}},
		Spans:   []plan.SpanDef{{Name: "getaddrinfo", Metric: metric}, {Name: "gethostbyname", Metric: &config.SpanMetric{Name: metric.Name, Attributes: metric.Attributes[:1]}}, {Name: "other"}},
	}
	m := newSpanMetrics(p)
	require.NotNil(t, m)
	span := func(name string, seconds float64, attrs map[string]any) ptrace.Span {
		sp := ptrace.NewSpan()
		sp.SetStartTimestamp(1_000_000_000)
		sp.SetEndTimestamp(pcommon.Timestamp(1_000_000_000 + seconds*1e9))
		require.NoError(t, sp.Attributes().FromRaw(attrs))
		return sp
	}
	m.observe(0, 0, event.Image{}, span("getaddrinfo", 0.001, map[string]any{"dns.question.name": "a", "thread.id": 1}))
	m.observe(1, 0, event.Image{}, span("gethostbyname", 0.002, map[string]any{"dns.question.name": "a"}))
	m.observe(0, 0, event.Image{}, span("getaddrinfo", 0.5, map[string]any{"dns.question.name": "a", "error.type": "EAI_NONAME"}))
	for i := range maxSpanMetricSeries + 5 {
		m.observe(0, 0, event.Image{}, span("getaddrinfo", 1, map[string]any{"dns.question.name": fmt.Sprintf("n%d", i)}))
	}
	e := &metricsEmitter{plan: p, spans: m, resources: []pcommon.Resource{pcommon.NewResource()}}
	out := pmetric.NewMetrics()
	var sm pmetric.ScopeMetrics
	e.spanMetricPoints(0, 0, &sm, out)
	points := ownHistogram(out, "dns.lookup.duration")
	assert.Len(t, points, maxSpanMetricSeries+1)
	a := points["dns.question.name=a"]
	assert.Equal(t, uint64(2), a.Count(), "getaddrinfo's and gethostbyname's spans of one name")
	assert.InDelta(t, 0.003, a.Sum(), 1e-9)
	assert.Equal(t, int32(spanMetricScale), a.Scale())
	// 0.001 s: log2 = -9.97, bucket ceil(-9.97 × 8) - 1 = -80.
	assert.Equal(t, int32(-80), a.Positive().Offset())
	assert.Equal(t, uint64(1), points["dns.question.name=a,error.type=EAI_NONAME"].Count())
	over := points["otel.metric.overflow=true"]
	assert.Equal(t, uint64(maxSpanMetricSeries+5-(maxSpanMetricSeries-2)), over.Count(), "the spans past the bound, in one point")
	v, _ := over.Attributes().Get("otel.metric.overflow")
	assert.Equal(t, pcommon.ValueTypeBool, v.Type())
	assert.Equal(t, "s", out.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().At(0).Unit())
	assert.Nil(t, newSpanMetrics(&plan.Plan{Spans: []plan.SpanDef{{Name: "x"}}}), "none without a span metric")
}

// TestSpanMetricSeriesPerContainer: the values of a span metric's
// attributes are the traced programs' (dns.question.name is whatever a
// program looks up): a container opens at most
// maxSpanMetricSeriesPerContainer series of one metric, and its spans
// beyond go to the overflow point, so that another container's and the
// host's lookups keep their own series. On main a container that looked
// up 1,000 names sent every later lookup of every other process on the
// node to the overflow point, for the collector's life.
func TestSpanMetricSeriesPerContainer(t *testing.T) {
	metric := &config.SpanMetric{Name: "dns.lookup.duration", Attributes: []string{"dns.question.name"}}
	p := &plan.Plan{Targets: []plan.PlannedTarget{{ServiceName: "libc"}}, Spans: []plan.SpanDef{{Name: "getaddrinfo", Metric: metric}}}
	m := newSpanMetrics(p)
	require.NotNil(t, m)
	containers := map[uint32]string{100: "evil", 101: "evil", 200: "good"} // pid 300: the host
	m.containerOf = func(pid uint32, _ event.Image) string { return containers[pid] }
	lookup := func(pid uint32, name string) {
		sp := ptrace.NewSpan()
		sp.SetStartTimestamp(1_000_000_000)
		sp.SetEndTimestamp(1_001_000_000)
		sp.Attributes().PutStr("dns.question.name", name)
		m.observe(0, pid, event.Image{}, sp)
	}
	for i := range 2 * maxSpanMetricSeries {
		lookup(uint32(100+i%2), fmt.Sprintf("evil-%d.example", i)) // two processes of one container
	}
	lookup(200, "good.example")
	lookup(200, "good.example")
	for i := range 300 {
		lookup(300, fmt.Sprintf("host-%d.example", i))
	}
	lookup(100, "evil-0.example") // a series it has: counted in it

	e := &metricsEmitter{plan: p, spans: m, resources: []pcommon.Resource{pcommon.NewResource()}}
	out := pmetric.NewMetrics()
	var sm pmetric.ScopeMetrics
	e.spanMetricPoints(0, 0, &sm, out)
	points := ownHistogram(out, "dns.lookup.duration")
	assert.Equal(t, uint64(2), points["dns.question.name=good.example"].Count(), "another container keeps its series")
	assert.Equal(t, uint64(1), points["dns.question.name=host-299.example"].Count(), "the host keeps its series")
	assert.Equal(t, uint64(2), points["dns.question.name=evil-0.example"].Count())
	evil := 0
	for attrs := range points {
		if strings.HasPrefix(attrs, "dns.question.name=evil-") {
			evil++
		}
	}
	assert.Equal(t, maxSpanMetricSeriesPerContainer, evil)
	assert.Equal(t, uint64(2*maxSpanMetricSeries-maxSpanMetricSeriesPerContainer), points["otel.metric.overflow=true"].Count(), "the container's other lookups")
	assert.Len(t, points, maxSpanMetricSeriesPerContainer+1+300+1)
}
