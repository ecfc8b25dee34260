package debuginfo

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readelfCFA is one row of readelf --debug-dump=frames-interp.
type readelfCFA struct {
	loc  uint64
	rule string // "rsp+8", "rbp+16" or "exp"
}

type readelfFDE struct {
	low, high uint64
	rows      []readelfCFA
}

var (
	reFDE = regexp.MustCompile(`FDE cie=([0-9a-f]+) pc=([0-9a-f]+)\.\.([0-9a-f]+)`)
	reCIE = regexp.MustCompile(`^([0-9a-f]+) [0-9a-f]+ [0-9a-f]+ CIE`)
	reRow = regexp.MustCompile(`^([0-9a-f]{16}) +([a-z0-9]+\+[0-9]+|exp)\b`)
)

// readelfFrames parses readelf -wF: every FDE with its CFA rows; an FDE
// without rows gets its CIE's initial row.
func readelfFrames(t *testing.T, path string) []readelfFDE {
	t.Helper()
	requireTool(t, "readelf")
	out, err := exec.Command("readelf", "--debug-dump=frames-interp", path).Output()
	require.NoError(t, err)
	var (
		fdes    []readelfFDE
		cieRow  = map[string]string{}
		curCIE  string
		cur     *readelfFDE
		curCIEs string
	)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "Contents of the") {
			curCIEs = line // offsets restart per section
			continue
		}
		if m := reCIE.FindStringSubmatch(line); m != nil {
			curCIE, cur = curCIEs+m[1], nil
			continue
		}
		if m := reFDE.FindStringSubmatch(line); m != nil {
			lo, _ := strconv.ParseUint(m[2], 16, 64)
			hi, _ := strconv.ParseUint(m[3], 16, 64)
			fdes = append(fdes, readelfFDE{low: lo, high: hi, rows: []readelfCFA{{lo, cieRow[curCIEs+m[1]]}}})
			cur, curCIE = &fdes[len(fdes)-1], ""
			continue
		}
		if m := reRow.FindStringSubmatch(line); m != nil {
			loc, _ := strconv.ParseUint(m[1], 16, 64)
			switch {
			case curCIE != "":
				cieRow[curCIE] = m[2]
			case cur != nil:
				cur.rows = append(cur.rows, readelfCFA{loc, m[2]})
			}
		}
	}
	return fdes
}

// ruleAt is the CFA rule readelf gives for pc: the last row at or before it.
func (d readelfFDE) ruleAt(pc uint64) string {
	rule := ""
	for _, r := range d.rows {
		if r.loc <= pc {
			rule = r.rule
		}
	}
	return rule
}

func cfaText(a *Arch, c CFA) string {
	if c.Expr != nil {
		return "exp"
	}
	return a.RegName(c.Reg) + "+" + strconv.FormatInt(c.Offset, 10)
}

// TestCFIAgainstReadelf checks the CFA of every row of every FDE, and of
// the byte after each row, against readelf's interpretation of the same
// .eh_frame (gcc) and .debug_frame (Go).
func TestCFIAgainstReadelf(t *testing.T) {
	for _, name := range []string{"c-O0", "c-O2", "c-O2-dwarf4", "clang-O0", "clang-O2", "cpp", "go-opt", "go-noopt"} {
		t.Run(name, func(t *testing.T) {
			path := fixture(t, name)
			f := open(t, path)
			fdes := readelfFrames(t, path)
			require.NotEmpty(t, fdes)
			checked := 0
			for _, d := range fdes {
				if d.high <= d.low {
					continue
				}
				for _, r := range d.rows {
					for _, pc := range []uint64{r.loc, r.loc + 1} {
						if pc >= d.high {
							continue
						}
						want := d.ruleAt(pc)
						if want == "" {
							continue
						}
						got, err := f.CFAAt(pc)
						if !assert.NoError(t, err, "pc %#x", pc) {
							continue
						}
						assert.Equal(t, want, cfaText(f.Arch, got), "CFA at %#x (FDE %#x..%#x)", pc, d.low, d.high)
						checked++
					}
				}
			}
			assert.Greater(t, checked, 20, "rows checked")
		})
	}
}

