package spans

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
)

// Span definition ids of ctxPlan; each has the site of the same id, used
// for both its entry and its exit.
const (
	cdServer      = iota // text carrier, key "traceparent" (entry string), kind server
	cdQuery              // text carrier, key "sql" (entry string, sqlcommenter), kind client
	cdWork               // no carrier
	cdRPCRaw             // binary carrier: bytes[16] and bytes[8] hidden entry fetches
	cdRPCText            // binary carrier: string hidden entry fetches (hex text)
	cdLib                // no carrier, in the shared library target
	cdStatus             // no carrier, status_error "retval:s64 < 0"
	cdExitCarrier        // text carrier whose key is an exit attribute
	cdCount
)

// The contexts of the tests: A and B (the W3C examples), and their ids.
const (
	ctxTraceA  = "0af7651916cd43dd8448eb211c80319c"
	ctxParentA = "b7ad6b7169203331"
	ctxTraceB  = tpTraceHex
	ctxParentB = tpParentHex
	ctxTraceC  = "11111111111111111111111111111111"
	ctxParentC = "2222222222222222"
)

var (
	tpA         = tp("00", ctxTraceA, ctxParentA, "01")
	tpB         = tp("00", ctxTraceB, ctxParentB, "01")
	tpC         = tp("00", ctxTraceC, ctxParentC, "03")
	tpUnsampled = tp("00", ctxTraceA, ctxParentA, "00")
	tpInvalid   = tp("ff", ctxTraceB, ctxParentB, "01")
)

func hiddenFetch(f plan.Fetch, role plan.Role, key string) plan.Fetch {
	f.Role, f.Key = role, key
	return f
}

func statusComparison(t testing.TB) *config.Comparison {
	t.Helper()
	c, err := config.ParseComparison("retval:s64 < 0")
	require.NoError(t, err)
	return &c
}

func ctxPlan(t testing.TB) *plan.Plan {
	t.Helper()
	site := func(def int, entry, exit []plan.Fetch) plan.Site {
		return plan.Site{Probe: def, EntrySpan: def, ExitSpan: def, Entry: entry, Exit: exit}
	}
	p := &plan.Plan{
		Targets: []plan.PlannedTarget{
			{Path: testAppPath, ServiceName: "app", Executable: true},
			{Path: "/usr/lib/libfoo.so.1", ServiceName: "libfoo", Executable: false},
		},
		Spans: []plan.SpanDef{
			cdServer:      {Target: 0, Name: "server", Kind: config.KindServer, Carrier: plan.CarrierText, CarrierKey: "traceparent"},
			cdQuery:       {Target: 0, Name: "query", Kind: config.KindClient, Carrier: plan.CarrierText, CarrierKey: "sql"},
			cdWork:        {Target: 0, Name: "work"},
			cdRPCRaw:      {Target: 0, Name: "rpc-raw", Kind: config.KindServer, Carrier: plan.CarrierBinary},
			cdRPCText:     {Target: 0, Name: "rpc-text", Kind: config.KindConsumer, Carrier: plan.CarrierBinary},
			cdLib:         {Target: 1, Name: "lib"},
			cdStatus:      {Target: 0, Name: "status", Status: statusComparison(t)},
			cdExitCarrier: {Target: 0, Name: "exit-carrier", Carrier: plan.CarrierText, CarrierKey: "reply"},
		},
		Sites: []plan.Site{
			cdServer: site(cdServer, []plan.Fetch{strFetch("traceparent", 128)}, []plan.Fetch{intFetch("code", sType(8))}),
			cdQuery:  site(cdQuery, []plan.Fetch{strFetch("sql", 256)}, nil),
			cdWork:   site(cdWork, []plan.Fetch{intFetch("n", uType(8))}, nil),
			cdRPCRaw: site(cdRPCRaw, []plan.Fetch{
				strFetch("method", 32),
				hiddenFetch(bytesFetch("t", 16), plan.RoleTraceID, "trace_id"),
				hiddenFetch(bytesFetch("p", 8), plan.RoleParentSpanID, "parent_span_id"),
			}, nil),
			cdRPCText: site(cdRPCText, []plan.Fetch{
				hiddenFetch(strFetch("t", 64), plan.RoleTraceID, "trace_id"),
				hiddenFetch(strFetch("p", 64), plan.RoleParentSpanID, "parent_span_id"),
				strFetch("method", 32),
			}, nil),
			cdLib: site(cdLib, []plan.Fetch{intFetch("x", xType(8))}, nil),
			cdStatus: site(cdStatus, nil, []plan.Fetch{
				intFetch("ret", sType(8)),
				hiddenFetch(intFetch("s", sType(8)), plan.RoleStatus, "status_error"),
			}),
			cdExitCarrier: site(cdExitCarrier, nil, []plan.Fetch{strFetch("reply", 128)}),
		},
	}
	require.Len(t, p.Spans, cdCount)
	require.Len(t, p.Sites, cdCount)
	return withFiles(p)
}

// clock is a settable Settings.Now.
type clock struct{ t time.Time }

func (c *clock) Now() time.Time          { return c.t }
func (c *clock) Advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Unix(1_700_000_000, 0)} }
func ctxSettings(p *plan.Plan, c *clock) Settings {
	s := goldenSettings(p)
	s.Now = c.Now
	return s
}

// th is one thread of a test.
type th struct{ pid, tid uint32 }

// ev makes the record of a span of def on thread h. entry and exit are the
// hand-encoded stored values.
func (h th) ev(def uint32, start, end, parent, root, ctx uint64, entry, exit rec) event.SpanRecord {
	return event.SpanRecord{
		StartNs: start, EndNs: end, ParentStartNs: parent, RootStartNs: root, ContextStartNs: ctx,
		PID: h.pid, TID: h.tid, Def: def, EntrySite: def, ExitSite: def,
		Entry: entry, Exit: exit,
	}
}

// server is a cdServer span with the traceparent attribute text.
func (h th) server(start, end, parent, root, ctx uint64, text string) event.SpanRecord {
	return h.ev(cdServer, start, end, parent, root, ctx, rec{}.str(text), rec{}.int(200))
}

// query is a cdQuery span with the sql attribute text.
func (h th) query(start, end, parent, root, ctx uint64, sql string) event.SpanRecord {
	return h.ev(cdQuery, start, end, parent, root, ctx, rec{}.str(sql), nil)
}

// work is a span without carrier.
func (h th) work(start, end, parent, root, ctx uint64) event.SpanRecord {
	return h.ev(cdWork, start, end, parent, root, ctx, rec{}.int(start), nil)
}

func sqlWith(tp string) string {
	return "SELECT * FROM t WHERE id = $1 /*controller='c',traceparent='" + tp + "'*/"
}

// outSpan is one output span and its resource.
type outSpan struct {
	span    ptrace.Span
	service string
	pid     int64
	exe     string
}

// collect indexes the spans of td by span id, checking the shape of the
// output: one scope per resource, no duplicate ids, no duplicate resource
// per (service, pid), no empty resource.
func collect(t *testing.T, td ptrace.Traces) map[pcommon.SpanID]outSpan {
	t.Helper()
	out := map[pcommon.SpanID]outSpan{}
	type res struct {
		service string
		pid     int64
	}
	seen := map[res]bool{}
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		attrs := rs.Resource().Attributes()
		svc, _ := attrs.Get("service.name")
		pid, _ := attrs.Get("process.pid")
		exe, _ := attrs.Get("process.executable.path")
		r := res{svc.Str(), pid.Int()}
		require.False(t, seen[r], "resource %v twice in one output", r)
		seen[r] = true
		require.Equal(t, 1, rs.ScopeSpans().Len())
		sc := rs.ScopeSpans().At(0)
		assert.Equal(t, testScope, sc.Scope().Name())
		ss := sc.Spans()
		require.Positive(t, ss.Len(), "empty resource %v", r)
		for j := 0; j < ss.Len(); j++ {
			sp := ss.At(j)
			_, dup := out[sp.SpanID()]
			require.False(t, dup, "duplicate span id %s", sp.SpanID())
			out[sp.SpanID()] = outSpan{span: sp, service: svc.Str(), pid: pid.Int(), exe: exe.Str()}
		}
	}
	return out
}

// ids returns the derived span ids of records, in order.
func ids(b *Builder, evs ...event.SpanRecord) []pcommon.SpanID {
	out := make([]pcommon.SpanID, len(evs))
	for i, ev := range evs {
		out[i] = b.SpanID(ev.PID, uint64(ev.TID), ev.StartNs)
	}
	return out
}

