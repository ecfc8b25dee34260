package testutil

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// FloorBatch builds, with pdata alone, one ResourceSpans of count spans
// numbered from base, of the shape the receiver delivers in the
// benchmark's collector measurement: a resource with the receiver's five
// resource attributes, its scope, and spans with a name, kind, trace and
// span ids, start and end times and three integer attributes (thread.id
// and two fetched values). It is the benchmark's pdata floor
// (harness/bench) and BenchmarkReadBuild's (internal/tracer); the
// spanfloor receiver, a module of its own, builds the same, and both are
// checked against harness/bench/testdata/floor-batch.json.
func FloorBatch(base, count int) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	ra := rs.Resource().Attributes()
	ra.EnsureCapacity(5)
	ra.PutStr("service.name", "workload")
	ra.PutInt("process.pid", 4242)
	ra.PutStr("process.executable.path", "/tmp/uprobe-bench/workload")
	ra.PutStr("process.executable.build_id.gnu", "7084cabafaec7c1efec916d4187b63f7808e1ee8")
	ra.PutStr("host.name", "bench-host")
	sc := rs.ScopeSpans().AppendEmpty()
	sc.Scope().SetName("github.com/otel-uprobe/uprobereceiver")
	sc.Scope().SetVersion("0.1.0")
	ss := sc.Spans()
	ss.EnsureCapacity(count)
	for j := range count {
		n := uint64(base + j)
		sp := ss.AppendEmpty()
		sp.SetName("probed")
		sp.SetKind(ptrace.SpanKindInternal)
		sp.SetTraceID(pcommon.TraceID{byte(n), byte(n >> 8), byte(n >> 16), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13})
		sp.SetSpanID(pcommon.SpanID{byte(n), byte(n >> 8), byte(n >> 16), 1, 2, 3, 4, 5})
		sp.SetStartTimestamp(pcommon.Timestamp(1e18 + 1000*n))
		sp.SetEndTimestamp(pcommon.Timestamp(1e18 + 1000*n + 700))
		a := sp.Attributes()
		a.EnsureCapacity(3)
		a.PutInt("thread.id", 4243)
		a.PutInt("a", int64(n))
		a.PutInt("ret", int64(n^1))
	}
	return td
}
