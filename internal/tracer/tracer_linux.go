package tracer

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/target"
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
}

// DefaultMaxGoroutines is the default of Options.MaxGoroutines.
const DefaultMaxGoroutines = 4096

// AttachFailure is one attachment the kernel refused.
type AttachFailure struct {
	Attachment target.Attachment
	// Probe is the probe reference as configured.
	Probe string
	Err   error
}

// AttachError lists every attachment the kernel refused. When Open returns
// it, nothing stayed attached.
type AttachError struct {
	Failures []AttachFailure
}

func (e *AttachError) Error() string {
	f := e.Failures[0]
	msg := fmt.Sprintf("attaching %s in %s at file offset %#x: %v", f.Probe, f.Attachment.Path, f.Attachment.FileOffset, f.Err)
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

// Tracer owns the loaded engine, its links and its ring buffer reader.
type Tracer struct {
	plan     *target.Plan
	multi    bool
	coll     *ebpf.Collection
	probes   *ebpf.Map
	spans    *ebpf.Map
	links    []link.Link
	lifetime []link.Link // exec and exit programs
	goStates *ebpf.Map
	ring     *ringReader
	detached bool
}

// Open loads the engine sized for plan, writes its site specs and attaches
// every attachment of the plan. Either everything is attached or nothing is:
// on error every link made so far is closed (which also lowers every USDT
// semaphore it raised) and the engine is unloaded.
func Open(plan *target.Plan, opts Options) (_ *Tracer, err error) {
	page := os.Getpagesize()
	size := opts.RingBufferSize
	if size < page || size&(size-1) != 0 {
		return nil, fmt.Errorf("ring buffer size %d is not a power of two of at least one page (%d bytes)", size, page)
	}
	if err := CheckKernel(); err != nil {
		return nil, err
	}

	spec, err := bpfobj.Spec()
	if err != nil {
		return nil, fmt.Errorf("reading the embedded BPF engine: %w", err)
	}
	spec.Maps[bpfobj.MapSites].MaxEntries = uint32(max(1, len(plan.Sites)))
	spec.Maps[bpfobj.MapProbes].MaxEntries = uint32(max(1, len(plan.Probes)))
	spec.Maps[bpfobj.MapSpans].MaxEntries = uint32(max(1, len(plan.Spans)))
	spec.Maps[bpfobj.MapRecords].MaxEntries = uint32(size)
	for _, t := range plan.Targets {
		if t.Go {
			spec.Maps[bpfobj.MapGoStates].MaxEntries = uint32(cmp.Or(opts.MaxGoroutines, DefaultMaxGoroutines))
		}
	}
	multi := !opts.PerLocation && features.HaveBPFLinkUprobeMulti() == nil
	for _, name := range []string{bpfobj.ProgramCountHit, bpfobj.ProgramSiteHit, bpfobj.ProgramCountHitMulti, bpfobj.ProgramSiteHitMulti} {
		if isMulti := strings.HasSuffix(name, "_multi"); isMulti != multi {
			delete(spec.Programs, name) // load only the variant in use
		}
	}
	if err := spec.Variables[bpfobj.VarEmitRecords].Set(boolByte(!opts.NoRecords)); err != nil {
		return nil, fmt.Errorf("configuring the BPF engine: %w", err)
	}

	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return nil, ErrPermission
		}
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("loading the BPF engine: the kernel's verifier refused it: %+v", ve)
		}
		return nil, fmt.Errorf("loading the BPF engine: %w", err)
	}
	t := &Tracer{
		plan:     plan,
		multi:    multi,
		coll:     coll,
		probes:   coll.Maps[bpfobj.MapProbes],
		spans:    coll.Maps[bpfobj.MapSpans],
		goStates: coll.Maps[bpfobj.MapGoStates],
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, t.Close())
		}
	}()

	sites := coll.Maps[bpfobj.MapSites]
	for i, s := range plan.Sites {
		enc, err := encodeSite(s, plan)
		if err != nil {
			return nil, fmt.Errorf("encoding site %d of %s: %w", i, plan.Probes[s.Probe].Ref, err)
		}
		if err := sites.Update(uint32(i), &enc, ebpf.UpdateAny); err != nil {
			return nil, fmt.Errorf("writing site %d of %s: %w", i, plan.Probes[s.Probe].Ref, err)
		}
	}

	if t.ring, err = newRingReader(coll.Maps[bpfobj.MapRecords]); err != nil {
		return nil, err
	}
	// Lifetime programs first, so that no span opened by a probe outlives
	// an exec or an exit.
	for _, name := range []string{bpfobj.ProgramOnExec, bpfobj.ProgramOnExit} {
		l, err := link.AttachTracing(link.TracingOptions{Program: coll.Programs[name]})
		if err != nil {
			return nil, fmt.Errorf("attaching %s: %w", name, err)
		}
		t.lifetime = append(t.lifetime, l)
	}
	if err := t.attach(); err != nil {
		return nil, err
	}
	return t, nil
}

