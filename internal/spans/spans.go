// Package spans turns completed spans from the engine (event.SpanRecord) into
// OpenTelemetry traces: wall-clock times from one matched clock pair, trace,
// span and parent ids derived from the thread and the start times of the open
// spans below, attributes decoded as the plan compiled them, and one resource
// per traced file and process. It is pure Go and has no BPF types.
package spans

import (
	"encoding/binary"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/threadctx"
)

// Settings configure a Builder.
type Settings struct {
	// Plan is the plan the tracer was opened with.
	Plan *plan.Plan
	// WallOffsetNs is added to CLOCK_MONOTONIC times to get Unix nanoseconds.
	WallOffsetNs int64
	// Salt keys the derived ids so that two receivers never produce the same ids.
	Salt [2]uint64
	// HostName is the host.name resource attribute.
	HostName string
	// ScopeName and ScopeVersion name the instrumentation scope.
	ScopeName, ScopeVersion string
	// Executable returns process.executable.path of a process image that
	// loaded a target that is a shared library; nil leaves it unset for
	// such targets.
	Executable func(pid uint32, image event.Image) string
	// ContainerID returns container.id of a process image, "" when it runs
	// in no container; nil leaves it unset.
	ContainerID func(pid uint32, image event.Image) string
	// ContextWait bounds how long a span waits for the trace context of an
	// enclosing carrier span (default DefaultContextWait).
	ContextWait time.Duration
	// MaxWaiting bounds the number of waiting spans (default DefaultMaxWaiting).
	MaxWaiting int
	// Now is the clock of ContextWait; nil means time.Now.
	Now func() time.Time
	// ThreadKeys returns the attribute names of the key indexes of a
	// process image's thread contexts (OTEP 4947's
	// threadlocal.attribute_key_map), nil when unknown; nil leaves thread
	// context attributes out. ThreadKeysStale says a record used an index
	// the names do not have (the process added keys since they were read).
	ThreadKeys      func(pid uint32, image event.Image) []string
	ThreadKeysStale func(pid uint32, image event.Image)
	// Observe, when set, is called with each span of a definition that
	// has a metric (plan.SpanDef.Metric) as it joins the output, with
	// its process image; it may read the span, not keep it.
	Observe func(def uint32, pid uint32, image event.Image, sp ptrace.Span)
}

// Counts are per-event problems and outcomes a Builder met, for self-telemetry.
type Counts struct {
	// FetchErrors counts values the engine could not read (attribute left out).
	FetchErrors uint64
	// Truncated counts spans with values that did not fit in their record.
	Truncated uint64
	// Malformed counts stored values that did not decode (attribute left out).
	Malformed uint64
	// Context counts trace-context outcomes, indexed by Outcome.
	Context [outcomes]uint64
	// TraceUnsampled counts, by span definition, the spans dropped because
	// the trace context of their carrier says the trace is not sampled
	// (their sum is Context[ContextUnsampled]).
	TraceUnsampled []uint64
}

// Builder converts batches of engine spans into ptrace.Traces: Build
// converts a slice of spans; Begin, Add for each span and End convert them
// as they are read, without keeping them. It is not safe for concurrent use.
type Builder struct {
	s      Settings
	counts Counts
	text   arena

	// The output being built, its span slice per resource and how many
	// more spans it expects (Begin's hint, less those added).
	td      ptrace.Traces
	groups  map[resourceKey]ptrace.SpanSlice
	lastKey resourceKey
	last    ptrace.SpanSlice
	hasLast bool
	expect  int

	// The last derived trace id: spans of one tree arrive together; and
	// the id derivation of the last thread.
	lastTrace    pcommon.TraceID
	lastTraceKey ctxKey
	ids          threadIDs

	// sites are the compiled decoding of each site's entry and exit
	// values (see site): integer attributes decode from them without
	// touching the plan's fetches.
	sites []siteCode

	// Spans waiting for an enclosing carrier span's trace context.
	waiting      map[ctxKey]*waiting
	waitingSpans int
	waitingByPID map[uint32]int // carrier spans waited for, per process
	nextDeadline time.Time
}

type resourceKey struct {
	file  int
	pid   uint32
	image event.Image
}

