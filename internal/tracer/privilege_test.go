package tracer

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/privilege"
	"github.com/otel-uprobe/uprobereceiver/internal/tracer/floor"
)

// TestMain runs attachProbe instead of the tests when TestAttachPrivileges
// runs the test binary under setpriv with fewer capabilities.
func TestMain(m *testing.M) {
	if os.Getenv("TRACER_ATTACH_PROBE") != "" {
		b, _ := json.Marshal(attachProbe())
		fmt.Printf("PROBE %s\n", b)
		return
	}
	os.Exit(m.Run())
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
// this executable through a uprobe perf event and through a uprobe_multi
// link.
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
	fns, err := calibrationFunctions()
	if err == nil {
		err = locateSelf(fns)
	}
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
	multi, err := load(true)
	if r.Load = result(err); err != nil {
		return r
	}
	defer multi.Close()
	ex, err := link.OpenExecutable("/proc/self/exe")
	if err != nil {
		r.Load = err.Error()
		return r
	}
	l, err := ex.Uprobe("attach_probe", plain.Programs[floor.Program], &link.UprobeOptions{Address: fns[0].fileOffset, TraceFSPrefix: "otelcol_uprobe"})
	if r.PerfEvent = result(err); err == nil {
		l.Close()
	}
	l, err = ex.UprobeMulti(nil, multi.Programs[floor.Program], &link.UprobeMultiOptions{Addresses: []uint64{fns[0].fileOffset}})
	if r.Multi = result(err); err == nil {
		l.Close()
	}
	return r
}

// The capabilities privilege.Attach lists per kernel are the ones that
// attach, measured on this kernel (Linux 6.6 or later, with the fix of
// CVE-2025-38466): CAP_BPF with CAP_PERFMON attach through uprobe_multi
// links but may not create uprobe perf events; CAP_SYS_ADMIN alone does
// both; without capabilities nothing loads, and the privilege check still
// knows the kernel has uprobe_multi links and names CAP_BPF and
// CAP_PERFMON, not CAP_SYS_ADMIN.
func TestAttachPrivileges(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		testutil.SkipOrFail(t, "setpriv (util-linux) not found")
	}
	if !HaveUprobeMulti() {
		testutil.SkipOrFail(t, "the kernel has no uprobe_multi links (Linux 6.6)")
	}
	run := func(caps ...privilege.Capability) attachResult {
		t.Helper()
		bounding := "-all"
		for _, c := range caps {
			bounding += ",+" + strings.ToLower(c.KubernetesName())
		}
		cmd := exec.Command("setpriv", "--bounding-set", bounding, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "TRACER_ATTACH_PROBE=1")
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
