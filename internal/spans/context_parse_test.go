package spans

import (
	"encoding/hex"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
)

// The W3C example traceparent and its parts.
const (
	tpTraceHex  = "4bf92f3577b34da6a3ce929d0e0e4736"
	tpParentHex = "00f067aa0ba902b7"
	tpValid     = "00-" + tpTraceHex + "-" + tpParentHex + "-01"
)

func mustTraceID(t testing.TB, s string) pcommon.TraceID {
	t.Helper()
	var id pcommon.TraceID
	n, err := hex.Decode(id[:], []byte(s))
	require.NoError(t, err)
	require.Equal(t, len(id), n)
	return id
}

func mustSpanID(t testing.TB, s string) pcommon.SpanID {
	t.Helper()
	var id pcommon.SpanID
	n, err := hex.Decode(id[:], []byte(s))
	require.NoError(t, err)
	require.Equal(t, len(id), n)
	return id
}

// tp builds a traceparent from its four fields.
func tp(version, trace, parent, flags string) string {
	return version + "-" + trace + "-" + parent + "-" + flags
}

func TestParseTraceparent(t *testing.T) {
	otherTrace := "0af7651916cd43dd8448eb211c80319c"
	otherParent := "b7ad6b7169203331"
	zeroTrace := strings.Repeat("0", 32)
	zeroParent := strings.Repeat("0", 16)

	found := func(trace, parent string, sampled bool) func(t *testing.T) (traceContext, Outcome) {
		return func(t *testing.T) (traceContext, Outcome) {
			return traceContext{trace: mustTraceID(t, trace), parent: mustSpanID(t, parent), sampled: sampled}, ContextFound
		}
	}
	none := func(o Outcome) func(t *testing.T) (traceContext, Outcome) {
		return func(*testing.T) (traceContext, Outcome) { return traceContext{}, o }
	}
	valid := found(tpTraceHex, tpParentHex, true)

	tests := []struct {
		name string
		in   string
		want func(t *testing.T) (traceContext, Outcome)
	}{
		// Where the traceparent is.
		{"whole value", tpValid, valid},
		{"sqlcommenter", "SELECT * FROM users WHERE id = $1 /*traceparent='" + tpValid + "'*/", valid},
		{"sqlcommenter among other keys", "UPDATE t SET a=1 /*action='run',controller='x',traceparent='" + tpValid + "',tracestate='rojo%3D00f067aa0ba902b7'*/", valid},
		{"url query", "GET /api/v1/items?traceparent=" + tpValid + "&page=2 HTTP/1.1", valid},
		{"url path segment", "/trace/" + tpValid + "/x", valid},
		{"percent-encoded with uppercase escape", "q?tp%3D" + tpValid + "%26x", valid},
		// A lowercase escape ends in a hex digit: by the hex-run rule the
		// traceparent after it is not found. Pinned (see the report).
		{"percent-encoded with lowercase escape", "q?tp%3d" + tpValid + "%26x", valid},
		{"http header line", "traceparent: " + tpValid + "\r\n", valid},
		{"json", `{"traceparent":"` + tpValid + `"}`, valid},
		{"followed by a dash (future version fields)", tpValid + "-deadbeef", valid},
		{"non-ascii around", "日本語 €" + tpValid + "…ü", valid},
		{"invalid utf-8 around", "\xff\xfe" + tpValid + "\xc3", valid},
		{"nul around", "\x00" + tpValid + "\x00", valid},
		{"newline around", "\n" + tpValid + "\n", valid},

		// Lowercase only (W3C: uppercase is invalid, so it is not a traceparent).
		{"all uppercase", strings.ToUpper(tpValid), none(ContextMissing)},
		{"uppercase trace id", tp("00", strings.ToUpper(tpTraceHex), tpParentHex, "01"), none(ContextMissing)},
		{"uppercase parent id", tp("00", tpTraceHex, strings.ToUpper(tpParentHex), "01"), none(ContextMissing)},
		{"uppercase flags", tp("00", tpTraceHex, tpParentHex, "0A"), none(ContextMissing)},
		{"uppercase version", tp("0A", tpTraceHex, tpParentHex, "01"), none(ContextMissing)},
		{"one uppercase digit in the trace id", tp("00", "4BF92f3577b34da6a3ce929d0e0e4736", tpParentHex, "01"), none(ContextMissing)},

		// Invalid values.
		{"version ff", tp("ff", tpTraceHex, tpParentHex, "01"), none(ContextInvalid)},
		{"all-zero trace id", tp("00", zeroTrace, tpParentHex, "01"), none(ContextInvalid)},
		{"all-zero parent id", tp("00", tpTraceHex, zeroParent, "01"), none(ContextInvalid)},
		{"all-zero both", tp("00", zeroTrace, zeroParent, "01"), none(ContextInvalid)},
		{"version ff inside text", "/*traceparent='" + tp("ff", tpTraceHex, tpParentHex, "01") + "'*/", none(ContextInvalid)},
		{"non-hex in trace id", tp("00", "4bf92f3577b34da6a3ce929d0e0e473g", tpParentHex, "01"), none(ContextMissing)},
		{"non-hex in flags", tp("00", tpTraceHex, tpParentHex, "0x"), none(ContextMissing)},
		{"underscores instead of dashes", "00_" + tpTraceHex + "_" + tpParentHex + "_01", none(ContextMissing)},

		// Flags: only bit 0 (sampled) matters.
		{"flags 00 not sampled", tp("00", tpTraceHex, tpParentHex, "00"), found(tpTraceHex, tpParentHex, false)},
		{"flags 01 sampled", tp("00", tpTraceHex, tpParentHex, "01"), found(tpTraceHex, tpParentHex, true)},
		{"flags 02 not sampled", tp("00", tpTraceHex, tpParentHex, "02"), found(tpTraceHex, tpParentHex, false)},
		{"flags 03 sampled", tp("00", tpTraceHex, tpParentHex, "03"), found(tpTraceHex, tpParentHex, true)},
		{"flags ff sampled", tp("00", tpTraceHex, tpParentHex, "ff"), found(tpTraceHex, tpParentHex, true)},
		{"flags fe not sampled", tp("00", tpTraceHex, tpParentHex, "fe"), found(tpTraceHex, tpParentHex, false)},
		{"future version 01", tp("01", tpTraceHex, tpParentHex, "01"), valid},
		{"future version fe", tp("fe", tpTraceHex, tpParentHex, "01"), valid},

		// Field lengths: part of a longer hex run must not match.
		{"33-hex trace id", tp("00", tpTraceHex+"a", tpParentHex, "01"), none(ContextMissing)},
		{"31-hex trace id", tp("00", tpTraceHex[1:], tpParentHex, "01"), none(ContextMissing)},
		{"17-hex parent id", tp("00", tpTraceHex, tpParentHex+"a", "01"), none(ContextMissing)},
		{"15-hex parent id", tp("00", tpTraceHex, tpParentHex[1:], "01"), none(ContextMissing)},
		{"3-hex version", tp("000", tpTraceHex, tpParentHex, "01"), none(ContextMissing)},
		{"1-hex version", tp("0", tpTraceHex, tpParentHex, "01"), none(ContextMissing)},
		{"3-hex flags", tp("00", tpTraceHex, tpParentHex, "011"), none(ContextMissing)},
		{"1-hex flags", tp("00", tpTraceHex, tpParentHex, "1"), none(ContextMissing)},
		{"preceded by a hex digit", "a" + tpValid, none(ContextMissing)},
		{"followed by a hex digit", tpValid + "0", none(ContextMissing)},
		{"preceded by a non-hex letter", "g" + tpValid, valid},
		{"followed by a non-hex letter", tpValid + "g", valid},

		// Several candidates.
		{"two valid: first wins", tp("00", otherTrace, otherParent, "01") + " " + tpValid, found(otherTrace, otherParent, true)},
		{"two valid in sqlcommenter order: first wins", "/*a='" + tpValid + "',b='" + tp("00", otherTrace, otherParent, "00") + "'*/", valid},
		{"unsampled first, sampled second: first wins", tp("00", otherTrace, otherParent, "00") + "," + tpValid, found(otherTrace, otherParent, false)},
		{"malformed candidate skipped, valid one found", tp("00", tpTraceHex+"a", tpParentHex, "01") + " " + tp("00", otherTrace, otherParent, "01"), found(otherTrace, otherParent, true)},
		{"uppercase candidate skipped, valid one found", strings.ToUpper(tpValid) + " " + tp("00", otherTrace, otherParent, "01"), found(otherTrace, otherParent, true)},
		// The first well-formed candidate decides: an invalid one (version ff,
		// zero ids) ends the search, a later valid one is not used. Pinned.
		{"first well-formed is invalid: the next valid one wins", tp("ff", tpTraceHex, tpParentHex, "01") + " " + tp("00", otherTrace, otherParent, "01"), found(otherTrace, otherParent, true)},
		{"first has zero trace: the next valid one wins", tp("00", zeroTrace, tpParentHex, "01") + " " + tp("00", otherTrace, otherParent, "01"), found(otherTrace, otherParent, true)},
		{"only invalid ones", tp("ff", tpTraceHex, tpParentHex, "01") + " " + tp("00", zeroTrace, otherParent, "01"), none(ContextInvalid)},
		{"overlapping second (flags reused as version): first wins", tpValid + "-" + tp("00", otherTrace, otherParent, "01")[3:], valid},

		// Nothing there.
		{"empty", "", none(ContextMissing)},
		{"plain text", "SELECT 1", none(ContextMissing)},
		{"sqlcommenter without traceparent", "SELECT 1 /*action='run'*/", none(ContextMissing)},
		{"54 characters", tpValid[:54], none(ContextMissing)},
		{"only dashes", strings.Repeat("-", 55), none(ContextMissing)},
		{"only hex", strings.Repeat("a", 55), none(ContextMissing)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantTC, wantO := tt.want(t)
			gotTC, gotO := parseTraceparent(tt.in)
			assert.Equal(t, wantO, gotO, "outcome")
			assert.Equal(t, wantTC, gotTC, "context")
		})
	}
}

