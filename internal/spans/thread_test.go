package spans

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/otel-uprobe/uprobereceiver/internal/event"
)

// The application's span as its thread published it (OTEP 4947).
var (
	appTrace = [16]byte{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	appSpan  = [8]byte{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}
)

// withThread gives a record the thread context of the application's span.
func withThread(ev event.SpanRecord, attrs ...byte) event.SpanRecord {
	ev.Thread = event.ThreadContext{Valid: true, TraceID: appTrace, SpanID: appSpan, Flags: 1, Attrs: attrs}
	return ev
}

// A tree that opened under a published context: its outermost span is a
// child of the application's span, with the context's flags and a remote
// parent; the spans nested in it keep their probe parents, in the same
// trace.
func TestThreadContextTree(t *testing.T) {
	b := NewBuilder(ctxSettings(ctxPlan(t), newClock()))
	h := th{10, 11}
	root := withThread(h.work(100, 1000, 0, 100, 0))
	child := withThread(h.work(200, 600, 100, 100, 0))
	grandchild := withThread(h.work(300, 400, 200, 100, 0))
	other := h.work(2000, 2100, 0, 2000, 0) // after the context was detached
	got := build(t, b, []event.SpanRecord{grandchild, child, root, other}, grandchild, child, root, other)
	trace := pcommon.TraceID(appTrace)
	expect(t, b, got, root, trace, pcommon.SpanID(appSpan))
	expect(t, b, got, child, trace, b.SpanID(h.pid, uint64(h.tid), 100))
	expect(t, b, got, grandchild, trace, b.SpanID(h.pid, uint64(h.tid), 200))
	expectDerived(t, b, got, other)
	assert.Equal(t, uint32(0x301), got[b.SpanID(h.pid, uint64(h.tid), 100)].span.Flags(), "sampled, remote parent")
	assert.Equal(t, uint32(0x1), got[b.SpanID(h.pid, uint64(h.tid), 200)].span.Flags())
	assert.Equal(t, uint32(0), got[b.SpanID(h.pid, uint64(h.tid), 2000)].span.Flags())
}

// A carrier's traceparent wins over the thread context for the spans it
// covers: the carrier span and those nested in it join the carrier's
// trace; with no traceparent in the carrier, they stay in the thread's.
func TestThreadContextCarrierWins(t *testing.T) {
	b := NewBuilder(ctxSettings(ctxPlan(t), newClock()))
	h := th{10, 11}
	root := withThread(h.work(100, 1000, 0, 100, 0))
	carrier := withThread(h.query(200, 800, 100, 100, 0, sqlWith(tpA)))
	nested := withThread(h.work(300, 400, 200, 100, 200))
	missing := withThread(h.query(850, 900, 100, 100, 0, "SELECT 1"))
	got := build(t, b, []event.SpanRecord{nested, carrier, missing, root}, nested, carrier, missing, root)
	thread, a := pcommon.TraceID(appTrace), mustTraceID(t, ctxTraceA)
	expect(t, b, got, root, thread, pcommon.SpanID(appSpan))
	expect(t, b, got, carrier, a, mustSpanID(t, ctxParentA))
	expect(t, b, got, nested, a, b.SpanID(h.pid, uint64(h.tid), 200))
	expect(t, b, got, missing, thread, b.SpanID(h.pid, uint64(h.tid), 100))
	assert.Equal(t, uint32(0), got[b.SpanID(h.pid, uint64(h.tid), 200)].span.Flags(), "the carrier's context, not the thread's flags")

	// A root carrier with a traceparent: the carrier wins there too.
	b = NewBuilder(ctxSettings(ctxPlan(t), newClock()))
	rootCarrier := withThread(h.server(100, 1000, 0, 100, 0, tpB))
	got = build(t, b, []event.SpanRecord{rootCarrier}, rootCarrier)
	expect(t, b, got, rootCarrier, mustTraceID(t, ctxTraceB), mustSpanID(t, ctxParentB))
}

// With the key map of the process, the context's attributes go on the span
// that is the application span's child, not on its own attributes' keys
// nor on nested spans; an index the map lacks asks for the map again.
func TestThreadContextAttributes(t *testing.T) {
	s := ctxSettings(ctxPlan(t), newClock())
	var stale []uint32
	s.ThreadKeys = func(pid uint32, _ event.Image) []string {
		if pid != 10 {
			return nil
		}
		return []string{"http.route", "n", "http.request.method"}
	}
	s.ThreadKeysStale = func(pid uint32, _ event.Image) { stale = append(stale, pid) }
	b := NewBuilder(s)
	h := th{10, 11}
	attrs := []byte{0, 2, '/', 'a', 1, 1, 'x', 2, 3, 'G', 'E', 'T'}
	root := withThread(h.work(100, 1000, 0, 100, 0), attrs...)
	child := withThread(h.work(200, 600, 100, 100, 0), attrs...)
	got := build(t, b, []event.SpanRecord{child, root}, child, root)
	assert.Equal(t, map[string]any{"thread.id": int64(11), "n": int64(100), "http.route": "/a", "http.request.method": "GET"},
		got[b.SpanID(h.pid, uint64(h.tid), 100)].span.Attributes().AsRaw(), "n is the span's own")
	assert.Equal(t, map[string]any{"thread.id": int64(11), "n": int64(200)},
		got[b.SpanID(h.pid, uint64(h.tid), 200)].span.Attributes().AsRaw())
	assert.Empty(t, stale)

	unknown := withThread(h.work(3000, 3100, 0, 3000, 0), 7, 1, 'z', 0, 2, '/', 'b')
	got = build(t, b, []event.SpanRecord{unknown}, unknown)
	assert.Equal(t, map[string]any{"thread.id": int64(11), "n": int64(3000), "http.route": "/b"},
		got[b.SpanID(h.pid, uint64(h.tid), 3000)].span.Attributes().AsRaw())
	require.Equal(t, []uint32{10}, stale)

	other := th{20, 21}
	nokeys := withThread(other.work(100, 200, 0, 100, 0), attrs...)
	got = build(t, b, []event.SpanRecord{nokeys}, nokeys)
	assert.Equal(t, map[string]any{"thread.id": int64(21), "n": int64(100)},
		got[b.SpanID(other.pid, uint64(other.tid), 100)].span.Attributes().AsRaw(), "no key map: no attributes")
}