// NewBuilder returns a Builder for the given settings.
func NewBuilder(s Settings) *Builder {
	if s.ContextWait <= 0 {
		s.ContextWait = DefaultContextWait
	}
	if s.MaxWaiting <= 0 {
		s.MaxWaiting = DefaultMaxWaiting
	}
	return &Builder{s: s, groups: map[resourceKey]ptrace.SpanSlice{}, waiting: map[ctxKey]*waiting{}, waitingByPID: map[uint32]int{}}
}

// siteCode is the compiled decoding of one site's values: ends[0] those
// of the span it opens, ends[1] those of the span it closes.
type siteCode struct {
	ends [2]endCode
}

// endCode is the compiled decoding of one end's values.
type endCode struct {
	ops []valueOp
	// ints says every value is a plain integer attribute (the common
	// case: no hidden value, no text), which putInts decodes.
	ints bool
}

// site returns the compiled values of site i of the plan.
func (b *Builder) site(i int) *siteCode {
	if i < len(b.sites) {
		return &b.sites[i]
	}
	return b.compileSites(i)
}

// compileSites compiles the values of the sites added to the plan since
// the last call, up to site i (the plan only grows: files attached later
// append theirs), and returns site i's.
func (b *Builder) compileSites(i int) *siteCode {
	for len(b.sites) <= i {
		s := &b.s.Plan.Sites[len(b.sites)]
		b.sites = append(b.sites, siteCode{ends: [2]endCode{compileEnd(s.Entry), compileEnd(s.Exit)}})
	}
	return &b.sites[i]
}

func compileEnd(fetches []plan.Fetch) endCode {
	e := endCode{ops: compileOps(fetches), ints: true}
	for _, op := range e.ops {
		e.ints = e.ints && op.plainInt
	}
	return e
}

// valueOp is how one stored value becomes an attribute, compiled from its
// fetch: a plain integer attribute (no enum, not hex) is converted here;
// anything else goes through the fetch (putValue, hidden.read).
type valueOp struct {
	key                string
	plainInt           bool
	whole              bool // a 64-bit value as stored: int is the raw bits
	fromArg, argSigned bool
	shift, argSize     uint8
	typeSize           uint8
	typeSigned         bool
}

func compileOps(fetches []plan.Fetch) []valueOp {
	ops := make([]valueOp, len(fetches))
	for i := range fetches {
		f := &fetches[i]
		v := f.Value
		ops[i] = valueOp{
			key:        f.Key,
			plainInt:   f.Role == plan.RoleAttribute && f.Store == plan.StoreInt && v.Enum == nil && v.Type.Kind != fetch.KindHex,
			fromArg:    v.FromArg,
			argSigned:  v.ArgSigned,
			shift:      v.Shift,
			argSize:    v.ArgSize,
			typeSize:   v.Type.Size,
			typeSigned: v.Type.Kind == fetch.KindSigned,
		}
		ops[i].whole = !v.FromArg && (v.Type.Size == 0 || v.Type.Size >= 8)
	}
	return ops
}

// int converts a stored integer as intValue does.
func (op *valueOp) int(raw uint64) int64 {
	if op.whole {
		return int64(raw)
	}
	return op.convert(raw)
}

func (op *valueOp) convert(raw uint64) int64 {
	if op.fromArg {
		raw = extend(raw>>op.shift, op.argSize, op.argSigned)
	}
	return int64(extend(raw, op.typeSize, op.typeSigned))
}

// SetWallOffset sets the nanoseconds added to CLOCK_MONOTONIC times to get
// Unix time, for the spans built from now on (the wall clock moved).
func (b *Builder) SetWallOffset(ns int64) { b.s.WallOffsetNs = ns }

// Counts returns the problems and outcomes met so far; the caller may keep
// it (it shares no memory with the Builder).
func (b *Builder) Counts() Counts {
	c := b.counts
	c.TraceUnsampled = slices.Clone(c.TraceUnsampled)
	return c
}

// Begin starts a new output for about n spans (a hint: the first
// resource's span slice is sized for them).
func (b *Builder) Begin(n int) {
	b.td = ptrace.NewTraces()
	clear(b.groups)
	b.hasLast = false
	b.expect = n
	b.text.reset(64 * n)
}

