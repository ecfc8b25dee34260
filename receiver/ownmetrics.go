//go:build linux && (amd64 || arm64)

package receiver

import (
	"math"
	"sort"
	"strings"
	"sync"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
)

// Metrics of their own names: a counter's metric: (a sum of its hits,
// counted in the kernel) and a span's metric: (a histogram of its
// durations in seconds, built from the spans the engine records), which
// recipes name after the semantic conventions (jvm.class.loaded,
// jvm.gc.duration, dns.lookup.duration).

// spanMetricScale is the scale of the span metrics' exponential
// histograms: bucket bounds 2^(i/8) seconds, a bucket 9% wide.
const spanMetricScale = 3

// maxSpanMetricSeries bounds the attribute sets of one span metric of one
// target (dns.question.name may take many values); spans beyond it count
// in one series with otel.metric.overflow=true, as OpenTelemetry's SDKs
// do.
const maxSpanMetricSeries = 1000

// maxSpanMetricSeriesPerContainer bounds the series one container opens
// in one span metric of one target. The values are the traced programs'
// (dns.question.name is whatever a program looks up): without it, one
// container's lookups of 1,000 names would take every series and send
// every other process's spans to the overflow point for the collector's
// life. Processes outside containers share what is left.
const maxSpanMetricSeriesPerContainer = 100

// spanMetrics aggregates the spans of definitions with a metric. observe
// runs on the drain goroutine, points on the collecting one.
type spanMetrics struct {
	plan *plan.Plan
	mu   sync.Mutex
	// series of each target and metric name, in order of first span.
	series map[metricKey]map[string]*durationSeries
	order  []metricKey
	// opened counts the series each container opened, by metric.
	opened map[metricKey]map[string]int
	// containerOf returns container.id of a process image ("" outside
	// containers); nil: no process is in a container.
	containerOf func(pid uint32, image event.Image) string
}

// metricKey names one metric of one target.
type metricKey struct {
	target int
	name   string
}

// durationSeries is one point of a span metric: its attributes and the
// exponential histogram of its durations, in seconds.
type durationSeries struct {
	attrs   pcommon.Map
	count   uint64
	sum     float64
	zero    uint64
	offset  int32    // index of buckets[0]
	buckets []uint64 // counts of (2^((offset+i)/8), 2^((offset+i+1)/8)]
}

// newSpanMetrics returns the aggregator of plan's span metrics, nil when
// no span definition has one.
func newSpanMetrics(p *plan.Plan) *spanMetrics {
	for _, s := range p.Spans {
		if s.Metric != nil {
			return &spanMetrics{plan: p, series: map[metricKey]map[string]*durationSeries{}, opened: map[metricKey]map[string]int{}}
		}
	}
	return nil
}

// observe adds one span of definition def, of process image (pid, image).
func (m *spanMetrics) observe(def uint32, pid uint32, image event.Image, sp ptrace.Span) {
	if int(def) >= len(m.plan.Spans) {
		return
	}
	d := &m.plan.Spans[def]
	if d.Metric == nil {
		return
	}
	// A series is its attributes as the span has them: spans of two
	// definitions with the same values (dns.question.name of getaddrinfo
	// and gethostbyname) count in one.
	var id strings.Builder
	for _, k := range d.Metric.Attributes {
		if v, ok := sp.Attributes().Get(k); ok {
			id.WriteString(k)
			id.WriteByte('=')
			id.WriteString(v.Type().String())
			id.WriteByte(':')
			id.WriteString(v.AsString())
			id.WriteByte(0)
		}
	}
	seconds := float64(sp.EndTimestamp()-sp.StartTimestamp()) / 1e9
	m.mu.Lock()
	defer m.mu.Unlock()
	key := metricKey{d.Target, d.Metric.Name}
	byAttrs, ok := m.series[key]
	if !ok {
		byAttrs = map[string]*durationSeries{}
		m.series[key] = byAttrs
		m.order = append(m.order, key)
	}
	s, ok := byAttrs[id.String()]
	if !ok {
		container := ""
		if m.containerOf != nil && len(byAttrs) < maxSpanMetricSeries {
			container = m.containerOf(pid, image)
		}
		if container != "" && m.opened[key][container] >= maxSpanMetricSeriesPerContainer || len(byAttrs) >= maxSpanMetricSeries {
			s = byAttrs["\x00overflow"]
			if s == nil {
				s = &durationSeries{attrs: pcommon.NewMap()}
				s.attrs.PutBool("otel.metric.overflow", true)
				byAttrs["\x00overflow"] = s
			}
		} else {
			s = &durationSeries{attrs: pcommon.NewMap()}
			for _, k := range d.Metric.Attributes {
				if v, ok := sp.Attributes().Get(k); ok {
					v.CopyTo(s.attrs.PutEmpty(k))
				}
			}
			byAttrs[id.String()] = s
			if container != "" {
				if m.opened[key] == nil {
					m.opened[key] = map[string]int{}
				}
				m.opened[key][container]++
			}
		}
	}
	s.add(seconds)
}

