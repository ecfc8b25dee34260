package tracer

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
)

// waker lets the reader sleep until the engine has records for it. The
// engine writes records without a wakeup unless the reader asked for one in
// the reader_wake global (bpf/abi.h, enum wake_mode): at the next record,
// or when the ring holds wake_bytes. The reader waits for the ring
// buffer's file descriptor to be readable through Go's network poller, so
// a sleeping reader costs no thread and no timer.
type waker struct {
	global      []byte  // the engine's .bss, mapped read-write
	want        *uint32 // reader_wake in it
	urgent      *uint32 // reader_urgent in it
	file        *os.File
	conn        syscall.RawConn
	fillBytes   int
	interrupted atomic.Bool
}

func newWaker(coll *ebpf.Collection, spec *ebpf.CollectionSpec, ring *ebpf.Map, fillBytes int) (_ *waker, err error) {
	v := spec.Variables[bpfobj.VarReaderWake]
	if v == nil {
		return nil, errors.New("the BPF engine has no reader_wake")
	}
	m := coll.Maps[v.SectionName]
	if m == nil {
		return nil, fmt.Errorf("the BPF engine has no %s map", v.SectionName)
	}
	size := (int(m.ValueSize()) + os.Getpagesize() - 1) &^ (os.Getpagesize() - 1)
	global, err := unix.Mmap(m.FD(), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping the engine's %s: %w", v.SectionName, err)
	}
	u := spec.Variables[bpfobj.VarReaderUrgent]
	if u == nil || u.SectionName != v.SectionName {
		_ = unix.Munmap(global)
		return nil, errors.New("the BPF engine has no reader_urgent beside reader_wake")
	}
	w := &waker{global: global, want: (*uint32)(unsafe.Pointer(&global[v.Offset])),
		urgent: (*uint32)(unsafe.Pointer(&global[u.Offset])), fillBytes: fillBytes}
	defer func() {
		if err != nil {
			err = errors.Join(err, w.close())
		}
	}()
	// A file of its own for the poller: its descriptor is non-blocking, as
	// the poller needs, and closing it leaves the ring buffer's alone.
	fd, err := unix.FcntlInt(uintptr(ring.FD()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("duplicating the ring buffer's descriptor: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("making the ring buffer's descriptor non-blocking: %w", err)
	}
	w.file = os.NewFile(uintptr(fd), "ring buffer")
	if w.conn, err = w.file.SyscallConn(); err != nil {
		return nil, err
	}
	// A deadline can be set only on a file the poller took.
	if err := w.file.SetReadDeadline(time.Time{}); err != nil {
		return nil, fmt.Errorf("polling the ring buffer: %w", err)
	}
	return w, nil
}

// wait asks the engine for a wakeup at the next record (first) or when the
// ring holds fillBytes, and returns when that is so, when deadline passes
// (zero: none) or when interrupt was called. It checks the ring after
// asking, so that a record written before the engine saw the request is
// not missed; a record whose program read the request just before it was
// made goes without a wakeup, so callers that wait for the first record
// set a deadline.
func (w *waker) wait(r *ringReader, deadline time.Time, first bool) error {
	mode, need := bpfobj.WakeFill, w.fillBytes
	if first {
		mode, need = bpfobj.WakeFirst, 1
	}
	atomic.StoreUint32(w.want, mode)
	if err := w.file.SetReadDeadline(deadline); err != nil {
		return err
	}
	err := w.conn.Read(func(uintptr) bool {
		return w.interrupted.Swap(false) || r.buffered() >= need || atomic.LoadUint32(w.urgent) != 0
	})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil
	}
	return err
}

// takeUrgent says whether the engine wrote a record to act on at once
// (reader_urgent) since the last call, and clears the flag: the reader
// calls it before it reads the ring, so that such a record written after
// the read sets it again.
func (w *waker) takeUrgent() bool {
	return atomic.SwapUint32(w.urgent, 0) != 0
}

// interrupt makes a wait in progress, or the next one, return at once.
func (w *waker) interrupt() {
	w.interrupted.Store(true)
	_ = w.file.SetReadDeadline(time.Unix(1, 0)) // in the past: wakes a wait in progress
}

func (w *waker) close() error {
	var errs []error
	if w.file != nil {
		errs = append(errs, w.file.Close())
	}
	if w.global != nil {
		errs = append(errs, unix.Munmap(w.global))
		w.global, w.want = nil, nil
	}
	return errors.Join(errs...)
}
