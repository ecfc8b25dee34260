//go:build linux

package privilege

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func names(caps []Capability) []string {
	var out []string
	for _, c := range caps {
		out = append(out, c.Name)
	}
	return out
}

func TestRequired(t *testing.T) {
	assert.Equal(t, []string{"CAP_BPF", "CAP_PERFMON", "CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH"}, names(Required(Modern)))
	assert.Equal(t, []string{"CAP_BPF", "CAP_PERFMON"}, names(Attach(Modern)))
	old := Kernel{MemcgAccounting: true} // Linux 5.15 to 6.5
	assert.Equal(t, []string{"CAP_SYS_ADMIN", "CAP_SYS_PTRACE", "CAP_DAC_READ_SEARCH"}, names(Required(old)))
	assert.Equal(t, []string{"CAP_SYS_ADMIN", "CAP_SYS_RESOURCE"}, names(Attach(Kernel{})))
	// Required does not alias Attach's slice.
	a := Required(Modern)
	a[0] = SysAdmin
	assert.Equal(t, "CAP_BPF", Required(Modern)[0].Name)
}

// TestNumbers checks every capability's number against the kernel headers'
// as golang.org/x/sys/unix has them.
func TestNumbers(t *testing.T) {
	want := map[string]uint{
		"CAP_BPF":             unix.CAP_BPF,
		"CAP_PERFMON":         unix.CAP_PERFMON,
		"CAP_SYS_ADMIN":       unix.CAP_SYS_ADMIN,
		"CAP_SYS_PTRACE":      unix.CAP_SYS_PTRACE,
		"CAP_DAC_READ_SEARCH": unix.CAP_DAC_READ_SEARCH,
		"CAP_SYS_RESOURCE":    unix.CAP_SYS_RESOURCE,
	}
	for _, c := range []Capability{BPF, Perfmon, SysAdmin, SysPtrace, DACReadSearch, SysResource} {
		assert.Equal(t, want[c.Name], c.Number, c.Name)
		assert.NotEmpty(t, c.Reason, c.Name)
		assert.Equal(t, c.Name, "CAP_"+c.KubernetesName())
	}
}

func TestParseStatus(t *testing.T) {
	status := "Name:\tcat\nCapInh:\t0000000000000000\nCapPrm:\t000001fffeffffff\nCapEff:\t000001fffeffffff\nCapBnd:\t000001fffeffffff\n"
	s, err := ParseStatus([]byte(status))
	require.NoError(t, err)
	assert.Equal(t, Set(0x1fffeffffff), s)
	assert.True(t, s.Has(BPF))
	assert.True(t, s.Has(SysPtrace))
	assert.False(t, s.Has(SysResource), "bit 24 is clear in 0x1fffeffffff")

	_, err = ParseStatus([]byte("Name:\tcat\n"))
	require.EqualError(t, err, "status has no CapEff line")
	_, err = ParseStatus([]byte("CapEff:\tzz\n"))
	require.EqualError(t, err, `status CapEff "zz": strconv.ParseUint: parsing "zz": invalid syntax`)
}

func TestCheckSet(t *testing.T) {
	require.NoError(t, CheckSet(SetOf(Required(Modern)...), Required(Modern)))
	require.NoError(t, CheckSet(^Set(0), Required(Kernel{})))

	err := CheckSet(SetOf(BPF, Perfmon, DACReadSearch), Required(Modern))
	require.EqualError(t, err, "missing capability CAP_SYS_PTRACE (needed to "+SysPtrace.Reason+
		"); run the collector as root, or grant it (Kubernetes: securityContext.capabilities.add: [SYS_PTRACE])")

	err = CheckSet(SetOf(SysPtrace), Required(Modern))
	require.EqualError(t, err, "missing capabilities CAP_BPF (needed to "+BPF.Reason+"), CAP_PERFMON (needed to "+Perfmon.Reason+
		") and CAP_DAC_READ_SEARCH (needed to "+DACReadSearch.Reason+
		"); run the collector as root, or grant them (Kubernetes: securityContext.capabilities.add: [BPF, PERFMON, DAC_READ_SEARCH])")
	assert.Equal(t, 1, strings.Count(err.Error(), ";"), "one sentence")

	// CAP_SYS_ADMIN stands in for CAP_BPF and CAP_PERFMON, as in the kernel.
	require.NoError(t, CheckSet(SetOf(SysAdmin), Attach(Modern)))
	require.NoError(t, CheckSet(SetOf(SysAdmin), Attach(Kernel{MemcgAccounting: true})))
	require.EqualError(t, CheckSet(SetOf(BPF, Perfmon), Attach(Kernel{MemcgAccounting: true})),
		"missing capability CAP_SYS_ADMIN (needed to "+SysAdmin.Reason+"); run the collector as root, or grant it (Kubernetes: securityContext.capabilities.add: [SYS_ADMIN])")
}

// TestEffective reads this thread's capabilities with capget(2) and
// compares them with /proc/thread-self/status.
func TestEffective(t *testing.T) {
	got, err := Effective()
	require.NoError(t, err)
	status, err := os.ReadFile("/proc/thread-self/status")
	require.NoError(t, err)
	want, err := ParseStatus(status)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	if os.Geteuid() == 0 && got.Has(SysAdmin) {
		// Root on the host: everything the receiver needs.
		require.NoError(t, Check(Required(Modern)))
		require.NoError(t, Check(Required(Kernel{MemcgAccounting: true})))
	}
}

