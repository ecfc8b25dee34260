//go:build e2e

package jaegertest

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

// TestProbeSpansInJaeger is the end-to-end test of trace-context
// correlation: an application instrumented with the OpenTelemetry Go SDK
// handles a request and calls into the demo program, passing its
// traceparent as a USDT argument and in a sqlcommenter comment; the
// collector built by make build traces the demo; both export to one Jaeger,
// whose API must then show a single trace with the probe spans under the
// application's span.
func TestProbeSpansInJaeger(t *testing.T) {
	testutil.RequireRoot(t)
	jaegerBin, collectorBin := os.Getenv("JAEGER_BIN"), os.Getenv("OTELCOL_UPROBE_BIN")
	if jaegerBin == "" || collectorBin == "" {
		testutil.SkipOrFail(t, "JAEGER_BIN and OTELCOL_UPROBE_BIN are not set: run make test-jaeger")
	}
	j := Start(t, jaegerBin)
	demo := testutil.BuildDemo(t, "-O2")
	testutil.StartCollector(t, collectorBin, testutil.Testdata("jaeger", "collector.yaml"),
		"UPROBE_DEMO_DIR="+demo.Dir, "JAEGER_OTLP_GRPC="+j.OTLPGRPC)
	app := RunTraceapp(t, BuildTraceapp(t), j.OTLPGRPC, demo.Program, "-wait-probes")

	// The application's span, then per request: the request span and the
	// 9 spans of its query; the SQL call: the query's 9 spans.
	const want = 1 + 10 + 9
	tr := j.WaitTrace(t, app.TraceID, want, 60*time.Second)
	require.Len(t, tr.Spans, want, "one trace holds the application's and the probes' spans:\n%s", tr)

	root, ok := tr.Span(app.SpanID)
	require.True(t, ok, "the application's span is in the trace")
	assert.Equal(t, "GET /checkout", root.OperationName)
	assert.Equal(t, "traceapp", root.ServiceName)

	var underRoot []Span
	for _, sp := range tr.Spans {
		if sp.SpanID == app.SpanID {
			continue
		}
		assert.Equal(t, "demo", sp.ServiceName)
		parent, ok := tr.Span(sp.ParentSpanID())
		require.True(t, ok, "%s's parent %s is in the trace", sp.OperationName, sp.ParentSpanID())
		// Jaeger keeps microseconds: start and duration are each truncated,
		// so an end may move by one microsecond.
		assert.False(t, sp.Start.Before(parent.Start), "%s starts inside %s: %v < %v", sp.OperationName, parent.OperationName, sp.Start, parent.Start)
		assert.False(t, sp.End().After(parent.End().Add(time.Microsecond)), "%s ends inside %s: %v > %v", sp.OperationName, parent.OperationName, sp.End(), parent.End())
		if parent.SpanID == app.SpanID {
			underRoot = append(underRoot, sp)
		}
	}
	names := []string{}
	for _, sp := range underRoot {
		names = append(names, sp.OperationName)
	}
	assert.ElementsMatch(t, []string{"demo.request", "demo.query"}, names,
		"the USDT request span and the sqlcommenter query hang under the application's span")

	req := tr.SpansNamed("demo.request")
	require.Len(t, req, 1)
	assert.Equal(t, "server", req[0].Kind())
	queries := tr.SpansNamed("demo.query")
	require.Len(t, queries, 2)
	for _, q := range queries {
		switch q.ParentSpanID() {
		case req[0].SpanID:
			assert.Equal(t, "SELECT 0 FROM demo", q.Tags["db.query.text"], "the request's own query nests under it")
		case app.SpanID:
			assert.Contains(t, q.Tags["db.query.text"], "traceparent='00-"+app.TraceID+"-"+app.SpanID)
		default:
			t.Errorf("query with parent %s", q.ParentSpanID())
		}
	}
	assert.Len(t, tr.SpansNamed("recurse"), 8, "recursion nests: two queries of four levels")
	for _, w := range tr.SpansNamed("work") {
		parent, _ := tr.Span(w.ParentSpanID())
		assert.Equal(t, "demo.query", parent.OperationName)
	}
}
