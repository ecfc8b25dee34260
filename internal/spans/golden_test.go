package spans

import (
	"bytes"
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// Fixed settings of the golden tests.
const (
	testWallOffset = int64(1_700_000_000_000_000_000)
	testHostName   = "testhost"
	testScope      = "github.com/otel-uprobe/uprobereceiver"
	testVersion    = "0.0.1-test"
	testLibExe     = "/usr/bin/app"
	// testAppPath differs from testLibExe so that the tests tell the
	// executable target's own path from the Executable func's answer.
	testAppPath = "/opt/app/bin/app"
)

var testSalt = [2]uint64{0x0123456789abcdef, 0xfedcba9876543210}

func uType(size uint8) fetch.Type { return fetch.Type{Kind: fetch.KindUnsigned, Size: size} }
func sType(size uint8) fetch.Type { return fetch.Type{Kind: fetch.KindSigned, Size: size} }
func xType(size uint8) fetch.Type { return fetch.Type{Kind: fetch.KindHex, Size: size} }

// usdtArg is an untyped USDT argument as target.compile leaves it: the
// attribute type is the note's size and sign.
func usdtArg(key string, size uint8, signed bool, shift uint8) plan.Fetch {
	typ := uType(size)
	if signed {
		typ = sType(size)
	}
	return plan.Fetch{
		Key: key, Text: key, Base: plan.BaseRegister, Register: regs.RAX,
		Store: plan.StoreInt, ReadSize: 8,
		Value: plan.Value{Type: typ, FromArg: true, ArgSize: size, ArgSigned: signed, Shift: shift},
	}
}

// intFetch is an explicitly typed integer.
func intFetch(key string, typ fetch.Type) plan.Fetch {
	return plan.Fetch{
		Key: key, Text: key + ":" + typ.String(), Base: plan.BaseRegister, Register: regs.RDI,
		Store: plan.StoreInt, ReadSize: typ.Size, Value: plan.Value{Type: typ},
	}
}

func strFetch(key string, maxLen uint16) plan.Fetch {
	typ := fetch.Type{Kind: fetch.KindString, MaxLen: maxLen}
	return plan.Fetch{
		Key: key, Text: key + ":" + typ.String(), Base: plan.BaseRegister, Register: regs.RSI,
		Derefs: []int64{0}, Store: plan.StoreString, MaxLen: maxLen, Value: plan.Value{Type: typ},
	}
}

func bytesFetch(key string, n uint16) plan.Fetch {
	typ := fetch.Type{Kind: fetch.KindBytes, MaxLen: n}
	return plan.Fetch{
		Key: key, Text: key + ":" + typ.String(), Base: plan.BaseRegister, Register: regs.RDX,
		Derefs: []int64{0}, Store: plan.StoreBytes, MaxLen: n, Value: plan.Value{Type: typ},
	}
}

// Span definition ids of goldenPlan.
const (
	defRequest = iota
	defHandle
	defQuery
	defLibCall
)

// goldenPlan is a hand-built plan: an executable and a shared library, four
// span definitions, and sites whose fetches cover every Value conversion.
func goldenPlan() *plan.Plan {
	return withFiles(&plan.Plan{
		Targets: []plan.PlannedTarget{
			{Path: testAppPath, ServiceName: "app", Executable: true},
			{Path: "/usr/lib/libfoo.so.1", ServiceName: "libfoo", Executable: false},
		},
		Probes: []plan.Probe{
			{Target: 0, Ref: "usdt:app:request__start", Kind: config.KindUSDT, Locations: 1},
			{Target: 0, Ref: "usdt:app:request__done", Kind: config.KindUSDT, Locations: 1},
			{Target: 0, Ref: "uprobe:handle", Kind: config.KindUprobe, Locations: 1},
			{Target: 0, Ref: "uretprobe:handle", Kind: config.KindUretprobe, Locations: 1},
			{Target: 0, Ref: "uprobe:query", Kind: config.KindUprobe, Locations: 1},
			{Target: 0, Ref: "uretprobe:query", Kind: config.KindUretprobe, Locations: 1},
			{Target: 1, Ref: "uprobe:foo_call", Kind: config.KindUprobe, Locations: 1},
			{Target: 1, Ref: "uretprobe:foo_call", Kind: config.KindUretprobe, Locations: 1},
		},
		Spans: []plan.SpanDef{
			defRequest: {Target: 0, Name: "request", Entry: 0, Exit: 1},
			defHandle:  {Target: 0, Name: "handle", Entry: 2, Exit: 3},
			defQuery:   {Target: 0, Name: "query", Entry: 4, Exit: 5},
			defLibCall: {Target: 1, Name: "foo_call", Entry: 6, Exit: 7},
		},
		Sites: []plan.Site{
			// 0: request entry: untyped USDT arguments of every size and sign.
			{Probe: 0, EntrySpan: defRequest, ExitSpan: -1, Entry: []plan.Fetch{
				usdtArg("usdt.u8", 1, false, 0),
				usdtArg("usdt.s8", 1, true, 0),
				usdtArg("usdt.u16", 2, false, 0),
				usdtArg("usdt.s16", 2, true, 0),
				usdtArg("usdt.u32", 4, false, 0),
				usdtArg("usdt.s32", 4, true, 0),
				usdtArg("usdt.u64", 8, false, 0),
				usdtArg("usdt.s64", 8, true, 0),
			}},
			// 1: request exit: %ah-style arguments, a typed USDT argument
			// and explicit unsigned and signed types.
			{Probe: 1, EntrySpan: -1, ExitSpan: defRequest, Exit: []plan.Fetch{
				usdtArg("usdt.ah_signed", 1, true, 8),
				usdtArg("usdt.ah_unsigned", 1, false, 8),
				func() plan.Fetch {
					f := usdtArg("usdt.s16_as_u32", 2, true, 0)
					f.Value.Type = uType(4)
					return f
				}(),
				intFetch("u8", uType(1)),
				intFetch("u16", uType(2)),
				intFetch("u32", uType(4)),
				intFetch("u64", uType(8)),
				intFetch("s8", sType(1)),
			}},
			// 2: handle entry: the other signed and hex types, a string and bytes.
			{Probe: 2, EntrySpan: defHandle, ExitSpan: -1, Entry: []plan.Fetch{
				intFetch("s16", sType(2)),
				intFetch("s32", sType(4)),
				intFetch("s64", sType(8)),
				intFetch("x8", xType(1)),
				intFetch("x16", xType(2)),
				intFetch("x32", xType(4)),
				intFetch("x64", xType(8)),
				strFetch("name", 64),
			}},
			// 3: handle exit: invalid UTF-8, a retval, bytes[16] and an empty string.
			{Probe: 3, EntrySpan: -1, ExitSpan: defHandle, Exit: []plan.Fetch{
				strFetch("raw", 32),
				intFetch("retval", uType(8)),
				bytesFetch("blob", 16),
				strFetch("empty", fetch.DefaultStringLen),
			}},
			// 4: query entry.
			{Probe: 4, EntrySpan: defQuery, ExitSpan: -1, Entry: []plan.Fetch{
				strFetch("sql", 32),
				intFetch("limit", sType(8)),
			}},
			// 5: query exit.
			{Probe: 5, EntrySpan: -1, ExitSpan: defQuery, Exit: []plan.Fetch{
				intFetch("rows", sType(8)),
			}},
			// 6: foo_call entry, in the library.
			{Probe: 6, EntrySpan: defLibCall, ExitSpan: -1, Entry: []plan.Fetch{
				intFetch("arg0", xType(8)),
				strFetch("arg1", 16),
			}},
			// 7: foo_call exit.
			{Probe: 7, EntrySpan: -1, ExitSpan: defLibCall, Exit: []plan.Fetch{
				intFetch("ret", sType(4)),
			}},
		},
	})
}

func goldenSettings(p *plan.Plan) Settings {
	return Settings{
		Plan:         p,
		WallOffsetNs: testWallOffset,
		Salt:         testSalt,
		HostName:     testHostName,
		ScopeName:    testScope,
		ScopeVersion: testVersion,
		Executable:   func(uint32, event.Image) string { return testLibExe },
	}
}

var blob16 = []byte{0x00, 0x01, 0x02, 0x03, 0xfc, 0xfd, 0xfe, 0xff, 'b', 'l', 'o', 'b', 0, 0, 0, 0x7f}

// Indexes of goldenSpans, named for the assertions.
const (
	evGrandchild = iota // pid 100 tid 100 query, depth 2
	evChild             // pid 100 tid 100 handle, depth 1
	evRoot              // pid 100 tid 100 request, root
	evFailed            // pid 100 tid 101 handle root, retval failed
	evTruncated         // pid 100 tid 101 query root, truncated, sql failed
	evLib100            // pid 100 tid 100 foo_call root (library)
	evRoot200           // pid 200 tid 200 request root, same times as evRoot
	evLib200            // pid 200 tid 201 foo_call root (library)
	evMalformed         // pid 200 tid 200 query child, string length beyond the data
	evCount
)

// goldenSpans are the engine's records for goldenPlan, in completion order.
func goldenSpans() []event.SpanRecord {
	handleExit := func(retval uint64) []byte {
		return rec{}.str("ok\xff\xfe-end").int(retval).bytes(blob16, 16).str("")
	}
	return []event.SpanRecord{
		evGrandchild: {
			StartNs: 3000, EndNs: 4000, ParentStartNs: 2000, RootStartNs: 1000,
			PID: 100, TID: 100, Def: defQuery, EntrySite: 4, ExitSite: 5, Depth: 2,
			Entry: rec{}.str("SELECT 1").int(math.MaxUint64), // limit -1
			Exit:  rec{}.int(1),
		},
		evChild: {
			StartNs: 2000, EndNs: 8000, ParentStartNs: 1000, RootStartNs: 1000,
			PID: 100, TID: 100, Def: defHandle, EntrySite: 2, ExitSite: 3, Depth: 1,
			Entry: rec{}.
				int(0xffff_fffe).           // s16 -2
				int(0x8000_0000).           // s32 MinInt32
				int(0x8000_0000_0000_0000). // s64 MinInt64
				int(0x1ab).                 // x8 0xab
				int(0).                     // x16 0x0
				int(0xdead_beef_cafe).      // x32 0xbeefcafe
				int(math.MaxUint64).        // x64 0xffffffffffffffff
				str("hello, 世界"),
			Exit: handleExit(7),
		},
		evRoot: {
			StartNs: 1000, EndNs: 9000, ParentStartNs: 0, RootStartNs: 1000,
			PID: 100, TID: 100, Def: defRequest, EntrySite: 0, ExitSite: 1, Depth: 0,
			Entry: rec{}.
				int(0xffff_ffff_ffff_ff80). // usdt.u8 128
				int(0xffff_ffff_ffff_ff80). // usdt.s8 -128
				int(0xdead_0000_ffff).      // usdt.u16 65535
				int(0x1234_8000).           // usdt.s16 -32768
				int(0xffff_ffff_ffff_fffe). // usdt.u32 4294967294
				int(0x0000_0000_ffff_fffe). // usdt.s32 -2
				int(0x7fff_ffff_ffff_ffff). // usdt.u64 MaxInt64
				int(0xffff_ffff_ffff_fff6), // usdt.s64 -10
			Exit: rec{}.
				int(0x1234_80ff).   // usdt.ah_signed: >>8 = 0x123480, low byte 0x80 -> -128
				int(0xabcd).        // usdt.ah_unsigned: 0xab = 171
				int(0xffff).        // usdt.s16_as_u32: -1 -> 4294967295
				int(0x1ff).         // u8 255
				int(0x1_0001).      // u16 1
				int(0x1_0000_0002). // u32 2
				int(42).            // u64 42
				int(0x80),          // s8 -128
		},
		evFailed: {
			StartNs: 1500, EndNs: 2500, ParentStartNs: 0, RootStartNs: 1500,
			PID: 100, TID: 101, Def: defHandle, EntrySite: 2, ExitSite: 3,
			Entry: rec{}.int(1).int(2).int(3).int(4).int(5).int(6).int(7).str("t101"),
			// Fetch 1 (retval) failed and stored nothing.
			ExitFailed: 1 << 1,
			Exit:       rec{}.str("ok\xff\xfe-end").bytes(blob16, 16).str(""),
		},
		evTruncated: {
			StartNs: 5000, EndNs: 6000, ParentStartNs: 0, RootStartNs: 5000,
			PID: 100, TID: 101, Def: defQuery, EntrySite: 4, ExitSite: 5,
			// The sql string did not fit: failed and truncated; limit fit.
			Truncated:   true,
			EntryFailed: 1 << 0,
			Entry:       rec{}.int(10),
			Exit:        rec{}.int(0),
		},
		evLib100: {
			StartNs: 10000, EndNs: 10500, ParentStartNs: 0, RootStartNs: 10000,
			PID: 100, TID: 100, Def: defLibCall, EntrySite: 6, ExitSite: 7,
			Entry: rec{}.int(0x7f00_dead_0000).str("lib-arg"),
			Exit:  rec{}.int(0xffff_ffff), // ret -1
		},
		evRoot200: {
			StartNs: 1000, EndNs: 9000, ParentStartNs: 0, RootStartNs: 1000,
			PID: 200, TID: 200, Def: defRequest, EntrySite: 0, ExitSite: 1,
			Entry: rec{}.int(1).int(2).int(3).int(4).int(5).int(6).int(7).int(8),
			Exit:  rec{}.int(0).int(0).int(0).int(0).int(0).int(0).int(0).int(0),
		},
		evLib200: {
			StartNs: 1200, EndNs: 1300, ParentStartNs: 0, RootStartNs: 1200,
			PID: 200, TID: 201, Def: defLibCall, EntrySite: 6, ExitSite: 7,
			Entry: rec{}.int(0x1000).str("x"),
			Exit:  rec{}.int(0),
		},
		evMalformed: {
			StartNs: 1100, EndNs: 1200, ParentStartNs: 1000, RootStartNs: 1000,
			PID: 200, TID: 200, Def: defQuery, EntrySite: 4, ExitSite: 5, Depth: 1,
			// sql claims 200 bytes but only 6 follow: malformed; limit is
			// then skipped, the exit still decodes.
			Entry: rec{}.raw(200, 0, 'S', 'E', 'L', 'E', 'C', 'T').int(5),
			Exit:  rec{}.int(3),
		},
	}
}

func marshalIndented(t *testing.T, td ptrace.Traces) []byte {
	t.Helper()
	raw, err := (&ptrace.JSONMarshaler{}).MarshalTraces(td)
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, json.Indent(&buf, raw, "", "  "))
	buf.WriteByte('\n')
	return buf.Bytes()
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test -update to create it")
	require.Equal(t, string(want), string(got), "output differs from %s (go test -update rewrites it)", path)
}

