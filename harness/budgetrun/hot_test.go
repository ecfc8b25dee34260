package budgetrun

import (
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

// A process in the kernel's default autogroup (here a kernel thread, as a
// CI runner started without a session of its own was) cannot be given an
// autogroup priority: the kernel says EINVAL, and the budget test goes on
// with nice alone instead of failing.
func TestRaiseAutogroupOfTheDefaultGroup(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := os.Stat("/proc/self/autogroup"); err != nil {
		// No CONFIG_SCHED_AUTOGROUP: there is nothing to raise, and nothing fails.
		require.NoError(t, raiseAutogroup(os.Getpid(), -10))
		return
	}
	pid := defaultGroupProcess(t)
	err := os.WriteFile("/proc/"+strconv.Itoa(pid)+"/autogroup", []byte("0"), 0)
	require.Error(t, err, "the kernel refuses the default group a priority")
	require.NoError(t, raiseAutogroup(pid, 0))
}

// defaultGroupProcess returns a process in the default autogroup: its
// autogroup file is empty.
func defaultGroupProcess(t *testing.T) int {
	t.Helper()
	for _, pid := range []int{2, 1} { // kthreadd, init
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/autogroup"); err == nil && len(b) == 0 {
			return pid
		}
	}
	testutil.SkipOrFail(t, "no process in the default autogroup here (kthreadd always is where the kernel has autogroups)")
	return 0
}
