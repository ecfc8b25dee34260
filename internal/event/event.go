// Package event holds the plain Go values the tracer hands to the rest of the
// receiver: completed spans and process events as the engine recorded them,
// and snapshots of the engine's counters. It has no BPF or pdata types.
package event

import (
	"math/big"
	"math/bits"
)

// SpanRecord is one completed span as the engine recorded it. Times are
// CLOCK_MONOTONIC nanoseconds; ids index the Plan the tracer was opened with.
type SpanRecord struct {
	StartNs, EndNs uint64
	// ParentStartNs is the start of the enclosing open span on the same
	// thread, 0 for a root; RootStartNs the start of the outermost one.
	ParentStartNs, RootStartNs uint64
	// ContextStartNs is the start of the nearest enclosing span whose
	// definition carries a trace context, 0 if none.
	ContextStartNs uint64
	PID            uint32
	// Image is the process image the span ran in (see Image).
	Image Image
	// TID is the thread the span ended on.
	TID uint32
	// Owner is what paired the span: the thread id, or for Go code the
	// goroutine (its g pointer), which may run on several threads.
	Owner uint64
	// Def is the span definition id; EntrySite and ExitSite are site ids.
	Def, EntrySite, ExitSite uint32
	// Depth is the number of open spans below this one on its thread.
	Depth uint16
	// Truncated says some fetched value did not fit in the record.
	Truncated bool
	// Pending says the span's process was pending when it opened: it
	// counts only if the process is chosen for the span's target.
	Pending bool
	// EntryFailed and ExitFailed have bit i set when fetch i of that end
	// stored nothing (unreadable memory).
	EntryFailed, ExitFailed uint8
	// Entry and Exit are the stored values of each end, in fetch order. They
	// belong to whoever passed the record on (the tracer's Read: valid only
	// during the call).
	Entry, Exit []byte
	// Thread is the thread context (OTEP 4947) the thread had published
	// when the outermost span of the span's trace opened on it: the span
	// is in that trace. Its Attrs belong to whoever passed the record on,
	// as Entry and Exit do.
	Thread ThreadContext
}

// ThreadContext is a thread's published context as the engine read it.
type ThreadContext struct {
	// Valid says there is one: valid was 1 and neither id was zero.
	Valid   bool
	TraceID [16]byte
	SpanID  [8]byte
	// Flags are its W3C trace flags.
	Flags uint8
	// Attrs is its attrs-data (key index, length, value; …), at most the
	// engine's bound, empty unless the span's target takes attributes.
	Attrs []byte
}

// Image identifies one program image of one process: a pid reused by a new
// process has another StartNs, and an image replaced by execve another
// ExecID.
type Image struct {
	// StartNs is the start time of the process (its thread group leader),
	// CLOCK_MONOTONIC nanoseconds.
	StartNs uint64
	// ExecID is the kernel's count of the process's execve calls.
	ExecID uint64
}

// ProcessEvent says what happened to a process.
type ProcessEvent uint8

// The process events.
const (
	// ProcessExec: the process execed a program.
	ProcessExec ProcessEvent = iota + 1
	// ProcessFork: a pending process forked one (Parent).
	ProcessFork
	// ProcessExit: a process the engine knew exited.
	ProcessExit
	// ProcessSeen: the process was running when the tracer listed them.
	ProcessSeen
	// ProcessCgroup: the process moved to another cgroup; Facts are its
	// facts since.
	ProcessCgroup
	// ProcessThreadContext: a span opened in the process while the engine
	// did not know how to reach its thread context (OTEP 4947): look for
	// otel_thread_ctx_v1 in the modules it maps.
	ProcessThreadContext
)

// Process is one process event, sent while a target chooses its processes
// by a selector, while every exec is looked at, or for every process when
// the tracer sends process facts. TimeNs is CLOCK_MONOTONIC nanoseconds.
type Process struct {
	Event       ProcessEvent
	PID, Parent uint32
	Image       Image
	// ParentStartNs is the start time of the process that forked this one
	// (ProcessFork): with Parent, it names the parent.
	ParentStartNs uint64
	TimeNs        uint64
	// Filename is the executed program as given to execve; Args its command
	// line, arguments separated by NUL bytes (both bounded).
	Filename, Args string
	// Facts are what the engine read of the process when the event
	// happened, while the process was alive.
	Facts Facts
}

// Facts are what the engine reads of a process while it is alive, for the
// attributes of its spans.
type Facts struct {
	// CgroupID is the kernfs id of its cgroup in the unified (v2)
	// hierarchy: the inode number of the cgroup's directory in a cgroup2
	// mount (0 when unknown).
	CgroupID uint64
	// Cgroup1ID is the kernfs id of its cgroup in the v1 hierarchy of the
	// controller the tracer was opened with (Cgroup1Controller), 0 for none.
	Cgroup1ID uint64
	// ExeIno and ExeDev are the inode number and device (as stat(2) gives
	// st_dev) of its executable; 0 for none.
	ExeIno, ExeDev uint64
}

