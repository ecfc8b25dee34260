//go:build e2e

package jaegertest

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

// jaegerBin returns $JAEGER_BIN, or skips the test (fails it in CI).
func jaegerBin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("JAEGER_BIN")
	if bin == "" {
		testutil.SkipOrFail(t, "JAEGER_BIN is not set: run make test-jaeger")
	}
	return bin
}

// TestJaegerSmoke runs traceapp against Jaeger, without the collector, and
// reads its span back.
func TestJaegerSmoke(t *testing.T) {
	bin := jaegerBin(t)
	j := Start(t, bin)
	demo := testutil.BuildDemo(t, "-O2")
	app := BuildTraceapp(t)

	res := RunTraceapp(t, app, j.OTLPGRPC, demo.Program)
	require.Len(t, res.TraceID, 32)
	require.Len(t, res.SpanID, 16)
	require.Positive(t, res.DemoPID)
	require.Less(t, res.StartUnixNano, res.EndUnixNano)

	tr := j.WaitTrace(t, res.TraceID, 1, 30*time.Second)
	assert.Equal(t, res.TraceID, tr.TraceID)
	require.Len(t, tr.Spans, 1, "%s", tr)
	s := tr.Spans[0]
	assert.Equal(t, res.TraceID, s.TraceID)
	assert.Equal(t, res.SpanID, s.SpanID)
	assert.Equal(t, "GET /checkout", s.OperationName)
	assert.Equal(t, "traceapp", s.ServiceName)
	assert.Equal(t, "server", s.Kind())
	assert.Empty(t, s.ParentSpanID(), "the server span is the root")
	assert.Equal(t, "GET", s.Tags["http.request.method"])
	// Jaeger keeps microseconds.
	assert.Equal(t, res.StartUnixNano/1000, s.Start.UnixMicro())
	assert.Equal(t, (res.EndUnixNano-res.StartUnixNano)/1000, s.Duration.Microseconds())
	got, ok := tr.Span(res.SpanID)
	assert.True(t, ok)
	assert.Equal(t, s, got)
	assert.Len(t, tr.SpansNamed("GET /checkout"), 1)

	services, err := j.Services()
	require.NoError(t, err)
	assert.Equal(t, []string{"traceapp"}, services)

	_, err = j.Trace(t, "0123456789abcdef0123456789abcdef")
	assert.ErrorIs(t, err, ErrNotFound)
}

// TestDecode checks the conversion of the query API's JSON, without Jaeger.
func TestDecode(t *testing.T) {
	const body = `{"traceID":"ad2e50b4ac1e6d7","spans":[
	 {"traceID":"ad2e50b4ac1e6d7","spanID":"22788bafe6751c","operationName":"query",
	  "references":[{"refType":"CHILD_OF","traceID":"ad2e50b4ac1e6d7","spanID":"9922788bafe6751c"}],
	  "startTime":1795321150181023,"duration":145,
	  "tags":[{"key":"span.kind","type":"string","value":"client"},
	          {"key":"n","type":"int64","value":9007199254740993},
	          {"key":"f","type":"float64","value":1.5},
	          {"key":"ok","type":"bool","value":true},
	          {"key":"raw","type":"binary","value":"AAE="}],
	  "logs":[],"processID":"p2","warnings":null}],
	 "processes":{"p2":{"serviceName":"demo","tags":[{"key":"process.pid","type":"int64","value":42}]}},
	 "warnings":null}`
	var jt jsonTrace
	dec := json.NewDecoder(strings.NewReader(body))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&jt))
	tr, err := jt.convert()
	require.NoError(t, err)
	assert.Equal(t, strings.Repeat("0", 17)+"ad2e50b4ac1e6d7", tr.TraceID)
	require.Len(t, tr.Spans, 1)
	s := tr.Spans[0]
	assert.Equal(t, "0022788bafe6751c", s.SpanID)
	assert.Equal(t, "9922788bafe6751c", s.ParentSpanID())
	assert.Equal(t, "client", s.Kind())
	assert.Equal(t, "demo", s.ServiceName)
	assert.Equal(t, map[string]any{"process.pid": int64(42)}, s.ProcessTags)
	assert.Equal(t, map[string]any{
		"span.kind": "client", "n": int64(9007199254740993), "f": 1.5, "ok": true, "raw": []byte{0, 1},
	}, s.Tags)
	assert.Equal(t, time.UnixMicro(1795321150181023), s.Start)
	assert.Equal(t, 145*time.Microsecond, s.Duration)
	assert.Equal(t, s.Start.Add(145*time.Microsecond), s.End())
}
