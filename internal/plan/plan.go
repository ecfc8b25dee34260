// Package plan is the contract between the planner and the kernel side: the
// Plan the planner (internal/planner) reads out of the configuration and the
// traced ELF files, and that the tracer (internal/tracer) attaches and the
// span builder (internal/spans) reads records against. It holds plain
// values only: the targets, their traced files, probes, span definitions,
// sites with their compiled fetches and values, attachments and value
// histograms, indexed the way the engine indexes them. It reads no file and
// touches no kernel, and builds on every OS.
package plan

import (
	"errors"
	"os"
	"slices"

	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/insn"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

// Plan is everything the tracer attaches, indexed the way the engine indexes
// it: probe ids, span ids and site ids are positions in these slices. Targets,
// probes and spans come from the configuration; files, sites and
// attachments from the traced files, and a target may gain files while the
// receiver runs (a container started, a file upgraded): see the
// planner's ReadFile, and Append.
type Plan struct {
	Targets     []PlannedTarget
	Files       []File
	Probes      []Probe
	Spans       []SpanDef
	Sites       []Site
	Attachments []Attachment
	// Histograms are the value histograms of counters (histogram:); a
	// site's ValueHist selects one.
	Histograms []Histogram

	// open holds, by file index, the open file each File was read from,
	// until the tracer takes it (TakeFile) or Close closes it.
	open map[int]*os.File
}

// TakeFile hands the caller (the tracer, to attach it through
// /proc/self/fd/N) the open file that File fi was read from: the very
// file, never reopened by path. The caller then owns it. It returns nil
// when the file was taken already or the plan was closed. Only the plan's
// owner may call it.
//
// The plan holds one descriptor per file from Resolve or Append until the
// file is taken: the tracer takes each when it attaches it (at Open, or
// AttachFile), and keeps it only with its ProbeControl option, so that
// 2,000 targets' files hold 2,000 descriptors during Start and none after
// (one each with ProbeControl).
func (plan *Plan) TakeFile(fi int) *os.File {
	f := plan.open[fi]
	delete(plan.open, fi)
	return f
}

// Close closes the open files the tracer did not take. The plan stays
// usable as a description.
func (plan *Plan) Close() error {
	var errs []error
	for fi, f := range plan.open {
		errs = append(errs, f.Close())
		delete(plan.open, fi)
	}
	return errors.Join(errs...)
}

// FileSpec is one file of a target read and compiled, before it joins a
// plan: site indexes and cookies are counted from its own start. It owns
// the open file it was read from until Append hands that to the plan (Open);
// a FileSpec that is not appended must be closed with Close.
type FileSpec struct {
	File        File
	Sites       []Site
	Attachments []Attachment
	// Locations counts the file's locations per probe id.
	Locations map[int]int

	// Open is the file it was read from, never reopened by path: the
	// spec owns it until Append hands it to the plan.
	Open *os.File
}

// Close closes the file of a FileSpec that was not appended.
func (spec *FileSpec) Close() error {
	if spec.Open == nil {
		return nil
	}
	err := spec.Open.Close()
	spec.Open = nil
	return err
}

// Append adds a file read by ReadFile to the plan and returns its index:
// its sites get the next site ids and its attachments the cookies that
// select them. The plan takes the spec's open file (see TakeFile). Only
// the plan's owner may call it.
func (plan *Plan) Append(spec *FileSpec) int {
	fi := len(plan.Files)
	if spec.Open != nil {
		if plan.open == nil {
			plan.open = map[int]*os.File{}
		}
		plan.open[fi], spec.Open = spec.Open, nil
	}
	f := spec.File
	// Exactly the room the file needs: appending one by one would leave
	// up to as much again unused (20,000 sites of a function pattern).
	plan.Sites = slices.Grow(plan.Sites, len(spec.Sites))
	plan.Attachments = slices.Grow(plan.Attachments, len(spec.Attachments))
	f.Sites = Range{len(plan.Sites), len(plan.Sites) + len(spec.Sites)}
	f.Attachments = Range{len(plan.Attachments), len(plan.Attachments) + len(spec.Attachments)}
	for _, s := range spec.Sites {
		s.File = fi
		plan.Sites = append(plan.Sites, s)
	}
	semaphores := plan.semaphores(f.ID.FileID, spec.Attachments)
	for _, a := range spec.Attachments {
		a.File = fi
		if a.Program == ProgramSite {
			a.Cookie += uint64(f.Sites.Start)
		}
		if a.RefCtrOffset == 0 {
			a.RefCtrOffset = semaphores[a.FileOffset]
		}
		plan.Attachments = append(plan.Attachments, a)
	}
	for id, n := range spec.Locations {
		plan.Probes[id].Locations += n
	}
	plan.Files = append(plan.Files, f)
	return fi
}

// semaphores returns, by file offset, the USDT semaphore (its file offset)
// of the attachments to one file, those of a file being appended and the
// plan's to the same file (device and inode; id zero: the new ones only),
// where one has a semaphore; nil when none has. The kernel keeps one uprobe
// per file offset and refuses (EINVAL) a second with another semaphore,
// as a function's entry or return on the nop of a USDT probe with a
// semaphore would be: Append gives every attachment at such an offset the
// semaphore. That adds nothing to the semaphore's count while the USDT
// probe is attached (the kernel counts a uprobe once per process, however
// many attach to it), and keeps it up while the other attachment stays,
// the USDT probe left out by the overhead budget.
func (plan *Plan) semaphores(id procfs.FileID, attachments []Attachment) map[uint64]uint64 {
	var out map[uint64]uint64
	add := func(as []Attachment) {
		for _, a := range as {
			if a.RefCtrOffset == 0 {
				continue
			}
			if out == nil {
				out = map[uint64]uint64{}
			}
			if _, ok := out[a.FileOffset]; !ok {
				out[a.FileOffset] = a.RefCtrOffset
			}
		}
	}
	add(attachments)
	if id == (procfs.FileID{}) {
		return out
	}
	for _, f := range plan.Files {
		if f.ID.FileID == id {
			add(plan.Attachments[f.Attachments.Start:f.Attachments.End])
		}
	}
	return out
}

// FileOf returns the file of a site.
func (plan *Plan) FileOf(site int) *File { return &plan.Files[plan.Sites[site].File] }

// PlannedTarget is one configured target (config.Target, at the same
// index) as the plan holds it: a path or name, the processes it traces,
// and what the planner decided about it.
type PlannedTarget struct {
	// Path is the target's path or name as configured.
	Path string
	// PID restricts the target to one process; 0 means every process.
	PID int
	// ProcessStart is the start time of PID's process when its files were
	// located (clock ticks since boot, /proc/PID/stat field 22), 0 when
	// none was located: the pid and it name the target's process, so that
	// a process that takes the pid later is not traced as the target.
	ProcessStart uint64
	// Selector chooses the target's processes by executable and command
	// line; nil chooses every process.
	Selector *procfs.Selector
	// ChosenBit is the target's bit in the engine's per-process masks
	// when it has a PID or a Selector (Chosen).
	Chosen    bool
	ChosenBit uint8
	// Optional says the target's file may appear after Start.
	Optional bool
	// BuildID, when set, is the GNU build id (hex) the target's files must
	// have; others are not attached.
	BuildID string
	// ServiceName is the service.name resource attribute of its telemetry.
	ServiceName string
	// ThreadContext says its spans that open outermost on a thread read
	// the thread's published context (OTEP 4947) and join its trace;
	// ThreadAttributes that they also take its attributes.
	ThreadContext, ThreadAttributes bool
	// Executable is true for a program (ET_EXEC, or ET_DYN with an
	// interpreter): processes that map it run it. False for a shared
	// library. Taken from the first file read.
	Executable bool
	// Notes are what the plan leaves out on purpose, one sentence each, for
	// the log: functions a pattern matched that cannot be probed, names a
	// pattern's function does not have, parameters $$params cannot read.
	Notes []string
}

// File is one traced file of a target. Several files serve one target when
// its processes see different files at its path (containers of different
// images, a file upgraded while old processes still run the old one).
type File struct {
	Target int
	// Path says where the file was found, for people (logs, messages,
	// telemetry): a path in the collector's own view, or one inside a
	// process's root shown as /proc/PID/root/…. It is never opened: the
	// plan holds the very file it was read from (TakeFile).
	Path string
	// SeenAs is the file's path as the target's processes see it.
	SeenAs string
	// ID is the identity of the file the plan was read from: the tracer
	// attaches only that file.
	ID procfs.FileVersion
	// Executable is true for a program, false for a shared library.
	Executable bool
	// Arch is the file's architecture (its ELF machine): register numbers
	// in its sites' fetches are registers of Arch.
	Arch regs.Arch
	// Go is true for a Go binary: its spans pair by goroutine, its returns
	// are probed on RET instructions and its arguments follow the Go ABI.
	Go bool
	// GoVersion is the Go version that built it, when known.
	GoVersion string
	// GoIDOffset is the byte offset of the goroutine id in the Go
	// runtime's g structure of a Go binary, 0 when unknown.
	GoIDOffset uint16
	// BuildID is the file's GNU build id (hex), GoBuildID its Go build id;
	// empty when it has none.
	BuildID, GoBuildID string
	// ThroughRoot says the file was found through a process's root (it
	// lives in another mount namespace: a container's): its hits are also
	// counted per process, so that metrics carry container.id.
	ThroughRoot bool
	// DebugInfo says where the DWARF the file was read with came from, as
	// "embedded", "build-id PATH", "debuglink PATH" or "debuginfod PATH";
	// "" when the target needed none (no $names, line: probes or function
	// patterns).
	DebugInfo string
	// Sites and Attachments are the ranges [Start, End) of the plan's
	// sites and attachments that belong to the file.
	Sites, Attachments Range
}

// Range is a half-open range of indexes [Start, End).
type Range struct{ Start, End int }

// Probe is one probe reference of one target; hits and losses are counted per probe.
type Probe struct {
	Target int
	// Ref is the reference as written in the configuration, e.g. "usdt:postgresql:query__start".
	Ref string
	// Kind is the parsed kind of Ref.
	Kind config.ProbeKind
	// Locations is the number of attach locations the probe resolved to.
	Locations int
	// Filtered says the probe is a filtered counter: its hits are those
	// that pass its conditions, and Ref is "PROBE if CONDITION && …".
	Filtered bool
	// Why says, for the log, why the planner chose where the probe goes
	// when the configuration left it the choice: the exit of a function
	// span whose returns: auto probes the RET instructions (ret:) instead
	// of a kernel return probe. Empty otherwise.
	Why string
	// Metric is the counter's sum under a name of its own (a counter's
	// metric:), nil without one.
	Metric *config.CounterMetric
}

// Histogram is the value histogram of one counter: the values of Expr, one
// per counted hit of Probe, aggregated in the kernel.
type Histogram struct {
	Probe int
	// Expr is the fetch expression as configured.
	Expr string
}

// SpanDef is one span definition: a configured span (config.Span), or
// one function a configured function pattern matched. Span records
// (event.SpanRecord) name it by its index, their Def.
type SpanDef struct {
	Target int
	Name   string
	// Entry and Exit are probe ids.
	Entry, Exit int
	// MinDurationNs and SampleRatio are the kernel-side filters of the span
	// (see config.Span).
	MinDurationNs uint64
	SampleRatio   float64
	// Kind is the span kind.
	Kind config.SpanKind
	// Pattern is the function pattern (function: glob or source_file:)
	// the definition was expanded from, "" for a span as configured.
	Pattern string
	// Function says the span is one activation of a function: entry at its
	// first instruction, exit at its return. The engine then knows the span
	// is over when the stack unwinds past it (longjmp, exceptions).
	Function bool
	// Carrier says where the span finds the trace context it joins.
	Carrier Carrier
	// CarrierKey is the attribute holding a text carrier (CarrierText).
	CarrierKey string
	// Status marks the span as an error when the RoleStatus value holds it.
	Status *config.Comparison
	// ErrorExits are probe ids that also close the span, and mark it an
	// error (error_exit).
	ErrorExits []int
	// Constants are attributes every span of the definition carries, in
	// key order (constant_attributes).
	Constants []KeyValue
	// ValueNames name the values of integer attributes, by key
	// (value_names); the planner puts each table in its fetches' Value.
	ValueNames map[string][]fetch.Enumerator
	// FirstWords are attributes made of the first word of another
	// (first_word), in key order.
	FirstWords []Derived
	// Truncates cut attributes to the length another holds (truncate), in
	// key order.
	Truncates []Derived
	// Metric is the histogram of the definition's durations under a name
	// of its own (metric:), nil without one.
	Metric *config.SpanMetric
}

// KeyValue is a constant attribute.
type KeyValue struct{ Key, Value string }

// Derived is an attribute computed from another one of the same span:
// Key from From.
type Derived struct{ Key, From string }

// Carrier is where a span definition finds a trace context.
type Carrier uint8

const (
	// CarrierNone: the span starts a trace or joins its enclosing span's.
	CarrierNone Carrier = iota
	// CarrierText: a W3C traceparent in the CarrierKey attribute's text.
	CarrierText
	// CarrierBinary: ids fetched by RoleTraceID and RoleParentSpanID fetches.
	CarrierBinary
)

// Role says what a fetched value is for.
type Role uint8

const (
	// RoleAttribute values become span attributes.
	RoleAttribute Role = iota
	// RoleTraceID is the trace id of a binary carrier.
	RoleTraceID
	// RoleParentSpanID is the parent span id of a binary carrier.
	RoleParentSpanID
	// RoleStatus is the value of the span's status_error condition.
	RoleStatus
	// RoleFilter is the value of a condition, compared in the kernel and
	// never stored.
	RoleFilter
	// RoleHistogram is a counter's histogram value, aggregated in the
	// kernel and never stored.
	RoleHistogram
)

// Site is one location that opens or closes spans, or counts hits for a
// target that chooses its processes; its id is the BPF cookie of its
// attachment.
type Site struct {
	// Probe is the probe id whose hits the site counts.
	Probe int
	// File is the index of the file the site is in.
	File int
	// EntrySpan and ExitSpan are span ids, or -1 when the site has no such role.
	EntrySpan, ExitSpan int
	// Entry and Exit are the fetches run for each role, in attribute-key order.
	Entry, Exit []Fetch
	// Filters are the conditions of the site: of the span it opens
	// (at entry), of the span it closes (AtExit), or of its filtered
	// counter (FilteredHits).
	Filters []Filter
	// FilteredHits says only hits that pass Filters count: the site of a
	// filtered counter.
	FilteredHits bool
	// PerProcess says the site's hits are also counted per process (a
	// file found through a process's root).
	PerProcess bool
	// ValueHist is 1 + the index of the plan's Histogram the site feeds
	// with HistValue, 0 for none (HistValue nil): a pointer, for the
	// many sites without one (a Fetch is 128 bytes, the rest of a Site
	// 120).
	ValueHist int
	HistValue *Fetch
	// LeafBytes is, for the entry site of a C function on x86-64 that is
	// a leaf (it makes no call and leaves its own code only by returning:
	// insn.Leaf), the bytes of its code from the site's
	// address to the function's end; 0 otherwise. Nothing runs inside a
	// call of a leaf but its own code (and signal handlers), which lets
	// the engine mark a call head sampling leaves out without reading its
	// return address.
	LeafBytes uint32
}

// Filter is one compiled condition.
type Filter struct {
	// Value fetches what is compared: an integer, or the address of a
	// string.
	Value Fetch
	// Cond is the condition as parsed from the configuration.
	Cond config.Condition
	// AtExit says it is evaluated where the site closes a span.
	AtExit bool
}

// FilterSize returns the bytes of an integer condition's value that count:
// the value's type, or the USDT argument's own size when that is smaller.
func (f Filter) FilterSize() uint8 {
	size := f.Value.Value.Type.Size
	if f.Value.Value.FromArg && f.Value.Value.ArgSize != 0 && f.Value.Value.ArgSize < size {
		size = f.Value.Value.ArgSize
	}
	if size == 0 {
		size = 8
	}
	return size
}

// Program selects the engine program an attachment runs.
type Program uint8

const (
	// ProgramCount counts hits; the cookie is the probe id.
	ProgramCount Program = iota + 1
	// ProgramSite runs a site's spec; the cookie is the site id.
	ProgramSite
	// ProgramCountPerProcess counts hits, also per process; the cookie is
	// the probe id.
	ProgramCountPerProcess
)

// Attachment is one uprobe or uretprobe to create.
type Attachment struct {
	// File is the index of the file it is in.
	File int
	// FileOffset is the file offset of the probed instruction (for a
	// uretprobe, of the function's first instruction).
	FileOffset uint64
	// Address is the virtual address of the same instruction, for messages.
	Address uint64
	// RefCtrOffset is the file offset of the USDT semaphore, 0 if none.
	RefCtrOffset uint64
	// Return makes it a uretprobe.
	Return bool
	// Program and Cookie select what runs and with which spec.
	Program Program
	Cookie  uint64
	// Class says how the kernel runs the probed instruction, and so what
	// each hit costs.
	Class insn.SiteClass
	// Probe is the probe id, for messages and self-telemetry.
	Probe int
}

// Base says where a fetch starts.
type Base uint8

const (
	// BaseRegister starts from the value of a register.
	BaseRegister Base = iota + 1
	// BaseConstant starts from Disp alone.
	BaseConstant
)

// StoreKind says what a fetch stores in the span record.
type StoreKind uint8

const (
	// StoreInt stores 8 bytes.
	StoreInt StoreKind = iota + 1
	// StoreString stores a NUL-terminated string of at most MaxLen bytes.
	StoreString
	// StoreBytes stores exactly MaxLen bytes.
	StoreBytes
	// StoreGoString stores a Go string (pointer and length) of at most
	// MaxLen-1 bytes, in the same layout as StoreString.
	StoreGoString
)

// FetchKind returns the engine's fetch kind (bpfobj.FetchKind*) that stores
// values of kind k, 0 for an unknown kind.
func (k StoreKind) FetchKind() uint8 {
	switch k {
	case StoreInt:
		return bpfobj.FetchKindInt
	case StoreString:
		return bpfobj.FetchKindString
	case StoreBytes:
		return bpfobj.FetchKindBytes
	case StoreGoString:
		return bpfobj.FetchKindGoString
	}
	return 0
}

// Fetch is one compiled fetch expression: how the engine reads the value
// (v = Base + Disp + Index*Scale, then one read per dereference) and how user
// space turns the stored bytes into an attribute.
type Fetch struct {
	// Key is the attribute key (for hidden roles, the configuration field).
	Key string
	// Role says whether the value is an attribute or feeds the span's
	// trace context or status.
	Role Role
	// Text is the expression as configured.
	Text string

	Base     Base
	Register regs.Register // BaseRegister
	Index    regs.Register // with Scale != 0
	Scale    uint8
	Disp     int64
	// Derefs are the offsets of the dereferences, in order.
	Derefs []int64
	// LastIsAddress makes the last dereference only add its offset: the
	// string or bytes are read at that address (kernel probe syntax).
	LastIsAddress bool
	Store         StoreKind
	// ReadSize is the number of bytes the last dereference of a StoreInt reads.
	ReadSize uint8
	// MaxLen bounds StoreString (bytes including the NUL) and sizes StoreBytes.
	MaxLen uint16
	// LenRegister holds the length of a StoreGoString without dereference
	// (the register after the pointer's in the Go ABI).
	LenRegister regs.Register

	Value Value
}

// Value says how a stored integer becomes an attribute value.
type Value struct {
	// Type is the attribute's type: the configured one, or the default.
	Type fetch.Type
	// Enum is the value-to-name table of a $name of an enum type: the
	// attribute is the enumerator's name (fetch.FormatEnum: flags as
	// "A|B", unknown values as the number). Nil for other values.
	Enum []fetch.Enumerator
	// FromArg is true when the stored integer is a USDT argument's own value:
	// it is first cut to ArgSize bytes after a right shift of Shift bits and
	// sign-extended when ArgSigned, then converted to Type.
	FromArg   bool
	ArgSize   uint8
	ArgSigned bool
	Shift     uint8
}
