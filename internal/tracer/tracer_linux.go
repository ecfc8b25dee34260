package tracer

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
)

// Options size the engine's kernel objects.
type Options struct {
	// RingBufferSize is the span ring buffer's size in bytes: a power of two
	// and a multiple of the page size.
	RingBufferSize int
	// NoRecords makes the engine pair, count and aggregate spans without
	// fetching values or writing records: nobody consumes spans.
	NoRecords bool
	// MaxGoroutines bounds the goroutines of Go targets that can have open
	// spans at once (default DefaultMaxGoroutines); each takes StateBytes
	// while it does. Entries beyond it are counted as no_state.
	MaxGoroutines int
	// PerLocation attaches every location through its own perf event even
	// when the kernel has uprobe_multi links (Linux 6.6), which attach and
	// detach many locations at once.
	PerLocation bool
	// MaxSites bounds the sites of files attached while the receiver runs
	// (AttachFile) beyond the plan's own (default: as many again, at least
	// 1024).
	MaxSites int
	// MaxProcesses bounds the processes of targets that choose their
	// processes (pid:, process:) the engine tracks at once (default 65536).
	MaxProcesses int
	// MaxProcessHits bounds the (probe, process) pairs whose hits are
	// counted apart, for files found through a process's root (default
	// DefaultMaxProcessHits); beyond it, hits count without a process.
	MaxProcessHits int
	// SendExecs makes every exec on the host send a process record
	// (Read's Records.Process), for finding targets' files in processes
	// that start. Targets with a process selector send them anyway.
	SendExecs bool
	// ProbeControl groups links by probe, so that SetProbeAttached can
	// detach and attach one probe without touching the others, and keeps
	// every attached file open (one descriptor each) to attach its probes
	// again to that very file. Without it, links are grouped by file only
	// (fewer links where the kernel has uprobe_multi).
	ProbeControl bool
	// ProcessFacts makes the engine send a process record at every exec,
	// fork, exit and cgroup move on the host, with the process's facts
	// (event.Facts) read while it is alive, so that spans built later
	// carry them.
	ProcessFacts bool
	// Cgroup1Controller names the controller ("pids", "memory", …) whose
	// cgroup v1 hierarchy the process records name (Facts.Cgroup1ID); ""
	// for none (a cgroup v2 host). Unknown to the running kernel, it is an
	// error.
	Cgroup1Controller string
	// ProgramStats turns BPF run-time statistics on while the tracer is
	// open (BPF_ENABLE_STATS, Linux 5.8, CAP_SYS_ADMIN), for ProgramRuns
	// and Calibrate. They cost every BPF program on the host two clock
	// reads per run. When the kernel refuses, statistics are used only if
	// the administrator turned them on (sysctl kernel.bpf_stats_enabled=1).
	ProgramStats bool
	// Prepared is the result of Prepare, made while the plan was being
	// read; nil: Open prepares itself.
	Prepared *Preparation
}

// DefaultMaxProcessHits is the default of Options.MaxProcessHits.
const DefaultMaxProcessHits = 16384

// DefaultMaxProcesses is the default of Options.MaxProcesses.
const DefaultMaxProcesses = 65536

// maxPending bounds the counters of processes user space has not decided.
const maxPending = 16384

// DefaultMaxGoroutines is the default of Options.MaxGoroutines.
const DefaultMaxGoroutines = 4096

// AttachFailure is one attachment the kernel refused.
type AttachFailure struct {
	Attachment plan.Attachment
	// Probe is the probe reference as configured.
	Probe string
	// Path is the file's path as the receiver opened it.
	Path string
	Err  error
}

// AttachError lists every attachment the kernel refused. When Open returns
// it, nothing stayed attached.
type AttachError struct {
	Failures []AttachFailure
}

func (e *AttachError) Error() string {
	f := e.Failures[0]
	msg := fmt.Sprintf("attaching %s in %s at file offset %#x: %v", f.Probe, f.Path, f.Attachment.FileOffset, f.Err)
	if len(e.Failures) > 1 {
		msg += fmt.Sprintf(" (and %d more attachments failed)", len(e.Failures)-1)
	}
	return msg
}

// Unwrap returns every failure's cause.
func (e *AttachError) Unwrap() []error {
	errs := make([]error, len(e.Failures))
	for i, f := range e.Failures {
		errs[i] = f.Err
	}
	return errs
}

// Tracer owns the loaded engine, its links and its ring buffer reader. Its
// methods are for one goroutine at a time, the plan's owner (Read, Stats
// and the process methods may run beside each other); SetProbeAttached,
// ProbeHits and ProgramRuns may run beside the plan's owner too.
type Tracer struct {
	plan    *plan.Plan
	multi   bool
	session bool // entries that may reject a call attach as session uprobes
	// sampling is whether head sampling leaves calls out (span records
	// are emitted): a sampled span's entry may then reject a call too.
	sampling bool
	// returns holds the entry sites attached as session uprobes, each with
	// the site of its return, and covered those return sites: they are
	// not attached by themselves. Only the plan's owner touches them.
	returns map[int]int
	covered map[int]bool
	// plain says the sites of plain spans (plainSite) run the plain span
	// program: uprobe_multi links, without Options.ProbeControl (whose
	// overhead budget reads the shared span program's statistics).
	plain bool
	// countSpec is the spec of the shared count program, countProgs the
	// count programs of probes by probe id (see countProgram; nil: the
	// shared one). Guarded by mu.
	countSpec  *ebpf.ProgramSpec
	countProgs map[int]*ebpf.Program
	control    bool // Options.ProbeControl
	coll       *ebpf.Collection
	probes     *ebpf.Map
	spans      *ebpf.Map
	hists      *ebpf.Map
	procHits   *ebpf.Map
	sites      *ebpf.Map
	lifetime   []link.Link // exec, fork and exit programs
	goStates   *ebpf.Map
	procs      *ebpf.Map
	pending    *ebpf.Map
	// siteProg, sessionProg and plainProg are the span programs, loaded
	// apart (see apartPrograms): nil until an attachment runs them.
	// Written under mu.
	siteProg, sessionProg, plainProg atomic.Pointer[ebpf.Program]
	// threadProcs and threadCounts are the engine's thread-context
	// access per process and its per-CPU counters (OTEP 4947).
	threadProcs, threadCounts *ebpf.Map
	seen                      *ebpf.Program  // the task iterator of RunningProcesses
	procLost                  *ebpf.Variable // process records the ring refused
	plainRefused              *ebpf.Variable // hits the plain span program refused (none: see PlainRefused)
	ring                      *ringReader
	waker                     *waker
	stats                     io.Closer // BPF run-time statistics, while they are on

	// mu guards the links and what is attached.
	mu       sync.Mutex
	files    map[int]*fileLinks    // attached files, by file index
	off      map[int]bool          // probes detached by SetProbeAttached
	closing  map[int]chan struct{} // probes whose links are being closed
	detached bool

	// The record Read passes on, reused: passing a new one through the
	// Records interface would allocate it.
	ev   event.SpanRecord
	proc event.Process
}

// fileLinks are the links of one attached file, and what the tracer keeps
// of its plan to attach it again: the plan's owner may append to the plan
// meanwhile, so SetProbesAttached reads only this copy.
type fileLinks struct {
	path        string
	id          procfs.FileVersion
	attachments []plan.Attachment
	// byProbe holds the links by probe id with Options.ProbeControl;
	// all holds them without (a map per file was ~300 bytes of each of
	// 2,000 targets).
	byProbe map[int][]link.Link
	all     []link.Link
	// fh is the file held open with Options.ProbeControl, to attach its
	// probes again to this very file whatever its path names now.
	fh *os.File
	// attached is the identity of the descriptor the kernel was last
	// given (/proc/self/fd/N), zero before.
	attached procfs.FileVersion
	// pids holds, by probe id, the process the kernel is told to attach
	// the probe's locations in (see kernelPID): the pid: of its target;
	// a probe it does not hold (nil without any) is attached for every
	// process that maps the file.
	pids map[int]uint32
}

// allProbes is the probe of fileLinks.add without Options.ProbeControl.
const allProbes = -1

// add keeps link l of probe (allProbes: of no probe in particular).
func (fl *fileLinks) add(probe int, l link.Link) {
	if probe == allProbes {
		fl.all = append(fl.all, l)
		return
	}
	if fl.byProbe == nil {
		fl.byProbe = map[int][]link.Link{}
	}
	fl.byProbe[probe] = append(fl.byProbe[probe], l)
}

