package threadctx

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
)

// Memory reads the memory of one process.
type Memory interface {
	// ReadAt fills p with the bytes at address addr, or fails.
	ReadAt(p []byte, addr uint64) error
}

// Loaded is a module a process maps: what its file says, and where.
type Loaded struct {
	*Module
	// Path is the file's path as the process sees it, for messages.
	Path string
	// Bias is its load bias: run-time address minus link-time address.
	Bias uint64
	// Main says it is the process's executable.
	Main bool
}

// Mode is how a thread reaches the variable.
type Mode uint8

// The modes of Access.
const (
	// ModeStatic: at Access.Offset from the thread pointer.
	ModeStatic Mode = iota + 1
	// ModeDTV: at Access.Offset in the TLS block of module
	// Access.ModuleID, found in the thread's dynamic thread vector.
	ModeDTV
)

// Access is how a thread of a process reaches the variable.
type Access struct {
	Mode Mode
	// Offset is from the thread pointer (ModeStatic) or into the module's
	// block (ModeDTV).
	Offset int64
	// ModuleID is the module's index in the DTV (ModeDTV).
	ModuleID uint64
	// Module is the path of the module that defines the variable.
	Module string
	// How says what the offset was taken from, for people.
	How string
}

// Errors of Resolve.
var (
	// ErrNoVariable says no module the process maps defines the variable.
	ErrNoVariable = errors.New("no module defines " + Symbol)
	// ErrNotReady says the dynamic loader has not yet filled in the words
	// of the variable's relocations (a module being loaded, a lazy TLS
	// descriptor): look again later.
	ErrNotReady = errors.New("the dynamic loader has not yet resolved " + Symbol)
)

// Bounds of the numbers read from a process.
const (
	// maxStaticTLS bounds an offset from the thread pointer: static TLS
	// is the executable's and the initial libraries' blocks, and the
	// loader's surplus.
	maxStaticTLS = 1 << 30
	// maxModuleID bounds a module id (glibc gives one to each module with
	// TLS, in load order).
	maxModuleID = 1 << 16
	// tcbSize is the size of the thread control block the TLS blocks
	// follow on aarch64 (TLS variant I: glibc's tcbhead_t, two pointers).
	tcbSize = 16
)

// Resolve finds, among the modules a process maps, the module that defines
// the variable (the executable's definition first, then the others in the
// order given: the dynamic loader binds every reference to the first) and
// how a thread reaches it, from the words the dynamic loader wrote for the
// variable's TLS relocations, read from the process's memory:
//   - initial-exec (R_*_TPOFF64/TPREL64): the offset from the thread
//     pointer;
//   - TLSDESC: a descriptor whose resolver returns its argument (glibc's
//     _dl_tlsdesc_return, musl's __tlsdesc_static: static TLS) holds the
//     offset from the thread pointer; any other holds a pointer to the
//     module id and offset (glibc's _dl_tlsdesc_dynamic);
//   - legacy general dynamic (R_*_DTPMOD64): the module id, then the
//     offset in its block.
//
// A variable no relocation reaches is the executable's, accessed
// local-exec: its offset follows from the executable's PT_TLS as the
// dynamic loader lays out static TLS. Every word read is checked: offsets
// within static TLS, module ids within bounds, the offset in the block
// equal to the variable's own.
func Resolve(mods []Loaded, mem Memory) (Access, error) {
	def := -1
	for i := range mods {
		if mods[i].Defines && (def < 0 || mods[i].Main && !mods[def].Main) {
			def = i
		}
	}
	if def < 0 {
		return Access{}, ErrNoVariable
	}
	d := &mods[def]
	// The defining module's relocations first, then the others'; static
	// ones before those through the DTV.
	order := append([]int{def}, others(len(mods), def)...)
	var dynamic *Access
	var errs []error
	for _, i := range order {
		m := &mods[i]
		if m.Machine != d.Machine {
			continue
		}
		for _, r := range m.Relocs {
			if !r.BySymbol && i != def {
				continue
			}
			a, err := resolveReloc(m, d, r, mem)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s in %s at %#x: %w", r.Kind, m.Path, r.VAddr, err))
				continue
			}
			a.Module = d.Path
			if a.Mode == ModeStatic {
				return a, nil
			}
			if dynamic == nil {
				dynamic = &a
			}
		}
	}
	if dynamic != nil {
		return *dynamic, nil
	}
	if len(errs) > 0 {
		return Access{}, errors.Join(errs...)
	}
	if d.Main {
		off, err := executableOffset(d.Module)
		if err != nil {
			return Access{}, err
		}
		return Access{Mode: ModeStatic, Offset: off, Module: d.Path, How: "static TLS of the executable (local-exec)"}, nil
	}
	return Access{}, fmt.Errorf("%s defines %s but no module has a TLS relocation of it", d.Path, Symbol)
}

