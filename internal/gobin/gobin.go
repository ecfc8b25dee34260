// Package gobin recognizes Go executables and lists their functions, so the
// receiver can probe Go programs the way Go needs: entry probes after the
// stack check and return probes on RET instructions (see package insn).
//
// # Why
//
// Go binaries differ from C ones in ways that matter to uprobes: their
// functions have a stack-check prologue that re-runs on stack growth, kernel
// uretprobes crash them, and they are often stripped (-ldflags=-s -w) so
// that the ELF symbol table is gone. The Go runtime, however, needs its own
// table of functions (the pclntab, in the .gopclntab section) to unwind
// stacks and report panics, so that table is always there, stripped or not.
// [Functions] reads it with debug/gosym; [Detect] says whether a file is a Go
// binary and which Go built it.
//
// # Supported versions
//
// Functions supports what the standard library's debug/gosym of the Go that
// builds the receiver supports: with Go 1.26 that is the pclntab layouts of
// Go 1.2 through Go 1.26 (the layout last changed in Go 1.20; Go 1.16 and
// 1.18 changed it before). A binary whose pclntab has a layout newer than
// debug/gosym knows (an unknown magic number) is rejected with an error,
// never misread; rebuilding the receiver with the newer Go fixes that. For
// Go 1.18 and later, function addresses in the pclntab are offsets from the
// start of the Go text (runtime.text), which Functions takes from the symbol
// table, or, in stripped binaries, from the runtime's module data (found in
// the .go.module section of Go 1.26 or another writable data section; the
// fields read there have kept their offsets since Go 1.16), or else from
// the start of the .text section. That last guess is right for internally
// linked binaries but not for externally linked (cgo) ones, where C code
// precedes the Go text: should a future Go move those module data fields,
// the functions of its stripped cgo binaries would come out shifted, and
// Functions notices only when they fall outside the executable sections.
package gobin

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
)

// Info describes a Go binary.
type Info struct {
	// GoVersion is the version of Go that built the binary, e.g.
	// "go1.26.8", from its build information. It is empty when the build
	// information is missing or unreadable and only the pclntab shows that
	// the binary is Go.
	GoVersion string
	// Path is the main package's import path, e.g. "goprog" or
	// "command-line-arguments", when the build information has it.
	Path string
	// Pclntab names the layout of the binary's function table: "go1.20"
	// (Go 1.20 and later), "go1.18", "go1.16" or "go1.2"; empty when the
	// binary has no .gopclntab section or its magic number is unknown.
	Pclntab string
}

// Detect says whether the ELF file at path is a Go binary and returns what
// it knows about it. A file is a Go binary when debug/buildinfo reads Go
// build information from it, or when it has a .go.buildinfo or .gopclntab
// section. A file that is not ELF, such as a script, is not a Go binary:
// Detect returns false and no error. Errors are for files that cannot be
// read and for ELF files whose headers are malformed. Detect never panics,
// whatever the file holds.
func Detect(path string) (info Info, isGo bool, err error) {
	fh, err := os.Open(path)
	if err != nil {
		return Info{}, false, fmt.Errorf("open %s: %w", path, err)
	}
	defer fh.Close()
	info, isGo, err = DetectFile(fh)
	if err != nil {
		return Info{}, false, fmt.Errorf("read %s: %w", path, err)
	}
	return info, isGo, nil
}

// DetectFile is Detect on a file already open, read through r only: what
// it says is about exactly the bytes r reads.
func DetectFile(r io.ReaderAt) (info Info, isGo bool, err error) {
	defer func() {
		if rec := recover(); rec != nil {
			info, isGo, err = Info{}, false, fmt.Errorf("malformed file: %v", rec)
		}
	}()
	var magic [4]byte
	if _, err := r.ReadAt(magic[:], 0); err != nil || string(magic[:]) != elf.ELFMAG {
		return Info{}, false, nil // not ELF (or shorter than its magic number)
	}
	f, err := elf.NewFile(r)
	if err != nil {
		return Info{}, false, fmt.Errorf("reading ELF headers: %w", err)
	}
	defer f.Close()

	if bi, err := buildinfo.Read(r); err == nil {
		info.GoVersion = bi.GoVersion
		info.Path = bi.Path
		isGo = true
	}
	if f.Section(".go.buildinfo") != nil {
		isGo = true
	}
	if sec := pclntabSection(f); sec != nil {
		isGo = true
		var magic [4]byte
		if _, err := sec.ReadAt(magic[:], 0); err == nil {
			info.Pclntab = pclntabLayout(binary.LittleEndian.Uint32(magic[:]))
			if info.Pclntab == "" {
				info.Pclntab = pclntabLayout(binary.BigEndian.Uint32(magic[:]))
			}
		}
	}
	if !isGo {
		return Info{}, false, nil
	}
	return info, true, nil
}

// pclntabLayout names the pclntab layout of a magic number.
func pclntabLayout(magic uint32) string {
	switch magic {
	case 0xfffffff1:
		return "go1.20"
	case 0xfffffff0:
		return "go1.18"
	case 0xfffffffa:
		return "go1.16"
	case 0xfffffffb:
		return "go1.2"
	}
	return ""
}

