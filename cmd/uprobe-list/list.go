package main

import (
	"errors"
	"fmt"
	"strings"
	"unicode"

	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/debuginfo"
	"github.com/otel-uprobe/uprobereceiver/internal/glob"
	"github.com/otel-uprobe/uprobereceiver/internal/planner"
	"github.com/otel-uprobe/uprobereceiver/internal/usdt"
)

// lister writes the listings of one file.
type lister struct {
	in   *planner.Inspection
	p    *page
	path string
	// depth and all say how many fields to list (-depth, -all).
	depth int
	all   bool
}

// check reports whether the planner takes a target of the file holding
// spans and counters, as the collector's Start would.
func (l *lister) check(spans []config.Span, counters ...string) error {
	return l.in.Check(config.Target{Path: l.path, Spans: spans, Counters: config.CountersOf(counters...)})
}

// header names the file, what it is and where its debuginfo is.
func (l *lister) header() {
	kind := "shared library"
	if l.in.Executable() {
		kind = "executable"
	}
	if isGo, v := l.in.Go(); isGo {
		kind += ", Go " + v
	}
	l.p.printf("file %s (%s)", l.path, kind)
	if dbg, err := l.in.Debug(); err == nil {
		if dbg.Source == debuginfo.SourceEmbedded {
			l.p.printf("debuginfo: in the file")
		} else {
			l.p.printf("debuginfo: %s %s", dbg.Source, dbg.DebugPath)
		}
	} else {
		l.p.printf("debuginfo: none ($names, line: probes and source_file: need it): %v", err)
	}
}

// cutNote says, after a table, that cells were cut and how to see them
// (-width 0, or how, when not empty).
func (l *lister) cutNote(how string) {
	if l.p.cut == 0 {
		return
	}
	if how != "" {
		how = ", or " + how
	}
	l.p.printf("  (%d cell%s cut to fit %d columns, marked %s: -width 0 shows them whole%s)", l.p.cut, plural(l.p.cut), l.p.width, ellipsis, how)
	l.p.cut = 0
}

// overview lists every USDT probe and every function.
func (l *lister) overview() error {
	l.header()
	probes := l.in.USDT()
	l.p.printf("\nUSDT probes: %d", len(probes))
	for _, p := range probes {
		l.probe(p, probes, false)
	}
	fns := l.in.Functions(nil)
	l.p.printf("\nFunctions: %d (each line pastes under a target's spans:; ENTRY and RETURN say where the uprobes go and how the kernel runs them)", len(fns))
	l.functionTable(fns)
	l.cutNote(fmt.Sprintf("uprobe-list %s NAME shows one function whole", l.path))
	l.recipes()
	return nil
}

// probe lists one USDT probe: its sites as readelf -n shows them, its
// arguments parsed, the counter and the span to paste and, in detail, the
// names at its sites.
func (l *lister) probe(p usdt.Probe, all []usdt.Probe, detail bool) {
	ref := "usdt:" + p.String()
	l.p.printf("  %s  (%d site%s)", ref, len(p.Locations), plural(len(p.Locations)))
	var locs []planner.Location
	var locErr error
	if detail {
		locs, locErr = l.in.Locate(ref)
	}
	for i, s := range p.Locations {
		l.p.printf("    site %#x semaphore %#x args %q", s.Address, s.SemaphoreAddress, s.ArgsText)
		if s.ArgsErr != nil {
			l.p.printf("      (the receiver cannot read these arguments: %v)", s.ArgsErr)
		}
		for n, a := range s.Args {
			l.p.printf("      arg%d  %-14s %s", n, a.Text, describeArg(a))
		}
		if detail && i < len(locs) {
			l.p.printf("      placed at %#x in %s, %s (%s)", locs[i].Address, locs[i].Function, locs[i].Class, locs[i].Instruction)
		}
	}
	if locErr != nil {
		l.p.printf("    not probeable: %v", locErr)
		return
	}
	l.counter("    ", ref)
	span, opens, why := l.usdtSpan(p, all)
	if span == nil {
		if detail {
			l.p.printf("    (no span offered: %s)", why)
		}
		return
	}
	l.p.println("    spans:")
	l.spanHead("      ", *span, why)
	if detail {
		// The keys at the span's entry, which its exit must not repeat.
		var taken map[string]bool
		if !opens {
			if entry, err := l.in.Locate(span.Entry); err == nil {
				_, taken = l.namesTable("", *span, entry, false, nil)
			}
		}
		l.names("        ", *span, locs, !opens, taken)
	}
}

