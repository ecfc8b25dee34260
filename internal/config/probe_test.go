package config

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseProbeValid(t *testing.T) {
	for _, c := range []struct {
		in        string
		want      ProbeRef
		canonical string
	}{
		{"usdt:p:n", ProbeRef{Kind: KindUSDT, Provider: "p", Name: "n"}, "usdt:p:n"},
		{"usdt:postgresql:query__start", ProbeRef{Kind: KindUSDT, Provider: "postgresql", Name: "query__start"}, "usdt:postgresql:query__start"},
		{"usdt:python:function__entry", ProbeRef{Kind: KindUSDT, Provider: "python", Name: "function__entry"}, "usdt:python:function__entry"},
		{"uprobe:f", ProbeRef{Kind: KindUprobe, Symbol: "f"}, "uprobe:f"},
		{"uprobe:palloc", ProbeRef{Kind: KindUprobe, Symbol: "palloc"}, "uprobe:palloc"},
		{"uprobe:f+0x10", ProbeRef{Kind: KindUprobe, Symbol: "f", Offset: 16}, "uprobe:f+0x10"},
		{"uprobe:f+0X10", ProbeRef{Kind: KindUprobe, Symbol: "f", Offset: 16}, "uprobe:f+0x10"},
		{"uprobe:f+16", ProbeRef{Kind: KindUprobe, Symbol: "f", Offset: 16}, "uprobe:f+0x10"},
		{"uprobe:f+0", ProbeRef{Kind: KindUprobe, Symbol: "f"}, "uprobe:f"},
		{"uprobe:f+0x0", ProbeRef{Kind: KindUprobe, Symbol: "f"}, "uprobe:f"},
		{"uprobe:f+0xffffffffffffffff", ProbeRef{Kind: KindUprobe, Symbol: "f", Offset: ^uint64(0)}, "uprobe:f+0xffffffffffffffff"},
		{"uprobe:_ZN3foo3barEv", ProbeRef{Kind: KindUprobe, Symbol: "_ZN3foo3barEv"}, "uprobe:_ZN3foo3barEv"},
		{"uprobe:memcpy@GLIBC_2.2.5", ProbeRef{Kind: KindUprobe, Symbol: "memcpy@GLIBC_2.2.5"}, "uprobe:memcpy@GLIBC_2.2.5"},
		{"uprobe:recurse.part.0+0x4", ProbeRef{Kind: KindUprobe, Symbol: "recurse.part.0", Offset: 4}, "uprobe:recurse.part.0+0x4"},
		{"uretprobe:f", ProbeRef{Kind: KindUretprobe, Symbol: "f"}, "uretprobe:f"},
		{"ret:f", ProbeRef{Kind: KindRet, Symbol: "f"}, "ret:f"},
		{"uretprobe:palloc", ProbeRef{Kind: KindUretprobe, Symbol: "palloc"}, "uretprobe:palloc"},
		{"line:prog.c:12", ProbeRef{Kind: KindLine, File: "prog.c", Line: 12}, "line:prog.c:12"},
		{"line:src/net/server.c:1", ProbeRef{Kind: KindLine, File: "src/net/server.c", Line: 1}, "line:src/net/server.c:1"},
		{"line:/abs/a:b.c:2147483647", ProbeRef{Kind: KindLine, File: "/abs/a:b.c", Line: 2147483647}, "line:/abs/a:b.c:2147483647"},
	} {
		t.Run(c.in, func(t *testing.T) {
			p, err := ParseProbe(c.in)
			require.NoError(t, err)
			assert.Equal(t, c.want, p)
			assert.Equal(t, c.canonical, p.String())
			again, err := ParseProbe(p.String())
			require.NoError(t, err, "the canonical form parses")
			assert.Equal(t, p, again)
		})
	}
}

func TestParseProbeCanonicalEquality(t *testing.T) {
	same := [][]string{
		{"uprobe:f", "uprobe:f+0", "uprobe:f+0x0", "uprobe:f+0x00"},
		{"uprobe:f+0x10", "uprobe:f+16", "uprobe:f+0X10", "uprobe:f+0x010"},
	}
	for _, group := range same {
		first, err := ParseProbe(group[0])
		require.NoError(t, err)
		for _, ref := range group[1:] {
			p, err := ParseProbe(ref)
			require.NoError(t, err, ref)
			assert.Equal(t, first, p, "%s and %s", group[0], ref)
			assert.Equal(t, first.String(), p.String(), "%s and %s", group[0], ref)
		}
	}
	// Different kinds of the same symbol are different probes.
	up, _ := ParseProbe("uprobe:f")
	ur, _ := ParseProbe("uretprobe:f")
	assert.NotEqual(t, up.String(), ur.String())
}

