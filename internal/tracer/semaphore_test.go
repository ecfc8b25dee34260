package tracer

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/planner"
)

// Another tool's uprobe at the file offset of a USDT probe with a
// semaphore, without the semaphore (a function probe, where the probe's
// nop is the function's first instruction), holds the kernel's one uprobe
// at that offset: the kernel refuses the probe with its semaphore there
// (EINVAL), in both attach modes, and the error says why beside what the
// kernel's code says.
func TestSemaphoreTakenByAnotherTool(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildC(t, "usdtentry", "-fcf-protection=none")
	targets := []config.Target{{Path: bin, Counters: []config.Counter{{Probe: "usdt:app:start"}}}}
	require.NoError(t, config.Validate(targets))
	pl, err := planner.Resolve(targets)
	require.NoError(t, err)
	require.NoError(t, pl.Plan.Close())
	probe := pl.Plan.Attachments[0]
	require.NotZero(t, probe.RefCtrOffset, "the probe has a semaphore")

	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.Kprobe,
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
		License:      "GPL",
	})
	require.NoError(t, err)
	defer prog.Close()
	ex, err := link.OpenExecutable(bin)
	require.NoError(t, err)
	other, err := ex.Uprobe("entered", prog, &link.UprobeOptions{Address: probe.FileOffset})
	require.NoError(t, err)
	defer other.Close()

	for _, mode := range attachModes {
		t.Run(mode.name, func(t *testing.T) {
			pl, err := planner.Resolve(targets)
			require.NoError(t, err)
			defer pl.Plan.Close()
			tr, err := Open(pl.Plan, Options{RingBufferSize: testRing, PerLocation: mode.perLocation})
			if tr != nil {
				_ = tr.Close()
			}
			var attachErr *AttachError
			require.ErrorAs(t, err, &attachErr)
			assert.Contains(t, err.Error(), "attaching usdt:app:start in "+bin)
			assert.Contains(t, err.Error(), "another uprobe, of any tool, is at this file offset with another USDT semaphore")
		})
	}
}