func others(n, skip int) []int {
	out := make([]int, 0, n)
	for i := range n {
		if i != skip {
			out = append(out, i)
		}
	}
	return out
}

// readWords reads n little-endian 64-bit words at addr.
func readWords(mem Memory, addr uint64, n int) ([]uint64, error) {
	buf := make([]byte, 8*n)
	if err := mem.ReadAt(buf, addr); err != nil {
		return nil, fmt.Errorf("reading %d bytes at %#x: %w", len(buf), addr, err)
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(buf[8*i:])
	}
	return out, nil
}

// resolveReloc reads the words relocation r of module m filled in and
// returns the access they give to the variable defined by module d.
func resolveReloc(m, d *Loaded, r Reloc, mem Memory) (Access, error) {
	// The offset of the variable in its block that the loader computed:
	// the symbol's value plus the addend, or the addend alone for a
	// relocation of no symbol.
	want := r.Addend
	if r.BySymbol {
		want += int64(d.Value)
	}
	if r.Kind == RelocModule && !r.BySymbol {
		want = int64(d.Value) // the module's own id: the offset is in the code
	}
	if want != int64(d.Value) {
		return Access{}, fmt.Errorf("addend %d: not the variable (offset %d in its block)", r.Addend, d.Value)
	}
	switch r.Kind {
	case RelocTPOff:
		w, err := readWords(mem, m.Bias+r.VAddr, 1)
		if err != nil {
			return Access{}, err
		}
		off, err := staticOffset(d.Machine, w[0])
		if err != nil {
			return Access{}, err
		}
		return Access{Mode: ModeStatic, Offset: off, How: "initial-exec GOT entry in " + m.Path}, nil
	case RelocDesc:
		w, err := readWords(mem, m.Bias+r.VAddr, 2)
		if err != nil {
			return Access{}, err
		}
		entry, arg := w[0], w[1]
		if entry == 0 {
			return Access{}, ErrNotReady
		}
		code := make([]byte, 16)
		if err := mem.ReadAt(code, entry); err != nil {
			return Access{}, fmt.Errorf("reading the resolver at %#x: %w", entry, err)
		}
		if returnsArgument(d.Machine, code) {
			off, err := staticOffset(d.Machine, arg)
			if err != nil {
				return Access{}, err
			}
			return Access{Mode: ModeStatic, Offset: off, How: "TLSDESC in " + m.Path + " (static TLS)"}, nil
		}
		// glibc's _dl_tlsdesc_dynamic: arg points at the module id and
		// the offset (struct tlsdesc_dynamic_arg).
		t, err := readWords(mem, arg, 2)
		if err != nil {
			return Access{}, ErrNotReady // a lazy descriptor's argument is no such pointer
		}
		if err := checkDTV(t[0], t[1], want); err != nil {
			return Access{}, err
		}
		return Access{Mode: ModeDTV, ModuleID: t[0], Offset: want, How: "TLSDESC in " + m.Path + " (dynamic TLS)"}, nil
	case RelocModule:
		w, err := readWords(mem, m.Bias+r.VAddr, 2)
		if err != nil {
			return Access{}, err
		}
		if w[0] == 0 {
			return Access{}, ErrNotReady
		}
		off := w[1]
		if !r.BySymbol {
			off = d.Value // the module's own id; the offset is in the code
		}
		if err := checkDTV(w[0], off, want); err != nil {
			return Access{}, err
		}
		return Access{Mode: ModeDTV, ModuleID: w[0], Offset: want, How: "general dynamic GOT entry in " + m.Path}, nil
	}
	return Access{}, fmt.Errorf("relocation kind %v", r.Kind)
}

// checkDTV checks a module id and an offset in its block read from a
// process.
func checkDTV(module, off uint64, want int64) error {
	if module == 0 || module > maxModuleID {
		return fmt.Errorf("module id %d is out of bounds", module)
	}
	if int64(off) != want {
		return fmt.Errorf("offset %d in the block is not the variable's (%d)", int64(off), want)
	}
	return nil
}

