// Package threadctx finds the OpenTelemetry thread context of a process
// (OTEP 4947, "Thread Context: Sharing Thread-Level Information with
// External Readers"): the ELF TLS variable otel_thread_ctx_v1 that an SDK
// exports in .dynsym, which points at the thread's context record, and how a
// thread reaches it under each TLS access model (static TLS of the
// executable or initial-exec, TLSDESC, legacy general dynamic). ReadModule
// reads what one ELF file says (its dynamic symbols, its TLS relocations of
// the variable and its PT_TLS segment); Resolve turns the modules a process
// maps, with the words the dynamic loader wrote into their GOTs, into what
// the engine needs (an offset from the thread pointer, or a module id and
// an offset in its block); Finder does both for a live process. It also
// reads the thread-local key map of the OTEP 4719 process context and
// decodes a record's attrs-data against it. Every byte it reads comes from
// a process the collector does not trust: it is bounded and checked.
package threadctx

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Symbol is the name of the thread-local variable OTEP 4947 defines.
const Symbol = "otel_thread_ctx_v1"

// Bounds of reading one ELF file.
const (
	// MaxSectionBytes bounds a section read whole: .dynsym, .dynstr and each
	// relocation section (libxul.so's .rela.dyn is about 10 MiB).
	MaxSectionBytes = 64 << 20
	// maxRelocs bounds the TLS relocations of the variable kept per module.
	maxRelocs = 64
)

// RelocKind is what the word (or words) a TLS relocation of the variable
// fills in holds at run time.
type RelocKind uint8

// The TLS relocations a reader follows.
const (
	// RelocTPOff (R_X86_64_TPOFF64, R_AARCH64_TLS_TPREL64: initial-exec)
	// holds the variable's offset from the thread pointer.
	RelocTPOff RelocKind = iota + 1
	// RelocModule (R_X86_64_DTPMOD64, R_AARCH64_TLS_DTPMOD64: legacy
	// general dynamic) holds the module id of the variable's module; the
	// word after it the variable's offset in that module's block.
	RelocModule
	// RelocDesc (R_X86_64_TLSDESC, R_AARCH64_TLSDESC) holds a TLS
	// descriptor: the address of its resolver, then the resolver's
	// argument.
	RelocDesc
)

func (k RelocKind) String() string {
	switch k {
	case RelocTPOff:
		return "initial-exec"
	case RelocModule:
		return "general dynamic"
	case RelocDesc:
		return "TLSDESC"
	}
	return fmt.Sprintf("RelocKind(%d)", uint8(k))
}

// Reloc is one TLS relocation of the variable in a module.
type Reloc struct {
	Kind RelocKind
	// VAddr is the virtual address of the word it fills in (before the
	// load bias).
	VAddr uint64
	// Addend is the relocation's addend.
	Addend int64
	// BySymbol says it names the variable; otherwise it names no symbol
	// (the module's own TLS, with the variable's offset in its addend, or
	// for RelocModule in the code), as a linker writes it for a variable
	// it binds locally.
	BySymbol bool
}

// Segment is a PT_LOAD or PT_TLS program header.
type Segment struct {
	VAddr, Off, FileSize, MemSize, Align uint64
}

// Module is what one ELF file says about otel_thread_ctx_v1.
type Module struct {
	Machine elf.Machine
	Type    elf.Type
	// Defines says the file defines the variable (a TLS symbol of that
	// name in .dynsym, not undefined); Value is then its offset in the
	// module's TLS block (its st_value).
	Defines bool
	Value   uint64
	// References says the file names the variable in .dynsym (defined or
	// not).
	References bool
	// TLS is the file's PT_TLS segment (MemSize 0 when it has none).
	TLS Segment
	// Loads are its PT_LOAD segments, to find its load bias.
	Loads []Segment
	// Relocs are its TLS relocations of the variable.
	Relocs []Reloc
}

// Relevant says whether the module has anything to do with the variable.
func (m *Module) Relevant() bool { return m.References || len(m.Relocs) > 0 }

// The TLS relocation types of the architectures the engine runs on.
var tlsRelocs = map[elf.Machine]map[uint32]RelocKind{
	elf.EM_X86_64: {
		uint32(elf.R_X86_64_TPOFF64):  RelocTPOff,
		uint32(elf.R_X86_64_DTPMOD64): RelocModule,
		uint32(elf.R_X86_64_TLSDESC):  RelocDesc,
	},
	elf.EM_AARCH64: {
		uint32(elf.R_AARCH64_TLS_TPREL64):  RelocTPOff,
		uint32(elf.R_AARCH64_TLS_DTPMOD64): RelocModule,
		uint32(elf.R_AARCH64_TLSDESC):      RelocDesc,
	},
}

// ErrNotELF says a file is not an ELF file ReadModule reads: 64-bit little
// endian x86-64 or aarch64.
var ErrNotELF = errors.New("not a 64-bit little-endian x86-64 or aarch64 ELF file")