func TestParseProbeInvalid(t *testing.T) {
	for _, c := range []struct {
		in   string
		want string // a part of the error text
	}{
		{"", "want usdt:PROVIDER:NAME, uprobe:SYMBOL[+OFFSET], uretprobe:SYMBOL, ret:SYMBOL or line:FILE:LINE"},
		{"palloc", "want usdt:PROVIDER:NAME, uprobe:SYMBOL[+OFFSET], uretprobe:SYMBOL, ret:SYMBOL or line:FILE:LINE"},
		{"kprobe:x", `unknown probe kind "kprobe" (want usdt, uprobe, uretprobe, ret or line)`},
		{"line:", "want line:FILE:LINE"},
		{"line:prog.c", "want line:FILE:LINE"},
		{"line::12", "empty file name"},
		{"line:prog.c:", `line "" is not a line number`},
		{"line:prog.c:0", `line "0" is not a line number (want 1 to 2147483647, decimal)`},
		{"line:prog.c:012", `line "012" is not a line number`},
		{"line:prog.c:0x10", `line "0x10" is not a line number`},
		{"line:prog.c:-1", `line "-1" is not a line number`},
		{"line:prog.c:+1", `line "+1" is not a line number`},
		{"line:prog.c:2147483648", `line "2147483648" is not a line number`},
		{"line:prog.c:99999999999999999999", `line "99999999999999999999" is not a line number`},
		{"line:prog.c:12 ", `line "12 " is not a line number`},
		{"line:my prog.c:12", "file:"},
		{"USDT:p:n", `unknown probe kind "USDT"`},
		{"Uprobe:f", `unknown probe kind "Uprobe"`},
		{" uprobe:f", `unknown probe kind " uprobe"`},
		{":f", `unknown probe kind ""`},
		{"usdt:", "want usdt:PROVIDER:NAME"},
		{"usdt:p", "want usdt:PROVIDER:NAME"},
		{"usdt:p:", "want usdt:PROVIDER:NAME"},
		{"usdt::n", "want usdt:PROVIDER:NAME"},
		{"usdt:p:n:x", "want usdt:PROVIDER:NAME"},
		{"usdt:p q:n", "provider:"},
		{"usdt:p:n ", "name:"},
		{"usdt:p:n\t", "space or control character"},
		{"usdt:p:\x7f", "space or control character"},
		{"uprobe:", "empty symbol"},
		{"uprobe:+0x10", "empty symbol"},
		{"uprobe:f g", "space or control character"},
		{"uprobe: f", "space or control character"},
		{"uprobe:f\n", "space or control character"},
		{"uprobe:f+", `offset "" is not a number`},
		{"uprobe:f+x", `offset "x" is not a number`},
		{"uprobe:f+0x", `offset "0x" is not a number`},
		{"uprobe:f+-1", `offset "-1" is not a number`},
		{"uprobe:f++1", `offset "+1" is not a number`},
		{"uprobe:f+0x10+1", `offset "0x10+1" is not a number`},
		{"uprobe:f+ 16", `offset " 16" is not a number`},
		{"uprobe:f+16 ", `offset "16 " is not a number`},
		{"uprobe:f+0x10000000000000000", "is not a number"},
		{"uprobe:f+0xg", "is not a number"},
		{"uretprobe:", "empty symbol"},
		{"uretprobe:f+0x10", "a return probe takes no offset"},
		{"uretprobe:f+0", "a return probe takes no offset"},
		{"uretprobe:f g", "space or control character"},
	} {
		t.Run(c.in, func(t *testing.T) {
			p, err := ParseProbe(c.in)
			require.Error(t, err, "parsed as %#v", p)
			assert.Contains(t, err.Error(), c.want)
			assert.Contains(t, err.Error(), "probe ", "the error names the reference")
			assert.Equal(t, ProbeRef{}, p)
		})
	}
}

func TestProbeKindString(t *testing.T) {
	assert.Equal(t, "usdt", KindUSDT.String())
	assert.Equal(t, "uprobe", KindUprobe.String())
	assert.Equal(t, "uretprobe", KindUretprobe.String())
	assert.Equal(t, "ret", KindRet.String())
	assert.Equal(t, "line", KindLine.String())
	assert.Equal(t, "unknown", ProbeKind(0).String())
	assert.Equal(t, "unknown", ProbeKind(99).String())
	assert.Equal(t, "", ProbeRef{}.String())
}

