package spans

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
)

func TestExtend(t *testing.T) {
	tests := []struct {
		name   string
		raw    uint64
		size   uint8
		signed bool
		want   uint64
	}{
		{"size 0 keeps all", 0xdead_beef_cafe_f00d, 0, true, 0xdead_beef_cafe_f00d},
		{"size 8 keeps all", 0xffff_ffff_ffff_ff80, 8, true, 0xffff_ffff_ffff_ff80},
		{"size above 8 keeps all", 0x1234, 9, true, 0x1234},
		{"u8 0x80", 0x80, 1, false, 0x80},
		{"s8 0x80", 0x80, 1, true, uint64(math.MaxUint64) - 127}, // -128
		{"s8 0x7f", 0x7f, 1, true, 0x7f},
		{"s8 0xff", 0xff, 1, true, math.MaxUint64},
		{"u8 drops high bytes", 0x1ff, 1, false, 0xff},
		{"s8 high bytes ignored", 0xffff_ff00_0000_0001, 1, true, 1},
		{"u16 0x1_0001", 0x1_0001, 2, false, 1},
		{"s16 0x8000", 0x8000, 2, true, 0xffff_ffff_ffff_8000},
		{"s16 0x7fff", 0x7fff, 2, true, 0x7fff},
		{"s16 0xffff", 0xffff, 2, true, math.MaxUint64},
		{"u32 0x1_0000_0002", 0x1_0000_0002, 4, false, 2},
		{"s32 0x8000_0000", 0x8000_0000, 4, true, 0xffff_ffff_8000_0000},
		{"s32 0x7fff_ffff", 0x7fff_ffff, 4, true, 0x7fff_ffff},
		{"u32 0xffff_ffff", 0xffff_ffff_ffff_ffff, 4, false, 0xffff_ffff},
		{"zero signed", 0, 4, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, extend(tt.raw, tt.size, tt.signed))
		})
	}
}

// flags is the enum of testdata/names/names.c.
var flags = []fetch.Enumerator{{Name: "FLAG_NONE", Value: 0}, {Name: "FLAG_READ", Value: 1}, {Name: "FLAG_WRITE", Value: 2}, {Name: "FLAG_SYNC", Value: 4}}