// counter offers a counter of ref, when the planner takes it.
func (l *lister) counter(indent, ref string) {
	if err := l.check(nil, ref); err != nil {
		l.p.printf("%s(no counter: %s)", indent, shortError(err))
		return
	}
	l.p.println(indent + "counters:")
	l.p.yamlLines(indent+"  ", "- "+yamlScalar(ref))
}

// spanHead writes the lines of a span item that name its probes.
func (l *lister) spanHead(indent string, s config.Span, comment string) {
	first := "- "
	put := func(key, value string) {
		l.p.yamlLines(indent+first, key+": "+yamlScalar(value))
		if first != "" {
			indent, first = indent+"  ", ""
		}
	}
	if s.Name != "" {
		put("name", s.Name)
	}
	if s.Function != "" {
		put("function", s.Function)
	}
	if s.SourceFile != "" {
		put("source_file", s.SourceFile)
	}
	if s.MaxFunctions != 0 {
		l.p.println(fmt.Sprintf("%smax_functions: %d", indent, s.MaxFunctions))
	}
	if s.Entry != "" {
		put("entry", s.Entry)
	}
	if s.Exit != "" {
		put("exit", s.Exit)
		if comment != "" {
			l.p.text(indent + "# " + comment)
		}
	}
}

// pairSuffixes are the name endings of USDT probes that open and close
// one operation (request__start and request__done).
var pairSuffixes = [][2]string{
	{"start", "done"}, {"start", "end"}, {"start", "stop"}, {"start", "finish"}, {"begin", "end"},
	{"entry", "return"}, {"entry", "exit"}, {"enter", "exit"}, {"enter", "leave"},
}

// usdtSpan returns the span a USDT probe opens or closes, whether it
// opens it, and where its other end comes from: the probe's pair by name
// (request__start and request__done), else the return of the one function
// its sites are in; nil (and why) when there is none the planner takes.
func (l *lister) usdtSpan(p usdt.Probe, all []usdt.Probe) (*config.Span, bool, string) {
	ref := "usdt:" + p.String()
	has := map[string]bool{}
	for _, q := range all {
		if q.Provider == p.Provider {
			has[q.Name] = true
		}
	}
	for _, sep := range []string{"__", "_", "-"} {
		for _, pair := range pairSuffixes {
			// Named PROVIDER:BASE, which no C function's span is.
			if base, ok := strings.CutSuffix(p.Name, sep+pair[0]); ok && base != "" && has[base+sep+pair[1]] {
				s := config.Span{Name: p.Provider + ":" + base, Entry: ref, Exit: "usdt:" + p.Provider + ":" + base + sep + pair[1]}
				if err := l.check([]config.Span{s}); err == nil {
					return &s, true, ""
				}
			}
			if base, ok := strings.CutSuffix(p.Name, sep+pair[1]); ok && base != "" && has[base+sep+pair[0]] {
				s := config.Span{Name: p.Provider + ":" + base, Entry: "usdt:" + p.Provider + ":" + base + sep + pair[0], Exit: ref}
				if err := l.check([]config.Span{s}); err == nil {
					return &s, false, ""
				}
			}
		}
	}
	return l.untilReturn(p.String(), ref)
}

// untilReturn returns a span from ref to the return of the one function
// its locations are in.
func (l *lister) untilReturn(name, ref string) (*config.Span, bool, string) {
	locs, err := l.in.Locate(ref)
	if err != nil {
		return nil, true, shortError(err)
	}
	fn := ""
	for _, loc := range locs {
		if fn != "" && loc.Function != fn {
			return nil, true, "its sites are in several functions, and no probe closes it by name"
		}
		fn = loc.Function
	}
	if fn == "" {
		return nil, true, "its sites are in no known function"
	}
	_, exit, _ := l.in.FunctionProbes(fn)
	s := config.Span{Name: name, Entry: ref, Exit: exit}
	if err := l.check([]config.Span{s}); err != nil {
		return nil, true, shortError(err)
	}
	return &s, true, "until " + fn + " returns"
}

