package debuginfo

import (
	"debug/dwarf"
	"encoding/binary"
	"fmt"
	"math"
)

// sigCost is the estimated size, in bytes, of one signature in the index
// of type units.
const sigCost = 64

// indexTypeUnits indexes by signature the type units of a file: the
// DWARF 5 type units (DW_UT_type) among the units of .debug_info, and the
// units of .debug_types (DWARF 4), which become the reader's second space
// (readDebugTypes). Every signature and unit is charged to the budget, up
// front for each section. A section whose type units cannot be read, or
// a unit whose type offset lies outside it, is left out and the reason
// kept in sigsErr: the types that live there are refused with it when a
// DIE names them, and the rest of the file is read as usual.
func (tr *typeReader) indexTypeUnits(units []unit, raw map[string]*[]byte, order binary.ByteOrder) {
	var errs sigErrors
	n := 0
	for i := range units {
		if units[i].isType {
			n++
		}
	}
	if n > 0 {
		if err := tr.budget.charge(int64(n)*sigCost, fmt.Sprintf("%d type units of .debug_info", n)); err != nil {
			errs.add(err)
		} else {
			for i := range units {
				if units[i].isType {
					errs.add(tr.addSig(infoSpace, &units[i]))
				}
			}
		}
	}
	if len(*raw[".debug_types"]) > 0 {
		sp, err := readDebugTypes(raw, order, tr.budget)
		if err != nil {
			errs.add(fmt.Errorf("reading .debug_types: %w", err))
		} else {
			tr.spaces[typesSpace] = sp
			for i := range sp.units {
				errs.add(tr.addSig(typesSpace, &sp.units[i]))
			}
		}
	}
	tr.sigsErr = errs.err()
}

// addSig indexes the type of a type unit by its signature. Of units that
// share a signature (a linker that did not merge them), the first is
// kept.
func (tr *typeReader) addSig(space uint8, u *unit) error {
	if u.typeOff < uint64(u.die)-u.off || u.typeOff >= u.end-u.off || u.off+u.typeOff > math.MaxUint32 {
		return fmt.Errorf("type unit at %s: the offset of its type, %#x, is outside the unit: %w",
			typeKey{space, dwarf.Offset(u.off)}, u.typeOff, ErrMalformed)
	}
	if _, ok := tr.sigs[u.sig]; !ok {
		tr.sigs[u.sig] = typeKey{space, dwarf.Offset(u.off + u.typeOff)}
	}
	return nil
}

// sigErrors keeps the first error of many and counts the others.
type sigErrors struct {
	first error
	more  int
}

func (s *sigErrors) add(err error) {
	switch {
	case err == nil:
	case s.first == nil:
		s.first = err
	default:
		s.more++
	}
}

func (s *sigErrors) err() error {
	if s.first == nil || s.more == 0 {
		return s.first
	}
	return fmt.Errorf("%w (and %d more type units)", s.first, s.more)
}

// readDebugTypes reads the type units of .debug_types (DWARF 4) so that
// debug/dwarf's Reader reads their DIEs, which it does only for
// .debug_info: each unit's header is a compile unit's header (length,
// version, abbreviation offset, address size) followed by the signature
// and the type offset, so once both are read they are overwritten with
// zeros (null entries, which readers skip), and the section is read as a
// .debug_info whose DIEs keep their offsets. debug/dwarf's own reading of
// .debug_types (Data.AddTypes) is not used: its Type recurses through
// signatures without bound. The units are counted and charged to the
// budget before any is decoded, their abbreviations as for .debug_info.
func readDebugTypes(raw map[string]*[]byte, order binary.ByteOrder, b *budget) (*typeSpace, error) {
	types := *raw[".debug_types"]
	n, err := countUnits(types, order)
	if err != nil {
		return nil, err
	}
	if err := b.charge(int64(n)*unitCost, fmt.Sprintf("%d type units", n)); err != nil {
		return nil, err
	}
	units := make([]unit, 0, n)
	for off := uint64(0); off < uint64(len(types)); {
		r := reader{b: types, off: off, order: order}
		length := uint64(r.u32())
		is64 := length == 0xffffffff
		if is64 {
			length = r.u64()
		}
		end := r.off + length // countUnits checked it
		u := unit{off: off, end: end, version: int(r.u16()), dwarf64: is64, isType: true}
		if u.version != 4 {
			return nil, fmt.Errorf("unit at %#x: DWARF version %d in .debug_types: %w", off, u.version, ErrMalformed)
		}
		r.offset(is64) // abbreviation offset
		u.addrSize = int(r.u8())
		sigAt := r.off
		u.sig = r.u64()
		u.typeOff = r.offset(is64)
		if r.err != nil || r.off > end {
			return nil, fmt.Errorf("unit at %#x: header longer than the unit: %w", off, ErrMalformed)
		}
		clear(types[sigAt:r.off])
		u.die = dwarf.Offset(r.off)
		units = append(units, u)
		off = end
	}
	if err := checkAbbrevs(*raw[".debug_abbrev"], types, units, order, b); err != nil {
		return nil, err
	}
	sec := func(name string) []byte { return *raw[name] }
	d, err := dwarf.New(sec(".debug_abbrev"), nil, nil, types, sec(".debug_line"), nil, sec(".debug_ranges"), sec(".debug_str"))
	if err != nil {
		return nil, err
	}
	for _, name := range []string{".debug_addr", ".debug_line_str", ".debug_str_offsets", ".debug_rnglists"} {
		if s := sec(name); s != nil {
			if err := d.AddSection(name, s); err != nil {
				return nil, err
			}
		}
	}
	return &typeSpace{data: d, entries: d.Reader(), kids: d.Reader(), units: units}, nil
}

// countUnits counts the units of a section by their lengths, without
// decoding or keeping anything, and checks that they tile it.
func countUnits(sec []byte, order binary.ByteOrder) (int, error) {
	n := 0
	for off := uint64(0); off < uint64(len(sec)); n++ {
		r := reader{b: sec, off: off, order: order}
		length := uint64(r.u32())
		if length == 0xffffffff {
			length = r.u64()
		} else if length >= 0xfffffff0 {
			return 0, fmt.Errorf("unit at %#x: reserved length %#x: %w", off, length, ErrMalformed)
		}
		end := r.off + length
		if r.err != nil || end > uint64(len(sec)) || end < r.off {
			return 0, fmt.Errorf("unit at %#x: length %#x past the section: %w", off, length, ErrMalformed)
		}
		off = end
	}
	return n, nil
}
