// Command uprobe-list is the uprobe receiver's probe browser: it lists what
// the receiver can trace in an ELF file, each item with the configuration
// line to paste, using the receiver's own readers (package planner reads the
// file exactly as the receiver does; package debuginfo reads its DWARF).
// It only reads files: it needs no privileges.
//
// Usage:
//
//	uprobe-list [-debug-dir DIR]... [-optimized-uprobes auto|yes|no] FILE [PATTERN]
//	uprobe-list -recipe NAME
//
// Without PATTERN it also lists the recipes (internal/recipe) that apply to
// the file; -recipe NAME prints a recipe's YAML, to copy and change.
//
// Without PATTERN it lists the file's USDT probes (every site with its
// semaphore and argument specs, as readelf -n shows them, and each argument
// parsed) and its functions (where the entry and return uprobes go and how
// the kernel runs them there: emulated, single-stepped). PATTERN selects:
//
//	usdt:PROVIDER:NAME    one USDT probe, with the variables in scope at
//	                      each site when there is debuginfo
//	line:FILE:LINE        where a source line's probe goes and the variables
//	FILE:LINE             in scope there (FILE is a path suffix)
//	GLOB                  functions by name (handle_*, main.(*Server).*,
//	                      demangled C++ and Rust names): their sites, their
//	                      parameters at entry and $return at the return
//
// Debuginfo is looked for as the receiver does: in the file, under each
// -debug-dir (default /usr/lib/debug) by build id and .gnu_debuglink, and
// from debuginfod when DEBUGINFOD_URLS is set.
package main

import (
	"debug/dwarf"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/debuginfo"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/glob"
	"github.com/otel-uprobe/uprobereceiver/internal/planner"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
	"github.com/otel-uprobe/uprobereceiver/internal/usdt"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// maxDetailed bounds the functions a pattern lists in detail; more are
// listed in the table only.
const maxDetailed = 20

// dirs is a repeatable flag.
type dirs []string

func (d *dirs) String() string     { return strings.Join(*d, ",") }
func (d *dirs) Set(v string) error { *d = append(*d, v); return nil }

// run is the command; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("uprobe-list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var debugDirs dirs
	fs.Var(&debugDirs, "debug-dir", "root of separate debug files (repeatable; default "+debuginfo.DefaultDebugDir+")")
	recipeName := fs.String("recipe", "", "print the YAML of recipe NAME (a target of the receiver's configuration, to copy and change) and exit")
	optimized := fs.String("optimized-uprobes", "auto", "whether the kernel rewrites uprobes on 5-byte nops into calls (x86-64, Linux 6.17): auto (as the receiver finds out), yes or no")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: uprobe-list [-debug-dir DIR]... [-optimized-uprobes auto|yes|no] FILE [PATTERN]")
		fmt.Fprintln(stderr, "       uprobe-list -recipe NAME")
		fmt.Fprintln(stderr, "PATTERN: usdt:PROVIDER:NAME, line:FILE:LINE (or FILE:LINE), or a function glob")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *recipeName != "" {
		return printRecipe(*recipeName, stdout, stderr)
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		fs.Usage()
		return 2
	}
	path, pattern := fs.Arg(0), fs.Arg(1)
	sel, err := parsePattern(pattern)
	if err != nil {
		fmt.Fprintln(stderr, "uprobe-list:", err)
		return 2
	}
	// The kernel's behaviour decides classes and where USDT probes go, as
	// in the receiver.
	optimizedUprobes, arm64StepsNop := runningKernel()
	opts := planner.Options{DebugDirs: debugDirs, OptimizedUprobes: optimizedUprobes, ARM64StepsNop: arm64StepsNop}
	switch *optimized {
	case "auto":
	case "yes":
		opts.OptimizedUprobes = true
	case "no":
		opts.OptimizedUprobes = false
	default:
		fmt.Fprintf(stderr, "uprobe-list: -optimized-uprobes %q: want auto, yes or no\n", *optimized)
		return 2
	}
	if len(debugDirs) == 0 {
		opts.DebugDirs = []string{debuginfo.DefaultDebugDir}
	}
	if opts.Debuginfod, err = debuginfo.NewDebuginfodFromEnv(); err != nil {
		fmt.Fprintln(stderr, "uprobe-list:", err)
		return 1
	}
	if !strings.Contains(path, "/") {
		if _, err := os.Stat(path); err != nil {
			// A bare name, as a target's path: resolved as the receiver
			// resolves it (PATH, then ld.so.cache and the library
			// directories).
			res, rerr := procfs.Resolver{}.Resolve(path)
			if rerr != nil {
				fmt.Fprintln(stderr, "uprobe-list:", rerr)
				return 1
			}
			fmt.Fprintf(stderr, "uprobe-list: %s is %s\n", path, res.Path)
			path = res.Path
		}
	}
	in, err := planner.Inspect(path, opts)
	if err != nil {
		fmt.Fprintln(stderr, "uprobe-list:", err)
		return 1
	}
	defer in.Close()
	l := &lister{in: in, w: stdout, path: path}
	switch sel.kind {
	case selectAll:
		err = l.overview()
	case selectUSDT:
		err = l.usdtProbe(sel.ref)
	case selectLine:
		err = l.line(sel.ref)
	case selectFunctions:
		err = l.functions(sel.glob)
	}
	if err != nil {
		fmt.Fprintln(stderr, "uprobe-list:", err)
		return 1
	}
	return 0
}