// Open loads the engine sized for plan, writes its site specs and attaches
// every attachment of the plan. Either everything is attached or nothing is:
// on error every link made so far is closed (which also lowers every USDT
// semaphore it raised) and the engine is unloaded.
func Open(plan *plan.Plan, opts Options) (_ *Tracer, err error) {
	page := os.Getpagesize()
	size := opts.RingBufferSize
	if size < page || size&(size-1) != 0 {
		return nil, fmt.Errorf("ring buffer size %d is not a power of two of at least one page (%d bytes)", size, page)
	}
	// Every load of this Open shares one reading of the kernel's BTF
	// (tens of milliseconds each), and none keeps it past Open.
	prep := opts.Prepared
	if prep == nil {
		prep = &Preparation{done: make(chan struct{}), cache: btf.NewCache()}
		prep.spec, prep.err = prepare(prep.cache)
		close(prep.done)
	}
	cache, spec, err := prep.take()
	if err != nil {
		return nil, err
	}
	spec.Maps[bpfobj.MapSites].MaxEntries = uint32(len(plan.Sites) + cmp.Or(opts.MaxSites, max(1024, len(plan.Sites))))
	spec.Maps[bpfobj.MapProbes].MaxEntries = uint32(max(1, len(plan.Probes)))
	spec.Maps[bpfobj.MapSpans].MaxEntries = uint32(max(1, len(plan.Spans)))
	spec.Maps[bpfobj.MapValueHists].MaxEntries = uint32(max(1, len(plan.Histograms)))
	// Files found through a process's root may appear at any time.
	spec.Maps[bpfobj.MapProcHits].MaxEntries = uint32(cmp.Or(opts.MaxProcessHits, DefaultMaxProcessHits))
	spec.Maps[bpfobj.MapRecords].MaxEntries = uint32(size)
	// Goroutine states are cheap to have room for (entries are made on
	// use): a Go file may appear while the receiver runs.
	spec.Maps[bpfobj.MapGoStates].MaxEntries = uint32(cmp.Or(opts.MaxGoroutines, DefaultMaxGoroutines))
	var selectorBits uint64
	chosen := false
	for _, tg := range plan.Targets {
		if tg.Chosen {
			chosen = true
			if tg.Selector != nil {
				selectorBits |= 1 << tg.ChosenBit
			}
		}
	}
	spec.Maps[bpfobj.MapProcs].MaxEntries = 1
	spec.Maps[bpfobj.MapPending].MaxEntries = 1
	if chosen {
		spec.Maps[bpfobj.MapProcs].MaxEntries = uint32(cmp.Or(opts.MaxProcesses, DefaultMaxProcesses))
	}
	// Entries are made on use, by the processes that open spans.
	spec.Maps[bpfobj.MapThreadCtxProcs].MaxEntries = uint32(cmp.Or(opts.MaxProcesses, DefaultMaxProcesses))
	if selectorBits != 0 {
		spec.Maps[bpfobj.MapPending].MaxEntries = maxPending
	}
	ssid := uint32(noCgroup1)
	if opts.Cgroup1Controller != "" {
		if ssid, err = cgroupSubsysID(opts.Cgroup1Controller, cache); err != nil {
			return nil, err
		}
	}
	if err := errors.Join(spec.Variables[bpfobj.VarSelectorBits].Set(selectorBits),
		spec.Variables[bpfobj.VarSendExecs].Set(boolByte(opts.SendExecs)),
		spec.Variables[bpfobj.VarProcessFacts].Set(boolByte(opts.ProcessFacts)),
		spec.Variables[bpfobj.VarCgroup1Subsys].Set(ssid)); err != nil {
		return nil, fmt.Errorf("configuring the BPF engine: %w", err)
	}
	multi := !opts.PerLocation && features.HaveBPFLinkUprobeMulti() == nil
	// Session uprobes need uprobe_multi links, and attach an entry and its
	// return as one link, which SetProbeAttached could not take apart.
	session := multi && !opts.ProbeControl && haveUprobeSession(cache)
	if !session {
		delete(spec.Programs, bpfobj.ProgramSiteHitSession)
	}
	plainSpans := multi && !opts.ProbeControl
	if !plainSpans {
		delete(spec.Programs, bpfobj.ProgramSiteHitPlainMulti)
	}
	for _, name := range []string{bpfobj.ProgramCountHit, bpfobj.ProgramSiteHit, bpfobj.ProgramCountHitProc,
		bpfobj.ProgramCountHitMulti, bpfobj.ProgramSiteHitMulti, bpfobj.ProgramCountHitProcMulti} {
		if isMulti := strings.HasSuffix(name, "_multi"); isMulti != multi {
			delete(spec.Programs, name) // load only the variant in use
		}
	}
	if err := errors.Join(spec.Variables[bpfobj.VarEmitRecords].Set(boolByte(!opts.NoRecords)),
		spec.Variables[bpfobj.VarWakeBytes].Set(uint64(size/wakeFraction))); err != nil {
		return nil, fmt.Errorf("configuring the BPF engine: %w", err)
	}

	countName := bpfobj.ProgramCountHit
	if multi {
		countName = bpfobj.ProgramCountHitMulti
	}
	countSpec := spec.Programs[countName].Copy()
	// The span programs load apart (see apartPrograms), once the maps are.
	apart := &ebpf.CollectionSpec{Maps: spec.Maps, Programs: map[string]*ebpf.ProgramSpec{}, Types: spec.Types, ByteOrder: spec.ByteOrder}
	for _, name := range apartPrograms {
		if ps := spec.Programs[name]; ps != nil {
			apart.Programs[name] = ps
			delete(spec.Programs, name)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{Cache: cache})
	if err != nil {
		return nil, loadError(err)
	}
	t := &Tracer{
		plan:         plan,
		multi:        multi,
		session:      session,
		plain:        plainSpans,
		sampling:     !opts.NoRecords,
		returns:      map[int]int{},
		covered:      map[int]bool{},
		countProgs:   map[int]*ebpf.Program{},
		countSpec:    countSpec,
		control:      opts.ProbeControl,
		coll:         coll,
		probes:       coll.Maps[bpfobj.MapProbes],
		spans:        coll.Maps[bpfobj.MapSpans],
		hists:        coll.Maps[bpfobj.MapValueHists],
		procHits:     coll.Maps[bpfobj.MapProcHits],
		sites:        coll.Maps[bpfobj.MapSites],
		files:        map[int]*fileLinks{},
		off:          map[int]bool{},
		closing:      map[int]chan struct{}{},
		goStates:     coll.Maps[bpfobj.MapGoStates],
		procs:        coll.Maps[bpfobj.MapProcs],
		pending:      coll.Maps[bpfobj.MapPending],
		threadProcs:  coll.Maps[bpfobj.MapThreadCtxProcs],
		threadCounts: coll.Maps[bpfobj.MapThreadCtxCounts],
		seen:         coll.Programs[bpfobj.ProgramSeenTask],
		procLost:     coll.Variables[bpfobj.VarProcessLost],
		plainRefused: coll.Variables[bpfobj.VarPlainRefused],
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, t.Close())
		}
	}()

	if opts.ProgramStats {
		// Refused without CAP_SYS_ADMIN or before Linux 5.8: statsOn
		// then falls back to the sysctl.
		t.stats, _ = ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	}
	for fi := range plan.Files {
		t.pairSessions(fi)
	}
	names := t.programsRun(0, len(plan.Files))
	if opts.ProgramStats && !slices.Contains(names, siteProgramName(multi)) {
		// ProgramRuns reads the span program's statistics.
		names = append(names, siteProgramName(multi))
	}
	loaded := make(chan error, 1)
	go func() {
		progs, err := loadApart(apart, coll, names, cache)
		if err == nil {
			t.siteProg.Store(progs[siteProgramName(multi)])
			t.sessionProg.Store(progs[bpfobj.ProgramSiteHitSession])
			t.plainProg.Store(progs[bpfobj.ProgramSiteHitPlainMulti])
		}
		loaded <- err
	}()
	err = t.writeSites(0, len(plan.Sites))
	if err = errors.Join(err, <-loaded); err != nil {
		return nil, err
	}
	if t.ring, err = newRingReader(coll.Maps[bpfobj.MapRecords]); err != nil {
		return nil, err
	}
	if t.waker, err = newWaker(coll, spec, coll.Maps[bpfobj.MapRecords], size/wakeFraction); err != nil {
		return nil, err
	}
	// Lifetime programs first, so that no span opened by a probe outlives
	// an exec or an exit, and no process escapes its choice.
	lifetime := []string{bpfobj.ProgramOnExec, bpfobj.ProgramOnFork, bpfobj.ProgramOnExit}
	if opts.ProcessFacts {
		lifetime = append(lifetime, bpfobj.ProgramOnCgroupAttach)
	}
	for _, name := range lifetime {
		l, err := link.AttachTracing(link.TracingOptions{Program: coll.Programs[name]})
		if err != nil {
			return nil, fmt.Errorf("attaching %s: %w", name, err)
		}
		t.lifetime = append(t.lifetime, l)
	}
	var failures []AttachFailure
	t.mu.Lock()
	for fi := range plan.Files {
		failures = append(failures, t.attachFile(fi)...)
	}
	t.mu.Unlock()
	if len(failures) > 0 {
		return nil, &AttachError{Failures: failures}
	}
	return t, nil
}

