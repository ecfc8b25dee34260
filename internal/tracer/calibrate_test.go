package tracer

import (
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/insn"
	"github.com/otel-uprobe/uprobereceiver/internal/planner"
)

// Calibration probes this test binary's own functions, the way it probes
// the collector's: through /proc/self/maps and /proc/self/exe.
func TestCalibrate(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	for _, mode := range attachModes {
		t.Run(mode.name, func(t *testing.T) {
			pl, err := planner.Resolve([]config.Target{{Path: b.Program, Counters: config.CountersOf("uprobe:inner")}})
			require.NoError(t, err)
			tr, err := Open(pl.Plan, Options{RingBufferSize: testRing, PerLocation: mode.perLocation, ProgramStats: true})
			require.NoError(t, err)
			defer func() { assert.NoError(t, tr.Close()) }()
			c, err := tr.Calibrate()
			if runtime.GOARCH != "amd64" {
				require.ErrorIs(t, err, ebpf.ErrNotSupported, "calibration is x86-64 only: the receiver refuses overhead_budget elsewhere")
				return
			}
			require.NoError(t, err)
			t.Logf("optimizable %.0f ns, emulated %.0f ns, single-stepped %.0f ns, return leg %.0f ns, counter %.0f ns; calls %v × %d rounds in %v",
				c.HitNs[insn.Optimizable], c.HitNs[insn.Emulated], c.HitNs[insn.SingleStepped], c.ReturnNs, c.CounterNs, c.Calls, c.Rounds, c.Took)
			assert.Greater(t, c.HitNs[insn.Emulated], 50.0, "a trap costs something")
			assert.Greater(t, c.HitNs[insn.SingleStepped], 2*c.HitNs[insn.Emulated], "single-stepping costs a second trap and more")
			if HaveOptimizedUprobes() {
				assert.Less(t, c.HitNs[insn.Optimizable], c.HitNs[insn.Emulated], "this kernel optimizes uprobes on 5-byte nops")
			}
			assert.Greater(t, c.ReturnNs, 50.0, "a uretprobe adds its return leg")
			assert.True(t, c.Stats, "run as root, the tracer turns BPF run-time statistics on")
			assert.Greater(t, c.CounterNs, 0.0)
			assert.Less(t, c.Took, time.Second, "calibration is bounded")
			assert.Equal(t, c.HitNs[insn.Emulated]+c.ReturnNs, c.HitCost(insn.Emulated, true))
		})
	}
}