func keys(m map[pcommon.SpanID]outSpan) []pcommon.SpanID {
	out := make([]pcommon.SpanID, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// build runs b.Build and checks exactly the spans of want left in it.
func build(t *testing.T, b *Builder, in []event.SpanRecord, want ...event.SpanRecord) map[pcommon.SpanID]outSpan {
	t.Helper()
	td := b.Build(in)
	got := collect(t, td)
	require.ElementsMatch(t, ids(b, want...), keys(got), "spans leaving this Build")
	require.Equal(t, len(want), td.SpanCount())
	return got
}

// expect checks the ids, name and times of the output span of ev.
func expect(t *testing.T, b *Builder, got map[pcommon.SpanID]outSpan, ev event.SpanRecord, trace pcommon.TraceID, parent pcommon.SpanID) {
	t.Helper()
	o, ok := got[b.SpanID(ev.PID, uint64(ev.TID), ev.StartNs)]
	require.True(t, ok, "no output for span at %d on %d/%d", ev.StartNs, ev.PID, ev.TID)
	sp := o.span
	assert.Equal(t, trace, sp.TraceID(), "trace id of span at %d on %d/%d", ev.StartNs, ev.PID, ev.TID)
	assert.Equal(t, parent, sp.ParentSpanID(), "parent id of span at %d on %d/%d", ev.StartNs, ev.PID, ev.TID)
	assert.Equal(t, b.s.Plan.Spans[ev.Def].Name, sp.Name())
	assert.Equal(t, pcommon.Timestamp(int64(ev.StartNs)+testWallOffset), sp.StartTimestamp())
	assert.Equal(t, pcommon.Timestamp(int64(ev.EndNs)+testWallOffset), sp.EndTimestamp())
	assert.Equal(t, int64(ev.PID), o.pid)
	tid, _ := sp.Attributes().Get("thread.id")
	assert.Equal(t, int64(ev.TID), tid.Int())
}

// derivedParent is the parent id a record was built with.
func derivedParent(b *Builder, ev event.SpanRecord) pcommon.SpanID {
	if ev.ParentStartNs == 0 {
		return pcommon.SpanID{}
	}
	return b.SpanID(ev.PID, uint64(ev.TID), ev.ParentStartNs)
}

// expectDerived checks that ev left with the ids derived from its thread.
func expectDerived(t *testing.T, b *Builder, got map[pcommon.SpanID]outSpan, ev event.SpanRecord) {
	t.Helper()
	expect(t, b, got, ev, b.TraceID(ev.PID, uint64(ev.TID), ev.RootStartNs), derivedParent(b, ev))
}

func contextCounts(found, missing, invalid, unsampled, timeout, overflow uint64) [outcomes]uint64 {
	return [outcomes]uint64{found, missing, invalid, unsampled, timeout, overflow}
}

// carrierTree is a text carrier at the root of thread h with three nested
// spans on two levels, in completion order (innermost first, carrier last):
//
//	C  server  [100, 1000]  carrier
//	N1 work    [200,  600]  in C
//	N2 work    [300,  400]  in N1
//	N3 work    [700,  900]  in C
func carrierTree(h th, text string) (n2, n1, n3, c event.SpanRecord) {
	c = h.server(100, 1000, 0, 100, 0, text)
	n1 = h.work(200, 600, 100, 100, 100)
	n2 = h.work(300, 400, 200, 100, 100)
	n3 = h.work(700, 900, 100, 100, 100)
	return n2, n1, n3, c
}

func TestContextCarrierOneBuild(t *testing.T) {
	b := NewBuilder(ctxSettings(ctxPlan(t), newClock()))
	h := th{10, 11}
	n2, n1, n3, c := carrierTree(h, tpA)
	got := build(t, b, []event.SpanRecord{n2, n1, n3, c}, n2, n1, n3, c)
	trace := mustTraceID(t, ctxTraceA)
	expect(t, b, got, c, trace, mustSpanID(t, ctxParentA))
	expect(t, b, got, n1, trace, b.SpanID(h.pid, uint64(h.tid), 100))
	expect(t, b, got, n2, trace, b.SpanID(h.pid, uint64(h.tid), 200))
	expect(t, b, got, n3, trace, b.SpanID(h.pid, uint64(h.tid), 100))
	assert.Equal(t, ptrace.SpanKindServer, got[b.SpanID(h.pid, uint64(h.tid), 100)].span.Kind())
	assert.Equal(t, map[string]any{"thread.id": int64(11), "traceparent": tpA, "code": int64(200)},
		got[b.SpanID(h.pid, uint64(h.tid), 100)].span.Attributes().AsRaw())
	assert.Equal(t, map[string]any{"thread.id": int64(11), "n": int64(300)},
		got[b.SpanID(h.pid, uint64(h.tid), 300)].span.Attributes().AsRaw())
	assert.Equal(t, 0, b.Waiting())
	assert.Equal(t, Counts{Context: contextCounts(1, 0, 0, 0, 0, 0)}, b.Counts())
}

func TestContextCarrierThreeBuilds(t *testing.T) {
	b := NewBuilder(ctxSettings(ctxPlan(t), newClock()))
	h := th{10, 11}
	n2, n1, n3, c := carrierTree(h, tpA)

	td := b.Build([]event.SpanRecord{n2})
	assert.Equal(t, 0, td.SpanCount())
	assert.Equal(t, 0, td.ResourceSpans().Len(), "no empty resource for waiting spans")
	assert.Equal(t, 1, b.Waiting())

	td = b.Build([]event.SpanRecord{n1, n3})
	assert.Equal(t, 0, td.SpanCount())
	assert.Equal(t, 0, td.ResourceSpans().Len())
	assert.Equal(t, 3, b.Waiting())

	got := build(t, b, []event.SpanRecord{c}, n2, n1, n3, c)
	trace := mustTraceID(t, ctxTraceA)
	expect(t, b, got, c, trace, mustSpanID(t, ctxParentA))
	expect(t, b, got, n1, trace, b.SpanID(h.pid, uint64(h.tid), 100))
	expect(t, b, got, n2, trace, b.SpanID(h.pid, uint64(h.tid), 200))
	expect(t, b, got, n3, trace, b.SpanID(h.pid, uint64(h.tid), 100))
	// Attributes decoded in earlier Builds survive later ones.
	assert.Equal(t, map[string]any{"thread.id": int64(11), "n": int64(300)},
		got[b.SpanID(h.pid, uint64(h.tid), 300)].span.Attributes().AsRaw())
	assert.Equal(t, 0, b.Waiting())
	assert.Equal(t, Counts{Context: contextCounts(1, 0, 0, 0, 0, 0)}, b.Counts())
	assert.Equal(t, 0, b.Build(nil).SpanCount())
	assert.Equal(t, 0, b.Flush().SpanCount())
}

// TestContextCarrierInsideRoot: a carrier that is not the root of its thread
// joins the remote trace; the local root stays in its derived trace.
func TestContextCarrierInsideRoot(t *testing.T) {
	b := NewBuilder(ctxSettings(ctxPlan(t), newClock()))
	h := th{10, 11}
	root := h.work(50, 2000, 0, 50, 0)
	c := h.server(100, 1000, 50, 50, 0, tpA)
	n := h.work(200, 300, 100, 50, 100)
	got := build(t, b, []event.SpanRecord{n, c, root}, n, c, root)
	expect(t, b, got, c, mustTraceID(t, ctxTraceA), mustSpanID(t, ctxParentA))
	expect(t, b, got, n, mustTraceID(t, ctxTraceA), b.SpanID(h.pid, uint64(h.tid), 100))
	expectDerived(t, b, got, root)
	assert.Equal(t, Counts{Context: contextCounts(1, 0, 0, 0, 0, 0)}, b.Counts())
}

// TestContextCarrierAtExit: the carrier attribute is fetched at exit.
func TestContextCarrierAtExit(t *testing.T) {
	b := NewBuilder(ctxSettings(ctxPlan(t), newClock()))
	h := th{10, 11}
	c := h.ev(cdExitCarrier, 100, 1000, 0, 100, 0, nil, rec{}.str("HTTP/1.1 200 OK traceparent: "+tpB))
	n := h.work(200, 300, 100, 100, 100)
	got := build(t, b, []event.SpanRecord{n, c}, n, c)
	expect(t, b, got, c, mustTraceID(t, ctxTraceB), mustSpanID(t, ctxParentB))
	expect(t, b, got, n, mustTraceID(t, ctxTraceB), b.SpanID(h.pid, uint64(h.tid), 100))
}

// nestedTree is an outer text carrier with an inner query carrier:
//
//	O  server [100, 2000] carrier (outer text)
//	P1 work   [150,  180] in O
//	I  query  [200, 1000] in O, carrier (sql text)
//	Q1 work   [300,  500] in I
//	Q2 work   [350,  400] in Q1
//	P2 work   [1100, 1500] in O
func nestedTree(h th, outer, sql string) (p1, q2, q1, i, p2, o event.SpanRecord) {
	o = h.server(100, 2000, 0, 100, 0, outer)
	p1 = h.work(150, 180, 100, 100, 100)
	i = h.query(200, 1000, 100, 100, 100, sql)
	q1 = h.work(300, 500, 200, 100, 200)
	q2 = h.work(350, 400, 300, 100, 200)
	p2 = h.work(1100, 1500, 100, 100, 100)
	return
}

func TestContextNestedCarriers(t *testing.T) {
	b := NewBuilder(ctxSettings(ctxPlan(t), newClock()))
	h := th{10, 11}
	p1, q2, q1, i, p2, o := nestedTree(h, tpA, sqlWith(tpB))
	traceA, traceB := mustTraceID(t, ctxTraceA), mustTraceID(t, ctxTraceB)

	build(t, b, []event.SpanRecord{p1, q2, q1})
	assert.Equal(t, 3, b.Waiting())

	// The inner carrier has its own context: its subtree leaves with it.
	got := build(t, b, []event.SpanRecord{i}, i, q1, q2)
	expect(t, b, got, i, traceB, mustSpanID(t, ctxParentB))
	expect(t, b, got, q1, traceB, b.SpanID(h.pid, uint64(h.tid), 200))
	expect(t, b, got, q2, traceB, b.SpanID(h.pid, uint64(h.tid), 300))
	assert.Equal(t, ptrace.SpanKindClient, got[b.SpanID(h.pid, uint64(h.tid), 200)].span.Kind())
	assert.Equal(t, 1, b.Waiting(), "P1 still waits for O")

	got = build(t, b, []event.SpanRecord{p2, o}, p1, p2, o)
	expect(t, b, got, o, traceA, mustSpanID(t, ctxParentA))
	expect(t, b, got, p1, traceA, b.SpanID(h.pid, uint64(h.tid), 100))
	expect(t, b, got, p2, traceA, b.SpanID(h.pid, uint64(h.tid), 100))
	assert.Equal(t, 0, b.Waiting())
	assert.Equal(t, Counts{Context: contextCounts(2, 0, 0, 0, 0, 0)}, b.Counts())
}

func TestContextNestedCarrierWithoutContext(t *testing.T) {
	for _, tt := range []struct {
		name   string
		sql    string
		counts [outcomes]uint64
	}{
		{"invalid", sqlWith(tpInvalid), contextCounts(1, 0, 1, 0, 0, 0)},
		{"zero trace id", sqlWith(tp("00", strings.Repeat("0", 32), ctxParentB, "01")), contextCounts(1, 0, 1, 0, 0, 0)},
		{"missing", "SELECT 1 /*controller='c'*/", contextCounts(1, 1, 0, 0, 0, 0)},
		{"uppercase (missing)", sqlWith(strings.ToUpper(tpB)), contextCounts(1, 1, 0, 0, 0, 0)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBuilder(ctxSettings(ctxPlan(t), newClock()))
			h := th{10, 11}
			p1, q2, q1, i, p2, o := nestedTree(h, tpA, tt.sql)
			traceA := mustTraceID(t, ctxTraceA)

			build(t, b, []event.SpanRecord{p1, q2, q1})
			build(t, b, []event.SpanRecord{i})
			assert.Equal(t, 4, b.Waiting(), "the inner carrier waits for the outer one, its subtree for it")
			build(t, b, []event.SpanRecord{p2})
			assert.Equal(t, 5, b.Waiting())

			got := build(t, b, []event.SpanRecord{o}, p1, q2, q1, i, p2, o)
			expect(t, b, got, o, traceA, mustSpanID(t, ctxParentA))
			expect(t, b, got, i, traceA, b.SpanID(h.pid, uint64(h.tid), 100)) // derived parent: O
			expect(t, b, got, q1, traceA, b.SpanID(h.pid, uint64(h.tid), 200))
			expect(t, b, got, q2, traceA, b.SpanID(h.pid, uint64(h.tid), 300))
			expect(t, b, got, p1, traceA, b.SpanID(h.pid, uint64(h.tid), 100))
			expect(t, b, got, p2, traceA, b.SpanID(h.pid, uint64(h.tid), 100))
			assert.Equal(t, 0, b.Waiting())
			assert.Equal(t, Counts{Context: tt.counts}, b.Counts())
		})
	}
}

// TestContextThreeLevelChain: three nested carriers, only the outermost
// with a context; everything ends up in it.
func TestContextThreeLevelChain(t *testing.T) {
	b := NewBuilder(ctxSettings(ctxPlan(t), newClock()))
	h := th{10, 11}
	o := h.server(100, 1000, 0, 100, 0, tpA)
	m := h.query(200, 900, 100, 100, 100, "no context")
	i := h.query(300, 800, 200, 100, 200, "none either")
	leaf := h.work(400, 500, 300, 100, 300)
	build(t, b, []event.SpanRecord{leaf, i, m})
	assert.Equal(t, 3, b.Waiting())
	traceA := mustTraceID(t, ctxTraceA)
	got := build(t, b, []event.SpanRecord{o}, leaf, i, m, o)
	expect(t, b, got, o, traceA, mustSpanID(t, ctxParentA))
	expect(t, b, got, m, traceA, b.SpanID(h.pid, uint64(h.tid), 100))
	expect(t, b, got, i, traceA, b.SpanID(h.pid, uint64(h.tid), 200))
	expect(t, b, got, leaf, traceA, b.SpanID(h.pid, uint64(h.tid), 300))
	assert.Equal(t, Counts{Context: contextCounts(1, 2, 0, 0, 0, 0)}, b.Counts())
}

// TestContextRootCarrierWithoutContext: a root carrier without a valid
// context keeps its derived ids and its waiters get its (derived) trace id.
func TestContextRootCarrierWithoutContext(t *testing.T) {
	for _, tt := range []struct {
		name        string
		entry       rec
		entryFailed uint8
		counts      Counts
	}{
		{"no traceparent", rec{}.str("GET /index.html"), 0, Counts{Context: contextCounts(0, 1, 0, 0, 0, 0)}},
		{"empty string", rec{}.str(""), 0, Counts{Context: contextCounts(0, 1, 0, 0, 0, 0)}},
		{"version ff", rec{}.str(tpInvalid), 0, Counts{Context: contextCounts(0, 0, 1, 0, 0, 0)}},
		{"zero parent", rec{}.str(tp("00", ctxTraceA, strings.Repeat("0", 16), "01")), 0, Counts{Context: contextCounts(0, 0, 1, 0, 0, 0)}},
		{"carrier fetch failed", nil, 1, Counts{FetchErrors: 1, Context: contextCounts(0, 1, 0, 0, 0, 0)}},
		{"carrier malformed", rec{}.raw(200, 0, '0', '0'), 0, Counts{Malformed: 1, Context: contextCounts(0, 1, 0, 0, 0, 0)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBuilder(ctxSettings(ctxPlan(t), newClock()))
			h := th{10, 11}
			n2, n1, n3, c := carrierTree(h, "")
			c.Entry, c.EntryFailed = tt.entry, tt.entryFailed

			build(t, b, []event.SpanRecord{n2, n1, n3})
			assert.Equal(t, 3, b.Waiting())
			got := build(t, b, []event.SpanRecord{c}, n2, n1, n3, c)
			derived := b.TraceID(h.pid, uint64(h.tid), 100)
			expect(t, b, got, c, derived, pcommon.SpanID{})
			expect(t, b, got, n1, derived, b.SpanID(h.pid, uint64(h.tid), 100))
			expect(t, b, got, n2, derived, b.SpanID(h.pid, uint64(h.tid), 200))
			expect(t, b, got, n3, derived, b.SpanID(h.pid, uint64(h.tid), 100))
			assert.Equal(t, 0, b.Waiting())
			assert.Equal(t, tt.counts, b.Counts())
		})
	}
}

func TestContextUnsampled(t *testing.T) {
	b := NewBuilder(ctxSettings(ctxPlan(t), newClock()))
	ha, hb, hc := th{10, 11}, th{10, 12}, th{10, 13}
	// Thread A: an unsampled carrier with two waiters and a nested carrier
	// without context (which waits for it) with one waiter of its own.
	ca := ha.server(100, 1000, 0, 100, 0, "x "+tpUnsampled)
	wa1 := ha.work(200, 300, 100, 100, 100)
	ia := ha.query(400, 800, 100, 100, 100, "no context")
	wa2 := ha.work(500, 600, 400, 100, 400)
	wa3 := ha.work(850, 900, 100, 100, 100)
	// Thread B: a sampled carrier with one waiter; thread C: a plain root.
	cb := hb.server(100, 1000, 0, 100, 0, tpB)
	wb := hb.work(200, 300, 100, 100, 100)
	pc := hc.work(100, 200, 0, 100, 0)

	build(t, b, []event.SpanRecord{wa1, wb, wa2, pc, ia}, pc)
	assert.Equal(t, 4, b.Waiting())
	got := build(t, b, []event.SpanRecord{wa3, cb}, cb, wb)
	expect(t, b, got, cb, mustTraceID(t, ctxTraceB), mustSpanID(t, ctxParentB))
	expect(t, b, got, wb, mustTraceID(t, ctxTraceB), hb.spanID(b, 100))
	assert.Equal(t, 4, b.Waiting())

	td := b.Build([]event.SpanRecord{ca})
	assert.Equal(t, 0, td.SpanCount(), "the unsampled carrier and everything waiting on it are dropped")
	assert.Equal(t, 0, td.ResourceSpans().Len())
	assert.Equal(t, 0, b.Waiting())
	// By definition: server, query and work.
	assert.Equal(t, Counts{Context: contextCounts(2, 1, 0, 5, 0, 0), TraceUnsampled: []uint64{1, 1, 3}}, b.Counts())
	assert.Equal(t, 0, b.Flush().SpanCount())
}

func (h th) spanID(b *Builder, start uint64) pcommon.SpanID {
	return b.SpanID(h.pid, uint64(h.tid), start)
}

// TestContextPerThread: the same start times on two threads of one process
// and on a thread of another process wait separately.
func TestContextPerThread(t *testing.T) {
	b := NewBuilder(ctxSettings(ctxPlan(t), newClock()))
	h1, h2, h3 := th{10, 11}, th{10, 12}, th{20, 11}
	c1 := h1.server(100, 1000, 0, 100, 0, tpA)
	c2 := h2.server(100, 1000, 0, 100, 0, tpB)
	c3 := h3.server(100, 1000, 0, 100, 0, "/*traceparent='"+tpC+"'*/")
	w1 := h1.work(200, 300, 100, 100, 100)
	w2 := h2.work(200, 300, 100, 100, 100)
	w3 := h3.work(200, 300, 100, 100, 100)
	w1b := h1.work(400, 500, 100, 100, 100)

	build(t, b, []event.SpanRecord{w3, w1, w2})
	assert.Equal(t, 3, b.Waiting())

	got := build(t, b, []event.SpanRecord{w1b, c2}, c2, w2)
	expect(t, b, got, c2, mustTraceID(t, ctxTraceB), mustSpanID(t, ctxParentB))
	expect(t, b, got, w2, mustTraceID(t, ctxTraceB), h2.spanID(b, 100))
	assert.Equal(t, int64(10), got[h2.spanID(b, 200)].pid)
	assert.Equal(t, 3, b.Waiting())

	got = build(t, b, []event.SpanRecord{c3}, c3, w3)
	expect(t, b, got, c3, mustTraceID(t, ctxTraceC), mustSpanID(t, ctxParentC))
	expect(t, b, got, w3, mustTraceID(t, ctxTraceC), h3.spanID(b, 100))
	assert.Equal(t, int64(20), got[h3.spanID(b, 200)].pid)
	assert.Equal(t, 2, b.Waiting())

	got = build(t, b, []event.SpanRecord{c1}, c1, w1, w1b)
	expect(t, b, got, c1, mustTraceID(t, ctxTraceA), mustSpanID(t, ctxParentA))
	expect(t, b, got, w1, mustTraceID(t, ctxTraceA), h1.spanID(b, 100))
	expect(t, b, got, w1b, mustTraceID(t, ctxTraceA), h1.spanID(b, 100))
	assert.Equal(t, 0, b.Waiting())
	assert.Equal(t, Counts{Context: contextCounts(3, 0, 0, 0, 0, 0)}, b.Counts())
}

// TestContextPerThreadOneBuild interleaves three threads in one batch.
func TestContextPerThreadOneBuild(t *testing.T) {
	b := NewBuilder(ctxSettings(ctxPlan(t), newClock()))
	hs := []th{{10, 11}, {20, 11}, {10, 12}}
	tps := []string{tpA, tpB, tpA}
	var in, all []event.SpanRecord
	for round := uint64(0); round < 3; round++ {
		for _, h := range hs {
			in = append(in, h.work(200+100*round, 250+100*round, 100, 100, 100))
		}
	}
	for i, h := range hs {
		in = append(in, h.server(100, 1000, 0, 100, 0, tps[i]))
	}
	all = append(all, in...)
	got := build(t, b, in, all...)
	for _, ev := range in {
		trace := mustTraceID(t, ctxTraceA)
		if ev.PID == 20 {
			trace = mustTraceID(t, ctxTraceB)
		}
		if ev.Def == cdServer {
			continue
		}
		expect(t, b, got, ev, trace, b.SpanID(ev.PID, uint64(ev.TID), 100))
	}
	assert.Equal(t, 0, b.Waiting())
}

// TestContextWaitExpiry: with a fake clock, waiters whose carrier never comes
// leave at the first Build at or after their deadline, with derived ids.
func TestContextWaitExpiry(t *testing.T) {
	clk := newClock()
	s := ctxSettings(ctxPlan(t), clk)
	s.ContextWait = 5 * time.Second
	b := NewBuilder(s)
	h1, h2 := th{10, 11}, th{20, 21}
	// Group 1 waits for a carrier at 100 on h1 from t0.
	g1a := h1.work(200, 300, 100, 100, 100)
	g1b := h1.work(250, 280, 200, 100, 100)
	build(t, b, []event.SpanRecord{g1a, g1b})
	assert.Equal(t, 2, b.Waiting())

	// Group 2 waits for a carrier at 100 on h2 from t0+3s.
	clk.Advance(3 * time.Second)
	g2 := h2.work(200, 300, 100, 100, 100)
	build(t, b, []event.SpanRecord{g2})
	assert.Equal(t, 3, b.Waiting())

	// t0+5s-1ns: nothing leaves.
	clk.Advance(2*time.Second - time.Nanosecond)
	build(t, b, nil)
	assert.Equal(t, 3, b.Waiting())
	assert.Equal(t, uint64(0), b.Counts().Context[ContextTimeout])

	// t0+5s+1ns: group 1 leaves, with derived ids, in the same Build as a
	// span that does not wait (and into its own resource).
	clk.Advance(2 * time.Nanosecond)
	other := th{30, 31}.work(100, 200, 0, 100, 0)
	got := build(t, b, []event.SpanRecord{other}, g1a, g1b, other)
	expectDerived(t, b, got, g1a)
	expectDerived(t, b, got, g1b)
	expectDerived(t, b, got, other)
	assert.Equal(t, int64(10), got[h1.spanID(b, 200)].pid)
	assert.Equal(t, 1, b.Waiting())
	assert.Equal(t, uint64(2), b.Counts().Context[ContextTimeout])

	// t0+8s-1ns: group 2 stays; t0+8s+1ns: it leaves.
	clk.Advance(3*time.Second - 2*time.Nanosecond)
	build(t, b, nil)
	assert.Equal(t, 1, b.Waiting())
	clk.Advance(2 * time.Nanosecond)
	got = build(t, b, nil, g2)
	expectDerived(t, b, got, g2)
	assert.Equal(t, 0, b.Waiting())

	// The carriers come late: nobody waits, they leave on their own.
	clk.Advance(time.Minute)
	c1 := h1.server(100, 1000, 0, 100, 0, tpA)
	c2 := h2.server(100, 1000, 0, 100, 0, "nothing")
	var got2 map[pcommon.SpanID]outSpan
	require.NotPanics(t, func() { got2 = build(t, b, []event.SpanRecord{c1, c2}, c1, c2) })
	expect(t, b, got2, c1, mustTraceID(t, ctxTraceA), mustSpanID(t, ctxParentA))
	expectDerived(t, b, got2, c2)
	assert.Equal(t, Counts{Context: contextCounts(1, 1, 0, 0, 3, 0)}, b.Counts())
	assert.Equal(t, 0, b.Waiting())
}

// TestProcessEndedReleasesItsWaiters: the exit or exec of a process lets its
// waiting spans leave at once, with their own ids, counted as timeouts; the
// spans of other processes keep waiting.
func TestProcessEndedReleasesItsWaiters(t *testing.T) {
	clk := newClock()
	b := NewBuilder(ctxSettings(ctxPlan(t), clk))
	h1, h2 := th{10, 11}, th{20, 21}
	g1a := h1.work(200, 300, 100, 100, 100)
	g1b := h1.work(250, 280, 200, 100, 100)
	g2 := h2.work(200, 300, 100, 100, 100)
	build(t, b, []event.SpanRecord{g1a, g1b, g2})
	require.Equal(t, 3, b.Waiting())

	b.Begin(0)
	b.ProcessEnded(10)
	td := b.End()
	require.Equal(t, 2, td.SpanCount())
	ss := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans()
	ids := []pcommon.SpanID{ss.At(0).SpanID(), ss.At(1).SpanID()}
	assert.ElementsMatch(t, []pcommon.SpanID{h1.spanID(b, 200), h1.spanID(b, 250)}, ids)
	assert.Equal(t, 1, b.Waiting())
	assert.Equal(t, uint64(2), b.Counts().Context[ContextTimeout])

	b.Begin(0)
	b.ProcessEnded(10) // nothing left of it
	b.ProcessEnded(99) // never waited
	assert.Equal(t, 0, b.End().SpanCount())
	assert.Equal(t, 1, b.Waiting())
}

// TestContextWaitCarrierInExpiringBuild: expiry runs after the batch, so a
// carrier arriving in the first Build past the deadline still gives its
// context to its waiters.
func TestContextWaitCarrierInExpiringBuild(t *testing.T) {
	clk := newClock()
	s := ctxSettings(ctxPlan(t), clk)
	s.ContextWait = time.Second
	b := NewBuilder(s)
	h := th{10, 11}
	n2, n1, n3, c := carrierTree(h, tpA)
	build(t, b, []event.SpanRecord{n2, n1, n3})
	clk.Advance(10 * time.Second)
	got := build(t, b, []event.SpanRecord{c}, n2, n1, n3, c)
	expect(t, b, got, n2, mustTraceID(t, ctxTraceA), h.spanID(b, 200))
	assert.Equal(t, Counts{Context: contextCounts(1, 0, 0, 0, 0, 0)}, b.Counts())
}

// TestContextWaitDefault: without ContextWait, spans wait DefaultContextWait.
func TestContextWaitDefault(t *testing.T) {
	clk := newClock()
	b := NewBuilder(ctxSettings(ctxPlan(t), clk))
	w := th{10, 11}.work(200, 300, 100, 100, 100)
	build(t, b, []event.SpanRecord{w})
	clk.Advance(DefaultContextWait - time.Nanosecond)
	build(t, b, nil)
	assert.Equal(t, 1, b.Waiting())
	clk.Advance(2 * time.Nanosecond)
	got := build(t, b, nil, w)
	expectDerived(t, b, got, w)
}

// TestContextWaitExpiredNestedCarrier: a waiting carrier without context
// times out; its own waiters leave with it, with its (derived) trace id.
// Every span that left because of the timeout is counted.
func TestContextWaitExpiredNestedCarrier(t *testing.T) {
	clk := newClock()
	s := ctxSettings(ctxPlan(t), clk)
	s.ContextWait = time.Second
	b := NewBuilder(s)
	h := th{10, 11}
	_, q2, q1, i, _, _ := nestedTree(h, tpA, "no context")
	build(t, b, []event.SpanRecord{q2, q1})
	clk.Advance(500 * time.Millisecond)
	build(t, b, []event.SpanRecord{i}) // waits from t0+0.5s: deadline t0+1.5s
	assert.Equal(t, 3, b.Waiting())
	// t0+1s: Q1 and Q2 (deadline t0+1s) time out; I has not.
	clk.Advance(500 * time.Millisecond)
	got := build(t, b, nil, q2, q1)
	expectDerived(t, b, got, q1)
	expectDerived(t, b, got, q2)
	assert.Equal(t, 1, b.Waiting())
	clk.Advance(500 * time.Millisecond)
	got = build(t, b, nil, i)
	expectDerived(t, b, got, i)
	assert.Equal(t, Counts{Context: contextCounts(0, 1, 0, 0, 3, 0)}, b.Counts())
}

// TestContextWaitExpiredChainSameDeadline: the nested carrier and its
// waiters reach their deadline in the same Build. Every span leaves with
// its derived ids and is counted as a timeout, whatever order the Builder
// visits the waiting carriers in (runs repeat to cover both orders).
func TestContextWaitExpiredChainSameDeadline(t *testing.T) {
	setup := func(t *testing.T) (*Builder, []event.SpanRecord, map[pcommon.SpanID]outSpan) {
		clk := newClock()
		s := ctxSettings(ctxPlan(t), clk)
		s.ContextWait = time.Second
		b := NewBuilder(s)
		_, q2, q1, i, _, _ := nestedTree(th{10, 11}, tpA, "no context")
		build(t, b, []event.SpanRecord{q2, q1, i})
		require.Equal(t, 3, b.Waiting())
		clk.Advance(2 * time.Second)
		got := build(t, b, nil, q2, q1, i)
		require.Equal(t, 0, b.Waiting())
		return b, []event.SpanRecord{q2, q1, i}, got
	}
	expectDerivedEveryRun(t, setup, Counts{Context: contextCounts(0, 1, 0, 0, 3, 0)})
}

func TestContextMaxWaiting(t *testing.T) {
	s := ctxSettings(ctxPlan(t), newClock())
	s.MaxWaiting = 2
	b := NewBuilder(s)
	h := th{10, 11}
	n2, n1, n3, c := carrierTree(h, tpA)
	build(t, b, []event.SpanRecord{n2, n1})
	assert.Equal(t, 2, b.Waiting())
	// The third waiter leaves at once, with its derived ids.
	got := build(t, b, []event.SpanRecord{n3}, n3)
	expectDerived(t, b, got, n3)
	assert.Equal(t, 2, b.Waiting())
	assert.Equal(t, Counts{Context: contextCounts(0, 0, 0, 0, 0, 1)}, b.Counts())
	got = build(t, b, []event.SpanRecord{c}, c, n2, n1)
	expect(t, b, got, n1, mustTraceID(t, ctxTraceA), h.spanID(b, 100))
	expect(t, b, got, n2, mustTraceID(t, ctxTraceA), h.spanID(b, 200))
	assert.Equal(t, 0, b.Waiting())
	assert.Equal(t, Counts{Context: contextCounts(1, 0, 0, 0, 0, 1)}, b.Counts())
}

// TestContextMaxWaitingCarrierOverflows: a carrier without context that
// would wait for its enclosing carrier overflows: it leaves at once and
// releases its own waiters with its (derived) trace id.
func TestContextMaxWaitingCarrierOverflows(t *testing.T) {
	s := ctxSettings(ctxPlan(t), newClock())
	s.MaxWaiting = 2
	b := NewBuilder(s)
	h := th{10, 11}
	_, q2, q1, i, _, o := nestedTree(h, tpA, sqlWith(tpInvalid))
	build(t, b, []event.SpanRecord{q2, q1})
	assert.Equal(t, 2, b.Waiting())
	got := build(t, b, []event.SpanRecord{i}, i, q1, q2)
	derived := b.TraceID(h.pid, uint64(h.tid), 100)
	expect(t, b, got, i, derived, h.spanID(b, 100))
	expect(t, b, got, q1, derived, h.spanID(b, 200))
	expect(t, b, got, q2, derived, h.spanID(b, 300))
	assert.Equal(t, 0, b.Waiting())
	got = build(t, b, []event.SpanRecord{o}, o)
	expect(t, b, got, o, mustTraceID(t, ctxTraceA), mustSpanID(t, ctxParentA))
	assert.Equal(t, Counts{Context: contextCounts(1, 0, 1, 0, 0, 1)}, b.Counts())
}

func TestContextMaxWaitingDefault(t *testing.T) {
	b := NewBuilder(ctxSettings(ctxPlan(t), newClock()))
	assert.Equal(t, DefaultMaxWaiting, b.s.MaxWaiting)
	assert.Equal(t, DefaultContextWait, b.s.ContextWait)
}

func TestContextFlush(t *testing.T) {
	b := NewBuilder(ctxSettings(ctxPlan(t), newClock()))
	h1, h2, h3 := th{10, 11}, th{10, 12}, th{20, 21}
	w1 := h1.work(200, 300, 100, 100, 100)
	w2 := h1.work(400, 500, 100, 100, 100)
	w3 := h2.work(200, 300, 100, 100, 100)
	w4 := h3.ev(cdLib, 200, 300, 100, 100, 100, rec{}.int(0xabc), nil)
	plain := th{30, 31}.work(1, 2, 0, 1, 0)
	build(t, b, []event.SpanRecord{w1, w2, plain, w3, w4}, plain)
	assert.Equal(t, 4, b.Waiting())

	got := collect(t, b.Flush())
	require.ElementsMatch(t, ids(b, w1, w2, w3, w4), keys(got))
	for _, ev := range []event.SpanRecord{w1, w2, w3, w4} {
		expectDerived(t, b, got, ev)
	}
	assert.Equal(t, "libfoo", got[h3.spanID(b, 200)].service)
	assert.Equal(t, testLibExe, got[h3.spanID(b, 200)].exe)
	assert.Equal(t, "app", got[h1.spanID(b, 200)].service)
	assert.Equal(t, 0, b.Waiting())
	assert.Equal(t, Counts{Context: contextCounts(0, 0, 0, 0, 4, 0)}, b.Counts())
	assert.Empty(t, b.waiting)

	// Empty afterwards: nothing more leaves, a late carrier is alone.
	assert.Equal(t, 0, b.Flush().SpanCount())
	assert.Equal(t, 0, b.Build(nil).SpanCount())
	c := h1.server(100, 1000, 0, 100, 0, tpA)
	build(t, b, []event.SpanRecord{c}, c)
	assert.Equal(t, Counts{Context: contextCounts(1, 0, 0, 0, 4, 0)}, b.Counts())
}

// TestContextFlushNestedCarrier: a waiting carrier without context and its
// own waiters are flushed with derived ids and each counted as a timeout,
// whatever order the Builder visits them in (runs repeat to cover both).
func TestContextFlushNestedCarrier(t *testing.T) {
	setup := func(t *testing.T) (*Builder, []event.SpanRecord, map[pcommon.SpanID]outSpan) {
		b := NewBuilder(ctxSettings(ctxPlan(t), newClock()))
		p1, q2, q1, i, _, _ := nestedTree(th{10, 11}, tpA, "no context")
		build(t, b, []event.SpanRecord{p1, q2, q1, i})
		require.Equal(t, 4, b.Waiting())
		got := collect(t, b.Flush())
		require.ElementsMatch(t, ids(b, p1, q2, q1, i), keys(got))
		require.Equal(t, 0, b.Waiting())
		return b, []event.SpanRecord{p1, q2, q1, i}, got
	}
	expectDerivedEveryRun(t, setup, Counts{Context: contextCounts(0, 1, 0, 0, 4, 0)})
}

func TestContextBinaryCarrier(t *testing.T) {
	traceA, parentA := mustTraceID(t, ctxTraceA), mustSpanID(t, ctxParentA)
	h := th{10, 11}
	rawCarrier := func(trace, parent []byte, failed uint8) event.SpanRecord {
		e := rec{}.str("Get")
		if failed&2 == 0 {
			e = e.bytes(trace, 16)
		}
		if failed&4 == 0 {
			e = e.bytes(parent, 8)
		}
		ev := h.ev(cdRPCRaw, 100, 1000, 0, 100, 0, e, nil)
		ev.EntryFailed = failed
		return ev
	}
	textCarrier := func(trace, parent string, failed uint8) event.SpanRecord {
		e := rec{}
		if failed&1 == 0 {
			e = e.str(trace)
		}
		if failed&2 == 0 {
			e = e.str(parent)
		}
		ev := h.ev(cdRPCText, 100, 1000, 0, 100, 0, e.str("Get"), nil)
		ev.EntryFailed = failed
		return ev
	}
	tests := []struct {
		name   string
		c      event.SpanRecord
		found  bool
		counts Counts
	}{
		{"raw bytes", rawCarrier(traceA[:], parentA[:], 0), true, Counts{Context: contextCounts(1, 0, 0, 0, 0, 0)}},
		{"raw zero trace", rawCarrier(make([]byte, 16), parentA[:], 0), false, Counts{Context: contextCounts(0, 0, 1, 0, 0, 0)}},
		{"raw zero parent", rawCarrier(traceA[:], make([]byte, 8), 0), false, Counts{Context: contextCounts(0, 0, 1, 0, 0, 0)}},
		{"raw trace fetch failed", rawCarrier(nil, parentA[:], 2), false, Counts{FetchErrors: 1, Context: contextCounts(0, 1, 0, 0, 0, 0)}},
		{"raw parent fetch failed", rawCarrier(traceA[:], nil, 4), false, Counts{FetchErrors: 1, Context: contextCounts(0, 1, 0, 0, 0, 0)}},
		{"hex text", textCarrier(ctxTraceA, ctxParentA, 0), true, Counts{Context: contextCounts(1, 0, 0, 0, 0, 0)}},
		{"upper hex text", textCarrier(strings.ToUpper(ctxTraceA), strings.ToUpper(ctxParentA), 0), true, Counts{Context: contextCounts(1, 0, 0, 0, 0, 0)}},
		{"hex text with spaces", textCarrier(" "+ctxTraceA+"\n", ctxParentA+" ", 0), true, Counts{Context: contextCounts(1, 0, 0, 0, 0, 0)}},
		{"hex text too long", textCarrier(ctxTraceA+"0", ctxParentA, 0), false, Counts{Context: contextCounts(0, 0, 1, 0, 0, 0)}},
		{"hex text not hex", textCarrier(strings.Repeat("z", 32), ctxParentA, 0), false, Counts{Context: contextCounts(0, 0, 1, 0, 0, 0)}},
		{"hex text zero", textCarrier(strings.Repeat("0", 32), ctxParentA, 0), false, Counts{Context: contextCounts(0, 0, 1, 0, 0, 0)}},
		{"empty text", textCarrier("", "", 0), false, Counts{Context: contextCounts(0, 0, 1, 0, 0, 0)}},
		{"text trace fetch failed", textCarrier("", ctxParentA, 1), false, Counts{FetchErrors: 1, Context: contextCounts(0, 1, 0, 0, 0, 0)}},
		{"text parent fetch failed", textCarrier(ctxTraceA, "", 2), false, Counts{FetchErrors: 1, Context: contextCounts(0, 1, 0, 0, 0, 0)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBuilder(ctxSettings(ctxPlan(t), newClock()))
			var got map[pcommon.SpanID]outSpan
			if tt.found {
				n := h.work(200, 300, 100, 100, 100)
				build(t, b, []event.SpanRecord{n})
				got = build(t, b, []event.SpanRecord{tt.c}, n, tt.c)
				expect(t, b, got, tt.c, traceA, parentA)
				expect(t, b, got, n, traceA, h.spanID(b, 100))
			} else {
				got = build(t, b, []event.SpanRecord{tt.c}, tt.c)
				expectDerived(t, b, got, tt.c)
			}
			// The hidden values are not attributes; the method is.
			assert.Equal(t, map[string]any{"thread.id": int64(11), "method": "Get"}, got[h.spanID(b, 100)].span.Attributes().AsRaw())
			assert.Equal(t, tt.counts, b.Counts())
		})
	}
}

// TestBinaryCarrierShortHexString: a string trace_id or parent_span_id must
// hold 32 or 16 hex digits (config: "want bytes[16] (raw id) or a string (32
// hex digits)"). A string that happens to be 16 (or 8) bytes long, such as a
// 64-bit Jaeger/Zipkin trace id in hex, is not a raw id.
func TestBinaryCarrierShortHexString(t *testing.T) {
	for _, tt := range []struct{ name, trace, parent string }{
		{"64-bit hex trace id", "463ac35c9f6413ad", ctxParentA},
		{"8-character parent id", ctxTraceA, "deadbeef"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBuilder(ctxSettings(ctxPlan(t), newClock()))
			h := th{10, 11}
			c := h.ev(cdRPCText, 100, 1000, 0, 100, 0, rec{}.str(tt.trace).str(tt.parent).str("Get"), nil)
			got := build(t, b, []event.SpanRecord{c}, c)
			expectDerived(t, b, got, c)
			assert.Equal(t, Counts{Context: contextCounts(0, 0, 1, 0, 0, 0)}, b.Counts())
		})
	}
}

