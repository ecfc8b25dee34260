package planner

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"sort"
	"strings"

	"github.com/ianlancetaylor/demangle"
	"github.com/otel-uprobe/uprobereceiver/internal/buildid"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/debuginfo"
	"github.com/otel-uprobe/uprobereceiver/internal/elfaddr"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/gobin"
	"github.com/otel-uprobe/uprobereceiver/internal/insn"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
	"github.com/otel-uprobe/uprobereceiver/internal/usdt"
)

// function is one function symbol of a traced file.
type function struct {
	Name    string
	Address uint64 // virtual address
	Size    uint64
}

// file is an opened traced ELF file and what was read from it. Every read
// goes through raw, so that the plan describes exactly the file identified
// by id.
type file struct {
	path      string      // for messages only
	seenAs    string      // its path inside root
	root      *procfs.Dir // the tree it was found in (a container's root), nil for the collector's view
	opts      Options
	raw       *os.File
	id        procfs.FileVersion
	arch      regs.Arch // from the file's machine
	isGo      bool
	goVersion string
	goPclntab string // the layout of its function table (gobin.Info.Pclntab)
	goIDOff   uint16
	buildID   string // GNU build id, hex
	goBuildID string
	decoded   map[uint64][]insn.Inst
	stacks    map[uint64]insn.StackUse // what functions keep below %rsp, by entry, built on use
	elf       *elf.File
	functions map[string][]function
	byAddress []function            // functions with a size, sorted by address, built on first use
	byStart   map[uint64][]function // functions by entry address, built on first use
	fdes      []elfaddr.Range       // .eh_frame function ranges, read on first use
	fdesRead  bool
	probes    map[string]usdt.Probe // by "provider:name"
	symbols   map[string]uint64     // every defined symbol's virtual address, read on first use

	// What the file's symbols say about exception unwinding, read with
	// its functions (see exceptions).
	unwind unwindSymbols
	// Whether exceptions may unwind through the file's code, and why,
	// decided on first use.
	unwindWhy  string
	unwindDone bool
	// unwindCallbacksOnly says the file takes part only through the
	// personality routines of its call-frame information (see
	// exceptions), and cg is its call graph, built on first use.
	unwindCallbacksOnly bool
	cg                  *callGraph

	// The DWARF of the file, opened on first use (only for $names, line:
	// probes and function patterns) and closed with the file.
	dbg     *debuginfo.File
	dbgErr  error
	dbgDone bool
}

// readError explains an error opening or reading a traced file.
func readError(err error) error {
	if errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("%w: reading it needs read permission on the file and search permission on its directories (run as its owner or root, or with CAP_DAC_READ_SEARCH)", err)
	}
	return err
}

// beforePlanning is called with the path of every file openFile opens; a
// test makes it panic, as a parser's bug would.
var beforePlanning = func(path string) {}

// openFile reads the ELF file of candidate c, from its open file. It takes
// c: the file owns c's file and root from then on, and closes them on
// error.
func openFile(c Candidate, opts Options) (_ *file, err error) {
	beforePlanning(c.Path)
	path, raw := c.Path, c.File
	if raw == nil {
		c.Close()
		return nil, fmt.Errorf("target %s: the file is not open", path)
	}
	id, err := procfs.VersionOf(raw)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("target %s: %w", path, err)
	}
	f, err := elf.NewFile(io.NewSectionReader(raw, 0, id.Size))
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("target %s: not an ELF file (%v)", path, err)
	}
	fl := &file{path: path, seenAs: c.SeenAs, root: c.Root, opts: opts, raw: raw, id: id, elf: f, decoded: map[uint64][]insn.Inst{}, stacks: map[uint64]insn.StackUse{}}
	defer func() {
		if err != nil {
			fl.close()
		}
	}()
	// Before anything reads a section: debug/elf decompresses whatever
	// size a compressed section's header claims.
	if err := debuginfo.CheckELF(f, opts.MaxDebuginfoBytes); err != nil {
		return nil, fmt.Errorf("target %s: %w", path, err)
	}
	arch, archErr := regs.ArchOf(f.Machine)
	if f.Class != elf.ELFCLASS64 || f.Data != elf.ELFDATA2LSB || archErr != nil {
		return nil, fmt.Errorf("target %s: %s %s %s file; only x86-64 and little-endian arm64 files (ELFCLASS64, ELFDATA2LSB, EM_X86_64 or EM_AARCH64) can be traced", path, f.Class, f.Data, f.Machine)
	}
	if opts.Arch != regs.ArchUnknown && arch != opts.Arch {
		return nil, fmt.Errorf("target %s: an %s file (%s); this collector runs on %s and attaches uprobes only to %s files: run the %s build of the collector for it",
			path, arch, f.Machine, opts.Arch, opts.Arch, arch)
	}
	fl.arch = arch
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return nil, fmt.Errorf("target %s: %s is neither an executable nor a shared library", path, f.Type)
	}
	if err := fl.readFunctions(); err != nil {
		return nil, err
	}
	ids, err := buildid.FromELF(f)
	if err != nil {
		return nil, fmt.Errorf("target %s: reading build ids: %w", path, err)
	}
	fl.buildID, fl.goBuildID = ids.GNU, ids.Go
	info, isGo, err := gobin.DetectFile(raw)
	if err != nil {
		return nil, fmt.Errorf("target %s: %w", path, err)
	}
	if isGo {
		fl.isGo, fl.goVersion, fl.goPclntab = true, info.GoVersion, info.Pclntab
		var d *dwarf.Data
		if debuginfo.HasDWARF(f) {
			// Its own DWARF, read within the file's budget and kept for
			// names; one that cannot be read leaves the release table.
			if dbg, err := fl.debug(); err == nil {
				d = dbg.DWARF()
			}
		}
		fl.goIDOff, _ = gobin.GoIDOffset(d, info.GoVersion)
		fns, err := gobin.Functions(f)
		if err != nil {
			return nil, fmt.Errorf("target %s: reading the Go function table: %w", path, err)
		}
		for _, fn := range fns {
			if _, ok := fl.functions[fn.Name]; !ok { // stripped: the pclntab has them all
				fl.functions[fn.Name] = []function{{Name: fn.Name, Address: fn.Entry, Size: fn.End - fn.Entry}}
			}
		}
	}
	probes, err := usdt.ProbesWithin(f, opts.maxSitesPerFile())
	if err != nil {
		return nil, fmt.Errorf("target %s: reading USDT notes: %w", path, err)
	}
	fl.probes = make(map[string]usdt.Probe, len(probes))
	for _, p := range probes {
		fl.probes[p.Provider+":"+p.Name] = p
	}
	return fl, nil
}

