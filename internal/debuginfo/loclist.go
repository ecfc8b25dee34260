package debuginfo

import (
	"encoding/binary"
	"fmt"
	"math"
)

// LocEntry is one entry of a location list: the expression that holds for
// pcs in [Low, High), or, with Default, for pcs no other entry covers
// (DW_LLE_default_location).
type LocEntry struct {
	Low, High uint64
	Default   bool
	Expr      []byte
}

// maxLocEntries bounds the entries of one location list.
const maxLocEntries = 1 << 16

// locListEnv is what decoding one unit's location lists needs.
type locListEnv struct {
	order    binary.ByteOrder
	addrSize int
	dwarf64  bool
	// base is the unit's base address: its DW_AT_low_pc, or 0.
	base uint64
	// debugAddr resolves DW_LLE_*x indexes into .debug_addr.
	debugAddr func(idx uint64) (uint64, error)
}

// decodeLoc decodes the DWARF 2-4 location list at off in .debug_loc:
// pairs of addresses relative to the base (a pair whose first address is
// all ones sets the base), each with a 2-byte expression length, ended by
// a pair of zeros.
func decodeLoc(sec []byte, off uint64, env *locListEnv) ([]LocEntry, error) {
	r := reader{b: sec, off: off, order: env.order}
	if off >= uint64(len(sec)) {
		return nil, fmt.Errorf("location list at %#x past .debug_loc (%d bytes): %w", off, len(sec), ErrMalformed)
	}
	maxAddr := uint64(math.MaxUint64)
	if env.addrSize == 4 {
		maxAddr = math.MaxUint32
	}
	base := env.base
	var out []LocEntry
	for n := 0; ; n++ {
		if n > maxLocEntries {
			return nil, fmt.Errorf("location list at %#x: over %d entries: %w", off, maxLocEntries, ErrMalformed)
		}
		lo := r.addr(env.addrSize)
		hi := r.addr(env.addrSize)
		if r.err != nil {
			return nil, fmt.Errorf("location list at %#x: %w", off, r.err)
		}
		if lo == 0 && hi == 0 {
			return out, nil
		}
		if lo == maxAddr {
			base = hi
			continue
		}
		n := uint64(r.u16())
		expr := r.bytes(n)
		if r.err != nil {
			return nil, fmt.Errorf("location list at %#x: %w", off, r.err)
		}
		out = append(out, LocEntry{Low: base + lo, High: base + hi, Expr: expr})
	}
}

// DWARF 5 location list entry kinds (DW_LLE_*), and GCC's view pair.
const (
	lleEndOfList       = 0x00
	lleBaseAddressx    = 0x01
	lleStartxEndx      = 0x02
	lleStartxLength    = 0x03
	lleOffsetPair      = 0x04
	lleDefaultLocation = 0x05
	lleBaseAddress     = 0x06
	lleStartEnd        = 0x07
	lleStartLength     = 0x08
	lleGNUViewPair     = 0x09
)

// decodeLoclists decodes the DWARF 5 location list at off in
// .debug_loclists, every DW_LLE_* form included; GCC's DW_LLE_GNU_view_pair
// entries are skipped.
func decodeLoclists(sec []byte, off uint64, env *locListEnv) ([]LocEntry, error) {
	if off >= uint64(len(sec)) {
		return nil, fmt.Errorf("location list at %#x past .debug_loclists (%d bytes): %w", off, len(sec), ErrMalformed)
	}
	r := reader{b: sec, off: off, order: env.order}
	base := env.base
	addrx := func(idx uint64) (uint64, error) {
		if env.debugAddr == nil {
			return 0, fmt.Errorf("address index %d with no .debug_addr: %w", idx, ErrMalformed)
		}
		return env.debugAddr(idx)
	}
	expr := func() []byte { return r.bytes(r.uleb()) }
	var out []LocEntry
	for n := 0; ; n++ {
		if n > maxLocEntries {
			return nil, fmt.Errorf("location list at %#x: over %d entries: %w", off, maxLocEntries, ErrMalformed)
		}
		kind := r.u8()
		var (
			e   LocEntry
			err error
			lo  uint64
		)
		switch kind {
		case lleEndOfList:
			if r.err != nil {
				return nil, fmt.Errorf("location list at %#x: %w", off, r.err)
			}
			return out, nil
		case lleBaseAddressx:
			base, err = addrx(r.uleb())
			if err != nil {
				return nil, err
			}
			continue
		case lleStartxEndx:
			lo, err = addrx(r.uleb())
			if err != nil {
				return nil, err
			}
			hi, err := addrx(r.uleb())
			if err != nil {
				return nil, err
			}
			e = LocEntry{Low: lo, High: hi}
		case lleStartxLength:
			lo, err = addrx(r.uleb())
			if err != nil {
				return nil, err
			}
			e = LocEntry{Low: lo, High: lo + r.uleb()}
		case lleOffsetPair:
			a, b := r.uleb(), r.uleb()
			e = LocEntry{Low: base + a, High: base + b}
		case lleDefaultLocation:
			e = LocEntry{Default: true}
		case lleBaseAddress:
			base = r.addr(env.addrSize)
			continue
		case lleStartEnd:
			a := r.addr(env.addrSize)
			e = LocEntry{Low: a, High: r.addr(env.addrSize)}
		case lleStartLength:
			a := r.addr(env.addrSize)
			e = LocEntry{Low: a, High: a + r.uleb()}
		case lleGNUViewPair:
			r.uleb()
			r.uleb()
			continue
		default:
			if r.err == nil {
				return nil, fmt.Errorf("location list at %#x: entry kind %#x at %#x: %w", off, kind, r.off-1, ErrMalformed)
			}
		}
		e.Expr = expr()
		if r.err != nil {
			return nil, fmt.Errorf("location list at %#x: %w", off, r.err)
		}
		out = append(out, e)
	}
}

// loclistxOffset resolves DW_FORM_loclistx index idx: entry idx of the
// offset array at DW_AT_loclists_base, which is relative to that base.
func loclistxOffset(sec []byte, loclistsBase, idx uint64, order binary.ByteOrder, dwarf64 bool) (uint64, error) {
	size := uint64(4)
	if dwarf64 {
		size = 8
	}
	if idx > uint64(len(sec))/size {
		return 0, fmt.Errorf("location list index %d past .debug_loclists: %w", idx, ErrMalformed)
	}
	r := reader{b: sec, off: loclistsBase + idx*size, order: order}
	off := r.offset(dwarf64)
	if r.err != nil {
		return 0, fmt.Errorf("location list index %d: %w", idx, r.err)
	}
	return loclistsBase + off, nil
}

// pick returns the expression of a list that holds at pc, and whether one
// does. An empty range (Low == High) holds nowhere.
func pick(list []LocEntry, pc uint64) ([]byte, bool) {
	var def []byte
	hasDef := false
	for _, e := range list {
		if e.Default {
			def, hasDef = e.Expr, true
			continue
		}
		if pc >= e.Low && pc < e.High {
			return e.Expr, true
		}
	}
	return def, hasDef
}
