package receiver

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
	"github.com/otel-uprobe/uprobereceiver/receiver/internal/metadata"
	"github.com/otel-uprobe/uprobereceiver/receiver/internal/metadatatest"
)

// created creates the shared instance of targets for both pipelines
// without starting it; opts change the settings first.
func created(t *testing.T, targets []config.Target, opts ...func(*receiver.Settings)) started {
	t.Helper()
	cfg := createDefaultConfig()
	cfg.Targets = targets
	require.NoError(t, cfg.Validate())
	s := started{traces: new(consumertest.TracesSink), metrics: new(consumertest.MetricsSink), telemetry: componenttest.NewTelemetry()}
	t.Cleanup(func() { require.NoError(t, s.telemetry.Shutdown(context.Background())) })
	set := metadatatest.NewSettings(s.telemetry)
	for _, o := range opts {
		o(&set)
	}
	tr, err := NewFactory().CreateTraces(context.Background(), set, cfg, s.traces)
	require.NoError(t, err)
	_, err = NewFactory().CreateMetrics(context.Background(), set, cfg, s.metrics)
	require.NoError(t, err)
	s.rcv = tr.(*uprobeReceiver)
	t.Cleanup(func() { _ = s.rcv.Shutdown(context.Background()) })
	return s
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	require.NoError(t, err)
	_, err = io.Copy(out, in)
	require.NoError(t, err)
	require.NoError(t, out.Close())
}

// A file replaced at its path after it was read and before it is attached
// is read again: the probes land at the offsets of the file that is there,
// and a process of the new build gives spans with the right values.
func TestFileReplacedBeforeAttach(t *testing.T) {
	testutil.RequireRoot(t)
	old, replacement := testutil.BuildDemo(t, "-O0"), testutil.BuildDemo(t, "-O2")
	path := filepath.Join(t.TempDir(), "demo")
	copyFile(t, old.Program, path)
	next := path + ".new"
	copyFile(t, replacement.Program, next)

	s := created(t, []config.Target{{Path: path, Spans: []config.Span{{
		Name: "work", Function: "work", Attributes: map[string]string{"n": "arg0", "label": "arg1:string"},
	}}}})
	var read []procfs.FileVersion
	s.rcv.beforeAttach = func(plan *plan.Plan) {
		read = append(read, plan.Files[0].ID)
		if len(read) == 1 {
			require.NoError(t, os.Rename(next, path), "a package upgrade: a new inode at the path")
		}
	}
	require.NoError(t, s.rcv.Start(context.Background(), componenttest.NewNopHost()))
	require.Len(t, read, 2, "read again after the file changed")
	assert.NotEqual(t, read[0], read[1])

	const n = 20
	demo := testutil.StartDemo(t, path)
	demo.Run(n)
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	spans := allSpans(s.traces)
	require.Len(t, spans, n)
	for _, sp := range spans {
		i := attrInt(t, sp.Attributes(), "n")
		assert.Equal(t, fmt.Sprintf("SELECT %d FROM demo", i), attrStr(t, sp.Attributes(), "label"))
	}
}

// A target that is not a regular file (a FIFO here, which would block an
// open forever) is refused at once.
func TestSpecialFileTarget(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	cfg := createDefaultConfig()
	cfg.Targets = []config.Target{{Path: fifo, Counters: config.CountersOf("uprobe:main")}}
	r, err := NewFactory().CreateMetrics(context.Background(), receivertest.NewNopSettings(metadata.Type), cfg, consumertest.NewNop())
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- r.Start(context.Background(), componenttest.NewNopHost()) }()
	select {
	case err := <-done:
		require.Error(t, err)
		assert.Contains(t, err.Error(), "target "+fifo+": not a regular file (a FIFO)")
	case <-time.After(10 * time.Second):
		t.Fatal("Start blocks on a FIFO")
	}
	require.NoError(t, r.Shutdown(context.Background()))
}

// statusRecorder is a host that keeps the status events it is given.
type statusRecorder struct {
	component.Host
	mu     sync.Mutex
	events []*componentstatus.Event
}