// TestParseTraceparentTruncated cuts a valid traceparent at every position
// (keeping a prefix, keeping a suffix, and removing one character), alone and
// inside a sqlcommenter comment: no partial traceparent may be found.
func TestParseTraceparentTruncated(t *testing.T) {
	require.Len(t, tpValid, 55)
	wraps := []struct{ before, after string }{
		{"", ""},
		{"SELECT 1 /*traceparent='", "'*/"},
		{"x ", " y"},
	}
	for _, w := range wraps {
		for i := 0; i < len(tpValid); i++ {
			for _, cut := range []struct{ kind, s string }{
				{"prefix", tpValid[:i]},
				{"suffix", tpValid[i+1:]},
				{"without one", tpValid[:i] + tpValid[i+1:]},
			} {
				in := w.before + cut.s + w.after
				tc, o := parseTraceparent(in)
				assert.Equal(t, ContextMissing, o, "%s %d: %q", cut.kind, i, in)
				assert.Equal(t, traceContext{}, tc, "%s %d: %q", cut.kind, i, in)
			}
		}
	}
	// Cut then followed by more of itself: the shifted copy is what is found,
	// never the cut one.
	for i := 1; i < len(tpValid); i++ {
		in := tpValid[:i] + " " + tpValid
		tc, o := parseTraceparent(in)
		require.Equal(t, ContextFound, o, "prefix %d then a whole one: %q", i, in)
		assert.Equal(t, mustTraceID(t, tpTraceHex), tc.trace)
		assert.Equal(t, mustSpanID(t, tpParentHex), tc.parent)
	}
}

