package planner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/debuginfo"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
	"github.com/otel-uprobe/uprobereceiver/internal/usdt"
)

// Options say what the running kernel can do, as far as placing probes
// depends on it, and where targets' files are.
type Options struct {
	// OptimizedUprobes says the kernel turns uprobes on 5-byte nops into
	// calls (Linux 6.17 on x86-64), which write below the stack pointer:
	// USDT sites of the "nop; nop5" form are then probed on their nop5
	// where nothing below %rsp is live (insn.RedZone), and a uprobe: or
	// line: probe on a 5-byte nop where something may be is refused.
	// Without it, a 5-byte nop is an emulated nop.
	OptimizedUprobes bool
	// KernelReturnsRefused, when not empty, is the sentence saying why
	// kernel return probes (uretprobe:, and the function spans and
	// $return that would use them) are refused on this kernel: a location
	// that needs one is refused with it. Return probes on RET instructions
	// (ret:, Go functions) are not kernel return probes.
	KernelReturnsRefused string
	// AcceptUretprobeUnwind attaches kernel return probes to functions an
	// exception may unwind through (see HazardUretprobeUnwind), which are
	// otherwise refused: an exception through such a function then aborts
	// the program. returns: auto still probes their RET instructions.
	AcceptUretprobeUnwind bool
	// ARM64StepsNop says the kernel single-steps a uprobe on an arm64 nop
	// (Linux before 6.13, which simulates it): USDT sites on arm64 are
	// then reported as single-stepped.
	ARM64StepsNop bool
	// Arch is the architecture whose files the plan may hold: the one the
	// collector runs on, since the kernel runs uprobes only in programs of
	// its own architecture. A file of another architecture is refused with
	// a sentence saying so. ArchUnknown reads files of every supported
	// architecture (x86-64, arm64), as tools and tests on any host do.
	Arch regs.Arch
	// Locator finds the files of a target; nil takes an absolute path as
	// the one file and refuses names.
	Locator Locator
	// DebugDirs are the roots of separate debug files
	// (DIR/.build-id/xx/rest.debug, DIR/<directory>/<debuglink name>),
	// searched when a target needs debuginfo: nil means /usr/lib/debug, an
	// empty non-nil slice none. For a file found through a container's
	// root they are searched inside that root, and on the host by build id
	// only (see debuginfo.Options.Root).
	DebugDirs []string
	// Debuginfod, when set, fetches a debug file by build id when no local
	// one is found (debuginfo.NewDebuginfodFromEnv reads DEBUGINFOD_URLS).
	Debuginfod *debuginfo.Debuginfod
	// MaxDebuginfoBytes bounds the memory one file's sections and
	// debuginfo may take (debuginfo.Options.MaxBytes, debuginfo.CheckELF);
	// 0 means debuginfo.DefaultMaxBytes.
	MaxDebuginfoBytes int64
	// MaxSitesPerProbe bounds the locations of one probe in one file, and
	// MaxSitesPerFile the distinct USDT sites of a file and the locations
	// attached in it; 0 means DefaultMaxSitesPerProbe and
	// DefaultMaxSitesPerFile.
	MaxSitesPerProbe, MaxSitesPerFile int
	// Context ends what reading files may wait for (debuginfod downloads)
	// in Resolve; nil means none. ReadFileContext takes its own.
	Context context.Context
}

func (o Options) context() context.Context {
	if o.Context == nil {
		return context.Background()
	}
	return o.Context
}

// Defaults of Options' site bounds.
const (
	DefaultMaxSitesPerProbe = 1000
	DefaultMaxSitesPerFile  = usdt.DefaultMaxSites
)

func (o Options) maxSitesPerProbe() int {
	if o.MaxSitesPerProbe <= 0 {
		return DefaultMaxSitesPerProbe
	}
	return o.MaxSitesPerProbe
}

func (o Options) maxSitesPerFile() int {
	if o.MaxSitesPerFile <= 0 {
		return DefaultMaxSitesPerFile
	}
	return o.MaxSitesPerFile
}

