package debuginfo

import (
	"bytes"
	"context"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
)

// DefaultDebugDir is where distributions install separate debug files.
const DefaultDebugDir = "/usr/lib/debug"

// DefaultMaxDebugFileBytes bounds the size of a separate debug file Open
// reads (a .gnu_debuglink candidate's CRC32 is computed over all of it,
// which takes about a second per GiB).
const DefaultMaxDebugFileBytes = 2 << 30

// Options say where Open looks for debuginfo.
type Options struct {
	// DebugDirs are the roots of separate debug files, searched in order:
	// DIR/.build-id/xx/rest.debug by build id, and DIR/<directory of the
	// file>/<debuglink name> by .gnu_debuglink. Nil means
	// []string{DefaultDebugDir}; an empty non-nil slice searches none.
	DebugDirs []string
	// Debuginfod, when not nil, fetches the debug file by build id when no
	// local one is found. NewDebuginfodFromEnv builds one from
	// DEBUGINFOD_URLS.
	Debuginfod *Debuginfod
	// MaxBytes bounds the memory the file's debuginfo may take: its debug
	// sections after decompression, together, and what is decoded from
	// them; 0 means DefaultMaxBytes.
	MaxBytes int64
	// MaxDebugFileBytes bounds the size of a separate debug file; a
	// larger one is refused with a sentence. 0 means
	// DefaultMaxDebugFileBytes.
	MaxDebugFileBytes int64
	// Root is the tree the traced file was found in when it is not the
	// collector's own view: a container's root, opened once. Its separate
	// debug files are then looked for inside it (each DebugDirs root and
	// the .gnu_debuglink candidates taken as paths inside it), and on the
	// host only by build id (DIR/.build-id/… of each DebugDirs root, and
	// debuginfod): a file name the container chose (.gnu_debuglink) is
	// never looked up on the host. Nil is the collector's own view. The
	// caller keeps owning it.
	Root *procfs.Dir
	// SeenAs is the traced file's path inside Root (in the collector's
	// view when Root is nil; "" means the path given to Open or OpenELF):
	// the .gnu_debuglink candidates are next to the file it leads to.
	SeenAs string
}

// maxBytes returns MaxBytes or its default.
func (o Options) maxBytes() int64 {
	if o.MaxBytes <= 0 {
		return DefaultMaxBytes
	}
	return o.MaxBytes
}

// SourceKind says where a file's DWARF came from.
type SourceKind uint8

// The places DWARF comes from, in the order Open tries them.
const (
	// SourceEmbedded is the file itself.
	SourceEmbedded SourceKind = iota + 1
	// SourceBuildID is DIR/.build-id/xx/rest.debug.
	SourceBuildID
	// SourceDebuglink is the file named by .gnu_debuglink, CRC32 checked.
	SourceDebuglink
	// SourceDebuginfod is a debuginfod server (through its cache).
	SourceDebuginfod
)

// String returns "embedded", "build-id", "debuglink" or "debuginfod".
func (k SourceKind) String() string {
	switch k {
	case SourceEmbedded:
		return "embedded"
	case SourceBuildID:
		return "build-id"
	case SourceDebuglink:
		return "debuglink"
	case SourceDebuginfod:
		return "debuginfod"
	}
	return "invalid"
}

// File is one traced ELF file and its DWARF, wherever that came from. It
// owns the open files until Close. Its methods, and those of the Scopes it
// makes, must not run concurrently: debug/dwarf's type cache is not
// synchronized. Open one File per goroutine, or serialize.
type File struct {
	// Path is the traced file.
	Path string
	// DebugPath is the file the DWARF was read from (Path when embedded).
	DebugPath string
	// Source says how DebugPath was found.
	Source SourceKind
	// BuildID is the GNU build id of the traced file in hex, "" if none.
	BuildID string
	// Arch is the file's machine.
	Arch *Arch
	// Type is the ELF type of the traced file: ET_EXEC files run at their
	// link-time virtual addresses, ET_DYN ones (PIE, shared libraries) at a
	// load bias the engine does not know.
	Type elf.Type

	exe, dbg *elf.File
	closers  []io.Closer
	order    binary.ByteOrder
	data     *dwarf.Data
	sections sections
	units    []unit
	budget   budget
	types    *typeReader
	// lineTables holds, by line program offset, the unit whose file list
	// was read for it.
	lineTables map[int64]*compUnit

	once    sync.Once
	idx     *index
	idxErr  error
	cfiOnce sync.Once
	cfi     *cfiTables
	cfiErr  error
}

