package tracer

import (
	"fmt"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
	"github.com/otel-uprobe/uprobereceiver/internal/spans"
)

// benchPath and benchBuildID are the benchmark workload's, as the floors
// have them (harness/bench/testdata/floor-batch.json).
const (
	benchPath    = "/tmp/uprobe-bench/workload"
	benchBuildID = "7084cabafaec7c1efec916d4187b63f7808e1ee8"
)

// benchPlan is the plan of the collector benchmark's span (harness/bench):
// one function span with an integer at entry (a) and at exit (ret).
func benchPlan() *plan.Plan {
	typ := fetch.Type{Kind: fetch.KindSigned, Size: 8}
	fetchOf := func(key string) plan.Fetch {
		return plan.Fetch{Key: key, Text: key, Base: plan.BaseRegister, Register: regs.RDI, Store: plan.StoreInt, ReadSize: 8, Value: plan.Value{Type: typ}}
	}
	return &plan.Plan{
		Targets: []plan.PlannedTarget{{Path: benchPath, ServiceName: "workload", Executable: true}},
		Files:   []plan.File{{Target: 0, Path: benchPath, SeenAs: benchPath, Executable: true, BuildID: benchBuildID}},
		Probes:  []plan.Probe{{Target: 0, Ref: "uprobe:probed"}, {Target: 0, Ref: "uretprobe:probed"}},
		Spans:   []plan.SpanDef{{Target: 0, Name: "probed", Entry: 0, Exit: 1, Function: true}},
		Sites: []plan.Site{
			{Probe: 0, EntrySpan: 0, ExitSpan: -1, Entry: []plan.Fetch{fetchOf("a")}},
			{Probe: 1, EntrySpan: -1, ExitSpan: 0, Exit: []plan.Fetch{fetchOf("ret")}},
		},
	}
}

// benchRing returns a ring reader over memory holding n span records of
// the benchmark's shape, as the engine writes them (8-byte header, entry
// and exit values, trailer), and a function that makes them unread again.
func benchRing(n int) (*ringReader, func()) {
	recLen := 16 + bpfobj.RecordTrailerSize
	stride := (8 + recLen + 7) &^ 7
	size := 1
	for size < n*stride {
		size <<= 1
	}
	data := make([]uint64, 2*size/8) // 8-byte aligned, the data "mapped twice"
	bytes := unsafe.Slice((*byte)(unsafe.Pointer(&data[0])), 2*size)
	for i := 0; i < n; i++ {
		off := i * stride
		*(*uint32)(unsafe.Pointer(&bytes[off])) = uint32(recLen)
		rec := bytes[off+8 : off+8+recLen]
		*(*uint64)(unsafe.Pointer(&rec[0])) = uint64(i)
		*(*uint64)(unsafe.Pointer(&rec[8])) = uint64(i) ^ 1
		tr := (*bpfobj.SpanRecord)(unsafe.Pointer(&rec[16]))
		start := uint64(1_000_000 + 1000*i)
		*tr = bpfobj.SpanRecord{
			StartNs: start, EndNs: start + 700, RootStartNs: start, ProcessStartNs: 5, ExecId: 1,
			Pid: 4242, Tid: 4243, Span: 0, EntrySite: 0, ExitSite: 1, EntryLen: 8, ExitLen: 8, Kind: bpfobj.RecordKindSpan,
		}
	}
	var cons, prod uint64
	prod = uint64(n * stride)
	r := &ringReader{data: bytes, mask: uint64(size - 1), consumerPos: &cons, producerPos: &prod}
	return r, func() { cons = 0 }
}

// building passes the records read to a span builder, as the receiver's
// drain does.
type building struct{ b *spans.Builder }

func (h building) Span(ev *event.SpanRecord) { h.b.Add(ev) }
func (h building) Process(*event.Process)    {}

var readSink ptrace.Traces

