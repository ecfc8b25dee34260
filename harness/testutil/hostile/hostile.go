// Package hostile writes the hostile ELF and DWARF the tests feed the
// receiver, as a tenant could: types that refer to themselves, chains a
// million deep, compressed-section bombs, copies of one USDT note. The
// fixtures are generated, never committed: DWARF is written byte by byte
// (DWARF 4, 32-bit offsets, 8-byte addresses, little endian; type units
// of DWARF 4 for .debug_types and of DWARF 5 for .debug_info, named by
// signature) and added to an ELF file built by gcc with AddSections,
// which appends sections (any name, flags, compressed or not) without
// touching the rest of the file.
package hostile

import (
	"bytes"
	"compress/zlib"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
)

// The abbreviation codes of Unit's DIEs.
const (
	abbrevCU = iota + 1
	abbrevSubprogram
	abbrevParam
	abbrevBase
	abbrevTypedef
	abbrevConst
	abbrevPointer
	abbrevStruct
	abbrevMember
	abbrevBlock
	abbrevCULines
	abbrevTypeUnit
	abbrevTypedefSig
	abbrevConstSig
	abbrevPointerSig
	abbrevStructSig
	abbrevMemberSig
	abbrevDeclSig
)

// DWARF constants used here.
const (
	tagCompileUnit   = 0x11
	tagSubprogram    = 0x2e
	tagFormalParam   = 0x05
	tagBaseType      = 0x24
	tagTypedef       = 0x16
	tagConstType     = 0x26
	tagPointerType   = 0x0f
	tagStructType    = 0x13
	tagMember        = 0x0d
	tagLexicalBlock  = 0x0b
	tagTypeUnit      = 0x41
	atSignature      = 0x69
	atDeclaration    = 0x3c
	formRefSig8      = 0x20
	atName           = 0x03
	atByteSize       = 0x0b
	atLowPC          = 0x11
	atHighPC         = 0x12
	atLanguage       = 0x13
	atType           = 0x49
	atLocation       = 0x02
	atEncoding       = 0x3e
	atFrameBase      = 0x40
	atExternal       = 0x3f
	atDataMemberLoc  = 0x38
	atStmtList       = 0x10
	formSecOffset    = 0x17
	formAddr         = 0x01
	formData1        = 0x0b
	formData2        = 0x05
	formData4        = 0x06
	formData8        = 0x07
	formString       = 0x08
	formRef4         = 0x13
	formExprloc      = 0x18
	formFlagPresent  = 0x19
	langC99          = 0x0c
	ateSigned        = 0x05
	opCallFrameCFA   = 0x9c
	opReg5           = 0x55 // rdi
	unitHeaderLength = 11   // DWARF 4: length, version, abbrev offset, address size
)