// siteBatch is how many site specs writeSites writes in one system call
// (1,544 bytes each): 20,000 sites take 79 calls, not 20,000.
const siteBatch = 256

// writeSites writes the specs of sites [from, to) of the plan, siteBatch
// at a time (BPF_MAP_UPDATE_BATCH, Linux 5.6).
func (t *Tracer) writeSites(from, to int) error {
	if to > int(t.sites.MaxEntries()) {
		return fmt.Errorf("%d sites are more than the engine has room for (%d: the sites of the files read at Start and max_sites_later)", to, t.sites.MaxEntries())
	}
	keys := make([]uint32, 0, min(siteBatch, to-from))
	values := make([]bpfobj.Site, 0, cap(keys))
	for i := from; i < to; i++ {
		s := t.plan.Sites[i]
		enc, err := encodeSite(s, t.plan)
		if err != nil {
			return fmt.Errorf("encoding site %d of %s: %w", i, t.plan.Probes[s.Probe].Ref, err)
		}
		if r, ok := t.returns[i]; ok {
			enc.Flags |= bpfobj.SiteSession
			enc.ReturnSite = uint32(r)
		}
		// A site the plain span program runs must be one its plain_site
		// takes (plainSpec): that program has no fallback.
		if t.plain && enc.Flags&bpfobj.SiteSession == 0 && plainSite(s, t.plan) && !plainSpec(enc) {
			return fmt.Errorf("encoding site %d of %s: the plain span program would refuse it", i, t.plan.Probes[s.Probe].Ref)
		}
		keys, values = append(keys, uint32(i)), append(values, enc)
		if len(keys) == cap(keys) || i == to-1 {
			if n, err := t.sites.BatchUpdate(keys, values, nil); err != nil {
				first := int(keys[min(n, len(keys)-1)])
				return fmt.Errorf("writing site %d of %s: %w", first, t.plan.Probes[t.plan.Sites[first].Probe].Ref, err)
			}
			keys, values = keys[:0], values[:0]
		}
	}
	return nil
}

// pairSessions notes which entry sites of file fi attach as session
// uprobes, when the tracer uses them (see sessionPairs).
func (t *Tracer) pairSessions(fi int) {
	if !t.session {
		return
	}
	for entry, ret := range sessionPairs(t.plan, fi, t.sampling) {
		t.returns[entry] = ret
		t.covered[ret] = true
	}
}

// AttachFile attaches a file the plan gained after Open (plan.Append):
// all its locations or none (but those of probes SetProbeAttached
// detached, which it attaches with the others of their probe). After
// Detach it attaches nothing and returns ErrDetached.
func (t *Tracer) AttachFile(fi int) error {
	f := t.plan.Files[fi]
	t.pairSessions(fi)
	if err := t.writeSites(f.Sites.Start, f.Sites.End); err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.detached {
		return ErrDetached
	}
	if failures := t.attachFile(fi); len(failures) > 0 {
		return errors.Join(&AttachError{Failures: failures}, t.detachFile(fi))
	}
	return nil
}

// AttachedFileID returns the identity (fstat) of the descriptor file fi
// of the plan was attached through, and whether it is attached.
func (t *Tracer) AttachedFileID(fi int) (procfs.FileVersion, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	fl := t.files[fi]
	if fl == nil || fl.attached == (procfs.FileVersion{}) {
		return procfs.FileVersion{}, false
	}
	return fl.attached, true
}

// DetachFile detaches every location of a file: the kernel lowers its
// semaphores. Its sites stay allocated. It is idempotent.
func (t *Tracer) DetachFile(fi int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.detachFile(fi)
}

func (t *Tracer) detachFile(fi int) error {
	fl := t.files[fi]
	if fl == nil {
		return nil
	}
	delete(t.files, fi)
	return closeFiles([]*fileLinks{fl}, nil)
}

// closeFiles closes the links of files and other links (the lifetime
// programs'), then the files held open, and returns every error, those of
// a file's links as "detaching PATH: …". Each link's close waits for the
// kernel's RCU grace periods (tens of milliseconds here, whether it
// carries one location or a thousand): the links close side by side, at
// most closerSlots at once, so that the waits overlap and detaching 2,000
// files takes about as long as detaching a few. A uprobe's semaphores fall
// as its link closes.
func closeFiles(files []*fileLinks, other []link.Link) error {
	type owned struct {
		l    link.Link
		file int // index in files, -1 for other
	}
	var links []owned
	for i, fl := range files {
		for _, l := range fl.all {
			links = append(links, owned{l, i})
		}
		for _, ls := range fl.byProbe {
			for _, l := range ls {
				links = append(links, owned{l, i})
			}
		}
	}
	for _, l := range other {
		links = append(links, owned{l, -1})
	}
	errs := closeEach(len(links), func(i int) error { return links[i].l.Close() })
	byFile := make([][]error, len(files))
	var out []error
	for i, err := range errs {
		if err == nil {
			continue
		}
		if f := links[i].file; f >= 0 {
			byFile[f] = append(byFile[f], err)
		} else {
			out = append(out, err)
		}
	}
	for i, fl := range files {
		if fl.fh != nil {
			byFile[i] = append(byFile[i], fl.fh.Close())
			fl.fh = nil
		}
		if err := errors.Join(byFile[i]...); err != nil {
			out = append(out, fmt.Errorf("detaching %s: %w", fl.path, err))
		}
	}
	return errors.Join(out...)
}

// SetProbeAttached detaches a probe's locations in every attached file
// (on false), or attaches them again (on true) to the very files they
// were attached to (held open; a file changed in place since is refused
// with ErrFileChanged), all or none. Other probes are not touched; a file
// attached later (AttachFile) leaves out a detached probe's locations
// until it is attached again. It needs Options.ProbeControl and is
// idempotent; after Detach it does nothing. See SetProbesAttached.
func (t *Tracer) SetProbeAttached(probe int, on bool) error {
	return t.SetProbesAttached([]int{probe}, on)
}

