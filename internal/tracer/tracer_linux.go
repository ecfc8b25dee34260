package tracer

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
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
}

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

// Unwrap returns the first failure's cause.
func (e *AttachError) Unwrap() error { return e.Failures[0].Err }

// Tracer owns the loaded engine, its links and its ring buffer reader.
type Tracer struct {
	plan     *target.Plan
	coll     *ebpf.Collection
	probes   *ebpf.Map
	spans    *ebpf.Map
	links    []link.Link
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
		plan:   plan,
		coll:   coll,
		probes: coll.Maps[bpfobj.MapProbes],
		spans:  coll.Maps[bpfobj.MapSpans],
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, t.Close())
		}
	}()

	sites := coll.Maps[bpfobj.MapSites]
	for i, s := range plan.Sites {
		enc, err := encodeSite(s, plan.Spans)
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
	if err := t.attach(); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *Tracer) attach() error {
	executables := map[string]*link.Executable{}
	var failures []AttachFailure
	for _, a := range t.plan.Attachments {
		ref := t.plan.Probes[a.Probe].Ref
		fail := func(err error) {
			failures = append(failures, AttachFailure{Attachment: a, Probe: ref, Err: err})
		}
		ex, ok := executables[a.Path]
		if !ok {
			var err error
			if ex, err = link.OpenExecutable(a.Path); err != nil {
				fail(err)
				continue
			}
			executables[a.Path] = ex
		}
		prog := t.coll.Programs[bpfobj.ProgramSiteHit]
		if a.Program == target.ProgramCount {
			prog = t.coll.Programs[bpfobj.ProgramCountHit]
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
		l, err := attach(eventName(ref), prog, opts)
		if err != nil {
			switch {
			case errors.Is(err, os.ErrPermission):
				err = fmt.Errorf("%w (%w)", ErrPermission, err)
			case a.PID != 0 && errors.Is(err, unix.ESRCH):
				err = fmt.Errorf("process %d does not exist (%w)", a.PID, err)
			}
			fail(err)
			continue
		}
		t.links = append(t.links, l)
	}
	if len(failures) > 0 {
		return &AttachError{Failures: failures}
	}
	return nil
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

// Links returns the number of attached links.
func (t *Tracer) Links() int { return len(t.links) }

// Drain moves up to max completed spans from the ring buffer into batch and
// returns how many it moved and how many records were malformed (counted,
// skipped). Only one goroutine may drain.
func (t *Tracer) Drain(batch *event.Batch, max int) (n, malformed int) {
	hdrSize := int(unsafe.Sizeof(bpfobj.SpanRecord{}))
	t.ring.read(max, func(rec []byte) {
		if len(rec) < hdrSize {
			malformed++
			return
		}
		h := (*bpfobj.SpanRecord)(unsafe.Pointer(&rec[0]))
		entryEnd := hdrSize + int(h.EntryLen)
		if entryEnd+int(h.ExitLen) != len(rec) || int(h.Span) >= len(t.plan.Spans) ||
			int(h.EntrySite) >= len(t.plan.Sites) || int(h.ExitSite) >= len(t.plan.Sites) {
			malformed++
			return
		}
		data := batch.Copy(rec[hdrSize:])
		batch.Spans = append(batch.Spans, event.Span{
			StartNs:       h.StartNs,
			EndNs:         h.EndNs,
			ParentStartNs: h.ParentStartNs,
			RootStartNs:   h.RootStartNs,
			PID:           h.Pid,
			TID:           h.Tid,
			Def:           h.Span,
			EntrySite:     h.EntrySite,
			ExitSite:      h.ExitSite,
			Depth:         h.Depth,
			Truncated:     h.Flags&bpfobj.RecordTruncated != 0,
			EntryFailed:   h.EntryFailed,
			ExitFailed:    h.ExitFailed,
			Entry:         data[:h.EntryLen:h.EntryLen],
			Exit:          data[h.EntryLen:],
		})
		n++
	})
	return n, malformed
}

// Pending returns the number of bytes in the ring buffer not yet drained.
func (t *Tracer) Pending() uint64 { return t.ring.pending() }

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
			out.Count += c.Count
			out.SumNs += c.SumNs
			out.Lost += c.Lost
			out.Unmatched += c.Unmatched
			out.Abandoned += c.Abandoned
			out.Overflow += c.Overflow
			out.NoState += c.NoState
			out.Unsampled += c.Unsampled
			out.Short += c.ShortSpans
			for b, v := range c.Buckets {
				out.Buckets[b] += v
			}
		}
	}
	return st, nil
}

// Detach closes every link: the probes stop firing and the kernel lowers
// the USDT semaphores it raised. The ring buffer and counters stay readable
// until Close. Detach is idempotent.
func (t *Tracer) Detach() error {
	if t.detached {
		return nil
	}
	t.detached = true
	errs := make([]error, 0, len(t.links))
	for _, l := range t.links {
		errs = append(errs, l.Close())
	}
	t.links = nil
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