func TestPutInt(t *testing.T) {
	u := func(n uint8) fetch.Type { return uType(n) }
	s := func(n uint8) fetch.Type { return sType(n) }
	x := func(n uint8) fetch.Type { return xType(n) }
	arg := func(typ fetch.Type, size uint8, signed bool, shift uint8) plan.Value {
		return plan.Value{Type: typ, FromArg: true, ArgSize: size, ArgSigned: signed, Shift: shift}
	}
	tests := []struct {
		name string
		v    plan.Value
		raw  uint64
		want any // int64 or string
	}{
		// Explicit types.
		{"u8 0x1ff", plan.Value{Type: u(1)}, 0x1ff, int64(255)},
		{"u16 0x1_0001", plan.Value{Type: u(2)}, 0x1_0001, int64(1)},
		{"u32 max", plan.Value{Type: u(4)}, math.MaxUint64, int64(math.MaxUint32)},
		{"u64 max wraps", plan.Value{Type: u(8)}, math.MaxUint64, int64(-1)},
		{"u64 MaxInt64", plan.Value{Type: u(8)}, math.MaxInt64, int64(math.MaxInt64)},
		{"u64 MaxInt64+1 wraps", plan.Value{Type: u(8)}, 1 << 63, int64(math.MinInt64)},
		{"s8 0x80", plan.Value{Type: s(1)}, 0x80, int64(-128)},
		{"s8 0x7f", plan.Value{Type: s(1)}, 0x7f, int64(127)},
		{"s16 0x8000", plan.Value{Type: s(2)}, 0x8000, int64(math.MinInt16)},
		{"s16 0x1_7fff", plan.Value{Type: s(2)}, 0x1_7fff, int64(math.MaxInt16)},
		{"s32 0x8000_0000", plan.Value{Type: s(4)}, 0x8000_0000, int64(math.MinInt32)},
		{"s32 0xffff_ffff", plan.Value{Type: s(4)}, 0xffff_ffff, int64(-1)},
		{"s64 1<<63", plan.Value{Type: s(8)}, 1 << 63, int64(math.MinInt64)},
		{"x8 0x1ab", plan.Value{Type: x(1)}, 0x1ab, "0xab"},
		{"x8 0", plan.Value{Type: x(1)}, 0, "0x0"},
		{"x16 0x1_0000", plan.Value{Type: x(2)}, 0x1_0000, "0x0"},
		{"x32 0xdead_beef_cafe", plan.Value{Type: x(4)}, 0xdead_beef_cafe, "0xbeefcafe"},
		{"x64 max", plan.Value{Type: x(8)}, math.MaxUint64, "0xffffffffffffffff"},
		// Zero-value type (no kind): stored as unsigned 64.
		{"no type", plan.Value{}, 0x1234, int64(0x1234)},

		// Untyped USDT arguments (type = the argument's size and sign).
		{"arg 1 unsigned", arg(u(1), 1, false, 0), 0xffff_ffff_ffff_ff80, int64(128)},
		{"arg 1 signed", arg(s(1), 1, true, 0), 0xffff_ffff_ffff_ff80, int64(-128)},
		{"arg 2 unsigned", arg(u(2), 2, false, 0), 0xdead_ffff, int64(65535)},
		{"arg 2 signed", arg(s(2), 2, true, 0), 0xffff, int64(-1)},
		{"arg 4 unsigned", arg(u(4), 4, false, 0), 0xffff_ffff_ffff_fffe, int64(4294967294)},
		{"arg 4 signed", arg(s(4), 4, true, 0), 0xffff_fffe, int64(-2)},
		{"arg 8 unsigned", arg(u(8), 8, false, 0), math.MaxUint64, int64(-1)},
		{"arg 8 signed", arg(s(8), 8, true, 0), 0xffff_ffff_ffff_fff6, int64(-10)},
		// %ah-style: shift 8, size 1.
		{"ah signed 0x80", arg(s(1), 1, true, 8), 0x80ff, int64(-128)},
		{"ah signed high bytes", arg(s(1), 1, true, 8), 0xffff_1234_7f00, int64(127)},
		{"ah unsigned", arg(u(1), 1, false, 8), 0xabcd, int64(0xab)},
		{"ah unsigned 0x80", arg(u(1), 1, false, 8), 0x80ff, int64(128)},
		// Typed USDT arguments: cut and extended as the argument, then converted.
		{"arg 2 signed 0xffff as u32", arg(u(4), 2, true, 0), 0xffff, int64(4294967295)},
		{"arg 2 signed 0xffff as u64", arg(u(8), 2, true, 0), 0xffff, int64(-1)},
		{"arg 2 signed 0xffff as x64", arg(x(8), 2, true, 0), 0xffff, "0xffffffffffffffff"},
		{"arg 2 signed 0xffff as x32", arg(x(4), 2, true, 0), 0xffff, "0xffffffff"},
		{"arg 2 unsigned 0xffff as s16", arg(s(2), 2, false, 0), 0xffff, int64(-1)},
		{"arg 2 unsigned 0xffff as s32", arg(s(4), 2, false, 0), 0xffff, int64(65535)},
		{"arg 4 signed as s64", arg(s(8), 4, true, 0), 0x8000_0000, int64(math.MinInt32)},
		{"arg 4 unsigned as s64", arg(s(8), 4, false, 0), 0x1_8000_0000, int64(0x8000_0000)},
		{"arg 8 as u8", arg(u(1), 8, false, 0), 0x1234, int64(0x34)},
		{"ah signed as u16", arg(u(2), 1, true, 8), 0x80ff, int64(0xff80)},

		// Enums of $names: by name, flags joined with "|", else the number.
		{"enum value", plan.Value{Type: u(4), Enum: flags}, 2, "FLAG_WRITE"},
		{"enum zero", plan.Value{Type: u(4), Enum: flags}, 0, "FLAG_NONE"},
		{"enum flags", plan.Value{Type: u(4), Enum: flags}, 0x1_0000_0005, "FLAG_READ|FLAG_SYNC"},
		{"enum unknown", plan.Value{Type: u(4), Enum: flags}, 9, "9"},
		{"signed enum", plan.Value{Type: s(4), Enum: []fetch.Enumerator{{Name: "ERR", Value: -1}, {Name: "OK", Value: 0}}}, 0xffff_ffff, "ERR"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := pcommon.NewMap()
			putInt(m, "k", tt.v, tt.raw, nil)
			require.Equal(t, 1, m.Len())
			got, ok := m.Get("k")
			require.True(t, ok)
			switch want := tt.want.(type) {
			case int64:
				require.Equal(t, pcommon.ValueTypeInt, got.Type())
				assert.Equal(t, want, got.Int())
			case string:
				require.Equal(t, pcommon.ValueTypeStr, got.Type())
				assert.Equal(t, want, got.Str())
			}
		})
	}
}

