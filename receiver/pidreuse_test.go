//go:build linux && (amd64 || arm64)

package receiver

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
)

// startAtPID starts bin with pid want (free: its process was reaped) by
// setting the kernel's last pid just below it (root in the initial pid
// namespace), trying again while other processes of the machine take it
// first. It returns nil when 500 tries did not get it.
func startAtPID(t *testing.T, bin string, want int) *testutil.Program {
	t.Helper()
	for range 500 {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(want-1)), 0); err != nil {
			testutil.SkipOrFail(t, "setting the next pid: %v", err)
		}
		p := testutil.StartProgram(t, bin, "ready")
		if p.PID == want {
			return p
		}
		p.Stop()
	}
	return nil
}

// A pid: target whose process exits while Start reads the targets, its pid
// taken meanwhile by another process that maps the same file, does not
// trace that other process: a pid and its process's start time name the
// target, and the newcomer's calls are not counted as the target's.
func TestPIDTargetReusedDuringStart(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	bin := buildDlopener(t, b.Dir)
	chosen := testutil.StartProgram(t, bin, "ready")
	pid := chosen.PID
	s := created(t, []config.Target{{Path: "libc", PID: pid, Counters: config.CountersOf("uprobe:getpid")}})
	var newcomer *testutil.Program
	s.rcv.beforeAttach = func(*plan.Plan) {
		if newcomer != nil {
			return
		}
		chosen.Stop() // exits and is reaped: its pid is free
		newcomer = startAtPID(t, bin, pid)
	}
	require.NoError(t, s.rcv.Start(context.Background(), componenttest.NewNopHost()))
	require.NotNil(t, newcomer, "no process took pid %d again", pid)
	assert.Equal(t, "getpid 1000", newcomer.Ask("getpid 1000", "getpid "))
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	hits := sumPoints(s.metrics.AllMetrics()[len(s.metrics.AllMetrics())-1], "uprobe.probe.hits")
	assert.Equal(t, int64(0), hits["uprobe:getpid"], "the calls of the process that took pid %d are not the target's", pid)
}
