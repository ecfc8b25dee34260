package spans

import (
	"strings"
	"testing"

	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/target"
)

// BenchmarkBuild converts a batch of 1024 spans with three attributes each
// (an int, a 40-byte string and a hex value).
func BenchmarkBuild(b *testing.B) {
	const batch = 1024
	plan := withFiles(&target.Plan{
		Targets: []target.Target{{Path: "/usr/bin/app", ServiceName: "app", Executable: true}},
		Spans:   []target.Span{{Target: 0, Name: "request", Entry: 0, Exit: 1}},
		Sites: []target.Site{
			{Probe: 0, EntrySpan: 0, ExitSpan: -1, Entry: []target.Fetch{
				intFetch("id", sType(8)),
				strFetch("path", 64),
			}},
			{Probe: 1, EntrySpan: -1, ExitSpan: 0, Exit: []target.Fetch{
				intFetch("ret", xType(8)),
			}},
		},
	})
	str40 := strings.Repeat("/api/v1/", 5)
	if len(str40) != 40 {
		b.Fatal("want a 40-byte string")
	}
	in := make([]event.Span, batch)
	for i := range in {
		start := uint64(1000 + 10*i)
		in[i] = event.Span{
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