func TestStatusError(t *testing.T) {
	h := th{10, 11}
	tests := []struct {
		name    string
		status  uint64
		failed  uint8
		want    ptrace.StatusCode
		message string
		counts  Counts
	}{
		{"negative", uint64(1<<64 - 1), 0, ptrace.StatusCodeError, "retval:s64 < 0 (value -1)", Counts{}},
		{"min int64", 1 << 63, 0, ptrace.StatusCodeError, "retval:s64 < 0 (value -9223372036854775808)", Counts{}},
		{"zero", 0, 0, ptrace.StatusCodeUnset, "", Counts{}},
		{"positive", 42, 0, ptrace.StatusCodeUnset, "", Counts{}},
		{"status fetch failed", uint64(1<<64 - 1), 1 << 1, ptrace.StatusCodeUnset, "", Counts{FetchErrors: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewBuilder(ctxSettings(ctxPlan(t), newClock()))
			exit := rec{}.int(7)
			if tt.failed == 0 {
				exit = exit.int(tt.status)
			}
			ev := h.ev(cdStatus, 100, 200, 0, 100, 0, nil, exit)
			ev.ExitFailed = tt.failed
			got := build(t, b, []event.SpanRecord{ev}, ev)
			sp := got[h.spanID(b, 100)].span
			assert.Equal(t, tt.want, sp.Status().Code())
			assert.Equal(t, tt.message, sp.Status().Message())
			assert.Equal(t, map[string]any{"thread.id": int64(11), "ret": int64(7)}, sp.Attributes().AsRaw(), "the status value is not an attribute")
			assert.Equal(t, tt.counts, b.Counts())
		})
	}
}

