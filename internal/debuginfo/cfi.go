package debuginfo

import (
	"encoding/binary"
	"fmt"
	"sort"
)

// CFA is the rule of the canonical frame address at one pc: the value of
// DWARF register Reg plus Offset. Expr is set instead when the CFI gives a
// DW_CFA_def_cfa_expression, which the package does not evaluate.
type CFA struct {
	Reg    int
	Offset int64
	Expr   []byte
}

// cie is a Common Information Entry of .eh_frame or .debug_frame.
type cie struct {
	codeAlign   uint64
	dataAlign   int64
	returnReg   uint64
	fdeEncoding byte
	addrSize    int
	initial     []byte
	signal      bool
	// augData says the CIE's augmentation starts with 'z': its FDEs carry
	// augmentation data.
	augData bool
}

// fde is a Frame Description Entry: the pcs [low, high) and their
// instructions.
type fde struct {
	low, high uint64
	cie       *cie
	insns     []byte
}

// cfiTable is the FDEs of one section, sorted by low.
type cfiTable struct {
	fdes []fde
}

// cfiTables are a file's two sources of CFI; .eh_frame is tried first.
type cfiTables struct {
	eh, debug cfiTable
}

// maxCFIEntries bounds the CIEs and FDEs read from one section.
const maxCFIEntries = 1 << 22

// parseCFI reads every CIE and FDE of a .eh_frame (ehFrame true; sectAddr
// is its virtual address, for pc-relative pointers) or .debug_frame.
func parseCFI(sec []byte, ehFrame bool, sectAddr uint64, order binary.ByteOrder, addrSize int) (cfiTable, error) {
	cies := map[uint64]*cie{}
	var t cfiTable
	off := uint64(0)
	for n := 0; off < uint64(len(sec)); n++ {
		if n > maxCFIEntries {
			return cfiTable{}, fmt.Errorf("over %d CFI entries: %w", maxCFIEntries, ErrMalformed)
		}
		r := reader{b: sec, off: off, order: order}
		length := uint64(r.u32())
		is64 := false
		if length == 0xffffffff {
			length, is64 = r.u64(), true
		}
		if r.err != nil {
			return cfiTable{}, fmt.Errorf("CFI entry at %#x: %w", off, r.err)
		}
		if length == 0 {
			if ehFrame {
				break // the terminator of .eh_frame
			}
			off = r.off
			continue
		}
		start := r.off
		end := start + length
		if end > uint64(len(sec)) || end < start {
			return cfiTable{}, fmt.Errorf("CFI entry at %#x: length %#x past the section: %w", off, length, ErrMalformed)
		}
		idOff := r.off
		id := r.offset(is64)
		isCIE := id == 0
		if !ehFrame {
			isCIE = (!is64 && id == 0xffffffff) || (is64 && id == 0xffffffffffffffff)
		}
		body := reader{b: sec[:end], off: r.off, order: order}
		if isCIE {
			c, err := parseCIE(&body, ehFrame, addrSize)
			if err != nil {
				return cfiTable{}, fmt.Errorf("CIE at %#x: %w", off, err)
			}
			cies[off] = c
		} else {
			cieOff := id
			if ehFrame {
				cieOff = idOff - id
			}
			c, ok := cies[cieOff]
			if !ok {
				// A CIE after its FDE: parse it on demand.
				var err error
				if c, err = cieAt(sec, cieOff, ehFrame, order, addrSize); err != nil {
					return cfiTable{}, fmt.Errorf("FDE at %#x: %w", off, err)
				}
				cies[cieOff] = c
			}
			d, err := parseFDE(&body, c, ehFrame, sectAddr)
			if err != nil {
				return cfiTable{}, fmt.Errorf("FDE at %#x: %w", off, err)
			}
			if d.high > d.low {
				t.fdes = append(t.fdes, d)
			}
		}
		off = end
	}
	sort.SliceStable(t.fdes, func(i, j int) bool { return t.fdes[i].low < t.fdes[j].low })
	return t, nil
}

