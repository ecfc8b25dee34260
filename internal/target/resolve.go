package target

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"

	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/elfaddr"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/usdt"
)

// Resolve reads every target's file and builds the plan. It reports the
// problems of all targets at once; a plan is returned only without error.
func Resolve(targets []config.Target) (*Plan, error) {
	plan := &Plan{}
	var errs []error
	for i, t := range targets {
		if err := plan.addTarget(i, t); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return plan, nil
}

// function is one function symbol of a traced file.
type function struct {
	Address uint64 // virtual address
	Size    uint64
}

// file is an opened traced ELF file and what was read from it.
type file struct {
	path      string
	elf       *elf.File
	functions map[string][]function
	probes    map[string]usdt.Probe // by "provider:name"
	symbols   map[string]uint64     // every defined symbol's virtual address, read on first use
}

func openFile(path string) (*file, error) {
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("target %s: no such file", path)
		}
		return nil, fmt.Errorf("target %s: %w", path, err)
	}
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("target %s: not an ELF file (%v)", path, err)
	}
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 {
		f.Close()
		return nil, fmt.Errorf("target %s: %s %s file; only x86-64 files (ELFCLASS64, EM_X86_64) can be traced", path, f.Class, f.Machine)
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		f.Close()
		return nil, fmt.Errorf("target %s: %s is neither an executable nor a shared library", path, f.Type)
	}
	fl := &file{path: path, elf: f}
	if err := fl.readFunctions(); err != nil {
		f.Close()
		return nil, err
	}
	probes, err := usdt.Probes(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("target %s: reading USDT notes: %w", path, err)
	}
	fl.probes = make(map[string]usdt.Probe, len(probes))
	for _, p := range probes {
		fl.probes[p.Provider+":"+p.Name] = p
	}
	return fl, nil
}

