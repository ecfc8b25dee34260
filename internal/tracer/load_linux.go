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

// The engine's span programs (site_hit or site_hit_multi,
// site_hit_session and site_hit_plain_multi) are where the kernel's verifier spends its time: about
// 0.4 s of CPU each on this machine kind (Linux 6.18, ~190,000
// instructions processed each), the rest of the engine about 10 ms. Open
// loads them apart from the collection, only those its plan's attachments
// run, side by side (each verification is one system call, on a CPU of
// its own) and beside the writing of the site specs. A program that only
// a file appended later runs is loaded when that file is attached
// (loadProgram). They use the collection's maps: the same frozen
// configuration (.rodata) the rest of the engine was verified with.

// apartPrograms are the names of the programs Open loads apart.
var apartPrograms = []string{bpfobj.ProgramSiteHit, bpfobj.ProgramSiteHitMulti, bpfobj.ProgramSiteHitSession, bpfobj.ProgramSiteHitPlainMulti}

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
// unless every span attachment is a session's or a plain span's, the
// session program when one is a session's, the plain span program when
// one is a plain span's. The caller holds t.mu or is Open.
func (t *Tracer) programsRun(from, to int) []string {
	site, session, plainSpan := false, false, false
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
			case t.plainAttachment(a):
				plainSpan = true
			default:
				site = true
			}
		}
	}
	var names []string
	if site {
		names = append(names, siteProgramName(t.multi))
	}
	if plainSpan {
		names = append(names, bpfobj.ProgramSiteHitPlainMulti)
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
	switch name {
	case bpfobj.ProgramSiteHitSession:
		slot = &t.sessionProg
	case bpfobj.ProgramSiteHitPlainMulti:
		slot = &t.plainProg
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

// Preparation is what Open reads of the kernel and of the embedded engine
// whatever the plan: the kernel's BTF (read once, tens of milliseconds),
// its checks (CheckKernel, the session uprobe check) and the engine's
// parsed spec. Prepare makes it in the background, so that a caller can
// read its targets meanwhile; Open takes it through Options.Prepared.
// A Preparation holds no kernel object; its methods are for one goroutine.
type Preparation struct {
	done  chan struct{}
	cache *btf.Cache
	spec  *ebpf.CollectionSpec
	err   error
}

// Prepare starts preparing an Open (see Preparation) in a goroutine of its
// own, which ends by itself. Opens after the first that take it share its
// BTF and checks, and parse a spec of their own.
func Prepare() *Preparation {
	p := &Preparation{done: make(chan struct{}), cache: btf.NewCache()}
	go func() {
		defer close(p.done)
		p.spec, p.err = prepare(p.cache)
	}()
	return p
}

// prepare checks the kernel and reads the engine's spec, through cache.
func prepare(cache *btf.Cache) (*ebpf.CollectionSpec, error) {
	if err := checkKernel(cache); err != nil {
		return nil, err
	}
	// The first call reads the kernel's BTF: through cache, once.
	haveUprobeSession(cache)
	spec, err := bpfobj.Spec()
	if err != nil {
		return nil, fmt.Errorf("reading the embedded BPF engine: %w", err)
	}
	return spec, nil
}

// take waits for the preparation and returns its cache and, to the first
// take only, its spec (Open changes the spec it loads; a later Open
// parses one of its own).
func (p *Preparation) take() (*btf.Cache, *ebpf.CollectionSpec, error) {
	<-p.done
	spec := p.spec
	p.spec = nil
	if p.err == nil && spec == nil {
		var err error
		if spec, err = bpfobj.Spec(); err != nil {
			return nil, nil, fmt.Errorf("reading the embedded BPF engine: %w", err)
		}
	}
	return p.cache, spec, p.err
}