// sections are the raw (decompressed) debug sections the package decodes
// itself; debug/dwarf keeps its copies private.
type sections struct {
	info, loc, loclists, addr, line, debugFrame, ehFrame []byte
	// ehFrameAddr is the virtual address of .eh_frame (for pc-relative
	// pointers); debugFrame has none.
	ehFrameAddr uint64
}

// Open opens the ELF file at path and finds its DWARF: in the file, by
// build id under each DebugDirs root, by .gnu_debuglink (next to the file,
// in its .debug/ directory, under each root) and at last through
// opts.Debuginfod. A separate file must carry the same build id (and, by
// debuglink, the same CRC32). The error wraps ErrNoDebugInfo when nothing
// was found and lists where Open looked.
//
// path is opened once in the collector's view (or inside opts.Root when
// set), without blocking, and must be a regular file.
func Open(ctx context.Context, path string, opts Options) (*File, error) {
	var tree procfs.Tree = procfs.Root("")
	if opts.Root != nil {
		tree = opts.Root
	} else if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	fh, fi, err := tree.OpenRegular(path)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	exe, err := elf.NewFile(io.NewSectionReader(fh, 0, fi.Size()))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("opening %s: %w", path, err), fh.Close())
	}
	f, err := OpenELF(ctx, path, exe, opts)
	if err != nil {
		return nil, errors.Join(err, fh.Close())
	}
	f.closers = append([]io.Closer{fh}, f.closers...)
	return f, nil
}

// OpenELF is Open for a traced file the caller has already opened: exe is
// read (its build id, .gnu_debuglink, .eh_frame and, when it has them, its
// DWARF sections), so the debuginfo describes exactly the file the caller
// read, and path only names it in messages and locates the debuglink
// candidates next to it. The caller keeps owning exe: Close does not close
// it, and exe must stay open until the File is closed.
func OpenELF(ctx context.Context, path string, exe *elf.File, opts Options) (*File, error) {
	f := &File{Path: path, DebugPath: path, exe: exe, order: exe.ByteOrder, Type: exe.Type}
	if err := f.init(ctx, opts); err != nil {
		return nil, errors.Join(err, f.Close())
	}
	return f, nil
}

// DebugSymbols returns the symbol table (.symtab) of the separate debug
// file of exe, found as Open finds it (build-id directories under
// opts.DebugDirs, then .gnu_debuglink; debuginfod only when opts has one),
// without reading its DWARF: the functions of a file stripped of its own
// symbol table (strip --strip-all, as distributions ship) are there. It
// returns no symbols and no error when exe carries its own debuginfo or
// no debug file of exe is found.
func DebugSymbols(ctx context.Context, path string, exe *elf.File, opts Options) ([]elf.Symbol, error) {
	f := &File{Path: path, DebugPath: path, exe: exe, order: exe.ByteOrder, Type: exe.Type, budget: budget{limit: opts.maxBytes()}}
	id, err := BuildID(exe)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f.BuildID = hex.EncodeToString(id)
	dbg, src, _, err := f.findDebug(ctx, opts)
	defer f.Close()
	if err != nil || dbg == nil || src == SourceEmbedded {
		return nil, nil // a debug file of another build is not used
	}
	syms, err := dbg.Symbols()
	if errors.Is(err, elf.ErrNoSymbols) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the symbols of %s: %w", f.DebugPath, err)
	}
	return syms, nil
}

// Close closes the files File opened.
func (f *File) Close() error {
	var errs []error
	for i := len(f.closers) - 1; i >= 0; i-- {
		errs = append(errs, f.closers[i].Close())
	}
	f.closers = nil
	return errors.Join(errs...)
}