func (fl *file) close() {
	if fl.dbg != nil {
		fl.dbg.Close()
	}
	fl.elf.Close()
	if fl.raw != nil {
		fl.raw.Close()
	}
	if fl.root != nil {
		fl.root.Close()
		fl.root = nil
	}
}

// release takes the open file out of fl, for the plan to hold: close then
// leaves it open.
func (fl *file) release() *os.File {
	raw := fl.raw
	fl.raw = nil
	return raw
}

// debugOptions say where the file's debug files are looked for: inside
// the tree it was found in, and on the host by build id only.
func (fl *file) debugOptions(withDebuginfod bool) debuginfo.Options {
	o := debuginfo.Options{DebugDirs: fl.opts.DebugDirs, Root: fl.root, SeenAs: fl.seenAs, MaxBytes: fl.opts.MaxDebuginfoBytes}
	if withDebuginfod {
		o.Debuginfod = fl.opts.Debuginfod
	}
	return o
}

// debug returns the file's debuginfo, opened on the first call: from the
// ELF file already read (so that it describes exactly that file), or a
// separate file carrying its build id.
func (fl *file) debug() (*debuginfo.File, error) {
	if !fl.dbgDone {
		fl.dbgDone = true
		fl.dbg, fl.dbgErr = debuginfo.OpenELF(fl.opts.context(), fl.path, fl.elf, fl.debugOptions(true))
		if fl.dbgErr != nil {
			fl.dbgErr = fmt.Errorf("reading debuginfo: %w", fl.dbgErr)
		}
	}
	return fl.dbg, fl.dbgErr
}

// debugSource describes where the debuginfo came from, "" if it was not
// opened.
func (fl *file) debugSource() string {
	if fl.dbg == nil {
		return ""
	}
	if fl.dbg.Source == debuginfo.SourceEmbedded {
		return fl.dbg.Source.String()
	}
	return fl.dbg.Source.String() + " " + fl.dbg.DebugPath
}

// readFunctions reads the functions of the file's symbol tables: .symtab
// and .dynsym, and when the file has no .symtab (strip --strip-all), the
// .symtab of its separate debug file found on this machine (build-id
// directories, .gnu_debuglink; not debuginfod, which only names use).
func (fl *file) readFunctions() error {
	fl.functions = map[string][]function{}
	debugSymbols := func() ([]elf.Symbol, error) {
		if fl.elf.SectionByType(elf.SHT_SYMTAB) != nil {
			return nil, nil // its own .symtab, read above
		}
		syms, err := debuginfo.DebugSymbols(fl.opts.context(), fl.path, fl.elf, fl.debugOptions(false))
		if err != nil {
			return nil, nil // names say what is wrong with the debug file, if they are asked for
		}
		return syms, nil
	}
	for i, read := range []func() ([]elf.Symbol, error){fl.elf.Symbols, fl.elf.DynamicSymbols, debugSymbols} {
		syms, err := read()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return fmt.Errorf("target %s: reading symbols: %w", fl.path, err)
		}
		fl.unwind.fullSymbols = fl.unwind.fullSymbols || i != 1 && len(syms) > 0
		for _, s := range syms {
			fl.unwind.note(s)
			if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Section == elf.SHN_UNDEF || s.Value == 0 {
				continue
			}
			fns := fl.functions[s.Name]
			dup := false
			for _, f := range fns {
				dup = dup || f.Address == s.Value
			}
			if !dup {
				fl.functions[s.Name] = append(fns, function{Name: s.Name, Address: s.Value, Size: s.Size})
			}
		}
	}
	return nil
}