// TestCFAAtEntryIsSPPlus8 checks the rule the package relies on when a
// function has no CFI: at the first instruction the CFA is rsp+8.
func TestCFAAtEntryIsSPPlus8(t *testing.T) {
	for _, name := range []string{"c-O0", "c-O2", "go-opt"} {
		f := open(t, fixture(t, name))
		fns, err := f.Functions()
		require.NoError(t, err)
		n := 0
		for _, fn := range fns {
			c, err := f.CFAAt(fn.Entry)
			if err != nil {
				continue
			}
			assert.Equal(t, "rsp+8", cfaText(f.Arch, c), "%s: %s", name, fn)
			n++
		}
		assert.Greater(t, n, 3, name)
	}
}

// cfiBuilder writes .debug_frame or .eh_frame entries for tests.
type cfiBuilder struct {
	buf bytes.Buffer
}

func (b *cfiBuilder) entry(body []byte) int {
	off := b.buf.Len()
	var l [4]byte
	binary.LittleEndian.PutUint32(l[:], uint32(len(body)))
	b.buf.Write(l[:])
	b.buf.Write(body)
	return off
}

func le32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func le64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// TestCFIInterpreter runs hand-written instructions through every rule
// the interpreter knows, in a .debug_frame and in an .eh_frame.
func TestCFIInterpreter(t *testing.T) {
	// CIE: version 1, no augmentation, code align 1, data align -8, ra 16,
	// def_cfa rsp+8.
	cieBody := cat(le32(0xffffffff), []byte{1, 0, 1, 0x78, 16}, []byte{0x0c, 7, 8})
	insns := []byte{
		0x41,     // advance_loc 1          -> 0x1001
		0x0e, 16, // def_cfa_offset 16
		0x86, 2, // offset r6 at cfa-16 (ignored)
		0x43,    // advance_loc 3          -> 0x1004
		0x0d, 6, // def_cfa_register rbp   -> rbp+16
		0x0a,       // remember_state
		0x02, 0x10, // advance_loc1 16        -> 0x1014
		0x0c, 7, 8, // def_cfa rsp+8
		0x03, 0x00, 0x01, // advance_loc2 256   -> 0x1114
		0x0b,                // restore_state      -> rbp+16
		0x04, 0x10, 0, 0, 0, // advance_loc4 16 -> 0x1124
		0x13, 0x7e, // def_cfa_offset_sf -2*-8 = 16 (rbp+16)
		0x12, 7, 0x7d, // def_cfa_sf rsp, -3*-8 = 24
		0x2e, 8, // GNU_args_size 8
		0x41,                // advance_loc 1        -> 0x1125
		0x0f, 2, 0x77, 0x08, // def_cfa_expression
		0x41, // advance_loc 1 -> 0x1126
		0x0c, 7, 8,
	}
	var b cfiBuilder
	cieOff := b.entry(cieBody)
	b.entry(cat(le32(uint32(cieOff)), le64(0x1000), le64(0x200), insns))
	tab, err := parseCFI(b.buf.Bytes(), false, 0, binary.LittleEndian, 8)
	require.NoError(t, err)
	require.Len(t, tab.fdes, 1)
	for _, c := range []struct {
		pc   uint64
		want string
	}{
		{0x1000, "rsp+8"}, {0x1001, "rsp+16"}, {0x1003, "rsp+16"}, {0x1004, "rbp+16"},
		{0x1013, "rbp+16"}, {0x1014, "rsp+8"}, {0x1113, "rsp+8"}, {0x1114, "rbp+16"},
		{0x1123, "rbp+16"}, {0x1124, "rsp+24"}, {0x1125, "exp"}, {0x1126, "rsp+8"}, {0x11ff, "rsp+8"},
	} {
		d := tab.lookup(c.pc)
		require.NotNil(t, d, "%#x", c.pc)
		got, err := d.cfaAt(c.pc, binary.LittleEndian)
		require.NoError(t, err)
		assert.Equal(t, c.want, cfaText(archX86_64, got), "%#x", c.pc)
	}
	assert.Nil(t, tab.lookup(0xfff))
	assert.Nil(t, tab.lookup(0x1200))

	// The same in .eh_frame: CIE id 0, "zR" with pcrel|sdata4 pointers,
	// FDE pointer relative to itself, FDE augmentation data.
	var e cfiBuilder
	const sect = 0x4000
	ehCIE := cat(le32(0), []byte{1, 'z', 'R', 0, 1, 0x78, 16, 1, 0x1b}, []byte{0x0c, 7, 8})
	ehCIEOff := e.entry(ehCIE)
	fdeStart := e.buf.Len()
	// CIE pointer: distance from this field back to the CIE.
	cieptr := uint32(fdeStart + 4 - ehCIEOff)
	// pc_begin: pcrel from the field's own address.
	pcField := sect + fdeStart + 8
	e.entry(cat(le32(cieptr), le32(uint32(int32(0x1000-pcField))), le32(0x200), []byte{0}, insns))
	e.buf.Write(le32(0)) // terminator
	tab, err = parseCFI(e.buf.Bytes(), true, sect, binary.LittleEndian, 8)
	require.NoError(t, err)
	require.Len(t, tab.fdes, 1)
	assert.Equal(t, uint64(0x1000), tab.fdes[0].low)
	assert.Equal(t, uint64(0x1200), tab.fdes[0].high)
	got, err := tab.fdes[0].cfaAt(0x1114, binary.LittleEndian)
	require.NoError(t, err)
	assert.Equal(t, "rbp+16", cfaText(archX86_64, got))

	// Malformed: restore_state without remember_state.
	var bad cfiBuilder
	cieOff = bad.entry(cieBody)
	bad.entry(cat(le32(uint32(cieOff)), le64(0x1000), le64(0x10), []byte{0x0b}))
	tab, err = parseCFI(bad.buf.Bytes(), false, 0, binary.LittleEndian, 8)
	require.NoError(t, err)
	_, err = tab.fdes[0].cfaAt(0x1000, binary.LittleEndian)
	assert.ErrorIs(t, err, ErrMalformed)
}