// add counts one duration.
func (s *durationSeries) add(seconds float64) {
	s.count++
	s.sum += seconds
	if seconds <= 0 {
		s.zero++
		return
	}
	// Bucket i holds (2^(i/2^scale), 2^((i+1)/2^scale)].
	i := int32(math.Ceil(math.Log2(seconds)*(1<<spanMetricScale))) - 1
	switch {
	case len(s.buckets) == 0:
		s.offset, s.buckets = i, []uint64{0}
	case i < s.offset:
		s.buckets = append(make([]uint64, s.offset-i), s.buckets...)
		s.offset = i
	case int(i-s.offset) >= len(s.buckets):
		s.buckets = append(s.buckets, make([]uint64, int(i-s.offset)+1-len(s.buckets))...)
	}
	s.buckets[i-s.offset]++
}

// points appends target ti's span metrics to its scope metrics.
func (e *metricsEmitter) spanMetricPoints(ti int, now pcommon.Timestamp, sm *pmetric.ScopeMetrics, out pmetric.Metrics) {
	m := e.spans
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, key := range m.order {
		if key.target != ti {
			continue
		}
		metric := e.scope(ti, sm, out).Metrics().AppendEmpty()
		metric.SetName(key.name)
		metric.SetUnit("s")
		for _, s := range e.plan.Spans {
			if s.Target == ti && s.Metric != nil && s.Metric.Name == key.name && s.Metric.Description != "" {
				metric.SetDescription(s.Metric.Description)
				break
			}
		}
		h := metric.SetEmptyExponentialHistogram()
		h.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
		ids := make([]string, 0, len(m.series[key]))
		for id := range m.series[key] {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			s := m.series[key][id]
			dp := h.DataPoints().AppendEmpty()
			dp.SetStartTimestamp(e.startTime)
			dp.SetTimestamp(now)
			s.attrs.CopyTo(dp.Attributes())
			dp.SetScale(spanMetricScale)
			dp.SetCount(s.count)
			dp.SetSum(s.sum)
			dp.SetZeroCount(s.zero)
			if len(s.buckets) > 0 {
				dp.Positive().SetOffset(s.offset)
				dp.Positive().BucketCounts().FromRaw(s.buckets)
			}
		}
	}
}

// counterMetricPoints appends the sums of target ti's counters that have
// a metric of their own: the hits of each, in every process, by metric
// name in the order of the counters.
func (e *metricsEmitter) counterMetricPoints(ti int, st event.Stats, now pcommon.Timestamp, sm *pmetric.ScopeMetrics, out pmetric.Metrics) {
	byName := map[string]pmetric.Metric{}
	for pi, p := range e.plan.Probes {
		if p.Target != ti || p.Metric == nil || pi >= len(st.Probes) {
			continue
		}
		metric, ok := byName[p.Metric.Name]
		if !ok {
			metric = e.scope(ti, sm, out).Metrics().AppendEmpty()
			metric.SetName(p.Metric.Name)
			metric.SetDescription(p.Metric.Description)
			unit := p.Metric.Unit
			if unit == "" {
				unit = "1"
			}
			metric.SetUnit(unit)
			sum := metric.SetEmptySum()
			sum.SetIsMonotonic(true)
			sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
			byName[p.Metric.Name] = metric
		}
		dp := metric.Sum().DataPoints().AppendEmpty()
		dp.SetStartTimestamp(e.startTime)
		dp.SetTimestamp(now)
		dp.SetIntValue(int64(st.Probes[pi].Hits))
		keys := make([]string, 0, len(p.Metric.Attributes))
		for k := range p.Metric.Attributes {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			switch v := p.Metric.Attributes[k].(type) {
			case string:
				dp.Attributes().PutStr(k, v)
			case int:
				dp.Attributes().PutInt(k, int64(v))
			case int64:
				dp.Attributes().PutInt(k, v)
			case uint64:
				dp.Attributes().PutInt(k, int64(v))
			case bool:
				dp.Attributes().PutBool(k, v)
			}
		}
	}
}
