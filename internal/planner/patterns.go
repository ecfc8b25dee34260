package planner

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/ianlancetaylor/demangle"

	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/debuginfo"
	"github.com/otel-uprobe/uprobereceiver/internal/glob"
)

// spanJob is one span definition to build: a span as configured, or one
// function (one symbol name) of a function pattern's match.
type spanJob struct {
	span config.Span
	// fns are the functions of a pattern's match with the name
	// span.Function; nil means every function of that name.
	fns []function
	// pattern is the pattern the job was expanded from, "" for a span as
	// configured.
	pattern string
}

// spanJobs lists the span definitions of a target: the spans as configured
// first, in order, then the functions each function pattern matches,
// pattern by pattern, by address. A function that a span already traces
// keeps that span (addTarget notes the others).
func (fl *file) spanJobs(spans []config.Span, note func(string, ...any)) ([]spanJob, error) {
	var jobs, expanded []spanJob
	var errs []error
	for _, s := range spans {
		if !s.IsPattern() || (s.SourceFile == "" && len(fl.functions[s.Function]) > 0) {
			// A pattern that is exactly a symbol's name (Go generics
			// are spelled with brackets) is that symbol.
			if s.IsPattern() {
				s.Name = s.SpanName(s.Function)
				s.SourceFile, s.MaxFunctions = "", 0
			}
			jobs = append(jobs, spanJob{span: s})
			continue
		}
		js, err := fl.expand(s, note)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		expanded = append(expanded, js...)
	}
	return append(jobs, expanded...), errors.Join(errs...)
}

// match is one function a pattern selected, under the symbol name its
// probes use.
type match struct {
	symbol string
	fn     function
}

// expand turns a function pattern into one job per matched symbol name.
func (fl *file) expand(s config.Span, note func(string, ...any)) ([]spanJob, error) {
	what := fmt.Sprintf("function pattern %q", s.Function)
	if s.SourceFile != "" {
		what += fmt.Sprintf(" in source_file %q", s.SourceFile)
	}
	name, err := glob.Compile(s.Function)
	if err != nil {
		return nil, fmt.Errorf("function: %w", err)
	}
	var src *glob.Glob
	if s.SourceFile != "" {
		if src, err = glob.Compile(s.SourceFile); err != nil {
			return nil, fmt.Errorf("source_file: %w", err)
		}
	}
	matches, err := fl.matchFunctions(name, src, note)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if limit := s.FunctionLimit(); len(matches) > limit {
		return nil, fmt.Errorf("%s matches %d functions, more than max_functions (%d): narrow the pattern (source_file: selects by source file) or raise max_functions",
			what, len(matches), limit)
	}
	if len(matches) == 0 {
		return nil, fmt.Errorf("%s matches no function of the file (uprobe-list %s lists them)", what, fl.path)
	}

	// One job per symbol name, in the order of its first function.
	bySymbol := map[string][]function{}
	var symbols []string
	for _, m := range matches {
		if _, ok := bySymbol[m.symbol]; !ok {
			symbols = append(symbols, m.symbol)
		}
		bySymbol[m.symbol] = append(bySymbol[m.symbol], m.fn)
	}
	short := map[string]int{}
	for _, sym := range symbols {
		short[displayName(sym, false)]++
	}
	jobs := make([]spanJob, 0, len(symbols))
	for _, sym := range symbols {
		name := displayName(sym, false)
		if short[name] > 1 {
			name = displayName(sym, true) // overloads: with their parameters
		}
		c := s
		c.Function, c.Name, c.SourceFile, c.MaxFunctions = sym, s.Name+name, "", 0
		jobs = append(jobs, spanJob{span: c, fns: bySymbol[sym], pattern: s.Function})
	}
	return jobs, nil
}

// displayName is a symbol's name as spans show it: demangled (C++, Rust),
// with or without its parameters.
func displayName(sym string, params bool) string {
	if !strings.HasPrefix(sym, "_Z") && !strings.HasPrefix(sym, "_R") {
		return sym
	}
	if params {
		return demangle.Filter(sym)
	}
	return demangle.Filter(sym, demangle.NoParams)
}

// matchFunctions returns the functions a glob (and a source-file glob)
// selects, one per address, by address: from the DWARF when the file has
// debuginfo, else, without a source-file glob, from the symbol table.
func (fl *file) matchFunctions(glob, src *glob.Glob, note func(string, ...any)) ([]match, error) {
	dbg, derr := fl.debug()
	if derr != nil {
		if src != nil {
			return nil, fmt.Errorf("source_file: needs the file's debuginfo: %w", derr)
		}
		if !errors.Is(derr, debuginfo.ErrNoDebugInfo) {
			return nil, derr
		}
		note("function pattern %q: matched against the symbol table (%v)", glob, derr)
		return fl.matchSymbols(glob), nil
	}
	fns, err := dbg.Select(debuginfo.Selector{Name: glob, Source: src})
	if err != nil {
		return nil, err
	}
	seen := map[uint64]bool{}
	var out []match
	for _, d := range fns {
		if seen[d.Entry] {
			continue
		}
		seen[d.Entry] = true
		if fn, ok := fl.symbolAt(d.Entry, glob); ok {
			out = append(out, match{symbol: fn.Name, fn: fn})
			continue
		}
		// No symbol (a stripped symbol table): the DWARF's own bounds.
		fn := function{Name: d.Name, Address: d.Entry}
		if d.LinkageName != "" {
			fn.Name = d.LinkageName
		}
		for _, r := range d.Ranges {
			if d.Entry >= r[0] && d.Entry < r[1] {
				fn.Size = r[1] - d.Entry
			}
		}
		out = append(out, match{symbol: fn.Name, fn: fn})
	}
	return out, nil
}

// matchSymbols matches a glob against the symbol table's function names
// (and their demangled forms), one function per address.
func (fl *file) matchSymbols(glob *glob.Glob) []match {
	byAddr := map[uint64]match{}
	for name, fns := range fl.functions {
		if !glob.Match(name) && !glob.Match(displayName(name, false)) && !glob.Match(displayName(name, true)) {
			continue
		}
		for _, fn := range fns {
			if old, ok := byAddr[fn.Address]; !ok || name < old.symbol {
				byAddr[fn.Address] = match{symbol: name, fn: fn}
			}
		}
	}
	out := make([]match, 0, len(byAddr))
	for _, m := range byAddr {
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].fn.Address < out[j].fn.Address })
	return out
}

// functionsAt returns the function symbols that start at addr, by name.
func (fl *file) functionsAt(addr uint64) []function {
	if fl.byStart == nil {
		fl.byStart = map[uint64][]function{}
		for _, fns := range fl.functions {
			for _, fn := range fns {
				fl.byStart[fn.Address] = append(fl.byStart[fn.Address], fn)
			}
		}
		for _, fns := range fl.byStart {
			sort.Slice(fns, func(i, j int) bool { return fns[i].Name < fns[j].Name })
		}
	}
	return fl.byStart[addr]
}

// symbolAt returns the function symbol that starts at addr: of several
// (aliases), the first by name that the glob matches, else the first by
// name.
func (fl *file) symbolAt(addr uint64, glob *glob.Glob) (function, bool) {
	fns := fl.functionsAt(addr)
	if len(fns) == 0 {
		return function{}, false
	}
	for _, fn := range fns {
		if glob.Match(fn.Name) || glob.Match(displayName(fn.Name, false)) {
			return fn, true
		}
	}
	return fns[0], true
}
