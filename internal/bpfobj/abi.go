package bpfobj

import "github.com/cilium/ebpf"

// The ABI types, generated from bpf/abi.h. Their layout is checked against the
// object's BTF by TestLayout.
type (
	// SpanRecord is the trailer of one ring-buffer record: one completed span.
	SpanRecord = engineSpanRecord
	// Site is the spec of one attached location, selected by its BPF cookie.
	Site = engineSite
	// FetchOp is one compiled fetch expression.
	FetchOp = engineFetchOp
	// ProbeStats is the per-CPU value of the probes map.
	ProbeStats = engineProbeStats
	// SpanStats is the per-CPU value of the spans map.
	SpanStats = engineSpanStats
	// RegSlot numbers the 8-byte slots of the x86-64 struct pt_regs.
	RegSlot = engineRegSlot
	// ProcessRecord is the trailer of a process record.
	ProcessRecord = engineProcessRecord
	// ProcEntry is the value of the procs map: what the engine knows of one process.
	ProcEntry = engineProcEntry
	// PendingKey names one counter of a pending process.
	PendingKey = enginePendingKey
)

// Limits of the engine (enum abi_limit).
const (
	// MaxFetches is the number of values one site fetches for one role.
	MaxFetches = int(engineAbiLimitABI_MAX_FETCHES)
	// MaxDerefs is the number of pointer dereferences of one fetch.
	MaxDerefs = int(engineAbiLimitABI_MAX_DEREFS)
	// MaxDepth is the number of open spans per thread or goroutine.
	MaxDepth = int(engineAbiLimitABI_MAX_DEPTH)
	// ValueStack is the number of bytes of entry values the open spans of
	// one thread or goroutine keep together.
	ValueStack = int(engineAbiLimitABI_VALUE_STACK)
	// DataCap is the number of bytes of fetched values in one span record.
	DataCap = int(engineAbiLimitABI_DATA_CAP)
	// StringMax is the largest string or byte capture, in bytes including the NUL.
	StringMax = int(engineAbiLimitABI_STRING_MAX)
	// HistBuckets is the number of log2 latency buckets per span definition.
	HistBuckets = int(engineAbiLimitABI_HIST_BUCKETS)
	// MaxChosenTargets is the number of targets that can choose their
	// processes (one bit each in ProcEntry.Mask).
	MaxChosenTargets = int(engineAbiLimitABI_MAX_CHOSEN_TARGETS)
	// ExecFilenameMax and ExecArgsMax are the bytes of an execed
	// program's name and command line a process record carries.
	ExecFilenameMax = int(engineAbiLimitABI_EXEC_FILENAME_MAX)
	ExecArgsMax     = int(engineAbiLimitABI_EXEC_ARGS_MAX)
	// KernelReturnDepth is the kernel's limit of pending return probes per
	// thread (MAX_URETPROBE_DEPTH).
	KernelReturnDepth = int(engineAbiLimitABI_KERNEL_RETURN_DEPTH)
)

// Fetch bases (enum fetch_base).
const (
	FetchBaseRegister = uint8(engineFetchBaseFETCH_BASE_REGISTER)
	FetchBaseConstant = uint8(engineFetchBaseFETCH_BASE_CONSTANT)
)

// Fetch kinds (enum fetch_kind).
const (
	FetchKindInt      = uint8(engineFetchKindFETCH_KIND_INT)
	FetchKindString   = uint8(engineFetchKindFETCH_KIND_STRING)
	FetchKindBytes    = uint8(engineFetchKindFETCH_KIND_BYTES)
	FetchKindGoString = uint8(engineFetchKindFETCH_KIND_GOSTRING)
)

// Site flags (enum site_flag).
const (
	SiteEntry    = uint8(engineSiteFlagSITE_ENTRY)
	SiteExit     = uint8(engineSiteFlagSITE_EXIT)
	SiteCarrier  = uint8(engineSiteFlagSITE_CARRIER)
	SiteFunction = uint8(engineSiteFlagSITE_FUNCTION)
	SiteGo       = uint8(engineSiteFlagSITE_GO)
	// SiteKernelReturn marks an entry site whose span closes at a kernel
	// return probe, which the kernel omits past KernelReturnDepth.
	SiteKernelReturn = uint8(engineSiteFlagSITE_KERNEL_RETURN)
	// SiteChosen marks a site of a target that chooses its processes.
	SiteChosen = uint8(engineSiteFlagSITE_CHOSEN)
)

