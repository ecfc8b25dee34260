// Command uprobe-list is the uprobe receiver's probe browser: it lists what
// the receiver can trace in an ELF file, each item with the configuration
// to paste, using the receiver's own readers (package planner reads the
// file exactly as the receiver does; package debuginfo reads its DWARF).
// It only reads files: it needs no privileges.
//
// Usage:
//
//	uprobe-list [flags] FILE [PATTERN]
//	uprobe-list -recipe NAME
//
// Without PATTERN it lists the file's USDT probes (every site with its
// semaphore and argument specs, as readelf -n shows them, and each argument
// parsed) and its functions (where the entry and return uprobes go and how
// the kernel runs them there: emulated, single-stepped). PATTERN selects:
//
//	usdt:PROVIDER:NAME    one USDT probe, with the variables in scope at
//	                      its sites when there is debuginfo
//	line:FILE:LINE        where a source line's probe goes and the variables
//	FILE:LINE             in scope there (FILE is a path suffix)
//	GLOB                  functions by name (handle_*, main.(*Server).*,
//	                      demangled C++ and Rust names, a Go generic's exact
//	                      name): their sites, their parameters at entry and
//	                      $return at the return
//
// Without PATTERN the listing ends with the recipes (internal/recipe) that
// apply to the file, each as a target to paste; -recipe NAME prints a
// recipe's YAML, its spans and counters, to copy and change.
//
// -source-file GLOB selects functions by source file as a span's
// source_file: does (PATTERN then defaults to "*").
//
// The listing is YAML with comments: every line that is not a comment
// pastes into the receiver's configuration where its block says (under a
// target's spans: or counters:, under a span's attributes: or
// exit_attributes:), and is offered only when the planner accepts it, as
// the collector's Start would (planner.Inspection.Check). Lines fit the
// terminal's width (-width): wide values are wrapped inside YAML
// double-quoted strings, wide explanations cut with "…", and every cut says
// how to see the rest.
//
// Debuginfo is looked for as the receiver does: in the file, under each
// -debug-dir (default /usr/lib/debug) by build id and .gnu_debuglink, and
// from debuginfod when DEBUGINFOD_URLS is set.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/debuginfo"
	"github.com/otel-uprobe/uprobereceiver/internal/glob"
	"github.com/otel-uprobe/uprobereceiver/internal/planner"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Defaults of what a listing shows: maxDetailed functions of a pattern in
// detail, maxFields fields per variable, defaultDepth levels of fields.
const (
	maxDetailed  = 20
	maxFields    = 32
	defaultDepth = 2
)

// dirs is a repeatable flag.
type dirs []string

func (d *dirs) String() string     { return strings.Join(*d, ",") }
func (d *dirs) Set(v string) error { *d = append(*d, v); return nil }

const usage = "usage: uprobe-list [-debug-dir DIR]... [-optimized-uprobes auto|yes|no] [-width N] [-depth N] [-all] [-source-file GLOB] FILE [PATTERN]"

// run is the command; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("uprobe-list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var debugDirs dirs
	fs.Var(&debugDirs, "debug-dir", "root of separate debug files (repeatable; default "+debuginfo.DefaultDebugDir+")")
	recipeName := fs.String("recipe", "", "print the YAML of recipe NAME (a target of the receiver's configuration, to copy and change) and exit")
	optimized := fs.String("optimized-uprobes", "auto", "whether the kernel rewrites uprobes on 5-byte nops into calls (x86-64, Linux 6.17): auto (as the receiver finds out), yes or no")
	width := fs.Int("width", -1, "columns of the listing (0: no limit; default: the terminal's width, else $COLUMNS, else 120)")
	depth := fs.Int("depth", defaultDepth, "levels of struct fields listed below a variable, through pointers")
	all := fs.Bool("all", false, fmt.Sprintf("list everything: every field of a variable (else %d), every function of a pattern in detail (else %d)", maxFields, maxDetailed))
	sourceFile := fs.String("source-file", "", "select functions by source file, as a span's source_file: (a glob on the compile unit's path)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, usage)
		fmt.Fprintln(stderr, "       uprobe-list -recipe NAME")
		fmt.Fprintln(stderr, "PATTERN: usdt:PROVIDER:NAME, line:FILE:LINE (or FILE:LINE), or a function glob")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *recipeName != "" {
		if fs.NArg() > 0 {
			fmt.Fprintln(stderr, "uprobe-list: -recipe NAME takes no FILE")
			return 2
		}
		return printRecipe(*recipeName, stdout, stderr)
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		fs.Usage()
		return 2
	}
	if *depth < 0 {
		fmt.Fprintf(stderr, "uprobe-list: -depth %d: want 0 or more\n", *depth)
		return 2
	}
	path, pattern := fs.Arg(0), fs.Arg(1)
	if pattern == "" && *sourceFile != "" {
		pattern = "*"
	}
	sel, err := parsePattern(pattern)
	if err != nil {
		fmt.Fprintln(stderr, "uprobe-list:", err)
		return 2
	}
	if *sourceFile != "" {
		if sel.kind != selectFunctions {
			fmt.Fprintln(stderr, "uprobe-list: -source-file selects functions: give a function glob, or none")
			return 2
		}
		if sel.source, err = glob.Compile(*sourceFile); err != nil {
			fmt.Fprintln(stderr, "uprobe-list: -source-file:", err)
			return 2
		}
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
	if abs, err := filepath.Abs(path); err == nil {
		path = abs // a target's path is absolute
	}
	in, err := planner.Inspect(path, opts)
	if err != nil {
		fmt.Fprintln(stderr, "uprobe-list:", err)
		return 1
	}
	defer in.Close()
	l := &lister{in: in, p: newPage(stdout, outputWidth(*width, stdout)), path: path, depth: *depth, all: *all}
	switch sel.kind {
	case selectAll:
		err = l.overview()
	case selectUSDT:
		err = l.usdtProbe(sel.ref)
	case selectLine:
		err = l.line(sel.ref)
	case selectFunctions:
		err = l.functions(sel.glob, sel.source)
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

// selection is a parsed PATTERN (and -source-file).
type selection struct {
	kind selectKind
	// ref is the probe reference of selectUSDT and selectLine.
	ref    string
	glob   *glob.Glob
	source *glob.Glob
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

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
