package spans

import (
	"encoding/hex"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// A span definition with a carrier (trace_context, or trace_id and
// parent_span_id) joins the trace its carrier names, under the carrier's
// span. Spans nested in it on the same thread join that trace too. They end,
// and reach user space, before the carrier span does, so they wait: the
// engine tells each record which enclosing carrier span it waits for
// (context_start_ns), and the Builder holds it until that span's record
// arrives, at most Settings.ContextWait and Settings.MaxWaiting spans.

// Outcome is what became of a trace context, for self-telemetry.
type Outcome uint8

// The outcomes of trace contexts.
const (
	// ContextFound: a valid context was found and used.
	ContextFound Outcome = iota
	// ContextMissing: the carrier held no traceparent (or its ids could not be read).
	ContextMissing
	// ContextInvalid: the carrier held a malformed context (bad hex, all-zero ids, version ff).
	ContextInvalid
	// ContextUnsampled: a span was dropped because its context says the trace is not sampled.
	ContextUnsampled
	// ContextTimeout: a span left without its carrier's context after ContextWait.
	ContextTimeout
	// ContextOverflow: a span left at once because MaxWaiting spans were waiting.
	ContextOverflow
	outcomes
)

var outcomeNames = [outcomes]string{"found", "missing", "invalid", "unsampled", "timeout", "overflow"}

// String returns the outcome's telemetry name.
func (o Outcome) String() string { return outcomeNames[o] }

// Default bounds of waiting spans.
const (
	DefaultContextWait = 10 * time.Second
	DefaultMaxWaiting  = 65536
)

// traceContext is a parsed carrier.
type traceContext struct {
	trace   pcommon.TraceID
	parent  pcommon.SpanID
	sampled bool
}

// ParseTraceparent finds a W3C traceparent ("VV-<32 hex>-<16 hex>-<2 hex>",
// lowercase) in s, as the whole value or inside it (e.g. a sqlcommenter
// comment /*traceparent='00-…'*/). It reports ContextMissing when there is
// none and ContextInvalid for version ff or all-zero ids.
func parseTraceparent(s string) (traceContext, Outcome) {
	const n = 2 + 1 + 32 + 1 + 16 + 1 + 2
	outcome := ContextMissing
	for i := 0; i+n <= len(s); i++ {
		c := s[i : i+n]
		if c[2] != '-' || c[35] != '-' || c[52] != '-' || !isHex(c[:2]) || !isHex(c[3:35]) || !isHex(c[36:52]) || !isHex(c[53:55]) {
			continue
		}
		if i+n < len(s) && isHexByte(s[i+n]) {
			continue // part of a longer hex run
		}
		if i > 0 && isHexByte(s[i-1]) && !strings.HasSuffix(strings.ToLower(s[:i]), "%3d") {
			continue // part of a longer hex run (a percent-encoded "=" is not)
		}
		var tc traceContext
		_, _ = hex.Decode(tc.trace[:], []byte(c[3:35]))
		_, _ = hex.Decode(tc.parent[:], []byte(c[36:52]))
		flags, _ := hex.DecodeString(c[53:55])
		if c[:2] == "ff" || tc.trace.IsEmpty() || tc.parent.IsEmpty() {
			outcome = ContextInvalid // a later one may still be valid
			continue
		}
		tc.sampled = flags[0]&1 == 1
		return tc, ContextFound
	}
	return traceContext{}, outcome
}

func isHexByte(b byte) bool { return b >= '0' && b <= '9' || b >= 'a' && b <= 'f' }

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isHexByte(s[i]) {
			return false
		}
	}
	return true
}

// idValue is a fetched id: raw bytes, or hex text when text is set.
type idValue struct {
	v    []byte
	text bool
}

// binaryContext makes a context of ids fetched as raw bytes or hex text.
// Binary carriers have no flags: the trace counts as sampled.
func binaryContext(trace, parent idValue) (traceContext, Outcome) {
	var tc traceContext
	if !idFrom(tc.trace[:], trace) || !idFrom(tc.parent[:], parent) {
		return traceContext{}, ContextInvalid
	}
	if tc.trace.IsEmpty() || tc.parent.IsEmpty() {
		return traceContext{}, ContextInvalid
	}
	tc.sampled = true
	return tc, ContextFound
}

// idFrom fills id from raw bytes of its size or from its hex text.
func idFrom(id []byte, v idValue) bool {
	if !v.text {
		if len(v.v) != len(id) {
			return false
		}
		copy(id, v.v)
		return true
	}
	text := strings.TrimSpace(string(v.v))
	if len(text) != 2*len(id) || !isHex(strings.ToLower(text)) {
		return false
	}
	_, err := hex.Decode(id, []byte(strings.ToLower(text)))
	return err == nil
}