// symbolAddress returns the virtual address of a data or function symbol,
// as USDT arguments like "counter(%rip)" name them.
func (fl *file) symbolAddress(name string) (uint64, error) {
	if fl.symbols == nil {
		fl.symbols = map[string]uint64{}
		for _, read := range []func() ([]elf.Symbol, error){fl.elf.Symbols, fl.elf.DynamicSymbols} {
			syms, _ := read()
			for _, s := range syms {
				if s.Section != elf.SHN_UNDEF && s.Value != 0 {
					if _, seen := fl.symbols[s.Name]; !seen {
						fl.symbols[s.Name] = s.Value
					}
				}
			}
		}
	}
	addr, ok := fl.symbols[name]
	if !ok {
		return 0, fmt.Errorf("symbol %q is not in the symbol table", name)
	}
	return addr, nil
}

// executable says whether processes run this file (as opposed to loading
// it as a library): an ET_EXEC file; a position-independent executable,
// which the linker marks DF_1_PIE (binutils 2.26, 2016); or, for PIEs
// linked before that, a file with a program interpreter and no DT_SONAME.
// A library that can also be run, as glibc's libc.so.6 can (it has a
// PT_INTERP to print its version), names itself with a DT_SONAME and is a
// library: its processes run another program.
func (fl *file) executable() bool {
	if fl.elf.Type == elf.ET_EXEC {
		return true
	}
	if flags, err := fl.elf.DynValue(elf.DT_FLAGS_1); err == nil && len(flags) > 0 && flags[0]&uint64(elf.DF_1_PIE) != 0 {
		return true
	}
	interp := false
	for _, p := range fl.elf.Progs {
		interp = interp || p.Type == elf.PT_INTERP
	}
	if !interp {
		return false
	}
	soname, err := fl.elf.DynString(elf.DT_SONAME)
	return err != nil || len(soname) == 0
}

// location is one resolved attach point of a probe.
type location struct {
	Address       uint64 // virtual address of the probed instruction
	FileOffset    uint64
	SemaphoreFile uint64 // file offset of the USDT semaphore, 0 if none
	USDT          *usdt.Location
	// Class says how the kernel runs a uprobe at the location.
	Class insn.SiteClass
	// Function and FunctionOffset name the location inside a function.
	Function       string
	FunctionOffset uint64
	// AtEntry says the location stands for the function's first
	// instruction: the stack holds the return address and stack arguments.
	AtEntry bool
	// Return makes it a uretprobe.
	Return bool
	// LeafBytes is, at the entry of a leaf function (x86-64; see
	// plan.Site.LeafBytes), the bytes from the location to the
	// function's end; 0 otherwise.
	LeafBytes uint32
	file      *file
}

// fetchSpec is one value to fetch at one end of a span, before compiling.
type fetchSpec struct {
	config.Attribute
	Role plan.Role
}

// spanFetches lists what a span fetches at entry and at exit, attributes in
// key order first, then the hidden values of its carrier and status.
func spanFetches(s config.Span) (entry, exit []fetchSpec, err error) {
	entryAttrs, err1 := config.SortedAttributes(s.Attributes)
	exitAttrs, err2 := config.SortedAttributes(s.ExitAttributes)
	if err := errors.Join(err1, err2); err != nil {
		return nil, nil, err
	}
	for _, a := range entryAttrs {
		entry = append(entry, fetchSpec{a, plan.RoleAttribute})
	}
	for _, a := range exitAttrs {
		exit = append(exit, fetchSpec{a, plan.RoleAttribute})
	}
	hidden := func(key, text string) (config.Attribute, error) {
		e, err := fetch.Parse(text)
		return config.Attribute{Key: key, Expr: e}, err
	}
	if s.TraceID != "" {
		tid, err1 := hidden("trace_id", s.TraceID)
		pid, err2 := hidden("parent_span_id", s.ParentSpanID)
		if err := errors.Join(err1, err2); err != nil {
			return nil, nil, err
		}
		entry = append(entry, fetchSpec{tid, plan.RoleTraceID}, fetchSpec{pid, plan.RoleParentSpanID})
	}
	if s.StatusError != "" {
		c, err := config.ParseComparison(s.StatusError)
		if err != nil {
			return nil, nil, err
		}
		exit = append(exit, fetchSpec{config.Attribute{Key: "status_error", Expr: c.Expr}, plan.RoleStatus})
	}
	return entry, exit, nil
}

// spanProbes returns the entry and exit references of a span in this file,
// and why returns: auto chose to close it at RET instructions ("" when it
// did not): a function span with returns "auto" closes at the RET
// instructions of a C function that calls itself, since the kernel reports
// at most 64 nested return probes per thread, or that an exception may
// unwind through (unwoundThrough), since one unwinding through a kernel
// return probe aborts the program; at its kernel return probe otherwise.
// fns are the functions the span covers, nil for every function of its
// name.
func (fl *file) spanProbes(s config.Span, fns []function) (entry, exit string, why ReturnsChoice) {
	entry, exit = s.Probes()
	if s.Function == "" || fl.isGo || (s.Returns != "" && s.Returns != config.ReturnsAuto) {
		return entry, exit, why
	}
	if fns == nil {
		fns = fl.functions[s.Function]
	}
	for _, fn := range fns {
		insts, err := fl.decode(fn)
		if err != nil || len(insn.Returns(insts)) == 0 {
			continue
		}
		if insn.CallsSelf(insts) {
			return entry, "ret:" + s.Function, ReturnsChoice{Reason: "calls itself",
				Why: fn.Name + " calls itself, and the kernel reports at most 64 nested kernel return probes per thread"}
		}
		if w, ok := fl.unwoundThrough(fn, insts); ok {
			return entry, "ret:" + s.Function, ReturnsChoice{Reason: "exceptions may unwind through it",
				Why: "an exception may unwind through " + fn.Name + ", which a kernel return probe would make abort the program: " + w}
		}
	}
	return entry, exit, why
}

