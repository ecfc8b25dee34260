package debuginfo

import (
	"bufio"
	"bytes"
	"debug/dwarf"
	"encoding/binary"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	reDIE      = regexp.MustCompile(`^0x([0-9a-f]+):\s+DW_TAG_`)
	reLocStart = regexp.MustCompile(`DW_AT_location\s+\((?:indexed \(0x[0-9a-f]+\) loclist = )?0x[0-9a-f]+:\s*$`)
	reLocEntry = regexp.MustCompile(`^\s+\[0x([0-9a-f]+), 0x([0-9a-f]+)\): (.*)$`)
	reRegOp    = regexp.MustCompile(`^DW_OP_reg(\d+) \w+\)?$`)
)

type llvmLoc struct {
	low, high uint64
	ops       string
}

// llvmLocLists returns, by DIE offset, the location lists llvm-dwarfdump
// decodes (with addresses made absolute).
func llvmLocLists(t *testing.T, path string) map[dwarf.Offset][]llvmLoc {
	t.Helper()
	tool := requireTool(t, "llvm-dwarfdump", "llvm-dwarfdump-14")
	out, err := exec.Command(tool, "--debug-info", path).Output()
	require.NoError(t, err)
	lists := map[dwarf.Offset][]llvmLoc{}
	var die dwarf.Offset
	in := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := reDIE.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseUint(m[1], 16, 64)
			die, in = dwarf.Offset(v), false
			continue
		}
		if reLocStart.MatchString(line) {
			in = true
			lists[die] = []llvmLoc{}
			continue
		}
		if !in {
			continue
		}
		m := reLocEntry.FindStringSubmatch(line)
		if m == nil {
			in = false
			continue
		}
		lo, _ := strconv.ParseUint(m[1], 16, 64)
		hi, _ := strconv.ParseUint(m[2], 16, 64)
		lists[die] = append(lists[die], llvmLoc{lo, hi, m[3]})
	}
	return lists
}

// TestLocListsAgainstLLVM decodes every location list of a file and
// compares its ranges, and its register locations, with llvm-dwarfdump's.
func TestLocListsAgainstLLVM(t *testing.T) {
	for _, name := range []string{"c-O2", "c-O2-dwarf4", "clang-O2", "cpp", "go-opt", "go-noopt"} {
		t.Run(name, func(t *testing.T) {
			path := fixture(t, name)
			f := open(t, path)
			_, err := f.index()
			require.NoError(t, err)
			if strings.Contains(name, "dwarf4") {
				require.Equal(t, 4, f.units[0].version)
				require.NotEmpty(t, f.sections.loc, "DWARF 4 lists are in .debug_loc")
			} else {
				require.Equal(t, 5, f.units[0].version)
				require.NotEmpty(t, f.sections.loclists, "DWARF 5 lists are in .debug_loclists")
			}
			want := llvmLocLists(t, path)
			require.NotEmpty(t, want)
			r := f.data.Reader()
			lists, regs, indexed := 0, 0, 0
			for {
				e, err := r.Next()
				require.NoError(t, err)
				if e == nil {
					break
				}
				field := e.AttrField(dwarf.AttrLocation)
				if field == nil || (field.Class != dwarf.ClassLocListPtr && field.Class != dwarf.ClassLocList) {
					continue
				}
				if field.Class == dwarf.ClassLocList {
					indexed++
				}
				u := f.unitOf(e.Offset)
				require.NotNil(t, u)
				require.NotNil(t, u.cu)
				got, err := f.locList(field, u.cu)
				require.NoError(t, err, "DIE %#x", e.Offset)
				exp, ok := want[e.Offset]
				require.True(t, ok, "llvm-dwarfdump has no list for DIE %#x", e.Offset)
				var gotRanges, wantRanges [][2]uint64
				var nonEmpty []llvmLoc
				for _, g := range got {
					if g.High > g.Low {
						gotRanges = append(gotRanges, [2]uint64{g.Low, g.High})
					}
				}
				for _, w := range exp {
					if w.high > w.low {
						wantRanges = append(wantRanges, [2]uint64{w.low, w.high})
						nonEmpty = append(nonEmpty, w)
					}
				}
				require.Equal(t, wantRanges, gotRanges, "DIE %#x", e.Offset)
				lists++
				// Register locations evaluate to that register.
				i := 0
				for _, g := range got {
					if g.High <= g.Low {
						continue
					}
					w := nonEmpty[i]
					i++
					m := reRegOp.FindStringSubmatch(strings.TrimSpace(w.ops))
					if m == nil {
						continue
					}
					loc, err := evalExpr(g.Expr, &exprEnv{order: f.order, addrSize: 8})
					require.NoError(t, err, "DIE %#x [%#x,%#x): %x, llvm says %q", e.Offset, g.Low, g.High, g.Expr, w.ops)
					n, _ := strconv.Atoi(m[1])
					assert.Equal(t, Loc{Pieces: []Piece{{Kind: LocRegister, Reg: n}}}, loc, "DIE %#x [%#x,%#x)", e.Offset, g.Low, g.High)
					regs++
				}
			}
			assert.Greater(t, lists, 5, "location lists compared")
			assert.Greater(t, regs, 5, "register locations compared")
			if strings.HasPrefix(name, "clang") {
				assert.Equal(t, lists, indexed, "clang uses DW_FORM_loclistx")
			}
		})
	}
}