// SetProbesAttached detaches or attaches probes as SetProbeAttached does,
// in the order given: the caller puts a span's entry before its exit to
// detach them, after it to attach them. Detaching takes every probe out
// at once and then waits for the kernel (an RCU grace period, 5–200 ms
// here) once: each probe's links start closing in the order given (the
// kernel stops firing a probe when its close begins), none waits for the
// one before to end, and other probes' calls need not wait either.
// Attaching a probe first waits for its own detach to end.
func (t *Tracer) SetProbesAttached(probes []int, on bool) error {
	if !t.control {
		return errors.New("attaching probes one by one needs Options.ProbeControl")
	}
	for _, p := range probes {
		if p < 0 || p >= len(t.plan.Probes) {
			return fmt.Errorf("no probe %d", p)
		}
	}
	t.mu.Lock()
	var closing []chan struct{}
	for _, p := range probes {
		if ch := t.closing[p]; ch != nil {
			closing = append(closing, ch)
		}
	}
	t.mu.Unlock()
	for _, ch := range closing {
		<-ch // the probe's last detach is still waiting for the kernel
	}
	if !on {
		return t.detachProbes(probes)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var errs []error
	for _, p := range probes {
		if t.detached || !t.off[p] {
			continue
		}
		if err := t.attachProbe(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// detachProbes detaches probes in order (see SetProbesAttached).
func (t *Tracer) detachProbes(probes []int) error {
	t.mu.Lock()
	var byProbe [][]link.Link
	var which []int
	done := make(chan struct{})
	for _, p := range probes {
		if t.detached || t.off[p] {
			continue
		}
		t.off[p] = true
		var links []link.Link
		for _, fl := range t.files {
			links = append(links, fl.byProbe[p]...)
			delete(fl.byProbe, p)
		}
		byProbe = append(byProbe, links)
		which = append(which, p)
		t.closing[p] = done
	}
	t.mu.Unlock()
	// One queue in the order given, at most closerSlots at once: a
	// probe's closes take their turns before the next probe's.
	var links []link.Link
	var owner []int // index in which
	for i, ls := range byProbe {
		links = append(links, ls...)
		for range ls {
			owner = append(owner, i)
		}
	}
	byOwner := make([][]error, len(byProbe))
	for i, err := range closeEach(len(links), func(i int) error { return links[i].Close() }) {
		if err != nil {
			byOwner[owner[i]] = append(byOwner[owner[i]], err)
		}
	}
	errs := make([]error, len(byProbe))
	for i := range byOwner {
		if err := errors.Join(byOwner[i]...); err != nil {
			errs[i] = fmt.Errorf("detaching %s: %w", t.plan.Probes[which[i]].Ref, err)
		}
	}
	t.mu.Lock()
	for _, p := range which {
		delete(t.closing, p)
	}
	t.mu.Unlock()
	close(done)
	return errors.Join(errs...)
}

// attachProbe attaches a detached probe in every attached file, all or
// none. The caller holds t.mu.
func (t *Tracer) attachProbe(probe int) error {
	var failures []AttachFailure
	for _, fl := range t.files {
		if fl.fh == nil {
			continue
		}
		failures = append(failures, t.attach(fl, func(a plan.Attachment) bool { return a.Probe == probe })...)
	}
	if len(failures) > 0 {
		var errs []error
		for _, fl := range t.files {
			for _, l := range fl.byProbe[probe] {
				errs = append(errs, l.Close())
			}
			delete(fl.byProbe, probe)
		}
		return errors.Join(&AttachError{Failures: failures}, errors.Join(errs...))
	}
	delete(t.off, probe)
	return nil
}

// ProbeHits returns the hit counts of the given probes (every probe, in
// probe id order, when probes is nil), summed over CPUs; out is reused
// when it has room.
func (t *Tracer) ProbeHits(probes []int, out []uint64) ([]uint64, error) {
	out = out[:0]
	n := len(probes)
	if probes == nil {
		n = len(t.plan.Probes)
	}
	var ps []bpfobj.ProbeStats
	for i := range n {
		p := i
		if probes != nil {
			p = probes[i]
		}
		if err := t.probes.Lookup(uint32(p), &ps); err != nil {
			return out, fmt.Errorf("reading counters of probe %s: %w", t.plan.Probes[p].Ref, err)
		}
		var hits uint64
		for _, c := range ps {
			hits += c.Hits
		}
		out = append(out, hits)
	}
	return out, nil
}

// ProgramRun is the accumulated run time and run count of one engine
// program, from BPF run-time statistics.
type ProgramRun struct {
	Runtime time.Duration
	Count   uint64
}

// ProgramRuns returns the run time and runs so far of the programs probes
// run (by plan.Program), and false when BPF run-time statistics are off
// (see Options.ProgramStats): their counts then stay 0.
func (t *Tracer) ProgramRuns() (map[plan.Program]ProgramRun, bool, error) {
	out := map[plan.Program]ProgramRun{}
	if !t.statsOn() {
		return out, false, nil
	}
	// Open loaded the span program for these statistics: its read is
	// not a load.
	// The plain span program runs sites of spans too: its runs count
	// with the span program's.
	for _, pp := range []struct {
		p    plan.Program
		prog *ebpf.Program
	}{{plan.ProgramCount, t.coll.Programs[t.countName()]}, {plan.ProgramSite, t.siteProg.Load()}, {plan.ProgramSite, t.plainProg.Load()}} {
		run := out[pp.p]
		if pp.prog != nil {
			st, err := pp.prog.Stats()
			if err != nil {
				return out, false, fmt.Errorf("reading BPF run-time statistics: %w", err)
			}
			run.Runtime += st.Runtime
			run.Count += st.RunCount
		}
		out[pp.p] = run
	}
	return out, true, nil
}

// attachmentProgram returns the program attachment a runs: a count-only
// probe's own (countProgram), the plain span program (plainAttachment) or
// the shared one of its kind. The caller holds t.mu.
func (t *Tracer) attachmentProgram(a plan.Attachment) (*ebpf.Program, error) {
	if t.plainAttachment(a) {
		return t.loadProgram(bpfobj.ProgramSiteHitPlainMulti)
	}
	if a.Program == plan.ProgramCount {
		if prog := t.countProgram(a.Probe); prog != nil {
			return prog, nil
		}
	}
	return t.program(a.Program)
}

// countName returns the name of the shared count program.
func (t *Tracer) countName() string {
	if t.multi {
		return bpfobj.ProgramCountHitMulti
	}
	return bpfobj.ProgramCountHit
}

// plainAttachment says whether attachment a runs the plain span program:
// a site of a plain span (plainSite) that is not attached as a session
// uprobe, where the tracer uses the plain program (t.plain).
func (t *Tracer) plainAttachment(a plan.Attachment) bool {
	if !t.plain || a.Program != plan.ProgramSite {
		return false
	}
	if t.session && (!a.Return && hasKey(t.returns, int(a.Cookie)) || a.Return && t.covered[int(a.Cookie)]) {
		return false
	}
	return plainSite(t.plan.Sites[a.Cookie], t.plan)
}

// ownsProgram says whether attachment a runs a program of its probe's own
// (one uprobe_multi link cannot carry two programs). The caller holds
// t.mu.
func (t *Tracer) ownsProgram(a plan.Attachment) bool {
	return a.Program == plan.ProgramCount && t.countProgram(a.Probe) != nil
}

// program returns the loaded program an attachment runs, loading the
// span program if no attachment has run it yet. The caller holds t.mu.
func (t *Tracer) program(p plan.Program) (*ebpf.Program, error) {
	name := bpfobj.ProgramCountHit
	switch p {
	case plan.ProgramSite:
		return t.loadProgram(siteProgramName(t.multi))
	case plan.ProgramCountPerProcess:
		name = bpfobj.ProgramCountHitProc
	}
	if t.multi {
		name += "_multi"
	}
	return t.coll.Programs[name], nil
}

// ErrDetached says the tracer was detached (Detach, Close): it attaches
// nothing more.
var ErrDetached = errors.New("the tracer is detached: it attaches nothing more")

// ErrFileChanged says a traced file is no longer the file the plan was read
// from (replaced at its path, or changed in place): the plan's offsets do
// not apply to it. Resolve the targets again.
var ErrFileChanged = errors.New("the file changed after it was read: its plan does not apply to it")

// openFile takes the open file the plan read file fi from (Plan.TakeFile:
// the file the locator opened once inside its root, never reopened by
// path) and checks it is still as it was read (not written in place
// since). The kernel is then given the path of that descriptor
// (/proc/self/fd/N), so that it attaches exactly that file whatever
// happens at its path meanwhile. The caller owns the file.
func (t *Tracer) openFile(fi int) (*os.File, error) {
	tf := t.plan.Files[fi]
	f := t.plan.TakeFile(fi)
	if f == nil {
		return nil, fmt.Errorf("attaching %s: the plan holds no open file for it (taken already, or the plan was closed)", tf.Path)
	}
	if err := checkFile(f, tf.ID); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// checkFile checks that an open file is still the very file a plan was
// read from, whose identity was want.
func checkFile(f *os.File, want procfs.FileVersion) error {
	id, err := procfs.VersionOf(f)
	if err == nil && id != want {
		err = fmt.Errorf("%w (read: inode %d, %d bytes; now: inode %d, %d bytes)", ErrFileChanged, want.Ino, want.Size, id.Ino, id.Size)
	}
	return err
}

// attachFile attaches every attachment of file fi but those of detached
// probes and returns the ones the kernel refused; the links made are kept
// under fi either way. With Options.ProbeControl the file stays open.
func (t *Tracer) attachFile(fi int) []AttachFailure {
	f := t.plan.Files[fi]
	if f.Attachments.End == f.Attachments.Start {
		if fh := t.plan.TakeFile(fi); fh != nil {
			fh.Close() // nothing to attach: the descriptor is not kept
		}
		return nil
	}
	fl := t.files[fi]
	if fl == nil {
		fl = &fileLinks{
			path: f.Path, id: f.ID,
			// The plan only ever appends: this range stays as it is.
			attachments: t.plan.Attachments[f.Attachments.Start:f.Attachments.End:f.Attachments.End],
		}
		for _, a := range fl.attachments {
			if pid := t.kernelPID(a.Probe); pid != 0 {
				if fl.pids == nil {
					fl.pids = map[int]uint32{}
				}
				fl.pids[a.Probe] = pid
			}
		}
		t.files[fi] = fl
	}
	if fl.fh == nil {
		fh, err := t.openFile(fi)
		if err != nil {
			var failures []AttachFailure
			for _, a := range fl.attachments {
				failures = append(failures, t.failure(fl, a, err))
			}
			return failures
		}
		fl.fh = fh
		if !t.control {
			defer func() { fh.Close(); fl.fh = nil }() // attached uprobes hold the inode, not the descriptor
		}
	}
	return t.attach(fl, func(a plan.Attachment) bool { return !t.off[a.Probe] })
}

// failure describes an attachment of file fl the kernel refused.
func (t *Tracer) failure(fl *fileLinks, a plan.Attachment, err error) AttachFailure {
	if errors.Is(err, os.ErrPermission) {
		err = fmt.Errorf("%w (%w)", ErrPermission, err)
	}
	if errors.Is(err, unix.EINVAL) {
		// The kernel says why in its log only; the reason a node's other
		// tools can cause is one uprobe per file offset, one semaphore.
		err = fmt.Errorf("%w (or another uprobe, of any tool, is at this file offset with another USDT semaphore: the kernel then logs ref_ctr_offset mismatch)", err)
	}
	return AttachFailure{Attachment: a, Probe: t.plan.Probes[a.Probe].Ref, Path: fl.path, Err: err}
}

// attach attaches the attachments of file fl that keep selects, through
// its open file fl.fh, and returns the ones the kernel refused; the links
// made are kept in fl either way.
func (t *Tracer) attach(fl *fileLinks, keep func(plan.Attachment) bool) []AttachFailure {
	var attachments []plan.Attachment
	for _, a := range fl.attachments {
		if keep(a) {
			attachments = append(attachments, a)
		}
	}
	if len(attachments) == 0 {
		return nil
	}
	var failures []AttachFailure
	fail := func(a plan.Attachment, err error) { failures = append(failures, t.failure(fl, a, err)) }
	key := func(a plan.Attachment) int {
		if t.control {
			return a.Probe
		}
		return allProbes
	}
	err := checkFile(fl.fh, fl.id)
	var ex *link.Executable
	path := fmt.Sprintf("/proc/self/fd/%d", fl.fh.Fd())
	if err == nil {
		fl.attached = fl.id
		ex, err = link.OpenExecutable(path)
	}
	if err != nil {
		for _, a := range attachments {
			fail(a, err)
		}
		return failures
	}
	if t.multi {
		var sessions []plan.Attachment
		if t.session {
			attachments, sessions = t.splitSessions(attachments)
		}
		pidOf := func(a plan.Attachment) uint32 { return fl.pids[a.Probe] }
		var prog *ebpf.Program
		if len(sessions) > 0 {
			prog, err = t.loadProgram(bpfobj.ProgramSiteHitSession)
		}
		if err != nil {
			for _, a := range sessions {
				fail(a, err)
			}
			sessions = nil
		}
		// Sessions of targets of different processes take different
		// links: one link has one pid.
		never := func(plan.Attachment) bool { return false }
		for _, g := range groupAttachments(sessions, false, never, never, pidOf) {
			pid := pidOf(g[0])
			l, err := attachSession(path, prog, g, pid)
			if err == nil {
				fl.add(key(g[0]), l)
				continue
			}
			if processGone(pid) {
				continue // nothing of it can run: see processGone
			}
			// Find which locations the kernel refuses, one link each.
			for _, a := range g {
				l, err := attachSession(path, prog, []plan.Attachment{a}, pid)
				if err != nil {
					fail(a, err)
					continue
				}
				fl.add(key(a), l)
			}
		}
		for _, g := range groupAttachments(attachments, t.control, t.ownsProgram, t.plainAttachment, pidOf) {
			pid := pidOf(g[0])
			l, err := t.attachMulti(ex, g, pid)
			if err == nil {
				fl.add(key(g[0]), l)
				continue
			}
			if processGone(pid) {
				continue
			}
			// Find which locations the kernel refuses, one link each.
			for _, a := range g {
				l, err := t.attachMulti(ex, []plan.Attachment{a}, pid)
				if err != nil {
					fail(a, err)
					continue
				}
				fl.add(key(a), l)
			}
		}
		return failures
	}
	for _, a := range attachments {
		pid := fl.pids[a.Probe]
		opts := &link.UprobeOptions{
			Address:       a.FileOffset,
			RefCtrOffset:  a.RefCtrOffset,
			Cookie:        a.Cookie,
			PID:           int(pid), // 0: every process
			TraceFSPrefix: "otelcol_uprobe",
		}
		attach := ex.Uprobe
		if a.Return {
			attach = ex.Uretprobe
		}
		prog, err := t.attachmentProgram(a)
		if err != nil {
			fail(a, err)
			continue
		}
		l, err := attach(eventName(t.plan.Probes[a.Probe].Ref), prog, opts)
		if err != nil {
			if !processGone(pid) {
				fail(a, err)
			}
			continue
		}
		fl.add(key(a), l)
	}
	return failures
}

// kernelPID returns the process the kernel is told to attach probe p's
// locations in: the pid: of its target (a pid in the collector's pid
// namespace, as the kernel reads it), so that no other process that maps
// the file takes its traps or has its USDT semaphores raised, or 0 for
// every process. Only a target of exactly one process is scoped so; a
// process: selector's processes are chosen by the engine alone. The
// engine checks the process at every hit either way. uprobe_multi and
// session links take a pid from Linux 6.11 (6.6 to 6.10 let only the
// process's main thread through): before it, with uprobe_multi links,
// the kernel is told every process. Perf-event uprobes (Options.PerLocation,
// or kernels without uprobe_multi) are scoped on every kernel. The caller
// is the plan's owner.
func (t *Tracer) kernelPID(p int) uint32 {
	pid := t.plan.Targets[t.plan.Probes[p].Target].PID
	if pid <= 0 || t.multi && !multiLinksFilterPID() {
		return 0
	}
	return uint32(pid)
}

// multiLinksFilterPID is haveUprobeMultiPID, a variable so that tests can
// take the path of kernels 6.6 to 6.10 (whole-file links for pid: targets)
// on a newer one.
var multiLinksFilterPID = haveUprobeMultiPID

// haveUprobeMultiPID says whether uprobe_multi links filter by process,
// every thread of it (Linux 6.11, commit 46ba0e49b642 "bpf: fix
// multi-uprobe PID filtering logic"; 6.6 to 6.10 filtered by thread).
func haveUprobeMultiPID() bool {
	major, minor, ok := kernelVersion()
	return ok && (major > 6 || major == 6 && minor >= 11)
}

// processGone says whether the process a link was scoped to (pid, not 0)
// no longer exists, after the kernel refused the link: none of its calls
// can come, so its locations are left out rather than failed, as they
// would attach and never fire for the whole file.
func processGone(pid uint32) bool {
	return pid != 0 && errors.Is(unix.Kill(int(pid), 0), unix.ESRCH)
}

// splitSessions takes out of attachments the entries attached as session
// uprobes, returned apart, and their returns, which those links cover.
func (t *Tracer) splitSessions(attachments []plan.Attachment) (rest, sessions []plan.Attachment) {
	for _, a := range attachments {
		switch {
		case a.Program != plan.ProgramSite:
			rest = append(rest, a)
		case !a.Return && hasKey(t.returns, int(a.Cookie)):
			sessions = append(sessions, a)
		case a.Return && t.covered[int(a.Cookie)]:
		default:
			rest = append(rest, a)
		}
	}
	return rest, sessions
}

func hasKey(m map[int]int, k int) bool {
	_, ok := m[k]
	return ok
}

// attachMulti attaches locations that share a file, process filter,
// direction and program through one uprobe_multi link, in process pid
// only (0: every process that maps the file).
func (t *Tracer) attachMulti(ex *link.Executable, g []plan.Attachment, pid uint32) (link.Link, error) {
	opts := &link.UprobeMultiOptions{PID: pid}
	for _, a := range g {
		opts.Addresses = append(opts.Addresses, a.FileOffset)
		opts.RefCtrOffsets = append(opts.RefCtrOffsets, a.RefCtrOffset)
		opts.Cookies = append(opts.Cookies, a.Cookie)
	}
	prog, err := t.attachmentProgram(g[0])
	if err != nil {
		return nil, err
	}
	if g[0].Return {
		return ex.UretprobeMulti(nil, prog, opts)
	}
	return ex.UprobeMulti(nil, prog, opts)
}

// groupAttachments splits attachments into the groups one uprobe_multi link
// can carry, in order of first appearance: those of one file, direction,
// program (plain: the plain span program's, not their plan.Program's) and
// process the kernel is told (pidOf, 0 for every process); byProbe keeps
// each group to one probe.
func groupAttachments(all []plan.Attachment, byProbe bool, ownProgram, plain func(plan.Attachment) bool, pidOf func(plan.Attachment) uint32) [][]plan.Attachment {
	type key struct {
		file    int
		ret     bool
		program plan.Program
		plain   bool
		probe   int
		pid     uint32
	}
	index := map[key]int{}
	var groups [][]plan.Attachment
	for _, a := range all {
		k := key{a.File, a.Return, a.Program, plain(a), allProbes, pidOf(a)}
		if byProbe || ownProgram(a) {
			k.probe = a.Probe
		}
		i, ok := index[k]
		if !ok {
			i = len(groups)
			index[k] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], a)
	}
	return groups
}

// eventName makes a probe reference usable as a tracefs event name, which
// only the fallback for kernels without the uprobe PMU uses.
func eventName(ref string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
			return r
		}
		return '_'
	}, ref)
}

// Records receives the records Read passes on, in the order the engine
// recorded them (a process's exec or fork before its spans, its exit after
// them).
type Records interface {
	// Span is a completed span. ev and the bytes of its Entry and Exit
	// belong to the Tracer and the ring buffer: they are valid only
	// during the call.
	Span(ev *event.SpanRecord)
	// Process is a process event; p is valid only during the call.
	Process(p *event.Process)
}

// Read passes up to max records from the ring buffer to h, the spans
// decoded in place (nothing is copied but a process record's text), and
// releases their space in the ring once, at the end. It returns how many
// records it read (spans, process events and malformed records alike:
// fewer than max means the ring had no more committed records) and how
// many of them were malformed (counted, skipped). Only one goroutine may
// read.
func (t *Tracer) Read(max int, h Records) (n, malformed int) {
	n, corrupt := t.ring.read(max, func(raw []byte) {
		var rec bpfobj.Record
		if r := bpfobj.PlainSpanRecord(raw); r != nil {
			// The common record, decoded inline: no thread context.
			entry := int(r.EntryLen)
			rec = bpfobj.Record{SpanRecord: r, Entry: raw[:entry:entry], Exit: raw[entry : len(raw)-bpfobj.RecordTrailerSize : len(raw)-bpfobj.RecordTrailerSize]}
		} else {
			if kind, _ := bpfobj.RecordKind(raw); kind == bpfobj.RecordKindProcess {
				p, ok := bpfobj.DecodeProcess(raw)
				if !ok {
					malformed++
					return
				}
				decodeProcess(&t.proc, p)
				h.Process(&t.proc)
				return
			}
			var ok bool
			if rec, ok = bpfobj.DecodeRecord(raw); !ok {
				malformed++
				return
			}
		}
		r := rec.SpanRecord
		if int(r.Span) >= len(t.plan.Spans) || int(r.EntrySite) >= len(t.plan.Sites) || int(r.ExitSite) >= len(t.plan.Sites) {
			malformed++
			return
		}
		// Field by field: a composite literal is built aside and then
		// copied whole, twice the stores for every record.
		ev := &t.ev
		ev.StartNs, ev.EndNs = r.StartNs, r.EndNs
		ev.ParentStartNs, ev.RootStartNs, ev.ContextStartNs = r.ParentStartNs, r.RootStartNs, r.ContextStartNs
		ev.Owner, ev.PID, ev.TID = r.Owner, r.Pid, r.Tid
		ev.Image = event.Image{StartNs: r.ProcessStartNs, ExecID: r.ExecId}
		ev.Def, ev.EntrySite, ev.ExitSite, ev.Depth = r.Span, r.EntrySite, r.ExitSite, r.Depth
		ev.Truncated, ev.Pending = r.Flags&bpfobj.RecordTruncated != 0, r.Flags&bpfobj.RecordPending != 0
		ev.EntryFailed, ev.ExitFailed = r.EntryFailed, r.ExitFailed
		ev.Entry, ev.Exit = rec.Entry, rec.Exit
		if ev.Thread.Valid {
			// Cleared only when the last record set it: zeroing its
			// slice costs a write barrier per record while the garbage
			// collector marks.
			ev.Thread = event.ThreadContext{}
		}
		if rec.Thread != nil {
			ev.Thread.Valid = true
			ev.Thread.TraceID, ev.Thread.SpanID, ev.Thread.Flags, ev.Thread.Attrs = bpfobj.ThreadContextOf(rec.Thread)
		}
		h.Span(&t.ev)
	})
	return n, malformed + corrupt
}

// decodeProcess fills out with a decoded process record.
func decodeProcess(out *event.Process, p bpfobj.Process) {
	*out = event.Process{
		Event:         event.ProcessEvent(p.Event),
		PID:           p.Pid,
		Parent:        p.Parent,
		Image:         event.Image{StartNs: p.StartNs, ExecID: p.ExecId},
		ParentStartNs: p.ParentStartNs,
		TimeNs:        p.TimeNs,
		Filename:      string(p.Filename),
		Args:          string(p.Args),
		Facts: event.Facts{
			CgroupID:  p.CgroupId,
			Cgroup1ID: p.Cgroup1Id,
			ExeIno:    p.ExeIno,
			ExeDev:    kernelDev(p.ExeDev),
		},
	}
}

// kernelDev converts a kernel dev_t (major << 20 | minor) to the encoding
// stat(2) gives.
func kernelDev(dev uint32) uint64 {
	return unix.Mkdev(dev>>20, dev&(1<<20-1))
}

// noCgroup1 is the engine's cgroup1_subsys for none (CGROUP1_NONE).
const noCgroup1 = 0xffffffff

// cgroupSubsysID returns the running kernel's id of a cgroup controller
// (enum cgroup_subsys_id: "pids" is pids_cgrp_id), from its BTF.
func cgroupSubsysID(controller string, cache *btf.Cache) (uint32, error) {
	spec, err := cache.Kernel()
	if err != nil {
		return 0, fmt.Errorf("reading the kernel's BTF for cgroup controller %s: %w", controller, err)
	}
	typ, err := spec.AnyTypeByName("cgroup_subsys_id")
	if err != nil {
		return 0, fmt.Errorf("finding the kernel's cgroup controllers: %w", err)
	}
	enum, ok := typ.(*btf.Enum)
	if !ok {
		return 0, fmt.Errorf("the kernel's cgroup_subsys_id is a %T, not an enum", typ)
	}
	for _, v := range enum.Values {
		if v.Name == controller+"_cgrp_id" && v.Value < 64 {
			return uint32(v.Value), nil
		}
	}
	return 0, fmt.Errorf("the kernel has no cgroup controller %q", controller)
}

// RunningProcesses passes every process running now (thread group
// leaders), as ProcessSeen events with their facts, to fn: what user space
// cannot have learnt from exec and fork records. It runs the engine's task
// iterator (Linux 5.8); fn's argument is valid only during the call.
func (t *Tracer) RunningProcesses(fn func(*event.Process)) error {
	it, err := link.AttachIter(link.IterOptions{Program: t.seen})
	if err != nil {
		return fmt.Errorf("attaching the task iterator: %w", err)
	}
	defer it.Close()
	rd, err := it.Open()
	if err != nil {
		return fmt.Errorf("starting the task iterator: %w", err)
	}
	defer rd.Close()
	// The iterator writes whole records, at most a page's worth per read.
	buf := make([]byte, 64*bpfobj.ProcessTrailerSize)
	var rec [bpfobj.ProcessTrailerSize / 8]uint64 // 8-byte aligned, as DecodeProcess wants
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&rec[0])), bpfobj.ProcessTrailerSize)
	var pending []byte
	var p event.Process
	for {
		n, err := rd.Read(buf)
		pending = append(pending, buf[:n]...)
		for len(pending) >= len(raw) {
			copy(raw, pending)
			pending = pending[len(raw):]
			if d, ok := bpfobj.DecodeProcess(raw); ok && d.Event == bpfobj.ProcessSeen {
				decodeProcess(&p, d)
				fn(&p)
			}
		}
		if errors.Is(err, io.EOF) || (err == nil && n == 0) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the task iterator: %w", err)
		}
	}
}