// ctxKey names an open span by its process, thread (or goroutine) and start time.
type ctxKey struct {
	pid     uint32
	owner   uint64
	startNs uint64
}

// waiter is a built span that waits for the context of an enclosing
// carrier span.
type waiter struct {
	span  ptrace.Span
	res   resourceKey
	def   uint32  // span definition
	self  *ctxKey // set when the waiter is itself a carrier others may wait for
	since time.Time
}

// waiting holds the waiters of one carrier span.
type waiting struct {
	spans []waiter
	since time.Time
}

func (b *Builder) now() time.Time {
	if b.s.Now != nil {
		return b.s.Now()
	}
	return time.Now()
}

// wait holds sp until the carrier span k arrives.
func (b *Builder) wait(k ctxKey, w waiter) {
	if b.waitingSpans >= b.s.MaxWaiting {
		b.counts.Context[ContextOverflow]++
		trace := w.span.TraceID() // finish moves the span out
		b.finish(w.span, w.res, w.def, true)
		if w.self != nil {
			b.resolve(*w.self, trace, true, false)
		}
		return
	}
	w.since = b.now()
	ws, ok := b.waiting[k]
	if !ok {
		ws = &waiting{since: w.since}
		b.waiting[k] = ws
		b.waitingByPID[k.pid]++
		if b.nextDeadline.IsZero() || w.since.Add(b.s.ContextWait).Before(b.nextDeadline) {
			b.nextDeadline = w.since.Add(b.s.ContextWait)
		}
	}
	ws.spans = append(ws.spans, w)
	b.waitingSpans++
}

// resolve releases the spans waiting for carrier span k into the trace;
// timedOut counts each released span as having left without its context.
func (b *Builder) resolve(k ctxKey, trace pcommon.TraceID, sampled, timedOut bool) {
	ws, ok := b.waiting[k]
	if !ok {
		return
	}
	b.forget(k, ws)
	for _, w := range ws.spans {
		if timedOut {
			b.counts.Context[ContextTimeout]++
		}
		w.span.SetTraceID(trace)
		b.finish(w.span, w.res, w.def, sampled)
		if w.self != nil {
			b.resolve(*w.self, trace, sampled, timedOut)
		}
	}
}

// expire releases, with the ids they were built with, the spans that waited
// longer than ContextWait (all of them when all is set).
func (b *Builder) expire(all bool) {
	if len(b.waiting) == 0 {
		return
	}
	now := b.now()
	if !all && now.Before(b.nextDeadline) {
		return
	}
	b.nextDeadline = time.Time{}
	for k, ws := range b.waiting {
		deadline := ws.since.Add(b.s.ContextWait)
		if !all && now.Before(deadline) {
			if b.nextDeadline.IsZero() || deadline.Before(b.nextDeadline) {
				b.nextDeadline = deadline
			}
			continue
		}
		b.release(k, ws)
	}
}

// forget removes the waiters of carrier span k from the waiting spans.
func (b *Builder) forget(k ctxKey, ws *waiting) {
	delete(b.waiting, k)
	b.waitingSpans -= len(ws.spans)
	if b.waitingByPID[k.pid]--; b.waitingByPID[k.pid] <= 0 {
		delete(b.waitingByPID, k.pid)
	}
}

// release lets the spans waiting for carrier span k leave without its
// context, counted as ContextTimeout: they keep the ids they were built
// with, and spans waiting on a waiter that is a carrier follow it.
func (b *Builder) release(k ctxKey, ws *waiting) {
	b.forget(k, ws)
	for _, w := range ws.spans {
		b.counts.Context[ContextTimeout]++
		trace := w.span.TraceID() // finish moves the span out
		b.finish(w.span, w.res, w.def, true)
		if w.self != nil {
			b.resolve(*w.self, trace, true, true)
		}
	}
}

// ProcessEnded lets the spans of process pid that wait for a carrier
// span's context leave at once, as if ContextWait had passed: the process
// exited or replaced its image (exec), and its records come in order, so
// no carrier span of it is still to come. Call it between Begin and End.
func (b *Builder) ProcessEnded(pid uint32) {
	if b.waitingByPID[pid] == 0 {
		return
	}
	for k, ws := range b.waiting {
		if k.pid == pid {
			b.release(k, ws)
		}
	}
}

// NextExpiry returns when the next span waiting for a trace context is due
// to leave without it (Build, End or Flush let it go), zero when none waits.
func (b *Builder) NextExpiry() time.Time {
	if b.waitingSpans == 0 {
		return time.Time{}
	}
	return b.nextDeadline
}

// Waiting returns the number of spans held for a trace context.
func (b *Builder) Waiting() int { return b.waitingSpans }

// Flush returns every span still waiting, with the ids it was built with;
// the receiver calls it at shutdown.
func (b *Builder) Flush() ptrace.Traces {
	b.Begin(0)
	b.expire(true)
	return b.End()
}
