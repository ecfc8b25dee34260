//go:build e2e

package jaegertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

// publish starts a span of the application's SDK (tracer), has the
// thread-context fixture p publish it as its thread's context while it
// makes n calls of outer() (each calling inner() twice), and ends it.
func publish(t *testing.T, tracer trace.Tracer, p *testutil.Program, name string, n int) trace.SpanContext {
	t.Helper()
	_, span := tracer.Start(context.Background(), name, trace.WithSpanKind(trace.SpanKindServer))
	sc := span.SpanContext()
	p.Ask(fmt.Sprintf("pub %s %s %d %d", sc.TraceID(), sc.SpanID(), sc.TraceFlags(), n), "pub ")
	span.End()
	return sc
}

// TestThreadContextInJaeger is the end-to-end check of thread contexts
// (OTEP 4947): an application whose SDK publishes its active span through
// otel_thread_ctx_v1 (the fixture testdata/threadctx, its writer in a
// TLSDESC library) calls the traced functions under a span the test starts
// with the OpenTelemetry Go SDK and exports to Jaeger; the collector built
// by make build traces the application with no carrier configured. Jaeger
// must show one trace: the application's span, the probe spans of outer()
// under it, and those of inner() under outer().
func TestThreadContextInJaeger(t *testing.T) {
	testutil.RequireRoot(t)
	jaegerBin, collectorBin := os.Getenv("JAEGER_BIN"), os.Getenv("OTELCOL_UPROBE_BIN")
	if jaegerBin == "" || collectorBin == "" {
		testutil.SkipOrFail(t, "JAEGER_BIN and OTELCOL_UPROBE_BIN are not set: run make test-jaeger")
	}
	j := Start(t, jaegerBin)
	app := testutil.BuildThreadCtx(t, "gnu2")
	p := testutil.StartProgram(t, app, "ready")
	testutil.StartCollector(t, collectorBin, testutil.Testdata("jaeger", "threadctx.yaml"),
		"UPROBE_CTXAPP="+app, "JAEGER_OTLP_GRPC="+j.OTLPGRPC)

	exp, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpoint(j.OTLPGRPC), otlptracegrpc.WithInsecure())
	require.NoError(t, err)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", "checkout"))))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracer := tp.Tracer("jaegertest")

	// The receiver learns how to reach the process's variable when the
	// first probe span opens in it: publish warm-up spans, one call each,
	// until one shows with its probe spans in Jaeger.
	warm := false
	for attempt := 0; attempt < 30 && !warm; attempt++ {
		sc := publish(t, tracer, p, "warm-up", 1)
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			tr, err := j.Trace(t, sc.TraceID().String())
			if err != nil && !errors.Is(err, ErrNotFound) {
				require.NoError(t, err)
			}
			if err == nil && len(tr.SpansNamed("outer")) == 1 {
				warm = true
				break
			}
		}
	}
	require.True(t, warm, "no probe span joined a published context")

	const n = 5
	sc := publish(t, tracer, p, "GET /work", n)
	want := 1 + 3*n
	tr := j.WaitTrace(t, sc.TraceID().String(), want, 60*time.Second)
	require.Len(t, tr.Spans, want, "one trace holds the application's span and the probe spans:\n%s", tr)

	root, ok := tr.Span(sc.SpanID().String())
	require.True(t, ok, "the application's span is in the trace:\n%s", tr)
	assert.Equal(t, "GET /work", root.OperationName)
	assert.Equal(t, "checkout", root.ServiceName)
	assert.Empty(t, root.ParentSpanID())

	outers := tr.SpansNamed("outer")
	require.Len(t, outers, n)
	seen := map[int64]bool{}
	for _, o := range outers {
		assert.Equal(t, "ctxapp", o.ServiceName)
		assert.Equal(t, sc.SpanID().String(), o.ParentSpanID(), "outer() is a child of the application's span")
		i, _ := o.Tags["i"].(int64)
		seen[i] = true
		// Jaeger keeps microseconds: an end may move by one.
		assert.False(t, o.Start.Before(root.Start), "outer starts inside the application's span")
		assert.False(t, o.End().After(root.End().Add(time.Microsecond)), "outer ends inside the application's span")
	}
	assert.Len(t, seen, n, "one outer span per call")
	inners := tr.SpansNamed("inner")
	require.Len(t, inners, 2*n)
	for _, in := range inners {
		parent, ok := tr.Span(in.ParentSpanID())
		require.True(t, ok)
		assert.Equal(t, "outer", parent.OperationName, "inner() stays under its probe parent")
	}
}