// ReturnsChoice says why returns: auto probes a function's returns on its
// RET instructions (single-stepped) rather than with a kernel return probe.
// Its fields are empty when it does not.
type ReturnsChoice struct {
	// Reason is a few words for a table: "calls itself", "exceptions may
	// unwind through it".
	Reason string
	// Why is the whole reason, for a log.
	Why string
}

// spanDef builds the plan's span definition of a configured span.
func spanDef(ti int, s config.Span, entryRef, exitRef string, entry, exit int) (plan.SpanDef, error) {
	kind, err := config.ParseSpanKind(s.Kind)
	if err != nil {
		return plan.SpanDef{}, err
	}
	def := plan.SpanDef{
		Target: ti, Name: s.SpanName(""), Entry: entry, Exit: exit,
		MinDurationNs: uint64(s.MinDuration.Nanoseconds()), SampleRatio: s.Ratio(), Kind: kind,
	}
	if ep, err := config.ParseProbe(entryRef); err == nil && ep.Kind == config.KindUprobe && ep.Offset == 0 {
		if xp, err := config.ParseProbe(exitRef); err == nil && xp.Returns() && xp.Symbol == ep.Symbol {
			def.Function = true
		}
	}
	switch {
	case s.TraceContext != "":
		def.Carrier, def.CarrierKey = plan.CarrierText, s.TraceContext
	case s.TraceID != "":
		def.Carrier = plan.CarrierBinary
	}
	if s.StatusError != "" {
		c, err := config.ParseComparison(s.StatusError)
		if err != nil {
			return plan.SpanDef{}, err
		}
		def.Status = &c
	}
	return def, nil
}

// claimedBy returns the span that already probes one of the locations of
// entry or exit (locs: each probe's).
func claimedBy(claimed map[uint64]int, locs map[*probeDef][]location, entry, exit *probeDef) (int, bool) {
	for _, pd := range []*probeDef{entry, exit} {
		for _, l := range locs[pd] {
			if id, ok := claimed[l.Address]; ok {
				return id, true
			}
		}
	}
	return 0, false
}

// addresses lists the entry addresses of fns, for keys.
func addresses(fns []function) string {
	parts := make([]string, len(fns))
	for i, fn := range fns {
		parts[i] = fmt.Sprintf("%#x", fn.Address)
	}
	return strings.Join(parts, ",")
}

// locate finds every location of a probe in the file and checks each is a
// safe, and as cheap as possible, place for a uprobe. A function probe is
// placed in every function of its symbol's name, or only in fns when fns
// is not nil.
func (fl *file) locate(p config.ProbeRef, only []function) ([]location, error) {
	locs, err := fl.locateAll(p, only)
	if max := fl.opts.maxSitesPerProbe(); err == nil && len(locs) > max {
		return nil, fmt.Errorf("target %s: %s: %d locations in this file, over max_sites_per_probe (%d): %w", fl.path, p, len(locs), max, ErrTooManySites)
	}
	return locs, err
}

// ErrTooManySites says a probe, or a file, has more locations than
// max_sites_per_probe or max_sites_per_file allow.
var ErrTooManySites = errors.New("too many probe sites")

func (fl *file) locateAll(p config.ProbeRef, only []function) ([]location, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("target %s: %s: "+format, append([]any{fl.path, p}, args...)...)
	}
	switch p.Kind {
	case config.KindUSDT:
		up, ok := fl.probes[p.Provider+":"+p.Name]
		if !ok {
			return nil, fl.notFound(p)
		}
		if max := fl.opts.maxSitesPerProbe(); len(up.Locations) > max {
			return nil, fail("%d sites in this file, over max_sites_per_probe (%d): %w", len(up.Locations), max, ErrTooManySites)
		}
		locs := make([]location, len(up.Locations))
		for i := range up.Locations {
			l := &up.Locations[i]
			loc, err := fl.usdtSite(l)
			if err != nil {
				return nil, fail("site at %#x: %w", l.Address, err)
			}
			locs[i] = loc
		}
		return locs, nil
	case config.KindUprobe, config.KindUretprobe, config.KindRet:
		var fns []function
		offset := p.Offset
		if p.Symbol == "" {
			fn, ok := fl.containing(p.Address)
			if !ok {
				return nil, fail("virtual address %#x is in no function of the file; a uprobe must be inside a known function", p.Address)
			}
			fns, offset = []function{fn}, p.Address-fn.Address
		} else if only != nil {
			fns = only
		} else if fns = fl.functions[p.Symbol]; len(fns) == 0 {
			return nil, fl.notFound(p)
		}
		var locs []location
		for _, fn := range fns {
			l, err := fl.functionSites(p, fn, offset)
			if err != nil {
				return nil, fail("%w", err)
			}
			locs = append(locs, l...)
		}
		sort.Slice(locs, func(i, j int) bool { return locs[i].Address < locs[j].Address })
		return locs, nil
	case config.KindLine:
		return fl.lineSites(p)
	}
	return nil, fail("unknown probe kind")
}

