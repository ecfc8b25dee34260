//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

// The floor of the collector's work: building, with pdata alone, spans of
// the shape the receiver delivers in the collector measurement (one
// resource with the receiver's resource attributes, its scope, and spans
// with a name, kind, trace and span ids, start and end times and three
// integer attributes: thread.id and the two fetched values).

// floorBatch is the number of spans per ResourceSpans the floor builds.
const floorBatch = 1024

// PdataFloor is what building spans of the receiver's shape with pdata
// alone costs: CPU time and allocations per span, GC on.
type PdataFloor struct {
	// How says where it was measured: "standalone" (its own process,
	// pinned to one CPU) or "in-process" (the benchmark's own process).
	How          string  `json:"how"`
	GOMAXPROCS   int     `json:"gomaxprocs"`
	Spans        int     `json:"spans"`
	NsPerSpan    float64 `json:"ns_per_span"`
	AllocsPerSpn float64 `json:"allocs_per_span"`
	BytesPerSpan float64 `json:"bytes_per_span"`
}

// buildFloorBatch builds one ResourceSpans of count spans, numbered from
// base (testutil.FloorBatch). The spanfloor receiver (spanfloor.Build, a
// module of its own so that ocb can build it into a collector) builds the
// same: both are checked against testdata/floor-batch.json.
func buildFloorBatch(base, count int) ptrace.Traces {
	return testutil.FloorBatch(base, count)
}

// runtimeDefaults returns this process's environment without the Go
// runtime's settings (GOGC, GOMAXPROCS, GOMEMLIMIT, GODEBUG): measured
// processes run with the defaults, GC on.
func runtimeDefaults() []string {
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "GOGC", "GOMAXPROCS", "GOMEMLIMIT", "GODEBUG":
		default:
			env = append(env, kv)
		}
	}
	return env
}

// floorSink keeps the floor's output alive, as a pipeline would.
var floorSink ptrace.Traces

// measureFloor builds batches until it used d of CPU time after a warm-up
// of d/5, and returns the CPU time (every thread of this process: GC
// included) and allocations per span. CPU time, not wall time, bounds it:
// a busy machine takes the CPU away from it, not its measure.
func measureFloor(how string, d time.Duration) *PdataFloor {
	for i, cpu0 := 0, cpuSeconds(); cpuSeconds()-cpu0 < d.Seconds()/5; i += floorBatch {
		floorSink = buildFloorBatch(i, floorBatch)
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0, n := cpuSeconds(), 0
	for cpuSeconds()-cpu0 < d.Seconds() {
		floorSink = buildFloorBatch(n, floorBatch)
		n += floorBatch
	}
	cpu := cpuSeconds() - cpu0
	runtime.ReadMemStats(&m1)
	return &PdataFloor{
		How:          how,
		GOMAXPROCS:   runtime.GOMAXPROCS(0),
		Spans:        n,
		NsPerSpan:    cpu * 1e9 / float64(n),
		AllocsPerSpn: float64(m1.Mallocs-m0.Mallocs) / float64(n),
		BytesPerSpan: float64(m1.TotalAlloc-m0.TotalAlloc) / float64(n),
	}
}

// floorMain is the benchmark run as the standalone floor (-pdata-floor): it
// measures for secs seconds and prints the result as JSON.
func floorMain(secs float64) error {
	f := measureFloor("standalone", time.Duration(secs*float64(time.Second)))
	return json.NewEncoder(os.Stdout).Encode(f)
}

// standaloneFloor runs the floor in a process of its own, pinned to cpu
// (GOMAXPROCS follows: 1), so that nothing else of the benchmark runs or
// is collected in it.
func standaloneFloor(cpu int, secs float64) (*PdataFloor, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{self, "-pdata-floor", strconv.FormatFloat(secs, 'f', -1, 64)}
	if cpu >= 0 {
		args = append([]string{"taskset", "-c", strconv.Itoa(cpu)}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = runtimeDefaults()
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("running the standalone pdata floor: %w", err)
	}
	var f PdataFloor
	if err := json.Unmarshal(out, &f); err != nil {
		return nil, fmt.Errorf("reading the standalone pdata floor %q: %w", out, err)
	}
	return &f, nil
}