// End returns the output started by Begin: the spans added since, and the
// waiting spans released meanwhile. The Builder keeps no reference to it,
// so that it is garbage as soon as the pipeline is done with it.
func (b *Builder) End() ptrace.Traces {
	b.expire(false)
	td := b.td
	b.td = ptrace.Traces{}
	clear(b.groups)
	b.last, b.hasLast = ptrace.SpanSlice{}, false
	b.text.reset(0)
	return td
}

// slice returns the span slice of a resource in the current output.
func (b *Builder) slice(key resourceKey, hint int) ptrace.SpanSlice {
	if b.hasLast && key == b.lastKey {
		return b.last
	}
	ss, ok := b.groups[key]
	if !ok {
		rs := b.td.ResourceSpans().AppendEmpty()
		b.resource(rs.Resource(), key)
		sc := rs.ScopeSpans().AppendEmpty()
		sc.Scope().SetName(b.s.ScopeName)
		sc.Scope().SetVersion(b.s.ScopeVersion)
		ss = sc.Spans()
		if len(b.groups) == 0 && hint > 0 {
			ss.EnsureCapacity(hint) // usually one process: no regrowth
		}
		b.groups[key] = ss
	}
	b.lastKey, b.last, b.hasLast = key, ss, true
	return ss
}

// finish moves a built span of definition def into the output, unless its
// trace is not sampled.
func (b *Builder) finish(sp ptrace.Span, key resourceKey, def uint32, sampled bool) {
	if !sampled {
		b.counts.Context[ContextUnsampled]++
		if int(def) >= len(b.counts.TraceUnsampled) {
			b.counts.TraceUnsampled = append(b.counts.TraceUnsampled, make([]uint64, int(def)+1-len(b.counts.TraceUnsampled))...)
		}
		b.counts.TraceUnsampled[def]++
		return
	}
	if b.s.Plan.Spans[def].Metric != nil && b.s.Observe != nil {
		b.s.Observe(def, key.pid, key.image, sp)
	}
	sp.MoveTo(b.slice(key, 0).AppendEmpty())
}

// Build converts spans into one ptrace.Traces with a ResourceSpans per
// (target, process), in order of first appearance. Spans that wait for an
// enclosing carrier span's trace context stay in the Builder until it
// arrives (or ContextWait passes); they then leave with a later Build.
func (b *Builder) Build(in []event.SpanRecord) ptrace.Traces {
	b.Begin(len(in))
	for i := range in {
		b.Add(&in[i])
	}
	return b.End()
}

// Add converts one span into the output started by Begin, or holds it for
// the trace context of an enclosing carrier span. It keeps no reference to
// ev or its values: they may be reused once it returns.
func (b *Builder) Add(ev *event.SpanRecord) {
	def := &b.s.Plan.Spans[ev.Def]
	key := resourceKey{b.s.Plan.Sites[ev.EntrySite].File, ev.PID, ev.Image}
	if b.expect > 0 {
		b.expect--
	}
	if def.Carrier == plan.CarrierNone && ev.ContextStartNs == 0 {
		sp := b.slice(key, b.expect+1).AppendEmpty()
		b.span(sp, ev, def)
		if def.Metric != nil && b.s.Observe != nil {
			b.s.Observe(ev.Def, ev.PID, ev.Image, sp)
		}
		return
	}
	sp := ptrace.NewSpan()
	tc, outcome := b.span(sp, ev, def)
	var self *ctxKey
	if def.Carrier != plan.CarrierNone {
		b.counts.Context[outcome]++
		self = &ctxKey{ev.PID, ownerOf(ev), ev.StartNs}
	}
	switch {
	case outcome == ContextFound:
		// A carrier's traceparent wins over the thread context.
		sp.SetTraceID(tc.trace)
		sp.SetParentSpanID(tc.parent)
		sp.SetFlags(0)
		b.finish(sp, key, ev.Def, tc.sampled)
		b.resolve(*self, tc.trace, tc.sampled, false)
	case ev.ContextStartNs != 0:
		b.wait(ctxKey{ev.PID, ownerOf(ev), ev.ContextStartNs}, waiter{span: sp, res: key, def: ev.Def, self: self})
	default:
		trace := sp.TraceID() // finish moves sp out
		b.finish(sp, key, ev.Def, true)
		b.resolve(*self, trace, true, false)
	}
}