func (f *File) init(ctx context.Context, opts Options) error {
	arch, err := ArchFor(f.exe.Machine)
	if err != nil {
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	f.Arch = arch
	id, err := BuildID(f.exe)
	if err != nil {
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	f.BuildID = hex.EncodeToString(id)
	f.budget = budget{limit: opts.maxBytes()}

	dbg, src, looked, err := f.findDebug(ctx, opts)
	if err != nil {
		return err
	}
	if dbg == nil {
		return fmt.Errorf("%s: %w (looked in: %s)%s", f.Path, ErrNoDebugInfo, strings.Join(looked, ", "), f.noDebugHint())
	}
	f.dbg, f.Source = dbg, src
	if dbg != f.exe {
		f.closers = append(f.closers, dbg)
	}

	// Every section is read once, after their declared sizes together
	// were checked against the budget: debug/elf's DWARF() would
	// decompress every .debug_ section there is, with no bound.
	raw := map[string]*[]byte{}
	var loads []sectionLoad
	add := func(ef *elf.File, name string, dst *[]byte) *elf.Section {
		s := sectionOf(ef, name)
		if s != nil {
			loads = append(loads, sectionLoad{sec: s, size: declaredSize(s), dst: dst})
		}
		return s
	}
	for _, name := range dwarfSections {
		if name != ".debug_frame" {
			raw[name] = new([]byte)
			add(dbg, name, raw[name])
		}
	}
	// .debug_frame may be in either file; .eh_frame is loaded, so only the
	// traced file has its contents (--only-keep-debug leaves it NOBITS).
	if add(dbg, ".debug_frame", &f.sections.debugFrame) == nil && dbg != f.exe {
		add(f.exe, ".debug_frame", &f.sections.debugFrame)
	}
	if eh := add(f.exe, ".eh_frame", &f.sections.ehFrame); eh != nil {
		f.sections.ehFrameAddr = eh.Addr
	}
	// A file debuginfod served that turns out unusable leaves its cache.
	reject := func(err error) error {
		if f.Source == SourceDebuginfod && opts.Debuginfod != nil {
			opts.Debuginfod.Reject(f.BuildID, err)
		}
		return err
	}
	if err := loadSections(loads, &f.budget); err != nil {
		return reject(fmt.Errorf("%s: %w", f.DebugPath, err))
	}
	f.sections.info = *raw[".debug_info"]
	f.sections.loc = *raw[".debug_loc"]
	f.sections.loclists = *raw[".debug_loclists"]
	f.sections.addr = *raw[".debug_addr"]
	f.sections.line = *raw[".debug_line"]
	if f.units, err = parseUnits(f.sections.info, f.order, &f.budget); err != nil {
		return reject(fmt.Errorf("reading DWARF of %s: %w", f.DebugPath, err))
	}
	if f.data, err = newDWARF(raw, f.units, f.order, &f.budget); err != nil {
		return reject(fmt.Errorf("reading DWARF of %s: %w", f.DebugPath, err))
	}
	f.types = newTypeReader(f.data, &f.budget)
	f.types.indexTypeUnits(f.units, raw, f.order)
	return nil
}

// noDebugHint explains a missing DWARF when the file says why.
func (f *File) noDebugHint() string {
	if f.exe.Section(".go.buildinfo") != nil || f.exe.Section(".note.go.buildid") != nil {
		return ": a Go binary linked with -ldflags=-w (or -s -w) carries no DWARF; build it without -w"
	}
	return ": install the package's debug symbols, set DEBUGINFOD_URLS, or build with -g"
}

// HasDWARF reports whether ef carries its own DWARF (.debug_info with
// contents).
func HasDWARF(ef *elf.File) bool { return hasDWARF(ef) }

// DWARF returns the file's DWARF as debug/dwarf reads it, for readers of
// DIEs (not of types, which File reads itself: debug/dwarf's Type
// recurses without bound). Iterate with bounded depth, and never call
// dwarf.Reader.SkipChildren, which recurses as deep as the DIEs nest.
func (f *File) DWARF() *dwarf.Data { return f.data }

// hasDWARF reports whether ef carries .debug_info with contents.
func hasDWARF(ef *elf.File) bool {
	for _, name := range []string{".debug_info", ".zdebug_info"} {
		if s := ef.Section(name); s != nil && s.Type != elf.SHT_NOBITS && s.Size > 0 {
			return true
		}
	}
	return false
}

// findDebug returns the ELF file holding the DWARF, how it was found and,
// when none was, every place it looked. A separate debug file is opened
// by descriptor inside the tree it belongs to (see Options.Root), never
// blocking and only when it is a regular file; its descriptor joins
// f.closers.
func (f *File) findDebug(ctx context.Context, opts Options) (*elf.File, SourceKind, []string, error) {
	if hasDWARF(f.exe) {
		return f.exe, SourceEmbedded, nil, nil
	}
	looked := []string{f.Path}
	dirs := opts.DebugDirs
	if dirs == nil {
		dirs = []string{DefaultDebugDir}
	}
	maxBytes := opts.MaxDebugFileBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxDebugFileBytes
	}
	var rejected []error
	// host is the collector's own view, own the traced file's tree.
	host, err := procfs.Root("").OpenDir()
	if err != nil {
		return nil, 0, nil, fmt.Errorf("%s: opening /: %w", f.Path, err)
	}
	defer host.Close() // the files opened from it stay open
	own := host
	if opts.Root != nil {
		own = opts.Root
	}
	try := func(tree *procfs.Dir, name string, crc uint32, checkCRC bool) *elf.File {
		looked = append(looked, tree.Display(name))
		ef, err := f.openDebug(tree, name, crc, checkCRC, maxBytes)
		if err != nil {
			rejected = append(rejected, err)
			return nil
		}
		if ef != nil {
			f.DebugPath = tree.Display(name)
		}
		return ef
	}

	if f.BuildID != "" && len(f.BuildID) > 2 {
		trees := []*procfs.Dir{own}
		if own != host {
			trees = append(trees, host) // by build id only
		}
		for _, tree := range trees {
			for _, dir := range dirs {
				if ef := try(tree, filepath.Join(dir, ".build-id", f.BuildID[:2], f.BuildID[2:]+".debug"), 0, false); ef != nil {
					return ef, SourceBuildID, nil, nil
				}
			}
		}
	}

	link, crc, ok, err := Debuglink(f.exe)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("%s: %w", f.Path, err)
	}
	if ok {
		seen := opts.SeenAs
		if seen == "" {
			seen = f.Path
		}
		if own == host {
			if abs, err := filepath.Abs(seen); err == nil {
				seen = abs
			}
		}
		// The debug file lies next to the file, not next to a link to it:
		// the links are resolved inside the file's own tree.
		real, err := own.Realpath(seen)
		if err != nil {
			real = filepath.Join("/", seen)
		}
		dir := filepath.Dir(real)
		cands := []string{filepath.Join(dir, link), filepath.Join(dir, ".debug", link)}
		for _, d := range dirs {
			cands = append(cands, filepath.Join(d, dir, link))
		}
		for _, p := range cands {
			if p == real {
				continue // the debuglink of a file never names the file itself
			}
			if ef := try(own, p, crc, true); ef != nil {
				return ef, SourceDebuglink, nil, nil
			}
		}
	}

	if opts.Debuginfod != nil && f.BuildID != "" {
		looked = append(looked, "debuginfod "+strings.Join(opts.Debuginfod.URLs, " "))
		p, err := opts.Debuginfod.Fetch(ctx, f.BuildID)
		if err != nil {
			rejected = append(rejected, err)
		} else {
			looked = looked[:len(looked)-1] // try names the cached file
			failed := len(rejected)
			if ef := try(host, p, 0, false); ef != nil {
				return ef, SourceDebuginfod, nil, nil
			}
			if len(rejected) > failed {
				// The cached file is unusable: it leaves the cache.
				opts.Debuginfod.Reject(f.BuildID, rejected[len(rejected)-1])
			}
		}
	}
	if len(rejected) > 0 {
		return nil, 0, nil, fmt.Errorf("%s: %w (looked in: %s): %w", f.Path, ErrNoDebugInfo, strings.Join(looked, ", "), errors.Join(rejected...))
	}
	return nil, 0, looked, nil
}

