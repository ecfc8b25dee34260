//go:build linux

package main

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// Profile summarizes a CPU and an allocation profile of the collector
// under a flood, per delivered span.
type Profile struct {
	Seconds float64 `json:"seconds"`
	Spans   int64   `json:"spans"`
	// ProcessNsPerSpan is the collector's CPU time in the profiled
	// seconds (its threads' scheduler statistics); ProfiledNsPerSpan what
	// the profiler's samples add up to.
	ProcessNsPerSpan  float64 `json:"process_ns_per_span"`
	ProfiledNsPerSpan float64 `json:"profiled_ns_per_span"`
	AllocsPerSpan     float64 `json:"allocs_per_span"`
	BytesPerSpan      float64 `json:"bytes_per_span"`
	Stages            []Stage `json:"stages"`
	Top               []Func  `json:"top_cpu"`
	TopAllocs         []Func  `json:"top_allocs"`
}

// Stage is the share of one stage of the collector's work, per delivered span.
type Stage struct {
	Name          string  `json:"name"`
	NsPerSpan     float64 `json:"ns_per_span"`
	AllocsPerSpan float64 `json:"allocs_per_span"`
	BytesPerSpan  float64 `json:"bytes_per_span"`
}

// Func is one function of a profile, per delivered span.
type Func struct {
	Name          string  `json:"name"`
	FlatNsPerSpan float64 `json:"flat_ns_per_span,omitempty"`
	CumNsPerSpan  float64 `json:"cum_ns_per_span,omitempty"`
	AllocsPerSpan float64 `json:"allocs_per_span,omitempty"`
	BytesPerSpan  float64 `json:"bytes_per_span,omitempty"`
}

// gcFrames mark a sample as garbage collection wherever they are on its
// stack: background marking, assists, sweeping and scavenging, including
// the sweeping an allocation does before it can take a span.
var gcFrames = []string{
	"runtime.gcBgMarkWorker", "runtime.gcAssistAlloc", "runtime.bgsweep", "runtime.bgscavenge",
	"runtime.gcStart", "runtime.gcMarkDone", "runtime.gcMarkTermination", "runtime.deductSweepCredit",
	"runtime.(*mheap).reclaim", "runtime.sweepone", "runtime.(*sweepLocked).sweep", "runtime.wbBufFlush",
	"runtime.gcDrain", "runtime.markroot", "runtime.(*gcControllerState)",
}

