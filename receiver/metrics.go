//go:build linux && (amd64 || arm64)

package receiver

import (
	"context"
	"math"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/receiver/internal/metadata"
)

// spanDurationMetric is the exponential histogram of span durations built
// from the kernel's log2 buckets. mdatagen cannot generate histograms, so it
// is built here, beside the generated sums.
const (
	spanDurationMetric      = "uprobe.span.duration"
	spanDurationDescription = "Durations of completed spans, aggregated in the kernel (exact even when span records are lost)."
	spanDurationUnit        = "ns"

	valueMetric      = "uprobe.probe.value"
	valueDescription = "Values of a counter's histogram: expression (probe.value), one value per counted hit, aggregated in the kernel."
	valueUnit        = "1"
)

// metricsEmitter turns snapshots of the kernel's counters into metrics, one
// resource per target, cumulative since the receiver started.
type metricsEmitter struct {
	mb        *metadata.MetricsBuilder
	plan      *plan.Plan
	resources []pcommon.Resource
	// containers are the resources of a target's hits in one container;
	// cleared when they outnumber maxContainerSeries.
	containers map[targetContainer]pcommon.Resource
	hostName   string
	startTime  pcommon.Timestamp
	version    string
	last       toldStats // what self-telemetry has already been told
	// missed returns the hits estimated for the time an overhead budget
	// kept a probe detached; nil without a budget.
	missed func(probe int) float64
	// spans aggregates the span metrics (metric: of a span); nil when no
	// span definition has one.
	spans *spanMetrics
	// By target, its probes, spans and histograms (indexes in the plan,
	// in order), and by probe whether it closes a span: a collection
	// walks each once (2,000 targets of 3 probes, or 20,000 probes of one
	// pattern, made every collection quadratic).
	probesOf, spansOf, histsOf [][]int
	exits                      []bool
}

func newMetricsEmitter(cfg metadata.MetricsBuilderConfig, set receiver.Settings, plan *plan.Plan, hostName string, start pcommon.Timestamp) *metricsEmitter {
	e := &metricsEmitter{
		mb:         metadata.NewMetricsBuilder(cfg, set, metadata.WithStartTime(start)),
		plan:       plan,
		startTime:  start,
		version:    set.BuildInfo.Version,
		containers: map[targetContainer]pcommon.Resource{},
		hostName:   hostName,
	}
	for ti := range plan.Targets {
		e.resources = append(e.resources, e.resource(ti, ""))
	}
	// The plan's targets, probes, spans and histograms are fixed at
	// Start (files found later add sites only).
	e.probesOf, e.spansOf, e.histsOf = make([][]int, len(plan.Targets)), make([][]int, len(plan.Targets)), make([][]int, len(plan.Targets))
	for pi, p := range plan.Probes {
		e.probesOf[p.Target] = append(e.probesOf[p.Target], pi)
	}
	e.exits = make([]bool, len(plan.Probes))
	for si, s := range plan.Spans {
		e.spansOf[s.Target] = append(e.spansOf[s.Target], si)
		for _, x := range append([]int{s.Exit}, s.ErrorExits...) {
			if x >= 0 && x < len(e.exits) {
				e.exits[x] = true
			}
		}
	}
	for hi, h := range plan.Histograms {
		ti := plan.Probes[h.Probe].Target
		e.histsOf[ti] = append(e.histsOf[ti], hi)
	}
	return e
}

// targetContainer names the metrics of one target in one container.
type targetContainer struct {
	target    int
	container string
}

// resource returns the resource of target ti's metrics in one container
// ("" for the target's own).
func (e *metricsEmitter) resource(ti int, container string) pcommon.Resource {
	t := e.plan.Targets[ti]
	rb := e.mb.NewResourceBuilder()
	rb.SetServiceName(t.ServiceName)
	if t.Executable {
		// A library's metrics add up every process that loads it:
		// no one executable is theirs.
		rb.SetProcessExecutablePath(t.Path)
	}
	if e.hostName != "" {
		rb.SetHostName(e.hostName)
	}
	if container != "" {
		rb.SetContainerID(container)
	}
	return rb.Emit()
}