// functionSites places the uprobes of p in function fn: at a checked
// instruction boundary offset bytes in, at the cheapest entry instruction,
// or, for the return of a Go function, on every RET.
func (fl *file) functionSites(p config.ProbeRef, fn function, offset uint64) ([]location, error) {
	if fn.Size != 0 && offset >= fn.Size {
		return nil, fmt.Errorf("offset %#x is beyond the end of %s (%d bytes)", offset, fn.Name, fn.Size)
	}
	insts, err := fl.decode(fn)
	if err != nil {
		return nil, err
	}
	site := func(off uint64, ret bool) (location, error) {
		if ret && fl.opts.KernelReturnsRefused != "" {
			return location{}, errors.New(fl.opts.KernelReturnsRefused)
		}
		if ret && !fl.opts.AcceptUretprobeUnwind && !fl.isGo {
			if why, ok := fl.unwoundThrough(fn, insts); ok {
				return location{}, fl.unwindRefusal(fn, why, insts)
			}
		}
		i := insts[instAt(insts, off)]
		class := fl.kernelClass(i)
		if !class.Probeable() {
			return location{}, fmt.Errorf("the instruction at %s+%#x (%s) is one the kernel %s; choose another offset",
				fn.Name, off, fl.textAt(fn, i.Offset), map[bool]string{true: "refuses to probe", false: "would run wrongly under a uprobe"}[class == insn.Unsupported])
		}
		if class == insn.Optimizable {
			if u := fl.stackUse(fn); !u.SafeAt(fn.Address + off) {
				return location{}, fl.nop5Refusal(fn, insts, off, u)
			}
		}
		addr := fn.Address + off
		foff, err := elfaddr.FileOffset(fl.elf.Progs, addr)
		if err != nil {
			return location{}, err
		}
		return location{
			Address: addr, FileOffset: foff, Class: class, Function: fn.Name, FunctionOffset: off,
			AtEntry: offset == 0 && (p.Kind == config.KindUprobe || p.Kind == config.KindLine), Return: ret, file: fl,
		}, nil
	}
	switch {
	case offset != 0 || p.Symbol == "":
		// An explicit place: checked, never moved.
		if err := fl.boundary(fn, insts, offset); err != nil {
			return nil, fmt.Errorf("%s: %w", fn.Name, err)
		}
		l, err := site(offset, p.Kind == config.KindUretprobe)
		return []location{l}, err
	case p.Kind == config.KindRet, fl.isGo && p.Kind == config.KindUretprobe:
		// Every RET: asked for, or for Go, where kernel return probes
		// crash programs (the runtime moves stacks).
		rets := insn.Returns(insts)
		if len(rets) == 0 {
			return nil, fmt.Errorf("function %s has no RET instruction (it leaves by a tail call): its return cannot be probed there", fn.Name)
		}
		locs := make([]location, 0, len(rets))
		for _, r := range rets {
			l, err := site(r, false)
			if err != nil {
				return nil, err
			}
			locs = append(locs, l)
		}
		return locs, nil
	case fl.isGo:
		off, _ := insn.GoEntry(insts)
		l, err := site(off, false)
		return []location{l}, err
	default:
		off, _ := insn.CheapEntry(insts)
		if in := insts[instAt(insts, off)]; fl.kernelClass(in) == insn.Optimizable && !fl.stackUse(fn).SafeAt(fn.Address+off) {
			off = 0 // a 5-byte nop after endbr64 the kernel would rewrite: the entry itself
		}
		l, err := site(off, p.Kind == config.KindUretprobe)
		if err == nil && !l.Return && fl.arch == regs.ArchAMD64 && insn.Leaf(insts) && fn.Size > off && fn.Size-off <= math.MaxUint32 {
			l.LeafBytes = uint32(fn.Size - off)
		}
		return []location{l}, err
	}
}

// maxColdParts bounds the parts of a function elsewhere (name.cold) that
// the stack analysis reads with it.
const maxColdParts = 4

// stackUse returns what function fn may keep below its stack pointer (x86-64;
// see insn.RedZone), analysed on first use with its cold parts (gcc's
// name.cold).
func (fl *file) stackUse(fn function) insn.StackUse {
	if u, ok := fl.stacks[fn.Address]; ok {
		return u
	}
	u := fl.analyseStack(fn)
	fl.stacks[fn.Address] = u
	return u
}

func (fl *file) analyseStack(fn function) insn.StackUse {
	piece := func(f function) (insn.Piece, error) {
		insts, err := fl.decodeText(f) // its findings name instructions
		if err != nil {
			return insn.Piece{}, err
		}
		code, err := fl.read(f.Address, f.Size)
		if err != nil {
			return insn.Piece{}, err
		}
		return insn.Piece{Address: f.Address, Code: code, Insts: insts}, nil
	}
	main, err := piece(fn)
	if err != nil {
		return insn.Unproven(fn.Address, fmt.Sprintf("could not be read (%v)", err))
	}
	pieces := []insn.Piece{main}
	seen := map[uint64]bool{fn.Address: true}
	for _, in := range main.Insts {
		t, ok := in.Target()
		if !ok || t >= 0 && uint64(t) < fn.Size || len(pieces) > maxColdParts {
			continue
		}
		cold, ok := fl.containing(fn.Address + uint64(t))
		if !ok || seen[cold.Address] || !strings.HasPrefix(cold.Name, fn.Name+".cold") {
			continue
		}
		seen[cold.Address] = true
		if p, err := piece(cold); err == nil {
			pieces = append(pieces, p)
		}
	}
	return insn.RedZone(pieces, func(addr uint64) bool { return !seen[addr] && fl.functionEntry(addr) })
}