func TestBuildGolden(t *testing.T) {
	b := NewBuilder(goldenSettings(goldenPlan()))
	td := b.Build(goldenSpans())
	checkGolden(t, "build.golden.json", marshalIndented(t, td))
	assert.Equal(t, Counts{FetchErrors: 2, Truncated: 1, Malformed: 1}, b.Counts())

	// The golden output also round-trips through the JSON unmarshaler.
	raw, err := (&ptrace.JSONMarshaler{}).MarshalTraces(td)
	require.NoError(t, err)
	back, err := (&ptrace.JSONUnmarshaler{}).UnmarshalTraces(raw)
	require.NoError(t, err)
	assert.Equal(t, td.SpanCount(), back.SpanCount())
}

// spanByID finds the output span of each input, by its expected span id.
func spansByEvent(t *testing.T, b *Builder, td ptrace.Traces, in []event.SpanRecord) ([]ptrace.Span, []pcommon.Resource) {
	t.Helper()
	byID := map[pcommon.SpanID]ptrace.Span{}
	resOf := map[pcommon.SpanID]pcommon.Resource{}
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		require.Equal(t, 1, rs.ScopeSpans().Len())
		ss := rs.ScopeSpans().At(0).Spans()
		for j := 0; j < ss.Len(); j++ {
			sp := ss.At(j)
			_, dup := byID[sp.SpanID()]
			require.False(t, dup, "duplicate span id %s", sp.SpanID())
			byID[sp.SpanID()] = sp
			resOf[sp.SpanID()] = rs.Resource()
		}
	}
	require.Len(t, byID, len(in))
	out := make([]ptrace.Span, len(in))
	res := make([]pcommon.Resource, len(in))
	for i, ev := range in {
		id := b.SpanID(ev.PID, uint64(ev.TID), ev.StartNs)
		sp, ok := byID[id]
		require.True(t, ok, "no output span for input %d", i)
		out[i], res[i] = sp, resOf[id]
	}
	return out, res
}