// ProcessRecordsLost returns how many process records the ring buffer
// refused since Open.
func (t *Tracer) ProcessRecordsLost() uint64 {
	var n uint64
	if t.procLost == nil || t.procLost.Get(&n) != nil {
		return 0
	}
	return n
}

// PlainRefused returns how many hits the plain span program refused since
// Open because their site was not a plain span's: 0 unless the engine's
// plain_site and the tracer's plainSpec disagree (a bug: those hits are
// counted nowhere else).
func (t *Tracer) PlainRefused() uint64 {
	var n uint64
	if t.plainRefused == nil || t.plainRefused.Get(&n) != nil {
		return 0
	}
	return n
}

// wakeFraction is the share of the ring buffer the engine lets fill before
// it wakes a reader that drains on a timer (WaitRecords): a quarter leaves
// the other three to the time the reader takes to wake up.
const wakeFraction = 4

// WaitRecords sleeps until the ring buffer holds records worth reading:
// with first set, until the engine writes one; otherwise until a quarter
// of the ring is full or a record to act on at once is written (see
// TakeUrgent). It returns then, when deadline passes (zero: no
// deadline) or when Interrupt is called, whichever comes first, and at
// once when that is already so. The engine writes records without waking
// anybody unless a WaitRecords asked it to; a record written just as the
// request was made may go without a wakeup, so a wait for the first
// record should have a deadline. Only the goroutine that reads may wait.
func (t *Tracer) WaitRecords(deadline time.Time, first bool) error {
	return t.waker.wait(t.ring, deadline, first)
}