// functionEntry says whether a virtual address is where a function of the
// symbol table starts (not a gcc cold part, name.cold), or in the PLT: a
// jump there is a tail call.
func (fl *file) functionEntry(addr uint64) bool {
	for _, fn := range fl.functionsAt(addr) {
		if !strings.Contains(fn.Name, ".cold") { // a cold part is no function of its own
			return true
		}
	}
	for _, name := range []string{".plt", ".plt.sec", ".plt.got", ".iplt"} {
		if sec := fl.elf.Section(name); sec != nil && addr >= sec.Addr && addr < sec.Addr+sec.Size {
			return true
		}
	}
	return false
}

// nop5Refusal explains in one sentence why a uprobe may not go on the
// 5-byte nop at offset off of fn, and names the safe places around it.
func (fl *file) nop5Refusal(fn function, insts []insn.Inst, off uint64, u insn.StackUse) error {
	alts := []string{fl.uprobeRef(fn, 0) + " (its entry)"}
	k := instAt(insts, off)
	for _, j := range []int{k + 1, k - 1} {
		if j < 0 || j >= len(insts) {
			continue
		}
		if c := fl.kernelClass(insts[j]); c.Probeable() && c != insn.Optimizable {
			what := "the next instruction"
			if j < k {
				what = "the one before"
			}
			alts = append(alts, fmt.Sprintf("%s (%s, %s)", fl.uprobeRef(fn, insts[j].Offset), what, fl.textAt(fn, insts[j].Offset)))
			break
		}
	}
	return fmt.Errorf("%s+%#x is a 5-byte nop, which this kernel rewrites after the first hit into a call that writes below %%rsp, where %s may keep live data (%s), so a probe there would change what it computes; probe %s instead",
		fn.Name, off, fn.Name, u.Reason(), strings.Join(alts, " or "))
}

// uprobeRef returns the reference of a uprobe at offset off of fn: by
// name, or by virtual address for a function known only from call-frame
// information.
func (fl *file) uprobeRef(fn function, off uint64) string {
	if _, named := fl.functions[fn.Name]; !named {
		return fmt.Sprintf("uprobe:%#x", fn.Address+off)
	}
	if off == 0 {
		return "uprobe:" + fn.Name
	}
	return fmt.Sprintf("uprobe:%s+%#x", fn.Name, off)
}

// instAt returns the index of the instruction that starts at off (which
// Boundary or the insn helpers guarantee exists).
func instAt(insts []insn.Inst, off uint64) int {
	i := sort.Search(len(insts), func(i int) bool { return insts[i].Offset >= off })
	if i == len(insts) {
		return len(insts) - 1
	}
	return i
}

// kernelClass returns how the running kernel handles a uprobe on in: its
// class, except that an arm64 nop is single-stepped, not simulated, by
// kernels before Linux 6.13 (Options.ARM64StepsNop), and that a 5-byte nop
// is only emulated by kernels without the optimized uprobe path
// (Options.OptimizedUprobes).
func (fl *file) kernelClass(in insn.Inst) insn.SiteClass {
	if fl.arch == regs.ArchARM64 && in.Nop && in.Class == insn.Emulated && fl.opts.ARM64StepsNop {
		return insn.SingleStepped
	}
	if in.Class == insn.Optimizable && (!fl.opts.OptimizedUprobes || fl.arch != regs.ArchAMD64) {
		return insn.Emulated
	}
	return in.Class
}

// decode decodes a function's code from the file, without the
// instructions' Text (empty): the planner reads every instruction of every
// function a pattern matches, and names few of them (formatting took 30%
// of the Start of function: "*" on PostgreSQL). A message that names an
// instruction gets its text from decodeText or textAt. A function whose
// code does not decode is decoded again with text, for the error.
func (fl *file) decode(fn function) ([]insn.Inst, error) {
	if insts, ok := fl.decoded[fn.Address]; ok {
		return insts, nil
	}
	code, err := fl.code(fn)
	if err != nil {
		return nil, err
	}
	insts, err := insn.DecodeFlow(fl.arch, code)
	if err != nil {
		_, err = insn.DecodeFor(fl.arch, code) // the same error, naming the instructions
		return nil, fmt.Errorf("decoding %s: %w", fn.Name, err)
	}
	fl.decoded[fn.Address] = insts
	return insts, nil
}

// decodeText is decode with every instruction's Text, for messages and
// the few analyses whose findings name instructions (insn.RedZone). It is
// not kept.
func (fl *file) decodeText(fn function) ([]insn.Inst, error) {
	code, err := fl.code(fn)
	if err != nil {
		return nil, err
	}
	insts, err := insn.DecodeFor(fl.arch, code)
	if err != nil {
		return nil, fmt.Errorf("decoding %s: %w", fn.Name, err)
	}
	return insts, nil
}