func TestStatusErrorOperators(t *testing.T) {
	h := th{10, 11}
	for _, tt := range []struct {
		cond  string
		value int64
		want  bool
	}{
		{"retval:s32 < 0", -1, true}, {"retval:s32 < 0", 0, false},
		{"retval <= 0", 0, true}, {"retval <= 0", 1, false},
		{"retval > 400", 500, true}, {"retval > 400", 400, false},
		{"retval >= 400", 400, true}, {"retval >= 400", 399, false},
		{"retval == -1", -1, true}, {"retval == -1", 1, false},
		{"retval != 0", 3, true}, {"retval != 0", 0, false},
	} {
		t.Run(tt.cond, func(t *testing.T) {
			c, err := config.ParseComparison(tt.cond)
			require.NoError(t, err)
			plan := ctxPlan(t)
			plan.Spans[cdStatus].Status = &c
			typ := sType(8)
			if c.Expr.Typed {
				typ = c.Expr.Type
			}
			plan.Sites[cdStatus].Exit[1].Value.Type = typ
			b := NewBuilder(ctxSettings(plan, newClock()))
			ev := h.ev(cdStatus, 100, 200, 0, 100, 0, nil, rec{}.int(7).int(uint64(tt.value)))
			got := build(t, b, []event.SpanRecord{ev}, ev)
			st := got[h.spanID(b, 100)].span.Status()
			if tt.want {
				assert.Equal(t, ptrace.StatusCodeError, st.Code())
				assert.Equal(t, c.String()+" (value "+itoa(tt.value)+")", st.Message())
			} else {
				assert.Equal(t, ptrace.StatusCodeUnset, st.Code())
				assert.Empty(t, st.Message())
			}
		})
	}
}