// TakeUrgent says whether the engine wrote a record to act on at once (an
// exec, a pending process's fork, a thread-context question) since the
// last call, and clears that. WaitRecords returns while it is so; the
// reader calls it just before it reads, so that such a record written
// after the read sets it again.
func (t *Tracer) TakeUrgent() bool { return t.waker.takeUrgent() }

// Interrupt ends a WaitRecords in progress, or the next one. Any goroutine
// may call it until Close.
func (t *Tracer) Interrupt() { t.waker.interrupt() }

// Buffered returns at most how many records the ring buffer holds for Read
// now (its bytes over the smallest record's: a process record alone is
// smaller than a span record), 0 only when it is empty.
func (t *Tracer) Buffered() int {
	return t.ring.buffered() / smallestRecord
}

// smallestRecord is the size in the ring of its smallest record, header
// included.
const smallestRecord = ringHeaderSize + min(bpfobj.RecordTrailerSize, bpfobj.ProcessTrailerSize)

// SetProcess tells the engine which chosen targets (by ChosenBit) process
// pid belongs to, for the image that started at startNs, and that it is no
// longer pending. A mask of 0 chooses it for none: its hits no longer count.
// With decided set, it only changes what the engine has for pid (a pending
// process), never adds a process that exited meanwhile.
func (t *Tracer) SetProcess(pid uint32, startNs, mask uint64, decided bool) error {
	e := bpfobj.ProcEntry{Mask: mask, StartNs: startNs}
	flag := ebpf.UpdateAny
	if decided {
		flag = ebpf.UpdateExist
	}
	if err := t.procs.Update(pid, &e, flag); err != nil {
		return fmt.Errorf("choosing process %d: %w", pid, err)
	}
	return nil
}