func TestBuildExplicit(t *testing.T) {
	plan := goldenPlan()
	b := NewBuilder(goldenSettings(plan))
	in := goldenSpans()
	require.Len(t, in, evCount)
	td := b.Build(in)
	require.Equal(t, evCount, td.SpanCount())
	out, res := spansByEvent(t, b, td, in)

	for i, ev := range in {
		sp := out[i]
		assert.Equal(t, plan.Spans[ev.Def].Name, sp.Name(), "input %d", i)
		assert.Equal(t, ptrace.SpanKindInternal, sp.Kind(), "input %d", i)
		assert.False(t, sp.SpanID().IsEmpty(), "input %d", i)
		assert.False(t, sp.TraceID().IsEmpty(), "input %d", i)
		assert.Equal(t, b.TraceID(ev.PID, uint64(ev.TID), ev.RootStartNs), sp.TraceID(), "input %d", i)
		if ev.ParentStartNs == 0 {
			assert.True(t, sp.ParentSpanID().IsEmpty(), "input %d: a root has no parent", i)
		} else {
			assert.Equal(t, b.SpanID(ev.PID, uint64(ev.TID), ev.ParentStartNs), sp.ParentSpanID(), "input %d", i)
		}
		assert.Equal(t, pcommon.Timestamp(uint64(int64(ev.StartNs)+testWallOffset)), sp.StartTimestamp(), "input %d", i)
		assert.Equal(t, pcommon.Timestamp(uint64(int64(ev.EndNs)+testWallOffset)), sp.EndTimestamp(), "input %d", i)
		tid, ok := sp.Attributes().Get("thread.id")
		require.True(t, ok, "input %d", i)
		assert.Equal(t, int64(ev.TID), tid.Int(), "input %d", i)

		// Resource: service.name, process.pid, process.executable.path, host.name.
		tg := plan.Targets[plan.Spans[ev.Def].Target]
		exe := testAppPath
		if !tg.Executable {
			exe = testLibExe
		}
		attrs := res[i].Attributes()
		assert.Equal(t, map[string]any{
			"service.name":            tg.ServiceName,
			"process.pid":             int64(ev.PID),
			"process.executable.path": exe,
			"host.name":               testHostName,
		}, attrs.AsRaw(), "input %d", i)
	}

	// The tree on pid 100 tid 100: parents are the enclosing spans' ids and
	// everything shares the root's trace id.
	root, child, grand := out[evRoot], out[evChild], out[evGrandchild]
	assert.Equal(t, root.SpanID(), child.ParentSpanID())
	assert.Equal(t, child.SpanID(), grand.ParentSpanID())
	assert.Equal(t, root.TraceID(), child.TraceID())
	assert.Equal(t, root.TraceID(), grand.TraceID())
	// Roots differ in trace id: other thread, other process with the same
	// times, and later roots on the same thread.
	roots := []int{evRoot, evFailed, evTruncated, evLib100, evRoot200, evLib200}
	seen := map[pcommon.TraceID]int{}
	for _, r := range roots {
		id := out[r].TraceID()
		prev, dup := seen[id]
		assert.False(t, dup, "roots %d and %d share trace id %s", prev, r, id)
		seen[id] = r
	}
	assert.NotEqual(t, out[evRoot].TraceID(), out[evRoot200].TraceID(), "same times in another process")
	assert.NotEqual(t, out[evRoot].SpanID(), out[evRoot200].SpanID(), "same times in another process")
	// The malformed child on pid 200 belongs to pid 200's root.
	assert.Equal(t, out[evRoot200].SpanID(), out[evMalformed].ParentSpanID())
	assert.Equal(t, out[evRoot200].TraceID(), out[evMalformed].TraceID())

	// Resources: one per (target, pid), in order of first appearance.
	rss := td.ResourceSpans()
	require.Equal(t, 4, rss.Len())
	type group struct {
		service string
		pid     int64
		spans   []string
	}
	var groups []group
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		svc, _ := rs.Resource().Attributes().Get("service.name")
		pid, _ := rs.Resource().Attributes().Get("process.pid")
		sc := rs.ScopeSpans().At(0)
		assert.Equal(t, testScope, sc.Scope().Name())
		assert.Equal(t, testVersion, sc.Scope().Version())
		g := group{service: svc.Str(), pid: pid.Int()}
		for j := 0; j < sc.Spans().Len(); j++ {
			g.spans = append(g.spans, sc.Spans().At(j).Name())
		}
		groups = append(groups, g)
	}
	assert.Equal(t, []group{
		{"app", 100, []string{"query", "handle", "request", "handle", "query"}},
		{"libfoo", 100, []string{"foo_call"}},
		{"app", 200, []string{"request", "query"}},
		{"libfoo", 200, []string{"foo_call"}},
	}, groups)

	// Attributes, explicitly.
	assert.Equal(t, map[string]any{
		"thread.id":        int64(100),
		"usdt.u8":          int64(128),
		"usdt.s8":          int64(-128),
		"usdt.u16":         int64(65535),
		"usdt.s16":         int64(-32768),
		"usdt.u32":         int64(4294967294),
		"usdt.s32":         int64(-2),
		"usdt.u64":         int64(math.MaxInt64),
		"usdt.s64":         int64(-10),
		"usdt.ah_signed":   int64(-128),
		"usdt.ah_unsigned": int64(171),
		"usdt.s16_as_u32":  int64(4294967295),
		"u8":               int64(255),
		"u16":              int64(1),
		"u32":              int64(2),
		"u64":              int64(42),
		"s8":               int64(-128),
	}, root.Attributes().AsRaw())
	assert.Equal(t, map[string]any{
		"thread.id": int64(100),
		"s16":       int64(-2),
		"s32":       int64(math.MinInt32),
		"s64":       int64(math.MinInt64),
		"x8":        "0xab",
		"x16":       "0x0",
		"x32":       "0xbeefcafe",
		"x64":       "0xffffffffffffffff",
		"name":      "hello, 世界",
		"raw":       "ok\uFFFD-end",
		"retval":    int64(7),
		"blob":      blob16,
		"empty":     "",
	}, child.Attributes().AsRaw())
	rawStr, _ := child.Attributes().Get("raw")
	assert.True(t, utf8.ValidString(rawStr.Str()))
	assert.Equal(t, map[string]any{
		"thread.id": int64(100), "sql": "SELECT 1", "limit": int64(-1), "rows": int64(1),
	}, grand.Attributes().AsRaw())

	// Failed fetch: the attribute is left out, the rest decode in order.
	failed := out[evFailed].Attributes()
	_, ok := failed.Get("retval")
	assert.False(t, ok, "failed fetch must leave the attribute out")
	assert.Equal(t, map[string]any{
		"thread.id": int64(101),
		"s16":       int64(1), "s32": int64(2), "s64": int64(3),
		"x8": "0x4", "x16": "0x5", "x32": "0x6", "x64": "0x7",
		"name": "t101", "raw": "ok\uFFFD-end", "blob": blob16, "empty": "",
	}, failed.AsRaw())
	// Truncated: sql failed, limit present.
	assert.Equal(t, map[string]any{
		"thread.id": int64(101), "limit": int64(10), "rows": int64(0),
	}, out[evTruncated].Attributes().AsRaw())
	// Malformed: sql and everything after it on that end left out; exit decodes.
	assert.Equal(t, map[string]any{
		"thread.id": int64(200), "rows": int64(3),
	}, out[evMalformed].Attributes().AsRaw())
	// Library spans.
	assert.Equal(t, map[string]any{
		"thread.id": int64(100), "arg0": "0x7f00dead0000", "arg1": "lib-arg", "ret": int64(-1),
	}, out[evLib100].Attributes().AsRaw())

	assert.Equal(t, Counts{FetchErrors: 2, Truncated: 1, Malformed: 1}, b.Counts())
}

// withFiles gives a hand-built plan one file per target (file i is target
// i's, at its path) and puts every site in the file of its span's target.
func withFiles(p *plan.Plan) *plan.Plan {
	p.Files = nil
	for i, t := range p.Targets {
		p.Files = append(p.Files, plan.File{Target: i, Path: t.Path, SeenAs: t.Path, Executable: t.Executable})
	}
	for i := range p.Sites {
		s := &p.Sites[i]
		switch {
		case s.EntrySpan >= 0 && s.EntrySpan < len(p.Spans):
			s.File = p.Spans[s.EntrySpan].Target
		case s.ExitSpan >= 0 && s.ExitSpan < len(p.Spans):
			s.File = p.Spans[s.ExitSpan].Target
		}
	}
	return p
}