// loclistsBuilder writes a .debug_loclists contribution by hand.
type loclistsBuilder struct{ b []byte }

func (l *loclistsBuilder) u8(v byte)        { l.b = append(l.b, v) }
func (l *loclistsBuilder) uleb(v uint64)    { l.b = appendULEB(l.b, v) }
func (l *loclistsBuilder) addr(v uint64)    { l.b = binary.LittleEndian.AppendUint64(l.b, v) }
func (l *loclistsBuilder) expr(ops ...byte) { l.uleb(uint64(len(ops))); l.b = append(l.b, ops...) }

func appendULEB(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			c |= 0x80
		}
		b = append(b, c)
		if v == 0 {
			return b
		}
	}
}

// TestDecodeLoclistsForms decodes every DW_LLE_* kind, GCC's view pairs,
// and DW_FORM_loclistx through the offset array.
func TestDecodeLoclistsForms(t *testing.T) {
	addrs := []uint64{0x1000, 0x2000, 0x2100, 0x3000}
	debugAddr := func(i uint64) (uint64, error) {
		if i >= uint64(len(addrs)) {
			return 0, ErrMalformed
		}
		return addrs[i], nil
	}
	// Header (12 bytes) + offset array of 2 entries, then the lists.
	var l loclistsBuilder
	l.b = make([]byte, 12+8)
	list0 := len(l.b)
	l.u8(lleGNUViewPair) // ignored
	l.uleb(1)
	l.uleb(2)
	l.u8(lleBaseAddressx) // base = 0x1000
	l.uleb(0)
	l.u8(lleOffsetPair) // [0x1010, 0x1020) rdi
	l.uleb(0x10)
	l.uleb(0x20)
	l.expr(opReg0 + 5)
	l.u8(lleStartxEndx) // [0x2000, 0x2100) rsi
	l.uleb(1)
	l.uleb(2)
	l.expr(opReg0 + 4)
	l.u8(lleStartxLength) // [0x3000, 0x3008) rbx
	l.uleb(3)
	l.uleb(8)
	l.expr(opReg0 + 3)
	l.u8(lleBaseAddress) // base = 0x5000
	l.addr(0x5000)
	l.u8(lleOffsetPair) // [0x5004, 0x5008) fbreg -20
	l.uleb(4)
	l.uleb(8)
	l.expr(opFbreg, 0x6c)
	l.u8(lleStartEnd) // [0x6000, 0x6010) rax
	l.addr(0x6000)
	l.addr(0x6010)
	l.expr(opReg0)
	l.u8(lleStartLength) // [0x7000, 0x7004) rcx
	l.addr(0x7000)
	l.uleb(4)
	l.expr(opReg0 + 2)
	l.u8(lleDefaultLocation)
	l.expr(opReg0 + 15)
	l.u8(lleEndOfList)
	list1 := len(l.b)
	l.u8(lleStartLength)
	l.addr(0x8000)
	l.uleb(1)
	l.expr(opLit0+7, opStackValue)
	l.u8(lleEndOfList)
	binary.LittleEndian.PutUint32(l.b[12:], uint32(list0-12))
	binary.LittleEndian.PutUint32(l.b[16:], uint32(list1-12))

	env := &locListEnv{order: binary.LittleEndian, addrSize: 8, base: 0x900, debugAddr: debugAddr}
	off, err := loclistxOffset(l.b, 12, 0, binary.LittleEndian, false)
	require.NoError(t, err)
	require.Equal(t, uint64(list0), off)
	got, err := decodeLoclists(l.b, off, env)
	require.NoError(t, err)
	want := []LocEntry{
		{Low: 0x1010, High: 0x1020, Expr: []byte{opReg0 + 5}},
		{Low: 0x2000, High: 0x2100, Expr: []byte{opReg0 + 4}},
		{Low: 0x3000, High: 0x3008, Expr: []byte{opReg0 + 3}},
		{Low: 0x5004, High: 0x5008, Expr: []byte{opFbreg, 0x6c}},
		{Low: 0x6000, High: 0x6010, Expr: []byte{opReg0}},
		{Low: 0x7000, High: 0x7004, Expr: []byte{opReg0 + 2}},
		{Default: true, Expr: []byte{opReg0 + 15}},
	}
	assert.Equal(t, want, got)
	for _, c := range []struct {
		pc   uint64
		want byte
	}{{0x1010, opReg0 + 5}, {0x101f, opReg0 + 5}, {0x1020, opReg0 + 15}, {0x20ff, opReg0 + 4}, {0x7003, opReg0 + 2}, {0x1, opReg0 + 15}} {
		e, ok := pick(got, c.pc)
		require.True(t, ok)
		assert.Equal(t, []byte{c.want}, e, "%#x", c.pc)
	}

	off, err = loclistxOffset(l.b, 12, 1, binary.LittleEndian, false)
	require.NoError(t, err)
	got, err = decodeLoclists(l.b, off, env)
	require.NoError(t, err)
	assert.Equal(t, []LocEntry{{Low: 0x8000, High: 0x8001, Expr: []byte{opLit0 + 7, opStackValue}}}, got)

	// Truncated lists and unknown kinds are errors, not panics.
	for n := list0; n < list1-1; n++ {
		_, err := decodeLoclists(l.b[:n], uint64(list0), env)
		assert.Error(t, err, "truncated at %d", n)
	}
	_, err = decodeLoclists([]byte{0x42}, 0, env)
	assert.ErrorIs(t, err, ErrMalformed)
}