// ThreadAccess is how the engine reaches the otel_thread_ctx_v1 (OTEP
// 4947) of a process's threads.
type ThreadAccess struct {
	// None says no module the process maps defines the variable: the
	// engine asks again (a ProcessThreadContext record) once the process
	// has mapped more, at most every bpfobj.ThreadAskNs.
	None bool
	// DTV says the variable is at Offset in the TLS block of module
	// Module of each thread's dynamic thread vector (glibc); otherwise at
	// Offset from the thread pointer (static TLS).
	DTV    bool
	Offset int64
	Module uint64
}

// ErrProcessChanged says the engine's entry for a process is no longer
// the image a thread-context answer was found for (it execed or exited,
// its pid was reused): the answer is dropped.
var ErrProcessChanged = errors.New("the process is no longer the image that was looked at")

// SetThreadContext answers the engine's request for process pid's
// thread-context access (a ProcessThreadContext event of image): it
// writes a only while the engine's entry is still that image's, keeping
// when the engine asked.
func (t *Tracer) SetThreadContext(pid uint32, image event.Image, a ThreadAccess) error {
	var e bpfobj.ThreadCtxProc
	if err := t.threadProcs.Lookup(pid, &e); err != nil {
		return fmt.Errorf("thread context of process %d: %w", pid, ErrProcessChanged)
	}
	if e.StartNs != image.StartNs || e.ExecId != image.ExecID {
		return fmt.Errorf("thread context of process %d: %w", pid, ErrProcessChanged)
	}
	switch {
	case a.None:
		e.Access = bpfobj.ThreadCtxNone
	case a.DTV:
		e.Access, e.TlsOffset, e.DtvModule = bpfobj.ThreadCtxDTV, a.Offset, a.Module
	default:
		e.Access, e.TlsOffset, e.DtvModule = bpfobj.ThreadCtxStatic, a.Offset, 0
	}
	if err := t.threadProcs.Update(pid, &e, ebpf.UpdateExist); err != nil {
		return fmt.Errorf("setting the thread context of process %d: %w", pid, err)
	}
	return nil
}

// ThreadContextProcesses returns the number of processes the engine holds
// a thread-context entry of.
func (t *Tracer) ThreadContextProcesses() (int, error) {
	return countKeys(t.threadProcs)
}

// ProcessMask returns the engine's mask for pid, and false when the engine
// does not know the process (it exited, or was never chosen).
func (t *Tracer) ProcessMask(pid uint32) (mask, startNs uint64, ok bool) {
	var e bpfobj.ProcEntry
	if err := t.procs.Lookup(pid, &e); err != nil {
		return 0, 0, false
	}
	return e.Mask, e.StartNs, true
}

// ForgetProcess deletes what the engine knows of pid.
func (t *Tracer) ForgetProcess(pid uint32) {
	_ = t.procs.Delete(pid)
}

// Processes returns the number of processes the engine tracks for chosen
// targets.
func (t *Tracer) Processes() (int, error) {
	return countKeys(t.procs)
}

// PendingEntries returns the number of counters of pending processes the
// engine holds now.
func (t *Tracer) PendingEntries() (int, error) {
	return countKeys(t.pending)
}

// PendingPIDs returns the processes the engine holds pending counters of.
func (t *Tracer) PendingPIDs() ([]uint32, error) {
	var key, next bpfobj.PendingKey
	var out []uint32
	for err := t.pending.NextKey(nil, &next); ; err = t.pending.NextKey(&key, &next) {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return out, nil
		}
		if err != nil {
			return out, fmt.Errorf("reading pending counters: %w", err)
		}
		out = append(out, next.Pid)
		key = next
	}
}

// PendingCount is one counter of a pending process.
type PendingCount struct {
	// Kind is bpfobj.PendingHits (ID a probe id), PendingSpanBucket (ID a
	// span id, Bucket its bucket) or PendingSpanSum (ID a span id).
	Kind   uint8
	ID     uint32
	Bucket uint8
	Value  uint64
}

