package spans

import (
	"strings"
	"testing"

	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
)

// BenchmarkBuildWithContext converts a batch of 1024 spans in which every 8
// spans are a carrier span (a W3C traceparent in a sqlcommenter string) and
// 7 spans nested in it on two levels, in completion order (innermost first,
// carrier last), so 7 of 8 spans wait for their carrier within the batch.
// The attributes are those of BenchmarkBuild, to compare the two.
func BenchmarkBuildWithContext(b *testing.B) {
	const (
		batch = 1024
		group = 8
	)
	plan := withFiles(&plan.Plan{
		Targets: []plan.PlannedTarget{{Path: "/usr/bin/app", ServiceName: "app", Executable: true}},
		Spans: []plan.SpanDef{
			{Target: 0, Name: "request", Entry: 0, Exit: 1},
			{Target: 0, Name: "query", Entry: 2, Exit: 3, Kind: config.KindServer, Carrier: plan.CarrierText, CarrierKey: "sql"},
		},
		Sites: []plan.Site{
			{Probe: 0, EntrySpan: 0, ExitSpan: -1, Entry: []plan.Fetch{intFetch("id", sType(8)), strFetch("path", 64)}},
			{Probe: 1, EntrySpan: -1, ExitSpan: 0, Exit: []plan.Fetch{intFetch("ret", xType(8))}},
			{Probe: 2, EntrySpan: 1, ExitSpan: -1, Entry: []plan.Fetch{intFetch("id", sType(8)), strFetch("sql", 256)}},
			{Probe: 3, EntrySpan: -1, ExitSpan: 1, Exit: []plan.Fetch{intFetch("ret", xType(8))}},
		},
	})
	str40 := strings.Repeat("/api/v1/", 5)
	sql := "SELECT * FROM t WHERE id = $1 /*traceparent='" + tpValid + "'*/"
	// Offsets in a group: start, end, parent (-1: the carrier itself; 0 is
	// the carrier's start) in completion order.
	//
	//	C  [0, 1000]
	//	  a [10, 400]:  a1 [20, 100], a2 [110, 200], a3 [210, 300]
	//	  b [500, 900]: b1 [510, 600], b2 [610, 700]
	type node struct {
		start, end, parent uint64
		carrier            bool
	}
	order := []node{
		{20, 100, 10, false}, {110, 200, 10, false}, {210, 300, 10, false}, {10, 400, 0, false},
		{510, 600, 500, false}, {610, 700, 500, false}, {500, 900, 0, false},
		{0, 1000, 0, true},
	}
	if len(order) != group {
		b.Fatal("want groups of 8")
	}
	in := make([]event.SpanRecord, 0, batch)
	for g := 0; len(in) < batch; g++ {
		base := uint64(1_000_000 + 2000*g)
		pid, tid := 100+uint32(g%4), 100+uint32(g%16)
		for _, n := range order {
			ev := event.SpanRecord{
				StartNs: base + n.start, EndNs: base + n.end, RootStartNs: base,
				PID: pid, TID: tid, Depth: 1,
			}
			if n.carrier {
				ev.Def, ev.EntrySite, ev.ExitSite, ev.Depth = 1, 2, 3, 0
				ev.Entry = rec{}.int(uint64(g)).str(sql)
			} else {
				ev.ParentStartNs, ev.ContextStartNs = base+n.parent, base
				if n.parent != 0 {
					ev.Depth = 2
				}
				ev.Def, ev.EntrySite, ev.ExitSite = 0, 0, 1
				ev.Entry = rec{}.int(uint64(len(in))).str(str40)
			}
			ev.Exit = rec{}.int(uint64(0xdead0000 + len(in)))
			in = append(in, ev)
		}
	}
	bl := NewBuilder(Settings{
		Plan: plan, WallOffsetNs: testWallOffset, Salt: testSalt, HostName: testHostName,
		ScopeName: testScope, ScopeVersion: testVersion,
	})
	td := bl.Build(in)
	if td.SpanCount() != batch || bl.Waiting() != 0 {
		b.Fatalf("got %d spans, %d waiting", td.SpanCount(), bl.Waiting())
	}
	want := mustTraceID(b, tpTraceHex)
	rs := td.ResourceSpans()
	for i := 0; i < rs.Len(); i++ {
		ss := rs.At(i).ScopeSpans().At(0).Spans()
		for j := 0; j < ss.Len(); j++ {
			if ss.At(j).TraceID() != want {
				b.Fatalf("span %s not in the carrier's trace", ss.At(j).Name())
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = bl.Build(in)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/span")
}
