package testutil

import "github.com/otel-uprobe/uprobereceiver/internal/event"

// Batch is a reusable set of span records read from a tracer, with the
// process events read among them, each in the order it was recorded. A
// process's exec or fork comes before its spans, its exit after them. A
// *Batch is a tracer.Records: tr.Read(max, &b) copies the records' values
// into the batch's memory. For tests, which read the ring by hand; the
// receiver turns records into spans as it reads them.
type Batch struct {
	Spans     []event.SpanRecord
	Processes []event.Process
	chunks    [][]byte
	cur       int
}

// arenaChunk is the size of each block of stored values a Batch keeps.
const arenaChunk = 256 << 10

// Reset empties the batch, keeping its memory.
func (b *Batch) Reset() {
	b.Spans = b.Spans[:0]
	b.Processes = b.Processes[:0]
	for i := range b.chunks {
		b.chunks[i] = b.chunks[i][:0]
	}
	b.cur = 0
}

// Copy stores a copy of p in the batch's memory and returns it. Earlier
// copies stay valid until Reset.
func (b *Batch) Copy(p []byte) []byte {
	if len(p) == 0 {
		return nil
	}
	for {
		if b.cur == len(b.chunks) {
			b.chunks = append(b.chunks, make([]byte, 0, max(arenaChunk, len(p))))
		}
		c := b.chunks[b.cur]
		if cap(c)-len(c) >= len(p) {
			n := len(c)
			c = append(c, p...)
			b.chunks[b.cur] = c
			return c[n:len(c):len(c)]
		}
		b.cur++
	}
}

// Span appends a copy of ev, its values copied into the batch's memory.
func (b *Batch) Span(ev *event.SpanRecord) {
	s := *ev
	s.Entry, s.Exit = b.Copy(ev.Entry), b.Copy(ev.Exit)
	b.Spans = append(b.Spans, s)
}

// Process appends a copy of p.
func (b *Batch) Process(p *event.Process) { b.Processes = append(b.Processes, *p) }