func itoa(v int64) string {
	s := pcommon.NewValueInt(v)
	return s.AsString()
}

// TestStatusErrorNarrowType: a 32-bit status is sign-extended from its own
// size before the comparison.
func TestStatusErrorNarrowType(t *testing.T) {
	plan := ctxPlan(t)
	c, err := config.ParseComparison("retval:s32 < 0")
	require.NoError(t, err)
	plan.Spans[cdStatus].Status = &c
	plan.Sites[cdStatus].Exit[1].Value.Type = fetch.Type{Kind: fetch.KindSigned, Size: 4}
	b := NewBuilder(ctxSettings(plan, newClock()))
	h := th{10, 11}
	ev := h.ev(cdStatus, 100, 200, 0, 100, 0, nil, rec{}.int(0).int(0x1_ffff_fffe)) // low 32 bits: -2
	got := build(t, b, []event.SpanRecord{ev}, ev)
	st := got[h.spanID(b, 100)].span.Status()
	assert.Equal(t, ptrace.StatusCodeError, st.Code())
	assert.Equal(t, "retval:s32 < 0 (value -2)", st.Message())
}

// TestStatusErrorOnWaitingSpan: the status survives waiting.
func TestStatusErrorOnWaitingSpan(t *testing.T) {
	b := NewBuilder(ctxSettings(ctxPlan(t), newClock()))
	h := th{10, 11}
	ev := h.ev(cdStatus, 200, 300, 100, 100, 100, nil, rec{}.int(7).int(uint64(1<<64-5)))
	c := h.server(100, 1000, 0, 100, 0, tpA)
	build(t, b, []event.SpanRecord{ev})
	got := build(t, b, []event.SpanRecord{c}, ev, c)
	st := got[h.spanID(b, 200)].span.Status()
	assert.Equal(t, ptrace.StatusCodeError, st.Code())
	assert.Equal(t, "retval:s64 < 0 (value -5)", st.Message())
	assert.Equal(t, mustTraceID(t, ctxTraceA), got[h.spanID(b, 200)].span.TraceID())
}