func TestPutValue(t *testing.T) {
	strF := strFetch("s", 16)
	bytesF := bytesFetch("b", 5)
	intF := intFetch("i", uType(8))
	tests := []struct {
		name   string
		f      plan.Fetch
		data   []byte
		wantN  int
		wantOK bool
		want   any
	}{
		{"int", intF, rec{}.int(42), 8, true, int64(42)},
		{"int with more after", intF, rec{}.int(42).int(1), 8, true, int64(42)},
		{"int short", intF, []byte{1, 2, 3, 4, 5, 6, 7}, 0, false, nil},
		{"int empty", intF, nil, 0, false, nil},
		{"string", strF, rec{}.str("abc"), 8, true, "abc"},
		{"string 6", strF, rec{}.str("abcdef"), 16, true, "abcdef"},
		{"string empty", strF, rec{}.str(""), 8, true, ""},
		{"string max", strF, rec{}.str("0123456789abcde"), 24, true, "0123456789abcde"},
		{"string too long for MaxLen", strF, rec{}.str("0123456789abcdef"), 0, false, nil},
		{"string invalid utf-8", strF, rec{}.str("a\xffb\xc3"), 8, true, "a\uFFFDb\uFFFD"},
		{"string one byte", strF, []byte{0}, 0, false, nil},
		{"string length beyond data", strF, rec{}.raw(200, 0, 'a', 'b', 'c', 0, 0, 0), 0, false, nil},
		{"bytes", bytesF, rec{}.bytes([]byte{1, 2, 3, 4, 5}, 5), 8, true, []byte{1, 2, 3, 4, 5}},
		{"bytes short", bytesF, []byte{1, 2, 3, 4}, 0, false, nil},
		{"unknown store", plan.Fetch{Key: "z"}, rec{}.int(1), 0, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := pcommon.NewMap()
			n, ok := putValue(m, &tt.f, tt.data, nil)
			assert.Equal(t, tt.wantOK, ok)
			if !ok {
				assert.Equal(t, 0, m.Len(), "a malformed value puts nothing")
				return
			}
			assert.Equal(t, tt.wantN, n)
			assert.LessOrEqual(t, n, len(tt.data), "must not take more bytes than there are")
			got, found := m.Get(tt.f.Key)
			require.True(t, found)
			assert.Equal(t, tt.want, got.AsRaw())
		})
	}
}