// openDebug opens a candidate debug file by descriptor inside tree. It
// returns nil, nil when there is no such file, and an error that says why
// when there is one that is not used: not a regular file (a FIFO, a
// device: never waited for nor read), over maxBytes, or not belonging to
// the traced file (build id, CRC32, machine) or without DWARF. The CRC32
// is computed only of a regular file of tree, at most maxBytes of it.
func (f *File) openDebug(tree *procfs.Dir, name string, crc uint32, checkCRC bool, maxBytes int64) (*elf.File, error) {
	fh, fi, err := tree.OpenRegular(name)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("debug file candidate ignored: %w", err)
	}
	display := tree.Display(name)
	if fi.Size() > maxBytes {
		return nil, errors.Join(fmt.Errorf("debug file %s: %d bytes, over the %d-byte limit", display, fi.Size(), maxBytes), fh.Close())
	}
	contents := io.NewSectionReader(fh, 0, fi.Size())
	if checkCRC {
		h := crc32.NewIEEE()
		if _, err := io.Copy(h, io.NewSectionReader(fh, 0, fi.Size())); err != nil {
			return nil, errors.Join(fmt.Errorf("reading debuglink %s: %w", display, err), fh.Close())
		}
		if got := h.Sum32(); got != crc {
			return nil, errors.Join(fmt.Errorf("debuglink %s: crc32 %#08x, want %#08x: %w", display, got, crc, ErrCRCMismatch), fh.Close())
		}
	}
	ef, err := elf.NewFile(contents)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("opening debug file %s: %w", display, err), fh.Close())
	}
	if err := CheckELF(ef, f.budget.limit); err != nil {
		return nil, errors.Join(fmt.Errorf("debug file %s: %w", display, err), fh.Close())
	}
	id, err := BuildID(ef)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("debug file %s: %w", display, err), fh.Close())
	}
	if got := hex.EncodeToString(id); f.BuildID != "" && got != f.BuildID {
		return nil, errors.Join(fmt.Errorf("debug file %s: build id %q, want %q: %w", display, got, f.BuildID, ErrBuildIDMismatch), fh.Close())
	}
	if ef.Machine != f.exe.Machine {
		return nil, errors.Join(fmt.Errorf("debug file %s: machine %s, want %s", display, ef.Machine, f.exe.Machine), fh.Close())
	}
	if !hasDWARF(ef) {
		return nil, errors.Join(fmt.Errorf("debug file %s: %w", display, ErrNoDebugInfo), fh.Close())
	}
	f.closers = append(f.closers, fh)
	return ef, nil
}