func TestSpanKinds(t *testing.T) {
	want := map[config.SpanKind]ptrace.SpanKind{
		0:                       ptrace.SpanKindInternal,
		config.KindInternal:     ptrace.SpanKindInternal,
		config.KindServer:       ptrace.SpanKindServer,
		config.KindClient:       ptrace.SpanKindClient,
		config.KindProducer:     ptrace.SpanKindProducer,
		config.KindConsumer:     ptrace.SpanKindConsumer,
		config.KindConsumer + 1: ptrace.SpanKindInternal,
		255:                     ptrace.SpanKindInternal,
	}
	// Every configurable kind is covered.
	for _, name := range []string{"", "internal", "server", "client", "producer", "consumer"} {
		k, err := config.ParseSpanKind(name)
		require.NoError(t, err)
		require.Contains(t, want, k)
	}
	h := th{10, 11}
	for k, wantKind := range want {
		for _, def := range []uint32{cdWork, cdServer} { // without and with a carrier
			plan := ctxPlan(t)
			plan.Spans[def].Kind = k
			b := NewBuilder(ctxSettings(plan, newClock()))
			var ev event.SpanRecord
			if def == cdWork {
				ev = h.work(100, 200, 0, 100, 0)
			} else {
				ev = h.server(100, 200, 0, 100, 0, tpA)
			}
			got := build(t, b, []event.SpanRecord{ev}, ev)
			assert.Equal(t, wantKind, got[h.spanID(b, 100)].span.Kind(), "kind %d, def %d", k, def)
		}
	}
}