// stages name the collector's work; a sample belongs to the stage of the
// innermost function on its stack that one of them lists (a substring of
// its name), in this order of precedence within one function.
var stages = []struct {
	name  string
	funcs []string
}{
	{"ring reading and copying", []string{"internal/tracer.(*ringReader)", "internal/bpfobj.DecodeRecord", "internal/bpfobj.RecordKind", "internal/tracer.(*Tracer).Read", "internal/tracer.(*Tracer).Buffered"}},
	{"value decoding", []string{"internal/spans.(*Builder).decode", "internal/spans.(*Builder).siteOps", "internal/spans.(*valueOp)", "internal/spans.compileOps", "internal/spans.putValue", "internal/spans.putInt", "internal/spans.intValue", "internal/spans.valueSize", "internal/spans.(*hidden)", "internal/bpfobj.ValueSize", "internal/bpfobj.IntValue", "internal/bpfobj.StringValue", "internal/spans.extend", "internal/spans.(*arena)"}},
	{"id derivation", []string{"internal/spans.(*Builder).SpanID", "internal/spans.(*Builder).TraceID", "internal/spans.threadIDs", "internal/spans.mix", "internal/spans.fmix", "internal/spans.nonZero", "internal/spans.ownerOf", "internal/spans.(*Builder).idsOf", "internal/spans.(*Builder).threadIDs"}},
	{"attributes (pdata)", []string{"pdata/pcommon.Map.", "pdata/pcommon.Value.", "pdata/pcommon.NewValue", "pdata/internal.NewAnyValue", "pdata/internal.NewKeyValue", "pdata/internal.(*AnyValue)", "pdata/internal.(*KeyValue)", "pdata/internal.CopyKeyValue", "pdata/internal.CopyAnyValue"}},
	{"spans (pdata)", []string{"pdata/ptrace.", "pdata/pcommon.", "pdata/internal."}},
	{"resource grouping", []string{"internal/spans.(*Builder).slice", "internal/spans.(*Builder).resource", "receiver.(*imageCache)"}},
	{"trace-context bookkeeping", []string{"internal/spans.(*Builder).finish", "internal/spans.(*Builder).wait", "internal/spans.(*Builder).resolve", "internal/spans.(*Builder).expire", "internal/spans.(*Builder).Flush", "internal/spans.parseTraceparent", "internal/spans.binaryContext", "internal/spans.(*Builder).now"}},
	{"span loop (Build)", []string{"internal/spans."}},
	{"drain loop (waiting, process records, filtering, counts)", []string{"receiver.(*chooser)", "receiver.(*drainRecords)", "receiver.(*uprobeReceiver).drain", "receiver.(*uprobeReceiver).wait", "receiver.(*uprobeReceiver).followClock", "receiver.(*uprobeReceiver).applyFileChanges", "receiver.(*uprobeReceiver).reportCounts", "receiver.(*uprobeReceiver).deliver", "internal/tracer.(*waker)", "internal/tracer.(*Tracer).WaitRecords"}},
	{"obsreport", []string{"receiverhelper."}},
	{"debug exporter and pipeline", []string{"collector/exporter", "collector/consumer", "collector/service", "collector/internal/fanoutconsumer", "collector/pipeline"}},
	{"file watcher (execs on the machine)", []string{"receiver.(*fileWatcher)", "internal/planner.HostLocator", "internal/procfs."}},
	{"metrics and self-telemetry", []string{"receiver.(*uprobeReceiver).collect", "receiver.(*metricsEmitter)", "prometheus", "otelconf"}},
	{"the profiler itself", []string{"runtime/pprof", "net/http", "runtime.profilealloc", "runtime.mProf_"}},
	{"scheduler, timers and wakeups", []string{"runtime.schedule", "runtime.findRunnable", "runtime.park_m", "runtime.sysmon", "runtime.netpoll", "runtime.mcall", "runtime.futex", "runtime.usleep", "runtime.notetsleep", "runtime.(*timers)", "runtime.stopm", "runtime.startm", "runtime.wakep", "runtime.ready", "runtime.goready", "runtime.selectgo", "runtime.chansend", "runtime.chanrecv", "receiver.(*uprobeReceiver).every", "runtime.mstart", "runtime.goexit"}},
}

// GC and the rest are stages of their own.
const (
	stageGC        = "garbage collection"
	stageOther     = "other"
	stageUnsampled = "not in the profile (CPU time the samples miss)"
	topFunctions   = 15
	topAllocations = 10
)

func stageOf(s *profile.Sample) string {
	for _, loc := range s.Location {
		for _, l := range loc.Line {
			for _, g := range gcFrames {
				if strings.Contains(l.Function.Name, g) {
					return stageGC
				}
			}
		}
	}
	for _, loc := range s.Location {
		for _, l := range loc.Line {
			for _, st := range stages {
				for _, f := range st.funcs {
					if strings.Contains(l.Function.Name, f) {
						return st.name
					}
				}
			}
		}
	}
	return stageOther
}

// sampleIndex returns the index of a sample type, -1 if absent.
func sampleIndex(p *profile.Profile, typ string) int {
	for i, st := range p.SampleType {
		if st.Type == typ {
			return i
		}
	}
	return -1
}