// cieAt parses the CIE at section offset off.
func cieAt(sec []byte, off uint64, ehFrame bool, order binary.ByteOrder, addrSize int) (*cie, error) {
	r := reader{b: sec, off: off, order: order}
	length := uint64(r.u32())
	is64 := false
	if length == 0xffffffff {
		length, is64 = r.u64(), true
	}
	end := r.off + length
	if r.err != nil || end > uint64(len(sec)) || end < r.off {
		return nil, fmt.Errorf("CIE at %#x past the section: %w", off, ErrMalformed)
	}
	id := r.offset(is64)
	if (ehFrame && id != 0) || (!ehFrame && id != 0xffffffff && id != 0xffffffffffffffff) {
		return nil, fmt.Errorf("no CIE at %#x: %w", off, ErrMalformed)
	}
	body := reader{b: sec[:end], off: r.off, order: order}
	return parseCIE(&body, ehFrame, addrSize)
}

func parseCIE(r *reader, ehFrame bool, addrSize int) (*cie, error) {
	c := &cie{addrSize: addrSize}
	version := r.u8()
	if version != 1 && version != 3 && version != 4 {
		return nil, fmt.Errorf("CIE version %d: %w", version, ErrMalformed)
	}
	var aug []byte
	for {
		b := r.u8()
		if r.err != nil {
			return nil, r.err
		}
		if b == 0 {
			break
		}
		if len(aug) > 32 {
			return nil, fmt.Errorf("CIE augmentation too long: %w", ErrMalformed)
		}
		aug = append(aug, b)
	}
	if version == 4 {
		c.addrSize = int(r.u8())
		if seg := r.u8(); seg != 0 {
			return nil, fmt.Errorf("CIE segment selector size %d: %w", seg, ErrMalformed)
		}
	}
	if len(aug) >= 2 && aug[0] == 'e' && aug[1] == 'h' {
		r.bytes(uint64(addrSize)) // old GCC's "eh" pointer
		aug = aug[2:]
	}
	c.codeAlign = r.uleb()
	c.dataAlign = r.sleb()
	if version == 1 {
		c.returnReg = uint64(r.u8())
	} else {
		c.returnReg = r.uleb()
	}
	c.fdeEncoding = pePtr
	if len(aug) > 0 && aug[0] == 'z' {
		c.augData = true
		n := r.uleb()
		augData := r.bytes(n)
		if r.err != nil {
			return nil, r.err
		}
		ar := reader{b: augData, order: r.order}
	loop:
		for _, a := range aug[1:] {
			switch a {
			case 'R':
				c.fdeEncoding = ar.u8()
			case 'L':
				ar.u8()
			case 'P':
				enc := ar.u8()
				readEncoded(&ar, enc, 0, c.addrSize)
			case 'S':
				c.signal = true
			default:
				// 'B' (arm64 BTI), 'G' (MTE) and unknown letters: the
				// length of the data already bounds them.
				break loop
			}
		}
		if ar.err != nil {
			return nil, fmt.Errorf("CIE augmentation %q: %w", aug, ar.err)
		}
	} else if len(aug) > 0 && ehFrame {
		return nil, fmt.Errorf("CIE augmentation %q without z: %w", aug, ErrMalformed)
	}
	c.initial = r.b[r.off:]
	if r.err != nil {
		return nil, r.err
	}
	return c, nil
}

func parseFDE(r *reader, c *cie, ehFrame bool, sectAddr uint64) (fde, error) {
	d := fde{cie: c}
	enc := byte(pePtr)
	if ehFrame {
		enc = c.fdeEncoding
	}
	d.low = readEncoded(r, enc, sectAddr, c.addrSize)
	length := readEncoded(r, enc&0x0f, 0, c.addrSize)
	d.high = d.low + length
	if c.augData {
		// With a 'z' augmentation every FDE has augmentation data (the LSDA
		// pointer), which only exception handling needs.
		r.bytes(r.uleb())
	}
	if r.err != nil {
		return fde{}, r.err
	}
	d.insns = r.b[r.off:]
	return d, nil
}