// TestContextResources: spans that waited go to their own (target, pid)
// resource, also in a Build where that resource has no other span, and
// share it with non-waiting spans of the same Build.
func TestContextResources(t *testing.T) {
	b := NewBuilder(ctxSettings(ctxPlan(t), newClock()))
	h := th{10, 11}
	c := h.server(100, 1000, 0, 100, 0, tpA)
	libChild := h.ev(cdLib, 200, 300, 100, 100, 100, rec{}.int(0xff), nil)
	appChild := h.work(400, 500, 100, 100, 100)
	other := th{20, 21}.work(1, 2, 0, 1, 0)

	got := build(t, b, []event.SpanRecord{libChild, other, appChild}, other)
	assert.Equal(t, outSpan{service: "app", pid: 20, exe: testAppPath}, withoutSpan(got[th{20, 21}.spanID(b, 1)]))

	// The carrier's Build: (app, 10) and (libfoo, 10), neither with other spans.
	td := b.Build([]event.SpanRecord{c})
	got = collect(t, td)
	require.ElementsMatch(t, ids(b, c, libChild, appChild), keys(got))
	assert.Equal(t, outSpan{service: "libfoo", pid: 10, exe: testLibExe}, withoutSpan(got[h.spanID(b, 200)]))
	assert.Equal(t, outSpan{service: "app", pid: 10, exe: testAppPath}, withoutSpan(got[h.spanID(b, 400)]))
	assert.Equal(t, outSpan{service: "app", pid: 10, exe: testAppPath}, withoutSpan(got[h.spanID(b, 100)]))
	require.Equal(t, 2, td.ResourceSpans().Len())
	assert.Equal(t, map[string]any{
		"service.name": "app", "process.pid": int64(10), "process.executable.path": testAppPath, "host.name": testHostName,
	}, td.ResourceSpans().At(0).Resource().Attributes().AsRaw())
	assert.Equal(t, map[string]any{
		"service.name": "libfoo", "process.pid": int64(10), "process.executable.path": testLibExe, "host.name": testHostName,
	}, td.ResourceSpans().At(1).Resource().Attributes().AsRaw())
	expect(t, b, got, libChild, mustTraceID(t, ctxTraceA), h.spanID(b, 100))
}