// Candidate is one file a target may trace, found and opened once: every
// later step (its identity, its ELF and DWARF, its debug files, the
// tracer's attach through /proc/self/fd/N) uses File, never a path.
//
// A Candidate owns File and Root. Resolve and Plan.ReadFile take it
// (whether they succeed or not); a Candidate not handed to them must be
// closed with Close.
type Candidate struct {
	// Path is where the file was found, for people (messages, logs,
	// telemetry) and never opened again: a path in the collector's own
	// view, or inside a process's root shown as /proc/PID/root/….
	Path string
	// SeenAs is its path as the target's processes see it.
	SeenAs string
	// How says how it was found, for the log ("PATH", "ld.so.cache",
	// "the root of process 1234", …).
	How string
	// File is the file, opened once inside the tree it was found in:
	// read-only, non-blocking, a regular file.
	File *os.File
	// ID is File's identity (fstat) when it was opened.
	ID procfs.FileVersion
	// Root is the root of the process the file was found through (a
	// container's), opened once: the file's separate debug files are
	// looked for inside it. Nil for a file of the collector's own view.
	Root *procfs.Dir
	// ThroughRoot says the file was found through a process's root: it
	// lives in another mount namespace or root directory (a container's).
	ThroughRoot bool
	// ProcessStart is, for a pid: target's file, the start time of the
	// target's process (clock ticks since boot, /proc/PID/stat field 22)
	// read before the file was looked for in it; 0 otherwise.
	ProcessStart uint64
}

// Close closes the candidate's file and root.
func (c Candidate) Close() error {
	var errs []error
	if c.File != nil {
		errs = append(errs, c.File.Close())
	}
	if c.Root != nil {
		errs = append(errs, c.Root.Close())
	}
	return errors.Join(errs...)
}

// Locator finds the files a target traces now.
type Locator interface {
	// Locate returns the target's files, each once and open (the caller
	// owns the Candidates); none (and no error) when there is nothing to
	// trace yet. The error explains why a path or name leads nowhere.
	Locate(t config.Target) ([]Candidate, error)
}

// pathLocator is the Locator of an absolute path alone, in the
// collector's own view.
type pathLocator struct{}

func (pathLocator) Locate(t config.Target) ([]Candidate, error) {
	if len(t.Path) == 0 || t.Path[0] != '/' {
		return nil, fmt.Errorf("%q is a name, and names need a locator", t.Path)
	}
	c, err := openHostPath(t.Path)
	if err != nil {
		return nil, err
	}
	return []Candidate{*c}, nil
}

// OpenPath opens path, in the collector's own view, as a Candidate found
// "by path" (for a file the caller names itself); the caller owns it.
func OpenPath(path string) (Candidate, error) {
	c, err := openHostPath(path)
	if err != nil {
		return Candidate{}, fmt.Errorf("target %s: %w", path, err)
	}
	return *c, nil
}

// openHostPath opens path, in the collector's own view, as a candidate.
func openHostPath(path string) (*Candidate, error) {
	host, err := procfs.Root("").OpenDir()
	if err != nil {
		return nil, readError(err)
	}
	defer host.Close()
	c, err := openCandidate(host, path, "path")
	if err == nil && c == nil {
		err = errors.New("no such file")
	}
	return c, err
}

