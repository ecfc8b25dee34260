package elfaddr

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// Range is a half-open range [Start, End) of virtual addresses.
type Range struct {
	Start, End uint64
}

// maxEHFrame bounds the .eh_frame section FunctionRanges reads, in bytes.
const maxEHFrame = 256 << 20

// FunctionRanges returns the code ranges the call-frame information of f's
// .eh_frame section describes (one per FDE, sorted by start): the bounds of
// functions even in a file stripped of its symbol table. It reads the FDE
// headers only (pc_begin and pc_range, with the pointer encoding of their
// CIE's 'R' augmentation), never the CFA programs. It returns nil, nil when
// the file has no .eh_frame section.
func FunctionRanges(f *elf.File) ([]Range, error) {
	sec := f.Section(".eh_frame")
	if sec == nil || sec.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	if sec.Size > maxEHFrame {
		return nil, fmt.Errorf("reading .eh_frame: %d bytes is more than %d", sec.Size, maxEHFrame)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("reading .eh_frame: %w", err)
	}
	ranges, err := parseEHFrame(data, sec.Addr, f.ByteOrder, f.Class == elf.ELFCLASS64)
	if err != nil {
		return nil, fmt.Errorf("reading .eh_frame: %w", err)
	}
	sort.Slice(ranges, func(i, j int) bool { return ranges[i].Start < ranges[j].Start })
	return ranges, nil
}

// Containing returns the range of ranges (sorted by start) that holds addr.
func Containing(ranges []Range, addr uint64) (Range, bool) {
	i := sort.Search(len(ranges), func(i int) bool { return ranges[i].Start > addr }) - 1
	for ; i >= 0; i-- {
		if addr < ranges[i].End {
			return ranges[i], true
		}
		if i > 0 && ranges[i-1].End <= ranges[i].Start {
			break // sorted and disjoint below: nothing further holds addr
		}
	}
	return Range{}, false
}

var errShort = errors.New("truncated entry")

// ehReader reads the DWARF-style encodings of .eh_frame.
type ehReader struct {
	data  []byte
	off   int
	order binary.ByteOrder
	addr  uint64 // virtual address of data[0]
	is64  bool
}

func (r *ehReader) u8() (uint8, error) {
	if r.off >= len(r.data) {
		return 0, errShort
	}
	r.off++
	return r.data[r.off-1], nil
}

func (r *ehReader) fixed(n int) (uint64, error) {
	if n > len(r.data)-r.off {
		return 0, errShort
	}
	b := r.data[r.off : r.off+n]
	r.off += n
	switch n {
	case 2:
		return uint64(r.order.Uint16(b)), nil
	case 4:
		return uint64(r.order.Uint32(b)), nil
	}
	return r.order.Uint64(b), nil
}

func (r *ehReader) uleb() (uint64, error) {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		b, err := r.u8()
		if err != nil {
			return 0, err
		}
		if shift < 64 {
			v |= uint64(b&0x7f) << shift
		}
		if b&0x80 == 0 {
			return v, nil
		}
	}
}

func (r *ehReader) sleb() (int64, error) {
	var v int64
	var shift uint
	for {
		b, err := r.u8()
		if err != nil {
			return 0, err
		}
		if shift < 64 {
			v |= int64(b&0x7f) << shift
		}
		shift += 7
		if b&0x80 == 0 {
			if shift < 64 && b&0x40 != 0 {
				v |= -1 << shift
			}
			return v, nil
		}
	}
}

func (r *ehReader) cstring() error {
	for {
		b, err := r.u8()
		if err != nil {
			return err
		}
		if b == 0 {
			return nil
		}
	}
}

// DW_EH_PE pointer encodings.
const (
	pePtr    = 0x00
	peULEB   = 0x01
	peU2     = 0x02
	peU4     = 0x03
	peU8     = 0x04
	peSLEB   = 0x09
	peS2     = 0x0a
	peS4     = 0x0b
	peS8     = 0x0c
	pePCRel  = 0x10
	peOmit   = 0xff
	peFormat = 0x0f
	peApply  = 0x70
)

// pointer reads a pointer of encoding enc; with value set it is a length
// (pc_range) and no application (pcrel) applies.
func (r *ehReader) pointer(enc uint8, value bool) (uint64, error) {
	at := r.addr + uint64(r.off)
	var v uint64
	var err error
	switch enc & peFormat {
	case pePtr:
		if r.is64 {
			v, err = r.fixed(8)
		} else {
			v, err = r.fixed(4)
		}
	case peULEB:
		v, err = r.uleb()
	case peU2:
		v, err = r.fixed(2)
	case peU4:
		v, err = r.fixed(4)
	case peU8:
		v, err = r.fixed(8)
	case peSLEB:
		var s int64
		s, err = r.sleb()
		v = uint64(s)
	case peS2:
		v, err = r.fixed(2)
		v = uint64(int64(int16(v)))
	case peS4:
		v, err = r.fixed(4)
		v = uint64(int64(int32(v)))
	case peS8:
		v, err = r.fixed(8)
	default:
		return 0, fmt.Errorf("pointer encoding %#x", enc)
	}
	if err != nil || value {
		return v, err
	}
	switch enc & peApply {
	case 0:
	case pePCRel:
		v += at
	default:
		return 0, fmt.Errorf("pointer application %#x", enc&peApply)
	}
	return v, nil
}

// cie is what an FDE needs from its CIE, and whether it names a
// personality routine.
type cie struct {
	fdeEncoding uint8
	augZ        bool
	personality bool
}