func FuzzCFI(f *testing.F) {
	cieBody := cat(le32(0xffffffff), []byte{1, 0, 1, 0x78, 16}, []byte{0x0c, 7, 8})
	var b cfiBuilder
	cieOff := b.entry(cieBody)
	b.entry(cat(le32(uint32(cieOff)), le64(0x1000), le64(0x200), []byte{0x41, 0x0e, 16, 0x0a, 0x0b, 0x0d, 6}))
	f.Add(b.buf.Bytes(), false)
	var e cfiBuilder
	e.entry(cat(le32(0), []byte{1, 'z', 'R', 0, 1, 0x78, 16, 1, 0x1b}, []byte{0x0c, 7, 8}))
	e.entry(cat(le32(20), le32(0x100), le32(0x10), []byte{0, 0x41, 0x0e, 16}))
	f.Add(e.buf.Bytes(), true)
	f.Fuzz(func(t *testing.T, data []byte, eh bool) {
		tab, err := parseCFI(data, eh, 0x1000, binary.LittleEndian, 8)
		if err != nil {
			return
		}
		for i := range tab.fdes {
			if i > 64 {
				break
			}
			d := &tab.fdes[i]
			_, _ = d.cfaAt(d.low, binary.LittleEndian)
			_, _ = d.cfaAt(d.high-1, binary.LittleEndian)
		}
	})
}
