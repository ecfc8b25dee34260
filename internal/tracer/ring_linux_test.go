package tracer

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
)

// fakeRing is a ring buffer in ordinary memory, laid out as the kernel lays
// out a BPF ring: an 8-byte header per record (length, busy and discard
// bits), records 8-aligned, the data area mapped twice.
type fakeRing struct {
	r          *ringReader
	cons, prod uint64
	data       []byte
}

func newFakeRing(size int) *fakeRing {
	f := &fakeRing{data: make([]byte, 2*size)}
	f.r = &ringReader{data: f.data, mask: uint64(size - 1), consumerPos: &f.cons, producerPos: &f.prod}
	return f
}

// put writes a record header claiming length bytes, and the bytes given.
func (f *fakeRing) put(length uint32, payload []byte) {
	size := uint64(len(f.data) / 2)
	off := f.prod & f.r.mask
	binary.LittleEndian.PutUint32(f.data[off:], length)
	copy(f.data[off+ringHeaderSize:], payload)
	copy(f.data[size:], f.data[:size]) // the second mapping
	f.prod += (uint64(len(payload)) + ringHeaderSize + 7) &^ 7
}

func TestRingReaderCorruptLengths(t *testing.T) {
	for _, tc := range []struct {
		name   string
		length uint32
	}{
		{"past the producer position", 64},
		{"past the ring", 1 << 20},
		{"busy and discard bits with a huge length", 0x3fffffff},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeRing(4096)
			f.put(8, []byte{1, 2, 3, 4, 5, 6, 7, 8})
			f.put(tc.length, []byte{9, 9, 9, 9, 9, 9, 9, 9}) // says more than there is
			var got [][]byte
			assert.NotPanics(t, func() {
				passed, corrupt := f.r.read(100, func(rec []byte) { got = append(got, append([]byte(nil), rec...)) })
				assert.Equal(t, 1, passed, "the good record before it")
				assert.Equal(t, 1, corrupt)
			})
			assert.Equal(t, [][]byte{{1, 2, 3, 4, 5, 6, 7, 8}}, got)
			assert.Equal(t, f.prod, f.cons, "the reader skipped to the producer position")
			passed, corrupt := f.r.read(100, func([]byte) {})
			assert.Zero(t, passed+corrupt, "and goes on from there")
		})
	}
}

func TestRingReaderBusyAndDiscarded(t *testing.T) {
	f := newFakeRing(4096)
	f.put(8|ringDiscardBit, make([]byte, 8))
	f.put(8, []byte{7, 7, 7, 7, 7, 7, 7, 7})
	f.put(8|ringBusyBit, make([]byte, 8))
	var got int
	passed, corrupt := f.r.read(100, func([]byte) { got++ })
	assert.Equal(t, 1, passed)
	assert.Zero(t, corrupt)
	assert.Equal(t, 1, got)
	assert.Equal(t, uint64(2*16), f.cons, "stops at the record still being written")
}

// A ring that holds one record of the smallest kind (a process record
// alone) is not empty to Buffered: counted as empty, it made the drain
// goroutine wait for nothing and never read it, over and over.
func TestBufferedCountsTheSmallestRecord(t *testing.T) {
	f := newFakeRing(4096)
	tr := &Tracer{ring: f.r}
	assert.Zero(t, tr.Buffered())
	f.put(uint32(bpfobj.ProcessTrailerSize), make([]byte, bpfobj.ProcessTrailerSize))
	assert.Equal(t, 1, tr.Buffered())
}