// Resolve reads every target's files and builds the plan. It reports the
// problems of all targets at once; a plan is returned only without error.
// An optional target whose file is nowhere yet has no files in the plan;
// any other target without one is an error.
func Resolve(targets []config.Target, opts ...Options) (*Planner, error) {
	pl := &Planner{Plan: &plan.Plan{}}
	if len(opts) > 0 {
		pl.opts = opts[0]
	}
	if pl.opts.Locator == nil {
		pl.opts.Locator = pathLocator{}
	}
	chosen := 0
	var errs []error
	locator := pl.opts.Locator
	if hl, ok := locator.(HostLocator); ok && hl.scan == nil {
		locator = hl.batch() // for these targets only: ReadFile's come later
	}
	for i, t := range targets {
		cands, err := locator.Locate(t)
		if err != nil {
			errs = append(errs, inRecipe(t, fmt.Errorf("target %s: %w", t.Path, err)))
			cands = nil
		}
		if err == nil && len(cands) == 0 && !t.Optional {
			errs = append(errs, inRecipe(t, fmt.Errorf("target %s: no such file on this host or in any process's root (optional: true waits for it)", t.Path)))
		}
		tg := plan.PlannedTarget{
			Path: t.Path, PID: t.PID, Selector: t.Process, Optional: t.Optional, BuildID: t.BuildID,
			ServiceName: t.ServiceNameOrDefault(), Executable: true,
			ThreadContext: t.ThreadContextEnabled(), ThreadAttributes: t.ThreadContextAttributes(),
		}
		for _, c := range cands {
			if t.PID != 0 && c.ProcessStart != 0 {
				tg.ProcessStart = c.ProcessStart
			}
		}
		if t.PID != 0 || t.Process != nil {
			if chosen >= bpfobj.MaxChosenTargets {
				errs = append(errs, fmt.Errorf("target %s: more than %d targets choose their processes (pid: or process:)", t.Path, bpfobj.MaxChosenTargets))
			}
			tg.Chosen, tg.ChosenBit = true, uint8(chosen)
			chosen++
		}
		pl.Targets = append(pl.Targets, tg)
		errs = append(errs, pl.resolveFiles(i, t, cands)...)
	}
	if err := errors.Join(errs...); err != nil {
		pl.Close()
		return nil, err
	}
	// The probes and spans are complete (files found later add sites):
	// no room left over from appending them one by one.
	pl.Probes, pl.Spans = trimmed(pl.Probes), trimmed(pl.Spans)
	return pl, nil
}

// trimmed returns s without unused capacity beyond an eighth of its length.
func trimmed[S ~[]E, E any](s S) S {
	if cap(s)-len(s) <= len(s)/8 {
		return s
	}
	return slices.Clone(s)
}

// resolveFiles defines target ti (its probes and spans) from the first of
// its candidate files that can be read, and reads each candidate. A file
// that cannot be read or planned (hostile or corrupt, a build without a
// probe, a bug of a parser) is left out (Plan.Unplanned) and the others
// are kept; the errors returned are those of a target left with no file
// at all although it is not optional, so that a configuration mistake
// still fails Start.
func (pl *Planner) resolveFiles(ti int, t config.Target, cands []Candidate) []error {
	var (
		first    *file
		firstAt  = -1
		left     []Unplanned
		done     = map[int]bool{} // candidates handed on: left out, or the first
		leaveOut = func(ci int, c Candidate, err error) {
			left = append(left, Unplanned{Target: ti, Candidate: c, Err: err})
			done[ci] = true
		}
	)
	// The first file that can be read and defines the target decides what
	// only a file can tell: the functions a pattern matches, the return
	// probes of returns: auto, and whether it is a library. Every
	// candidate is handed on once: to openFile (which closes it on error),
	// to readFile (which takes it), or left out with its file closed.
	for ci, c := range cands {
		var fl *file
		err := safely(c.Path, func() (err error) {
			fl, err = openFile(c, pl.opts)
			return err
		})
		if err != nil {
			leaveOut(ci, c, err)
			continue
		}
		m := pl.mark()
		pl.Targets[ti].Executable = fl.executable()
		err = safely(c.Path, func() error {
			_, err := pl.define(ti, t, fl)
			return err
		})
		if err != nil {
			pl.rollback(m)
			fl.close()
			leaveOut(ci, c, err)
			continue
		}
		first, firstAt = fl, ci
		break
	}
	if first == nil {
		// No file to define it from: one that may appear later.
		pl.Targets[ti].Executable = true
		if _, err := pl.define(ti, t, nil); err != nil {
			// The files' reasons, and this one unless a file said it
			// already (a mistake of the configuration every file repeats).
			errs := unplannedErrors(left)
			for _, e := range errs {
				if e.Error() == err.Error() {
					return errs
				}
			}
			return append(errs, err)
		}
	}
	planned := 0
	for ci, c := range cands {
		if done[ci] && ci != firstAt {
			continue
		}
		var fl *file
		if ci == firstAt {
			fl = first
		}
		var spec *plan.FileSpec
		err := safely(c.Path, func() (err error) {
			spec, err = pl.readFile(ti, c, fl)
			return err
		})
		switch {
		case errors.Is(err, ErrBuildIDMismatch):
			pl.Refused = append(pl.Refused, err) // not an error at Start: the receiver says so
		case err != nil:
			left = append(left, Unplanned{Target: ti, Candidate: c, Err: err})
		default:
			pl.Append(spec)
			planned++
		}
	}
	if planned == 0 && len(left) > 0 && !t.Optional {
		return unplannedErrors(left)
	}
	pl.Unplanned = append(pl.Unplanned, left...)
	return nil
}