func (fl *file) readFunctions() error {
	fl.functions = map[string][]function{}
	for _, read := range []func() ([]elf.Symbol, error){fl.elf.Symbols, fl.elf.DynamicSymbols} {
		syms, err := read()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			return fmt.Errorf("target %s: reading symbols: %w", fl.path, err)
		}
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Section == elf.SHN_UNDEF || s.Value == 0 {
				continue
			}
			fns := fl.functions[s.Name]
			dup := false
			for _, f := range fns {
				dup = dup || f.Address == s.Value
			}
			if !dup {
				fl.functions[s.Name] = append(fns, function{Address: s.Value, Size: s.Size})
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

// executable says whether processes run this file (as opposed to loading it as a library).
func (fl *file) executable() bool {
	if fl.elf.Type == elf.ET_EXEC {
		return true
	}
	for _, p := range fl.elf.Progs {
		if p.Type == elf.PT_INTERP {
			return true
		}
	}
	return false
}

// location is one resolved attach point of a probe.
type location struct {
	Address       uint64 // virtual address
	FileOffset    uint64
	SemaphoreFile uint64 // file offset of the USDT semaphore, 0 if none
	USDT          *usdt.Location
	file          *file
}

// resolvedProbe is a probe of the plan while its target is being built.
type resolvedProbe struct {
	id        int
	probe     config.Probe
	locations []location
	entrySpan int
	exitSpan  int
	entry     []fetchSpec
	exit      []fetchSpec
}

// fetchSpec is one value to fetch at one end of a span, before compiling.
type fetchSpec struct {
	config.Attribute
	Role Role
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
		entry = append(entry, fetchSpec{a, RoleAttribute})
	}
	for _, a := range exitAttrs {
		exit = append(exit, fetchSpec{a, RoleAttribute})
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
		entry = append(entry, fetchSpec{tid, RoleTraceID}, fetchSpec{pid, RoleParentSpanID})
	}
	if s.StatusError != "" {
		c, err := config.ParseComparison(s.StatusError)
		if err != nil {
			return nil, nil, err
		}
		exit = append(exit, fetchSpec{config.Attribute{Key: "status_error", Expr: c.Expr}, RoleStatus})
	}
	return entry, exit, nil
}

// spanDef builds the plan's span definition of a configured span.
func spanDef(ti int, s config.Span, entry, exit int) (Span, error) {
	kind, err := config.ParseSpanKind(s.Kind)
	if err != nil {
		return Span{}, err
	}
	def := Span{
		Target: ti, Name: s.Name, Entry: entry, Exit: exit,
		MinDurationNs: uint64(s.MinDuration.Nanoseconds()), SampleRatio: s.Ratio(), Kind: kind,
	}
	entryRef, exitRef := s.Probes()
	if ep, err := config.ParseProbe(entryRef); err == nil && ep.Kind == config.KindUprobe && ep.Offset == 0 {
		if xp, err := config.ParseProbe(exitRef); err == nil && xp.Kind == config.KindUretprobe && xp.Symbol == ep.Symbol {
			def.Function = true
		}
	}
	switch {
	case s.TraceContext != "":
		def.Carrier, def.CarrierKey = CarrierText, s.TraceContext
	case s.TraceID != "":
		def.Carrier = CarrierBinary
	}
	if s.StatusError != "" {
		c, err := config.ParseComparison(s.StatusError)
		if err != nil {
			return Span{}, err
		}
		def.Status = &c
	}
	return def, nil
}

func (plan *Plan) addTarget(index int, t config.Target) error {
	fl, err := openFile(t.Path)
	if err != nil {
		return err
	}
	defer fl.elf.Close()

	ti := len(plan.Targets)
	plan.Targets = append(plan.Targets, Target{
		Path:        t.Path,
		PID:         t.PID,
		ServiceName: t.ServiceNameOrDefault(),
		Executable:  fl.executable(),
	})

	var errs []error
	byRef := map[string]*resolvedProbe{}
	var order []*resolvedProbe
	probe := func(ref string) *resolvedProbe {
		p, err := config.ParseProbe(ref)
		if err != nil {
			errs = append(errs, fmt.Errorf("target %s: %w", t.Path, err))
			return nil
		}
		if rp, ok := byRef[p.String()]; ok {
			return rp
		}
		locs, err := fl.locate(p)
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		rp := &resolvedProbe{id: len(plan.Probes), probe: p, locations: locs, entrySpan: -1, exitSpan: -1}
		plan.Probes = append(plan.Probes, Probe{Target: ti, Ref: ref, Kind: p.Kind, Locations: len(locs)})
		byRef[p.String()] = rp
		order = append(order, rp)
		return rp
	}

	for _, s := range t.Spans {
		entryRef, exitRef := s.Probes()
		entry, exit := probe(entryRef), probe(exitRef)
		if entry == nil || exit == nil {
			continue
		}
		entryFetches, exitFetches, err := spanFetches(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("target %s: span %q: %w", t.Path, s.Name, err))
			continue
		}
		def, err := spanDef(ti, s, entry.id, exit.id)
		if err != nil {
			errs = append(errs, fmt.Errorf("target %s: span %q: %w", t.Path, s.Name, err))
			continue
		}
		id := len(plan.Spans)
		plan.Spans = append(plan.Spans, def)
		entry.entrySpan, entry.entry = id, entryFetches
		exit.exitSpan, exit.exit = id, exitFetches
	}
	for _, c := range t.Counters {
		probe(c)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}

	for _, rp := range order {
		for _, loc := range rp.locations {
			a := Attachment{
				Path:         t.Path,
				FileOffset:   loc.FileOffset,
				Address:      loc.Address,
				RefCtrOffset: loc.SemaphoreFile,
				Return:       rp.probe.Kind == config.KindUretprobe,
				PID:          t.PID,
				Probe:        rp.id,
			}
			if rp.entrySpan < 0 && rp.exitSpan < 0 {
				a.Program, a.Cookie = ProgramCount, uint64(rp.id)
				plan.Attachments = append(plan.Attachments, a)
				continue
			}
			site := Site{Probe: rp.id, EntrySpan: rp.entrySpan, ExitSpan: rp.exitSpan}
			var err error
			if site.Entry, err = compileAll(rp.entry, rp.probe, loc, atEntry); err != nil {
				errs = append(errs, fmt.Errorf("target %s: span %q: %s: %w", t.Path, plan.Spans[rp.entrySpan].Name, rp.probe, err))
			}
			if site.Exit, err = compileAll(rp.exit, rp.probe, loc, atExit); err != nil {
				errs = append(errs, fmt.Errorf("target %s: span %q: %s: %w", t.Path, plan.Spans[rp.exitSpan].Name, rp.probe, err))
			}
			a.Program, a.Cookie = ProgramSite, uint64(len(plan.Sites))
			plan.Sites = append(plan.Sites, site)
			plan.Attachments = append(plan.Attachments, a)
		}
	}
	return errors.Join(errs...)
}

// locate finds every location of a probe in the file.
func (fl *file) locate(p config.Probe) ([]location, error) {
	switch p.Kind {
	case config.KindUSDT:
		up, ok := fl.probes[p.Provider+":"+p.Name]
		if !ok {
			return nil, fl.notFound(p)
		}
		locs := make([]location, len(up.Locations))
		for i := range up.Locations {
			l := &up.Locations[i]
			locs[i] = location{Address: l.Address, FileOffset: l.FileOffset, SemaphoreFile: l.SemaphoreFileOffset, USDT: l, file: fl}
		}
		return locs, nil
	case config.KindUprobe, config.KindUretprobe:
		fns, ok := fl.functions[p.Symbol]
		if !ok {
			return nil, fl.notFound(p)
		}
		locs := make([]location, 0, len(fns))
		for _, fn := range fns {
			if p.Offset != 0 && fn.Size != 0 && p.Offset >= fn.Size {
				return nil, fmt.Errorf("target %s: %s: offset %#x is beyond the end of %s (%d bytes)", fl.path, p, p.Offset, p.Symbol, fn.Size)
			}
			addr := fn.Address + p.Offset
			off, err := elfaddr.FileOffset(fl.elf.Progs, addr)
			if err != nil {
				return nil, fmt.Errorf("target %s: %s: %w", fl.path, p, err)
			}
			locs = append(locs, location{Address: addr, FileOffset: off, file: fl})
		}
		sort.Slice(locs, func(i, j int) bool { return locs[i].Address < locs[j].Address })
		return locs, nil
	}
	return nil, fmt.Errorf("target %s: %s: unknown probe kind", fl.path, p)
}

// notFound names the file and the closest names it does have.
func (fl *file) notFound(p config.Probe) error {
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
