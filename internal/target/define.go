package target

import (
	"errors"
	"fmt"

	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

// Options say what the running kernel can do, as far as placing probes
// depends on it, and where targets' files are.
type Options struct {
	// OptimizedUprobes says the kernel turns uprobes on 5-byte nops into
	// calls (Linux 6.17 on x86-64): USDT sites of the "nop; nop5" form are
	// then probed on their nop5.
	OptimizedUprobes bool
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
}

// Candidate is one file a target may trace.
type Candidate struct {
	// Path is where the receiver opens it: a host path, or a path inside a
	// process's root (/proc/PID/root/...).
	Path string
	// SeenAs is its path as the target's processes see it.
	SeenAs string
	// How says how it was found, for the log ("PATH", "ld.so.cache",
	// "the root of process 1234", …).
	How string
}

// Locator finds the files a target traces now.
type Locator interface {
	// Locate returns the target's files, each once; none (and no error)
	// when there is nothing to trace yet. The error explains why a path or
	// name leads nowhere.
	Locate(t config.Target) ([]Candidate, error)
}

// pathLocator is the Locator of an absolute path alone.
type pathLocator struct{}

func (pathLocator) Locate(t config.Target) ([]Candidate, error) {
	if len(t.Path) == 0 || t.Path[0] != '/' {
		return nil, fmt.Errorf("%q is a name, and names need a locator", t.Path)
	}
	if _, _, err := openRegular(t.Path); err != nil {
		return nil, err
	}
	return []Candidate{{Path: t.Path, SeenAs: t.Path, How: "path"}}, nil
}

// Resolve reads every target's files and builds the plan. It reports the
// problems of all targets at once; a plan is returned only without error.
// An optional target whose file is nowhere yet has no files in the plan;
// any other target without one is an error.
func Resolve(targets []config.Target, opts ...Options) (*Plan, error) {
	plan := &Plan{}
	if len(opts) > 0 {
		plan.opts = opts[0]
	}
	if plan.opts.Locator == nil {
		plan.opts.Locator = pathLocator{}
	}
	chosen := 0
	var errs []error
	for i, t := range targets {
		cands, err := plan.opts.Locator.Locate(t)
		if err != nil {
			errs = append(errs, fmt.Errorf("target %s: %w", t.Path, err))
			cands = nil
		}
		if err == nil && len(cands) == 0 && !t.Optional {
			errs = append(errs, fmt.Errorf("target %s: no such file on this host or in any process's root (optional: true waits for it)", t.Path))
		}
		tg := Target{
			Path: t.Path, PID: t.PID, Selector: t.Process, Optional: t.Optional, BuildID: t.BuildID,
			ServiceName: t.ServiceNameOrDefault(), Executable: true,
		}
		if t.PID != 0 || t.Process != nil {
			if chosen >= bpfobj.MaxChosenTargets {
				errs = append(errs, fmt.Errorf("target %s: more than %d targets choose their processes (pid: or process:)", t.Path, bpfobj.MaxChosenTargets))
			}
			tg.Chosen, tg.ChosenBit = true, uint8(chosen)
			chosen++
		}
		// The first file (if any) decides what only a file can tell: the
		// return probes of returns: auto, and whether it is a library.
		var first *file
		failed := map[string]bool{}
		for _, c := range cands {
			fl, err := openFile(c.Path, plan.opts)
			if err != nil {
				errs = append(errs, err)
				failed[c.Path] = true
				continue
			}
			first = fl
			break
		}
		tg.Executable = first == nil || first.executable()
		plan.Targets = append(plan.Targets, tg)
		def, err := plan.define(i, t, first)
		plan.defs = append(plan.defs, def)
		if err != nil {
			errs = append(errs, err)
			if first != nil {
				first.close()
			}
			continue
		}
		for _, c := range cands {
			if failed[c.Path] {
				continue
			}
			var fl *file
			if first != nil && first.path == c.Path {
				fl, first = first, nil
			}
			spec, err := plan.readFile(i, c, fl)
			if errors.Is(err, ErrBuildIDMismatch) {
				plan.Refused = append(plan.Refused, err) // not an error at Start: the receiver says so
				continue
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			plan.Append(spec)
		}
		if first != nil {
			first.close()
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return plan, nil
}

// targetDef is what a target's files are read against: its probes, in the
// order they were first named, with their span roles and fetches.
type targetDef struct {
	target config.Target
	probes []*probeDef
}

// probeDef is one probe of a target, as the configuration defines it.
type probeDef struct {
	id        int
	probe     config.Probe
	entrySpan int
	exitSpan  int
	entry     []fetchSpec
	exit      []fetchSpec
}

// define adds the probes and spans of target ti to the plan. fl is the
// target's first file, or nil when it has none yet: returns: auto then
// takes the kernel's return probes.
func (plan *Plan) define(ti int, t config.Target, fl *file) (*targetDef, error) {
	def := &targetDef{target: t}
	var errs []error
	byRef := map[string]*probeDef{}
	probe := func(ref string) *probeDef {
		p, err := config.ParseProbe(ref)
		if err != nil {
			errs = append(errs, fmt.Errorf("target %s: %w", t.Path, err))
			return nil
		}
		if pd, ok := byRef[p.String()]; ok {
			return pd
		}
		pd := &probeDef{id: len(plan.Probes), probe: p, entrySpan: -1, exitSpan: -1}
		plan.Probes = append(plan.Probes, Probe{Target: ti, Ref: ref, Kind: p.Kind})
		byRef[p.String()] = pd
		def.probes = append(def.probes, pd)
		return pd
	}
	for _, s := range t.Spans {
		entryRef, exitRef := s.Probes()
		if fl != nil {
			entryRef, exitRef = fl.spanProbes(s)
		}
		entry, exit := probe(entryRef), probe(exitRef)
		if entry == nil || exit == nil {
			continue
		}
		entryFetches, exitFetches, err := spanFetches(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("target %s: span %q: %w", t.Path, s.Name, err))
			continue
		}
		sd, err := spanDef(ti, s, entryRef, exitRef, entry.id, exit.id)
		if err != nil {
			errs = append(errs, fmt.Errorf("target %s: span %q: %w", t.Path, s.Name, err))
			continue
		}
		id := len(plan.Spans)
		plan.Spans = append(plan.Spans, sd)
		entry.entrySpan, entry.entry = id, entryFetches
		exit.exitSpan, exit.exit = id, exitFetches
	}
	for _, c := range t.Counters {
		probe(c)
	}
	return def, errors.Join(errs...)
}

// ErrBuildIDMismatch says a file's build id is not the one its target
// names: its offsets would belong to another build.
var ErrBuildIDMismatch = errors.New("the file's build id is not the target's build_id")

// FileSpec is one file of a target read and compiled, before it joins a
// plan: site indexes and cookies are counted from its own start.
type FileSpec struct {
	File        File
	Sites       []Site
	Attachments []Attachment
	// Locations counts the file's locations per probe id.
	Locations map[int]int
}

// ReadFile reads one more file of target ti (a container's file, an
// upgraded file) and compiles its sites, without changing the plan: it may
// run beside users of the plan. Append adds the result.
func (plan *Plan) ReadFile(ti int, c Candidate) (*FileSpec, error) {
	if ti < 0 || ti >= len(plan.defs) {
		return nil, fmt.Errorf("no target %d", ti)
	}
	return plan.readFile(ti, c, nil)
}

// readFile reads candidate c of target ti, through fl when it is open
// already (it is closed either way).
func (plan *Plan) readFile(ti int, c Candidate, fl *file) (_ *FileSpec, err error) {
	if fl == nil {
		if fl, err = openFile(c.Path, plan.opts); err != nil {
			return nil, err
		}
	}
	defer fl.close()
	def := plan.defs[ti]
	t := def.target
	tg := plan.Targets[ti]
	spec := &FileSpec{
		File: File{
			Target: ti, Path: c.Path, SeenAs: c.SeenAs, ID: fl.id, Executable: fl.executable(), Arch: fl.arch,
			Go: fl.isGo, GoVersion: fl.goVersion, GoIDOffset: fl.goIDOff,
			BuildID: fl.buildID, GoBuildID: fl.goBuildID,
		},
		Locations: map[int]int{},
	}
	if tg.BuildID != "" && fl.buildID != tg.BuildID {
		return nil, fmt.Errorf("target %s: %s: %w (the file has %q, the target wants %q)", t.Path, c.Path, ErrBuildIDMismatch, fl.buildID, tg.BuildID)
	}
	var errs []error
	for _, pd := range def.probes {
		locs, err := fl.locate(pd.probe)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		spec.Locations[pd.id] += len(locs)
		for _, loc := range locs {
			a := Attachment{
				FileOffset:   loc.FileOffset,
				Address:      loc.Address,
				RefCtrOffset: loc.SemaphoreFile,
				Return:       loc.Return,
				Probe:        pd.id,
				Class:        loc.Class,
			}
			if pd.entrySpan < 0 && pd.exitSpan < 0 && !tg.Chosen {
				a.Program, a.Cookie = ProgramCount, uint64(pd.id)
				spec.Attachments = append(spec.Attachments, a)
				continue
			}
			site := Site{Probe: pd.id, EntrySpan: pd.entrySpan, ExitSpan: pd.exitSpan}
			if pd.entrySpan >= 0 {
				if site.Entry, err = compileAll(pd.entry, pd.probe, loc, atEntry); err != nil {
					errs = append(errs, fmt.Errorf("target %s: span %q: %s: %w", t.Path, plan.Spans[pd.entrySpan].Name, pd.probe, err))
				}
			}
			if pd.exitSpan >= 0 {
				if site.Exit, err = compileAll(pd.exit, pd.probe, loc, atExit); err != nil {
					errs = append(errs, fmt.Errorf("target %s: span %q: %s: %w", t.Path, plan.Spans[pd.exitSpan].Name, pd.probe, err))
				}
			}
			a.Program, a.Cookie = ProgramSite, uint64(len(spec.Sites))
			spec.Sites = append(spec.Sites, site)
			spec.Attachments = append(spec.Attachments, a)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return spec, nil
}

// Append adds a file read by ReadFile to the plan and returns its index:
// its sites get the next site ids and its attachments the cookies that
// select them. Only the plan's owner may call it.
func (plan *Plan) Append(spec *FileSpec) int {
	fi := len(plan.Files)
	f := spec.File
	f.Sites = Range{len(plan.Sites), len(plan.Sites) + len(spec.Sites)}
	f.Attachments = Range{len(plan.Attachments), len(plan.Attachments) + len(spec.Attachments)}
	for _, s := range spec.Sites {
		s.File = fi
		plan.Sites = append(plan.Sites, s)
	}
	for _, a := range spec.Attachments {
		a.File = fi
		if a.Program == ProgramSite {
			a.Cookie += uint64(f.Sites.Start)
		}
		plan.Attachments = append(plan.Attachments, a)
	}
	for id, n := range spec.Locations {
		plan.Probes[id].Locations += n
	}
	plan.Files = append(plan.Files, f)
	return fi
}

// FileOf returns the file of a site.
func (plan *Plan) FileOf(site int) *File { return &plan.Files[plan.Sites[site].File] }