func TestParseTraceparentDoesNotAlias(t *testing.T) {
	buf := []byte("q /*traceparent='" + tpValid + "'*/")
	tc, o := parseTraceparent(string(buf))
	require.Equal(t, ContextFound, o)
	for i := range buf {
		buf[i] = 'f'
	}
	assert.Equal(t, mustTraceID(t, tpTraceHex), tc.trace)
	assert.Equal(t, mustSpanID(t, tpParentHex), tc.parent)
}

// asID wraps test input as a fetched id: hex text when every byte is a hex
// digit or space (the way a string fetch would deliver it), else raw bytes.
func asID(b []byte) idValue {
	if len(b) == 0 {
		return idValue{v: b}
	}
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == ' ' || c == '\n') {
			return idValue{v: b}
		}
	}
	return idValue{v: b, text: true}
}

func TestIDFrom(t *testing.T) {
	raw16 := []byte{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	raw8 := []byte{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}
	tests := []struct {
		name string
		size int
		in   []byte
		ok   bool
		want []byte
	}{
		{"raw 16", 16, raw16, true, raw16},
		{"raw 8", 8, raw8, true, raw8},
		{"raw zeros copied (validity is binaryContext's)", 16, make([]byte, 16), true, make([]byte, 16)},
		{"lower hex 32", 16, []byte(tpTraceHex), true, raw16},
		{"upper hex 32", 16, []byte(strings.ToUpper(tpTraceHex)), true, raw16},
		{"mixed hex 32", 16, []byte("4BF92f3577B34DA6a3ce929d0e0e4736"), true, raw16},
		{"lower hex 16", 8, []byte(tpParentHex), true, raw8},
		{"upper hex 16", 8, []byte(strings.ToUpper(tpParentHex)), true, raw8},
		{"hex with surrounding space", 8, []byte("  " + tpParentHex + "\n"), true, raw8},
		{"nil", 16, nil, false, nil},
		{"empty", 8, []byte{}, false, nil},
		{"raw 15", 16, raw16[:15], false, nil},
		{"raw 17", 16, append(append([]byte{}, raw16...), 0), false, nil},
		{"raw 7", 8, raw8[:7], false, nil},
		{"raw 9", 8, append(append([]byte{}, raw8...), 0), false, nil},
		{"hex 31", 16, []byte(tpTraceHex[:31]), false, nil},
		{"hex 33", 16, []byte(tpTraceHex + "a"), false, nil},
		{"hex 15", 8, []byte(tpParentHex[:15]), false, nil},
		{"hex 17", 8, []byte(tpParentHex + "a"), false, nil},
		{"0x prefix", 8, []byte("0x" + tpParentHex), false, nil},
		{"0x prefix, shortened to 16", 8, []byte("0x" + tpParentHex[:14]), false, nil},
		{"non-hex of hex length", 8, []byte("00f067aa0ba902bz"), false, nil},
		{"inner space", 8, []byte("00f067aa 0ba902b"), false, nil},
		{"trace id text for a span id", 8, []byte(tpTraceHex), false, nil},
		{"span id text for a trace id", 16, []byte(tpParentHex), false, nil}, // text must be 32 hex digits
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := make([]byte, tt.size)
			ok := idFrom(id, asID(tt.in))
			assert.Equal(t, tt.ok, ok)
			if tt.ok {
				assert.Equal(t, tt.want, id)
			}
		})
	}
}