// TakePending returns the counters the processes pids made while they were
// pending, by pid, and deletes them. It reads the pending map once
// whatever the number of processes: callers gather the processes of a
// batch of records, so that a burst of short-lived processes costs one
// pass over the map per batch, not one per process.
func (t *Tracer) TakePending(pids map[uint32]bool) (map[uint32][]PendingCount, error) {
	out := map[uint32][]PendingCount{}
	if len(pids) == 0 {
		return out, nil
	}
	var key, next bpfobj.PendingKey
	var keys []bpfobj.PendingKey
	for err := t.pending.NextKey(nil, &next); ; err = t.pending.NextKey(&key, &next) {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			break
		}
		if err != nil {
			return out, fmt.Errorf("reading pending counters: %w", err)
		}
		if pids[next.Pid] {
			keys = append(keys, next)
		}
		key = next
	}
	for _, k := range keys {
		var v uint64
		if err := t.pending.LookupAndDelete(&k, &v); err != nil {
			if err := t.pending.Lookup(&k, &v); err != nil {
				continue
			}
			_ = t.pending.Delete(&k)
		}
		out[k.Pid] = append(out[k.Pid], PendingCount{Kind: k.Kind, ID: k.Id, Bucket: k.Bucket, Value: v})
	}
	return out, nil
}

// Stats reads every probe's and span definition's counters, summed over CPUs.
func (t *Tracer) Stats() (event.Stats, error) {
	st := event.Stats{
		Probes: make([]event.ProbeCounts, len(t.plan.Probes)),
		Spans:  make([]event.SpanCounts, len(t.plan.Spans)),
		Values: make([]event.ValueCounts, len(t.plan.Histograms)),
	}
	err := readPerCPU(t.probes, len(st.Probes), func(i int, ps []bpfobj.ProbeStats) {
		for _, c := range ps {
			st.Probes[i].Hits += c.Hits
			st.Probes[i].Lost += c.Lost
		}
	})
	if err != nil {
		return st, fmt.Errorf("reading the probes' counters: %w", err)
	}
	err = readPerCPU(t.spans, len(st.Spans), func(i int, ss []bpfobj.SpanStats) {
		out := &st.Spans[i]
		for _, c := range ss {
			out.SumNs += c.SumNs
			out.Lost += c.Lost
			out.Unmatched += c.Unmatched
			out.Abandoned += c.Abandoned
			out.Overflow += c.Overflow
			out.NoState += c.NoState
			out.ReturnLimit += c.ReturnLimit
			out.Unsampled += c.Unsampled
			out.Short += c.ShortSpans
			out.Filtered += c.Filtered
			out.PendingFull += c.PendingFull
			for b, v := range c.Buckets {
				if v == 0 {
					continue
				}
				if out.Buckets == nil {
					// Most spans of a function pattern never run:
					// 20,000 of them would hold 10 MiB of zeros.
					out.Buckets = make([]uint64, bpfobj.HistBuckets)
				}
				out.Buckets[b] += v
				out.Count += v
			}
		}
	})
	if err != nil {
		return st, fmt.Errorf("reading the spans' counters: %w", err)
	}
	var tc []bpfobj.ThreadCtxStats
	if err := t.threadCounts.Lookup(uint32(0), &tc); err != nil {
		return st, fmt.Errorf("reading the thread-context counters: %w", err)
	}
	for _, c := range tc {
		st.Thread.Read += c.Outcomes[bpfobj.ThreadCtxRead]
		st.Thread.NoContext += c.Outcomes[bpfobj.ThreadCtxNoContext]
		st.Thread.Invalid += c.Outcomes[bpfobj.ThreadCtxInvalid]
		st.Thread.Unreadable += c.Outcomes[bpfobj.ThreadCtxUnreadable]
		st.Thread.Asked += c.Asked
		st.Thread.NoEntry += c.NoEntry
	}
	err = readPerCPU(t.hists, len(st.Values), func(i int, vh []bpfobj.ValueHist) {
		out := &st.Values[i]
		out.Positive = make([]uint64, bpfobj.ValueBuckets)
		out.Negative = make([]uint64, bpfobj.ValueBuckets)
		for _, c := range vh {
			out.Count += c.Count
			out.AddSum(c.SumLo, c.SumHi)
			out.Zero += c.Zero
			out.Unread += c.Unread
			for b := range c.Positive {
				out.Positive[b] += c.Positive[b]
				out.Negative[b] += c.Negative[b]
			}
		}
	})
	if err != nil {
		return st, fmt.Errorf("reading the value histograms: %w", err)
	}
	return st, nil
}

// ProcessHits is the count of one probe's hits in one process.
type ProcessHits struct {
	Probe int
	PID   uint32
	// StartNs is the process's start time, CLOCK_MONOTONIC nanoseconds.
	StartNs uint64
	Hits    uint64
}

// ProcessHits returns the hits counted per process (files found through a
// process's root), summed over CPUs. At most max entries are read.
func (t *Tracer) ProcessHits(max int) ([]ProcessHits, error) {
	var (
		key  bpfobj.ProcHitsKey
		vals []uint64
		out  []ProcessHits
	)
	it := t.procHits.Iterate()
	for len(out) < max && it.Next(&key, &vals) {
		h := ProcessHits{Probe: int(key.Probe), PID: key.Pid, StartNs: key.StartNs}
		for _, v := range vals {
			h.Hits += v
		}
		out = append(out, h)
	}
	if err := it.Err(); err != nil {
		return out, fmt.Errorf("reading hits per process: %w", err)
	}
	return out, nil
}

// ForgetProcessHits deletes the per-process counts of h (of processes that
// are gone); a missing entry is not an error.
func (t *Tracer) ForgetProcessHits(h ProcessHits) error {
	key := bpfobj.ProcHitsKey{Probe: uint32(h.Probe), Pid: h.PID, StartNs: h.StartNs}
	if err := t.procHits.Delete(&key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("forgetting the hits of process %d: %w", h.PID, err)
	}
	return nil
}

// GoroutineStates returns the number of goroutines that have open spans
// now, counted in the kernel's map.
func (t *Tracer) GoroutineStates() (int, error) {
	return countKeys(t.goStates)
}

// countKeys counts the keys of a hash map without reading its values.
func countKeys(m *ebpf.Map) (int, error) {
	key, next := make([]byte, m.KeySize()), make([]byte, m.KeySize())
	n := 0
	for err := m.NextKey(nil, next); ; err = m.NextKey(key, next) {
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("counting the entries of %s: %w", m, err)
		}
		n++
		key, next = next, key
	}
}

// StateBytes returns the kernel memory, in bytes, that one thread or
// goroutine with open spans takes: its frames and its value stack.
func StateBytes() (int, error) {
	spec, err := bpfobj.Spec()
	if err != nil {
		return 0, err
	}
	return int(spec.Maps[bpfobj.MapTaskStates].ValueSize), nil
}

// Detach closes every link: the probes stop firing and the kernel lowers
// the USDT semaphores it raised. The links close side by side (see
// closeFiles): a few grace periods for a few files, 0.5 to 0.7 s for 2,000
// files of three links each on 2 CPUs. The ring buffer and counters stay readable until Close, and no
// file is attached after it (AttachFile fails). Detach is idempotent.
func (t *Tracer) Detach() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.detached {
		return nil
	}
	t.detached = true
	files := make([]*fileLinks, 0, len(t.files))
	for fi, fl := range t.files {
		files = append(files, fl)
		delete(t.files, fi)
	}
	err := closeFiles(files, t.lifetime)
	t.lifetime = nil
	if err != nil {
		return fmt.Errorf("detaching probes: %w", err)
	}
	return nil
}

// Close detaches every probe and unloads the engine. It is idempotent.
func (t *Tracer) Close() error {
	err := t.Detach()
	if t.waker != nil {
		err = errors.Join(err, t.waker.close())
		t.waker = nil
	}
	if t.ring != nil {
		err = errors.Join(err, t.ring.close())
		t.ring = nil
	}
	t.mu.Lock()
	for _, p := range []*atomic.Pointer[ebpf.Program]{&t.siteProg, &t.sessionProg, &t.plainProg} {
		if prog := p.Swap(nil); prog != nil {
			err = errors.Join(err, prog.Close())
		}
	}
	if t.coll != nil {
		t.coll.Close()
		t.coll = nil
	}
	for p, prog := range t.countProgs {
		if prog != nil {
			err = errors.Join(err, prog.Close())
		}
		delete(t.countProgs, p)
	}
	t.mu.Unlock()
	if t.stats != nil {
		err = errors.Join(err, t.stats.Close())
		t.stats = nil
	}
	return err
}
