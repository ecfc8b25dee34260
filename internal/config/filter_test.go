package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/confmap"

	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
)

func TestParseCondition(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "arg0:u64 > 4096", want: "arg0:u64 > 4096"},
		{in: "arg0:u64>4096", want: "arg0:u64 > 4096"},
		{in: "arg1:s32 <= -1", want: "arg1:s32 <= -1"},
		{in: "arg1 >= 0x10", want: "arg1 >= 16"},
		{in: "arg0:u64 == 0xffffffffffffffff", want: "arg0:u64 == 18446744073709551615"},
		{in: "$req->len != 0", want: "$req->len != 0"},
		{in: "$req->hdr->len < 3", want: "$req->hdr->len < 3"},
		{in: "retval:s64 < 0", want: "retval:s64 < 0"},
		{in: `arg1:string prefix "/api/"`, want: `arg1:string prefix "/api/"`},
		{in: `arg1:string prefix "a, b"`, want: `arg1:string prefix "a, b"`},
		{in: `arg1:string=="GET"`, want: `arg1:string == "GET"`},
		{in: `$req->path != "/health"`, want: `$req->path != "/health"`},
		{in: "arg0:gostring == `x\"y`", want: `arg0:gostring == "x\"y"`},
		{in: `arg0:string == ""`, want: `arg0:string == ""`},
		{in: `arg0:string == "a\x00b"`, want: `arg0:string == "a\x00b"`},
		{in: `arg1:string < "x"`, err: "a string compares with ==, != or prefix"},
		{in: `arg1:string prefix x`, err: "prefix compares strings: quote the text"},
		{in: `arg1:string prefix "x`, err: "is not one quoted string"},
		{in: `arg1:string == "x" "y"`, err: "is not one quoted string"},
		{in: `arg1:u8 == "x"`, err: "u8 is not a string type"},
		{in: `arg1:bytes[4] == "x"`, err: "bytes[4] is not a string type"},
		{in: "arg1:string == 3", err: "string is not an integer type"},
		{in: "arg1 == three", err: `"three" is not an integer`},
		{in: "arg1 == 99999999999999999999", err: "99999999999999999999 is out of the range of 64-bit integers"},
		{in: "arg1 == 0x10000000000000000", err: "is out of the range of 64-bit integers"},
		{in: "arg1 == 0o17", want: "arg1 == 15"},
		{in: "arg1 == 1_000", want: "arg1 == 1000"},
		{in: "arg1 <> 3", err: "want EXPR OP CONSTANT"},
		{in: "arg1", err: "want EXPR OP CONSTANT"},
		{in: "== 3", err: "fetch expression"},
		{in: "$$params == 1", err: "$$params stands for several values"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			c, err := ParseCondition(tc.in)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, c.String())
		})
	}
}

func TestParseConditionTextLimit(t *testing.T) {
	long := `arg0:string == "` + string(make65('a')) + `"`
	_, err := ParseCondition(long)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the string is 65 bytes, at most 64 are compared")
	_, err = ParseCondition(`arg0:string == "` + string(make65('a')[:64]) + `"`)
	assert.NoError(t, err)
}

func make65(c byte) []byte {
	b := make([]byte, 65)
	for i := range b {
		b[i] = c
	}
	return b
}

func TestConditionCheckType(t *testing.T) {
	typ := func(k fetch.Kind, size uint8) fetch.Type { return fetch.Type{Kind: k, Size: size} }
	str := fetch.Type{Kind: fetch.KindString, MaxLen: 256}
	for _, tc := range []struct {
		cond string
		typ  fetch.Type
		err  string
	}{
		{"arg0 == 255", typ(fetch.KindUnsigned, 1), ""},
		{"arg0 == 256", typ(fetch.KindUnsigned, 1), "out of the range of u8"},
		{"arg0 == -1", typ(fetch.KindUnsigned, 4), "u32 is unsigned, -1 is negative"},
		{"arg0 == 0x100", typ(fetch.KindUnsigned, 1), "0x100 is out of the range of u8"},
		{`arg0 == "a\x00b"`, str, "a C string ends at its first NUL"},
		{`arg0 == "a\x00b"`, fetch.Type{Kind: fetch.KindGoString, MaxLen: 256}, ""},
		{"arg0 > 18446744073709551615", typ(fetch.KindUnsigned, 8), ""},
		{"arg0 > 18446744073709551615", typ(fetch.KindSigned, 8), "out of the range of s64"},
		{"arg0 >= -128", typ(fetch.KindSigned, 1), ""},
		{"arg0 >= -129", typ(fetch.KindSigned, 1), "out of the range of s8"},
		{"arg0 < 2147483648", typ(fetch.KindSigned, 4), "out of the range of s32"},
		{"arg0 < 0xffffffff", typ(fetch.KindHex, 4), ""},
		{`arg0 == "x"`, str, ""},
		{`arg0 == "x"`, typ(fetch.KindUnsigned, 8), "not a string"},
		{"arg0 == 1", str, "not an integer"},
	} {
		t.Run(tc.cond+"/"+tc.typ.String(), func(t *testing.T) {
			c, err := ParseCondition(tc.cond)
			require.NoError(t, err)
			err = c.CheckType(tc.typ)
			if tc.err == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.err)
		})
	}
}