// Abbrev returns the abbreviation table every Unit uses.
func Abbrev() []byte {
	var b []byte
	def := func(code, tag int, children bool, attrs ...int) {
		b = binary.AppendUvarint(b, uint64(code))
		b = binary.AppendUvarint(b, uint64(tag))
		if children {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		for _, a := range attrs {
			b = binary.AppendUvarint(b, uint64(a))
		}
		b = append(b, 0, 0)
	}
	def(abbrevCU, tagCompileUnit, true, atName, formString, atLanguage, formData2, atLowPC, formAddr, atHighPC, formData8)
	def(abbrevSubprogram, tagSubprogram, true, atName, formString, atLowPC, formAddr, atHighPC, formData8, atFrameBase, formExprloc, atExternal, formFlagPresent)
	def(abbrevParam, tagFormalParam, false, atName, formString, atType, formRef4, atLocation, formExprloc)
	def(abbrevBase, tagBaseType, false, atName, formString, atEncoding, formData1, atByteSize, formData1)
	def(abbrevTypedef, tagTypedef, false, atName, formString, atType, formRef4)
	def(abbrevConst, tagConstType, false, atType, formRef4)
	def(abbrevPointer, tagPointerType, false, atByteSize, formData1, atType, formRef4)
	def(abbrevStruct, tagStructType, true, atName, formString, atByteSize, formData4)
	def(abbrevMember, tagMember, false, atName, formString, atType, formRef4, atDataMemberLoc, formData4)
	def(abbrevBlock, tagLexicalBlock, true)
	def(abbrevCULines, tagCompileUnit, true, atName, formString, atLanguage, formData2, atLowPC, formAddr, atHighPC, formData8, atStmtList, formSecOffset)
	def(abbrevTypeUnit, tagTypeUnit, true, atLanguage, formData2)
	def(abbrevTypedefSig, tagTypedef, false, atName, formString, atType, formRefSig8)
	def(abbrevConstSig, tagConstType, false, atType, formRefSig8)
	def(abbrevPointerSig, tagPointerType, false, atByteSize, formData1, atType, formRefSig8)
	def(abbrevStructSig, tagStructType, true, atName, formString, atByteSize, formData4)
	def(abbrevMemberSig, tagMember, false, atName, formString, atType, formRefSig8, atDataMemberLoc, formData4)
	def(abbrevDeclSig, tagStructType, false, atName, formString, atDeclaration, formFlagPresent, atSignature, formRefSig8)
	return append(b, 0)
}

// Unit writes one compile unit of .debug_info. Offsets (the values of
// references) are from the unit's start, as DW_FORM_ref4 has them; a
// method that writes one DIE returns its offset, and Next says where the
// next DIE will go, so that a DIE can refer to itself or to DIEs written
// after it.
type Unit struct {
	b []byte
}

// NewUnit starts a unit whose compile unit DIE covers [lowPC, lowPC+size).
func NewUnit(lowPC, size uint64) *Unit {
	u := &Unit{b: make([]byte, unitHeaderLength)}
	binary.LittleEndian.PutUint16(u.b[4:], 4) // version; abbrev offset 0
	u.b[10] = 8                               // address size
	u.b = append(u.b, abbrevCU)
	u.str("hostile.c")
	u.b = binary.LittleEndian.AppendUint16(u.b, langC99)
	u.b = binary.LittleEndian.AppendUint64(u.b, lowPC)
	u.b = binary.LittleEndian.AppendUint64(u.b, size)
	return u
}

// NewUnitWithLines is NewUnit whose compile unit names the line program
// at offset 0 of .debug_line (see LineProgramV5).
func NewUnitWithLines(lowPC, size uint64) *Unit {
	u := &Unit{b: make([]byte, unitHeaderLength)}
	binary.LittleEndian.PutUint16(u.b[4:], 4)
	u.b[10] = 8
	u.b = append(u.b, abbrevCULines)
	u.str("hostile.c")
	u.b = binary.LittleEndian.AppendUint16(u.b, langC99)
	u.b = binary.LittleEndian.AppendUint64(u.b, lowPC)
	u.b = binary.LittleEndian.AppendUint64(u.b, size)
	u.b = binary.LittleEndian.AppendUint32(u.b, 0)
	return u
}

// LineProgramV5 returns a DWARF 5 .debug_line whose header declares dirs
// directories and files files, described by no field at all: a few bytes
// that declare any number of entries.
func LineProgramV5(dirs, files uint64) []byte {
	var h []byte
	h = append(h, 1, 1, 1, 0xfb, 14, 13)              // min inst, max ops, is_stmt, line base, line range, opcode base
	h = append(h, 0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1) // standard opcode lengths
	h = append(h, 0)                                  // directory entry format count
	h = binary.AppendUvarint(h, dirs)
	h = append(h, 0) // file name entry format count
	h = binary.AppendUvarint(h, files)
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, 0) // unit length, below
	b = binary.LittleEndian.AppendUint16(b, 5)
	b = append(b, 8, 0) // address size, segment selector size
	b = binary.LittleEndian.AppendUint32(b, uint32(len(h)))
	b = append(b, h...)
	binary.LittleEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

func (u *Unit) str(s string) { u.b = append(append(u.b, s...), 0) }

// Next returns the offset of the next DIE.
func (u *Unit) Next() uint32 { return uint32(len(u.b)) }

// Base writes a signed integer base type.
func (u *Unit) Base(name string, size int) uint32 {
	off := u.Next()
	u.b = append(u.b, abbrevBase)
	u.str(name)
	u.b = append(u.b, ateSigned, byte(size))
	return off
}

// Typedef writes a typedef of the type at ref.
func (u *Unit) Typedef(name string, ref uint32) uint32 {
	off := u.Next()
	u.b = append(u.b, abbrevTypedef)
	u.str(name)
	u.b = binary.LittleEndian.AppendUint32(u.b, ref)
	return off
}

// Const writes a const qualifier of the type at ref.
func (u *Unit) Const(ref uint32) uint32 {
	off := u.Next()
	u.b = append(u.b, abbrevConst)
	u.b = binary.LittleEndian.AppendUint32(u.b, ref)
	return off
}

// Pointer writes an (anonymous) pointer to the type at ref.
func (u *Unit) Pointer(ref uint32) uint32 {
	off := u.Next()
	u.b = append(u.b, abbrevPointer, 8)
	u.b = binary.LittleEndian.AppendUint32(u.b, ref)
	return off
}

// pointerSize and typedefSize are the sizes of the DIEs Pointer and
// Typedef (named "t") write.
const (
	pointerSize = 1 + 1 + 4
	typedefSize = 1 + 2 + 4
)

// PointerChain writes n pointers, each to the next, the last to the type
// at ref, and returns the first.
func (u *Unit) PointerChain(n int, ref uint32) uint32 {
	first := u.Next()
	u.b = slices.Grow(u.b, n*pointerSize)
	for i := 1; i <= n; i++ {
		next := first + uint32(i*pointerSize)
		if i == n {
			next = ref
		}
		u.Pointer(next)
	}
	return first
}

// TypedefChain writes n typedefs named "t", each of the next, the last of
// the type at ref, and returns the first.
func (u *Unit) TypedefChain(n int, ref uint32) uint32 {
	first := u.Next()
	u.b = slices.Grow(u.b, n*typedefSize)
	for i := 1; i <= n; i++ {
		next := first + uint32(i*typedefSize)
		if i == n {
			next = ref
		}
		u.Typedef("t", next)
	}
	return first
}

// Struct writes a struct of the given byte size whose members have the
// types at refs, named f0, f1, … at offset 0, 8, ….
func (u *Unit) Struct(name string, size int, refs ...uint32) uint32 {
	off := u.Next()
	u.b = append(u.b, abbrevStruct)
	u.str(name)
	u.b = binary.LittleEndian.AppendUint32(u.b, uint32(size))
	for i, ref := range refs {
		u.b = append(u.b, abbrevMember)
		u.str(fmt.Sprintf("f%d", i))
		u.b = binary.LittleEndian.AppendUint32(u.b, ref)
		u.b = binary.LittleEndian.AppendUint32(u.b, uint32(8*i))
	}
	u.b = append(u.b, 0)
	return off
}

// Function writes a function at [lowPC, lowPC+size) with one parameter
// named param, of the type at ref, in rdi (the first SysV argument), and
// inside its scope blocks lexical blocks nested in each other.
func (u *Unit) Function(name string, lowPC, size uint64, param string, ref uint32, blocks int) uint32 {
	off := u.Next()
	u.b = append(u.b, abbrevSubprogram)
	u.str(name)
	u.b = binary.LittleEndian.AppendUint64(u.b, lowPC)
	u.b = binary.LittleEndian.AppendUint64(u.b, size)
	u.b = append(u.b, 1, opCallFrameCFA)
	u.b = append(u.b, abbrevParam)
	u.str(param)
	u.b = binary.LittleEndian.AppendUint32(u.b, ref)
	u.b = append(u.b, 1, opReg5)
	u.b = slices.Grow(u.b, 2*blocks)
	for range blocks {
		u.b = append(u.b, abbrevBlock)
	}
	for range blocks {
		u.b = append(u.b, 0)
	}
	u.b = append(u.b, 0)
	return off
}

// Info ends the unit and returns it as .debug_info.
func (u *Unit) Info() []byte {
	b := append(u.b, 0) // the compile unit's children end
	binary.LittleEndian.PutUint32(b, uint32(len(b)-4))
	return b
}

// TypedefSig writes a typedef of the type of the type unit with
// signature sig (DW_FORM_ref_sig8).
func (u *Unit) TypedefSig(name string, sig uint64) uint32 {
	off := u.Next()
	u.b = append(u.b, abbrevTypedefSig)
	u.str(name)
	u.b = binary.LittleEndian.AppendUint64(u.b, sig)
	return off
}

// ConstSig writes a const qualifier of the type of signature sig.
func (u *Unit) ConstSig(sig uint64) uint32 {
	off := u.Next()
	u.b = append(u.b, abbrevConstSig)
	u.b = binary.LittleEndian.AppendUint64(u.b, sig)
	return off
}

// PointerSig writes a pointer to the type of signature sig.
func (u *Unit) PointerSig(sig uint64) uint32 {
	off := u.Next()
	u.b = append(u.b, abbrevPointerSig, 8)
	u.b = binary.LittleEndian.AppendUint64(u.b, sig)
	return off
}

// StructSig is Struct whose members have the types of signatures sigs.
func (u *Unit) StructSig(name string, size int, sigs ...uint64) uint32 {
	off := u.Next()
	u.b = append(u.b, abbrevStructSig)
	u.str(name)
	u.b = binary.LittleEndian.AppendUint32(u.b, uint32(size))
	for i, sig := range sigs {
		u.b = append(u.b, abbrevMemberSig)
		u.str(fmt.Sprintf("f%d", i))
		u.b = binary.LittleEndian.AppendUint64(u.b, sig)
		u.b = binary.LittleEndian.AppendUint32(u.b, uint32(8*i))
	}
	u.b = append(u.b, 0)
	return off
}

// DeclSig writes a declaration of a struct whose definition is the type
// of signature sig (DW_AT_declaration and DW_AT_signature), as GCC writes
// in place of a type it moved to a type unit.
func (u *Unit) DeclSig(name string, sig uint64) uint32 {
	off := u.Next()
	u.b = append(u.b, abbrevDeclSig)
	u.str(name)
	u.b = binary.LittleEndian.AppendUint64(u.b, sig)
	return off
}

// TypeUnit writes one type unit: DWARF 4, for .debug_types (NewTypeUnit),
// or DWARF 5, a DW_UT_type unit of .debug_info (NewTypeUnit5). It writes
// DIEs as a Unit does (offsets from the unit's start); SetType names the
// unit's type, by default the first DIE after the type unit's own.
type TypeUnit struct {
	Unit
	// V5 says the unit is a DWARF 5 one, of .debug_info.
	V5     bool
	typeAt int
}

// Sizes of a type unit's header and its DW_TAG_type_unit DIE.
const (
	typeUnitHeader4 = unitHeaderLength + 8 + 4 // then signature and type offset
	typeUnitHeader5 = 4 + 2 + 1 + 1 + 4 + 8 + 4
	typeUnitDIE     = 1 + 2
)

// NewTypeUnit starts a DWARF 4 type unit of .debug_types with signature
// sig.
func NewTypeUnit(sig uint64) *TypeUnit {
	u := &TypeUnit{typeAt: typeUnitHeader4 - 4}
	u.b = make([]byte, typeUnitHeader4, typeUnitHeader4+32)
	binary.LittleEndian.PutUint16(u.b[4:], 4) // version; abbrev offset 0
	u.b[10] = 8                               // address size
	binary.LittleEndian.PutUint64(u.b[11:], sig)
	u.start()
	return u
}

// NewTypeUnit5 starts a DWARF 5 type unit (DW_UT_type) with signature
// sig, for .debug_info.
func NewTypeUnit5(sig uint64) *TypeUnit {
	u := &TypeUnit{V5: true, typeAt: typeUnitHeader5 - 4}
	u.b = make([]byte, typeUnitHeader5, typeUnitHeader5+32)
	binary.LittleEndian.PutUint16(u.b[4:], 5)
	u.b[6], u.b[7] = 0x02, 8 // DW_UT_type, address size; abbrev offset 0
	binary.LittleEndian.PutUint64(u.b[12:], sig)
	u.start()
	return u
}

func (u *TypeUnit) start() {
	u.b = append(u.b, abbrevTypeUnit)
	u.b = binary.LittleEndian.AppendUint16(u.b, langC99)
	u.SetType(u.Next())
}

// SetType makes the DIE at off (from the unit's start) the unit's type.
func (u *TypeUnit) SetType(off uint32) {
	binary.LittleEndian.PutUint32(u.b[u.typeAt:], off)
}

// FirstType returns the offset at which a new TypeUnit's first DIE
// after its own goes, for DWARF 4 or 5.
func FirstType(v5 bool) uint32 {
	if v5 {
		return typeUnitHeader5 + typeUnitDIE
	}
	return typeUnitHeader4 + typeUnitDIE
}

// TypeUnitChain returns n DWARF 4 type units for .debug_types with
// signatures first, first+1, …: the type of each is a pointer (with
// typedefs, a typedef "t") to the type of the next signature, the last
// one's a base type "long".
func TypeUnitChain(n int, first uint64, typedefs bool) []byte {
	u := NewTypeUnit(0)
	if typedefs {
		u.TypedefSig("t", 0)
	} else {
		u.PointerSig(0)
	}
	link := u.Info()
	last := NewTypeUnit(first + uint64(n) - 1)
	last.Base("long", 8)
	end := last.Info()
	refAt := len(link) - 1 - 8 // the signature ends the type's DIE
	out := make([]byte, 0, (n-1)*len(link)+len(end))
	for i := range n - 1 {
		at := len(out)
		out = append(out, link...)
		binary.LittleEndian.PutUint64(out[at+11:], first+uint64(i))
		binary.LittleEndian.PutUint64(out[at+refAt:], first+uint64(i)+1)
	}
	return append(out, end...)
}

// TypeUnitBomb returns n DWARF 4 type units for .debug_types (DWARF 5
// ones for .debug_info with v5), each with a base type and a signature of
// its own: 32 bytes per unit (33 at DWARF 5), which zlib compresses about
// 16-fold.
func TypeUnitBomb(n int, v5 bool) []byte {
	u, sigAt := NewTypeUnit(0), 11
	if v5 {
		u, sigAt = NewTypeUnit5(0), 12
	}
	u.Base("b", 8)
	one := u.Info()
	out := make([]byte, 0, n*len(one))
	for i := range n {
		at := len(out)
		out = append(out, one...)
		binary.LittleEndian.PutUint64(out[at+sigAt:], uint64(i)+1)
	}
	return out
}

// Section is one section AddSections appends.
type Section struct {
	Name  string
	Type  elf.SectionType
	Flags elf.SectionFlag
	Data  []byte
	// Align is the section's alignment (1 when 0).
	Align uint64
}

// Compressed returns an SHF_COMPRESSED section (ELFCOMPRESS_ZLIB) whose
// contents are data, or, when data is nil, declared zero bytes: a
// decompression bomb of about declared/1000 bytes in the file.
func Compressed(name string, data []byte, declared uint64) (Section, error) {
	var b bytes.Buffer
	hdr := make([]byte, 24) // Elf64_Chdr
	binary.LittleEndian.PutUint32(hdr[0:], uint32(elf.COMPRESS_ZLIB))
	if data != nil {
		declared = uint64(len(data))
	}
	binary.LittleEndian.PutUint64(hdr[8:], declared)
	binary.LittleEndian.PutUint64(hdr[16:], 1)
	b.Write(hdr)
	w, err := zlib.NewWriterLevel(&b, zlib.BestSpeed)
	if err != nil {
		return Section{}, err
	}
	if data != nil {
		_, err = w.Write(data)
	} else {
		zeros := make([]byte, 1<<20)
		for left := declared; left > 0 && err == nil; {
			n := min(left, uint64(len(zeros)))
			_, err = w.Write(zeros[:n])
			left -= n
		}
	}
	if err := errors.Join(err, w.Close()); err != nil {
		return Section{}, err
	}
	return Section{Name: name, Type: elf.SHT_PROGBITS, Flags: elf.SHF_COMPRESSED, Data: b.Bytes(), Align: 8}, nil
}

// DWARFSections returns .debug_abbrev and .debug_info sections for a unit.
func DWARFSections(u *Unit) []Section {
	return []Section{
		{Name: ".debug_abbrev", Type: elf.SHT_PROGBITS, Data: Abbrev()},
		{Name: ".debug_info", Type: elf.SHT_PROGBITS, Data: u.Info()},
	}
}

// AddSections writes to out the 64-bit little-endian ELF file in, with
// secs appended after its contents (non-allocated: nothing is loaded),
// a new section name table and a new section header table.
func AddSections(in, out string, secs ...Section) error {
	return Patch(in, out, nil, secs...)
}

// Patch is AddSections that also renames sections of in (old name to new
// name), so that readers no longer find them under their name: a file's
// own .note.stapsdt replaced by a generated one.
func Patch(in, out string, rename map[string]string, secs ...Section) error {
	b, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	b, err = appendSections(b, rename, secs)
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	return os.WriteFile(out, b, 0o755)
}

func appendSections(b []byte, rename map[string]string, secs []Section) ([]byte, error) {
	le := binary.LittleEndian
	if len(b) < 64 || string(b[:4]) != elf.ELFMAG || elf.Class(b[4]) != elf.ELFCLASS64 || elf.Data(b[5]) != elf.ELFDATA2LSB {
		return nil, errors.New("not a 64-bit little-endian ELF file")
	}
	shoff, shentsize := le.Uint64(b[0x28:]), uint64(le.Uint16(b[0x3a:]))
	shnum, shstrndx := uint64(le.Uint16(b[0x3c:])), uint64(le.Uint16(b[0x3e:]))
	if shentsize != 64 || shoff+shnum*64 > uint64(len(b)) || shstrndx >= shnum {
		return nil, errors.New("unexpected section header table")
	}
	headers := append([]byte(nil), b[shoff:shoff+shnum*64]...)
	strHdr := headers[shstrndx*64:]
	strOff, strSize := le.Uint64(strHdr[0x18:]), le.Uint64(strHdr[0x20:])
	names := append([]byte(nil), b[strOff:strOff+strSize]...)
	for i := uint64(0); i < shnum; i++ {
		h := headers[i*64:]
		at := uint64(le.Uint32(h))
		if at >= uint64(len(names)) {
			continue
		}
		old := names[at:]
		if end := bytes.IndexByte(old, 0); end >= 0 {
			if nw, ok := rename[string(old[:end])]; ok {
				le.PutUint32(h, uint32(len(names)))
				names = append(append(names, nw...), 0)
			}
		}
	}

	align := func(n uint64) {
		for uint64(len(b))%n != 0 {
			b = append(b, 0)
		}
	}
	for _, s := range secs {
		a := max(s.Align, 1)
		align(a)
		off := uint64(len(b))
		b = append(b, s.Data...)
		h := make([]byte, 64)
		le.PutUint32(h[0:], uint32(len(names)))
		names = append(append(names, s.Name...), 0)
		le.PutUint32(h[4:], uint32(s.Type))
		le.PutUint64(h[8:], uint64(s.Flags))
		le.PutUint64(h[0x18:], off)
		le.PutUint64(h[0x20:], uint64(len(s.Data)))
		le.PutUint64(h[0x30:], a)
		headers = append(headers, h...)
	}
	// The new name table replaces the old one's contents.
	newStrOff := uint64(len(b))
	b = append(b, names...)
	le.PutUint64(headers[shstrndx*64+0x18:], newStrOff)
	le.PutUint64(headers[shstrndx*64+0x20:], uint64(len(names)))
	align(8)
	newShoff := uint64(len(b))
	b = append(b, headers...)
	n := uint64(len(headers) / 64)
	if n >= uint64(elf.SHN_LORESERVE) {
		return nil, errors.New("too many sections")
	}
	le.PutUint64(b[0x28:], newShoff)
	le.PutUint16(b[0x3c:], uint16(n))
	return b, nil
}

// Symbol returns the address and size of a function symbol of an ELF file.
func Symbol(path, name string) (addr, size uint64, err error) {
	f, err := elf.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return 0, 0, err
	}
	for _, s := range syms {
		if s.Name == name && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			return s.Value, s.Size, nil
		}
	}
	return 0, 0, fmt.Errorf("%s: no function %s", path, name)
}