// selectKind is what a PATTERN asks for.
type selectKind uint8

const (
	selectAll selectKind = iota
	selectUSDT
	selectLine
	selectFunctions
)

// selection is a parsed PATTERN.
type selection struct {
	kind selectKind
	// ref is the probe reference of selectUSDT and selectLine.
	ref  string
	glob *glob.Glob
}

// parsePattern parses the PATTERN argument: "" lists everything;
// usdt:P:N a USDT probe; line:FILE:LINE, or FILE:LINE with a decimal LINE,
// a line; anything else is a function glob.
func parsePattern(p string) (selection, error) {
	switch {
	case p == "":
		return selection{kind: selectAll}, nil
	case strings.HasPrefix(p, "usdt:"):
		pr, err := config.ParseProbe(p)
		if err != nil {
			return selection{}, err
		}
		return selection{kind: selectUSDT, ref: pr.String()}, nil
	case strings.HasPrefix(p, "line:"):
		pr, err := config.ParseProbe(p)
		if err != nil {
			return selection{}, err
		}
		return selection{kind: selectLine, ref: pr.String()}, nil
	}
	if i := strings.LastIndexByte(p, ':'); i > 0 && i < len(p)-1 && p[i-1] != ':' && isDecimal(p[i+1:]) {
		if pr, err := config.ParseProbe("line:" + p); err == nil {
			return selection{kind: selectLine, ref: pr.String()}, nil
		}
	}
	g, err := glob.Compile(p)
	if err != nil {
		return selection{}, err
	}
	return selection{kind: selectFunctions, glob: g}, nil
}

