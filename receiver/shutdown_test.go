package receiver

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
)

// manyFiles is the number of distinct files TestShutdownManyFiles
// attaches: a node with this many traced binaries must still stop within
// Kubernetes' grace period (30 s), and in about a second.
const manyFiles = 2000

// shutdownBound is the longest Shutdown may take for manyFiles files.
const shutdownBound = 2 * time.Second

// TestShutdownManyFiles attaches manyFiles distinct files (copies of the
// demo: a uprobe belongs to an inode) with a span, a function span and a
// counter each, runs one of them, and checks that Shutdown lowers every
// semaphore, delivers every span and returns within shutdownBound. Closing
// the links one after another waited for one RCU grace period per link
// (about 48 ms per file here: 97 s for 2,000 files).
func TestShutdownManyFiles(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	src, err := os.ReadFile(b.Program)
	require.NoError(t, err)
	paths := make([]string, manyFiles)
	targets := make([]config.Target, manyFiles)
	for i := range paths {
		// Next to the original, which finds libdemo.so through its run path.
		paths[i] = filepath.Join(b.Dir, fmt.Sprintf("demo-%04d", i))
		require.NoError(t, os.WriteFile(paths[i], src, 0o755))
		targets[i] = config.Target{
			Path: paths[i], ServiceName: fmt.Sprintf("demo-%04d", i),
			Spans: []config.Span{
				{Name: "query", Entry: "usdt:demo:query__start", Exit: "usdt:demo:query__done"},
				{Name: "work", Function: "work", Returns: config.ReturnsUretprobe},
			},
			Counters: config.CountersOf("usdt:demo:tick"),
		}
	}
	demo := testutil.StartDemo(t, paths[manyFiles-1])
	rssBefore := statusKiB(t, "VmRSS")

	begun := time.Now()
	s := startReceiver(t, targets)
	attach := time.Since(begun)
	require.Len(t, s.rcv.plan.Files, manyFiles)
	require.Equal(t, [3]int{1, 1, 2}, demo.Semaphores(), "semaphores while attached")
	rss := statusKiB(t, "VmRSS")

	const n = 5
	demo.Run(n)
	begun = time.Now()
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	took := time.Since(begun)
	t.Logf("%d files: Start %v, RSS %d MiB (%d MiB before Start, high-water mark %d MiB); Shutdown %v",
		manyFiles, attach.Round(time.Millisecond), rss>>10, rssBefore>>10, statusKiB(t, "VmHWM")>>10, took.Round(time.Millisecond))

	assert.Equal(t, [3]int{0, 0, 0}, demo.Semaphores(), "Shutdown lowered every semaphore")
	names := map[string]int{}
	for _, sp := range allSpans(s.traces) {
		if attrInt(t, sp.resource, "process.pid") == int64(demo.PID) {
			names[sp.Name()]++
		}
	}
	assert.Equal(t, map[string]int{"query": n, "work": n}, names, "every span completed before Shutdown is delivered")
	assert.LessOrEqual(t, took, shutdownBound, "Shutdown of %d files", manyFiles)
}

// statusKiB reads a "kB" line of /proc/self/status.
func statusKiB(t *testing.T, key string) int {
	t.Helper()
	data, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no %s in /proc/self/status", key)
	return 0
}

// TestShutdownDrainsPastProcessRecords: Shutdown right after the traced
// calls finds every span still in the ring buffer, behind process records
// (the traced program's own exec, any exec on the host). The final drain
// read the ring in batches of max_batch_spans records and stopped at the
// first batch with fewer spans than that, leaving the rest: TestPostgres
// lost its pg.query span that way (1,022 of 3,866 palloc spans came, in
// a first batch of 1,024 records with two process records).
func TestShutdownDrainsPastProcessRecords(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	cfg := createDefaultConfig()
	cfg.Targets = []config.Target{{Path: b.Program, Spans: []config.Span{{Name: "work", Function: "work", Returns: config.ReturnsUretprobe}}}}
	cfg.MaxBatchSpans = 4
	// The drain goroutine waits this long after the first record: the
	// spans are still in the ring when Shutdown comes.
	cfg.FlushInterval = time.Second
	s := startReceiverConfig(t, cfg)
	demo := testutil.StartDemo(t, b.Program) // its exec is a record before its spans
	const n = 50
	demo.Run(n)
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	assert.Equal(t, n, len(allSpans(s.traces)), "every span completed before Shutdown")
}
