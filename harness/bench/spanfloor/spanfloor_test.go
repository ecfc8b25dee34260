package spanfloor

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/receivertest"
)

func TestBuild(t *testing.T) {
	td := Build(7, 3)
	require.Equal(t, 1, td.ResourceSpans().Len())
	rs := td.ResourceSpans().At(0)
	require.Equal(t, 5, rs.Resource().Attributes().Len())
	ss := rs.ScopeSpans().At(0).Spans()
	require.Equal(t, 3, ss.Len())
	a, ok := ss.At(2).Attributes().Get("a")
	require.True(t, ok)
	require.Equal(t, int64(9), a.Int())
	require.Equal(t, 3, ss.At(2).Attributes().Len())
}

func TestReceiverDeliversAtItsRate(t *testing.T) {
	sink := new(consumertest.TracesSink)
	f := NewFactory()
	cfg := &Config{Rate: 20_480, Interval: 50 * time.Millisecond} // 1024 spans per interval
	r, err := f.CreateTraces(t.Context(), receivertest.NewNopSettings(f.Type()), cfg, sink)
	require.NoError(t, err)
	require.NoError(t, r.Start(t.Context(), componenttest.NewNopHost()))
	require.Eventually(t, func() bool { return sink.SpanCount() >= 2048 }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, r.Shutdown(t.Context()))
	require.Zero(t, sink.SpanCount()%1024, "whole intervals of 1024 spans")
}

// TestReceiverDrainsLikeTheRing: with MaxSpansPerDrain below an
// interval's worth, the receiver delivers that many spans at a time, as
// often as the rate makes them (the uprobe receiver drains when a quarter
// of its ring is full), not an interval's worth once per interval.
func TestReceiverDrainsLikeTheRing(t *testing.T) {
	sink := new(consumertest.TracesSink)
	f := NewFactory()
	// 20,480 spans per second: 2,048 every 100 ms; an interval's worth
	// would take an hour.
	cfg := &Config{Rate: 20_480, Interval: time.Hour, MaxSpansPerDrain: 2048}
	r, err := f.CreateTraces(t.Context(), receivertest.NewNopSettings(f.Type()), cfg, sink)
	require.NoError(t, err)
	require.NoError(t, r.Start(t.Context(), componenttest.NewNopHost()))
	require.Eventually(t, func() bool { return sink.SpanCount() >= 4096 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, r.Shutdown(t.Context()))
	require.Zero(t, sink.SpanCount()%2048, "whole drains of 2048 spans")
	for _, td := range sink.AllTraces() {
		require.Equal(t, BatchSpans, td.SpanCount(), "batches of BatchSpans")
	}
	per, every := cfg.drains()
	require.Equal(t, 2048, per)
	require.Equal(t, 100*time.Millisecond, every)
}

// TestBuildMatchesGolden checks that Build builds what the benchmark's
// standalone floor builds (harness/bench checks its own against the same
// file).
func TestBuildMatchesGolden(t *testing.T) {
	got, err := (&ptrace.JSONMarshaler{}).MarshalTraces(Build(7, 3))
	require.NoError(t, err)
	want, err := os.ReadFile("../testdata/floor-batch.json")
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(got))
}
