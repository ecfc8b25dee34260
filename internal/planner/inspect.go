package planner

import (
	"errors"
	"fmt"
	"sort"

	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/debuginfo"
	"github.com/otel-uprobe/uprobereceiver/internal/glob"
	"github.com/otel-uprobe/uprobereceiver/internal/insn"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
	"github.com/otel-uprobe/uprobereceiver/internal/usdt"
)

// Inspection is one traced file read exactly as Resolve reads it, for
// listing what can be probed in it (cmd/uprobe-list): its USDT probes, its
// functions, where a reference's uprobes would go and how the kernel would
// run them, and what can be named there. It owns the open file until Close.
type Inspection struct {
	fl *file
}

// Inspect opens a file for listing. opts say where its debuginfo may be,
// which is only looked for when Debug or Scope needs it.
func Inspect(path string, opts Options) (*Inspection, error) {
	c, err := openHostPath(path)
	if err != nil {
		return nil, fmt.Errorf("target %s: %w", path, err)
	}
	fl, err := openFile(*c, opts)
	if err != nil {
		return nil, err
	}
	return &Inspection{fl: fl}, nil
}

// Close closes the file and its debuginfo.
func (in *Inspection) Close() { in.fl.close() }

// Go reports whether the file is a Go binary, and its Go version.
func (in *Inspection) Go() (bool, string) { return in.fl.isGo, in.fl.goVersion }

// Arch is the file's architecture, whose registers its probes read.
func (in *Inspection) Arch() regs.Arch { return in.fl.arch }

// Executable reports whether processes run the file (as opposed to loading
// it as a shared library).
func (in *Inspection) Executable() bool { return in.fl.executable() }

