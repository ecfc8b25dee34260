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
	// Filter is one condition of a site, evaluated in the kernel.
	Filter = engineFilter
	// ProcHitsKey names the hits of one probe in one process.
	ProcHitsKey = engineProcHitsKey
	// ValueHist is the per-CPU value of the value_hists map: one
	// counter's histogram of values.
	ValueHist = engineValueHist
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
	// MaxFilters is the number of conditions of one site, at entry and
	// exit together.
	MaxFilters = int(engineAbiLimitABI_MAX_FILTERS)
	// FilterTextMax is the bytes of a string condition's constant.
	FilterTextMax = int(engineAbiLimitABI_FILTER_TEXT_MAX)
)

// Filter operators (enum filter_op).
const (
	FilterEQ     = uint8(engineFilterOpFILTER_EQ)
	FilterNE     = uint8(engineFilterOpFILTER_NE)
	FilterLT     = uint8(engineFilterOpFILTER_LT)
	FilterLE     = uint8(engineFilterOpFILTER_LE)
	FilterGT     = uint8(engineFilterOpFILTER_GT)
	FilterGE     = uint8(engineFilterOpFILTER_GE)
	FilterLTU    = uint8(engineFilterOpFILTER_LT_U)
	FilterLEU    = uint8(engineFilterOpFILTER_LE_U)
	FilterGTU    = uint8(engineFilterOpFILTER_GT_U)
	FilterGEU    = uint8(engineFilterOpFILTER_GE_U)
	FilterPrefix = uint8(engineFilterOpFILTER_PREFIX)
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
	SiteEntry    = uint16(engineSiteFlagSITE_ENTRY)
	SiteExit     = uint16(engineSiteFlagSITE_EXIT)
	SiteCarrier  = uint16(engineSiteFlagSITE_CARRIER)
	SiteFunction = uint16(engineSiteFlagSITE_FUNCTION)
	SiteGo       = uint16(engineSiteFlagSITE_GO)
	// SiteKernelReturn marks an entry site whose span closes at a kernel
	// return probe, which the kernel omits past KernelReturnDepth.
	SiteKernelReturn = uint16(engineSiteFlagSITE_KERNEL_RETURN)
	// SiteChosen marks a site of a target that chooses its processes.
	SiteChosen = uint16(engineSiteFlagSITE_CHOSEN)
	// SiteFilteredHits marks the site of a filtered counter: only hits
	// that pass its conditions count.
	SiteFilteredHits = uint16(engineSiteFlagSITE_FILTERED_HITS)
	// SiteProcHits marks a site whose hits are also counted per process
	// (MapProcHits), for metrics with container.id.
	SiteProcHits = uint16(engineSiteFlagSITE_PROC_HITS)
)

// Record flags (enum record_flag).
const (
	RecordTruncated = uint8(engineRecordFlagRECORD_TRUNCATED)
	RecordCarrier   = uint8(engineRecordFlagRECORD_CARRIER)
	RecordFunction  = uint8(engineRecordFlagRECORD_FUNCTION)
	RecordHasChild  = uint8(engineRecordFlagRECORD_HAS_CHILD)
	RecordPending   = uint8(engineRecordFlagRECORD_PENDING)
	RecordFiltered  = uint8(engineRecordFlagRECORD_FILTERED)
)

// Record kinds (enum record_kind): the last byte of every record.
const (
	RecordKindSpan    = uint8(engineRecordKindRECORD_KIND_SPAN)
	RecordKindProcess = uint8(engineRecordKindRECORD_KIND_PROCESS)
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
	ProgramCountHit          = engineProgCountHit
	ProgramSiteHit           = engineProgSiteHit
	ProgramCountHitMulti     = engineProgCountHitMulti
	ProgramSiteHitMulti      = engineProgSiteHitMulti
	ProgramOnExec            = engineProgOnExec
	ProgramOnExit            = engineProgOnExit
	MapSites                 = engineMapSites
	MapProbes                = engineMapProbes
	MapSpans                 = engineMapSpans
	MapRecords               = engineMapRecords
	MapTaskStates            = engineMapTaskStates
	MapGoStates              = engineMapGoStates
	MapGoLive                = engineMapGoLive
	MapProcs                 = engineMapProcs
	MapPending               = engineMapPending
	MapValueHists            = engineMapValueHists
	MapProcHits              = engineMapProcHits
	ProgramCountHitProc      = engineProgCountHitProc
	ProgramCountHitProcMulti = engineProgCountHitProcMulti
	ProgramOnFork            = engineProgOnFork
	VarSelectorBits          = engineVarSelectorBits
	VarSendExecs             = engineVarSendExecs
	VarEmitRecords           = engineVarEmitRecords
)

// Spec returns a fresh copy of the engine's collection spec, parsed from the
// embedded object. The caller owns it and may resize its maps before loading.
func Spec() (*ebpf.CollectionSpec, error) {
	return loadEngine()
}
