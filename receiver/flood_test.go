package receiver

import (
	"context"
	"errors"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/receiver/internal/metadatatest"
)

// A flood far beyond the ring buffer's capacity is dropped in the kernel and
// counted: delivered + lost = fired, exactly.
func TestFloodDeliveredPlusLostIsFired(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	demo := testutil.StartDemo(t, b.Program)
	cfg := createDefaultConfig()
	cfg.RingBufferSize = 4096 // about 55 records of 72 bytes
	cfg.FlushInterval = time.Second
	cfg.Targets = []config.Target{{Path: b.Program, Spans: []config.Span{{Name: "recurse", Function: "recurse", Returns: config.ReturnsUretprobe}}}}
	// The pipeline holds the drain goroutine until the program is done, so
	// the ring overflows whatever the machine's speed: the engine wakes the
	// reader when a quarter of the ring is full, and a fast reader would
	// otherwise keep up with this program.
	traces := &heldConsumer{release: make(chan struct{})}
	metrics := new(consumertest.MetricsSink)
	f := NewFactory()
	set := metadatatest.NewSettings(componenttest.NewTelemetry())
	r, err := f.CreateTraces(context.Background(), set, cfg, traces)
	require.NoError(t, err)
	_, err = f.CreateMetrics(context.Background(), set, cfg, metrics)
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background(), componenttest.NewNopHost()))

	const n = 200 // 800 spans: about 15 times the ring's capacity
	demo.Run(n)
	close(traces.release)
	require.NoError(t, r.Shutdown(context.Background()))

	last := metrics.AllMetrics()[len(metrics.AllMetrics())-1]
	lost := sumPoints(last, "uprobe.events.lost")["uretprobe:recurse"]
	fired := sumPoints(last, "uprobe.probe.hits")["uretprobe:recurse"]
	delivered := int64(traces.SpanCount())
	assert.Equal(t, int64(4*n), fired)
	assert.Positive(t, lost, "the ring overflowed")
	assert.Equal(t, fired, delivered+lost, "delivered %d + lost %d = fired %d", delivered, lost, fired)
	assert.Equal(t, uint64(4*n), durations(last)["recurse"].Count(), "durations stay exact when records are lost")
}

// A pipeline that refuses spans never blocks the traced program: the
// receiver drops and the collector counts the refused spans.
func TestRefusingPipeline(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	demo := testutil.StartDemo(t, b.Program)
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	cfg := createDefaultConfig()
	cfg.Targets = []config.Target{{Path: b.Program, Spans: []config.Span{{Name: "recurse", Function: "recurse", Returns: config.ReturnsUretprobe}}}}
	refuse := consumertest.NewErr(consumererror.NewPermanent(errors.New("refused")))
	r, err := NewFactory().CreateTraces(context.Background(), metadatatest.NewSettings(tel), cfg, refuse)
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background(), componenttest.NewNopHost()))
	demo.Run(25)
	require.NoError(t, r.Shutdown(context.Background()))
	refused, err := tel.GetMetric("otelcol_receiver_refused_spans")
	require.NoError(t, err)
	var total int64
	for _, dp := range refused.Data.(metricdata.Sum[int64]).DataPoints {
		total += dp.Value
	}
	assert.Equal(t, int64(100), total)
}

// With nothing to read, the drain goroutine sleeps: it does not wake on a
// timer (the engine wakes it at the first record, and a bound of idleWait
// catches a record written as it fell asleep). A span is still delivered
// within the flush interval of its record, and the ring's first record
// after a quiet time wakes the goroutine.
func TestDrainSleepsWhileIdle(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	demo := testutil.StartDemo(t, b.Program)
	// A pid: target: no exec record of the machine's other processes
	// wakes the receiver.
	s := startReceiver(t, []config.Target{{Path: b.Program, PID: demo.PID, Spans: []config.Span{{Name: "outer", Function: "outer"}}}})

	const quiet = 3 * idleWait
	// A process starts and exits meanwhile: its records (every process
	// sends them, for its identity) are read, its fork and exec when the
	// goroutine's sleep ends, and its exit lies alone in the ring, which the
	// goroutine must not take for an empty ring it never reads.
	sleeper := exec.Command("/bin/sleep", "1.5")
	require.NoError(t, sleeper.Start())
	time.Sleep(quiet) // nothing else happens: what is measured is the goroutine's wakeups meanwhile
	require.NoError(t, sleeper.Wait())
	for i := 1; i <= 3; i++ {
		demo.Run(1)
		require.Eventually(t, func() bool { return s.traces.SpanCount() == i }, 10*time.Second, time.Millisecond)
	}
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	// A timer at the default flush interval would have woken it 30 times
	// (300 at the 10 ms it once was).
	wakeups := s.rcv.wakeups
	assert.LessOrEqual(t, wakeups, int(quiet/idleWait)+2*3+2+4, "wakeups in %v of quiet, a process and 3 spans", quiet)
	assert.Equal(t, 3, s.traces.SpanCount())
}

// heldConsumer takes no batch until release is closed.
type heldConsumer struct {
	consumertest.TracesSink
	release chan struct{}
}

func (c *heldConsumer) ConsumeTraces(ctx context.Context, td ptrace.Traces) error {
	<-c.release
	return c.TracesSink.ConsumeTraces(ctx, td)
}