// USDT returns the file's USDT probes, sorted by provider and name.
func (in *Inspection) USDT() []usdt.Probe {
	out := make([]usdt.Probe, 0, len(in.fl.probes))
	for _, p := range in.fl.probes {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// FunctionName is one function name of the symbol table (or Go's function
// table), with the lowest address of the functions of that name.
type FunctionName struct {
	Name    string
	Address uint64
	// Count is the number of functions of the name (static functions of
	// several files).
	Count int
}

// Functions returns the names of the file's functions that have code (a
// size), by address, those the glob matches (by name or demangled name)
// when it is not nil. A glob that is exactly a function's name selects
// that function only, as in a span's function: (Go's generic
// instantiations are spelled with brackets: main.Map[go.shape.int]).
func (in *Inspection) Functions(glob *glob.Glob) []FunctionName {
	var out []FunctionName
	exact := glob != nil && len(in.fl.functions[glob.String()]) > 0
	for name, fns := range in.fl.functions {
		switch {
		case glob == nil:
		case exact:
			if name != glob.String() {
				continue
			}
		case !glob.Match(name) && !glob.Match(displayName(name, false)) && !glob.Match(displayName(name, true)):
			continue
		}
		fn := FunctionName{Name: name}
		for _, f := range fns {
			if f.Size == 0 {
				continue
			}
			if fn.Count == 0 || f.Address < fn.Address {
				fn.Address = f.Address
			}
			fn.Count++
		}
		if fn.Count > 0 {
			out = append(out, fn)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Address != out[j].Address {
			return out[i].Address < out[j].Address
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Select returns the functions a function pattern with a source_file:
// glob selects (source, nil for none), as Resolve expands the pattern:
// from the DWARF when the file has debuginfo, one per symbol name, by
// address. A source glob needs the debuginfo.
func (in *Inspection) Select(name, source *glob.Glob) ([]FunctionName, error) {
	matches, err := in.fl.matchFunctions(name, source, func(string, ...any) {})
	if err != nil {
		return nil, err
	}
	at := map[string]int{}
	var out []FunctionName
	for _, m := range matches {
		i, ok := at[m.symbol]
		if !ok {
			i = len(out)
			at[m.symbol] = i
			out = append(out, FunctionName{Name: m.symbol, Address: m.fn.Address})
		}
		out[i].Count++
		out[i].Address = min(out[i].Address, m.fn.Address)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Address != out[j].Address {
			return out[i].Address < out[j].Address
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

// Check reports whether Resolve would accept target t on this file, with
// Resolve's error when it would not: the configuration's checks
// (config.Validate), then the target's spans and counters defined from
// this file (function patterns expanded, returns: auto decided) and every
// fetch compiled at every location, under the inspection's Options. t's
// path is not looked for: this file stands for its files. The probe
// browser offers a configuration line only when Check accepts it.
func (in *Inspection) Check(t config.Target) error {
	if err := config.Validate([]config.Target{t}); err != nil {
		return err
	}
	pl := &Planner{Plan: &plan.Plan{}, opts: in.fl.opts}
	pl.Targets = append(pl.Targets, plan.PlannedTarget{
		Path: t.Path, PID: t.PID, Selector: t.Process, BuildID: t.BuildID, ServiceName: t.ServiceNameOrDefault(),
		Executable: in.fl.executable(), Chosen: t.PID != 0 || t.Process != nil,
	})
	if _, err := pl.define(0, t, in.fl); err != nil {
		return err
	}
	return pl.place(0, in.fl.path, in.fl, &plan.FileSpec{Locations: map[int]int{}})
}

// FunctionProbes returns the references a function: span of that name uses
// for its entry and exit (returns: auto decides between uretprobe: and
// ret:, as in Resolve), and why it chose ret:.
func (in *Inspection) FunctionProbes(name string) (entry, exit string, why ReturnsChoice) {
	return in.fl.spanProbes(config.Span{Function: name}, nil)
}

// Location is one place a probe reference resolves to, as Resolve places
// it.
type Location struct {
	// Address is the virtual address of the probed instruction;
	// FileOffset its file offset.
	Address, FileOffset uint64
	// Class says how the kernel runs the probed instruction.
	Class insn.SiteClass
	// Instruction is the probed instruction, e.g. "push %rbp".
	Instruction string
	// Function and FunctionOffset name the place inside its function.
	Function       string
	FunctionOffset uint64
	// Return makes it a kernel return probe (uretprobe:).
	Return bool
	// USDT is the note of a USDT site, nil otherwise.
	USDT *usdt.Location

	loc   location
	probe config.ProbeRef
}

// Locate resolves one probe reference as Resolve would, with every check.
func (in *Inspection) Locate(ref string) ([]Location, error) {
	p, err := config.ParseProbe(ref)
	if err != nil {
		return nil, err
	}
	locs, err := in.fl.locate(p, nil)
	if err != nil {
		return nil, err
	}
	out := make([]Location, len(locs))
	for i, l := range locs {
		out[i] = Location{
			Address: l.Address, FileOffset: l.FileOffset, Class: l.Class, Function: l.Function,
			FunctionOffset: l.FunctionOffset, Return: l.Return, USDT: l.USDT, loc: l, probe: p,
		}
		out[i].Instruction = in.fl.instruction(l.Address)
		if out[i].Function == "" {
			if fn, ok := in.fl.containing(l.Address); ok {
				out[i].Function, out[i].FunctionOffset = fn.Name, l.Address-fn.Address
			}
		}
	}
	return out, nil
}

// Debug returns the file's debuginfo, opened on first use.
func (in *Inspection) Debug() (*debuginfo.File, error) { return in.fl.debug() }

// Scope returns what can be named at a location Locate returned: at a
// function's entry, at a return, at a line or a USDT site.
func (in *Inspection) Scope(l Location) (*debuginfo.Scope, error) {
	if l.loc.file == nil {
		return nil, errors.New("not a location of this inspection")
	}
	return in.fl.scopeAt(l.probe, l.loc)
}

// instruction returns the text of the instruction at a virtual address, ""
// when it cannot be decoded.
func (fl *file) instruction(addr uint64) string {
	if fn, ok := fl.containing(addr); ok {
		if insts, err := fl.decodeText(fn); err == nil {
			i := instAt(insts, addr-fn.Address)
			if i < len(insts) && insts[i].Offset == addr-fn.Address {
				return insts[i].Text
			}
		}
	}
	code, err := fl.readUpTo(addr, 15)
	if err != nil {
		return ""
	}
	in, err := insn.DecodeOne(code)
	if err != nil {
		return fmt.Sprintf("(undecodable: %v)", err)
	}
	return in.Text
}