// summarize reads a CPU profile and an allocation profile of the same
// seconds, in which the collector delivered spans and used cpuNs of CPU.
func summarize(cpuData, allocData []byte, spans int64, cpuNs int64, took time.Duration) (*Profile, error) {
	if spans <= 0 {
		return nil, fmt.Errorf("no spans delivered while profiling")
	}
	cp, err := profile.Parse(bytes.NewReader(cpuData))
	if err != nil {
		return nil, fmt.Errorf("reading the CPU profile: %w", err)
	}
	ap, err := profile.Parse(bytes.NewReader(allocData))
	if err != nil {
		return nil, fmt.Errorf("reading the allocation profile: %w", err)
	}
	ci := sampleIndex(cp, "cpu")
	ao, ab := sampleIndex(ap, "alloc_objects"), sampleIndex(ap, "alloc_space")
	if ci < 0 || ao < 0 || ab < 0 {
		return nil, fmt.Errorf("unexpected profile sample types")
	}
	n := float64(spans)
	out := &Profile{Seconds: took.Seconds(), Spans: spans, ProcessNsPerSpan: float64(cpuNs) / n}

	byStage := map[string]*Stage{}
	stage := func(name string) *Stage {
		if byStage[name] == nil {
			byStage[name] = &Stage{Name: name}
		}
		return byStage[name]
	}
	flat, cum := map[string]float64{}, map[string]float64{}
	var total float64
	for _, s := range cp.Sample {
		v := float64(s.Value[ci])
		total += v
		stage(stageOf(s)).NsPerSpan += v / n
		seen := map[string]bool{}
		for i, loc := range s.Location {
			for j, l := range loc.Line {
				name := l.Function.Name
				if i == 0 && j == 0 {
					flat[name] += v
				}
				if !seen[name] {
					seen[name] = true
					cum[name] += v
				}
			}
		}
	}
	out.ProfiledNsPerSpan = total / n

	aflat, abytes := map[string]float64{}, map[string]float64{}
	for _, s := range ap.Sample {
		objs, b := float64(s.Value[ao]), float64(s.Value[ab])
		out.AllocsPerSpan += objs / n
		out.BytesPerSpan += b / n
		st := stage(stageOf(s))
		st.AllocsPerSpan += objs / n
		st.BytesPerSpan += b / n
		// An allocation belongs to the first function above the
		// allocator and the runtime.
		for _, loc := range s.Location {
			name := ""
			for _, l := range loc.Line {
				if !strings.HasPrefix(l.Function.Name, "runtime.") {
					name = l.Function.Name
					break
				}
			}
			if name != "" {
				aflat[name] += objs
				abytes[name] += b
				break
			}
		}
	}

	for _, st := range byStage {
		out.Stages = append(out.Stages, *st)
	}
	sort.Slice(out.Stages, func(i, j int) bool { return out.Stages[i].NsPerSpan > out.Stages[j].NsPerSpan })
	if miss := out.ProcessNsPerSpan - out.ProfiledNsPerSpan; miss > 0 {
		out.Stages = append(out.Stages, Stage{Name: stageUnsampled, NsPerSpan: miss})
	}

	names := make([]string, 0, len(flat))
	for name := range cum {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool {
		if flat[names[i]] != flat[names[j]] {
			return flat[names[i]] > flat[names[j]]
		}
		return names[i] < names[j]
	})
	for _, name := range names[:min(topFunctions, len(names))] {
		out.Top = append(out.Top, Func{Name: name, FlatNsPerSpan: flat[name] / n, CumNsPerSpan: cum[name] / n})
	}
	names = names[:0]
	for name := range aflat {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool {
		if aflat[names[i]] != aflat[names[j]] {
			return aflat[names[i]] > aflat[names[j]]
		}
		return names[i] < names[j]
	})
	for _, name := range names[:min(topAllocations, len(names))] {
		out.TopAllocs = append(out.TopAllocs, Func{Name: name, AllocsPerSpan: aflat[name] / n, BytesPerSpan: abytes[name] / n})
	}
	return out, nil
}