// TestContextResourcesSharedInOneBuild: waiting and non-waiting spans of the
// same (target, pid) in one Build share one ResourceSpans.
func TestContextResourcesSharedInOneBuild(t *testing.T) {
	b := NewBuilder(ctxSettings(ctxPlan(t), newClock()))
	h := th{10, 11}
	c := h.server(100, 1000, 0, 100, 0, tpA)
	w := h.work(200, 300, 100, 100, 100)
	plain := th{10, 12}.work(150, 160, 0, 150, 0)
	lib := th{10, 12}.ev(cdLib, 170, 180, 0, 170, 0, rec{}.int(1), nil)
	wlib := h.ev(cdLib, 400, 500, 100, 100, 100, rec{}.int(2), nil)
	td := b.Build([]event.SpanRecord{w, plain, wlib, lib, c})
	require.Equal(t, 2, td.ResourceSpans().Len())
	count := func(i int) int { return td.ResourceSpans().At(i).ScopeSpans().At(0).Spans().Len() }
	assert.Equal(t, 3, count(0), "app/10: plain, c, w")
	assert.Equal(t, 2, count(1), "libfoo/10: lib, wlib")
	got := collect(t, td)
	assert.Equal(t, "libfoo", got[h.spanID(b, 400)].service)
	assert.Equal(t, "app", got[h.spanID(b, 200)].service)
}

func withoutSpan(o outSpan) outSpan {
	o.span = ptrace.Span{}
	return o
}

// TestContextWaitingSurvivesBatchReuse: a waiting span's attributes are
// copied out of the batch memory, which the receiver resets and reuses
// before the carrier arrives.
func TestContextWaitingSurvivesBatchReuse(t *testing.T) {
	plan := ctxPlan(t)
	b := NewBuilder(ctxSettings(plan, newClock()))
	h := th{10, 11}
	var batch testutil.Batch
	w := h.ev(cdRPCRaw, 200, 300, 100, 100, 0, nil, nil)
	// A binary-carrier span nested in a text carrier: it waits only if it
	// has no context itself; give it none (failed ids) and a method.
	w.ContextStartNs = 100
	w.EntryFailed = 2 | 4
	w.Entry = batch.Copy(rec{}.str("Method-One"))
	lw := h.ev(cdLib, 400, 500, 100, 100, 100, nil, nil)
	lw.Entry = batch.Copy(rec{}.int(0xabcdef))
	build(t, b, []event.SpanRecord{w, lw})
	batch.Reset()
	for i := 0; i < 4; i++ {
		scratch := batch.Copy(rec{}.str("XXXXXXXXXX").int(0))
		for j := range scratch {
			scratch[j] = 0xee
		}
	}
	c := h.server(100, 1000, 0, 100, 0, tpA)
	c.Entry = batch.Copy(c.Entry)
	got := build(t, b, []event.SpanRecord{c}, w, lw, c)
	assert.Equal(t, map[string]any{"thread.id": int64(11), "method": "Method-One"}, got[h.spanID(b, 200)].span.Attributes().AsRaw())
	assert.Equal(t, map[string]any{"thread.id": int64(11), "x": "0xabcdef"}, got[h.spanID(b, 400)].span.Attributes().AsRaw())
	expect(t, b, got, w, mustTraceID(t, ctxTraceA), h.spanID(b, 100))
	assert.Equal(t, Counts{FetchErrors: 2, Context: contextCounts(1, 1, 0, 0, 0, 0)}, b.Counts())
}

// TestContextFoundNestedCarrierDoesNotWait: a nested carrier with its own
// context leaves at once, even while its enclosing carrier is pending.
func TestContextFoundNestedCarrierDoesNotWait(t *testing.T) {
	b := NewBuilder(ctxSettings(ctxPlan(t), newClock()))
	h := th{10, 11}
	_, _, _, i, _, _ := nestedTree(h, tpA, sqlWith(tpB))
	got := build(t, b, []event.SpanRecord{i}, i)
	expect(t, b, got, i, mustTraceID(t, ctxTraceB), mustSpanID(t, ctxParentB))
	assert.Equal(t, 0, b.Waiting())
}

// TestContextUnsampledOuterDropsInvalidInner: an inner carrier without a
// context waits for the outer one and is dropped with it.
func TestContextUnsampledOuterDropsInvalidInner(t *testing.T) {
	b := NewBuilder(ctxSettings(ctxPlan(t), newClock()))
	h := th{10, 11}
	p1, q2, q1, i, p2, o := nestedTree(h, tpUnsampled, sqlWith(tpInvalid))
	td := b.Build([]event.SpanRecord{p1, q2, q1, i, p2, o})
	assert.Equal(t, 0, td.SpanCount())
	assert.Equal(t, 0, b.Waiting())
	assert.Equal(t, Counts{Context: contextCounts(1, 0, 1, 6, 0, 0), TraceUnsampled: []uint64{1, 1, 4}}, b.Counts())
}

// expectDerivedEveryRun builds the setup's spans 50 times (map order
// varies) and checks every span keeps its derived ids and the counts match.
func expectDerivedEveryRun(t *testing.T, setup func(t *testing.T) (*Builder, []event.SpanRecord, map[pcommon.SpanID]outSpan), want Counts) {
	t.Run("ids", func(t *testing.T) {
		for run := 0; run < 50; run++ {
			b, evs, got := setup(t)
			for _, ev := range evs {
				expectDerived(t, b, got, ev)
			}
			if t.Failed() {
				t.Fatalf("run %d", run)
			}
		}
	})
	t.Run("counts", func(t *testing.T) {
		for run := 0; run < 50; run++ {
			b, _, _ := setup(t)
			require.Equal(t, want, b.Counts(), "run %d", run)
		}
	})
}

// TestContextNextExpiry: NextExpiry says when the first waiting span is due
// to leave, and nothing once none waits.
func TestContextNextExpiry(t *testing.T) {
	clk := newClock()
	s := ctxSettings(ctxPlan(t), clk)
	s.ContextWait = 5 * time.Second
	b := NewBuilder(s)
	assert.True(t, b.NextExpiry().IsZero(), "nothing waits")
	h1, h2 := th{10, 11}, th{20, 21}
	t0 := clk.Now()
	build(t, b, []event.SpanRecord{h1.work(200, 300, 100, 100, 100)})
	assert.Equal(t, t0.Add(5*time.Second), b.NextExpiry())
	clk.Advance(3 * time.Second)
	build(t, b, []event.SpanRecord{h2.work(200, 300, 100, 100, 100)})
	assert.Equal(t, t0.Add(5*time.Second), b.NextExpiry(), "the earlier one")
	clk.Advance(2*time.Second + time.Nanosecond)
	build(t, b, nil, h1.work(200, 300, 100, 100, 100))
	assert.Equal(t, t0.Add(8*time.Second), b.NextExpiry(), "the one left")
	b.Flush()
	assert.True(t, b.NextExpiry().IsZero(), "nothing waits after Flush")
}
