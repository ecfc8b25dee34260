// Package spanfloor is the pdata floor of the uprobe receiver's benchmark
// (harness/bench): Build makes spans of the shape the receiver delivers in
// the benchmark's collector measurement with pdata alone, and the spanfloor
// receiver delivers them into a collector pipeline at a set rate, with no
// eBPF, ring buffer or decoding. The benchmark times Build in a process of
// its own (the standalone floor) and a collector built with this receiver
// (the collector floor: the same collector's cost for the same spans from
// a receiver that does nothing else).
//
// It is a module of its own so that a collector built by ocb can import it;
// it is not part of the receiver.
package spanfloor

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/receiverhelper"
)

// BatchSpans is the number of spans per ResourceSpans (and per call of the
// pipeline) the floor builds, the receiver's default max_batch_spans.
const BatchSpans = 1024

// Build builds one ResourceSpans of count spans, numbered from base: a
// resource with the receiver's five resource attributes, its scope, and
// spans with a name, kind, trace and span ids, start and end times and
// three integer attributes (thread.id and two fetched values).
func Build(base, count int) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	ra := rs.Resource().Attributes()
	ra.EnsureCapacity(5)
	ra.PutStr("service.name", "workload")
	ra.PutInt("process.pid", 4242)
	ra.PutStr("process.executable.path", "/tmp/uprobe-bench/workload")
	ra.PutStr("process.executable.build_id.gnu", "7084cabafaec7c1efec916d4187b63f7808e1ee8")
	ra.PutStr("host.name", "bench-host")
	sc := rs.ScopeSpans().AppendEmpty()
	sc.Scope().SetName("github.com/otel-uprobe/uprobereceiver")
	sc.Scope().SetVersion("0.1.0")
	ss := sc.Spans()
	ss.EnsureCapacity(count)
	for j := range count {
		n := uint64(base + j)
		sp := ss.AppendEmpty()
		sp.SetName("probed")
		sp.SetKind(ptrace.SpanKindInternal)
		sp.SetTraceID(pcommon.TraceID{byte(n), byte(n >> 8), byte(n >> 16), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13})
		sp.SetSpanID(pcommon.SpanID{byte(n), byte(n >> 8), byte(n >> 16), 1, 2, 3, 4, 5})
		sp.SetStartTimestamp(pcommon.Timestamp(1e18 + 1000*n))
		sp.SetEndTimestamp(pcommon.Timestamp(1e18 + 1000*n + 700))
		a := sp.Attributes()
		a.EnsureCapacity(3)
		a.PutInt("thread.id", 4243)
		a.PutInt("a", int64(n))
		a.PutInt("ret", int64(n^1))
	}
	return td
}

// Config configures the spanfloor receiver.
type Config struct {
	// Rate is the spans per second delivered.
	Rate int `mapstructure:"rate"`
	// Interval is how often the receiver wakes to build and deliver the
	// spans of one interval (the uprobe receiver's flush_interval).
	Interval time.Duration `mapstructure:"interval"`
	// MaxSpansPerDrain, when positive, bounds the spans of one wakeup:
	// the uprobe receiver drains as soon as a quarter of its ring buffer
	// is full, before its flush_interval, so at a high rate it delivers
	// that many spans every MaxSpansPerDrain/Rate seconds, and so does
	// this receiver.
	MaxSpansPerDrain int `mapstructure:"max_spans_per_drain"`
}

// drains returns the spans of one wakeup and the time between two, for
// rate spans per second: Interval's worth, or MaxSpansPerDrain when fewer,
// then as often as the rate makes them.
func (c *Config) drains() (spans int, every time.Duration) {
	spans = int(float64(c.Rate) * c.Interval.Seconds())
	if c.MaxSpansPerDrain <= 0 || spans <= c.MaxSpansPerDrain || c.Rate <= 0 {
		return spans, c.Interval
	}
	return c.MaxSpansPerDrain, time.Duration(float64(c.MaxSpansPerDrain) / float64(c.Rate) * float64(time.Second))
}

// NewFactory returns the factory of the spanfloor receiver (type
// "spanfloor", traces only).
func NewFactory() receiver.Factory {
	return receiver.NewFactory(component.MustNewType("spanfloor"),
		func() component.Config { return &Config{Rate: 100_000, Interval: 100 * time.Millisecond} },
		receiver.WithTraces(createTraces, component.StabilityLevelDevelopment))
}

type floorReceiver struct {
	cfg  *Config
	next consumer.Traces
	obs  *receiverhelper.ObsReport
	stop chan struct{}
	done chan struct{}
}

func createTraces(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Traces) (receiver.Traces, error) {
	obs, err := receiverhelper.NewObsReport(receiverhelper.ObsReportSettings{ReceiverID: set.ID, Transport: "pdata", ReceiverCreateSettings: set})
	if err != nil {
		return nil, err
	}
	return &floorReceiver{cfg: cfg.(*Config), next: next, obs: obs, stop: make(chan struct{}), done: make(chan struct{})}, nil
}

func (r *floorReceiver) Start(context.Context, component.Host) error {
	go r.run()
	return nil
}

func (r *floorReceiver) Shutdown(context.Context) error {
	select {
	case <-r.stop:
	default:
		close(r.stop)
		<-r.done
	}
	return nil
}

// run delivers Rate×Interval spans every Interval (or MaxSpansPerDrain
// spans as often as Rate makes them, when fewer), in batches of
// BatchSpans, each call counted by obsreport as the uprobe receiver's are.
func (r *floorReceiver) run() {
	defer close(r.done)
	per, every := r.cfg.drains()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for n := 0; ; {
		select {
		case <-r.stop:
			return
		case <-tick.C:
		}
		for left := per; left > 0; {
			count := min(left, BatchSpans)
			ctx := r.obs.StartTracesOp(context.Background())
			err := r.next.ConsumeTraces(ctx, Build(n, count))
			r.obs.EndTracesOp(ctx, "pdata", count, err)
			n, left = n+count, left-count
		}
	}
}