func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkReadBuild reads the collector benchmark's spans from a ring in
// memory and builds them, 1024 per output, as the receiver's drain does;
// BenchmarkReadBuild/pdata builds the same spans with pdata alone
// (testutil.FloorBatch, the benchmark's floor); BenchmarkReadBuild/read
// reads and decodes them without building. The difference of the first
// two is the receiver's own work per span (ring reading, decoding, ids),
// without the kernel and the pipeline. Run with GOMAXPROCS=1 and compare
// cpu-ns/span (the process's CPU time, garbage collection included).
func BenchmarkReadBuild(b *testing.B) {
	const batch = 1024
	b.Run("receiver", func(b *testing.B) {
		ring, unread := benchRing(batch)
		t := &Tracer{plan: benchPlan(), ring: ring}
		bl := spans.NewBuilder(spans.Settings{Plan: t.plan, HostName: "bench-host", ScopeName: "github.com/otel-uprobe/uprobereceiver", ScopeVersion: "0.1.0"})
		h := building{bl}
		b.ReportAllocs()
		cpu := cpuNow()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			unread()
			bl.Begin(batch)
			if n, bad := t.Read(batch, h); n != batch || bad != 0 {
				b.Fatalf("read %d records, %d malformed", n, bad)
			}
			readSink = bl.End()
		}
		b.ReportMetric(float64(cpuNow()-cpu)/float64(b.N*batch), "cpu-ns/span")
	})
	b.Run("read", func(b *testing.B) {
		// Reading and decoding alone, the spans not built: the ring's
		// share of the receiver's own work.
		ring, unread := benchRing(batch)
		t := &Tracer{plan: benchPlan(), ring: ring}
		var h discarding
		b.ReportAllocs()
		cpu := cpuNow()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			unread()
			if n, bad := t.Read(batch, &h); n != batch || bad != 0 {
				b.Fatalf("read %d records, %d malformed", n, bad)
			}
		}
		b.ReportMetric(float64(cpuNow()-cpu)/float64(b.N*batch), "cpu-ns/span")
	})
	b.Run("pdata", func(b *testing.B) {
		b.ReportAllocs()
		cpu := cpuNow()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			readSink = testutil.FloorBatch(i*batch, batch)
		}
		b.ReportMetric(float64(cpuNow()-cpu)/float64(b.N*batch), "cpu-ns/span")
	})
}

// TestReadBuildShapeMatchesFloor: the receiver builds the benchmark's
// records into spans of the floors' shape (the collector floor is "the
// same spans from a receiver that only builds them"): one resource with
// the same attributes of the same types, the same scope, and spans with
// the same fields set and the same attributes of the same types. Values
// differ: ids are derived, times are the engine's.
func TestReadBuildShapeMatchesFloor(t *testing.T) {
	ring, _ := benchRing(3)
	tr := &Tracer{plan: benchPlan(), ring: ring}
	bl := spans.NewBuilder(spans.Settings{Plan: tr.plan, HostName: "bench-host", ScopeName: "github.com/otel-uprobe/uprobereceiver", ScopeVersion: "0.1.0"})
	bl.Begin(3)
	n, bad := tr.Read(3, building{bl})
	require.Equal(t, 3, n)
	require.Zero(t, bad)
	got := bl.End()
	// The floors' batch itself rather than its golden file, which the
	// arm64 VM does not have (harness/bench checks the two are one).
	assert.Equal(t, shapeOf(testutil.FloorBatch(7, 3)), shapeOf(got))
}