// unplannedErrors returns the errors of files left out.
func unplannedErrors(left []Unplanned) []error {
	errs := make([]error, len(left))
	for i, u := range left {
		errs[i] = u.Err
	}
	return errs
}

// Unplanned is a file of a target that could not be read or planned: it
// is left out, and the target's other files are traced.
type Unplanned struct {
	Target    int
	Candidate Candidate
	Err       error
}

// ErrPanic says reading or planning a file panicked: a bug of the
// receiver's parsers, which leaves out that file only.
var ErrPanic = errors.New("reading the file panicked (a bug: please report it with the file)")

// safely runs fn, turning a panic into an error wrapping ErrPanic: a
// parser's bug on one file must not stop the collector. (A stack overflow
// cannot be recovered: the parsers bound every recursion instead.)
func safely(path string, fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("target %s: %w: %v\n%s", path, ErrPanic, r, debug.Stack())
		}
	}()
	return fn()
}

// planMark is how long the plan's lists were before a target was
// defined, to take a failed definition back out.
type planMark struct {
	probes, spans, histograms, defs, notes int
	ti                                     int
}

func (pl *Planner) mark() planMark {
	ti := len(pl.Targets) - 1
	return planMark{len(pl.Probes), len(pl.Spans), len(pl.Histograms), len(pl.defs), len(pl.Targets[ti].Notes), ti}
}

func (pl *Planner) rollback(m planMark) {
	pl.Probes = pl.Probes[:m.probes]
	pl.Spans = pl.Spans[:m.spans]
	pl.Histograms = pl.Histograms[:m.histograms]
	pl.defs = pl.defs[:m.defs]
	pl.Targets[m.ti].Notes = pl.Targets[m.ti].Notes[:m.notes]
}

// targetDef is what a target's files are read against: its probes, in the
// order they were first named, with their span roles and fetches.
type targetDef struct {
	target config.Target
	probes []*probeDef
	noted  map[string]bool
}

// note adds a sentence to target ti's notes, once.
func (pl *Planner) note(ti int, format string, args ...any) {
	def := pl.defs[ti]
	n := fmt.Sprintf(format, args...)
	if !def.noted[n] {
		if def.noted == nil {
			def.noted = map[string]bool{} // on the target's first note: most have none
		}
		def.noted[n] = true
		pl.Targets[ti].Notes = append(pl.Targets[ti].Notes, n)
	}
}

// probeDef is one probe of a target, as the configuration (and, for a
// function pattern, the first file) defines it.
type probeDef struct {
	id    int // -1 until it is in the plan
	ref   string
	probe config.ProbeRef
	// fns restricts a function probe to the functions of these names (a
	// pattern's match); nil means every function of the probe's symbol.
	fns       []string
	entrySpan int
	exitSpan  int
	// entryLenient and exitLenient say the span it opens or closes was
	// expanded from a function pattern: a name its function lacks is left
	// out (with a note) instead of failing the plan.
	entryLenient, exitLenient bool
	// conds are its conditions, histogram and fetches, nil for none:
	// most probes have none (a function pattern's thousands, the probes
	// of spans without attributes), and the definitions live as long as
	// the receiver (see conditions).
	conds *probeConds
}