// inContainers returns, per probe, the hits counted in containers
// (reported apart), and the containers of each target in order.
func (e *metricsEmitter) inContainers(st event.Stats) (map[int]uint64, map[int][]string) {
	sums := map[int]uint64{}
	for p, n := range st.DroppedContainerHits {
		sums[p] += n
	}
	byTarget := map[int][]string{}
	for _, c := range st.ContainerHits {
		sums[c.Probe] += c.Hits
		ti := e.plan.Probes[c.Probe].Target
		if l := byTarget[ti]; len(l) == 0 || l[len(l)-1] != c.ContainerID {
			byTarget[ti] = append(l, c.ContainerID) // sorted by container: each once
		}
	}
	return sums, byTarget
}

// emit builds the metrics of one snapshot.
func (e *metricsEmitter) emit(st event.Stats, now pcommon.Timestamp) pmetric.Metrics {
	out := pmetric.NewMetrics()
	inContainers, containers := e.inContainers(st)
	for ti := range e.plan.Targets {
		for _, pi := range e.probesOf[ti] {
			p := &e.plan.Probes[pi]
			hits := st.Probes[pi].Hits
			hits -= min(hits, inContainers[pi])
			e.mb.RecordUprobeProbeHitsDataPoint(now, int64(hits), p.Ref)
			if e.missed != nil {
				// The estimate covers the probe's every process: it goes
				// with the target's own resource.
				e.mb.RecordUprobeProbeHitsEstimatedDataPoint(now, int64(st.Probes[pi].Hits)+int64(math.Round(e.missed(pi))), p.Ref)
			}
			if e.isExit(pi) {
				e.mb.RecordUprobeEventsLostDataPoint(now, int64(st.Probes[pi].Lost), p.Ref)
			}
		}
		md := e.mb.Emit(metadata.WithResource(e.resources[ti]))
		var sm pmetric.ScopeMetrics
		if md.ResourceMetrics().Len() > 0 {
			md.ResourceMetrics().MoveAndAppendTo(out.ResourceMetrics())
			sm = out.ResourceMetrics().At(out.ResourceMetrics().Len() - 1).ScopeMetrics().At(0)
		}
		e.durations(ti, st, now, &sm, out)
		e.values(ti, st, now, &sm, out)
		e.counterMetricPoints(ti, st, now, &sm, out)
		e.spanMetricPoints(ti, now, &sm, out)
		for _, id := range containers[ti] {
			for _, c := range st.ContainerHits {
				if c.ContainerID == id && e.plan.Probes[c.Probe].Target == ti {
					e.mb.RecordUprobeProbeHitsDataPoint(now, int64(c.Hits), e.plan.Probes[c.Probe].Ref)
				}
			}
			k := targetContainer{ti, id}
			res, ok := e.containers[k]
			if !ok {
				if len(e.containers) >= maxContainerSeries {
					clear(e.containers)
				}
				res = e.resource(ti, id)
				e.containers[k] = res
			}
			e.mb.EmitForResource(metadata.WithResource(res))
		}
		if len(containers[ti]) > 0 {
			md := e.mb.Emit()
			md.ResourceMetrics().MoveAndAppendTo(out.ResourceMetrics())
		}
	}
	return out
}

// scope returns the scope metrics of target ti in out, creating its
// resource metrics when the sums made none.
func (e *metricsEmitter) scope(ti int, sm *pmetric.ScopeMetrics, out pmetric.Metrics) pmetric.ScopeMetrics {
	if *sm == (pmetric.ScopeMetrics{}) {
		rm := out.ResourceMetrics().AppendEmpty()
		e.resources[ti].CopyTo(rm.Resource())
		*sm = rm.ScopeMetrics().AppendEmpty()
		sm.Scope().SetName(metadata.ScopeName)
		sm.Scope().SetVersion(e.version)
	}
	return *sm
}

// point appends a cumulative point to exponential histogram *m of target
// ti, creating the metric (and the target's scope) on its first point.
func (e *metricsEmitter) point(m *pmetric.Metric, ti int, sm *pmetric.ScopeMetrics, out pmetric.Metrics, name, description, unit string, now pcommon.Timestamp) pmetric.ExponentialHistogramDataPoint {
	if *m == (pmetric.Metric{}) {
		*m = e.scope(ti, sm, out).Metrics().AppendEmpty()
		m.SetName(name)
		m.SetDescription(description)
		m.SetUnit(unit)
		m.SetEmptyExponentialHistogram().SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	}
	dp := m.ExponentialHistogram().DataPoints().AppendEmpty()
	dp.SetStartTimestamp(e.startTime)
	dp.SetTimestamp(now)
	return dp
}