// BuildID returns the GNU build id note (NT_GNU_BUILD_ID) of an ELF file,
// from its SHT_NOTE sections or, without section headers, its PT_NOTE
// segments; nil when it has none.
func BuildID(ef *elf.File) ([]byte, error) {
	var datas [][]byte
	for _, s := range ef.Sections {
		// A build id note is never compressed; a compressed note section
		// is not decompressed to look for one.
		if s.Type == elf.SHT_NOTE && !compressed(s) && s.Size < 1<<20 {
			b, err := s.Data()
			if err != nil {
				return nil, fmt.Errorf("reading %s: %w", s.Name, err)
			}
			datas = append(datas, b)
		}
	}
	if len(datas) == 0 {
		for _, p := range ef.Progs {
			if p.Type == elf.PT_NOTE && p.Filesz < 1<<20 {
				b := make([]byte, p.Filesz)
				if _, err := p.ReadAt(b, 0); err != nil {
					return nil, fmt.Errorf("reading note segment: %w", err)
				}
				datas = append(datas, b)
			}
		}
	}
	for _, b := range datas {
		if id := findNote(b, ef.ByteOrder, "GNU", 3); id != nil {
			return id, nil
		}
	}
	return nil, nil
}

// findNote returns the descriptor of the first note of the given name and
// type in a note section's contents, or nil.
func findNote(b []byte, order binary.ByteOrder, name string, typ uint32) []byte {
	align := func(n uint64) uint64 { return (n + 3) &^ 3 }
	for len(b) >= 12 {
		namesz := uint64(order.Uint32(b[0:]))
		descsz := uint64(order.Uint32(b[4:]))
		t := order.Uint32(b[8:])
		b = b[12:]
		if align(namesz) > uint64(len(b)) {
			return nil
		}
		n := b[:namesz]
		b = b[align(namesz):]
		if align(descsz) > uint64(len(b)) && descsz > uint64(len(b)) {
			return nil
		}
		desc := b[:descsz]
		if align(descsz) <= uint64(len(b)) {
			b = b[align(descsz):]
		} else {
			b = nil
		}
		if t == typ && string(bytes.TrimRight(n, "\x00")) == name {
			return desc
		}
	}
	return nil
}

// Debuglink returns the file name and CRC32 of an ELF file's
// .gnu_debuglink section; ok is false when it has none.
func Debuglink(ef *elf.File) (name string, crc uint32, ok bool, err error) {
	s := ef.Section(".gnu_debuglink")
	if s == nil || s.Type == elf.SHT_NOBITS {
		return "", 0, false, nil
	}
	b, err := s.Data()
	if err != nil {
		return "", 0, false, fmt.Errorf("reading .gnu_debuglink: %w", err)
	}
	name, crc, err = parseDebuglink(b, ef.ByteOrder)
	if err != nil {
		return "", 0, false, err
	}
	return name, crc, true, nil
}

// parseDebuglink decodes .gnu_debuglink: a NUL-terminated file name padded
// to 4 bytes, then the CRC32 of the debug file.
func parseDebuglink(b []byte, order binary.ByteOrder) (string, uint32, error) {
	i := bytes.IndexByte(b, 0)
	if i <= 0 {
		return "", 0, fmt.Errorf("reading .gnu_debuglink: no file name: %w", ErrMalformed)
	}
	name := string(b[:i])
	if strings.ContainsRune(name, '/') || name == "." || name == ".." {
		return "", 0, fmt.Errorf("reading .gnu_debuglink: file name %q is not a base name: %w", name, ErrMalformed)
	}
	off := (i + 1 + 3) &^ 3
	if off+4 > len(b) {
		return "", 0, fmt.Errorf("reading .gnu_debuglink: no crc32: %w", ErrMalformed)
	}
	return name, order.Uint32(b[off:]), nil
}
