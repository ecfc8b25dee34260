package debuginfo

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// DefaultMaxBytes bounds the memory the debuginfo of one traced file may
// take: its debug sections after decompression (each read once) and what
// is decoded from them (unit headers, abbreviations, functions, types).
// Well under the 512 MiB the DaemonSet gives the collector: a hostile file
// (a compressed-section bomb, a million nested types) is refused at this
// bound instead of exhausting the collector.
const DefaultMaxBytes = 128 << 20

// ErrOverBudget says a file's debuginfo would take more memory than
// Options.MaxBytes (the receiver's max_debuginfo_bytes) allows.
var ErrOverBudget = errors.New("over the memory budget of one file's debuginfo")

// budget counts the bytes the debuginfo of one file takes. It is not
// synchronized: a File is used by one goroutine at a time.
type budget struct {
	limit, used int64
}

// Estimated sizes, in bytes, of what is decoded from DWARF, charged to the
// budget as it is kept: a unit header (ours and debug/dwarf's), an
// abbreviation, a function or global of the index, a type node and one
// of its fields, parameters or enumerators, a file of a line table.
const (
	unitCost        = 256
	abbrevCost      = 96
	functionCost    = 320
	typeCost        = 160
	typeMemberCost  = 96
	globalCost      = 96
	lineFileCost    = 96
	maxBudgetReport = 3
)

// charge takes n bytes from the budget, or fails saying what needed them.
func (b *budget) charge(n int64, what string) error {
	if n < 0 || b.used+n > b.limit || b.used+n < b.used {
		return fmt.Errorf("%s: %d bytes with the %d already taken, over the %d-byte budget of one file's debuginfo (max_debuginfo_bytes): %w",
			what, n, b.used, b.limit, ErrOverBudget)
	}
	b.used += n
	return nil
}

// compressed reports whether a section is stored compressed: SHF_COMPRESSED,
// or a legacy .zdebug_ section with its "ZLIB" header.
func compressed(s *elf.Section) bool {
	if s.Flags&elf.SHF_COMPRESSED != 0 {
		return true
	}
	if !strings.HasPrefix(s.Name, ".zdebug") || s.ReaderAt == nil {
		return false
	}
	var hdr [4]byte
	_, err := s.ReadAt(hdr[:], 0)
	return err == nil && string(hdr[:]) == "ZLIB"
}

// declaredSize returns the size of a section's contents as the file
// declares it: after decompression for a compressed section (the
// SHF_COMPRESSED header, which debug/elf put in Size, or the size after a
// legacy "ZLIB" header), read before anything is decompressed.
func declaredSize(s *elf.Section) uint64 {
	if s.Type == elf.SHT_NOBITS {
		return 0
	}
	if s.Flags&elf.SHF_COMPRESSED == 0 && strings.HasPrefix(s.Name, ".zdebug") && s.ReaderAt != nil {
		var hdr [12]byte
		if _, err := s.ReadAt(hdr[:], 0); err == nil && string(hdr[:4]) == "ZLIB" {
			return binary.BigEndian.Uint64(hdr[4:])
		}
	}
	return s.Size
}

// readSection reads (decompressing) the contents of s, which must be what
// its header declares: no more (the read stops there) and no less. The
// caller checked size against the budget; the buffer's pages are only
// touched as data arrives.
func readSection(s *elf.Section, size uint64) ([]byte, error) {
	buf := make([]byte, size)
	n, err := io.ReadFull(s.Open(), buf)
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		return nil, fmt.Errorf("reading %s: %d bytes, its header says %d: %w", s.Name, n, size, ErrMalformed)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", s.Name, err)
	}
	return buf, nil
}

// sectionOf returns the section called name in ef, or its legacy
// .zdebug_ twin; nil when ef has none with contents.
func sectionOf(ef *elf.File, name string) *elf.Section {
	s := ef.Section(name)
	if s == nil && strings.HasPrefix(name, ".debug_") {
		s = ef.Section(".zdebug_" + name[len(".debug_"):])
	}
	if s == nil || s.Type == elf.SHT_NOBITS {
		return nil
	}
	return s
}

// sectionLoad is one section to read into memory.
type sectionLoad struct {
	sec  *elf.Section
	size uint64
	dst  *[]byte
}

// loadSections reads the given sections, each once, after checking that
// their declared sizes together fit the budget: nothing is decompressed
// when they do not.
func loadSections(loads []sectionLoad, b *budget) error {
	var total uint64
	var biggest []string
	for _, l := range loads {
		total += l.size
		if l.size > uint64(b.limit)/4 && len(biggest) < maxBudgetReport {
			biggest = append(biggest, fmt.Sprintf("%s %d bytes", l.sec.Name, l.size))
		}
	}
	what := "debug sections"
	if len(biggest) > 0 {
		what += " (" + strings.Join(biggest, ", ") + ")"
	}
	if total > uint64(b.limit) {
		return fmt.Errorf("%s: %d bytes once decompressed, over the %d-byte budget of one file's debuginfo (max_debuginfo_bytes): %w",
			what, total, b.limit, ErrOverBudget)
	}
	if err := b.charge(int64(total), what); err != nil {
		return err
	}
	for _, l := range loads {
		data, err := readSection(l.sec, l.size)
		if err != nil {
			return err
		}
		*l.dst = data
	}
	return nil
}

