package bpfobj

import (
	"fmt"
	"runtime"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

// The ABI types, generated from bpf/abi.h (through the x86-64 object; the
// arm64 object declares the same). Their layout is checked against the BTF
// of both objects by TestLayout.
type (
	// SpanRecord is the trailer of one ring-buffer record: one completed span.
	SpanRecord = engineX86SpanRecord
	// Site is the spec of one attached location, selected by its BPF cookie.
	Site = engineX86Site
	// FetchOp is one compiled fetch expression.
	FetchOp = engineX86FetchOp
	// ProbeStats is the per-CPU value of the probes map.
	ProbeStats = engineX86ProbeStats
	// SpanStats is the per-CPU value of the spans map.
	SpanStats = engineX86SpanStats
	// ProcessRecord is the trailer of a process record.
	ProcessRecord = engineX86ProcessRecord
	// ProcEntry is the value of the procs map: what the engine knows of one process.
	ProcEntry = engineX86ProcEntry
	// PendingKey names one counter of a pending process.
	PendingKey = engineX86PendingKey
	// Filter is one condition of a site, evaluated in the kernel.
	Filter = engineX86Filter
	// ProcHitsKey names the hits of one probe in one process.
	ProcHitsKey = engineX86ProcHitsKey
	// ValueHist is the per-CPU value of the value_hists map: one
	// counter's histogram of values.
	ValueHist = engineX86ValueHist
	// ThreadCtxProc is the value of the thread_ctx_procs map: how the
	// engine reaches one process's otel_thread_ctx_v1 (OTEP 4947).
	ThreadCtxProc = engineX86ThreadCtxProc
	// ThreadContext is what the engine read of a thread's context record;
	// a span record with RecordThreadContext carries its head.
	ThreadContext = engineX86ThreadContext
	// ThreadCtxStats is the per-CPU value of the thread_ctx_counts map.
	ThreadCtxStats = engineX86ThreadCtxStats
)

// Limits of the engine (enum abi_limit).
const (
	// MaxFetches is the number of values one site fetches for one role.
	MaxFetches = int(engineX86AbiLimitABI_MAX_FETCHES)
	// MaxDerefs is the number of pointer dereferences of one fetch.
	MaxDerefs = int(engineX86AbiLimitABI_MAX_DEREFS)
	// MaxRegFetches is the number of fetches at one end of a site that
	// SiteEntryRegs or SiteExitRegs may mark.
	MaxRegFetches = int(engineX86AbiLimitABI_MAX_REG_FETCHES)
	// MaxDepth is the number of open spans per thread or goroutine.
	MaxDepth = int(engineX86AbiLimitABI_MAX_DEPTH)
	// ValueStack is the number of bytes of entry values the open spans of
	// one thread or goroutine keep together.
	ValueStack = int(engineX86AbiLimitABI_VALUE_STACK)
	// DataCap is the number of bytes of fetched values in one span record.
	DataCap = int(engineX86AbiLimitABI_DATA_CAP)
	// StringMax is the largest string or byte capture, in bytes including the NUL.
	StringMax = int(engineX86AbiLimitABI_STRING_MAX)
	// ValueBuckets is the number of buckets per sign of a value histogram.
	ValueBuckets = int(engineX86AbiLimitABI_VALUE_BUCKETS)
	// HistBuckets is the number of log2 latency buckets per span definition.
	HistBuckets = int(engineX86AbiLimitABI_HIST_BUCKETS)
	// MaxChosenTargets is the number of targets that can choose their
	// processes (one bit each in ProcEntry.Mask).
	MaxChosenTargets = int(engineX86AbiLimitABI_MAX_CHOSEN_TARGETS)
	// ExecFilenameMax and ExecArgsMax are the bytes of an execed
	// program's name and command line a process record carries.
	ExecFilenameMax = int(engineX86AbiLimitABI_EXEC_FILENAME_MAX)
	ExecArgsMax     = int(engineX86AbiLimitABI_EXEC_ARGS_MAX)
	// KernelReturnDepth is the kernel's limit of pending return probes per
	// thread (MAX_URETPROBE_DEPTH).
	KernelReturnDepth = int(engineX86AbiLimitABI_KERNEL_RETURN_DEPTH)
	// MaxFilters is the number of conditions of one site, at entry and
	// exit together.
	MaxFilters = int(engineX86AbiLimitABI_MAX_FILTERS)
	// FilterTextMax is the bytes of a string condition's constant.
	FilterTextMax = int(engineX86AbiLimitABI_FILTER_TEXT_MAX)
	// ThreadAttrsMax is the bytes of a thread context's attrs-data a span
	// record carries at most.
	ThreadAttrsMax = int(engineX86AbiLimitABI_THREAD_ATTRS_MAX)
	// ThreadAskNs is the least time between two requests of the engine
	// for one process's thread-context access, in nanoseconds.
	ThreadAskNs = uint64(engineX86AbiLimitABI_THREAD_ASK_NS)
)

// How the engine reaches a process's otel_thread_ctx_v1 (enum
// thread_ctx_access, ThreadCtxProc.Access).
const (
	ThreadCtxAsked  = uint8(engineX86ThreadCtxAccessTHREAD_CTX_ASKED)
	ThreadCtxNone   = uint8(engineX86ThreadCtxAccessTHREAD_CTX_NONE)
	ThreadCtxStatic = uint8(engineX86ThreadCtxAccessTHREAD_CTX_STATIC)
	ThreadCtxDTV    = uint8(engineX86ThreadCtxAccessTHREAD_CTX_DTV)
)

// What reading a thread's context found at a root span's entry (enum
// thread_ctx_outcome: indexes of ThreadCtxStats.Outcomes).
const (
	ThreadCtxRead        = int(engineX86ThreadCtxOutcomeTHREAD_CTX_READ)
	ThreadCtxNoContext   = int(engineX86ThreadCtxOutcomeTHREAD_CTX_NO_CONTEXT)
	ThreadCtxInvalid     = int(engineX86ThreadCtxOutcomeTHREAD_CTX_INVALID)
	ThreadCtxUnreadable  = int(engineX86ThreadCtxOutcomeTHREAD_CTX_UNREADABLE)
	ThreadCtxOutcomes    = int(engineX86ThreadCtxOutcomeTHREAD_CTX_OUTCOMES)
	threadContextHeadLen = int(unsafe.Offsetof(ThreadContext{}.Attrs))
)

// Filter operators (enum filter_op).
const (
	FilterEQ     = uint8(engineX86FilterOpFILTER_EQ)
	FilterNE     = uint8(engineX86FilterOpFILTER_NE)
	FilterLT     = uint8(engineX86FilterOpFILTER_LT)
	FilterLE     = uint8(engineX86FilterOpFILTER_LE)
	FilterGT     = uint8(engineX86FilterOpFILTER_GT)
	FilterGE     = uint8(engineX86FilterOpFILTER_GE)
	FilterLTU    = uint8(engineX86FilterOpFILTER_LT_U)
	FilterLEU    = uint8(engineX86FilterOpFILTER_LE_U)
	FilterGTU    = uint8(engineX86FilterOpFILTER_GT_U)
	FilterGEU    = uint8(engineX86FilterOpFILTER_GE_U)
	FilterPrefix = uint8(engineX86FilterOpFILTER_PREFIX)
)

// Fetch bases (enum fetch_base).
const (
	FetchBaseRegister = uint8(engineX86FetchBaseFETCH_BASE_REGISTER)
	FetchBaseConstant = uint8(engineX86FetchBaseFETCH_BASE_CONSTANT)
)

// Fetch kinds (enum fetch_kind).
const (
	FetchKindInt      = uint8(engineX86FetchKindFETCH_KIND_INT)
	FetchKindString   = uint8(engineX86FetchKindFETCH_KIND_STRING)
	FetchKindBytes    = uint8(engineX86FetchKindFETCH_KIND_BYTES)
	FetchKindGoString = uint8(engineX86FetchKindFETCH_KIND_GOSTRING)
)

// Site flags (enum site_flag).
const (
	SiteEntry    = uint16(engineX86SiteFlagSITE_ENTRY)
	SiteExit     = uint16(engineX86SiteFlagSITE_EXIT)
	SiteCarrier  = uint16(engineX86SiteFlagSITE_CARRIER)
	SiteFunction = uint16(engineX86SiteFlagSITE_FUNCTION)
	SiteGo       = uint16(engineX86SiteFlagSITE_GO)
	// SiteKernelReturn marks an entry site whose span closes at a kernel
	// return probe, which the kernel omits past KernelReturnDepth.
	SiteKernelReturn = uint16(engineX86SiteFlagSITE_KERNEL_RETURN)
	// SiteChosen marks a site of a target that chooses its processes.
	SiteChosen = uint16(engineX86SiteFlagSITE_CHOSEN)
	// SiteFilteredHits marks the site of a filtered counter: only hits
	// that pass its conditions count.
	SiteFilteredHits = uint16(engineX86SiteFlagSITE_FILTERED_HITS)
	// SiteProcHits marks a site whose hits are also counted per process
	// (MapProcHits), for metrics with container.id.
	SiteProcHits = uint16(engineX86SiteFlagSITE_PROC_HITS)
	// SiteThreadContext marks an entry site whose span, opened as the
	// thread's outermost, reads the thread's published context (OTEP
	// 4947); SiteThreadAttrs its attrs-data too.
	SiteThreadContext = uint16(engineX86SiteFlagSITE_THREAD_CONTEXT)
	SiteThreadAttrs   = uint16(engineX86SiteFlagSITE_THREAD_ATTRS)
	// SiteEntryRegs and SiteExitRegs mark a site whose every entry (exit)
	// fetch is a register's integer, at most MaxRegFetches of them: the
	// engine reads them inline.
	SiteEntryRegs = uint16(engineX86SiteFlagSITE_ENTRY_REGS)
	SiteExitRegs  = uint16(engineX86SiteFlagSITE_EXIT_REGS)
	// SiteSession marks the entry of a function span attached as a session
	// uprobe (ProgramSiteHitSession): Site.ReturnSite is its return.
	SiteSession = uint16(engineX86SiteFlagSITE_SESSION)
	// SiteLeaf marks the entry of a function span whose function is a
	// leaf (x86-64; plan.Site.LeafBytes): a call head sampling leaves out
	// is marked by the function's code addresses, Site.LeafBytes from the
	// entry site's, without a read of user memory.
	SiteLeaf = uint16(engineX86SiteFlagSITE_LEAF)
)

// Record flags (enum record_flag).
const (
	RecordTruncated = uint8(engineX86RecordFlagRECORD_TRUNCATED)
	RecordCarrier   = uint8(engineX86RecordFlagRECORD_CARRIER)
	RecordFunction  = uint8(engineX86RecordFlagRECORD_FUNCTION)
	RecordHasChild  = uint8(engineX86RecordFlagRECORD_HAS_CHILD)
	RecordPending   = uint8(engineX86RecordFlagRECORD_PENDING)
	RecordFiltered  = uint8(engineX86RecordFlagRECORD_FILTERED)
	// RecordThreadContext: the record carries the thread context its
	// trace joined, between its values and its trailer.
	RecordThreadContext = uint8(engineX86RecordFlagRECORD_THREAD_CONTEXT)
)

// Record kinds (enum record_kind): the last byte of every record.
const (
	RecordKindSpan    = uint8(engineX86RecordKindRECORD_KIND_SPAN)
	RecordKindProcess = uint8(engineX86RecordKindRECORD_KIND_PROCESS)
)

// What the ring buffer's reader wants to be woken for (enum wake_mode), the
// value of the engine's reader_wake global.
const (
	// WakeFill: when the ring holds wake_bytes.
	WakeFill = uint32(engineX86WakeModeWAKE_FILL)
	// WakeFirst: at the next record.
	WakeFirst = uint32(engineX86WakeModeWAKE_FIRST)
	// WakeSent: a wakeup is on its way (written by the engine).
	WakeSent = uint32(engineX86WakeModeWAKE_SENT)
)

// Process events (enum process_event).
const (
	ProcessExec   = uint8(engineX86ProcessEventPROCESS_EXEC)
	ProcessFork   = uint8(engineX86ProcessEventPROCESS_FORK)
	ProcessExit   = uint8(engineX86ProcessEventPROCESS_EXIT)
	ProcessSeen   = uint8(engineX86ProcessEventPROCESS_SEEN)
	ProcessCgroup = uint8(engineX86ProcessEventPROCESS_CGROUP)
	// ProcessThreadContext asks user space how to reach a process's
	// otel_thread_ctx_v1.
	ProcessThreadContext = uint8(engineX86ProcessEventPROCESS_THREAD_CONTEXT)
)

// Counters of pending processes (enum pending_kind, enum proc_mask_bit).
const (
	PendingHits       = uint8(engineX86PendingKindPENDING_HITS)
	PendingSpanBucket = uint8(engineX86PendingKindPENDING_SPAN_BUCKET)
	PendingSpanSum    = uint8(engineX86PendingKindPENDING_SPAN_SUM)
	// PendingSpanLost, PendingSpanUnsampled and PendingSpanShort count the
	// completed spans of a pending process that were not recorded, as
	// SpanStats' Lost, Unsampled and ShortSpans do for the others.
	PendingSpanLost      = uint8(engineX86PendingKindPENDING_SPAN_LOST)
	PendingSpanUnsampled = uint8(engineX86PendingKindPENDING_SPAN_UNSAMPLED)
	PendingSpanShort     = uint8(engineX86PendingKindPENDING_SPAN_SHORT)
	ProcPendingBit       = int(engineX86ProcMaskBitPROC_PENDING_BIT)
)

// Names of the engine's programs and maps in the collection spec.
const (
	ProgramCountHit      = engineX86ProgCountHit
	ProgramSiteHit       = engineX86ProgSiteHit
	ProgramCountHitMulti = engineX86ProgCountHitMulti
	ProgramSiteHitMulti  = engineX86ProgSiteHitMulti
	// ProgramSiteHitSession is site_hit attached as a session uprobe
	// (Linux 6.12): it runs at a call's entry and, unless the entry
	// rejected the call, at its return.
	ProgramSiteHitSession = engineX86ProgSiteHitSession
	// ProgramSiteHitPlainMulti runs the sites of plain spans (an entry
	// that only opens a span, an exit that only closes it, no
	// conditions, no process choice, registers only) through uprobe_multi
	// links: the task found once per hit.
	ProgramSiteHitPlainMulti = engineX86ProgSiteHitPlainMulti
	ProgramOnExec            = engineX86ProgOnExec
	ProgramOnExit            = engineX86ProgOnExit
	MapSites                 = engineX86MapSites
	MapProbes                = engineX86MapProbes
	MapSpans                 = engineX86MapSpans
	MapRecords               = engineX86MapRecords
	MapTaskStates            = engineX86MapTaskStates
	MapGoStates              = engineX86MapGoStates
	MapGoLive                = engineX86MapGoLive
	MapProcs                 = engineX86MapProcs
	MapPending               = engineX86MapPending
	MapValueHists            = engineX86MapValueHists
	MapProcHits              = engineX86MapProcHits
	MapThreadCtxProcs        = engineX86MapThreadCtxProcs
	MapThreadCtxCounts       = engineX86MapThreadCtxCounts
	ProgramCountHitProc      = engineX86ProgCountHitProc
	ProgramCountHitProcMulti = engineX86ProgCountHitProcMulti
	ProgramOnFork            = engineX86ProgOnFork
	ProgramSeenTask          = engineX86ProgSeenTask
	ProgramOnCgroupAttach    = engineX86ProgOnCgroupAttach
	VarProcessFacts          = engineX86VarProcessFacts
	VarCgroup1Subsys         = engineX86VarCgroup1Subsys
	VarProcessLost           = engineX86VarProcessLost
	VarPlainRefused          = engineX86VarPlainRefused
	VarSelectorBits          = engineX86VarSelectorBits
	VarSendExecs             = engineX86VarSendExecs
	VarEmitRecords           = engineX86VarEmitRecords
	VarReaderWake            = engineX86VarReaderWake
	VarReaderUrgent          = engineX86VarReaderUrgent
	VarWakeBytes             = engineX86VarWakeBytes
)

// Arch returns the architecture the running program was built for
// (runtime.GOARCH): the one whose engine Spec returns and whose files the
// receiver can attach uprobes to. It is ArchUnknown on architectures
// without an engine.
func Arch() regs.Arch {
	switch runtime.GOARCH {
	case "amd64":
		return regs.ArchAMD64
	case "arm64":
		return regs.ArchARM64
	}
	return regs.ArchUnknown
}

// Spec returns a fresh copy of the engine's collection spec for the
// running architecture (Arch), parsed from the embedded object. The caller
// owns it and may resize its maps before loading.
func Spec() (*ebpf.CollectionSpec, error) {
	return SpecFor(Arch())
}

// SpecFor returns a fresh copy of the engine's collection spec built for
// architecture a: the same source, compiled with a's struct pt_regs, so that
// a fetch_op's register slots are those of regs.Arch.Slot for a. Only the
// running architecture's engine can be loaded; the other one is there for
// tests and tools.
func SpecFor(a regs.Arch) (*ebpf.CollectionSpec, error) {
	switch a {
	case regs.ArchAMD64:
		return loadEngineX86()
	case regs.ArchARM64:
		return loadEngineArm64()
	}
	return nil, fmt.Errorf("no BPF engine for architecture %v (GOARCH %s): the receiver runs on amd64 and arm64", a, runtime.GOARCH)
}
