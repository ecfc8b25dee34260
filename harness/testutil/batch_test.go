package testutil

import (
	"bytes"
	"encoding/binary"
	"testing"
	"unsafe"

	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// record returns a record of n bytes whose contents identify i.
func record(i, n int) []byte {
	p := make([]byte, n)
	for j := range p {
		p[j] = byte(i*131 + j*7)
	}
	if n >= 4 {
		binary.LittleEndian.PutUint32(p, uint32(i))
	}
	return p
}

// overlaps reports whether the memory of a and b overlaps, capacity included.
func overlaps(a, b []byte) bool {
	if cap(a) == 0 || cap(b) == 0 {
		return false
	}
	a0 := uintptr(unsafe.Pointer(unsafe.SliceData(a)))
	b0 := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return a0 < b0+uintptr(cap(b)) && b0 < a0+uintptr(cap(a))
}

func TestCopyEmpty(t *testing.T) {
	var b Batch
	assert.Nil(t, b.Copy(nil))
	assert.Nil(t, b.Copy([]byte{}))
	assert.Empty(t, b.chunks, "an empty copy takes no memory")
}

func TestCopyIsACopy(t *testing.T) {
	var b Batch
	in := []byte{1, 2, 3, 4, 5}
	c := b.Copy(in)
	require.Equal(t, in, c)
	assert.False(t, overlaps(in, c))
	in[0] = 99
	assert.Equal(t, byte(1), c[0], "changing the input must not change the copy")
	assert.Equal(t, len(c), cap(c), "a copy's capacity ends with it")
}

// TestCopyManyAcrossChunks fills more than three chunks with records of
// sizes that do not divide the chunk, so that records meet every chunk
// boundary, and checks that every earlier copy stays intact and distinct.
func TestCopyManyAcrossChunks(t *testing.T) {
	var b Batch
	sizes := []int{1, 7, 8, 64, 333, 1000, 1024 + 56, 4095}
	var want, got [][]byte
	total := 0
	for i := 0; total < 3*arenaChunk+arenaChunk/2; i++ {
		p := record(i, sizes[i%len(sizes)])
		c := b.Copy(p)
		require.Equal(t, p, c, "copy %d", i)
		require.Equal(t, len(c), cap(c), "copy %d: capacity must end with the copy", i)
		want = append(want, p)
		got = append(got, c)
		total += len(p)
	}
	require.GreaterOrEqual(t, len(b.chunks), 4, "the copies must span several chunks")
	for i, c := range b.chunks {
		assert.LessOrEqual(t, len(c), arenaChunk, "chunk %d", i)
	}

	for i := range got {
		require.Equal(t, want[i], got[i], "copy %d changed after later copies", i)
	}
	// Distinct: no two copies share memory. Copies are laid out in order,
	// so checking neighbours (by address) suffices, but check all pairs of
	// a window to also catch reuse across chunks.
	for i := range got {
		for j := i + 1; j < len(got) && j < i+64; j++ {
			require.False(t, overlaps(got[i], got[j]), "copies %d and %d overlap", i, j)
		}
	}
	// Appending to a copy must not clobber the next one.
	for i := 0; i+1 < len(got); i++ {
		_ = append(got[i], 0xAA, 0xBB)
	}
	for i := range got {
		require.Equal(t, want[i], got[i], "copy %d changed by an append to a neighbour", i)
	}
	// Writing into one copy changes only that copy.
	for i := range got {
		for j := range got[i] {
			got[i][j] ^= 0xff
		}
	}
	for i := range got {
		for j := range got[i] {
			got[i][j] ^= 0xff
		}
		require.Equal(t, want[i], got[i], "copy %d", i)
	}
}

func TestCopyLargerThanChunk(t *testing.T) {
	var b Batch
	small1 := b.Copy(record(1, 100))
	bigIn := record(2, arenaChunk+12345)
	big := b.Copy(bigIn)
	small2 := b.Copy(record(3, 100))
	huge := b.Copy(record(4, 3*arenaChunk))
	small3 := b.Copy(record(5, 100))

	assert.Equal(t, record(1, 100), small1)
	assert.Equal(t, bigIn, big)
	assert.Equal(t, record(3, 100), small2)
	assert.Equal(t, record(4, 3*arenaChunk), huge)
	assert.Equal(t, record(5, 100), small3)
	assert.Equal(t, len(big), cap(big))
	assert.Equal(t, len(huge), cap(huge))
	all := [][]byte{small1, big, small2, huge, small3}
	for i := range all {
		for j := i + 1; j < len(all); j++ {
			assert.False(t, overlaps(all[i], all[j]), "copies %d and %d overlap", i, j)
		}
	}
	// A record of exactly one chunk fits a fresh chunk.
	exact := b.Copy(record(6, arenaChunk))
	assert.Equal(t, record(6, arenaChunk), exact)
	assert.Equal(t, record(1, 100), small1, "earlier copies stay valid")
	assert.Equal(t, bigIn, big, "earlier copies stay valid")
}

func TestResetEmpties(t *testing.T) {
	var b Batch
	b.Spans = append(b.Spans, event.SpanRecord{StartNs: 1, Entry: b.Copy([]byte{1, 2, 3})})
	b.Copy(record(0, arenaChunk))
	chunks := len(b.chunks)
	b.Reset()
	assert.Empty(t, b.Spans)
	assert.Equal(t, 0, b.cur)
	require.Len(t, b.chunks, chunks, "Reset keeps the chunks")
	for i, c := range b.chunks {
		assert.Empty(t, c, "chunk %d", i)
	}
	// The memory is reused from the start.
	first := b.chunks[0][:1]
	c := b.Copy([]byte{9})
	assert.Same(t, &first[0], &c[0], "the first copy after Reset reuses the first chunk")
}

// fill stands for one drain: it appends spans whose values are copies.
func fill(b *Batch, recs [][]byte) {
	for i, r := range recs {
		data := b.Copy(r)
		n := len(data) / 2
		b.Spans = append(b.Spans, event.SpanRecord{
			StartNs: uint64(i), PID: 1, TID: 1,
			Entry: data[:n:n], Exit: data[n:],
		})
	}
}

func TestResetReusesMemory(t *testing.T) {
	var recs [][]byte
	total := 0
	for i := 0; total < 2*arenaChunk+1000; i++ {
		r := record(i, 200+i%300)
		recs = append(recs, r)
		total += len(r)
	}
	// A record larger than a chunk in the middle.
	recs = append(recs[:len(recs)/2], append([][]byte{record(-1, arenaChunk+100)}, recs[len(recs)/2:]...)...)

	var b Batch
	fill(&b, recs)
	chunks := len(b.chunks)
	spansCap := cap(b.Spans)
	chunk0 := unsafe.SliceData(b.chunks[0])
	b.Reset()

	allocs := testing.AllocsPerRun(20, func() {
		fill(&b, recs)
		b.Reset()
	})
	assert.Zero(t, allocs, "refilling after Reset must not allocate")
	assert.Len(t, b.chunks, chunks, "no new chunk on an identical refill")
	assert.Equal(t, spansCap, cap(b.Spans))
	assert.Same(t, chunk0, unsafe.SliceData(b.chunks[0]))

	// After a refill the contents are the new ones, and valid.
	fill(&b, recs)
	require.Len(t, b.Spans, len(recs))
	for i, s := range b.Spans {
		joined := append(append([]byte{}, s.Entry...), s.Exit...)
		require.True(t, bytes.Equal(recs[i], joined), "span %d", i)
	}
}