// DW_EH_PE pointer encodings.
const (
	pePtr      = 0x00
	peUleb     = 0x01
	peUdata2   = 0x02
	peUdata4   = 0x03
	peUdata8   = 0x04
	peSleb     = 0x09
	peSdata2   = 0x0a
	peSdata4   = 0x0b
	peSdata8   = 0x0c
	pePCRel    = 0x10
	peOmit     = 0xff
	peIndirect = 0x80
)

// readEncoded reads a pointer in DW_EH_PE encoding enc; pc-relative ones
// are made absolute with sectAddr (the section's virtual address).
func readEncoded(r *reader, enc byte, sectAddr uint64, addrSize int) uint64 {
	if enc == peOmit {
		return 0
	}
	if enc&peIndirect != 0 {
		if r.err == nil {
			r.err = fmt.Errorf("indirect pointer encoding %#x: %w", enc, ErrTooComplex)
		}
		return 0
	}
	pos := r.off
	var v uint64
	switch enc & 0x0f {
	case pePtr:
		v = r.addr(addrSize)
	case peUleb:
		v = r.uleb()
	case peUdata2:
		v = uint64(r.u16())
	case peUdata4:
		v = uint64(r.u32())
	case peUdata8:
		v = r.u64()
	case peSleb:
		v = uint64(r.sleb())
	case peSdata2:
		v = uint64(int64(int16(r.u16())))
	case peSdata4:
		v = uint64(int64(int32(r.u32())))
	case peSdata8:
		v = r.u64()
	default:
		if r.err == nil {
			r.err = fmt.Errorf("pointer encoding %#x: %w", enc, ErrMalformed)
		}
		return 0
	}
	switch enc & 0x70 {
	case 0:
	case pePCRel:
		v += sectAddr + pos
	default:
		// textrel, datarel, funcrel and aligned do not occur in FDE
		// addresses of the files this package reads.
		if r.err == nil {
			r.err = fmt.Errorf("pointer encoding %#x: %w", enc, ErrTooComplex)
		}
	}
	if addrSize == 4 {
		v &= 0xffffffff
	}
	return v
}

// lookup returns the FDE covering pc, or nil.
func (t *cfiTable) lookup(pc uint64) *fde {
	i := sort.Search(len(t.fdes), func(i int) bool { return t.fdes[i].low > pc })
	for j := i - 1; j >= 0 && j >= i-4; j-- {
		if pc >= t.fdes[j].low && pc < t.fdes[j].high {
			return &t.fdes[j]
		}
	}
	return nil
}

// maxCFIStates bounds DW_CFA_remember_state nesting.
const maxCFIStates = 64