// dwarfSections are the debug sections Open reads from the debug file.
// .debug_types holds DWARF 4 type units (see indexTypeUnits).
var dwarfSections = []string{
	".debug_abbrev", ".debug_info", ".debug_types", ".debug_str", ".debug_line", ".debug_ranges",
	".debug_addr", ".debug_line_str", ".debug_str_offsets", ".debug_rnglists",
	".debug_loc", ".debug_loclists", ".debug_frame",
}

// newDWARF builds the dwarf.Data of sections read by loadSections, after
// checking what debug/dwarf decodes of them up front (the abbreviation
// tables of every unit; parseUnits charged the headers) against the
// budget.
func newDWARF(raw map[string]*[]byte, units []unit, order binary.ByteOrder, b *budget) (*dwarf.Data, error) {
	sec := func(name string) []byte { return *raw[name] }
	if err := checkAbbrevs(sec(".debug_abbrev"), sec(".debug_info"), units, order, b); err != nil {
		return nil, err
	}
	d, err := dwarf.New(sec(".debug_abbrev"), nil, nil, sec(".debug_info"), sec(".debug_line"), nil, sec(".debug_ranges"), sec(".debug_str"))
	if err != nil {
		return nil, err
	}
	for _, name := range []string{".debug_addr", ".debug_line_str", ".debug_str_offsets", ".debug_rnglists"} {
		if b := sec(name); b != nil {
			if err := d.AddSection(name, b); err != nil {
				return nil, err
			}
		}
	}
	return d, nil
}

// checkAbbrevs parses, once per distinct offset, the abbreviation tables
// the units name, as dwarf.New is about to: tables that overlap (each
// unit naming an offset a little further into one long table) would make
// it parse the section once per unit, in time and memory quadratic in the
// file's size. Their entries are charged to the budget.
func checkAbbrevs(abbrev, info []byte, units []unit, order binary.ByteOrder, b *budget) error {
	seen := map[uint64]bool{}
	var parsed, entries uint64
	for i := range units {
		off, ok := abbrevOffset(info, &units[i], order)
		if !ok || seen[off] {
			continue
		}
		seen[off] = true
		n, size, err := abbrevTable(abbrev, off)
		if err != nil {
			return fmt.Errorf("unit at %#x: %w", units[i].off, err)
		}
		parsed += size
		entries += n
		if parsed > 2*uint64(len(abbrev))+4096 {
			return fmt.Errorf("abbreviation tables overlap: %d bytes parsed of a %d-byte .debug_abbrev: %w", parsed, len(abbrev), ErrMalformed)
		}
	}
	return b.charge(int64(entries)*abbrevCost, fmt.Sprintf("%d abbreviations", entries))
}

// abbrevOffset returns the .debug_abbrev offset in a unit's header.
func abbrevOffset(info []byte, u *unit, order binary.ByteOrder) (uint64, bool) {
	r := reader{b: info, off: u.off, order: order}
	if r.u32() == 0xffffffff {
		r.u64()
	}
	r.u16() // version
	if u.version == 5 {
		r.u8() // unit type
		r.u8() // address size
	}
	off := r.offset(u.dwarf64)
	return off, r.err == nil
}

// abbrevTable walks the abbreviation table at off up to its terminating 0
// code and returns its number of entries and length in bytes.
func abbrevTable(abbrev []byte, off uint64) (entries, size uint64, err error) {
	if off >= uint64(len(abbrev)) {
		return 0, 0, fmt.Errorf("abbreviation table at %#x past .debug_abbrev (%d bytes): %w", off, len(abbrev), ErrMalformed)
	}
	r := reader{b: abbrev, off: off, order: binary.LittleEndian}
	for {
		code := r.uleb()
		if r.err != nil {
			return 0, 0, r.err
		}
		if code == 0 {
			return entries, r.off - off, nil
		}
		entries++
		r.uleb() // tag
		r.u8()   // children
		for {
			attr, form := r.uleb(), r.uleb()
			if r.err != nil {
				return 0, 0, r.err
			}
			if form == 0x21 { // DW_FORM_implicit_const
				r.sleb()
			}
			if attr == 0 && form == 0 {
				break
			}
		}
	}
}