func (b *Builder) resource(r pcommon.Resource, key resourceKey) {
	f := &b.s.Plan.Files[key.file]
	t := b.s.Plan.Targets[f.Target]
	attrs := r.Attributes()
	attrs.PutStr(string(semconv.ServiceNameKey), t.ServiceName)
	attrs.PutInt(string(semconv.ProcessPIDKey), int64(key.pid))
	exe := f.SeenAs
	if !f.Executable {
		exe = ""
		if b.s.Executable != nil {
			exe = b.s.Executable(key.pid, key.image)
		}
	}
	if exe != "" {
		attrs.PutStr(string(semconv.ProcessExecutablePathKey), exe)
	}
	if f.Executable && f.BuildID != "" {
		attrs.PutStr(string(semconv.ProcessExecutableBuildIDGNUKey), f.BuildID)
	}
	if f.Executable && f.GoBuildID != "" {
		attrs.PutStr(string(semconv.ProcessExecutableBuildIDGoKey), f.GoBuildID)
	}
	if b.s.ContainerID != nil {
		if id := b.s.ContainerID(key.pid, key.image); id != "" {
			attrs.PutStr(string(semconv.ContainerIDKey), id)
		}
	}
	if b.s.HostName != "" {
		attrs.PutStr(string(semconv.HostNameKey), b.s.HostName)
	}
}

var spanKinds = [...]ptrace.SpanKind{
	config.KindInternal: ptrace.SpanKindInternal,
	config.KindServer:   ptrace.SpanKindServer,
	config.KindClient:   ptrace.SpanKindClient,
	config.KindProducer: ptrace.SpanKindProducer,
	config.KindConsumer: ptrace.SpanKindConsumer,
}

// span fills sp from ev with the derived ids and returns the trace context
// its carrier holds, if the definition has one.
func (b *Builder) span(sp ptrace.Span, ev *event.SpanRecord, def *plan.SpanDef) (traceContext, Outcome) {
	sp.SetName(def.Name)
	kind := ptrace.SpanKindInternal
	if int(def.Kind) < len(spanKinds) && def.Kind != 0 {
		kind = spanKinds[def.Kind]
	}
	sp.SetKind(kind)
	owner := ownerOf(ev)
	ids := b.idsOf(ev.PID, owner)
	switch {
	case ev.Thread.Valid:
		// The trace the thread published (OTEP 4947): the outermost
		// recorded span is a child of the application's span.
		sp.SetTraceID(ev.Thread.TraceID)
		sp.SetFlags(uint32(ev.Thread.Flags))
		if ev.ParentStartNs == 0 {
			sp.SetParentSpanID(ev.Thread.SpanID)
			sp.SetFlags(uint32(ev.Thread.Flags) | remoteParent)
		}
	case ev.ParentStartNs == 0:
		// A root: its trace is its own, derived once (spans of one tree
		// arrive together, but no other span shares a root's).
		sp.SetTraceID(ids.traceID(ev.RootStartNs))
	default:
		if k := (ctxKey{ev.PID, owner, ev.RootStartNs}); k != b.lastTraceKey || b.lastTrace.IsEmpty() {
			b.lastTraceKey, b.lastTrace = k, ids.traceID(ev.RootStartNs)
		}
		sp.SetTraceID(b.lastTrace)
	}
	sp.SetSpanID(ids.spanID(ev.StartNs))
	if ev.ParentStartNs != 0 {
		sp.SetParentSpanID(ids.spanID(ev.ParentStartNs))
	}
	sp.SetStartTimestamp(pcommon.Timestamp(int64(ev.StartNs) + b.s.WallOffsetNs))
	sp.SetEndTimestamp(pcommon.Timestamp(int64(ev.EndNs) + b.s.WallOffsetNs))
	entry, exit := &b.site(int(ev.EntrySite)).ends[0], &b.site(int(ev.ExitSite)).ends[1]
	attrs := sp.Attributes()
	attrs.EnsureCapacity(1 + len(entry.ops) + len(exit.ops))
	attrs.PutInt(string(semconv.ThreadIDKey), int64(ev.TID))
	var h hidden
	if entry.ints && exit.ints && ev.EntryFailed|ev.ExitFailed == 0 {
		// Integers only: no hidden value, nothing failed.
		b.putInts(attrs, entry.ops, ev.Entry)
		b.putInts(attrs, exit.ops, ev.Exit)
	} else {
		b.decode(attrs, b.s.Plan.Sites[ev.EntrySite].Entry, entry.ops, ev.Entry, ev.EntryFailed, &h)
		b.decode(attrs, b.s.Plan.Sites[ev.ExitSite].Exit, exit.ops, ev.Exit, ev.ExitFailed, &h)
	}
	if ev.Truncated {
		b.counts.Truncated++
	}
	if ev.Thread.Valid && ev.ParentStartNs == 0 && len(ev.Thread.Attrs) > 0 {
		b.threadAttributes(attrs, ev)
	}
	if def.Status != nil && h.hasStatus && def.Status.Holds(h.status) {
		sp.Status().SetCode(ptrace.StatusCodeError)
		sp.Status().SetMessage(def.Status.String() + " (value " + strconv.FormatInt(h.status, 10) + ")")
	}
	if len(def.Constants)+len(def.FirstWords)+len(def.Truncates)+len(def.ErrorExits) > 0 {
		derive(sp, attrs, def, b.s.Plan.Sites[ev.ExitSite].Probe, b.s.Plan.Probes)
	}
	switch def.Carrier {
	case plan.CarrierText:
		if v, ok := attrs.Get(def.CarrierKey); ok && v.Type() == pcommon.ValueTypeStr {
			return parseTraceparent(v.Str())
		}
		return traceContext{}, ContextMissing
	case plan.CarrierBinary:
		if h.traceID.v == nil || h.parentSpanID.v == nil {
			return traceContext{}, ContextMissing
		}
		return binaryContext(h.traceID, h.parentSpanID)
	}
	return traceContext{}, ContextMissing
}