// probeResult is what probe reports from a process with reduced
// capabilities.
type probeResult struct {
	Exe, Root, NS, Maps, File bool
	Check                     string
}

// TestMain runs the probe instead of the tests when
// TestCapabilitiesGrantWhatTheySay runs the test binary under setpriv with
// fewer capabilities.
func TestMain(m *testing.M) {
	if pid := os.Getenv("PRIVILEGE_PROBE_PID"); pid != "" {
		probe(pid, os.Getenv("PRIVILEGE_PROBE_FILE"))
		return
	}
	os.Exit(m.Run())
}

// probe tries what the capabilities are said to allow on another user's
// process and file, and prints what worked.
func probe(pid, file string) {
	proc := "/proc/" + pid
	var r probeResult
	_, err := os.Readlink(proc + "/exe")
	r.Exe = err == nil
	_, err = os.Stat(proc + "/root/etc/hostname")
	r.Root = err == nil
	_, err = os.Readlink(proc + "/ns/mnt")
	r.NS = err == nil
	_, err = os.ReadFile(proc + "/maps")
	r.Maps = err == nil
	_, err = os.ReadFile(file)
	r.File = err == nil
	if err := Check(Required(Modern)); err != nil {
		r.Check = err.Error()
	}
	b, _ := json.Marshal(r)
	fmt.Printf("PROBE %s\n", b)
}

// TestCapabilitiesGrantWhatTheySay checks the reasons given for
// CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH on this kernel: a root process
// holding only some capabilities reads another user's process and file.
func TestCapabilitiesGrantWhatTheySay(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		testutil.SkipOrFail(t, "setpriv (util-linux) not found")
	}
	const nobody = 65534
	// A process of another user.
	target := exec.Command("setpriv", "--reuid="+strconv.Itoa(nobody), "--regid="+strconv.Itoa(nobody), "--clear-groups",
		"sh", "-c", "echo ready; while :; do sleep 600; done")
	target.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := target.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, target.Start())
	t.Cleanup(func() {
		_ = syscall.Kill(-target.Process.Pid, syscall.SIGKILL)
		_ = target.Wait()
	})
	buf := make([]byte, 6)
	_, err = out.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "ready\n", string(buf))

	// A file only that user may read, in a directory only it may search.
	dir := filepath.Join(t.TempDir(), "private")
	require.NoError(t, os.Mkdir(dir, 0o700))
	file := filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o600))
	require.NoError(t, os.Chown(file, nobody, nobody))
	require.NoError(t, os.Chown(dir, nobody, nobody))
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))

	run := func(caps ...Capability) probeResult {
		t.Helper()
		bounding := "-all"
		for _, c := range caps {
			bounding += ",+" + strings.ToLower(strings.TrimPrefix(c.Name, "CAP_"))
		}
		cmd := exec.Command("setpriv", "--bounding-set", bounding, os.Args[0])
		cmd.Env = append(os.Environ(), "PRIVILEGE_PROBE_PID="+strconv.Itoa(target.Process.Pid), "PRIVILEGE_PROBE_FILE="+file)
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", b)
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "PROBE "); ok {
				var r probeResult
				require.NoError(t, json.Unmarshal([]byte(v), &r))
				return r
			}
		}
		t.Fatalf("helper said no PROBE line:\n%s", b)
		return probeResult{}
	}

	all := run(Required(Modern)...)
	assert.Equal(t, probeResult{Exe: true, Root: true, NS: true, Maps: true, File: true}, all)

	noPtrace := run(BPF, Perfmon, DACReadSearch)
	assert.Equal(t, probeResult{Maps: true, File: true, Check: CheckSet(SetOf(BPF, Perfmon, DACReadSearch), Required(Modern)).Error()}, noPtrace,
		"without CAP_SYS_PTRACE: no exe, root or ns of another user's process; maps only through CAP_PERFMON")

	noDAC := run(BPF, Perfmon, SysPtrace)
	assert.Equal(t, probeResult{Exe: true, Root: true, NS: true, Maps: true, Check: CheckSet(SetOf(BPF, Perfmon, SysPtrace), Required(Modern)).Error()}, noDAC,
		"without CAP_DAC_READ_SEARCH: another user's private file stays closed to root")

	none := run()
	assert.False(t, none.Exe || none.Root || none.NS || none.Maps || none.File, "%+v", none)
	assert.Contains(t, none.Check, "missing capabilities CAP_BPF")
}

func FuzzParseStatus(f *testing.F) {
	f.Add([]byte("Name:\tcat\nCapEff:\t000001fffeffffff\n"))
	f.Add([]byte("CapEff:\t0000000000000000"))
	f.Fuzz(func(t *testing.T, status []byte) {
		s, err := ParseStatus(status)
		if err != nil {
			return
		}
		// The set round-trips through the format the kernel prints.
		again, err := ParseStatus([]byte(fmt.Sprintf("CapEff:\t%016x\n", uint64(s))))
		if err != nil || again != s {
			t.Fatalf("%x printed and parsed is %x, %v", uint64(s), uint64(again), err)
		}
	})
}