// code reads a function's code from the file.
func (fl *file) code(fn function) ([]byte, error) {
	if fn.Size == 0 {
		return nil, fmt.Errorf("%s has no size in the symbol table: its instructions cannot be checked", fn.Name)
	}
	code, err := fl.read(fn.Address, fn.Size)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", fn.Name, err)
	}
	return code, nil
}

// textAt returns the text of the instruction of fn at offset off (an
// instruction boundary), for a message.
func (fl *file) textAt(fn function, off uint64) string {
	insts, err := fl.decodeText(fn)
	if err != nil {
		return ""
	}
	if i := instAt(insts, off); i >= 0 && i < len(insts) && insts[i].Offset == off {
		return insts[i].Text
	}
	return ""
}

// boundary is insn.Boundary on fn's instructions insts (from decode), its
// error naming the instruction.
func (fl *file) boundary(fn function, insts []insn.Inst, off uint64) error {
	err := insn.Boundary(insts, off)
	if err == nil {
		return nil
	}
	if text, terr := fl.decodeText(fn); terr == nil {
		return insn.Boundary(text, off)
	}
	return err
}

// readUpTo returns at most n bytes of the file at a virtual address: fewer
// where the segment's file bytes end.
func (fl *file) readUpTo(addr, n uint64) ([]byte, error) {
	for _, p := range fl.elf.Progs {
		if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr < p.Vaddr+p.Filesz {
			n = min(n, p.Vaddr+p.Filesz-addr)
			break
		}
	}
	return fl.read(addr, n)
}

// read returns n bytes of the file at a virtual address.
func (fl *file) read(addr, n uint64) ([]byte, error) {
	off, err := elfaddr.FileOffset(fl.elf.Progs, addr)
	if err != nil {
		return nil, err
	}
	if n > 1<<24 {
		return nil, fmt.Errorf("%d bytes at %#x is more code than one function has", n, addr)
	}
	buf := make([]byte, n)
	if _, err := fl.raw.ReadAt(buf, int64(off)); err != nil {
		return nil, err
	}
	return buf, nil
}

// containing returns the function whose code holds a virtual address: from
// the symbol table (or Go's function table), else from the bounds the
// file's call-frame information (.eh_frame) gives, which stripped files keep.
func (fl *file) containing(addr uint64) (function, bool) {
	if fl.byAddress == nil {
		fl.byAddress = []function{}
		for _, fns := range fl.functions {
			for _, fn := range fns {
				if fn.Size > 0 {
					fl.byAddress = append(fl.byAddress, fn)
				}
			}
		}
		sort.Slice(fl.byAddress, func(i, j int) bool { return fl.byAddress[i].Address < fl.byAddress[j].Address })
	}
	if i := sort.Search(len(fl.byAddress), func(i int) bool { return fl.byAddress[i].Address > addr }) - 1; i >= 0 {
		if fn := fl.byAddress[i]; addr < fn.Address+fn.Size {
			return fn, true
		}
	}
	if !fl.fdesRead {
		fl.fdesRead = true
		fl.fdes, _ = elfaddr.FunctionRanges(fl.elf) // without CFI, no bounds: callers check what they can
	}
	if r, ok := elfaddr.Containing(fl.fdes, addr); ok {
		return function{Name: fmt.Sprintf("the function at %#x", r.Start), Address: r.Start, Size: r.End - r.Start}, true
	}
	return function{}, false
}

// nop5 is the 5-byte nop of the "nop; nop5" USDT sites of newer <sys/sdt.h>,
// the one encoding the kernel's optimized uprobe path rewrites.
var nop5 = []byte{0x0f, 0x1f, 0x44, 0x00, 0x00}

// usdtSite places the uprobe of one USDT site after checking the note
// against the code: the site must be a nop on an instruction boundary of
// its function, or the note does not describe this file's code (corrupted,
// or from another build) and a uprobe there would change what the program
// does. The uprobe goes on the site's nop, or, when the kernel optimizes
// uprobes on 5-byte nops, on the exact 5-byte nop that follows a 1-byte nop
// site ("nop; nop5") where nothing below the stack pointer is live in its
// function (the rewritten call writes there; see insn.RedZone). A site
// that is itself such a nop where data below the stack pointer may be live
// is refused.
func (fl *file) usdtSite(l *usdt.Location) (location, error) {
	loc := location{
		Address: l.Address, FileOffset: l.FileOffset, SemaphoreFile: l.SemaphoreFileOffset,
		USDT: l, file: fl,
	}
	site, fn, found, err := fl.checkedNop(l.Address)
	if err != nil {
		return location{}, err
	}
	loc.Class = fl.kernelClass(site)
	if loc.Class == insn.Optimizable && (!found || !fl.stackUse(fn).SafeAt(l.Address)) {
		if !found {
			return location{}, fmt.Errorf("the site is a 5-byte nop, which this kernel rewrites after the first hit into a call that writes below %%rsp, and no function of the file holds it, so nothing proves that no live data is there; the site is refused")
		}
		u := fl.stackUse(fn)
		return location{}, fmt.Errorf("the site %s+%#x is a 5-byte nop, which this kernel rewrites after the first hit into a call that writes below %%rsp, where %s may keep live data (%s), so a probe there would change what it computes; the site is refused",
			fn.Name, l.Address-fn.Address, fn.Name, u.Reason())
	}
	if fl.opts.OptimizedUprobes && fl.arch == regs.ArchAMD64 && site.Len == 1 && found {
		// Move only onto a real nop5 right after the 1-byte nop, never
		// onto whatever instruction comes next, and only where the call
		// it becomes cannot clobber live data below %rsp.
		next, err := fl.read(l.Address+1, uint64(len(nop5)))
		if err == nil && bytes.Equal(next, nop5) && fl.stackUse(fn).SafeAt(l.Address+1) {
			loc.Address++
			loc.FileOffset++
			loc.Class = insn.Optimizable
		}
	}
	return loc, nil
}