func isDecimal(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// lister writes the listings of one file.
type lister struct {
	in   *planner.Inspection
	w    io.Writer
	path string
}

func (l *lister) printf(format string, args ...any) { fmt.Fprintf(l.w, format, args...) }

// header names the file, what it is and where its debuginfo is.
func (l *lister) header() {
	kind := "shared library"
	if l.in.Executable() {
		kind = "executable"
	}
	l.printf("file %s (%s", l.path, kind)
	if isGo, v := l.in.Go(); isGo {
		l.printf(", Go %s", v)
	}
	l.printf(")\n")
	if dbg, err := l.in.Debug(); err == nil {
		if dbg.Source == debuginfo.SourceEmbedded {
			l.printf("debuginfo: in the file\n")
		} else {
			l.printf("debuginfo: %s %s\n", dbg.Source, dbg.DebugPath)
		}
	} else {
		l.printf("debuginfo: none ($names, line: probes and source_file: need it): %v\n", err)
	}
}

// overview lists every USDT probe and every function.
func (l *lister) overview() error {
	l.header()
	probes := l.in.USDT()
	l.printf("\nUSDT probes: %d\n", len(probes))
	for _, p := range probes {
		l.probe(p, false)
	}
	fns := l.in.Functions(nil)
	l.printf("\nFunctions: %d\n", len(fns))
	l.table(fns)
	l.recipes()
	return nil
}

// probe lists one USDT probe: its sites as readelf -n shows them, and its
// arguments parsed.
func (l *lister) probe(p usdt.Probe, scopes bool) {
	ref := "usdt:" + p.String()
	l.printf("  %s  (%d site%s)\n", ref, len(p.Locations), plural(len(p.Locations)))
	l.printf("    counters:  - %s\n", ref)
	l.printf("    entry: %s\n", ref)
	var locs []planner.Location
	if scopes {
		locs, _ = l.in.Locate(ref)
	}
	for i, s := range p.Locations {
		l.printf("    site %#x semaphore %#x args %q\n", s.Address, s.SemaphoreAddress, s.ArgsText)
		if s.ArgsErr != nil {
			l.printf("      (the receiver cannot read these arguments: %v)\n", s.ArgsErr)
		}
		for n, a := range s.Args {
			l.printf("      arg%d: %-14s %s\n", n, a.Text, describeArg(a))
		}
		if scopes && i < len(locs) {
			l.printf("      placed at %#x, %s (%s)\n", locs[i].Address, locs[i].Class, locs[i].Instruction)
			l.scope([]planner.Location{locs[i]}, "attributes")
		}
	}
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

// table lists functions with their entry and return sites.
func (l *lister) table(fns []planner.FunctionName) {
	tw := tabwriter.NewWriter(l.w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  FUNCTION\tENTRY\tRETURN\tCONFIG")
	for _, fn := range fns {
		entryRef, exitRef, why := l.in.FunctionProbes(fn.Name)
		exit := l.sites(exitRef, true)
		if why.Reason != "" {
			exit += " (" + why.Reason + ")"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\tfunction: %s\n", fn.Name, l.sites(entryRef, false), exit, fn.Name)
	}
	tw.Flush()
}

// sites summarizes where a reference's uprobes go.
func (l *lister) sites(ref string, exit bool) string {
	locs, err := l.in.Locate(ref)
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
		s := fmt.Sprintf("+%#x %s (%s)", loc.FunctionOffset, loc.Class, loc.Instruction)
		if loc.Return {
			s = "uretprobe at " + s
		}
		return s
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
	if exit {
		what = "RETs"
	}
	return fmt.Sprintf("%d %s: %s", len(locs), what, strings.Join(parts, ", "))
}

// shortError is the last part of an error for a table cell.
func shortError(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 && len(s)-i < 120 {
		if j := strings.LastIndex(s[:i], ": "); j >= 0 && i-j < 120 {
			return s[j+2:]
		}
	}
	return s
}

// usdtProbe lists one USDT probe with the variables at its sites.
func (l *lister) usdtProbe(ref string) error {
	pr, _ := config.ParseProbe(ref)
	for _, p := range l.in.USDT() {
		if p.Provider == pr.Provider && p.Name == pr.Name {
			l.header()
			l.printf("\n")
			l.probe(p, true)
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
	l.printf("\n%s  (%d site%s)\n", ref, len(locs), plural(len(locs)))
	l.printf("  entry: %s\n", ref)
	l.printf("  counters:  - %s\n", ref)
	for _, loc := range locs {
		l.printf("  site %#x %s+%#x, %s (%s)\n", loc.Address, loc.Function, loc.FunctionOffset, loc.Class, loc.Instruction)
		l.scope([]planner.Location{loc}, "attributes")
	}
	return nil
}

// functions lists the functions a glob matches: the table, then each in
// detail with its parameters and return value.
func (l *lister) functions(g *glob.Glob) error {
	fns := l.in.Functions(g)
	if len(fns) == 0 {
		return fmt.Errorf("%s: no function matches %q", l.path, g)
	}
	l.header()
	l.printf("\nFunctions matching %q: %d\n", g, len(fns))
	l.table(fns)
	if len(fns) > 1 {
		l.printf("  (all of them as one span each: function: %q)\n", g.String())
	}
	for i, fn := range fns {
		if i == maxDetailed {
			l.printf("\n(%d more: narrow the pattern to see them in detail)\n", len(fns)-maxDetailed)
			break
		}
		entryRef, exitRef, why := l.in.FunctionProbes(fn.Name)
		l.printf("\nfunction %s", fn.Name)
		if dbg, err := l.in.Debug(); err == nil {
			if d, err := dbg.FunctionAt(fn.Address); err == nil && d.DeclFile != "" {
				l.printf(" (%s:%d)", d.DeclFile, d.DeclLine)
			}
		}
		l.printf("\n")
		l.printf("  - function: %s\n", fn.Name)
		entry, err := l.in.Locate(entryRef)
		if err != nil {
			l.printf("  not probeable: %v\n", err)
			continue
		}
		for _, loc := range entry {
			l.printf("  entry %s at %#x (+%#x), %s (%s)\n", entryRef, loc.Address, loc.FunctionOffset, loc.Class, loc.Instruction)
		}
		exit, err := l.in.Locate(exitRef)
		if err != nil {
			l.printf("  return: not probeable: %v\n", err)
		}
		for _, loc := range exit {
			l.printf("  exit %s at %#x (+%#x), %s (%s)\n", exitRef, loc.Address, loc.FunctionOffset, loc.Class, loc.Instruction)
		}
		if why.Why != "" {
			l.printf("  returns: auto probes the RET instructions: %s\n", why.Why)
		}
		if len(entry) > 0 {
			l.printf("  at entry:\n")
			l.scope(entry, "attributes")
		}
		if len(exit) > 0 {
			l.printf("  at return:\n")
			l.scope(exit, "exit_attributes")
		}
	}
	return nil
}

// scope lists the variables that can be named at the locations of one
// probe (a function's returns: every RET), with the attribute line for
// each (one level into structs behind pointers). A name is offered only
// when it reads at every location, as the receiver requires.
func (l *lister) scope(locs []planner.Location, field string) {
	loc := locs[0]
	sc, err := l.in.Scope(loc)
	if err != nil {
		l.printf("      (no names here: %v)\n", err)
		return
	}
	var others []*debuginfo.Scope
	for _, o := range locs[1:] {
		if osc, err := l.in.Scope(o); err == nil {
			others = append(others, osc)
		}
	}
	tw := tabwriter.NewWriter(l.w, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "      NAME\tTYPE\tREAD AS\t%s:\n", field)
	var paths []string
	if loc.Return || sc.Site == debuginfo.SiteReturn {
		paths = append(paths, "$return")
	}
	goStyle := sc.Function.Language == debuginfo.LangGo
	seen := map[string]bool{}
	for i := len(sc.Vars) - 1; i >= 0; i-- {
		v := sc.Vars[i]
		if seen[v.Name] || (loc.Return && v.Kind != debuginfo.VarResult) {
			continue
		}
		seen[v.Name] = true
		paths = append(paths, "$"+v.Name)
		if v.Err == nil {
			for _, f := range fieldsOf(v.Type, goStyle, 0) {
				paths = append(paths, "$"+v.Name+f)
			}
		}
	}
	for _, p := range reverseVars(paths, sc) {
		path, err := fetch.ParsePath(p)
		if err != nil {
			continue
		}
		a, err := sc.Compile(path)
		if err != nil {
			fmt.Fprintf(tw, "      %s\t\t\t(not readable here: %s)\n", p, shortError(err))
			continue
		}
		for _, o := range others {
			if _, err = o.Compile(path); err != nil {
				fmt.Fprintf(tw, "      %s\t\t\t(not readable at %#x: %s)\n", p, o.PC, shortError(err))
				break
			}
		}
		if err != nil {
			continue
		}
		read := a.Type.String()
		if a.Enum != nil {
			read += " (enum names)"
		}
		fmt.Fprintf(tw, "      %s\t%s\t%s %s\t%s: %s\n", p, a.TypeName, read, a.String()[:strings.LastIndexByte(a.String(), ':')], attributeKey(p), p)
	}
	if sc.Site != debuginfo.SiteReturn && len(sc.Params()) > 0 {
		fmt.Fprintf(tw, "      $$params\tevery parameter\t\tparams: $$$$params  ($$ is the collector's escape for $)\n")
	}
	tw.Flush()
}

// maxFields bounds the fields listed for one variable.
const maxFields = 32

// reverseVars puts paths in declaration order (parameters first), keeping
// each variable's fields after it; $return stays first.
func reverseVars(paths []string, sc *debuginfo.Scope) []string {
	order := map[string]int{}
	for i, v := range sc.Vars {
		if _, ok := order[v.Name]; !ok {
			order[v.Name] = i
		}
	}
	root := func(p string) string {
		p = strings.TrimPrefix(p, "$")
		if i := strings.IndexAny(p, "-.["); i >= 0 {
			return p[:i]
		}
		return p
	}
	out := make([]string, len(paths))
	copy(out, paths)
	// A stable insertion sort by the root's declaration index.
	for i := 1; i < len(out); i++ {
		for j := i; j > 0; j-- {
			a, b := out[j-1], out[j]
			if a == "$return" || order[root(a)] <= order[root(b)] {
				break
			}
			out[j-1], out[j] = b, a
		}
	}
	return out
}

// fieldsOf returns the steps to the fields of a struct, or of the struct a
// pointer points to, two levels deep: "->id", "->hdr->len", "->inline.len";
// Go's style writes "." for both (".URL.Path").
func fieldsOf(t dwarf.Type, goStyle bool, depth int) []string {
	step := "."
	if p, ok := strip(t).(*dwarf.PtrType); ok {
		t, step = p.Type, "->"
	}
	if goStyle {
		step = "."
	}
	st, ok := strip(t).(*dwarf.StructType)
	if !ok || st.Kind == "union" || isGoStringOrSlice(st) || st.Incomplete {
		return nil
	}
	var out []string
	for _, f := range st.Field {
		if f.Name == "" || len(out) >= maxFields {
			continue
		}
		inner, isStruct := strip(f.Type).(*dwarf.StructType)
		if !isStruct || isGoStringOrSlice(inner) {
			out = append(out, step+f.Name)
		}
		if depth < 1 {
			for _, sub := range fieldsOf(f.Type, goStyle, depth+1) {
				out = append(out, step+f.Name+sub)
			}
		}
	}
	if len(out) > maxFields {
		out = out[:maxFields]
	}
	return out
}

// strip removes typedefs and qualifiers.
func strip(t dwarf.Type) dwarf.Type {
	for i := 0; i < 16 && t != nil; i++ {
		switch x := t.(type) {
		case *dwarf.TypedefType:
			t = x.Type
		case *dwarf.QualType:
			t = x.Type
		default:
			return t
		}
	}
	return t
}

// isGoStringOrSlice reports Go's string and slice headers, which are read
// as values, not as structs.
func isGoStringOrSlice(st *dwarf.StructType) bool {
	return st.StructName == "string" || strings.HasPrefix(st.StructName, "[]")
}

// attributeKey suggests an attribute key for a path: "$req->hdr->len"
// gives "req.hdr.len".
func attributeKey(p string) string {
	k := strings.TrimPrefix(p, "$")
	k = strings.ReplaceAll(k, "->", ".")
	if k == "return" {
		return "ret"
	}
	return k
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