// TestDecodeUnpaddedLastValue feeds values whose declared size fits the data
// but whose padding (and, for a string, NUL) is missing. These are malformed
// by the engine's layout and must be counted as such, not crash the
// collector.
func TestDecodeUnpaddedLastValue(t *testing.T) {
	tests := []struct {
		name  string
		f     plan.Fetch
		entry []byte
	}{
		// Length 6: 2+6 = 8 bytes fit, but the value takes align8(2+6+1) = 16.
		{"string without NUL and padding", strFetch("s", 16), rec{}.raw(6, 0, 'a', 'b', 'c', 'd', 'e', 'f')},
		// bytes[5] takes align8(5) = 8, only 5 there.
		{"bytes without padding", bytesFetch("b", 5), rec{}.raw(1, 2, 3, 4, 5)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := withFiles(&plan.Plan{
				Targets: []plan.PlannedTarget{{Path: "/bin/x", ServiceName: "x", Executable: true}},
				Spans:   []plan.SpanDef{{Target: 0, Name: "s"}},
				Sites:   []plan.Site{{EntrySpan: 0, ExitSpan: 0, Entry: []plan.Fetch{tt.f}}},
			})
			b := NewBuilder(Settings{Plan: plan})
			in := []event.SpanRecord{{StartNs: 1, EndNs: 2, RootStartNs: 1, PID: 1, TID: 1, Entry: tt.entry[:len(tt.entry):len(tt.entry)]}}
			require.NotPanics(t, func() { b.Build(in) })
			assert.Equal(t, Counts{Malformed: 1}, b.Counts())
		})
	}
}

func TestResourceWithoutExecutableOrHost(t *testing.T) {
	plan := goldenPlan()
	s := goldenSettings(plan)
	s.Executable = nil
	s.HostName = ""
	b := NewBuilder(s)
	td := b.Build([]event.SpanRecord{
		{StartNs: 1, EndNs: 2, RootStartNs: 1, PID: 7, TID: 8, Def: defLibCall, EntrySite: 6, ExitSite: 7,
			Entry: rec{}.int(1).str("a"), Exit: rec{}.int(0)},
		{StartNs: 3, EndNs: 4, RootStartNs: 3, PID: 7, TID: 8, Def: defQuery, EntrySite: 4, ExitSite: 5,
			Entry: rec{}.str("q").int(1), Exit: rec{}.int(0)},
	})
	require.Equal(t, 2, td.ResourceSpans().Len())
	assert.Equal(t, map[string]any{"service.name": "libfoo", "process.pid": int64(7)},
		td.ResourceSpans().At(0).Resource().Attributes().AsRaw(), "library without Executable: no path")
	assert.Equal(t, map[string]any{"service.name": "app", "process.pid": int64(7), "process.executable.path": testAppPath},
		td.ResourceSpans().At(1).Resource().Attributes().AsRaw())
	assert.Equal(t, Counts{}, b.Counts())
}

func TestExecutableAskedPerLibraryProcess(t *testing.T) {
	plan := goldenPlan()
	s := goldenSettings(plan)
	var asked []uint32
	s.Executable = func(pid uint32, _ event.Image) string {
		asked = append(asked, pid)
		return "/proc-exe"
	}
	b := NewBuilder(s)
	in := goldenSpans()
	td := b.Build(in)
	// Library resources exist for pids 100 and 200; each is resolved once.
	assert.Equal(t, []uint32{100, 200}, asked)
	assert.Equal(t, len(in), td.SpanCount())
}