// HasPersonality reports whether a CIE of f's .eh_frame section names a
// personality routine (the 'P' augmentation): the language-specific
// handler the unwinder calls in each frame of a function with exception
// handlers or cleanups (C++'s __gxx_personality_v0, C's
// __gcc_personality_v0 for -fexceptions code with cleanups, Rust's
// rust_eh_personality). It reads the CIEs, and the FDEs for the CIEs they
// point to, up to the first that does. It returns false, nil when the file has no .eh_frame section, and
// an error, with what it read up to there, when the section cannot be read.
func HasPersonality(f *elf.File) (bool, error) {
	sec := f.Section(".eh_frame")
	if sec == nil || sec.Type == elf.SHT_NOBITS {
		return false, nil
	}
	if sec.Size > maxEHFrame {
		return false, fmt.Errorf("reading .eh_frame: %d bytes is more than %d", sec.Size, maxEHFrame)
	}
	data, err := sec.Data()
	if err != nil {
		return false, fmt.Errorf("reading .eh_frame: %w", err)
	}
	fr, err := readEHFrame(data, sec.Addr, f.ByteOrder, f.Class == elf.ELFCLASS64, true)
	if err != nil && !fr.personality {
		return false, fmt.Errorf("reading .eh_frame: %w", err)
	}
	return fr.personality, nil
}

// ehFrame is what readEHFrame found.
type ehFrame struct {
	ranges      []Range
	personality bool // a CIE names a personality routine
}

func parseEHFrame(data []byte, addr uint64, order binary.ByteOrder, is64 bool) ([]Range, error) {
	fr, err := readEHFrame(data, addr, order, is64, false)
	return fr.ranges, err
}

// readEHFrame reads the CIEs and FDEs of an .eh_frame section at virtual
// address addr; with untilPersonality, up to the first CIE that names a
// personality routine (the CIEs FDEs point to included, as the unwinder
// finds them).
func readEHFrame(data []byte, addr uint64, order binary.ByteOrder, is64, untilPersonality bool) (ehFrame, error) {
	r := &ehReader{data: data, order: order, addr: addr, is64: is64}
	cies := map[int]cie{}
	var fr ehFrame
	for r.off < len(data) && !(untilPersonality && fr.personality) {
		start := r.off
		length, err := r.fixed(4)
		if err != nil {
			return fr, err
		}
		if length == 0 {
			break // terminator
		}
		if length == 0xffffffff {
			if length, err = r.fixed(8); err != nil {
				return fr, err
			}
		}
		if length > uint64(len(data)-r.off) {
			return fr, fmt.Errorf("entry at %#x: length %d past the section", start, length)
		}
		end := r.off + int(length)
		idAt := r.off
		id, err := r.fixed(4)
		if err != nil {
			return fr, err
		}
		if id == 0 {
			c, err := r.parseCIE(end)
			if err != nil {
				return fr, fmt.Errorf("CIE at %#x: %w", start, err)
			}
			cies[start] = c
			fr.personality = fr.personality || c.personality
		} else {
			ciePos := idAt - int(id)
			c, ok := cies[ciePos]
			if !ok {
				sub := *r
				sub.off = ciePos
				if ciePos < 0 || ciePos >= len(data) {
					return fr, fmt.Errorf("FDE at %#x: CIE pointer %#x outside the section", start, id)
				}
				if _, err := sub.fixed(4); err != nil {
					return fr, err
				}
				if _, err := sub.fixed(4); err != nil {
					return fr, err
				}
				if c, err = sub.parseCIE(len(data)); err != nil {
					return fr, fmt.Errorf("CIE at %#x: %w", ciePos, err)
				}
				cies[ciePos] = c
				fr.personality = fr.personality || c.personality
			}
			begin, err := r.pointer(c.fdeEncoding, false)
			if err != nil {
				return fr, fmt.Errorf("FDE at %#x: %w", start, err)
			}
			size, err := r.pointer(c.fdeEncoding, true)
			if err != nil {
				return fr, fmt.Errorf("FDE at %#x: %w", start, err)
			}
			if size > 0 && begin+size > begin {
				fr.ranges = append(fr.ranges, Range{begin, begin + size})
			}
		}
		r.off = end
	}
	return fr, nil
}

// parseCIE reads a CIE after its id, up to end.
func (r *ehReader) parseCIE(end int) (cie, error) {
	c := cie{fdeEncoding: pePtr}
	version, err := r.u8()
	if err != nil {
		return c, err
	}
	if version != 1 && version != 3 && version != 4 {
		return c, fmt.Errorf("version %d", version)
	}
	augStart := r.off
	if err := r.cstring(); err != nil {
		return c, err
	}
	aug := string(r.data[augStart : r.off-1])
	if version == 4 {
		if _, err := r.fixed(2); err != nil { // address size, segment size
			return c, err
		}
	}
	if _, err := r.uleb(); err != nil { // code alignment
		return c, err
	}
	if _, err := r.sleb(); err != nil { // data alignment
		return c, err
	}
	if version == 1 {
		_, err = r.u8()
	} else {
		_, err = r.uleb()
	}
	if err != nil { // return address register
		return c, err
	}
	if len(aug) == 0 || aug[0] != 'z' {
		return c, nil
	}
	c.augZ = true
	if _, err := r.uleb(); err != nil { // augmentation data length
		return c, err
	}
	for _, a := range aug[1:] {
		switch a {
		case 'L':
			if _, err := r.u8(); err != nil {
				return c, err
			}
		case 'P':
			enc, err := r.u8()
			if err != nil {
				return c, err
			}
			if enc != peOmit {
				if _, err := r.pointer(enc&^0x80, true); err != nil {
					return c, err
				}
				c.personality = true
			}
		case 'R':
			if c.fdeEncoding, err = r.u8(); err != nil {
				return c, err
			}
		case 'S', 'B':
		default:
			return c, nil // unknown augmentation: the rest cannot be read, the encoding can
		}
	}
	if r.off > end {
		return c, errShort
	}
	return c, nil
}
