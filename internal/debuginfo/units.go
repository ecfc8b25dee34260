package debuginfo

import (
	"debug/dwarf"
	"encoding/binary"
	"fmt"
	"sort"
)

// unit is the header of one unit of .debug_info, which debug/dwarf keeps
// private: its DWARF version tells .debug_loc from .debug_loclists.
type unit struct {
	// off is the section offset of the header, end of the next unit.
	off, end uint64
	// die is the section offset of the unit's DIE.
	die      dwarf.Offset
	version  int
	addrSize int
	dwarf64  bool
	// cu holds the attributes of the unit DIE that location lists and
	// .debug_addr need, filled in by the index.
	cu *compUnit
	// isType says the unit is a type unit (DWARF 5 DW_UT_type, or a unit
	// of .debug_types); sig is its signature and typeOff the offset of its
	// type's DIE from the unit's start, as the header gives it (checked
	// when the signature is indexed).
	isType  bool
	sig     uint64
	typeOff uint64
}

// parseUnits reads every unit header of .debug_info, charging each (ours
// and the one debug/dwarf keeps) to b when it is not nil, all at once
// before any is decoded: a section of many tiny units is refused without
// taking more memory.
func parseUnits(info []byte, order binary.ByteOrder, b ...*budget) ([]unit, error) {
	n, err := countUnits(info, order)
	if err != nil {
		return nil, err
	}
	if len(b) > 0 && b[0] != nil {
		if err := b[0].charge(int64(n)*unitCost, fmt.Sprintf("%d units", n)); err != nil {
			return nil, err
		}
	}
	out := make([]unit, 0, n)
	off := uint64(0)
	for off < uint64(len(info)) {
		r := reader{b: info, off: off, order: order}
		length := uint64(r.u32())
		is64 := false
		if length == 0xffffffff {
			length, is64 = r.u64(), true
		} else if length >= 0xfffffff0 {
			return nil, fmt.Errorf("unit at %#x: reserved length %#x: %w", off, length, ErrMalformed)
		}
		start := r.off
		end := start + length
		if r.err != nil || end > uint64(len(info)) || end < start {
			return nil, fmt.Errorf("unit at %#x: length %#x past the section: %w", off, length, ErrMalformed)
		}
		u := unit{off: off, end: end, version: int(r.u16()), dwarf64: is64}
		switch {
		case u.version >= 2 && u.version <= 4:
			r.offset(is64) // abbrev offset
			u.addrSize = int(r.u8())
		case u.version == 5:
			ut := r.u8()
			u.addrSize = int(r.u8())
			r.offset(is64)
			switch ut {
			case 0x02: // DW_UT_type
				u.isType = true
				u.sig = r.u64()
				u.typeOff = r.offset(is64)
			case 0x06: // DW_UT_split_type (a .dwo's, not read)
				r.u64()
				r.offset(is64)
			case 0x04, 0x05: // DW_UT_skeleton, DW_UT_split_compile
				r.u64()
			}
		default:
			return nil, fmt.Errorf("unit at %#x: DWARF version %d: %w", off, u.version, ErrMalformed)
		}
		if r.err != nil {
			return nil, fmt.Errorf("unit at %#x: %w", off, r.err)
		}
		if r.off > end {
			return nil, fmt.Errorf("unit at %#x: header longer than the unit: %w", off, ErrMalformed)
		}
		u.die = dwarf.Offset(r.off)
		out = append(out, u)
		off = end
	}
	return out, nil
}

// unitOf returns the unit holding the DIE at off, or nil.
func (f *File) unitOf(off dwarf.Offset) *unit { return unitAt(f.units, off) }

// unitAt returns the unit of units (sorted by offset) that holds off, or
// nil.
func unitAt(units []unit, off dwarf.Offset) *unit {
	i := sort.Search(len(units), func(i int) bool { return units[i].end > uint64(off) })
	if i < len(units) && uint64(off) >= units[i].off {
		return &units[i]
	}
	return nil
}

// debugAddr returns entry idx of the unit's table in .debug_addr.
func (f *File) debugAddr(u *unit, idx uint64) (uint64, error) {
	if u.cu == nil || !u.cu.hasAddrBase {
		// GCC's DWARF 4 split-DWARF extension has no base; DWARF 5 needs one.
		return 0, fmt.Errorf("address index %d with no DW_AT_addr_base: %w", idx, ErrMalformed)
	}
	off := u.cu.addrBase + idx*uint64(u.addrSize)
	if off < u.cu.addrBase || off+uint64(u.addrSize) > uint64(len(f.sections.addr)) {
		return 0, fmt.Errorf("address index %d past .debug_addr: %w", idx, ErrMalformed)
	}
	r := reader{b: f.sections.addr, off: off, order: f.order}
	return r.addr(u.addrSize), r.err
}
