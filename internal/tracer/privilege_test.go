package tracer

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/privilege"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
	"github.com/otel-uprobe/uprobereceiver/internal/tracer/floor"
)

// TestMain runs attachProbe instead of the tests when TestAttachPrivileges
// runs the test binary with TRACER_ATTACH_PROBE set to a capability set (a
// privilege.Set, in hex): the main goroutine, locked to its thread, keeps
// only those capabilities on that thread (capabilities are per thread), and
// attachProbe makes every system call from it.
func TestMain(m *testing.M) {
	if v := os.Getenv("TRACER_ATTACH_PROBE"); v != "" {
		runtime.LockOSThread()
		if err := keepCapabilities(v); err != nil {
			fmt.Printf("PROBE-ERROR %v\n", err)
			os.Exit(1)
		}
		b, _ := json.Marshal(attachProbe())
		fmt.Printf("PROBE %s\n", b)
		return
	}
	os.Exit(m.Run())
}

// keepCapabilities reduces the calling thread's effective and permitted
// capabilities to the set hex names (capset(2)), as a process run by root
// with that bounding set has them (setpriv --bounding-set, which busybox's
// setpriv lacks).
func keepCapabilities(hex string) error {
	keep, err := strconv.ParseUint(hex, 16, 64)
	if err != nil {
		return fmt.Errorf("capability set %q: %w", hex, err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{
		{Effective: uint32(keep), Permitted: uint32(keep)},
		{Effective: uint32(keep >> 32), Permitted: uint32(keep >> 32)},
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	if have, err := privilege.Effective(); err != nil || uint64(have) != keep {
		return fmt.Errorf("effective capabilities %#x after capset, not %#x (%v)", have, keep, err)
	}
	return nil
}

// attachResult is what a process with some capabilities could do: each
// field "ok" or the error.
type attachResult struct {
	Load, PerfEvent, Multi string
	// HaveMulti is what HaveUprobeMulti says; Check what the receiver's
	// privilege check says ("" when it passes).
	HaveMulti bool
	Check     string
}

// attachProbe loads the counter program and attaches it to a function of
// this executable (keepCapabilities: any architecture's code will do, the
// probe never fires) through a uprobe perf event and, where the kernel has
// them, through a uprobe_multi link.
func attachProbe() attachResult {
	r := attachResult{HaveMulti: HaveUprobeMulti()}
	if err := privilege.Check(privilege.Attach(privilege.Kernel{UprobeMulti: r.HaveMulti, MemcgAccounting: true})); err != nil {
		r.Check = err.Error()
	}
	result := func(err error) string {
		if err != nil {
			return err.Error()
		}
		return "ok"
	}
	offset, err := fileOffsetOf(reflect.ValueOf(keepCapabilities).Pointer())
	if err != nil {
		r.Load = err.Error()
		return r
	}
	load := func(multi bool) (*ebpf.Collection, error) {
		spec, err := floor.Spec()
		if err != nil {
			return nil, err
		}
		if multi {
			spec.Programs[floor.Program].AttachType = ebpf.AttachTraceUprobeMulti
		}
		return ebpf.NewCollection(spec)
	}
	plain, err := load(false)
	if r.Load = result(err); err != nil {
		return r
	}
	defer plain.Close()
	var multi *ebpf.Collection
	if r.HaveMulti {
		if multi, err = load(true); err != nil {
			r.Load = result(err)
			return r
		}
		defer multi.Close()
	}
	ex, err := link.OpenExecutable("/proc/self/exe")
	if err != nil {
		r.Load = err.Error()
		return r
	}
	l, err := ex.Uprobe("attach_probe", plain.Programs[floor.Program], &link.UprobeOptions{Address: offset, TraceFSPrefix: "otelcol_uprobe"})
	if r.PerfEvent = result(err); err == nil {
		l.Close()
	}
	if multi == nil {
		return r
	}
	l, err = ex.UprobeMulti(nil, multi.Programs[floor.Program], &link.UprobeMultiOptions{Addresses: []uint64{offset}})
	if r.Multi = result(err); err == nil {
		l.Close()
	}
	return r
}

// fileOffsetOf returns the file offset of the code at address pc of this
// executable, found through the process's mappings.
func fileOffsetOf(pc uintptr) (uint64, error) {
	maps, err := procfs.FS{}.Maps(os.Getpid())
	if err != nil {
		return 0, err
	}
	for _, m := range maps {
		if uint64(pc) >= m.Start && uint64(pc) < m.End && m.Executable() {
			return uint64(pc) - m.Start + m.FileOffset, nil
		}
	}
	return 0, fmt.Errorf("no executable mapping holds %#x", pc)
}

// The capabilities privilege.Attach lists for the running kernel are the
// ones that attach. With uprobe_multi links (Linux 6.6 or later, with the
// fix of CVE-2025-38466): CAP_BPF with CAP_PERFMON attach through
// uprobe_multi links but may not create uprobe perf events; CAP_SYS_ADMIN
// alone does both; without capabilities nothing loads, and the privilege
// check still knows the kernel has uprobe_multi links and names CAP_BPF and
// CAP_PERFMON, not CAP_SYS_ADMIN. Without them (Linux 6.1 in make
// test-arm64), see attachPrivilegesPerfEvent.
func TestAttachPrivileges(t *testing.T) {
	testutil.RequireRoot(t)
	run := func(caps ...privilege.Capability) attachResult {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "TRACER_ATTACH_PROBE="+strconv.FormatUint(uint64(privilege.SetOf(caps...)), 16))
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", b)
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PROBE "); ok {
				var r attachResult
				require.NoError(t, json.Unmarshal([]byte(v), &r))
				return r
			}
		}
		t.Fatalf("no PROBE line:\n%s", b)
		return attachResult{}
	}
	if !HaveUprobeMulti() {
		attachPrivilegesPerfEvent(t, run)
		return
	}

	modern := run(privilege.Attach(privilege.Modern)...)
	t.Logf("CAP_BPF, CAP_PERFMON: %+v", modern)
	assert.Equal(t, "ok", modern.Load)
	assert.Equal(t, "ok", modern.Multi, "uprobe_multi links need CAP_BPF and CAP_PERFMON only")
	assert.Contains(t, modern.PerfEvent, "permission denied", "uprobe perf events need CAP_SYS_ADMIN (CVE-2025-38466)")
	assert.True(t, modern.HaveMulti)
	assert.Empty(t, modern.Check)

	admin := run(privilege.SysAdmin)
	t.Logf("CAP_SYS_ADMIN: %+v", admin)
	assert.Equal(t, attachResult{Load: "ok", PerfEvent: "ok", Multi: "ok", HaveMulti: true}, admin)

	none := run()
	t.Logf("no capability: %+v", none)
	assert.NotEqual(t, "ok", none.Load)
	assert.True(t, none.HaveMulti, "the kernel's symbols say it has uprobe_multi links")
	assert.Contains(t, none.Check, "missing capabilities CAP_BPF (needed to")
	assert.Contains(t, none.Check, "and CAP_PERFMON (needed to")
	assert.NotContains(t, none.Check, "CAP_SYS_ADMIN")
}