// slowConsumer takes a while for each batch and, like an exporter, refuses
// a batch whose context has ended. entered is closed at the first batch.
type slowConsumer struct {
	consumertest.TracesSink
	delay   time.Duration
	entered chan struct{}
	once    sync.Once
	refused atomic.Int64
}

func (c *slowConsumer) ConsumeTraces(ctx context.Context, td ptrace.Traces) error {
	c.once.Do(func() { close(c.entered) })
	time.Sleep(c.delay) // the pipeline's own work, not synchronisation
	if err := ctx.Err(); err != nil {
		c.refused.Add(int64(td.SpanCount()))
		return err
	}
	return c.TracesSink.ConsumeTraces(ctx, td)
}

// Shutdown while the drain goroutine is between batches of a full ring:
// the batch in hand is delivered with a context Shutdown did not end, and
// Shutdown drains the rest. Every span fired is delivered, none refused.
func TestShutdownMidDrainDeliversEverySpan(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	demo := testutil.StartDemo(t, b.Program)
	cfg := createDefaultConfig()
	cfg.MaxBatchSpans = 16
	cfg.FlushInterval = time.Millisecond
	cfg.Targets = []config.Target{{Path: b.Program, Spans: []config.Span{{Name: "recurse", Function: "recurse", Returns: config.ReturnsUretprobe}}}}
	sink := &slowConsumer{delay: 5 * time.Millisecond, entered: make(chan struct{})}
	r, err := NewFactory().CreateTraces(context.Background(), metadatatest.NewSettings(componenttest.NewTelemetry()), cfg, sink)
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background(), componenttest.NewNopHost()))

	const n = 500 // 2,000 spans: 125 batches of 16, about 0.6 s of pipeline work
	demo.Run(n)
	select {
	case <-sink.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no batch reached the pipeline")
	}
	require.NoError(t, r.Shutdown(context.Background()))
	assert.Zero(t, sink.refused.Load(), "no batch was delivered with an ended context")
	assert.Equal(t, 4*n, sink.SpanCount(), "every span fired was delivered")
}

// droppedSpans returns receiver_uprobe_spans_dropped by span name and
// reason.
func droppedSpans(t *testing.T, tel *componenttest.Telemetry) map[[2]string]int64 {
	t.Helper()
	out := map[[2]string]int64{}
	m, err := tel.GetMetric("otelcol_receiver_uprobe_spans_dropped")
	if err != nil {
		return out
	}
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		name, _ := dp.Attributes.Value("span.name")
		reason, _ := dp.Attributes.Value("drop.reason")
		out[[2]string{name.AsString(), reason.AsString()}] += dp.Value
	}
	return out
}

// Every span the kernel completes is delivered or counted dropped, by
// reason: head sampling leaves half of recurse's traces out (counted
// dropped, not in uprobe.span.duration: their returns may be skipped), inner is
// never as long as its min_duration, the pipeline refuses what it is
// given, and Shutdown, its context ended, counts what is still in the
// ring.
func TestEveryCompletedSpanIsDeliveredOrCounted(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	demo := testutil.StartDemo(t, b.Program)
	half := 0.5
	cfg := createDefaultConfig()
	cfg.MaxBatchSpans = 16
	cfg.Targets = []config.Target{{Path: b.Program, Spans: []config.Span{
		{Name: "recurse", Function: "recurse", Returns: config.ReturnsUretprobe, SampleRatio: &half},
		{Name: "outer", Function: "outer"},
		{Name: "inner", Function: "inner", MinDuration: time.Hour},
	}}}
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	set := metadatatest.NewSettings(tel)
	refuse := consumertest.NewErr(errors.New("refused"))
	metrics := new(consumertest.MetricsSink)
	r, err := NewFactory().CreateTraces(context.Background(), set, cfg, refuse)
	require.NoError(t, err)
	_, err = NewFactory().CreateMetrics(context.Background(), set, cfg, metrics)
	require.NoError(t, err)
	g := newGate() // nothing is read before Shutdown
	r.(*uprobeReceiver).drainGate = g.wait
	t.Cleanup(g.release)
	require.NoError(t, r.Start(context.Background(), componenttest.NewNopHost()))

	const n = 200
	demo.Run(n)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	require.NoError(t, r.Shutdown(ended)) // one batch of 16 is read, then the rest counted

	last := metrics.AllMetrics()[len(metrics.AllMetrics())-1]
	d := durations(last)
	dropped := droppedSpans(t, tel)
	for name, want := range map[string]uint64{"recurse": 4 * n, "outer": n, "inner": 2 * n} {
		// The spans head sampling left out are not in the histogram.
		unsampled := dropped[[2]string{name, "unsampled"}]
		assert.Equal(t, want, d[name].Count()+uint64(unsampled), name)
		var sum int64
		for k, v := range dropped {
			if k[0] == name && k[1] != "unsampled" {
				sum += v
			}
		}
		assert.Equal(t, int64(d[name].Count()), sum, "%s: every completed span counted dropped, none delivered: %v", name, dropped)
	}
	assert.Equal(t, int64(2*n), dropped[[2]string{"inner", "short"}], "%v", dropped)
	assert.Positive(t, dropped[[2]string{"recurse", "unsampled"}])
	assert.Positive(t, dropped[[2]string{"outer", "shutdown"}], "the ring was not empty at Shutdown")
	assert.Positive(t, dropped[[2]string{"outer", "refused"}])
}
