// Package spans turns completed spans from the engine (event.Span) into
// OpenTelemetry traces: wall-clock times from one matched clock pair, trace,
// span and parent ids derived from the thread and the start times of the open
// spans below, attributes decoded as the plan compiled them, and one resource
// per traced file and process. It is pure Go and has no BPF types.
package spans

import (
	"encoding/binary"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/target"
)

// Settings configure a Builder.
type Settings struct {
	// Plan is the plan the tracer was opened with.
	Plan *target.Plan
	// WallOffsetNs is added to CLOCK_MONOTONIC times to get Unix nanoseconds.
	WallOffsetNs int64
	// Salt keys the derived ids so that two receivers never produce the same ids.
	Salt [2]uint64
	// HostName is the host.name resource attribute.
	HostName string
	// ScopeName and ScopeVersion name the instrumentation scope.
	ScopeName, ScopeVersion string
	// Executable returns process.executable.path of a process of a target
	// that is a shared library; nil leaves it unset for such targets.
	Executable func(pid uint32) string
}

// Counts are per-event problems a Builder met, for self-telemetry.
type Counts struct {
	// FetchErrors counts values the engine could not read (attribute left out).
	FetchErrors uint64
	// Truncated counts spans with values that did not fit in their record.
	Truncated uint64
	// Malformed counts stored values that did not decode (attribute left out).
	Malformed uint64
}

// Builder converts batches of engine spans into ptrace.Traces. It is not
// safe for concurrent use.
type Builder struct {
	s      Settings
	counts Counts
	groups map[resourceKey]ptrace.SpanSlice
	text   arena
}

type resourceKey struct {
	target int
	pid    uint32
}

// NewBuilder returns a Builder for the given settings.
func NewBuilder(s Settings) *Builder {
	return &Builder{s: s, groups: map[resourceKey]ptrace.SpanSlice{}}
}

// Counts returns the problems met so far.
func (b *Builder) Counts() Counts { return b.counts }

// Build converts spans into one ptrace.Traces with a ResourceSpans per
// (target, process), in order of first appearance.
func (b *Builder) Build(in []event.Span) ptrace.Traces {
	td := ptrace.NewTraces()
	clear(b.groups)
	b.text.reset(64 * len(in))
	var lastKey resourceKey
	var last ptrace.SpanSlice
	for i := range in {
		ev := &in[i]
		def := b.s.Plan.Spans[ev.Def]
		key := resourceKey{def.Target, ev.PID}
		ss, ok := last, i > 0 && key == lastKey
		if !ok {
			ss, ok = b.groups[key]
		}
		if !ok {
			rs := td.ResourceSpans().AppendEmpty()
			b.resource(rs.Resource(), def.Target, ev.PID)
			sc := rs.ScopeSpans().AppendEmpty()
			sc.Scope().SetName(b.s.ScopeName)
			sc.Scope().SetVersion(b.s.ScopeVersion)
			ss = sc.Spans()
			if len(b.groups) == 0 {
				ss.EnsureCapacity(len(in) - i) // usually one process: no regrowth
			}
			b.groups[key] = ss
		}
		lastKey, last = key, ss
		b.span(ss.AppendEmpty(), ev, def)
	}
	return td
}

// arena holds the text of one Build's string attributes: one allocation for
// the batch instead of one per value. Strings point into it, so bytes once
// written are never changed; a full arena is replaced, not reused.
type arena struct {
	buf []byte
}

func (a *arena) reset(size int) {
	a.buf = make([]byte, 0, max(size, 4096))
}

