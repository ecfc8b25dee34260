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