func FuzzParseProbe(f *testing.F) {
	for _, s := range []string{
		"usdt:p:n", "usdt:postgresql:query__start", "uprobe:f", "uprobe:f+0x10", "uprobe:f+16",
		"uprobe:f+0", "uretprobe:f", "kprobe:x", "usdt:p", "uretprobe:f+1", "uprobe:f+", "uprobe:a:b+0x1",
		"uprobe:f+1_0", "uprobe:f+0b11", "uprobe:f+0o17", "usdt:a:b:c", "",
		"uprobe:0x401a2c", "uprobe:0x0", "uprobe:0xzz", "uprobe:0x10+0x4", "ret:f",
		"line:prog.c:12", "line:a:b:3", "line::1", "line:x.c:0", "line:x.c:01", "line:x.c:4294967296",
	} {
		f.Add(s)
	}
	f.Add("uprobe:" + strings.Repeat("f", MaxProbeRefBytes-10) + "+16")
	f.Add("usdt:p:" + strings.Repeat("n", MaxProbeRefBytes))
	f.Fuzz(func(t *testing.T, ref string) {
		p, err := ParseProbe(ref)
		if err != nil {
			if p != (ProbeRef{}) {
				t.Fatalf("ParseProbe(%q) failed (%v) but returned %#v", ref, err, p)
			}
			if len(err.Error()) > 2*len(ref)+512 || len(ref) > MaxProbeRefBytes && len(err.Error()) > 512 {
				t.Fatalf("ParseProbe of %d bytes: an error of %d bytes", len(ref), len(err.Error()))
			}
			return
		}
		// It becomes the probe.name attribute: bounded, printable.
		if len(ref) > MaxProbeRefBytes || len(p.String()) > MaxProbeRefBytes {
			t.Fatalf("ParseProbe accepted %d bytes (%d canonical)", len(ref), len(p.String()))
		}
		if err := checkTelemetryName("probe", p.String(), MaxProbeRefBytes); err != nil {
			t.Fatalf("ParseProbe(%q) accepted a name telemetry refuses: %v", ref, err)
		}
		switch p.Kind {
		case KindUSDT:
			if p.Provider == "" || p.Name == "" || p.Symbol != "" || p.Offset != 0 {
				t.Fatalf("ParseProbe(%q) = %#v", ref, p)
			}
		case KindUprobe:
			bySymbol := p.Symbol != "" && p.Address == 0
			byAddress := p.Symbol == "" && p.Address != 0 && p.Offset == 0
			if !(bySymbol || byAddress) || p.Provider != "" || p.Name != "" {
				t.Fatalf("ParseProbe(%q) = %#v", ref, p)
			}
		case KindUretprobe, KindRet:
			if p.Symbol == "" || p.Offset != 0 || p.Provider != "" || p.Name != "" {
				t.Fatalf("ParseProbe(%q) = %#v", ref, p)
			}
		case KindLine:
			if p.File == "" || p.Line < 1 || p.Line > MaxLine || p.Symbol != "" || p.Provider != "" {
				t.Fatalf("ParseProbe(%q) = %#v", ref, p)
			}
		default:
			t.Fatalf("ParseProbe(%q) = %#v: unknown kind", ref, p)
		}
		s := p.String()
		again, err := ParseProbe(s)
		if err != nil {
			t.Fatalf("ParseProbe(%q) = %#v, whose String %q does not parse: %v", ref, p, s, err)
		}
		if again != p {
			t.Fatalf("ParseProbe(%q) = %#v, but ParseProbe(%q) = %#v", ref, p, s, again)
		}
		if again.String() != s {
			t.Fatalf("String is not stable: %q then %q", s, again.String())
		}
	})
}

// TestParseProbeOffsetNotOctal checks that a leading zero does not make an
// offset octal: +010 is not 8 bytes. (The fetch expressions refuse leading
// zeros for the same reason.)
func TestParseProbeOffsetNotOctal(t *testing.T) {
	p, err := ParseProbe("uprobe:f+010")
	if err == nil {
		assert.NotEqual(t, uint64(8), p.Offset, "uprobe:f+010 parsed as octal, %s", p)
	}
}

func TestParseProbeAddress(t *testing.T) {
	p, err := ParseProbe("uprobe:0x401a2c")
	require.NoError(t, err)
	assert.Equal(t, ProbeRef{Kind: KindUprobe, Address: 0x401a2c}, p)
	assert.Equal(t, "uprobe:0x401a2c", p.String())
	for bad, want := range map[string]string{
		"uprobe:0x0":  `probe "uprobe:0x0": address 0 is no instruction: give the virtual address of an instruction inside a function (e.g. uprobe:0x401a2c)`,
		"uprobe:0xzz": `probe "uprobe:0xzz": address "0xzz" is not a hex number (want e.g. uprobe:0x401a2c)`,
		"uprobe:0x":   `probe "uprobe:0x": address "0x" is not a hex number (want e.g. uprobe:0x401a2c)`,
	} {
		_, err := ParseProbe(bad)
		assert.EqualError(t, err, want, bad)
	}
}