// shapeOf describes traces without their values: per resource its
// attributes' keys and types and its scope, per span its name, kind,
// which ids and times are set, its flags, status, attributes' keys and
// types, events and links.
func shapeOf(td ptrace.Traces) []string {
	attrs := func(m pcommon.Map) string {
		var b strings.Builder
		for k, v := range m.All() {
			fmt.Fprintf(&b, "%s:%s ", k, v.Type())
		}
		return b.String()
	}
	var out []string
	for _, rs := range td.ResourceSpans().All() {
		out = append(out, "resource "+attrs(rs.Resource().Attributes()))
		for _, ss := range rs.ScopeSpans().All() {
			out = append(out, "scope "+ss.Scope().Name()+" "+ss.Scope().Version())
			for _, sp := range ss.Spans().All() {
				out = append(out, fmt.Sprintf("span %s %s trace:%v span:%v parent:%v start:%v end:%v flags:%d status:%s/%q events:%d links:%d attrs:%s",
					sp.Name(), sp.Kind(), !sp.TraceID().IsEmpty(), !sp.SpanID().IsEmpty(), !sp.ParentSpanID().IsEmpty(),
					sp.StartTimestamp() != 0, sp.EndTimestamp() > sp.StartTimestamp(), sp.Flags(), sp.Status().Code(), sp.Status().Message(),
					sp.Events().Len(), sp.Links().Len(), attrs(sp.Attributes())))
			}
		}
	}
	return out
}

// discarding counts the records Read passes on.
type discarding struct{ spans int }

func (d *discarding) Span(*event.SpanRecord) { d.spans++ }
func (d *discarding) Process(*event.Process) {}

// recording keeps the records Read passes on.
type recording struct{ spans []event.SpanRecord }

func (r *recording) Span(ev *event.SpanRecord) { r.spans = append(r.spans, *ev) }
func (r *recording) Process(*event.Process)    {}

// TestReadFillsEveryField: Read fills the record it passes on field by
// field (a composite literal is built aside and copied whole): every field
// of event.SpanRecord comes from the engine's record, and none keeps the
// previous record's value.
func TestReadFillsEveryField(t *testing.T) {
	assert.Equal(t, 20, reflect.TypeOf(event.SpanRecord{}).NumField(),
		"event.SpanRecord changed: Read fills it field by field, fill the new field there and here")
	ring, _ := benchRing(2)
	pl := benchPlan()
	pl.Spans = append(pl.Spans, plan.SpanDef{Target: 0, Name: "other", Entry: 0, Exit: 1})
	pl.Sites = append(pl.Sites, pl.Sites...)
	rec := (*bpfobj.SpanRecord)(unsafe.Pointer(&ring.data[8+16]))
	*rec = bpfobj.SpanRecord{
		StartNs: 1, EndNs: 2, ParentStartNs: 3, RootStartNs: 4, ContextStartNs: 5, Owner: 6, ProcessStartNs: 7, ExecId: 8,
		Pid: 9, Tid: 10, Span: 1, EntrySite: 2, ExitSite: 3, EntryLen: 8, ExitLen: 8, Depth: 11,
		Flags: bpfobj.RecordTruncated | bpfobj.RecordPending, EntryFailed: 12, ExitFailed: 13, Kind: bpfobj.RecordKindSpan,
	}
	var got recording
	n, bad := (&Tracer{plan: pl, ring: ring}).Read(10, &got)
	require.Equal(t, 2, n)
	require.Zero(t, bad)
	first := got.spans[0]
	assert.Equal(t, []byte{0, 0, 0, 0, 0, 0, 0, 0}, first.Entry)
	assert.Equal(t, []byte{1, 0, 0, 0, 0, 0, 0, 0}, first.Exit)
	first.Entry, first.Exit = nil, nil
	assert.Equal(t, event.SpanRecord{
		StartNs: 1, EndNs: 2, ParentStartNs: 3, RootStartNs: 4, ContextStartNs: 5, Owner: 6,
		Image: event.Image{StartNs: 7, ExecID: 8}, PID: 9, TID: 10, Def: 1, EntrySite: 2, ExitSite: 3, Depth: 11,
		Truncated: true, Pending: true, EntryFailed: 12, ExitFailed: 13,
	}, first)
	second := got.spans[1]
	second.Entry, second.Exit = nil, nil
	assert.Equal(t, event.SpanRecord{
		StartNs: 1_001_000, EndNs: 1_001_700, RootStartNs: 1_001_000, Image: event.Image{StartNs: 5, ExecID: 1},
		PID: 4242, TID: 4243, Def: 0, EntrySite: 0, ExitSite: 1,
	}, second, "nothing of the first record stays")
}