// values appends the value histogram of every counter of a target that
// has one (histogram:).
func (e *metricsEmitter) values(ti int, st event.Stats, now pcommon.Timestamp, sm *pmetric.ScopeMetrics, out pmetric.Metrics) {
	var m pmetric.Metric
	for _, hi := range e.histsOf[ti] {
		h := &e.plan.Histograms[hi]
		p := &e.plan.Probes[h.Probe]
		if hi >= len(st.Values) {
			continue
		}
		dp := e.point(&m, ti, sm, out, valueMetric, valueDescription, valueUnit, now)
		dp.Attributes().PutStr("probe.name", p.Ref)
		dp.Attributes().PutStr("probe.value", h.Expr)
		fillValues(dp, st.Values[hi])
	}
}

// fillValues converts the kernel's value buckets into an exponential
// histogram point of scale 0: kernel bucket i is index i-1, (2^(i-1), 2^i].
func fillValues(dp pmetric.ExponentialHistogramDataPoint, v event.ValueCounts) {
	dp.SetScale(0)
	dp.SetCount(v.Count)
	dp.SetSum(v.Sum())
	dp.SetZeroCount(v.Zero)
	for _, side := range []struct {
		counts  []uint64
		buckets pmetric.ExponentialHistogramDataPointBuckets
	}{{v.Positive, dp.Positive()}, {v.Negative, dp.Negative()}} {
		lo, hi := -1, -1
		for i, n := range side.counts {
			if n == 0 {
				continue
			}
			if lo < 0 {
				lo = i
			}
			hi = i
		}
		if lo < 0 {
			continue
		}
		side.buckets.SetOffset(int32(lo - 1))
		side.buckets.BucketCounts().FromRaw(side.counts[lo : hi+1])
	}
}

// isExit says whether a probe closes a span (and so can lose records).
func (e *metricsEmitter) isExit(probe int) bool { return e.exits[probe] }

// durations appends the duration histogram of every span definition of a
// target, creating the target's resource metrics when the sums made none.
func (e *metricsEmitter) durations(ti int, st event.Stats, now pcommon.Timestamp, sm *pmetric.ScopeMetrics, out pmetric.Metrics) {
	var m pmetric.Metric
	for _, si := range e.spansOf[ti] {
		s := &e.plan.Spans[si]
		dp := e.point(&m, ti, sm, out, spanDurationMetric, spanDurationDescription, spanDurationUnit, now)
		dp.Attributes().PutStr("span.name", s.Name)
		fillExponential(dp, st.Spans[si])
	}
}

// fillExponential converts log2 buckets into an exponential histogram point
// of scale 0, whose bucket i is (2^i, 2^(i+1)], exactly the kernel's.
func fillExponential(dp pmetric.ExponentialHistogramDataPoint, c event.SpanCounts) {
	dp.SetScale(0)
	dp.SetCount(c.Count)
	dp.SetSum(float64(c.SumNs))
	lo, hi := -1, -1
	for i, n := range c.Buckets {
		if n == 0 {
			continue
		}
		if lo < 0 {
			lo = i
		}
		hi = i
	}
	if lo < 0 {
		return
	}
	dp.Positive().SetOffset(int32(lo))
	dp.Positive().BucketCounts().FromRaw(c.Buckets[lo : hi+1])
}

// selfTelemetry adds what changed since the last snapshot to the receiver's
// own counters of unmatched, abandoned and overflowing spans.
// toldStats is what selfTelemetry reads of the previous collection's
// counters: a copy of them all held every probe's and every span's
// histogram (~60 bytes per location of 2,000 targets).
type toldStats struct {
	spans  []spanDrops
	thread event.ThreadContextCounts
	unread []uint64 // by histogram
}

// spanDrops are the counts of a span's self-telemetry.
type spanDrops struct {
	unmatched, abandoned, filtered, lost, unsampled, short uint64
	overflow, noState, returnLimit, pendingFull            uint64
}