// describeArg says what a USDT argument is, as the receiver reads it.
func describeArg(a usdt.Arg) string {
	sign := "unsigned"
	if a.Signed {
		sign = "signed"
	}
	if a.Float {
		sign = "floating-point"
	}
	what := fmt.Sprintf("%s %d byte%s", sign, a.Size, plural(int(a.Size)))
	op := a.Operand
	switch op.Kind {
	case usdt.OperandRegister:
		return fmt.Sprintf("%s in register %%%s", what, op.Register.Reg)
	case usdt.OperandConstant:
		return fmt.Sprintf("%s, the constant %d", what, op.Value)
	case usdt.OperandMemory:
		return what + " in memory"
	}
	return what
}

// functionTable lists functions with their entry and return sites, each
// as the span item to paste when the planner takes it (a comment when
// not).
func (l *lister) functionTable(fns []planner.FunctionName) {
	t := &table{indent: "  ", head: row{yaml: "spans:", cells: []string{"ENTRY", "RETURN"}}}
	for _, fn := range fns {
		entryRef, exitRef, why := l.in.FunctionProbes(fn.Name)
		entry, entryErr := l.in.Locate(entryRef)
		exit, exitErr := l.in.Locate(exitRef)
		r := row{yaml: "- function: " + yamlScalar(fn.Name), cells: []string{l.sites(entry, entryErr), l.sites(exit, exitErr)}}
		if why.Reason != "" {
			r.cells[1] += " (" + why.Reason + ")"
		}
		if strings.ContainsFunc(fn.Name, unicode.IsSpace) {
			// Go generics over interface {} and struct { … } types.
			r.yaml, r.cells = "# "+fn.Name, []string{"not offered: a function: or probe name cannot hold its blanks"}
		} else if entryErr != nil || exitErr != nil {
			r.yaml = "# " + fn.Name
		} else if err := l.check([]config.Span{{Function: fn.Name}}); err != nil {
			r.yaml = "# " + fn.Name
			r.cells[1] = "not offered: " + shortError(err)
		}
		t.rows = append(t.rows, r)
	}
	l.p.table(t)
}

// sites summarizes where a reference's uprobes go.
func (l *lister) sites(locs []planner.Location, err error) string {
	var unwind *planner.UnwindHazardError
	switch {
	case errors.As(err, &unwind) && unwind.Instead == "":
		return "not probeable: exceptions may unwind through it, and it has no RET"
	case errors.As(err, &unwind):
		return "refused: exceptions may unwind through it (" + unwind.Instead + " probes its RETs)"
	case err != nil:
		return "not probeable: " + shortError(err)
	}
	if len(locs) == 1 {
		loc := locs[0]
		switch {
		case loc.Return:
			return fmt.Sprintf("uretprobe (+%#x %s)", loc.FunctionOffset, loc.Class)
		case strings.HasPrefix(loc.Instruction, "ret"):
			return fmt.Sprintf("RET +%#x %s", loc.FunctionOffset, loc.Class)
		}
		return fmt.Sprintf("+%#x %s (%s)", loc.FunctionOffset, loc.Class, loc.Instruction)
	}
	classes := map[string]int{}
	var order []string
	for _, loc := range locs {
		c := loc.Class.String()
		if classes[c] == 0 {
			order = append(order, c)
		}
		classes[c]++
	}
	var parts []string
	for _, c := range order {
		parts = append(parts, fmt.Sprintf("%d %s", classes[c], c))
	}
	what := "sites"
	if len(locs) > 0 && !locs[0].Return && locs[0].FunctionOffset > 0 && strings.HasPrefix(locs[0].Instruction, "ret") {
		what = "RETs"
	}
	return fmt.Sprintf("%d %s: %s", len(locs), what, strings.Join(parts, ", "))
}

// shortError is the last part of an error, for a table cell.
func shortError(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 && len(s)-i < 120 {
		if j := strings.LastIndex(s[:i], ": "); j >= 0 && i-j < 120 {
			return s[j+2:]
		}
	}
	return s
}

// usdtProbe lists one USDT probe with the names at its sites.
func (l *lister) usdtProbe(ref string) error {
	pr, _ := config.ParseProbe(ref)
	all := l.in.USDT()
	for _, p := range all {
		if p.Provider == pr.Provider && p.Name == pr.Name {
			l.header()
			l.p.println("")
			l.probe(p, all, true)
			l.cutNote("")
			return nil
		}
	}
	return fmt.Errorf("%s: no USDT probe %s (uprobe-list %s lists them)", l.path, ref, l.path)
}