// cfaAt runs the CIE's initial instructions and then the FDE's until the
// row for pc, and returns its CFA rule. It follows the rules GCC, clang
// and Go emit; register rules are parsed and ignored.
func (d *fde) cfaAt(pc uint64, order binary.ByteOrder) (CFA, error) {
	var (
		cfa   CFA
		stack []CFA
		loc   = d.low
	)
	run := func(insns []byte) (bool, error) {
		r := reader{b: insns, order: order}
		for !r.eof() {
			op := r.u8()
			switch op >> 6 {
			case 1: // DW_CFA_advance_loc
				loc += uint64(op&0x3f) * d.cie.codeAlign
				if loc > pc {
					return true, nil
				}
				continue
			case 2: // DW_CFA_offset
				r.uleb()
				continue
			case 3: // DW_CFA_restore
				continue
			}
			switch op {
			case 0x00: // nop
			case 0x01: // set_loc
				loc = readEncoded(&r, d.cie.fdeEncoding&0x0f, 0, d.cie.addrSize)
				if loc > pc {
					return true, nil
				}
			case 0x02, 0x03, 0x04: // advance_loc1, 2, 4
				var delta uint64
				switch op {
				case 0x02:
					delta = uint64(r.u8())
				case 0x03:
					delta = uint64(r.u16())
				default:
					delta = uint64(r.u32())
				}
				loc += delta * d.cie.codeAlign
				if r.err == nil && loc > pc {
					return true, nil
				}
			case 0x05, 0x09, 0x14, 0x2f: // offset_extended, register, val_offset, GNU_negative_offset_extended
				r.uleb()
				r.uleb()
			case 0x06, 0x07, 0x08, 0x2e: // restore_extended, undefined, same_value, GNU_args_size
				r.uleb()
			case 0x0a: // remember_state
				if len(stack) >= maxCFIStates {
					return false, fmt.Errorf("DW_CFA_remember_state nested over %d: %w", maxCFIStates, ErrMalformed)
				}
				stack = append(stack, cfa)
			case 0x0b: // restore_state
				if len(stack) == 0 {
					return false, fmt.Errorf("DW_CFA_restore_state with no state: %w", ErrMalformed)
				}
				cfa = stack[len(stack)-1]
				stack = stack[:len(stack)-1]
			case 0x0c: // def_cfa
				cfa = CFA{Reg: int(r.uleb()), Offset: int64(r.uleb())}
			case 0x0d: // def_cfa_register
				cfa.Reg = int(r.uleb())
				cfa.Expr = nil
			case 0x0e: // def_cfa_offset
				cfa.Offset = int64(r.uleb())
			case 0x0f: // def_cfa_expression
				cfa = CFA{Reg: -1, Expr: r.bytes(r.uleb())}
			case 0x10, 0x16: // expression, val_expression
				r.uleb()
				r.bytes(r.uleb())
			case 0x11, 0x15: // offset_extended_sf, val_offset_sf
				r.uleb()
				r.sleb()
			case 0x12: // def_cfa_sf
				cfa = CFA{Reg: int(r.uleb()), Offset: r.sleb() * d.cie.dataAlign}
			case 0x13: // def_cfa_offset_sf
				cfa.Offset = r.sleb() * d.cie.dataAlign
			case 0x2d: // GNU_window_save / AARCH64_negate_ra_state
			default:
				return false, fmt.Errorf("CFA instruction %#x: %w", op, ErrMalformed)
			}
			if r.err != nil {
				return false, r.err
			}
		}
		return false, nil
	}
	if _, err := run(d.cie.initial); err != nil {
		return CFA{}, fmt.Errorf("CIE instructions: %w", err)
	}
	stack = nil
	if _, err := run(d.insns); err != nil {
		return CFA{}, fmt.Errorf("FDE at %#x: %w", d.low, err)
	}
	return cfa, nil
}

// cfiTables parses the file's CFI once.
func (f *File) cfiTables() (*cfiTables, error) {
	f.cfiOnce.Do(func() {
		t := &cfiTables{}
		var err error
		if f.sections.ehFrame != nil {
			if t.eh, err = parseCFI(f.sections.ehFrame, true, f.sections.ehFrameAddr, f.order, f.Arch.PtrSize); err != nil {
				f.cfiErr = fmt.Errorf("reading .eh_frame of %s: %w", f.Path, err)
				return
			}
		}
		if f.sections.debugFrame != nil {
			if t.debug, err = parseCFI(f.sections.debugFrame, false, 0, f.order, f.Arch.PtrSize); err != nil {
				f.cfiErr = fmt.Errorf("reading .debug_frame of %s: %w", f.DebugPath, err)
				return
			}
		}
		f.cfi = t
	})
	return f.cfi, f.cfiErr
}

// CFAAt returns the CFA rule at pc from .eh_frame or else .debug_frame.
func (f *File) CFAAt(pc uint64) (CFA, error) {
	t, err := f.cfiTables()
	if err != nil {
		return CFA{}, err
	}
	for _, tab := range []*cfiTable{&t.eh, &t.debug} {
		if d := tab.lookup(pc); d != nil {
			return d.cfaAt(pc, f.order)
		}
	}
	return CFA{}, fmt.Errorf("no CFI covers pc %#x in %s: %w", pc, f.Path, ErrNotFound)
}
