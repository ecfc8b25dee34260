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
	"github.com/otel-uprobe/uprobereceiver/internal/target"
	"github.com/otel-uprobe/uprobereceiver/receiver/internal/metadata"
)

// spanDurationMetric is the exponential histogram of span durations built
// from the kernel's log2 buckets. mdatagen cannot generate histograms, so it
// is built here, beside the generated sums.
const (
	spanDurationMetric      = "uprobe.span.duration"
	spanDurationDescription = "Durations of completed spans, aggregated in the kernel (exact even when span records are lost)."
	spanDurationUnit        = "ns"
)

// metricsEmitter turns snapshots of the kernel's counters into metrics, one
// resource per target, cumulative since the receiver started.
type metricsEmitter struct {
	mb        *metadata.MetricsBuilder
	plan      *target.Plan
	resources []pcommon.Resource
	startTime pcommon.Timestamp
	version   string
	last      event.Stats // what self-telemetry has already been told
	// missed returns the hits estimated for the time an overhead budget
	// kept a probe detached; nil without a budget.
	missed func(probe int) float64
}

func newMetricsEmitter(cfg metadata.MetricsBuilderConfig, set receiver.Settings, plan *target.Plan, hostName string, start pcommon.Timestamp) *metricsEmitter {
	e := &metricsEmitter{
		mb:        metadata.NewMetricsBuilder(cfg, set, metadata.WithStartTime(start)),
		plan:      plan,
		startTime: start,
		version:   set.BuildInfo.Version,
	}
	for _, t := range plan.Targets {
		rb := e.mb.NewResourceBuilder()
		rb.SetServiceName(t.ServiceName)
		if t.Executable {
			// A library's metrics add up every process that loads it:
			// no one executable is theirs.
			rb.SetProcessExecutablePath(t.Path)
		}
		if hostName != "" {
			rb.SetHostName(hostName)
		}
		e.resources = append(e.resources, rb.Emit())
	}
	return e
}

// emit builds the metrics of one snapshot.
func (e *metricsEmitter) emit(st event.Stats, now pcommon.Timestamp) pmetric.Metrics {
	out := pmetric.NewMetrics()
	for ti := range e.plan.Targets {
		for pi, p := range e.plan.Probes {
			if p.Target != ti {
				continue
			}
			e.mb.RecordUprobeProbeHitsDataPoint(now, int64(st.Probes[pi].Hits), p.Ref)
			if e.missed != nil {
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
	}
	return out
}

// isExit says whether a probe closes a span (and so can lose records).
func (e *metricsEmitter) isExit(probe int) bool {
	for _, s := range e.plan.Spans {
		if s.Exit == probe {
			return true
		}
	}
	return false
}

// durations appends the duration histogram of every span definition of a
// target, creating the target's resource metrics when the sums made none.
func (e *metricsEmitter) durations(ti int, st event.Stats, now pcommon.Timestamp, sm *pmetric.ScopeMetrics, out pmetric.Metrics) {
	var m pmetric.Metric
	for si, s := range e.plan.Spans {
		if s.Target != ti {
			continue
		}
		if m == (pmetric.Metric{}) {
			if *sm == (pmetric.ScopeMetrics{}) {
				rm := out.ResourceMetrics().AppendEmpty()
				e.resources[ti].CopyTo(rm.Resource())
				*sm = rm.ScopeMetrics().AppendEmpty()
				sm.Scope().SetName(metadata.ScopeName)
				sm.Scope().SetVersion(e.version)
			}
			m = sm.Metrics().AppendEmpty()
			m.SetName(spanDurationMetric)
			m.SetDescription(spanDurationDescription)
			m.SetUnit(spanDurationUnit)
			m.SetEmptyExponentialHistogram().SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
		}
		dp := m.ExponentialHistogram().DataPoints().AppendEmpty()
		dp.SetStartTimestamp(e.startTime)
		dp.SetTimestamp(now)
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
func (e *metricsEmitter) selfTelemetry(ctx context.Context, tel *metadata.TelemetryBuilder, st event.Stats) {
	for si, s := range e.plan.Spans {
		var prev event.SpanCounts
		if si < len(e.last.Spans) {
			prev = e.last.Spans[si]
		}
		cur := st.Spans[si]
		attrs := metric.WithAttributes(attribute.String("span.name", s.Name))
		if d := cur.Unmatched - prev.Unmatched; d > 0 {
			tel.ReceiverUprobeSpansUnmatched.Add(ctx, int64(d), attrs)
		}
		if d := cur.Abandoned - prev.Abandoned; d > 0 {
			tel.ReceiverUprobeSpansAbandoned.Add(ctx, int64(d), attrs)
		}
		for _, o := range []struct {
			reason    string
			cur, prev uint64
		}{
			{"depth", cur.Overflow, prev.Overflow},
			{"no_state", cur.NoState, prev.NoState},
			{"kernel_return_limit", cur.ReturnLimit, prev.ReturnLimit},
		} {
			if d := o.cur - o.prev; d > 0 {
				tel.ReceiverUprobeSpansOverflow.Add(ctx, int64(d), metric.WithAttributes(
					attribute.String("span.name", s.Name), attribute.String("overflow.reason", o.reason)))
			}
		}
	}
	e.last = st
}