// ProbeCounts are the engine's counters of one probe, summed over CPUs.
type ProbeCounts struct {
	// Hits counts every time any location of the probe fired.
	Hits uint64
	// Lost counts span records the ring buffer refused at this (exit) probe.
	Lost uint64
}

// SpanCounts aggregate the completed spans of one span definition, summed over CPUs.
type SpanCounts struct {
	Count, SumNs, Lost uint64
	// Unmatched counts exits with no open entry on their thread.
	Unmatched uint64
	// Abandoned counts open spans dropped because an enclosing span closed first.
	Abandoned uint64
	// Overflow counts entries deeper than the engine's per-thread stack.
	Overflow uint64
	// NoState counts entries dropped because no state could be had for
	// their goroutine (too many goroutines with open spans).
	NoState uint64
	// ReturnLimit counts entries not recorded because the kernel would not
	// report their return: the thread had 64 return probes pending.
	ReturnLimit uint64
	// Unsampled and Short count completed spans the engine did not record:
	// their trace was not sampled, or they were shorter than the minimum.
	Unsampled, Short uint64
	// Filtered counts calls whose filter or exit_filter did not hold: not
	// recorded, not in Buckets.
	Filtered uint64
	// PendingFull counts spans of pending processes the engine could not
	// count (its pending counters were full): not recorded, not in Buckets.
	PendingFull uint64
	// Buckets[i] counts durations in (2^i, 2^(i+1)] ns; Buckets[0] also
	// holds durations of 0 and 1 ns. It is nil while every bucket is 0
	// (most spans of a function pattern never run), else of the engine's
	// length (bpfobj.HistBuckets).
	Buckets []uint64
}

// ThreadContextCounts count, summed over CPUs, what the engine found when
// the outermost span of a thread opened in a process whose access to its
// thread context it knew, by outcome, and its requests to user space.
type ThreadContextCounts struct {
	// Read: a valid context, taken. NoContext: none published (a NULL
	// pointer, valid 0, no TLS block for the module yet). Invalid: valid
	// neither 0 nor 1, an id all zeros, an odd pointer. Unreadable: the
	// variable or the record could not be read.
	Read, NoContext, Invalid, Unreadable uint64
	// Asked counts the requests (ProcessThreadContext records);
	// NoEntry those the engine's table of processes had no room for.
	Asked, NoEntry uint64
}

// Stats is a snapshot of every counter, indexed by probe id and span id.
type Stats struct {
	Probes []ProbeCounts
	Spans  []SpanCounts
	// Thread counts the engine's reading of thread contexts.
	Thread ThreadContextCounts
	// Values are the value histograms, indexed like the plan's Histograms.
	Values []ValueCounts
	// ContainerHits are the hits of probes in files found through a
	// process's root, per container, cumulative; they are part of the
	// probes' Hits.
	ContainerHits []ContainerHits
	// DroppedContainerHits are, per probe id, hits of containers no longer
	// reported apart (the bound on series): part of Hits, in no container.
	DroppedContainerHits map[int]uint64
}

// ContainerHits is the cumulative count of one probe's hits in one
// container.
type ContainerHits struct {
	Probe       int
	ContainerID string
	Hits        uint64
}

// ValueCounts is one counter's histogram of values, on the buckets of an
// exponential histogram of scale 0 shifted by one: Positive[0] counts the
// value 1 and Positive[i] for i > 0 the values in (2^(i-1), 2^i]; Negative[i]
// their negations; Zero the zeros. The sum of the values is the 128-bit
// two's complement integer SumHi:SumLo. Unread counts hits whose value could
// not be read (not in the histogram).
type ValueCounts struct {
	Count, Zero, Unread uint64
	SumLo               uint64
	SumHi               int64
	Positive, Negative  []uint64
}

// AddSum adds the 128-bit sum hi:lo to the histogram's.
func (v *ValueCounts) AddSum(lo uint64, hi int64) {
	var carry uint64
	v.SumLo, carry = bits.Add64(v.SumLo, lo, 0)
	v.SumHi += hi + int64(carry)
}

// Sum returns the sum of the values, rounded to a float64.
func (v ValueCounts) Sum() float64 {
	switch {
	case v.SumHi == 0 && v.SumLo < 1<<63, v.SumHi == -1 && v.SumLo >= 1<<63:
		return float64(int64(v.SumLo)) // fits an int64: exact as far as a float64 is
	}
	hi := new(big.Int).Lsh(big.NewInt(v.SumHi), 64)
	f, _ := new(big.Float).SetInt(hi.Add(hi, new(big.Int).SetUint64(v.SumLo))).Float64()
	return f
}