// probeConds are the conditions, the histogram and the fetches of a probe.
type probeConds struct {
	// entry and exit are the fetches of the span it opens and of the
	// span it closes.
	entry, exit []fetchSpec
	// entryFilter and exitFilter are the conditions of the span it opens
	// and of the span it closes.
	entryFilter, exitFilter []config.Condition
	// counted are the conditions of a filtered counter (filtered set): its
	// hits are those that pass them.
	counted  []config.Condition
	filtered bool
	// hist is the value a counter's histogram records, and histID 1 + its
	// index in the plan's Histograms.
	hist   *config.Attribute
	histID int
}

// noConds are the conditions (and fetches) of a probe without any.
var noConds probeConds

// conditions returns the probe's conditions and histogram, to read.
func (pd *probeDef) conditions() *probeConds {
	if pd.conds == nil {
		return &noConds
	}
	return pd.conds
}

// setConditions returns the probe's conditions and histogram, to set.
func (pd *probeDef) setConditions() *probeConds {
	if pd.conds == nil {
		pd.conds = &probeConds{}
	}
	return pd.conds
}

// site says whether the probe needs the site program (spans, conditions,
// a histogram) rather than the bare counter.
func (pd *probeDef) site() bool {
	c := pd.conditions()
	return pd.entrySpan >= 0 || pd.exitSpan >= 0 || c.filtered || c.hist != nil
}