// program returns the loaded program an attachment runs.
func (t *Tracer) program(p target.Program) *ebpf.Program {
	name := bpfobj.ProgramSiteHit
	if p == target.ProgramCount {
		name = bpfobj.ProgramCountHit
	}
	if t.multi {
		name += "_multi"
	}
	return t.coll.Programs[name]
}

// ErrFileChanged says a traced file is no longer the file the plan was read
// from (replaced at its path, or changed in place): the plan's offsets do
// not apply to it. Resolve the targets again.
var ErrFileChanged = errors.New("the file changed after it was read: its plan does not apply to it")

// openTarget opens the file of target ti for attaching and checks it is
// the very file the plan was read from. The kernel is then given the path
// of the open descriptor (/proc/self/fd/N), so that it attaches exactly
// that file whatever happens at the configured path meanwhile.
func (t *Tracer) openTarget(ti int) (*os.File, error) {
	tg := t.plan.Targets[ti]
	fd, err := unix.Open(tg.Path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, fmt.Errorf("%w (it is gone)", ErrFileChanged)
		}
		return nil, fmt.Errorf("opening %s: %w", tg.Path, err)
	}
	f := os.NewFile(uintptr(fd), tg.Path)
	id, err := target.StatFileID(f)
	if err == nil && id != tg.File {
		err = fmt.Errorf("%w (read: inode %d, %d bytes; now: inode %d, %d bytes)", ErrFileChanged, tg.File.Inode, tg.File.Size, id.Inode, id.Size)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// attach attaches every attachment of the plan and, if any fails, reports
// every failure; the caller then closes what did attach.
func (t *Tracer) attach() error {
	executables := map[int]*link.Executable{}
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close() // attached uprobes hold the inode, not the descriptor
		}
	}()
	var failures []AttachFailure
	executable := func(a target.Attachment) (*link.Executable, error) {
		ti := t.plan.Probes[a.Probe].Target
		if ex, ok := executables[ti]; ok {
			return ex, nil
		}
		f, err := t.openTarget(ti)
		if err != nil {
			return nil, err
		}
		files = append(files, f)
		ex, err := link.OpenExecutable(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
		if err != nil {
			return nil, err
		}
		executables[ti] = ex
		return ex, nil
	}
	fail := func(a target.Attachment, err error) {
		switch {
		case errors.Is(err, os.ErrPermission):
			err = fmt.Errorf("%w (%w)", ErrPermission, err)
		case a.PID != 0 && (errors.Is(err, unix.ESRCH) || errors.Is(err, os.ErrNotExist)):
			err = fmt.Errorf("process %d does not exist (%w)", a.PID, err)
		}
		failures = append(failures, AttachFailure{Attachment: a, Probe: t.plan.Probes[a.Probe].Ref, Err: err})
	}

	if t.multi {
		for _, g := range groupAttachments(t.plan.Attachments) {
			ex, err := executable(g[0])
			if err != nil {
				for _, a := range g {
					fail(a, err)
				}
				continue
			}
			l, err := t.attachMulti(ex, g)
			if err == nil {
				t.links = append(t.links, l)
				continue
			}
			// Find which locations the kernel refuses, one link each.
			for _, a := range g {
				l, err := t.attachMulti(ex, []target.Attachment{a})
				if err != nil {
					fail(a, err)
					continue
				}
				t.links = append(t.links, l)
			}
		}
	} else {
		for _, a := range t.plan.Attachments {
			ex, err := executable(a)
			if err != nil {
				fail(a, err)
				continue
			}
			opts := &link.UprobeOptions{
				Address:       a.FileOffset,
				RefCtrOffset:  a.RefCtrOffset,
				PID:           a.PID,
				Cookie:        a.Cookie,
				TraceFSPrefix: "otelcol_uprobe",
			}
			attach := ex.Uprobe
			if a.Return {
				attach = ex.Uretprobe
			}
			l, err := attach(eventName(t.plan.Probes[a.Probe].Ref), t.program(a.Program), opts)
			if err != nil {
				fail(a, err)
				continue
			}
			t.links = append(t.links, l)
		}
	}
	if len(failures) > 0 {
		return &AttachError{Failures: failures}
	}
	return nil
}

