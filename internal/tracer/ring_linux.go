package tracer

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Record header bits of the kernel's BPF ring buffer (kernel/bpf/ringbuf.c).
const (
	ringBusyBit    = 1 << 31
	ringDiscardBit = 1 << 30
	ringHeaderSize = 8
)

// ringReader consumes a BPF ring buffer through its own mapping: records are
// read in place and the consumer position is published once per batch, which
// costs a few ns per record against ~100 ns for a mutex and a store per
// record (../shared/perf-facts.md). Only one goroutine may call read.
type ringReader struct {
	consumerPage []byte // read-write: the consumer position
	producerArea []byte // read-only: the producer position page, then the data twice
	data         []byte // the data area, mapped twice back to back
	mask         uint64
	consumerPos  *uint64
	producerPos  *uint64
}

func newRingReader(m *ebpf.Map) (*ringReader, error) {
	size := int(m.MaxEntries())
	page := os.Getpagesize()
	cons, err := unix.Mmap(m.FD(), 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping ring buffer consumer page: %w", err)
	}
	prod, err := unix.Mmap(m.FD(), int64(page), page+2*size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		_ = unix.Munmap(cons)
		return nil, fmt.Errorf("mapping ring buffer data: %w", err)
	}
	return &ringReader{
		consumerPage: cons,
		producerArea: prod,
		data:         prod[page:],
		mask:         uint64(size - 1),
		consumerPos:  (*uint64)(unsafe.Pointer(&cons[0])),
		producerPos:  (*uint64)(unsafe.Pointer(&prod[0])),
	}, nil
}

// read passes each committed record, in order, to fn until the ring is empty
// or max records were passed, then publishes the new consumer position once.
// A record's bytes are only valid during its fn call. It returns the number
// of records passed, and 1 in corrupt when a record header claimed a length
// past the producer position or the ring: the reader then skips to the
// producer position, since nothing after such a header can be found.
func (r *ringReader) read(max int, fn func(record []byte)) (passed, corrupt int) {
	cons := atomic.LoadUint64(r.consumerPos)
	prod := atomic.LoadUint64(r.producerPos)
	for cons < prod && passed < max {
		off := cons & r.mask
		hdr := atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.data[off])))
		if hdr&ringBusyBit != 0 {
			break // reserved, not yet committed
		}
		length := uint64(hdr &^ (ringBusyBit | ringDiscardBit))
		next := cons + (length+ringHeaderSize+7)&^7
		if length > r.mask+1-ringHeaderSize || next > prod {
			cons = prod
			corrupt = 1
			break
		}
		if hdr&ringDiscardBit == 0 {
			fn(r.data[off+ringHeaderSize : off+ringHeaderSize+length])
			passed++
		}
		cons = next
	}
	atomic.StoreUint64(r.consumerPos, cons)
	return passed, corrupt
}

// buffered returns the bytes between the consumer and producer positions.
func (r *ringReader) buffered() int {
	return int(atomic.LoadUint64(r.producerPos) - atomic.LoadUint64(r.consumerPos))
}

func (r *ringReader) close() error {
	return errors.Join(unix.Munmap(r.producerArea), unix.Munmap(r.consumerPage))
}

// RingReader drains a BPF ring buffer other than the engine's the way the
// tracer drains the engine's: in place, the consumer position published
// once per batch. The benchmark reads its delivered-span floor with it, so
// that the floor pays for the very reader the receiver uses. Only one
// goroutine may call Read.
type RingReader struct {
	r *ringReader
}

// NewRingReader maps ring buffer m for reading; the caller keeps m open
// while the reader is in use and closes the reader first.
func NewRingReader(m *ebpf.Map) (*RingReader, error) {
	r, err := newRingReader(m)
	if err != nil {
		return nil, err
	}
	return &RingReader{r: r}, nil
}

// Read passes each committed record, in order, to fn until the ring is
// empty or max records were passed, and returns how many it passed. A
// record's bytes are only valid during its fn call.
func (r *RingReader) Read(max int, fn func(record []byte)) int {
	n, _ := r.r.read(max, fn)
	return n
}

// Close unmaps the ring buffer.
func (r *RingReader) Close() error { return r.r.close() }