// attachPrivilegesPerfEvent is TestAttachPrivileges on a kernel without
// uprobe_multi links, where every location attaches through a uprobe perf
// event: CAP_SYS_ADMIN alone loads and attaches, and the privilege check
// asks for it alone. CAP_BPF with CAP_PERFMON load, and attach only if the
// kernel lacks the fix of CVE-2025-38466 (Linux 6.16 and the stable
// kernels of July 2025 on); the privilege check names CAP_SYS_ADMIN
// either way, as the receiver does not count on the unfixed kernels, so
// it never passes where the kernel refuses. Without capabilities nothing
// loads, and the check names CAP_SYS_ADMIN, not CAP_BPF or CAP_PERFMON.
func attachPrivilegesPerfEvent(t *testing.T, run func(caps ...privilege.Capability) attachResult) {
	admin := run(privilege.SysAdmin)
	t.Logf("CAP_SYS_ADMIN: %+v", admin)
	assert.Equal(t, attachResult{Load: "ok", PerfEvent: "ok"}, admin)

	modern := run(privilege.BPF, privilege.Perfmon)
	t.Logf("CAP_BPF, CAP_PERFMON: %+v", modern)
	assert.Equal(t, "ok", modern.Load)
	assert.False(t, modern.HaveMulti)
	assert.Empty(t, modern.Multi, "nothing to attach a uprobe_multi link with")
	assert.Contains(t, modern.Check, "missing capability CAP_SYS_ADMIN (needed to create uprobe perf events")
	if modern.PerfEvent == "ok" {
		t.Logf("this kernel lacks the fix of CVE-2025-38466: CAP_PERFMON creates uprobe perf events, which the privilege check does not count on")
	} else {
		assert.Contains(t, modern.PerfEvent, "permission denied", "the kernel has the fix of CVE-2025-38466: uprobe perf events need CAP_SYS_ADMIN")
	}

	none := run()
	t.Logf("no capability: %+v", none)
	assert.NotEqual(t, "ok", none.Load)
	assert.False(t, none.HaveMulti, "the kernel's symbols say it has no uprobe_multi links")
	assert.Contains(t, none.Check, "missing capability CAP_SYS_ADMIN (needed to")
	assert.NotContains(t, none.Check, "CAP_BPF")
	assert.NotContains(t, none.Check, "CAP_PERFMON")
}