// remoteParent are the span flags (bits 8 and 9 of OTLP's Span.flags)
// saying its parent is known to be remote: the application's span is in
// another process.
const remoteParent = 0x300

// threadAttributes puts the attributes of the span's thread context into
// attrs, named through its process's key map; the span's own attributes
// keep their values.
func (b *Builder) threadAttributes(attrs pcommon.Map, ev *event.SpanRecord) {
	if b.s.ThreadKeys == nil {
		return
	}
	keys := b.s.ThreadKeys(ev.PID, ev.Image)
	unknown := threadctx.DecodeAttributes(ev.Thread.Attrs, keys, func(k, v string) {
		if _, ok := attrs.Get(k); !ok {
			attrs.PutStr(k, v)
		}
	})
	if unknown && b.s.ThreadKeysStale != nil {
		b.s.ThreadKeysStale(ev.PID, ev.Image)
	}
}

// hidden holds the values fetched for a span's carrier and status.
type hidden struct {
	traceID, parentSpanID idValue
	status                int64
	hasStatus             bool
}

// read decodes a hidden value at the start of data and returns its size.
func (h *hidden) read(f *plan.Fetch, data []byte) (int, bool) {
	n, ok := valueSize(f, data)
	if !ok {
		return 0, false
	}
	var v idValue
	switch f.Store {
	case plan.StoreInt:
		h.status, h.hasStatus = intValue(f.Value, bpfobj.IntValue(data)), true
		return n, true
	case plan.StoreString, plan.StoreGoString:
		v = idValue{bpfobj.StringValue(data), true}
	case plan.StoreBytes:
		v = idValue{data[:f.MaxLen], false}
	}
	switch f.Role {
	case plan.RoleTraceID:
		h.traceID = v
	case plan.RoleParentSpanID:
		h.parentSpanID = v
	}
	return n, true
}