func (h *statusRecorder) Report(ev *componentstatus.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, ev)
}

func (h *statusRecorder) statuses() []componentstatus.Status {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []componentstatus.Status
	for _, ev := range h.events {
		out = append(out, ev.Status())
	}
	return out
}

// The status of the shared instance reaches the host of each pipeline that
// started it, also one that started it after the status changed; refusals
// of metrics count like refusals of spans, and permanent ones are permanent.
func TestStatusReachesEveryPipeline(t *testing.T) {
	r, err := newReceiver(createDefaultConfig(), receivertest.NewNopSettings(metadata.Type), func() {})
	require.NoError(t, err)
	tracesHost := &statusRecorder{Host: componenttest.NewNopHost()}
	metricsHost := &statusRecorder{Host: componenttest.NewNopHost()}
	r.hosts.add(tracesHost)
	r.health(consumererror.NewPermanent(fmt.Errorf("refused")))
	r.hosts.add(metricsHost) // started later: gets the last status
	r.health(nil)
	r.health(fmt.Errorf("busy"))
	want := []componentstatus.Status{componentstatus.StatusPermanentError, componentstatus.StatusOK, componentstatus.StatusRecoverableError}
	assert.Equal(t, want, tracesHost.statuses())
	assert.Equal(t, want, metricsHost.statuses())
}

// A metrics pipeline that refuses is reported like a traces pipeline that
// refuses.
func TestMetricsRefusalIsReported(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	cfg := createDefaultConfig()
	cfg.Targets = []config.Target{{Path: b.Program, Counters: config.CountersOf("usdt:demo:tick")}}
	host := &statusRecorder{Host: componenttest.NewNopHost()}
	r, err := NewFactory().CreateMetrics(context.Background(), receivertest.NewNopSettings(metadata.Type), cfg,
		consumertest.NewErr(consumererror.NewPermanent(fmt.Errorf("never"))))
	require.NoError(t, err)
	require.NoError(t, r.Start(context.Background(), host))
	require.NoError(t, r.Shutdown(context.Background())) // the final snapshot is refused
	assert.Contains(t, host.statuses(), componentstatus.StatusPermanentError)
}

// After the wall clock steps (NTP, a VM resume), spans built afterwards
// carry the new time, not the offset taken at Start.
func TestWallClockFollowed(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	demo := testutil.StartDemo(t, b.Program)
	s := created(t, []config.Target{{Path: b.Program, Spans: []config.Span{{Name: "work", Function: "work"}}}})
	var mu sync.Mutex
	var shift int64
	real := s.rcv.clockOffset
	s.rcv.clockOffset = func() (int64, error) {
		off, err := real()
		mu.Lock()
		defer mu.Unlock()
		return off + shift, err
	}
	s.rcv.clockEvery = 0 // measure at every drain
	require.NoError(t, s.rcv.Start(context.Background(), componenttest.NewNopHost()))

	demo.Run(1)
	require.Eventually(t, func() bool { return s.traces.SpanCount() == 1 }, 10*time.Second, time.Millisecond)
	mu.Lock()
	shift = int64(time.Hour)
	mu.Unlock()
	demo.Run(1)
	require.Eventually(t, func() bool { return s.traces.SpanCount() == 2 }, 10*time.Second, time.Millisecond)
	require.NoError(t, s.rcv.Shutdown(context.Background()))

	var starts []time.Time
	for _, td := range s.traces.AllTraces() {
		for i := range td.ResourceSpans().Len() {
			ss := td.ResourceSpans().At(i).ScopeSpans().At(0).Spans()
			for k := range ss.Len() {
				starts = append(starts, ss.At(k).StartTimestamp().AsTime())
			}
		}
	}
	require.Len(t, starts, 2)
	now := time.Now()
	assert.WithinDuration(t, now, starts[0], time.Minute, "before the step")
	assert.WithinDuration(t, now.Add(time.Hour), starts[1], time.Minute, "after the step")
}