// staticOffset checks that w is an offset from the thread pointer into
// static TLS: below it on x86-64 (TLS variant II), past the thread control
// block on aarch64 (variant I).
func staticOffset(machine elf.Machine, w uint64) (int64, error) {
	off := int64(w)
	switch machine {
	case elf.EM_X86_64:
		if off < 0 && off >= -maxStaticTLS {
			return off, nil
		}
	case elf.EM_AARCH64:
		if off >= tcbSize && off < maxStaticTLS {
			return off, nil
		}
	}
	if off == 0 {
		return 0, ErrNotReady
	}
	return 0, fmt.Errorf("%d is no offset into static TLS on %v", off, machine)
}

// The code of a TLS descriptor resolver for static TLS, which returns its
// argument: x86-64 "mov 8(%rax),%rax; ret", aarch64 "ldr x0, [x0, #8];
// ret", each with an optional landing pad before it (endbr64; bti c, or
// the nop glibc puts in its place when built without BTI, as Debian's
// aarch64 glibc 2.36 is).
var (
	x86ReturnArg = []byte{0x48, 0x8b, 0x40, 0x08}
	x86Endbr64   = []byte{0xf3, 0x0f, 0x1e, 0xfa}
	arm64LoadArg = []byte{0x00, 0x04, 0x40, 0xf9} // ldr x0, [x0, #8]
	arm64Ret     = []byte{0xc0, 0x03, 0x5f, 0xd6}
	arm64BTIC    = []byte{0x5f, 0x24, 0x03, 0xd5}
	arm64Nop     = []byte{0x1f, 0x20, 0x03, 0xd5}
)

// returnsArgument says whether code is a TLS descriptor resolver that
// returns the descriptor's argument: the variable is in static TLS.
func returnsArgument(machine elf.Machine, code []byte) bool {
	switch machine {
	case elf.EM_X86_64:
		code = bytes.TrimPrefix(code, x86Endbr64)
		if !bytes.HasPrefix(code, x86ReturnArg) {
			return false
		}
		code = code[len(x86ReturnArg):]
		return bytes.HasPrefix(code, []byte{0xc3}) || bytes.HasPrefix(code, []byte{0xf3, 0xc3})
	case elf.EM_AARCH64:
		if bytes.HasPrefix(code, arm64BTIC) || bytes.HasPrefix(code, arm64Nop) {
			code = code[len(arm64BTIC):]
		}
		return bytes.HasPrefix(code, arm64LoadArg) && bytes.HasPrefix(code[len(arm64LoadArg):], arm64Ret)
	}
	return false
}

// executableOffset returns the offset from the thread pointer of the
// variable defined by the executable d, accessed local-exec: the
// executable's TLS block is the first of static TLS, laid out as glibc's
// _dl_determine_tlsoffset (and the linker, for local-exec) does. x86-64
// (TLS variant II): the block ends at the thread pointer, at the alignment
// of its first byte. aarch64 (variant I): it starts after the 16-byte
// thread control block, aligned.
func executableOffset(d *Module) (int64, error) {
	t := d.TLS
	if t.MemSize == 0 || t.MemSize > maxStaticTLS || d.Value >= t.MemSize {
		return 0, fmt.Errorf("the executable's PT_TLS (%d bytes) does not hold %s at %d", t.MemSize, Symbol, d.Value)
	}
	align := t.Align
	if align == 0 {
		align = 1
	}
	if align&(align-1) != 0 || align > maxStaticTLS {
		return 0, fmt.Errorf("the executable's PT_TLS alignment %d is not a power of two", align)
	}
	firstbyte := -t.VAddr & (align - 1)
	switch d.Machine {
	case elf.EM_X86_64:
		off := roundUp(t.MemSize-firstbyte, align) + firstbyte
		return int64(d.Value) - int64(off), nil
	case elf.EM_AARCH64:
		off := roundUp(tcbSize, align)
		if off-tcbSize < firstbyte {
			off += align
		}
		return int64(off-firstbyte) + int64(d.Value), nil
	}
	return 0, fmt.Errorf("machine %v", d.Machine)
}

func roundUp(v, align uint64) uint64 { return (v + align - 1) &^ (align - 1) }

// LoadBias returns the load bias of a module mapped at start from file
// offset fileOffset: the mapping must map one of its PT_LOAD segments
// (the page holding its first byte) for pages of pageSize bytes.
func LoadBias(m *Module, start, fileOffset, pageSize uint64) (uint64, bool) {
	for _, l := range m.Loads {
		if l.Off&^(pageSize-1) == fileOffset {
			return start - l.VAddr&^(pageSize-1), true
		}
	}
	return 0, false
}