// TestDecodeLoc decodes a DWARF 4 .debug_loc list with a base address
// selection entry.
func TestDecodeLoc(t *testing.T) {
	var b []byte
	pair := func(lo, hi uint64) {
		b = binary.LittleEndian.AppendUint64(b, lo)
		b = binary.LittleEndian.AppendUint64(b, hi)
	}
	expr := func(ops ...byte) {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(ops)))
		b = append(b, ops...)
	}
	pair(0x10, 0x20)
	expr(opReg0 + 5)
	pair(^uint64(0), 0x4000) // base address selection
	pair(0x8, 0x10)
	expr(opBreg0+7, 0x08)
	pair(0, 0)
	env := &locListEnv{order: binary.LittleEndian, addrSize: 8, base: 0x1000}
	got, err := decodeLoc(b, 0, env)
	require.NoError(t, err)
	assert.Equal(t, []LocEntry{
		{Low: 0x1010, High: 0x1020, Expr: []byte{opReg0 + 5}},
		{Low: 0x4008, High: 0x4010, Expr: []byte{opBreg0 + 7, 0x08}},
	}, got)
	for n := 1; n < len(b)-1; n++ {
		_, err := decodeLoc(b[:n], 0, env)
		assert.Error(t, err, "truncated at %d", n)
	}
}

func FuzzDecodeLoclists(f *testing.F) {
	f.Add([]byte{lleBaseAddressx, 0, lleOffsetPair, 0, 4, 1, 0x55, lleEndOfList}, uint16(0))
	f.Add([]byte{lleStartLength, 0, 0, 0, 0, 0, 0, 0, 0, 4, 1, 0x55, lleDefaultLocation, 1, 0x50, 0}, uint16(0))
	f.Fuzz(func(t *testing.T, data []byte, off uint16) {
		env := &locListEnv{order: binary.LittleEndian, addrSize: 8, debugAddr: func(i uint64) (uint64, error) { return i * 16, nil }}
		got, err := decodeLoclists(data, uint64(off), env)
		if err == nil && len(got) > len(data) {
			t.Fatalf("%d entries from %d bytes", len(got), len(data))
		}
		_, _ = loclistxOffset(data, uint64(off), uint64(off), binary.LittleEndian, off%2 == 0)
	})
}

func FuzzDecodeLoc(f *testing.F) {
	f.Add(append(append(make([]byte, 0), le64(0x10)...), append(le64(0x20), 1, 0, 0x55, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)...), uint8(8))
	f.Fuzz(func(t *testing.T, data []byte, size uint8) {
		env := &locListEnv{order: binary.LittleEndian, addrSize: int(size%2)*4 + 4}
		_, _ = decodeLoc(data, 0, env)
	})
}