// ReadModule reads what the ELF file r says about the variable: whether it
// defines or names it in .dynsym, its TLS relocations of it (in SHT_RELA
// sections linked to .dynsym), its PT_TLS and PT_LOAD segments. A file
// without .dynsym, or without the variable, is not an error: the Module
// says so. Sections are read whole, each at most MaxSectionBytes.
func ReadModule(r io.ReaderAt) (*Module, error) {
	f, err := elf.NewFile(r)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotELF, err)
	}
	if f.Class != elf.ELFCLASS64 || f.Data != elf.ELFDATA2LSB || tlsRelocs[f.Machine] == nil {
		return nil, ErrNotELF
	}
	m := &Module{Machine: f.Machine, Type: f.Type}
	for _, p := range f.Progs {
		s := Segment{VAddr: p.Vaddr, Off: p.Off, FileSize: p.Filesz, MemSize: p.Memsz, Align: p.Align}
		switch p.Type {
		case elf.PT_LOAD:
			if len(m.Loads) < 64 {
				m.Loads = append(m.Loads, s)
			}
		case elf.PT_TLS:
			m.TLS = s
		}
	}
	dynsym := -1
	for i, s := range f.Sections {
		if s.Type == elf.SHT_DYNSYM {
			dynsym = i
			break
		}
	}
	if dynsym < 0 {
		return m, nil
	}
	index, err := m.findSymbol(f, dynsym)
	if err != nil || index == 0 {
		return m, err
	}
	for _, s := range f.Sections {
		if s.Type != elf.SHT_RELA || int(s.Link) != dynsym {
			continue
		}
		if err := m.readRelocs(s, index); err != nil {
			return m, err
		}
	}
	return m, nil
}

// sectionData reads a section whole, refusing one larger than
// MaxSectionBytes.
func sectionData(s *elf.Section) ([]byte, error) {
	if s.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	if s.Size > MaxSectionBytes {
		return nil, fmt.Errorf("section %s: %d bytes, more than %d", s.Name, s.Size, MaxSectionBytes)
	}
	data := make([]byte, s.Size)
	if _, err := s.ReadAt(data, 0); err != nil {
		return nil, fmt.Errorf("reading section %s: %w", s.Name, err)
	}
	return data, nil
}

// Sizes of the 64-bit ELF structures read here.
const (
	symSize  = 24 // Elf64_Sym
	relaSize = 24 // Elf64_Rela
)

// findSymbol finds the variable in the dynamic symbol table (section
// dynsym) and returns its index, 0 when the file does not name it.
func (m *Module) findSymbol(f *elf.File, dynsym int) (uint32, error) {
	sec := f.Sections[dynsym]
	if int(sec.Link) <= 0 || int(sec.Link) >= len(f.Sections) {
		return 0, fmt.Errorf("section %s: string table %d does not exist", sec.Name, sec.Link)
	}
	syms, err := sectionData(sec)
	if err != nil {
		return 0, err
	}
	strs, err := sectionData(f.Sections[sec.Link])
	if err != nil {
		return 0, err
	}
	for i := 1; (i+1)*symSize <= len(syms); i++ {
		s := syms[i*symSize : (i+1)*symSize]
		name := binary.LittleEndian.Uint32(s[0:4])
		if !nameIs(strs, name, Symbol) {
			continue
		}
		info, shndx := s[4], elf.SectionIndex(binary.LittleEndian.Uint16(s[6:8]))
		if elf.ST_TYPE(info) != elf.STT_TLS {
			continue // another kind of symbol of that name: not the variable
		}
		m.References = true
		if shndx != elf.SHN_UNDEF {
			m.Defines, m.Value = true, binary.LittleEndian.Uint64(s[8:16])
		}
		return uint32(i), nil
	}
	return 0, nil
}

// nameIs says whether the NUL-terminated string at off in strs is name.
func nameIs(strs []byte, off uint32, name string) bool {
	end := uint64(off) + uint64(len(name))
	if end >= uint64(len(strs)) {
		return false
	}
	return string(strs[off:end]) == name && strs[end] == 0
}

// readRelocs keeps the TLS relocations of a SHT_RELA section that name the
// variable (symbol index) or, in a module that defines it, no symbol.
func (m *Module) readRelocs(sec *elf.Section, index uint32) error {
	data, err := sectionData(sec)
	if err != nil {
		return err
	}
	kinds := tlsRelocs[m.Machine]
	for off := 0; off+relaSize <= len(data) && len(m.Relocs) < maxRelocs; off += relaSize {
		info := binary.LittleEndian.Uint64(data[off+8:])
		kind, ok := kinds[uint32(info)]
		sym := uint32(info >> 32)
		addend := int64(binary.LittleEndian.Uint64(data[off+16:]))
		switch {
		case !ok:
			continue
		case sym == index:
		case sym != 0 || !m.Defines:
			continue
		case kind == RelocModule:
			// The module's own id: one is enough.
			if m.hasLocalModule() {
				continue
			}
		case addend != int64(m.Value):
			continue // another of the module's thread-local variables
		}
		m.Relocs = append(m.Relocs, Reloc{
			Kind:     kind,
			VAddr:    binary.LittleEndian.Uint64(data[off:]),
			Addend:   addend,
			BySymbol: sym == index,
		})
	}
	return nil
}

// hasLocalModule says whether the module has a RelocModule of no symbol.
func (m *Module) hasLocalModule() bool {
	for _, r := range m.Relocs {
		if r.Kind == RelocModule && !r.BySymbol {
			return true
		}
	}
	return false
}
