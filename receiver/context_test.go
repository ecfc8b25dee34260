package receiver

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/receiver/internal/metadatatest"
)

// contextTargets traces the demo's requests and queries with text carriers.
func contextTargets(program string) []config.Target {
	return []config.Target{{
		Path: program,
		Spans: []config.Span{
			{
				Name: "request", Entry: "usdt:demo:request__start", Exit: "usdt:demo:request__done", Kind: "server",
				Attributes: map[string]string{"traceparent": "arg0:string"}, TraceContext: "traceparent",
			},
			{
				Name: "query", Entry: "usdt:demo:query__start", Exit: "usdt:demo:query__done",
				Attributes: map[string]string{"db.query.text": "arg0:string"}, TraceContext: "db.query.text",
			},
			{Name: "work", Function: "work", StatusError: "retval:s64 == 0"},
			{Name: "recurse", Function: "recurse"},
			{Name: "outer", Function: "outer"},
			{Name: "inner", Function: "inner"},
		},
	}}
}

func spansOfTrace(spans []flatSpan, id pcommon.TraceID) map[string][]flatSpan {
	out := map[string][]flatSpan{}
	for _, sp := range spans {
		if sp.TraceID() == id {
			out[sp.Name()] = append(out[sp.Name()], sp)
		}
	}
	return out
}

func countsOf(m map[string][]flatSpan) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		out[k] = len(v)
	}
	return out
}

var requestShape = map[string]int{"request": 1, "query": 1, "work": 1, "recurse": 4, "outer": 1, "inner": 2}

func TestTraceContextText(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	demo := testutil.StartDemo(t, b.Program)
	s := startReceiver(t, contextTargets(b.Program))

	const (
		t1, p1 = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
		t2, p2 = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
		t3, p3 = "11111111111111111111111111111111", "2222222222222222"
	)
	demo.Request("00-" + t1 + "-" + p1 + "-01")                                           // a: the whole value
	demo.SQL("SELECT * FROM orders /*traceparent='00-" + t2 + "-" + p2 + "-01'*/")        // b: sqlcommenter
	demo.Request("00-" + t3 + "-" + p3 + "-00")                                           // c: not sampled
	demo.Request("00-00000000000000000000000000000000-" + p1 + "-01")                     // d: all-zero trace id
	demo.Request("no context here")                                                       // e: missing
	demo.SQL(strings.Repeat("x", 300) + " /*traceparent='00-" + t2 + "-" + p2 + "-01'*/") // f: beyond the capture limit
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	spans := allSpans(s.traces)

	// a: the request joins the caller's trace under the caller's span, and
	// everything nested in it on the thread joins too.
	a := spansOfTrace(spans, traceID(t1))
	require.Equal(t, requestShape, countsOf(a))
	req := a["request"][0]
	assert.Equal(t, spanID(p1), req.ParentSpanID())
	assert.Equal(t, ptrace.SpanKindServer, req.Kind())
	assert.Equal(t, req.SpanID(), a["query"][0].ParentSpanID(), "a query without its own context stays under the request")
	assert.Equal(t, a["query"][0].SpanID(), a["work"][0].ParentSpanID())
	assert.Equal(t, ptrace.StatusCodeError, a["work"][0].Status().Code(), "work(0) returns 0: status_error holds")
	assert.Equal(t, "retval:s64 == 0 (value 0)", a["work"][0].Status().Message())
	assert.Equal(t, ptrace.StatusCodeUnset, req.Status().Code())

	// b: a query carrying its own context in a SQL comment.
	bq := spansOfTrace(spans, traceID(t2))
	delete(requestShape, "request")
	require.Equal(t, requestShape, countsOf(bq), "f's traceparent is past the capture limit: only b joins t2")
	assert.Equal(t, spanID(p2), bq["query"][0].ParentSpanID())

	// c: the caller did not sample its trace: nothing of it is exported.
	assert.Empty(t, spansOfTrace(spans, traceID(t3)))

	// d, e, f: no valid context: own traces, still nested.
	total := 0
	for _, sp := range spans {
		total++
		for _, p := range []pcommon.SpanID{spanID(p1), spanID(p2)} {
			if sp.ParentSpanID() == p {
				assert.Contains(t, []pcommon.TraceID{traceID(t1), traceID(t2)}, sp.TraceID(), "only valid contexts give these parents")
			}
		}
	}
	assert.Equal(t, 10+9+10+10+9, total, "a, b, d, e, f; c is dropped")

	metadatatest.AssertEqualReceiverUprobeTraceContexts(t, s.telemetry, []metricdata.DataPoint[int64]{
		{Value: 3, Attributes: attribute.NewSet(attribute.String("outcome", "found"))},
		{Value: 6, Attributes: attribute.NewSet(attribute.String("outcome", "missing"))}, // a, c, d, e, f queries and e's request
		{Value: 1, Attributes: attribute.NewSet(attribute.String("outcome", "invalid"))},
		{Value: 10, Attributes: attribute.NewSet(attribute.String("outcome", "unsampled"))},
	}, metricdatatest.IgnoreTimestamp())
}

// A binary carrier: the ids come from expressions, here the hex text inside
// the request's argument ("+3(arg0):string[33]" is the string at arg0+3).
func TestTraceContextBinary(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O0")
	demo := testutil.StartDemo(t, b.Program)
	s := startReceiver(t, []config.Target{{
		Path: b.Program,
		Spans: []config.Span{
			{
				Name: "request", Entry: "usdt:demo:request__start", Exit: "usdt:demo:request__done",
				TraceID: "+3(arg0):string[33]", ParentSpanID: "+36(arg0):string[17]",
			},
			{Name: "inner", Function: "inner"},
		},
	}})
	const tid, pid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	demo.Request(fmt.Sprintf("00-%s-%s-01", tid, pid))
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	got := spansOfTrace(allSpans(s.traces), traceID(tid))
	require.Equal(t, map[string]int{"request": 1, "inner": 2}, countsOf(got))
	assert.Equal(t, spanID(pid), got["request"][0].ParentSpanID())
	assert.Equal(t, got["request"][0].SpanID(), got["inner"][0].ParentSpanID())
	_, hasAttr := got["request"][0].Attributes().Get("trace_id")
	assert.False(t, hasAttr, "carrier ids are not attributes")
}

func traceID(h string) (id pcommon.TraceID) {
	_, _ = hex.Decode(id[:], []byte(h))
	return id
}

func spanID(h string) (id pcommon.SpanID) {
	_, _ = hex.Decode(id[:], []byte(h))
	return id
}