// line lists where a line probe goes and what is in scope there.
func (l *lister) line(ref string) error {
	locs, err := l.in.Locate(ref)
	if err != nil {
		return err
	}
	l.header()
	l.p.printf("\n%s  (%d site%s)", ref, len(locs), plural(len(locs)))
	for _, loc := range locs {
		l.p.printf("  site %#x %s+%#x, %s (%s)", loc.Address, loc.Function, loc.FunctionOffset, loc.Class, loc.Instruction)
	}
	l.counter("  ", ref)
	span, _, why := l.untilReturn(strings.TrimPrefix(ref, "line:"), ref)
	if span == nil {
		l.p.printf("  (no span offered: %s)", why)
		return nil
	}
	l.p.println("  spans:")
	l.spanHead("    ", *span, why)
	l.names("      ", *span, locs, false, nil)
	l.cutNote("")
	return nil
}

// functions lists the functions a glob (and a source-file glob) selects:
// the table, the pattern as one span item, then each function in detail
// with its parameters and return value.
func (l *lister) functions(g, source *glob.Glob) error {
	var fns []planner.FunctionName
	what := fmt.Sprintf("%q", g)
	if source != nil {
		var err error
		if fns, err = l.in.Select(g, source); err != nil {
			return err
		}
		what += fmt.Sprintf(" in source files %q", source)
	} else {
		fns = l.in.Functions(g)
	}
	if len(fns) == 0 {
		return fmt.Errorf("%s: no function matches %s", l.path, what)
	}
	l.header()
	l.p.printf("\nFunctions matching %s: %d", what, len(fns))
	l.functionTable(fns)
	l.cutNote("a function's name as the pattern shows it whole")
	if len(fns) > 1 || source != nil {
		s := config.Span{Function: g.String()}
		if source != nil {
			s.SourceFile = source.String()
		}
		if len(fns) > config.DefaultMaxFunctions {
			s.MaxFunctions = len(fns)
		}
		if err := l.check([]config.Span{s}); err != nil {
			l.p.printf("  (the pattern as one span item is not offered: %s)", shortError(err))
		} else {
			l.p.printf("  All of them, one span each:")
			l.p.println("  spans:")
			l.spanHead("    ", s, "")
		}
	}
	for i, fn := range fns {
		if i == maxDetailed && !l.all {
			l.p.printf("\n(%d more functions match: narrow the pattern, or -all shows every one in detail)", len(fns)-maxDetailed)
			break
		}
		l.function(fn)
	}
	return nil
}

// function lists one function in detail: its probes' places and the span
// item to paste with its parameters at entry and $return at its return.
func (l *lister) function(fn planner.FunctionName) {
	entryRef, exitRef, why := l.in.FunctionProbes(fn.Name)
	title := "\nfunction " + fn.Name
	if dbg, err := l.in.Debug(); err == nil {
		if d, err := dbg.FunctionAt(fn.Address); err == nil && d.DeclFile != "" {
			title += fmt.Sprintf(" (%s:%d)", d.DeclFile, d.DeclLine)
		}
	}
	l.p.text(title)
	entry, err := l.in.Locate(entryRef)
	if err != nil {
		l.p.printf("  not probeable: %v", err)
		return
	}
	for _, loc := range entry {
		l.p.printf("  entry %s at %#x (+%#x), %s (%s)", entryRef, loc.Address, loc.FunctionOffset, loc.Class, loc.Instruction)
	}
	exit, exitErr := l.in.Locate(exitRef)
	if exitErr != nil {
		l.p.printf("  return: not probeable: %v", exitErr)
	}
	for _, loc := range exit {
		l.p.printf("  exit %s at %#x (+%#x), %s (%s)", exitRef, loc.Address, loc.FunctionOffset, loc.Class, loc.Instruction)
	}
	if why.Why != "" {
		l.p.printf("  returns: auto probes the RET instructions: %s", why.Why)
	}
	span := config.Span{Function: fn.Name}
	if exitErr != nil {
		return
	}
	if err := l.check([]config.Span{span}); err != nil {
		l.p.printf("  not offered as a span: %v", err)
		return
	}
	l.p.println("  spans:")
	l.spanHead("    ", span, "")
	l.names("      ", span, exit, true, l.names("      ", span, entry, false, nil))
	l.cutNote("")
}
