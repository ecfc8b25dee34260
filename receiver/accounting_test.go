package receiver

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
	"github.com/otel-uprobe/uprobereceiver/receiver/internal/metadatatest"
)

// gate holds the receiver's drain goroutine while it is shut.
type gate struct {
	mu   sync.Mutex
	open chan struct{}
}

func newGate() *gate { return &gate{open: make(chan struct{})} }

// wait returns when the gate opens or ctx (the drain's) ends.
func (g *gate) wait(ctx context.Context) {
	g.mu.Lock()
	ch := g.open
	g.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
	}
}

func (g *gate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

// startGated starts a receiver on cfg whose drains wait for g (nil: none).
func startGated(t *testing.T, cfg *Config, g *gate) started {
	t.Helper()
	require.NoError(t, cfg.Validate())
	s := started{traces: new(consumertest.TracesSink), metrics: new(consumertest.MetricsSink), telemetry: componenttest.NewTelemetry()}
	t.Cleanup(func() { require.NoError(t, s.telemetry.Shutdown(context.Background())) })
	f := NewFactory()
	set := metadatatest.NewSettings(s.telemetry)
	tr, err := f.CreateTraces(context.Background(), set, cfg, s.traces)
	require.NoError(t, err)
	_, err = f.CreateMetrics(context.Background(), set, cfg, s.metrics)
	require.NoError(t, err)
	s.rcv = tr.(*uprobeReceiver)
	if g != nil {
		s.rcv.drainGate = g.wait
		t.Cleanup(g.release)
	}
	require.NoError(t, tr.Start(context.Background(), componenttest.NewNopHost()))
	t.Cleanup(func() { _ = s.rcv.Shutdown(context.Background()) })
	return s
}

// buildSession builds a program whose session() span opens as soon as it
// starts and closes at "end"; "call N" makes N call() spans inside it. It
// stays until "quit".
func buildSession(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "session.c")
	require.NoError(t, os.WriteFile(src, []byte(`#include <stdio.h>
#include <string.h>
__attribute__((noinline)) int call(int i) { asm volatile("" ::: "memory"); return i * 2; }
__attribute__((noinline)) int session(void) {
	char line[64];
	int n, s = 0;
	puts("ready");
	fflush(stdout);
	while (fgets(line, sizeof line, stdin)) {
		if (sscanf(line, "call %d", &n) == 1) {
			for (int i = 0; i < n; i++)
				s += call(i);
			printf("called %d\n", n);
			fflush(stdout);
		} else if (strncmp(line, "end", 3) == 0) {
			break;
		}
	}
	return s;
}
int main(void) {
	char line[64];
	session();
	puts("ended");
	fflush(stdout);
	while (fgets(line, sizeof line, stdin))
		if (strncmp(line, "quit", 4) == 0)
			break;
	return 0;
}
`), 0o644))
	bin := filepath.Join(dir, "session")
	testutil.Gcc(t, dir, "-O2", "-o", bin, src)
	return bin
}

// A process chosen by a selector opens a span while it is pending (the
// receiver has not read its exec yet) and closes it after it was decided,
// and goes on running: the span is counted in uprobe.span.duration and
// delivered, once each. (Its count waited in the pending counters, taken
// when the process was decided, until the process exited: never, for a
// process that lives on.)
func TestSpanOpenedPendingClosedChosen(t *testing.T) {
	testutil.RequireRoot(t)
	bin := buildSession(t)
	cfg := createDefaultConfig()
	cfg.Targets = []config.Target{{
		Path: bin, Process: &procfs.Selector{Executable: filepath.Base(bin)},
		Spans: []config.Span{{Name: "session", Function: "session"}, {Name: "call", Function: "call"}},
	}}
	g := newGate()
	s := startGated(t, cfg, g)

	p := testutil.StartProgram(t, bin, "ready") // session() is open, the process pending
	mask, _, ok := s.rcv.tracer.ProcessMask(uint32(p.PID))
	require.True(t, ok)
	require.NotZero(t, mask&(1<<bpfobj.ProcPendingBit), "pending until its exec record is read")
	p.Ask("call 3", "called 3") // pending spans
	g.release()
	require.Eventually(t, func() bool {
		mask, _, ok := s.rcv.tracer.ProcessMask(uint32(p.PID))
		return ok && mask&(1<<bpfobj.ProcPendingBit) == 0
	}, 10*time.Second, 5*time.Millisecond, "decided")
	p.Ask("call 2", "called 2")
	p.Ask("end", "ended") // session() closes, chosen
	require.Eventually(t, func() bool { return s.traces.SpanCount() == 6 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, s.rcv.Shutdown(context.Background())) // the process still runs

	names := map[string]int{}
	for _, sp := range allSpans(s.traces) {
		names[sp.Name()]++
	}
	assert.Equal(t, map[string]int{"session": 1, "call": 5}, names)
	last := s.metrics.AllMetrics()[len(s.metrics.AllMetrics())-1]
	d := durations(last)
	assert.Equal(t, uint64(1), d["session"].Count(), "the span opened pending and closed chosen is counted")
	assert.Equal(t, uint64(5), d["call"].Count())
}
