//go:build e2e

// Package distrotest runs the collector distribution built by make build
// (otelcol-uprobe) against the demo program and checks what it exports over
// OTLP/HTTP. make test-distro runs it with OTELCOL_UPROBE_BIN set.
package distrotest

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

// sink is an OTLP/HTTP endpoint that keeps what it receives.
type sink struct {
	mu      sync.Mutex
	spans   []ptrace.Span
	metrics []pmetric.Metrics
	changed chan struct{}
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.URL.Path {
	case "/v1/traces":
		req := ptraceotlp.NewExportRequest()
		if err := req.UnmarshalProto(body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rss := req.Traces().ResourceSpans()
		for i := 0; i < rss.Len(); i++ {
			sss := rss.At(i).ScopeSpans()
			for j := 0; j < sss.Len(); j++ {
				for k := 0; k < sss.At(j).Spans().Len(); k++ {
					s.spans = append(s.spans, sss.At(j).Spans().At(k))
				}
			}
		}
		resp, _ := ptraceotlp.NewExportResponse().MarshalProto()
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(resp)
	case "/v1/metrics":
		req := pmetricotlp.NewExportRequest()
		if err := req.UnmarshalProto(body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.metrics = append(s.metrics, req.Metrics())
		resp, _ := pmetricotlp.NewExportResponse().MarshalProto()
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(resp)
	default:
		http.NotFound(w, r)
		return
	}
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func (s *sink) spanCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.spans)
}

func TestDistro(t *testing.T) {
	testutil.RequireRoot(t)
	bin := os.Getenv("OTELCOL_UPROBE_BIN")
	if bin == "" {
		testutil.SkipOrFail(t, "OTELCOL_UPROBE_BIN is not set: run make test-distro")
	}
	b := testutil.BuildDemo(t, "-O2")
	demo := testutil.StartDemo(t, b.Program)

	s := &sink{changed: make(chan struct{}, 1)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })

	col := testutil.StartCollector(t, bin, testutil.Testdata("distro", "collector.yaml"),
		"UPROBE_DEMO_DIR="+b.Dir, "OTLP_ENDPOINT="+ln.Addr().String())
	require.Equal(t, [3]int{1, 1, 2}, demo.Semaphores(), "the collector raised the semaphores")

	const n = 5
	demo.Run(n)
	const want = n * (1 + 1 + 2) // query, work, 2× inner per iteration
	deadline := time.After(30 * time.Second)
	for s.spanCount() < want {
		select {
		case <-s.changed:
		case <-deadline:
			t.Fatalf("got %d spans, want %d", s.spanCount(), want)
		}
	}

	require.NoError(t, col.Stop(30*time.Second), "the collector stops cleanly on SIGTERM")
	require.Equal(t, [3]int{0, 0, 0}, demo.Semaphores(), "semaphores lowered after the collector stopped")

	s.mu.Lock()
	defer s.mu.Unlock()
	counts := map[string]int{}
	for _, sp := range s.spans {
		counts[sp.Name()]++
		if sp.Name() == "query" {
			v, ok := sp.Attributes().Get("db.query.text")
			require.True(t, ok)
			assert.True(t, strings.HasPrefix(v.Str(), "SELECT "), v.Str())
		}
	}
	assert.Equal(t, map[string]int{"query": n, "work": n, "inner": 2 * n}, counts)

	require.NotEmpty(t, s.metrics, "the final metrics snapshot was exported")
	hits := map[string]int64{}
	for _, md := range s.metrics {
		rms := md.ResourceMetrics()
		for i := 0; i < rms.Len(); i++ {
			sms := rms.At(i).ScopeMetrics()
			for j := 0; j < sms.Len(); j++ {
				for k := 0; k < sms.At(j).Metrics().Len(); k++ {
					m := sms.At(j).Metrics().At(k)
					if m.Name() != "uprobe.probe.hits" {
						continue
					}
					for p := 0; p < m.Sum().DataPoints().Len(); p++ {
						dp := m.Sum().DataPoints().At(p)
						name, _ := dp.Attributes().Get("probe.name")
						hits[name.Str()] = dp.IntValue() // cumulative: the last one wins
					}
				}
			}
		}
	}
	assert.Equal(t, int64(2*n), hits["usdt:demo:tick"])
	assert.Equal(t, int64(n), hits["usdt:demo:query__start"])
	assert.Equal(t, int64(2*n), hits["uretprobe:inner"])
}
