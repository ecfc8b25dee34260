package tracer

import (
	"testing"

	"github.com/cilium/ebpf/asm"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
)

// A count-only probe's own program holds its probe id as a constant: it
// makes no bpf_get_attach_cookie call (the shared count_hit makes one),
// up to maxCountPrograms probes; with ProbeControl every probe shares
// count_hit, whose run-time statistics the overhead budget reads.
func TestCountProgramHoldsItsProbe(t *testing.T) {
	testutil.RequireRoot(t)
	for _, mode := range attachModes {
		t.Run(mode.name, func(t *testing.T) {
			tr, err := Open(&plan.Plan{}, Options{RingBufferSize: testRing, PerLocation: mode.perLocation})
			require.NoError(t, err)
			defer func() { assert.NoError(t, tr.Close()) }()
			// The kernel's instructions call helpers by address, not by
			// number: count the calls.
			calls := func(info interface {
				Instructions() (asm.Instructions, error)
			}) (n int) {
				insns, err := info.Instructions()
				require.NoError(t, err)
				for _, ins := range insns {
					if ins.IsBuiltinCall() {
						n++
					}
				}
				return n
			}
			tr.mu.Lock()
			defer tr.mu.Unlock()
			sharedProg, err := tr.program(plan.ProgramCount)
			require.NoError(t, err)
			shared, err := sharedProg.Info()
			require.NoError(t, err)
			own := tr.countProgram(7)
			require.NotNil(t, own)
			info, err := own.Info()
			require.NoError(t, err)
			assert.Equal(t, calls(shared)-1, calls(info), "a probe's own program makes no bpf_get_attach_cookie call")
			assert.Same(t, own, tr.countProgram(7), "made once")
			for p := range maxCountPrograms + 10 {
				tr.countProgram(p)
			}
			assert.Nil(t, tr.countProgram(maxCountPrograms+5), "past the bound: the shared program")
			tr.control = true
			assert.Nil(t, tr.countProgram(maxCountPrograms+100))
		})
	}
}