// A pid reused by a new process, or a process that called execve, is
// another image: its spans get their own resource and its executable is
// asked again.
func TestExecutableFollowsImages(t *testing.T) {
	plan := goldenPlan()
	s := goldenSettings(plan)
	paths := map[event.Image]string{{StartNs: 10}: "/bin/old", {StartNs: 10, ExecID: 1}: "/bin/new", {StartNs: 99}: "/bin/reused"}
	var asked []event.Image
	s.Executable = func(pid uint32, image event.Image) string {
		asked = append(asked, image)
		return paths[image]
	}
	b := NewBuilder(s)
	span := func(image event.Image) event.SpanRecord {
		return event.SpanRecord{StartNs: 1, EndNs: 2, RootStartNs: 1, PID: 7, TID: 7, Def: defLibCall, EntrySite: 6, ExitSite: 7,
			Image: image, Entry: rec{}.int(1).str("a"), Exit: rec{}.int(0)}
	}
	td := b.Build([]event.SpanRecord{span(event.Image{StartNs: 10}), span(event.Image{StartNs: 10, ExecID: 1}), span(event.Image{StartNs: 99}), span(event.Image{StartNs: 10})})
	require.Equal(t, 3, td.ResourceSpans().Len())
	var got []string
	for i := range td.ResourceSpans().Len() {
		v, _ := td.ResourceSpans().At(i).Resource().Attributes().Get("process.executable.path")
		got = append(got, v.Str())
	}
	assert.Equal(t, []string{"/bin/old", "/bin/new", "/bin/reused"}, got)
	assert.Len(t, asked, 3, "each image is asked once")
}

func TestBuildIsRepeatable(t *testing.T) {
	b := NewBuilder(goldenSettings(goldenPlan()))
	first := marshalIndented(t, b.Build(goldenSpans()))
	second := marshalIndented(t, b.Build(goldenSpans()))
	assert.Equal(t, string(first), string(second), "a second Build must not see the first one's groups")
	assert.Equal(t, Counts{FetchErrors: 4, Truncated: 2, Malformed: 2}, b.Counts(), "counts accumulate")

	empty := b.Build(nil)
	assert.Equal(t, 0, empty.ResourceSpans().Len())
}

func TestIDsDependOnSalt(t *testing.T) {
	a := NewBuilder(Settings{Salt: [2]uint64{1, 2}})
	b := NewBuilder(Settings{Salt: [2]uint64{3, 4}})
	assert.NotEqual(t, a.SpanID(1, 1, 100), b.SpanID(1, 1, 100))
	assert.NotEqual(t, a.TraceID(1, 1, 100), b.TraceID(1, 1, 100))
	// Deterministic for the same salt.
	assert.Equal(t, a.SpanID(1, 1, 100), NewBuilder(Settings{Salt: [2]uint64{1, 2}}).SpanID(1, 1, 100))
	// Every input takes part.
	assert.NotEqual(t, a.SpanID(1, 1, 100), a.SpanID(2, 1, 100))
	assert.NotEqual(t, a.SpanID(1, 1, 100), a.SpanID(1, 2, 100))
	assert.NotEqual(t, a.SpanID(1, 1, 100), a.SpanID(1, 1, 101))
	assert.NotEqual(t, a.SpanID(1, 2, 100), a.SpanID(2, 1, 100), "pid and tid are not interchangeable")
	assert.NotEqual(t, a.TraceID(1, 2, 100), a.TraceID(2, 1, 100), "pid and tid are not interchangeable")
	// Never the invalid all-zero ids, even with a zero salt.
	z := NewBuilder(Settings{})
	assert.False(t, z.SpanID(0, 0, 0).IsEmpty())
	assert.False(t, z.TraceID(0, 0, 0).IsEmpty())
}

// A site appended to the plan after the Builder was made (a file attached
// later) decodes its values like the first ones.
func TestAddSiteAppendedLater(t *testing.T) {
	pl, in := benchShape(2)
	bl := NewBuilder(Settings{Plan: pl, WallOffsetNs: testWallOffset, Salt: testSalt})
	bl.Begin(1)
	bl.Add(&in[0])
	pl.Sites = append(pl.Sites, plan.Site{Probe: 1, EntrySpan: -1, ExitSpan: 0, Exit: []plan.Fetch{intFetch("late", sType(8))}})
	ev := in[1]
	ev.ExitSite, ev.Exit = 2, rec{}.int(77)
	bl.Add(&ev)
	ss := bl.End().ResourceSpans().At(0).ScopeSpans().At(0).Spans()
	require.Equal(t, 2, ss.Len())
	v, ok := ss.At(1).Attributes().Get("late")
	require.True(t, ok)
	assert.Equal(t, int64(77), v.Int())
}