// str returns a string holding the bytes appended by fill.
func (a *arena) str(fill func([]byte) []byte) string {
	if a == nil {
		return string(fill(nil))
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

func (b *Builder) resource(r pcommon.Resource, ti int, pid uint32) {
	t := b.s.Plan.Targets[ti]
	attrs := r.Attributes()
	attrs.PutStr(string(semconv.ServiceNameKey), t.ServiceName)
	attrs.PutInt(string(semconv.ProcessPIDKey), int64(pid))
	exe := t.Path
	if !t.Executable {
		exe = ""
		if b.s.Executable != nil {
			exe = b.s.Executable(pid)
		}
	}
	if exe != "" {
		attrs.PutStr(string(semconv.ProcessExecutablePathKey), exe)
	}
	if b.s.HostName != "" {
		attrs.PutStr(string(semconv.HostNameKey), b.s.HostName)
	}
}

func (b *Builder) span(sp ptrace.Span, ev *event.Span, def target.Span) {
	sp.SetName(def.Name)
	sp.SetKind(ptrace.SpanKindInternal)
	sp.SetTraceID(b.TraceID(ev.PID, ev.TID, ev.RootStartNs))
	sp.SetSpanID(b.SpanID(ev.PID, ev.TID, ev.StartNs))
	if ev.ParentStartNs != 0 {
		sp.SetParentSpanID(b.SpanID(ev.PID, ev.TID, ev.ParentStartNs))
	}
	sp.SetStartTimestamp(pcommon.Timestamp(int64(ev.StartNs) + b.s.WallOffsetNs))
	sp.SetEndTimestamp(pcommon.Timestamp(int64(ev.EndNs) + b.s.WallOffsetNs))
	attrs := sp.Attributes()
	attrs.EnsureCapacity(1 + len(b.s.Plan.Sites[ev.EntrySite].Entry) + len(b.s.Plan.Sites[ev.ExitSite].Exit))
	attrs.PutInt(string(semconv.ThreadIDKey), int64(ev.TID))
	b.decode(attrs, b.s.Plan.Sites[ev.EntrySite].Entry, ev.Entry, ev.EntryFailed)
	b.decode(attrs, b.s.Plan.Sites[ev.ExitSite].Exit, ev.Exit, ev.ExitFailed)
	if ev.Truncated {
		b.counts.Truncated++
	}
}

// decode puts the stored values of one span end into attrs, in fetch order.
func (b *Builder) decode(attrs pcommon.Map, fetches []target.Fetch, data []byte, failed uint8) {
	for i := range fetches {
		f := &fetches[i]
		if failed&(1<<i) != 0 {
			b.counts.FetchErrors++
			continue
		}
		n, ok := putValue(attrs, f, data, &b.text)
		if !ok {
			b.counts.Malformed++
			return
		}
		data = data[n:]
	}
}

// putValue decodes the value of f at the start of data into attrs and
// returns the bytes it took.
func putValue(attrs pcommon.Map, f *target.Fetch, data []byte, text *arena) (int, bool) {
	switch f.Store {
	case target.StoreInt:
		if len(data) < 8 {
			return 0, false
		}
		putInt(attrs, f.Key, f.Value, binary.LittleEndian.Uint64(data), text)
		return 8, true
	case target.StoreString:
		if len(data) < 2 {
			return 0, false
		}
		n := int(binary.LittleEndian.Uint16(data))
		size := align8(2 + n + 1)
		if size > len(data) || n >= int(f.MaxLen) {
			return 0, false
		}
		raw := data[2 : 2+n]
		if utf8.Valid(raw) {
			attrs.PutStr(f.Key, text.str(func(b []byte) []byte { return append(b, raw...) }))
		} else {
			attrs.PutStr(f.Key, strings.ToValidUTF8(string(raw), "\uFFFD"))
		}
		return size, true
	case target.StoreBytes:
		n := int(f.MaxLen)
		if align8(n) > len(data) {
			return 0, false
		}
		attrs.PutEmptyBytes(f.Key).FromRaw(data[:n])
		return align8(n), true
	}
	return 0, false
}

func align8(n int) int { return (n + 7) &^ 7 }

// putInt converts a stored integer as v describes and puts it.
func putInt(attrs pcommon.Map, key string, v target.Value, raw uint64, text *arena) {
	if v.FromArg {
		raw >>= v.Shift
		raw = extend(raw, v.ArgSize, v.ArgSigned)
	}
	switch v.Type.Kind {
	case fetch.KindSigned:
		attrs.PutInt(key, int64(extend(raw, v.Type.Size, true)))
	case fetch.KindHex:
		x := extend(raw, v.Type.Size, false)
		attrs.PutStr(key, text.str(func(b []byte) []byte { return strconv.AppendUint(append(b, "0x"...), x, 16) }))
	default:
		// Unsigned values above math.MaxInt64 wrap: OpenTelemetry has no unsigned integers.
		attrs.PutInt(key, int64(extend(raw, v.Type.Size, false)))
	}
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

// SpanID derives the id of the span that started at startNs on a thread.
func (b *Builder) SpanID(pid, tid uint32, startNs uint64) pcommon.SpanID {
	var id pcommon.SpanID
	binary.BigEndian.PutUint64(id[:], nonZero(mix(b.s.Salt[0], pid, tid, startNs)))
	return id
}

// TraceID derives the trace id of the spans nested under the outermost span
// that started at rootStartNs on a thread.
func (b *Builder) TraceID(pid, tid uint32, rootStartNs uint64) pcommon.TraceID {
	var id pcommon.TraceID
	binary.BigEndian.PutUint64(id[:8], mix(b.s.Salt[1], pid, tid, rootStartNs))
	binary.BigEndian.PutUint64(id[8:], nonZero(mix(b.s.Salt[0]^b.s.Salt[1], tid, pid, rootStartNs)))
	return id
}

// mix is a keyed 64-bit mixer (splitmix64 finalizer over the inputs).
func mix(salt uint64, a, b uint32, c uint64) uint64 {
	h := salt ^ (uint64(a)<<32 | uint64(b))
	h = fmix(h)
	h = fmix(h ^ c)
	return h
}

func fmix(h uint64) uint64 {
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

func nonZero(v uint64) uint64 {
	if v == 0 {
		return 1
	}
	return v
}