// define adds the probes and spans of target ti to the plan. fl is the
// target's first file, or nil when it has none yet: what only a file can
// tell (the functions a pattern matches, the return probes of returns:
// auto) is then decided without it, and function patterns are refused.
func (pl *Planner) define(ti int, t config.Target, fl *file) (*targetDef, error) {
	def := &targetDef{target: t}
	pl.defs = append(pl.defs, def)
	if fl != nil {
		if err := recipeFileError(t, fl); err != nil {
			return def, err
		}
	}
	note := func(format string, args ...any) { pl.note(ti, format, args...) }
	var errs []error
	byKey := map[string]*probeDef{}
	// locs are each probe's locations in fl. They only decide the
	// definition (the returns of a span, which span claims an address):
	// the defs outlive Start, for files found later, and a location holds
	// its whole file (its decoded instructions, symbols and DWARF: ~5 KiB
	// per location of PostgreSQL's function: "*").
	locs := map[*probeDef][]location{}
	// find defines a reference once; fns restricts a function probe to
	// some functions of its name (a pattern's match). register adds a
	// found probe to the plan.
	// findAs is find with a key suffix and reference of its own: a
	// filtered counter is a probe apart from its unfiltered probe.
	findAs := func(ref string, fns []function, suffix, as string) (*probeDef, error) {
		p, err := config.ParseProbe(ref)
		if err != nil {
			return nil, fmt.Errorf("target %s: %w", t.Path, err)
		}
		key := p.String()
		if fl != nil && fns != nil && addresses(fns) != addresses(fl.functions[p.Symbol]) {
			key += "@" + addresses(fns)
		}
		key += suffix
		if pd, ok := byKey[key]; ok {
			return pd, nil
		}
		if as == "" {
			as = ref
		}
		pd := &probeDef{id: -1, ref: as, probe: p, entrySpan: -1, exitSpan: -1}
		for _, fn := range fns {
			pd.fns = append(pd.fns, fn.Name)
		}
		if fl != nil {
			if locs[pd], err = fl.locate(p, fns); err != nil {
				return nil, err
			}
		}
		byKey[key] = pd
		return pd, nil
	}
	find := func(ref string, fns []function) (*probeDef, error) { return findAs(ref, fns, "", "") }
	register := func(pd *probeDef) {
		if pd.id >= 0 {
			return
		}
		pd.id = len(pl.Probes)
		pl.Probes = append(pl.Probes, plan.Probe{Target: ti, Ref: pd.ref, Kind: pd.probe.Kind, Filtered: pd.conditions().filtered})
		def.probes = append(def.probes, pd)
	}

	var jobs []spanJob
	if fl != nil {
		var err error
		if jobs, err = fl.spanJobs(t.Spans, note); err != nil {
			errs = append(errs, fmt.Errorf("target %s: %w", t.Path, err))
		}
	} else {
		for _, s := range t.Spans {
			if s.IsPattern() {
				errs = append(errs, fmt.Errorf("target %s: function pattern %q: a pattern needs the target's file at Start", t.Path, s.Function))
				continue
			}
			jobs = append(jobs, spanJob{span: s})
		}
	}
	claimed := map[uint64]int{} // virtual address of a span's probe → the span
	for _, j := range jobs {
		s := j.span
		entryRef, exitRef := s.Probes()
		var choice ReturnsChoice
		if fl != nil {
			entryRef, exitRef, choice = fl.spanProbes(s, j.fns)
		}
		entry, err1 := find(entryRef, j.fns)
		exit, err2 := find(exitRef, j.fns)
		var errorExit *probeDef
		if s.ErrorExit != "" && err1 == nil && err2 == nil {
			errorExit, err2 = find(s.ErrorExit, nil)
		}
		err1, err2 = recipeError(t, fl, entryRef, err1), recipeError(t, fl, exitRef, err2)
		if err1 != nil || err2 != nil {
			if j.pattern != "" {
				note("function pattern %q: %s left out: %v", j.pattern, s.Function, errors.Join(err1, err2))
			} else {
				errs = append(errs, err1, err2)
			}
			continue
		}
		if j.pattern != "" {
			// A function another span already traces keeps that span: a
			// span as configured, or the first pattern that matched it.
			if other, ok := claimedBy(claimed, locs, entry, exit); ok {
				note("function pattern %q: %s left out: span %q already traces it", j.pattern, s.Function, pl.Spans[other].Name)
				continue
			}
		}
		entryFetches, exitFetches, err := spanFetches(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("target %s: span %q: %w", t.Path, s.SpanName(""), err))
			continue
		}
		entryFilter, err1 := config.ParseConditions(s.Filter)
		exitFilter, err2 := config.ParseConditions(s.ExitFilter)
		if err := errors.Join(err1, err2); err != nil {
			errs = append(errs, fmt.Errorf("target %s: span %q: %w", t.Path, s.SpanName(""), err))
			continue
		}
		register(entry)
		register(exit)
		if errorExit != nil {
			register(errorExit)
		}
		if choice.Why != "" && pl.Probes[exit.id].Why == "" {
			pl.Probes[exit.id].Why = "returns: auto probes the RET instructions: " + choice.Why
		}
		sd, err := spanDef(ti, s, entryRef, exitRef, entry.id, exit.id)
		if err != nil {
			errs = append(errs, fmt.Errorf("target %s: span %q: %w", t.Path, s.SpanName(""), err))
			continue
		}
		sd.Pattern = j.pattern
		if err := derivedDef(&sd, s); err != nil {
			errs = append(errs, fmt.Errorf("target %s: span %q: %w", t.Path, s.SpanName(""), err))
			continue
		}
		if errorExit != nil {
			sd.ErrorExits = []int{errorExit.id}
		}
		id := len(pl.Spans)
		pl.Spans = append(pl.Spans, sd)
		for _, pd := range []*probeDef{entry, exit} {
			for _, l := range locs[pd] {
				if _, ok := claimed[l.Address]; !ok {
					claimed[l.Address] = id
				}
			}
		}
		entry.entrySpan, entry.entryLenient = id, j.pattern != ""
		exit.exitSpan, exit.exitLenient = id, j.pattern != ""
		// (nil conds hold no fetches: setting none is then a no-op)
		if len(entryFetches) > 0 || entry.conds != nil {
			entry.setConditions().entry = entryFetches
		}
		if len(exitFetches) > 0 || exit.conds != nil {
			exit.setConditions().exit = exitFetches
		}
		if len(entryFilter) > 0 {
			entry.setConditions().entryFilter = entryFilter
		}
		if len(exitFilter) > 0 {
			exit.setConditions().exitFilter = exitFilter
		}
		if errorExit != nil {
			errorExit.exitSpan = id
			if len(exitFetches) > 0 || errorExit.conds != nil {
				errorExit.setConditions().exit = exitFetches
			}
			if len(exitFilter) > 0 {
				errorExit.setConditions().exitFilter = exitFilter
			}
		}
	}
	for _, c := range t.Counters {
		conds, err := config.ParseConditions(c.Filter)
		if err != nil {
			errs = append(errs, fmt.Errorf("target %s: counter %s: %w", t.Path, c.Probe, err))
			continue
		}
		suffix := ""
		for _, cond := range conds {
			suffix += " && " + cond.String()
		}
		pd, err := findAs(c.Probe, nil, suffix, c.Ref())
		if err != nil {
			errs = append(errs, recipeError(t, fl, c.Probe, err))
			continue
		}
		if len(conds) > 0 {
			pc := pd.setConditions()
			pc.counted, pc.filtered = conds, true
		}
		if c.Histogram != "" {
			e, err := fetch.Parse(c.Histogram)
			if err != nil {
				errs = append(errs, fmt.Errorf("target %s: counter %s: histogram: %w", t.Path, c.Ref(), err))
				continue
			}
			pd.setConditions().hist = &config.Attribute{Key: "histogram", Expr: e}
		}
		register(pd)
		if c.Metric != nil {
			pl.Probes[pd.id].Metric = c.Metric
		}
		if pc := pd.conditions(); pc.hist != nil {
			pl.Histograms = append(pl.Histograms, plan.Histogram{Probe: pd.id, Expr: c.Histogram})
			pc.histID = len(pl.Histograms)
		}
	}
	return def, errors.Join(errs...)
}