// TestFilterForms checks the forms filter: and counters: take in YAML: one
// condition (whose commas stay), a list, a bare counter reference and the
// counter map.
func TestFilterForms(t *testing.T) {
	conf := confmap.NewFromStringMap(map[string]any{
		"targets": []any{map[string]any{
			"path": "/bin/true",
			"spans": []any{map[string]any{
				"function":    "f",
				"filter":      `arg0:string prefix "a,b"`,
				"exit_filter": []any{"retval:s64 < 0", "retval:s64 > -9"},
			}},
			"counters": []any{
				"uprobe:g",
				map[string]any{"probe": "uprobe:g", "filter": "arg0 > 1, arg1 > 2"},
				map[string]any{"probe": "uprobe:h", "histogram": "arg0:u32"},
			},
		}},
	})
	var cfg receiverConfig
	require.NoError(t, conf.Unmarshal(&cfg))
	require.Len(t, cfg.Targets, 1)
	tg := cfg.Targets[0]
	assert.Equal(t, []string{`arg0:string prefix "a,b"`}, tg.Spans[0].Filter)
	assert.Equal(t, []string{"retval:s64 < 0", "retval:s64 > -9"}, tg.Spans[0].ExitFilter)
	assert.Equal(t, []Counter{
		{Probe: "uprobe:g"},
		{Probe: "uprobe:g", Filter: []string{"arg0 > 1, arg1 > 2"}},
		{Probe: "uprobe:h", Histogram: "arg0:u32"},
	}, tg.Counters)
	// One string is one condition: a comma does not split it.
	err := Validate(cfg.Targets)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `targets[0].counters[1].filter[0]: condition "arg0 > 1, arg1 > 2"`)
	assert.Equal(t, "uprobe:g if arg0 > 1 && arg1 > 2", Counter{Probe: "uprobe:g", Filter: []string{"arg0 > 1", "arg1 > 2"}}.Ref())
}

func TestSplitConditions(t *testing.T) {
	assert.Equal(t, []string{"a > 1", "b < 2", `c == "x && y"`, "d != 0"},
		SplitConditions([]string{"a > 1 && b < 2", `c == "x && y"&&d != 0`}))
	assert.Equal(t, []string{`s == "a\"&&"`, "x > 1"}, SplitConditions([]string{`s == "a\"&&" && x > 1`}))
	assert.Equal(t, "uprobe:f if a > 1 && b < 2", Counter{Probe: " uprobe:f ", Filter: []string{"a > 1 && b < 2 "}}.Ref())
}

func FuzzParseCondition(f *testing.F) {
	for _, s := range []string{
		"arg0:u64 > 4096", `arg1:string prefix "/api/"`, "$req->len != 0", "retval:s64 < -1",
		"arg0 == 0xffffffffffffffff", `arg0:gostring == "x"`, "arg0 <> 1", `"`, "prefix",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCondition(s)
		if err != nil {
			return
		}
		// The canonical form parses back to the same condition.
		again, err := ParseCondition(c.String())
		if err != nil {
			t.Fatalf("%q: canonical form %q does not parse: %v", s, c.String(), err)
		}
		if again.String() != c.String() || again.Op != c.Op || again.Int != c.Int || again.Text != c.Text || again.IsText != c.IsText {
			t.Fatalf("%q: %q parses back as %q", s, c.String(), again.String())
		}
		if c.IsText && len(c.Text) > MaxConditionText {
			t.Fatalf("%q: text of %d bytes accepted", s, len(c.Text))
		}
	})
}