func TestBinaryContext(t *testing.T) {
	raw16 := mustTraceID(t, tpTraceHex)
	raw8 := mustSpanID(t, tpParentHex)
	foundTC := traceContext{trace: raw16, parent: raw8, sampled: true}
	tests := []struct {
		name          string
		trace, parent []byte
		wantTC        traceContext
		want          Outcome
	}{
		{"raw", raw16[:], raw8[:], foundTC, ContextFound},
		{"lower hex", []byte(tpTraceHex), []byte(tpParentHex), foundTC, ContextFound},
		{"upper hex", []byte(strings.ToUpper(tpTraceHex)), []byte(strings.ToUpper(tpParentHex)), foundTC, ContextFound},
		{"raw trace, hex parent", raw16[:], []byte(tpParentHex), foundTC, ContextFound},
		{"hex trace, raw parent", []byte(tpTraceHex), raw8[:], foundTC, ContextFound},
		{"zero raw trace", make([]byte, 16), raw8[:], traceContext{}, ContextInvalid},
		{"zero raw parent", raw16[:], make([]byte, 8), traceContext{}, ContextInvalid},
		{"zero hex trace", []byte(strings.Repeat("0", 32)), raw8[:], traceContext{}, ContextInvalid},
		{"zero hex parent", raw16[:], []byte(strings.Repeat("0", 16)), traceContext{}, ContextInvalid},
		{"short trace", raw16[:15], raw8[:], traceContext{}, ContextInvalid},
		{"long parent", raw16[:], append(append([]byte{}, raw8[:]...), 1), traceContext{}, ContextInvalid},
		{"empty trace", []byte{}, raw8[:], traceContext{}, ContextInvalid},
		{"empty parent", raw16[:], []byte{}, traceContext{}, ContextInvalid},
		{"bad hex trace", []byte(strings.Repeat("g", 32)), raw8[:], traceContext{}, ContextInvalid},
		{"31 hex trace", []byte(tpTraceHex[:31]), raw8[:], traceContext{}, ContextInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tc, o := binaryContext(asID(tt.trace), asID(tt.parent))
			assert.Equal(t, tt.want, o)
			assert.Equal(t, tt.wantTC, tc)
		})
	}
}

func TestOutcomeString(t *testing.T) {
	assert.Equal(t, []string{"found", "missing", "invalid", "unsampled", "timeout", "overflow"}, func() []string {
		var s []string
		for o := Outcome(0); o < outcomes; o++ {
			s = append(s, o.String())
		}
		return s
	}())
}

// traceparentRE is the shape parseTraceparent looks for, stated apart: a
// lowercase VV-32-16-2 run not followed by another lowercase hex digit.
var traceparentRE = regexp.MustCompile(`^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(?:[^0-9a-f]|$)`)