// ErrBuildIDMismatch says a file's build id is not the one its target
// names: its offsets would belong to another build.
var ErrBuildIDMismatch = errors.New("the file's build id is not the target's build_id")

// ReadFile reads one more file of target ti (a container's file, an
// upgraded file) and compiles its sites, without changing the plan: it may
// run beside users of the plan. Append adds the result. It takes c, and
// closes it on error.
func (pl *Planner) ReadFile(ti int, c Candidate) (*plan.FileSpec, error) {
	return pl.ReadFileContext(context.Background(), ti, c)
}

// ReadFileContext is ReadFile whose waits (debuginfod downloads) end
// with ctx.
func (pl *Planner) ReadFileContext(ctx context.Context, ti int, c Candidate) (spec *plan.FileSpec, err error) {
	if ti < 0 || ti >= len(pl.defs) {
		c.Close()
		return nil, fmt.Errorf("no target %d", ti)
	}
	opts := pl.opts
	opts.Context = ctx
	err = safely(c.Path, func() (err error) {
		var fl *file
		if fl, err = openFile(c, opts); err != nil {
			return err // it closed c
		}
		spec, err = pl.readFile(ti, c, fl)
		return err
	})
	return spec, err
}

// readFile reads candidate c of target ti, through fl when it is open
// already. It takes both: the FileSpec keeps the open file, the rest is
// closed.
func (pl *Planner) readFile(ti int, c Candidate, fl *file) (_ *plan.FileSpec, err error) {
	if fl == nil {
		if fl, err = openFile(c, pl.opts); err != nil {
			return nil, err
		}
	}
	defer fl.close()
	def := pl.defs[ti]
	t := def.target
	tg := pl.Targets[ti]
	spec := &plan.FileSpec{
		File: plan.File{
			Target: ti, Path: c.Path, SeenAs: c.SeenAs, ID: fl.id, Executable: fl.executable(), Arch: fl.arch,
			Go: fl.isGo, GoVersion: fl.goVersion, GoIDOffset: fl.goIDOff,
			BuildID: fl.buildID, GoBuildID: fl.goBuildID, ThroughRoot: c.ThroughRoot,
		},
		Locations: map[int]int{},
	}
	if tg.BuildID != "" && fl.buildID != tg.BuildID {
		return nil, fmt.Errorf("target %s: %s: %w (the file has %q, the target wants %q)", t.Path, c.Path, ErrBuildIDMismatch, fl.buildID, tg.BuildID)
	}
	if err := recipeFileError(t, fl); err != nil {
		return nil, err
	}
	if err := pl.place(ti, c.Path, fl, spec); err != nil {
		return nil, err
	}
	spec.Open = fl.release()
	return spec, nil
}