// pclntabSection returns the section holding the pclntab: .gopclntab, or
// .data.rel.ro.gopclntab in some position-independent binaries.
func pclntabSection(f *elf.File) *elf.Section {
	if s := f.Section(".gopclntab"); s != nil && s.Type != elf.SHT_NOBITS {
		return s
	}
	if s := f.Section(".data.rel.ro.gopclntab"); s != nil && s.Type != elf.SHT_NOBITS {
		return s
	}
	return nil
}

// Function is one Go function from a binary's pclntab.
type Function struct {
	// Name is the function's symbol name, e.g. "main.main",
	// "net/http.(*Server).Serve" or "main.main.func1".
	Name string
	// Entry is the virtual address of the function's first instruction.
	Entry uint64
	// End is the virtual address just past the function's last
	// instruction: the int3 padding up to the next function is not part
	// of it, as in the ELF symbol table (go tool nm -size).
	End uint64
}

// maxPclntab bounds the size of the pclntab section Functions reads (the Go
// toolchain's own is about 10 MB).
const maxPclntab = 1 << 30

// Functions lists the functions of a Go binary from its pclntab, sorted by
// address. It works for stripped binaries, which have no symbol table. It
// returns an error when the file has no pclntab, when debug/gosym cannot
// parse it (a layout newer than it knows, or corrupt data), or when the
// functions it lists do not lie inside executable sections. It never panics,
// whatever the file holds.
func Functions(f *elf.File) (fns []Function, err error) {
	defer func() {
		if r := recover(); r != nil {
			fns, err = nil, fmt.Errorf("read pclntab: malformed data: %v", r)
		}
	}()
	sec := pclntabSection(f)
	if sec == nil {
		return nil, errors.New("find pclntab: no .gopclntab section (not a Go binary?)")
	}
	if sec.Size > maxPclntab {
		return nil, fmt.Errorf("read pclntab: section of %d bytes is too large", sec.Size)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("read pclntab: %w", err)
	}
	if len(data) < 16 {
		return nil, fmt.Errorf("read pclntab: section of %d bytes is too short", len(data))
	}
	layout := pclntabLayout(binary.LittleEndian.Uint32(data))
	if layout == "" {
		layout = pclntabLayout(binary.BigEndian.Uint32(data))
	}
	if layout == "" {
		return nil, fmt.Errorf("read pclntab: unknown magic number %#x (a Go newer than this receiver's debug/gosym?)", binary.LittleEndian.Uint32(data))
	}
	if err := checkHeader(data); err != nil {
		return nil, fmt.Errorf("check pclntab header: %w", err)
	}
	textStart := goTextStart(f, sec, data)
	table, err := gosym.NewTable(nil, gosym.NewLineTable(data, textStart))
	if err != nil {
		return nil, fmt.Errorf("parse pclntab: %w", err)
	}
	if len(table.Funcs) == 0 {
		return nil, errors.New("parse pclntab: no functions (corrupt table?)")
	}
	fns = make([]Function, 0, len(table.Funcs))
	for i := range table.Funcs {
		fn := &table.Funcs[i]
		if fn.End <= fn.Entry || fn.Sym == nil || fn.Sym.Name == "" {
			return nil, fmt.Errorf("parse pclntab: function %d has a bad name or range [%#x, %#x)", i, fn.Entry, fn.End)
		}
		fns = append(fns, Function{Name: fn.Sym.Name, Entry: fn.Entry, End: codeEnd(table, fn)})
	}
	sort.Slice(fns, func(i, j int) bool { return fns[i].Entry < fns[j].Entry })
	if err := checkInText(f, fns); err != nil {
		return nil, err
	}
	return fns, nil
}

// checkHeader checks that the function table the pclntab header describes
// fits in the pclntab. debug/gosym does not: given a huge function count it
// allocates memory for that many functions, and the process dies.
func checkHeader(data []byte) error {
	if len(data) < 16 || data[4] != 0 || data[5] != 0 ||
		(data[6] != 1 && data[6] != 2 && data[6] != 4) || (data[7] != 4 && data[7] != 8) {
		return errors.New("bad pc quantum or pointer size")
	}
	var order binary.ByteOrder = binary.LittleEndian
	if pclntabLayout(order.Uint32(data)) == "" {
		order = binary.BigEndian
	}
	ptr := uint64(data[7])
	size := uint64(len(data))
	word := func(i uint64) (uint64, bool) {
		at := 8 + i*ptr
		if at+ptr > size {
			return 0, false
		}
		if ptr == 4 {
			return uint64(order.Uint32(data[at:])), true
		}
		return order.Uint64(data[at:]), true
	}
	var nfunc, functab, field uint64
	switch pclntabLayout(order.Uint32(data)) {
	case "go1.20", "go1.18":
		// nfunc, nfiles, textStart, then offsets of funcnametab, cutab,
		// filetab, pctab and the function table (pclntab).
		for i := uint64(3); i <= 7; i++ {
			if off, ok := word(i); !ok || off > size {
				return fmt.Errorf("table offset %d out of range", i)
			}
		}
		nfunc, _ = word(0)
		functab, _ = word(7)
		field = 4
	case "go1.16":
		for i := uint64(2); i <= 6; i++ {
			if off, ok := word(i); !ok || off > size {
				return fmt.Errorf("table offset %d out of range", i)
			}
		}
		nfunc, _ = word(0)
		functab, _ = word(6)
		field = ptr
	default: // go1.2
		var ok bool
		if nfunc, ok = word(0); !ok {
			return errors.New("too short")
		}
		functab, field = 8+ptr, ptr
	}
	if nfunc == 0 || nfunc > size || functab > size || (2*nfunc+1)*field > size-functab {
		return fmt.Errorf("%d functions do not fit in %d bytes", nfunc, size)
	}
	return nil
}