// attachMulti attaches locations that share a file, process filter,
// direction and program through one uprobe_multi link.
func (t *Tracer) attachMulti(ex *link.Executable, g []target.Attachment) (link.Link, error) {
	opts := &link.UprobeMultiOptions{PID: uint32(g[0].PID)}
	for _, a := range g {
		opts.Addresses = append(opts.Addresses, a.FileOffset)
		opts.RefCtrOffsets = append(opts.RefCtrOffsets, a.RefCtrOffset)
		opts.Cookies = append(opts.Cookies, a.Cookie)
	}
	if g[0].Return {
		return ex.UretprobeMulti(nil, t.program(g[0].Program), opts)
	}
	return ex.UprobeMulti(nil, t.program(g[0].Program), opts)
}

// groupAttachments splits attachments into the groups one uprobe_multi link
// can carry, in order of first appearance.
func groupAttachments(all []target.Attachment) [][]target.Attachment {
	type key struct {
		path    string
		pid     int
		ret     bool
		program target.Program
	}
	index := map[key]int{}
	var groups [][]target.Attachment
	for _, a := range all {
		k := key{a.Path, a.PID, a.Return, a.Program}
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

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
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

// Drain moves up to max completed spans from the ring buffer into batch and
// returns how many it moved and how many records were malformed (counted,
// skipped). Only one goroutine may drain.
func (t *Tracer) Drain(batch *event.Batch, max int) (n, malformed int) {
	_, corrupt := t.ring.read(max, func(raw []byte) {
		rec, ok := bpfobj.DecodeRecord(raw)
		if !ok {
			malformed++
			return
		}
		h := rec.SpanRecord
		if int(h.Span) >= len(t.plan.Spans) || int(h.EntrySite) >= len(t.plan.Sites) || int(h.ExitSite) >= len(t.plan.Sites) {
			malformed++
			return
		}
		data := batch.Copy(raw[:len(rec.Entry)+len(rec.Exit)])
		batch.Spans = append(batch.Spans, event.Span{
			StartNs:        h.StartNs,
			EndNs:          h.EndNs,
			ParentStartNs:  h.ParentStartNs,
			RootStartNs:    h.RootStartNs,
			ContextStartNs: h.ContextStartNs,
			Owner:          h.Owner,
			PID:            h.Pid,
			Image:          event.Image{StartNs: h.ProcessStartNs, ExecID: h.ExecId},
			TID:            h.Tid,
			Def:            h.Span,
			EntrySite:      h.EntrySite,
			ExitSite:       h.ExitSite,
			Depth:          h.Depth,
			Truncated:      h.Flags&bpfobj.RecordTruncated != 0,
			EntryFailed:    h.EntryFailed,
			ExitFailed:     h.ExitFailed,
			Entry:          data[:h.EntryLen:h.EntryLen],
			Exit:           data[h.EntryLen:],
		})
		n++
	})
	return n, malformed + corrupt
}

// Stats reads every probe's and span definition's counters, summed over CPUs.
func (t *Tracer) Stats() (event.Stats, error) {
	st := event.Stats{
		Probes: make([]event.ProbeCounts, len(t.plan.Probes)),
		Spans:  make([]event.SpanCounts, len(t.plan.Spans)),
	}
	var ps []bpfobj.ProbeStats
	for i := range st.Probes {
		if err := t.probes.Lookup(uint32(i), &ps); err != nil {
			return st, fmt.Errorf("reading counters of probe %s: %w", t.plan.Probes[i].Ref, err)
		}
		for _, c := range ps {
			st.Probes[i].Hits += c.Hits
			st.Probes[i].Lost += c.Lost
		}
	}
	var ss []bpfobj.SpanStats
	for i := range st.Spans {
		if err := t.spans.Lookup(uint32(i), &ss); err != nil {
			return st, fmt.Errorf("reading counters of span %s: %w", t.plan.Spans[i].Name, err)
		}
		out := &st.Spans[i]
		out.Buckets = make([]uint64, bpfobj.HistBuckets)
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
			for b, v := range c.Buckets {
				out.Buckets[b] += v
				out.Count += v
			}
		}
	}
	return st, nil
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
// the USDT semaphores it raised. The ring buffer and counters stay readable
// until Close. Detach is idempotent.
func (t *Tracer) Detach() error {
	if t.detached {
		return nil
	}
	t.detached = true
	// A uprobe perf event waits for an RCU grace period when it goes (about
	// 0.1 s each here); a uprobe_multi link waits once for all its locations.
	errs := make([]error, 0, len(t.links)+len(t.lifetime))
	for _, l := range append(t.links, t.lifetime...) {
		errs = append(errs, l.Close())
	}
	t.links, t.lifetime = nil, nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("detaching probes: %w", err)
	}
	return nil
}

// Close detaches every probe and unloads the engine. It is idempotent.
func (t *Tracer) Close() error {
	err := t.Detach()
	if t.ring != nil {
		err = errors.Join(err, t.ring.close())
		t.ring = nil
	}
	if t.coll != nil {
		t.coll.Close()
		t.coll = nil
	}
	return err
}
