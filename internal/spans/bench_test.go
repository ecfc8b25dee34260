package spans

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
)

// BenchmarkBuild converts a batch of 1024 spans with three attributes each
// (an int, a 40-byte string and a hex value).
func BenchmarkBuild(b *testing.B) {
	const batch = 1024
	plan := withFiles(&plan.Plan{
		Targets: []plan.PlannedTarget{{Path: "/usr/bin/app", ServiceName: "app", Executable: true}},
		Spans:   []plan.SpanDef{{Target: 0, Name: "request", Entry: 0, Exit: 1}},
		Sites: []plan.Site{
			{Probe: 0, EntrySpan: 0, ExitSpan: -1, Entry: []plan.Fetch{
				intFetch("id", sType(8)),
				strFetch("path", 64),
			}},
			{Probe: 1, EntrySpan: -1, ExitSpan: 0, Exit: []plan.Fetch{
				intFetch("ret", xType(8)),
			}},
		},
	})
	str40 := strings.Repeat("/api/v1/", 5)
	if len(str40) != 40 {
		b.Fatal("want a 40-byte string")
	}
	in := make([]event.SpanRecord, batch)
	for i := range in {
		start := uint64(1000 + 10*i)
		in[i] = event.SpanRecord{
			StartNs: start, EndNs: start + 5, RootStartNs: start,
			PID: 100 + uint32(i%4), TID: 100 + uint32(i%16), Def: 0, EntrySite: 0, ExitSite: 1,
			Entry: rec{}.int(uint64(i)).str(str40),
			Exit:  rec{}.int(uint64(0xdead0000 + i)),
		}
	}
	bl := NewBuilder(Settings{
		Plan: plan, WallOffsetNs: testWallOffset, Salt: testSalt, HostName: testHostName,
		ScopeName: testScope, ScopeVersion: testVersion,
	})
	if td := bl.Build(in); td.SpanCount() != batch {
		b.Fatalf("got %d spans", td.SpanCount())
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = bl.Build(in)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/span")
}

// benchShape is the span of the collector benchmark (harness/bench): one
// process, an entry and an exit integer, no parent.
func benchShape(n int) (*plan.Plan, []event.SpanRecord) {
	plan := withFiles(&plan.Plan{
		Targets: []plan.PlannedTarget{{Path: "/tmp/workload", ServiceName: "workload", Executable: true}},
		Spans:   []plan.SpanDef{{Target: 0, Name: "probed", Entry: 0, Exit: 1}},
		Sites: []plan.Site{
			{Probe: 0, EntrySpan: 0, ExitSpan: -1, Entry: []plan.Fetch{intFetch("a", sType(8))}},
			{Probe: 1, EntrySpan: -1, ExitSpan: 0, Exit: []plan.Fetch{intFetch("ret", sType(8))}},
		},
	})
	in := make([]event.SpanRecord, n)
	for i := range in {
		start := uint64(1000 + 10*i)
		in[i] = event.SpanRecord{
			StartNs: start, EndNs: start + 5, RootStartNs: start,
			PID: 100, TID: 100, Def: 0, EntrySite: 0, ExitSite: 1,
			Entry: rec{}.int(uint64(i)), Exit: rec{}.int(uint64(i) ^ 1),
		}
	}
	return plan, in
}

// BenchmarkAddShape adds the collector benchmark's spans one at a time, as
// the receiver does while it reads the ring, 1024 per output.
func BenchmarkAddShape(b *testing.B) {
	const batch = 1024
	plan, in := benchShape(batch)
	bl := NewBuilder(Settings{
		Plan: plan, WallOffsetNs: testWallOffset, Salt: testSalt, HostName: testHostName,
		ScopeName: testScope, ScopeVersion: testVersion,
	})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		bl.Begin(batch)
		for j := range in {
			bl.Add(&in[j])
		}
		benchSink = bl.End()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/span")
}

// BenchmarkPdataShape builds the same spans with pdata alone: the floor of
// BenchmarkAddShape.
func BenchmarkPdataShape(b *testing.B) {
	const batch = 1024
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		benchSink = pdataShape(batch)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/span")
}

// pdataShape builds n spans of the benchmark's shape with pdata alone.
func pdataShape(n int) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	ra := rs.Resource().Attributes()
	ra.PutStr("service.name", "workload")
	ra.PutInt("process.pid", 100)
	ra.PutStr("process.executable.path", "/tmp/workload")
	ra.PutStr("host.name", testHostName)
	sc := rs.ScopeSpans().AppendEmpty()
	sc.Scope().SetName(testScope)
	sc.Scope().SetVersion(testVersion)
	ss := sc.Spans()
	ss.EnsureCapacity(n)
	for j := 0; j < n; j++ {
		sp := ss.AppendEmpty()
		sp.SetName("probed")
		sp.SetKind(ptrace.SpanKindInternal)
		sp.SetTraceID(pcommon.TraceID{byte(j), 1})
		sp.SetSpanID(pcommon.SpanID{byte(j), 2})
		sp.SetStartTimestamp(pcommon.Timestamp(j))
		sp.SetEndTimestamp(pcommon.Timestamp(j + 5))
		a := sp.Attributes()
		a.EnsureCapacity(3)
		a.PutInt("thread.id", 100)
		a.PutInt("a", int64(j))
		a.PutInt("ret", int64(j))
	}
	return td
}

var benchSink ptrace.Traces

// Adding spans allocates no more than building the same spans with pdata
// alone: the Builder's own work (ids, decoding, grouping) allocates
// nothing per span, and integer-only spans need no text arena.
func TestAddAllocatesAsPdata(t *testing.T) {
	const batch = 256
	plan, in := benchShape(batch)
	bl := NewBuilder(Settings{
		Plan: plan, WallOffsetNs: testWallOffset, Salt: testSalt, HostName: testHostName,
		ScopeName: testScope, ScopeVersion: testVersion,
	})
	add := testing.AllocsPerRun(20, func() {
		bl.Begin(batch)
		for j := range in {
			bl.Add(&in[j])
		}
		benchSink = bl.End()
	})
	pdata := testing.AllocsPerRun(20, func() { benchSink = pdataShape(batch) })
	assert.LessOrEqual(t, add, pdata, "allocations per batch of %d", batch)
	assert.Equal(t, batch, benchSink.SpanCount())
}