// codeEnd returns the end of fn's instructions: its pc-to-line table covers
// exactly those, while fn.End, the next function's entry, also covers the
// padding between the two. When fn has no line table, it returns fn.End.
func codeEnd(t *gosym.Table, fn *gosym.Func) uint64 {
	has := func(pc uint64) bool {
		_, line, f := t.PCToLine(pc)
		return f == fn && line > 0
	}
	if !has(fn.Entry) {
		return fn.End
	}
	// The table covers [Entry, end) without gaps: find end by bisection.
	lo, hi := fn.Entry, fn.End // has(lo), end <= hi
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if has(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// goTextStart returns the address of runtime.text, which pclntabs of Go 1.18
// and later count function addresses from: from the symbol table, else from
// the runtime's module data, else the start of .text.
func goTextStart(f *elf.File, pcln *elf.Section, data []byte) uint64 {
	if syms, err := f.Symbols(); err == nil {
		for _, s := range syms {
			if s.Name == "runtime.text" && s.Value != 0 {
				return s.Value
			}
		}
	}
	if text, ok := moduleDataText(f, pcln, data); ok {
		return text
	}
	if s := f.Section(".text"); s != nil {
		return s.Addr
	}
	return 0
}

// moduleDataText finds the runtime's moduledata for a 64-bit little-endian
// pclntab of Go 1.18 or later and returns its text field. moduledata starts
// with a pointer to the pclntab and the funcnametab slice, which points
// into the pclntab at the offset its header gives; text follows at a fixed
// offset (Go 1.18 through 1.26).
func moduleDataText(f *elf.File, pcln *elf.Section, data []byte) (uint64, bool) {
	const (
		ptr        = 8
		textOff    = ptr + 6*3*ptr + ptr + 2*ptr // pcHeader, 6 slices, findfunctab, minpc, maxpc
		minpcOff   = textOff - 2*ptr
		headerSize = 8 + 8*ptr
	)
	magic := binary.LittleEndian.Uint32(data)
	if (magic != 0xfffffff1 && magic != 0xfffffff0) || data[7] != ptr || len(data) < headerSize {
		return 0, false
	}
	funcnameOff := binary.LittleEndian.Uint64(data[8+3*ptr:])
	var want [2 * ptr]byte
	binary.LittleEndian.PutUint64(want[:], pcln.Addr)
	binary.LittleEndian.PutUint64(want[ptr:], pcln.Addr+funcnameOff)
	for _, sec := range f.Sections {
		if sec.Type != elf.SHT_PROGBITS || sec.Flags&elf.SHF_ALLOC == 0 || sec.Flags&elf.SHF_WRITE == 0 || sec.Size > maxPclntab {
			continue
		}
		b, err := sec.Data()
		if err != nil {
			continue
		}
		for i := 0; i+textOff+2*ptr <= len(b); i += ptr {
			if !bytes.Equal(b[i:i+len(want)], want[:]) {
				continue
			}
			text := binary.LittleEndian.Uint64(b[i+textOff:])
			etext := binary.LittleEndian.Uint64(b[i+textOff+ptr:])
			minpc := binary.LittleEndian.Uint64(b[i+minpcOff:])
			if text != 0 && text <= minpc && minpc < etext && inExec(f, text) {
				return text, true
			}
		}
	}
	return 0, false
}

// inExec reports whether addr lies in an executable section.
func inExec(f *elf.File, addr uint64) bool {
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_EXECINSTR != 0 && s.Type != elf.SHT_NOBITS && addr >= s.Addr && addr-s.Addr < s.Size {
			return true
		}
	}
	return false
}

// checkInText checks that every function lies inside one executable
// section, which a wrong text start or a corrupt table would break.
func checkInText(f *elf.File, fns []Function) error {
	for _, fn := range fns {
		ok := false
		for _, s := range f.Sections {
			if s.Flags&elf.SHF_EXECINSTR != 0 && s.Type != elf.SHT_NOBITS &&
				fn.Entry >= s.Addr && fn.End <= s.Addr+s.Size {
				ok = true
				break
			}
		}
		if !ok {
			return fmt.Errorf("check pclntab: function %s at [%#x, %#x) is outside the executable sections", fn.Name, fn.Entry, fn.End)
		}
	}
	return nil
}