// Record flags (enum record_flag).
const (
	RecordTruncated = uint8(engineRecordFlagRECORD_TRUNCATED)
	RecordCarrier   = uint8(engineRecordFlagRECORD_CARRIER)
	RecordFunction  = uint8(engineRecordFlagRECORD_FUNCTION)
	RecordHasChild  = uint8(engineRecordFlagRECORD_HAS_CHILD)
	RecordPending   = uint8(engineRecordFlagRECORD_PENDING)
)

// Record kinds (enum record_kind): the last byte of every record.
const (
	RecordKindSpan    = uint8(engineRecordKindRECORD_KIND_SPAN)
	RecordKindProcess = uint8(engineRecordKindRECORD_KIND_PROCESS)
)

// What the ring buffer's reader wants to be woken for (enum wake_mode), the
// value of the engine's reader_wake global.
const (
	// WakeFill: when the ring holds wake_bytes.
	WakeFill = uint32(engineWakeModeWAKE_FILL)
	// WakeFirst: at the next record.
	WakeFirst = uint32(engineWakeModeWAKE_FIRST)
	// WakeSent: a wakeup is on its way (written by the engine).
	WakeSent = uint32(engineWakeModeWAKE_SENT)
)

// Process events (enum process_event).
const (
	ProcessExec = uint8(engineProcessEventPROCESS_EXEC)
	ProcessFork = uint8(engineProcessEventPROCESS_FORK)
	ProcessExit = uint8(engineProcessEventPROCESS_EXIT)
)

// Counters of pending processes (enum pending_kind, enum proc_mask_bit).
const (
	PendingHits       = uint8(enginePendingKindPENDING_HITS)
	PendingSpanBucket = uint8(enginePendingKindPENDING_SPAN_BUCKET)
	PendingSpanSum    = uint8(enginePendingKindPENDING_SPAN_SUM)
	ProcPendingBit    = int(engineProcMaskBitPROC_PENDING_BIT)
)

// Register slots (enum reg_slot).
const (
	RegR15 = engineRegSlotREG_R15
	RegR14 = engineRegSlotREG_R14
	RegR13 = engineRegSlotREG_R13
	RegR12 = engineRegSlotREG_R12
	RegBP  = engineRegSlotREG_BP
	RegBX  = engineRegSlotREG_BX
	RegR11 = engineRegSlotREG_R11
	RegR10 = engineRegSlotREG_R10
	RegR9  = engineRegSlotREG_R9
	RegR8  = engineRegSlotREG_R8
	RegAX  = engineRegSlotREG_AX
	RegCX  = engineRegSlotREG_CX
	RegDX  = engineRegSlotREG_DX
	RegSI  = engineRegSlotREG_SI
	RegDI  = engineRegSlotREG_DI
	RegIP  = engineRegSlotREG_IP
	RegSP  = engineRegSlotREG_SP
)

// Names of the engine's programs and maps in the collection spec.
const (
	ProgramCountHit      = engineProgCountHit
	ProgramSiteHit       = engineProgSiteHit
	ProgramCountHitMulti = engineProgCountHitMulti
	ProgramSiteHitMulti  = engineProgSiteHitMulti
	ProgramOnExec        = engineProgOnExec
	ProgramOnExit        = engineProgOnExit
	MapSites             = engineMapSites
	MapProbes            = engineMapProbes
	MapSpans             = engineMapSpans
	MapRecords           = engineMapRecords
	MapTaskStates        = engineMapTaskStates
	MapGoStates          = engineMapGoStates
	MapGoLive            = engineMapGoLive
	MapProcs             = engineMapProcs
	MapPending           = engineMapPending
	ProgramOnFork        = engineProgOnFork
	VarSelectorBits      = engineVarSelectorBits
	VarSendExecs         = engineVarSendExecs
	VarEmitRecords       = engineVarEmitRecords
	VarReaderWake        = engineVarReaderWake
	VarWakeBytes         = engineVarWakeBytes
)

// Spec returns a fresh copy of the engine's collection spec, parsed from the
// embedded object. The caller owns it and may resize its maps before loading.
func Spec() (*ebpf.CollectionSpec, error) {
	return loadEngine()
}