// decode puts the stored values of one span end into attrs, in fetch
// order, and the hidden ones into h.
func (b *Builder) decode(attrs pcommon.Map, fetches []plan.Fetch, ops []valueOp, data []byte, failed uint8, h *hidden) {
	for i := range ops {
		if failed&(1<<i) != 0 {
			b.counts.FetchErrors++
			continue
		}
		if op := &ops[i]; op.plainInt {
			if len(data) < 8 {
				b.counts.Malformed++
				return
			}
			// Unsigned values above math.MaxInt64 wrap: OpenTelemetry has no unsigned integers.
			attrs.PutInt(op.key, op.int(bpfobj.IntValue(data)))
			data = data[8:]
			continue
		}
		f := &fetches[i]
		var n int
		var ok bool
		if f.Role == plan.RoleAttribute {
			n, ok = putValue(attrs, f, data, &b.text)
		} else {
			n, ok = h.read(f, data)
		}
		if !ok {
			b.counts.Malformed++
			return
		}
		data = data[n:]
	}
}

// putInts puts the stored values of one span end whose values are all
// plain integer attributes (endCode.ints) and stored (none failed), as
// decode would.
func (b *Builder) putInts(attrs pcommon.Map, ops []valueOp, data []byte) {
	for i := range ops {
		if len(data) < 8 {
			b.counts.Malformed++
			return
		}
		// Unsigned values above math.MaxInt64 wrap: OpenTelemetry has no unsigned integers.
		attrs.PutInt(ops[i].key, ops[i].int(bpfobj.IntValue(data)))
		data = data[8:]
	}
}

// valueSize returns the bytes the stored value of f at the start of data
// takes, checking they are there.
func valueSize(f *plan.Fetch, data []byte) (int, bool) {
	return bpfobj.ValueSize(f.Store.FetchKind(), f.MaxLen, data)
}

// putValue decodes the value of f at the start of data into attrs and
// returns the bytes it took.
func putValue(attrs pcommon.Map, f *plan.Fetch, data []byte, text *arena) (int, bool) {
	size, ok := valueSize(f, data)
	if !ok {
		return 0, false
	}
	switch f.Store {
	case plan.StoreInt:
		putInt(attrs, f.Key, f.Value, bpfobj.IntValue(data), text)
	case plan.StoreString, plan.StoreGoString:
		raw := bpfobj.StringValue(data)
		if utf8.Valid(raw) {
			attrs.PutStr(f.Key, text.str(func(b []byte) []byte { return append(b, raw...) }))
		} else {
			attrs.PutStr(f.Key, strings.ToValidUTF8(string(raw), "\uFFFD"))
		}
	case plan.StoreBytes:
		attrs.PutEmptyBytes(f.Key).FromRaw(data[:f.MaxLen])
	}
	return size, true
}

// intValue converts a stored integer as v describes, as a 64-bit value
// (unsigned types keep their bits).
func intValue(v plan.Value, raw uint64) int64 {
	if v.FromArg {
		raw >>= v.Shift
		raw = extend(raw, v.ArgSize, v.ArgSigned)
	}
	return int64(extend(raw, v.Type.Size, v.Type.Kind == fetch.KindSigned))
}

// putInt converts a stored integer as v describes and puts it.
func putInt(attrs pcommon.Map, key string, v plan.Value, raw uint64, text *arena) {
	x := intValue(v, raw)
	if v.Enum != nil {
		// A value named "" (value_names) leaves the attribute out.
		if name := fetch.FormatEnum(v.Enum, x); name != "" {
			attrs.PutStr(key, name)
		}
		return
	}
	if v.Type.Kind == fetch.KindHex {
		attrs.PutStr(key, text.str(func(b []byte) []byte { return strconv.AppendUint(append(b, "0x"...), uint64(x), 16) }))
		return
	}
	// Unsigned values above math.MaxInt64 wrap: OpenTelemetry has no unsigned integers.
	attrs.PutInt(key, x)
}

// arena holds the text of one Build's string attributes: one allocation for
// the batch instead of one per value, made when the first string is.
// Strings point into it, so bytes once written are never changed; a full
// arena is replaced, not reused.
type arena struct {
	buf  []byte
	size int // of the next allocation
}

// reset starts a new arena of about size bytes; it allocates nothing yet.
func (a *arena) reset(size int) {
	a.buf, a.size = nil, max(size, 4096)
}