// place adds to spec the attachments and sites of target ti's probes in
// fl, their fetches compiled at each location.
func (pl *Planner) place(ti int, path string, fl *file, spec *plan.FileSpec) error {
	def := pl.defs[ti]
	t := def.target
	tg := pl.Targets[ti]
	var errs []error
	note := func(format string, args ...any) { pl.note(ti, format, args...) }
	for _, pd := range def.probes {
		var fns []function
		for _, name := range pd.fns {
			fns = append(fns, fl.functions[name]...)
		}
		if pd.fns != nil && len(fns) == 0 {
			errs = append(errs, fmt.Errorf("target %s: %s: %s: no function %s in this file", t.Path, path, pd.probe, strings.Join(pd.fns, ", ")))
			continue
		}
		locs, err := fl.locate(pd.probe, fns)
		if err != nil {
			errs = append(errs, recipeError(t, fl, pd.probe.String(), err))
			continue
		}
		spec.Locations[pd.id] += len(locs)
		for _, loc := range locs {
			a := plan.Attachment{
				FileOffset:   loc.FileOffset,
				Address:      loc.Address,
				RefCtrOffset: loc.SemaphoreFile,
				Return:       loc.Return,
				Probe:        pd.id,
				Class:        loc.Class,
			}
			if !pd.site() && !tg.Chosen {
				a.Program, a.Cookie = plan.ProgramCount, uint64(pd.id)
				if spec.File.ThroughRoot {
					a.Program = plan.ProgramCountPerProcess
				}
				spec.Attachments = append(spec.Attachments, a)
				continue
			}
			site := plan.Site{Probe: pd.id, EntrySpan: pd.entrySpan, ExitSpan: pd.exitSpan, PerProcess: spec.File.ThroughRoot, LeafBytes: loc.LeafBytes}
			cc := compiler{file: fl, probe: pd.probe, loc: loc}
			if pd.entrySpan >= 0 {
				cc.role, cc.lenient, cc.span = atEntry, pd.entryLenient, pl.Spans[pd.entrySpan].Name
				if site.Entry, err = cc.all(pd.conditions().entry, note); err != nil {
					errs = append(errs, fmt.Errorf("target %s: span %q: %s: %w", t.Path, cc.span, pd.probe, err))
				}
				if err := nameValues(site.Entry, pl.Spans[pd.entrySpan].ValueNames); err != nil {
					errs = append(errs, fmt.Errorf("target %s: span %q: %s: %w", t.Path, cc.span, pd.probe, err))
				}
			}
			if pd.exitSpan >= 0 {
				cc.role, cc.lenient, cc.span = atExit, pd.exitLenient, pl.Spans[pd.exitSpan].Name
				if site.Exit, err = cc.all(pd.conditions().exit, note); err != nil {
					errs = append(errs, fmt.Errorf("target %s: span %q: %s: %w", t.Path, cc.span, pd.probe, err))
				}
				if err := nameValues(site.Exit, pl.Spans[pd.exitSpan].ValueNames); err != nil {
					errs = append(errs, fmt.Errorf("target %s: span %q: %s: %w", t.Path, cc.span, pd.probe, err))
				}
			}
			if err := cc.conditions(pd, &site, note); err != nil {
				errs = append(errs, fmt.Errorf("target %s: %s: %w", t.Path, pd.ref, err))
			}
			a.Program, a.Cookie = plan.ProgramSite, uint64(len(spec.Sites))
			spec.Sites = append(spec.Sites, site)
			spec.Attachments = append(spec.Attachments, a)
		}
	}
	spec.File.DebugInfo = fl.debugSource()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if max := pl.opts.maxSitesPerFile(); len(spec.Attachments) > max {
		return fmt.Errorf("target %s: %s: %d probe locations, over max_sites_per_file (%d): %w", t.Path, path, len(spec.Attachments), max, ErrTooManySites)
	}
	return nil
}