// traceparentAt returns the submatch indexes (into s) of the traceparent
// candidate that starts at i: one of traceparentRE's shape whose first
// byte does not continue a lowercase hex run (a percent-encoded "=" before
// it, "%3d", does not count as one); nil when none starts there.
func traceparentAt(s string, i int) []int {
	m := traceparentRE.FindStringSubmatchIndex(s[i:])
	if m == nil {
		return nil
	}
	if i > 0 && strings.ContainsRune("0123456789abcdef", rune(s[i-1])) && !strings.HasSuffix(strings.ToLower(s[:i]), "%3d") {
		return nil
	}
	for k := range m {
		m[k] += i
	}
	return m
}

// invalidTraceparent says whether a candidate's fields make it invalid
// (W3C: version ff, an all-zero trace or parent id).
func invalidTraceparent(version, trace, parent string) bool {
	return version == "ff" || trace == strings.Repeat("0", 32) || parent == strings.Repeat("0", 16)
}

func FuzzParseTraceparent(f *testing.F) {
	for _, s := range []string{
		"", tpValid, strings.ToUpper(tpValid),
		"SELECT 1 /*traceparent='" + tpValid + "'*/",
		"GET /x?traceparent=" + tpValid + "&y",
		tp("ff", tpTraceHex, tpParentHex, "01"),
		tp("00", strings.Repeat("0", 32), tpParentHex, "01"),
		tp("00", tpTraceHex, strings.Repeat("0", 16), "01"),
		tp("00", tpTraceHex, tpParentHex, "00"),
		tp("00", tpTraceHex+"a", tpParentHex, "01"),
		"a" + tpValid, tpValid + "a", tpValid + " " + tpValid,
		tpValid[:30], "日本" + tpValid + "\xff",
		tp("ff", tpTraceHex, tpParentHex, "01") + tpValid,
		// An invalid one, then a valid one: the valid one is found.
		tp("ff", strings.Repeat("0", 32), strings.Repeat("0", 16), "00") + "-" + tp("00", strings.Repeat("0", 31)+"1", strings.Repeat("0", 15)+"1", "00"),
		"traceparent%3d" + tpValid, "traceparent%3D" + tpValid,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tc, o := parseTraceparent(s)
		// What it finds: the leftmost valid candidate; else invalid when
		// there was an invalid one; else missing.
		var m []int
		invalidAt := -1
		for i := 0; i < len(s) && m == nil; i++ {
			c := traceparentAt(s, i)
			if c == nil {
				continue
			}
			if invalidTraceparent(s[c[2]:c[3]], s[c[4]:c[5]], s[c[6]:c[7]]) {
				if invalidAt < 0 {
					invalidAt = i
				}
				continue
			}
			m = c
		}
		if m == nil {
			want := ContextMissing
			if invalidAt >= 0 {
				want = ContextInvalid
			}
			if o != want || tc != (traceContext{}) {
				t.Fatalf("%q: want %v (an invalid traceparent at %d), got %v %+v", s, want, invalidAt, o, tc)
			}
			return
		}
		version, trace, parent, flags := s[m[2]:m[3]], s[m[4]:m[5]], s[m[6]:m[7]], s[m[8]:m[9]]
		if o != ContextFound {
			t.Fatalf("%q: traceparent at %d, got %v", s, m[2], o)
		}
		// The ids re-encode to the hex in the input at the match position.
		if got := hex.EncodeToString(tc.trace[:]); got != trace {
			t.Fatalf("%q: trace id %s, input has %s", s, got, trace)
		}
		if got := hex.EncodeToString(tc.parent[:]); got != parent {
			t.Fatalf("%q: parent id %s, input has %s", s, got, parent)
		}
		if tc.trace.IsEmpty() || tc.parent.IsEmpty() {
			t.Fatalf("%q: found an empty id", s)
		}
		fl, _ := hex.DecodeString(flags)
		if tc.sampled != (fl[0]&1 == 1) {
			t.Fatalf("%q: sampled %v with flags %s", s, tc.sampled, flags)
		}
		if !strings.Contains(s, tp(version, trace, parent, flags)) {
			t.Fatalf("%q: match not in input", s)
		}
		// The same text on its own parses the same.
		tc2, o2 := parseTraceparent(tp(version, trace, parent, flags))
		if o2 != o || tc2 != tc {
			t.Fatalf("%q: alone %v %+v, in text %v %+v", s, o2, tc2, o, tc)
		}
		// binaryContext agrees on the ids as hex text.
		btc, bo := binaryContext(idValue{[]byte(trace), true}, idValue{[]byte(parent), true})
		if bo != ContextFound || btc.trace != tc.trace || btc.parent != tc.parent {
			t.Fatalf("%q: binaryContext %v %+v", s, bo, btc)
		}
	})
}
