package receiver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
)

// scaleFunctions is the number of functions TestHeapPerLocation's pattern
// matches: 20,000 locations (each function's entry and its kernel return
// probe), the scale issue 21 names.
const scaleFunctions = 10_000

// heapPerLocationBound is the most live heap an attached location may
// keep, collections included: the receiver's share of the 2 KiB of
// resident memory per location it may take (the rest is the garbage the
// Go runtime lets accumulate between collections, up to as much again).
const heapPerLocationBound = 1024

// liveHeap returns the bytes live on the heap after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestHeapPerLocation attaches a function pattern over scaleFunctions
// functions and checks the heap the attached receiver keeps per location,
// after a collection of its counters: the planner's locations kept their
// whole file (every decoded instruction), the chooser and each snapshot
// held 512 bytes of duration buckets per span that never ran: 2 KiB per
// location here, 6.6 KiB with PostgreSQL's function: "*".
func TestHeapPerLocation(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	var src strings.Builder
	src.WriteString("volatile long sink;\n")
	for i := range scaleFunctions {
		fmt.Fprintf(&src, "__attribute__((noinline)) long fn_%05d(long x) { sink += x; return x * %d; }\n", i, i+3)
	}
	src.WriteString("int main(int argc, char **argv)\n{\n\t(void)argv;\n\tlong x = argc;\n")
	for i := range scaleFunctions {
		fmt.Fprintf(&src, "\tx += fn_%05d(x);\n", i)
	}
	src.WriteString("\treturn (int)(x & 1);\n}\n")
	c, bin := filepath.Join(dir, "fns.c"), filepath.Join(dir, "fns")
	require.NoError(t, os.WriteFile(c, []byte(src.String()), 0o644))
	testutil.Gcc(t, dir, "-O1", "-g", "-fno-omit-frame-pointer", "-o", bin, c)

	cfg := createDefaultConfig()
	cfg.Targets = []config.Target{{Path: bin, Spans: []config.Span{{Name: "f.", Function: "fn_*", MaxFunctions: scaleFunctions}}}}
	cfg.MaxSitesPerFile = 2 * scaleFunctions
	cfg.CollectionInterval = time.Hour // collected below, once
	require.NoError(t, cfg.Validate())
	traces, err := consumer.NewTraces(func(context.Context, ptrace.Traces) error { return nil })
	require.NoError(t, err)
	points := 0
	metrics, err := consumer.NewMetrics(func(_ context.Context, md pmetric.Metrics) error { points += md.DataPointCount(); return nil })
	require.NoError(t, err)
	f := NewFactory()
	set := receivertest.NewNopSettings(component.MustNewType("uprobe"))
	tr, err := f.CreateTraces(context.Background(), set, cfg, traces)
	require.NoError(t, err)
	_, err = f.CreateMetrics(context.Background(), set, cfg, metrics)
	require.NoError(t, err)
	rcv := tr.(*uprobeReceiver)

	before := liveHeap()
	require.NoError(t, tr.Start(context.Background(), componenttest.NewNopHost()))
	defer func() { require.NoError(t, tr.Shutdown(context.Background())) }()
	rcv.collect(context.Background())
	rcv.collect(context.Background())
	after := liveHeap()

	locations := len(rcv.plan.Attachments)
	require.Equal(t, 2*scaleFunctions, locations)
	assert.Equal(t, 2*(2*scaleFunctions+scaleFunctions+scaleFunctions), points,
		"each of two collections: the hits of every probe, the lost records of every exit, the duration histogram of every span")
	perLocation := float64(after-before) / float64(locations)
	t.Logf("%d locations: %.1f MiB live heap attached, %.0f bytes per location", locations, float64(after-before)/(1<<20), perLocation)
	assert.LessOrEqual(t, perLocation, float64(heapPerLocationBound), "live heap per attached location")
}

// scaleTargets is the number of targets TestHeapPerTargetLocation
// attaches: the scale issue 21 names.
const scaleTargets = 2000

// TestHeapPerTargetLocation attaches scaleTargets targets (distinct files,
// each with a USDT span, a function span and a USDT counter: 5 locations)
// and checks the live heap the attached receiver keeps per location, after
// two collections, as TestHeapPerLocation does for one pattern: the
// tracer's map of links per file, the file watcher's map per target, a
// copy of the targets and the planner's fetches per probe took it over
// heapPerLocationBound (1,150 bytes per location before; 2.05 KiB of
// resident memory per location in scalebench).
func TestHeapPerTargetLocation(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	src := filepath.Join(dir, "target.c")
	require.NoError(t, os.WriteFile(src, []byte(`#include <sys/sdt.h>
volatile long sink;
__attribute__((noinline)) long work(long x) { sink += x; return x * 3; }
int main(int argc, char **argv)
{
	(void)argv;
	DTRACE_PROBE1(scale, query__start, argc);
	long x = work(argc);
	DTRACE_PROBE1(scale, tick, x);
	DTRACE_PROBE1(scale, query__done, x);
	return (int)(x & 1);
}
`), 0o644))
	bin := filepath.Join(dir, "target")
	testutil.Gcc(t, dir, "-O2", "-g", "-o", bin, src)
	image, err := os.ReadFile(bin)
	require.NoError(t, err)
	cfg := createDefaultConfig()
	for i := range scaleTargets {
		path := filepath.Join(dir, fmt.Sprintf("target-%04d", i)) // a uprobe belongs to an inode
		require.NoError(t, os.WriteFile(path, image, 0o755))
		cfg.Targets = append(cfg.Targets, config.Target{
			Path: path, ServiceName: fmt.Sprintf("target-%04d", i),
			Spans: []config.Span{
				{Name: "query", Entry: "usdt:scale:query__start", Exit: "usdt:scale:query__done"},
				{Name: "work", Function: "work"},
			},
			Counters: config.CountersOf("usdt:scale:tick"),
		})
	}
	cfg.CollectionInterval = time.Hour // collected below, twice
	require.NoError(t, cfg.Validate())
	traces, err := consumer.NewTraces(func(context.Context, ptrace.Traces) error { return nil })
	require.NoError(t, err)
	metrics, err := consumer.NewMetrics(func(context.Context, pmetric.Metrics) error { return nil })
	require.NoError(t, err)
	f := NewFactory()
	set := receivertest.NewNopSettings(component.MustNewType("uprobe"))
	tr, err := f.CreateTraces(context.Background(), set, cfg, traces)
	require.NoError(t, err)
	_, err = f.CreateMetrics(context.Background(), set, cfg, metrics)
	require.NoError(t, err)
	rcv := tr.(*uprobeReceiver)

	before := liveHeap()
	require.NoError(t, tr.Start(context.Background(), componenttest.NewNopHost()))
	defer func() { require.NoError(t, tr.Shutdown(context.Background())) }()
	rcv.collect(context.Background())
	rcv.collect(context.Background())
	after := liveHeap()

	locations := len(rcv.plan.Attachments)
	require.Equal(t, 5*scaleTargets, locations)
	require.Len(t, rcv.plan.Files, scaleTargets)
	perLocation := float64(after-before) / float64(locations)
	t.Logf("%d targets, %d locations: %.1f MiB live heap attached, %.0f bytes per location", scaleTargets, locations, float64(after-before)/(1<<20), perLocation)
	assert.LessOrEqual(t, perLocation, float64(heapPerLocationBound), "live heap per attached location")
}