// str returns a string holding the bytes appended by fill.
func (a *arena) str(fill func([]byte) []byte) string {
	if a == nil {
		return string(fill(nil))
	}
	if a.buf == nil {
		a.buf = make([]byte, 0, max(a.size, 4096))
	}
	start := len(a.buf)
	grown := fill(a.buf)
	if n := len(grown) - start; cap(grown) != cap(a.buf) && n > 0 {
		// fill outgrew the arena and moved it: keep writing in a new one.
		a.buf = grown[start:len(grown):len(grown)]
		return unsafe.String(&a.buf[0], n)
	}
	a.buf = grown
	if len(grown) == start {
		return ""
	}
	return unsafe.String(&a.buf[start], len(grown)-start)
}

// extend keeps the low size bytes of raw, sign-extending them when signed.
func extend(raw uint64, size uint8, signed bool) uint64 {
	if size == 0 || size >= 8 {
		return raw
	}
	bits := uint(size) * 8
	raw &= 1<<bits - 1
	if signed && raw&(1<<(bits-1)) != 0 {
		raw |= math.MaxUint64 << bits
	}
	return raw
}

// SpanID derives the id of the span that started at startNs on a thread
// (or goroutine) of a process.
func (b *Builder) SpanID(pid uint32, owner, startNs uint64) pcommon.SpanID {
	return b.threadIDs(pid, owner).spanID(startNs)
}

// TraceID derives the trace id of the spans nested under the outermost span
// that started at rootStartNs on a thread (or goroutine) of a process.
func (b *Builder) TraceID(pid uint32, owner, rootStartNs uint64) pcommon.TraceID {
	return b.threadIDs(pid, owner).traceID(rootStartNs)
}

// threadIDs holds the part of the id derivation that depends on the
// process and thread (or goroutine) only: spans of one thread come
// together, so the Builder keeps the last one (idsOf) and derives each id
// with one more mixing round.
type threadIDs struct {
	pid                    uint32
	owner                  uint64
	span, traceHi, traceLo uint64
}

const ownerTweak = 0x9e3779b97f4a7c15 // the trace id's second half uses another owner

func (b *Builder) threadIDs(pid uint32, owner uint64) threadIDs {
	return threadIDs{
		pid: pid, owner: owner,
		span:    mixPrefix(b.s.Salt[0], pid, owner),
		traceHi: mixPrefix(b.s.Salt[1], pid, owner),
		traceLo: mixPrefix(b.s.Salt[0]^b.s.Salt[1], pid, owner^ownerTweak),
	}
}

// idsOf returns the id derivation of a thread, from the last one when it
// is the same thread.
func (b *Builder) idsOf(pid uint32, owner uint64) *threadIDs {
	if b.ids.pid != pid || b.ids.owner != owner || b.ids.span == 0 {
		b.ids = b.threadIDs(pid, owner)
	}
	return &b.ids
}

func (t threadIDs) spanID(startNs uint64) pcommon.SpanID {
	var id pcommon.SpanID
	binary.BigEndian.PutUint64(id[:], nonZero(fmix(t.span^startNs)))
	return id
}

func (t threadIDs) traceID(rootStartNs uint64) pcommon.TraceID {
	var id pcommon.TraceID
	binary.BigEndian.PutUint64(id[:8], fmix(t.traceHi^rootStartNs))
	binary.BigEndian.PutUint64(id[8:], nonZero(fmix(t.traceLo^rootStartNs)))
	return id
}

// mixPrefix is a keyed 64-bit mixer (splitmix64 finalizer rounds) over
// the salt, process and owner; an id mixes one more round with a time.
func mixPrefix(salt uint64, pid uint32, owner uint64) uint64 {
	return fmix(fmix(salt^uint64(pid)<<32^owner) ^ owner>>32)
}

func fmix(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// ownerOf returns what paired a span: its goroutine, or its thread.
func ownerOf(ev *event.SpanRecord) uint64 {
	if ev.Owner != 0 {
		return ev.Owner
	}
	return uint64(ev.TID)
}

func nonZero(v uint64) uint64 {
	if v == 0 {
		return 1
	}
	return v
}