// CheckELF refuses, before anything reads them, an ELF file whose other
// sections would take more than maxBytes (0: DefaultMaxBytes) of memory
// to read: compressed sections that are not debug sections (their
// declared sizes together; debug/elf decompresses any section it reads),
// and symbol tables (about 100 bytes per symbol once decoded). Debug
// sections are counted apart, when Open reads them.
func CheckELF(ef *elf.File, maxBytes int64) error {
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	var total uint64
	var parts []string
	for _, s := range ef.Sections {
		if s.Type == elf.SHT_NOBITS {
			continue
		}
		var n uint64
		switch {
		case s.Type == elf.SHT_SYMTAB || s.Type == elf.SHT_DYNSYM:
			n = declaredSize(s) / 24 * 100
			if compressed(s) {
				n += declaredSize(s)
			}
		case strings.HasPrefix(s.Name, ".debug_") || strings.HasPrefix(s.Name, ".zdebug_"):
			continue
		case compressed(s):
			n = declaredSize(s)
		default:
			continue
		}
		if total+n < total {
			total = ^uint64(0)
		} else {
			total += n
		}
		if len(parts) < maxBudgetReport {
			parts = append(parts, fmt.Sprintf("%s %d bytes", s.Name, n))
		}
	}
	if total > uint64(maxBytes) {
		return fmt.Errorf("its sections would take %d bytes to read (%s), over the %d-byte budget of one file (max_debuginfo_bytes): %w",
			total, strings.Join(parts, ", "), maxBytes, ErrOverBudget)
	}
	return nil
}

// checkLineHeader counts the directories and files the header of the
// line program at off declares and charges them to the budget before
// debug/dwarf's LineReader decodes them: it allocates a DWARF 5 header's
// counts up front (a few bytes can declare a billion files) and an entry
// per byte or so for older ones.
func checkLineHeader(line []byte, off uint64, order binary.ByteOrder, b *budget) error {
	if off >= uint64(len(line)) {
		return fmt.Errorf("line program at %#x past .debug_line (%d bytes): %w", off, len(line), ErrMalformed)
	}
	r := reader{b: line, off: off, order: order}
	length := uint64(r.u32())
	dwarf64 := false
	if length == 0xffffffff {
		length, dwarf64 = r.u64(), true
	}
	end := r.off + length
	if r.err != nil || end > uint64(len(line)) || end < r.off {
		return fmt.Errorf("line program at %#x: length %#x past the section: %w", off, length, ErrMalformed)
	}
	r.b = line[:end]
	version := r.u16()
	if version >= 5 {
		r.u8() // address size
		r.u8() // segment selector size
	}
	r.offset(dwarf64) // header length
	r.u8()            // minimum instruction length
	if version >= 4 {
		r.u8() // maximum operations per instruction
	}
	r.u8() // default is_stmt
	r.u8() // line base
	r.u8() // line range
	opcodeBase := r.u8()
	if opcodeBase > 0 {
		r.bytes(uint64(opcodeBase) - 1)
	}
	if r.err != nil {
		return fmt.Errorf("line program at %#x: %w", off, r.err)
	}
	entries := uint64(0)
	if version < 5 {
		// Directories, then files (a name and three numbers), each list
		// ending with an empty name.
		for _, isFile := range []bool{false, true} {
			for {
				name := r.cstring()
				if r.err != nil {
					return fmt.Errorf("line program at %#x: %w", off, r.err)
				}
				if len(name) == 0 {
					break
				}
				if isFile {
					r.uleb()
					r.uleb()
					r.uleb()
				}
				entries++
			}
		}
		return b.charge(int64(entries)*lineFileCost, "line table files")
	}
	for range 2 { // directories, then files
		nforms := r.u8()
		forms := make([]uint64, nforms)
		for i := range forms {
			r.uleb() // content type
			forms[i] = r.uleb()
		}
		count := r.uleb()
		if r.err != nil {
			return fmt.Errorf("line program at %#x: %w", off, r.err)
		}
		if count > uint64(b.limit)/lineFileCost {
			return fmt.Errorf("line program at %#x declares %d entries: %w", off, count, ErrOverBudget)
		}
		if err := b.charge(int64(count)*lineFileCost, "line table files"); err != nil {
			return err
		}
		for range count {
			for _, form := range forms {
				if err := skipForm(&r, form, dwarf64); err != nil {
					return fmt.Errorf("line program at %#x: %w", off, err)
				}
			}
			if r.err != nil {
				return fmt.Errorf("line program at %#x: %w", off, r.err)
			}
		}
	}
	return nil
}

// skipForm skips one value of a form a line program header may use.
func skipForm(r *reader, form uint64, dwarf64 bool) error {
	switch form {
	case 0x08: // string
		r.cstring()
	case 0x0e, 0x1f, 0x1d: // strp, line_strp, strp_sup
		r.offset(dwarf64)
	case 0x1a, 0x0f: // strx, udata
		r.uleb()
	case 0x25, 0x0b: // strx1, data1
		r.u8()
	case 0x26, 0x05: // strx2, data2
		r.u16()
	case 0x27: // strx3
		r.bytes(3)
	case 0x28, 0x06: // strx4, data4
		r.u32()
	case 0x07: // data8
		r.u64()
	case 0x1e: // data16
		r.bytes(16)
	case 0x09: // block
		r.bytes(r.uleb())
	default:
		return fmt.Errorf("form %#x in a line program header: %w", form, ErrMalformed)
	}
	return nil
}