// MinimalELF returns a 64-bit little-endian x86-64 ELF executable with no
// segments and only its section name table: a base for AddSections in
// memory (fuzz targets).
func MinimalELF() []byte {
	le := binary.LittleEndian
	names := []byte("\x00.shstrtab\x00")
	b := make([]byte, 64)
	copy(b, elf.ELFMAG)
	b[4], b[5], b[6] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	le.PutUint16(b[0x10:], uint16(elf.ET_EXEC))
	le.PutUint16(b[0x12:], uint16(elf.EM_X86_64))
	le.PutUint32(b[0x14:], uint32(elf.EV_CURRENT))
	le.PutUint16(b[0x34:], 64) // e_ehsize
	le.PutUint16(b[0x3a:], 64) // e_shentsize
	le.PutUint16(b[0x3c:], 2)  // e_shnum
	le.PutUint16(b[0x3e:], 1)  // e_shstrndx
	strOff := uint64(len(b))
	b = append(b, names...)
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	le.PutUint64(b[0x28:], uint64(len(b))) // e_shoff
	b = append(b, make([]byte, 64)...)     // SHN_UNDEF
	h := make([]byte, 64)
	le.PutUint32(h[0:], 1)
	le.PutUint32(h[4:], uint32(elf.SHT_STRTAB))
	le.PutUint64(h[0x18:], strOff)
	le.PutUint64(h[0x20:], uint64(len(names)))
	le.PutUint64(h[0x30:], 1)
	return append(b, h...)
}

// AppendSections is AddSections on a file in memory.
func AppendSections(b []byte, secs ...Section) ([]byte, error) {
	return appendSections(append([]byte(nil), b...), nil, secs)
}

// CompressedRaw returns an SHF_COMPRESSED zlib section whose header
// declares declared bytes and whose stream is raw, as given: a header
// that lies, a stream that is not zlib.
func CompressedRaw(name string, raw []byte, declared uint64) Section {
	hdr := make([]byte, 24)
	binary.LittleEndian.PutUint32(hdr[0:], uint32(elf.COMPRESS_ZLIB))
	binary.LittleEndian.PutUint64(hdr[8:], declared)
	binary.LittleEndian.PutUint64(hdr[16:], 1)
	return Section{Name: name, Type: elf.SHT_PROGBITS, Flags: elf.SHF_COMPRESSED, Data: append(hdr, raw...), Align: 8}
}