func dropsOf(c event.SpanCounts) spanDrops {
	return spanDrops{c.Unmatched, c.Abandoned, c.Filtered, c.Lost, c.Unsampled, c.Short, c.Overflow, c.NoState, c.ReturnLimit, c.PendingFull}
}

func (e *metricsEmitter) selfTelemetry(ctx context.Context, tel *metadata.TelemetryBuilder, st event.Stats) {
	for si, s := range e.plan.Spans {
		var prev spanDrops
		if si < len(e.last.spans) {
			prev = e.last.spans[si]
		}
		cur := dropsOf(st.Spans[si])
		if cur == prev {
			continue // most spans, most collections: nothing to add
		}
		attrs := metric.WithAttributes(attribute.String("span.name", s.Name))
		if d := cur.unmatched - prev.unmatched; d > 0 {
			tel.ReceiverUprobeSpansUnmatched.Add(ctx, int64(d), attrs)
		}
		if d := cur.abandoned - prev.abandoned; d > 0 {
			tel.ReceiverUprobeSpansAbandoned.Add(ctx, int64(d), attrs)
		}
		if d := cur.filtered - prev.filtered; d > 0 {
			tel.ReceiverUprobeSpansFiltered.Add(ctx, int64(d), attrs)
		}
		// Completed spans the engine did not record, or could not.
		for _, o := range []struct {
			reason    metadata.AttributeDropReason
			cur, prev uint64
		}{
			{metadata.AttributeDropReasonRingFull, cur.lost, prev.lost},
			{metadata.AttributeDropReasonUnsampled, cur.unsampled, prev.unsampled},
			{metadata.AttributeDropReasonShort, cur.short, prev.short},
		} {
			if d := o.cur - o.prev; o.cur > o.prev {
				tel.ReceiverUprobeSpansDropped.Add(ctx, int64(d), metric.WithAttributes(
					attribute.String("span.name", s.Name), attribute.String("drop.reason", o.reason.String())))
			}
		}
		for _, o := range []struct {
			reason    string
			cur, prev uint64
		}{
			{"depth", cur.overflow, prev.overflow},
			{"no_state", cur.noState, prev.noState},
			{"kernel_return_limit", cur.returnLimit, prev.returnLimit},
			{"pending_full", cur.pendingFull, prev.pendingFull},
		} {
			if d := o.cur - o.prev; d > 0 {
				tel.ReceiverUprobeSpansOverflow.Add(ctx, int64(d), metric.WithAttributes(
					attribute.String("span.name", s.Name), attribute.String("overflow.reason", o.reason)))
			}
		}
	}
	for _, o := range []struct {
		outcome   metadata.AttributeThreadContextOutcome
		cur, prev uint64
	}{
		{metadata.AttributeThreadContextOutcomeRead, st.Thread.Read, e.last.thread.Read},
		{metadata.AttributeThreadContextOutcomeNoContext, st.Thread.NoContext, e.last.thread.NoContext},
		{metadata.AttributeThreadContextOutcomeInvalid, st.Thread.Invalid, e.last.thread.Invalid},
		{metadata.AttributeThreadContextOutcomeUnreadable, st.Thread.Unreadable, e.last.thread.Unreadable},
	} {
		if o.cur > o.prev {
			tel.ReceiverUprobeThreadContexts.Add(ctx, int64(o.cur-o.prev), metric.WithAttributes(
				attribute.String("thread_context.outcome", o.outcome.String())))
		}
	}
	for i, v := range st.Values {
		var prev uint64
		if i < len(e.last.unread) {
			prev = e.last.unread[i]
		}
		if v.Unread > prev {
			tel.ReceiverUprobeFetchErrors.Add(ctx, int64(v.Unread-prev))
		}
	}
	if len(e.last.spans) != len(st.Spans) {
		e.last.spans = make([]spanDrops, len(st.Spans))
	}
	for si, c := range st.Spans {
		e.last.spans[si] = dropsOf(c)
	}
	if len(e.last.unread) != len(st.Values) {
		e.last.unread = make([]uint64, len(st.Values))
	}
	for i, v := range st.Values {
		e.last.unread[i] = v.Unread
	}
	e.last.thread = st.Thread
}
