package tracer

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
)

// The engine's span programs (site_hit or site_hit_multi, and
// site_hit_session) are where the kernel's verifier spends its time: about
// 0.4 s of CPU each on this machine kind (Linux 6.18, ~190,000
// instructions processed each), the rest of the engine about 10 ms. Open
// loads them apart from the collection, only those its plan's attachments
// run, side by side (each verification is one system call, on a CPU of
// its own) and beside the writing of the site specs. A program that only
// a file appended later runs is loaded when that file is attached
// (loadProgram). They use the collection's maps: the same frozen
// configuration (.rodata) the rest of the engine was verified with.

// apartPrograms are the names of the programs Open loads apart.
var apartPrograms = []string{bpfobj.ProgramSiteHit, bpfobj.ProgramSiteHitMulti, bpfobj.ProgramSiteHitSession}

// siteProgramName returns the name of the span program that attachments
// run, the uprobe_multi variant's with multi.
func siteProgramName(multi bool) string {
	if multi {
		return bpfobj.ProgramSiteHitMulti
	}
	return bpfobj.ProgramSiteHit
}

// programsRun returns the names of the programs loaded apart that the
// attachments of files [from, to) of the plan run: the span program
// unless every span attachment is a session's, the session program when
// one is. The caller holds t.mu or is Open.
func (t *Tracer) programsRun(from, to int) []string {
	site, session := false, false
	for fi := from; fi < to; fi++ {
		f := t.plan.Files[fi]
		for _, a := range t.plan.Attachments[f.Attachments.Start:f.Attachments.End] {
			if a.Program != plan.ProgramSite {
				continue
			}
			switch {
			case t.session && !a.Return && hasKey(t.returns, int(a.Cookie)):
				session = true
			case t.session && a.Return && t.covered[int(a.Cookie)]:
			default:
				site = true
			}
		}
	}
	var names []string
	if site {
		names = append(names, siteProgramName(t.multi))
	}
	if session {
		names = append(names, bpfobj.ProgramSiteHitSession)
	}
	return names
}

// loadApart loads the programs names of spec, each with the maps of coll
// (loaded from spec without them), side by side, and returns them by
// name. On error it closes the ones it loaded.
func loadApart(spec *ebpf.CollectionSpec, coll *ebpf.Collection, names []string, cache *btf.Cache) (map[string]*ebpf.Program, error) {
	type loaded struct {
		name string
		prog *ebpf.Program
		err  error
	}
	results := make(chan loaded, len(names))
	for _, name := range names {
		go func() {
			prog, err := loadOneApart(spec, coll, name, cache)
			results <- loaded{name, prog, err}
		}()
	}
	out := map[string]*ebpf.Program{}
	var errs []error
	for range names {
		r := <-results
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		out[r.name] = r.prog
	}
	if err := errors.Join(errs...); err != nil {
		for _, p := range out {
			_ = p.Close()
		}
		return nil, err
	}
	return out, nil
}

// loadOneApart loads program name of spec with the maps of coll: a
// collection of that one program whose every map is coll's.
func loadOneApart(spec *ebpf.CollectionSpec, coll *ebpf.Collection, name string, cache *btf.Cache) (*ebpf.Program, error) {
	ps := spec.Programs[name]
	if ps == nil {
		return nil, fmt.Errorf("loading the BPF engine: it has no program %s", name)
	}
	maps := map[string]*ebpf.MapSpec{}
	for n, ms := range spec.Maps {
		if coll.Maps[n] != nil {
			maps[n] = ms
		}
	}
	one := &ebpf.CollectionSpec{
		Maps:      maps,
		Programs:  map[string]*ebpf.ProgramSpec{name: ps},
		Types:     spec.Types,
		ByteOrder: spec.ByteOrder,
	}
	c, err := ebpf.NewCollectionWithOptions(one, ebpf.CollectionOptions{MapReplacements: coll.Maps, Cache: cache})
	if err != nil {
		return nil, loadError(err)
	}
	prog := c.Programs[name]
	delete(c.Programs, name)
	c.Close() // the duplicates of coll's maps
	return prog, nil
}

// loadError describes a refusal to load the engine: the verifier refuses
// with EACCES, which is not a lack of privileges, so it is told apart
// first; the end of its log says why.
func loadError(err error) error {
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		return fmt.Errorf("loading the BPF engine: the kernel's verifier refused it: %-40v", ve)
	}
	if errors.Is(err, os.ErrPermission) {
		return ErrPermission
	}
	return fmt.Errorf("loading the BPF engine: %w", err)
}

// loadProgram returns the program loaded apart called name, loading it
// now when no attachment has run it yet: the engine's spec read again,
// sized as the loaded collection's maps are. The caller holds t.mu.
func (t *Tracer) loadProgram(name string) (*ebpf.Program, error) {
	slot := &t.siteProg
	if name == bpfobj.ProgramSiteHitSession {
		slot = &t.sessionProg
	}
	if prog := slot.Load(); prog != nil {
		return prog, nil
	}
	if t.coll == nil {
		return nil, ErrDetached
	}
	spec, err := bpfobj.Spec()
	if err != nil {
		return nil, fmt.Errorf("reading the embedded BPF engine: %w", err)
	}
	for n, ms := range spec.Maps {
		if m := t.coll.Maps[n]; m != nil {
			ms.MaxEntries = m.MaxEntries()
		}
	}
	progs, err := loadApart(spec, t.coll, []string{name}, nil)
	if err != nil {
		return nil, err
	}
	slot.Store(progs[name])
	return progs[name], nil
}