// checkedNop decodes the instruction at a USDT site's virtual address and
// checks that it is a nop starting on an instruction boundary of the
// function that holds it (when the file says where functions are, then
// also returned, with found set).
func (fl *file) checkedNop(addr uint64) (insn.Inst, function, bool, error) {
	mismatch := "the note does not match the code (a corrupted or mismatched file?), so nothing is attached there"
	if fn, ok := fl.containing(addr); ok {
		insts, err := fl.decode(fn)
		if err != nil {
			return insn.Inst{}, fn, true, fmt.Errorf("checking the site in %s: %w", fn.Name, err)
		}
		off := addr - fn.Address
		if err := fl.boundary(fn, insts, off); err != nil {
			return insn.Inst{}, fn, true, fmt.Errorf("the site is not an instruction of %s: %w; %s", fn.Name, err, mismatch)
		}
		in := insts[instAt(insts, off)]
		if !in.Nop {
			return insn.Inst{}, fn, true, fmt.Errorf("the site %s+%#x is %q, not the nop a USDT site is; %s", fn.Name, off, fl.textAt(fn, off), mismatch)
		}
		return in, fn, true, nil
	}
	in, err := fl.checkedLoneNop(addr, mismatch)
	return in, function{}, false, err
}

// checkedLoneNop is checkedNop for a site in no known function: the
// instruction there alone.
func (fl *file) checkedLoneNop(addr uint64, mismatch string) (insn.Inst, error) {
	if fl.arch == regs.ArchARM64 && addr%insn.ARM64InstLen != 0 {
		return insn.Inst{}, fmt.Errorf("the site %#x is not a multiple of 4, where arm64 instructions start; %s", addr, mismatch)
	}
	code, err := fl.readUpTo(addr, 15)
	if err != nil {
		return insn.Inst{}, fmt.Errorf("reading the site: %w", err)
	}
	var in insn.Inst
	if fl.arch == regs.ArchARM64 {
		var insts []insn.Inst
		if insts, err = insn.DecodeARM64(code[:min(len(code), insn.ARM64InstLen)]); err == nil {
			in = insts[0]
		}
	} else {
		in, err = insn.DecodeOne(code)
	}
	if err != nil {
		return insn.Inst{}, fmt.Errorf("decoding the site: %w; %s", err, mismatch)
	}
	if !in.Nop {
		return insn.Inst{}, fmt.Errorf("the site is %q, not the nop a USDT site is; %s", in.Text, mismatch)
	}
	return in, nil
}

// notFound names the file and the closest names it does have. For a name
// written demangled (C++, Rust), it names the mangled symbols it stands for.
func (fl *file) notFound(p config.ProbeRef) error {
	return missingProbe{fl.notFoundText(p)}
}

func (fl *file) notFoundText(p config.ProbeRef) error {
	var want string
	var have []string
	what := "function"
	if p.Kind == config.KindUSDT {
		what = "USDT probe"
		want = p.Provider + ":" + p.Name
		for k := range fl.probes {
			have = append(have, k)
		}
	} else {
		want = p.Symbol
		for k := range fl.functions {
			have = append(have, k)
		}
		if mangled := demangledMatches(want, have, 5); len(mangled) > 0 {
			for i, m := range mangled {
				mangled[i] = p.Kind.String() + ":" + m + " (" + demangle.Filter(m) + ")"
			}
			return fmt.Errorf("target %s: %s: probes name functions by their symbol; use the mangled name: %s", fl.path, p, strings.Join(mangled, ", "))
		}
	}
	if len(have) == 0 {
		return fmt.Errorf("target %s: %s: the file has no %ss", fl.path, p, what)
	}
	prefix := p.Kind.String() + ":"
	close := closest(want, have, 5)
	for i := range close {
		close[i] = prefix + close[i]
	}
	return fmt.Errorf("target %s: %s: no such %s in the file; closest: %s", fl.path, p, what, strings.Join(close, ", "))
}

// demangledMatches returns, sorted, at most max mangled symbols whose
// demangled name is want, with or without its parameters.
func demangledMatches(want string, symbols []string, max int) []string {
	if !strings.ContainsAny(want, ":<(") {
		return nil // a plain name: nothing was demangled
	}
	var out []string
	for _, sym := range symbols {
		if !strings.HasPrefix(sym, "_Z") && !strings.HasPrefix(sym, "_R") {
			continue
		}
		if demangle.Filter(sym) == want || demangle.Filter(sym, demangle.NoParams) == want {
			out = append(out, sym)
		}
	}
	sort.Strings(out)
	if len(out) > max {
		out = out[:max]
	}
	return out
}
