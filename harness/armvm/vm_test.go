package armvm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

// The tests in the VM find their fixtures through testutil, which cannot
// import this package (its tests import testutil): one name on both sides.
func TestFixturesEnvMatchesTestutil(t *testing.T) {
	assert.Equal(t, testutil.FixturesEnv, FixturesEnv)
	assert.Equal(t, fixturesDir+"/otelcol-uprobe", DistroPath)
}

func TestInitScript(t *testing.T) {
	script, err := InitScript("abc123", []TestRun{
		{Name: "internal/usdt", Command: []string{"/tests/usdt.test", "-test.v", "-test.skip=^(TestA|TestB)$"}},
		{Name: "internal/regs", Command: []string{"/tests/regs.test"}},
	}, InitOptions{CI: true})
	require.NoError(t, err)
	for _, want := range []string{
		"#!/bin/busybox sh\n",
		"mount -t proc proc /proc\n",
		"mount -t devtmpfs devtmpfs /dev\n",
		"mount -t tracefs tracefs /sys/kernel/tracing\n",
		"ifconfig lo 127.0.0.1 up\n",
		"export PATH=/bin HOME=/tmp TMPDIR=/tmp CI=true ARMVM_FIXTURES=/fixtures\n",
		"m=ARMVM:abc123:\n",
		`echo "${m}BEGIN internal/usdt"` + "\n'/tests/usdt.test' '-test.v' '-test.skip=^(TestA|TestB)$'\n" + `echo "${m}END internal/usdt $?"` + "\n",
		`echo "${m}DONE"` + "\nsync\npoweroff -f\n",
	} {
		assert.Contains(t, script, want)
	}
	assert.Less(t, strings.Index(script, "internal/usdt"), strings.Index(script, "internal/regs"), "runs keep their order")

	script, err = InitScript("t", nil, InitOptions{})
	require.NoError(t, err)
	assert.Contains(t, script, " CI=false ")

	for _, bad := range []TestRun{
		{Name: "", Command: []string{"x"}},
		{Name: "a b", Command: []string{"x"}},
		{Name: "it's", Command: []string{"x"}},
		{Name: "ok"},
		{Name: "ok", Command: []string{"-test.run='x'"}},
		{Name: "ok", Command: []string{"a\nb"}},
	} {
		_, err := InitScript("t", []TestRun{bad}, InitOptions{})
		assert.Error(t, err, "%+v", bad)
	}
}

func TestParseMarker(t *testing.T) {
	for _, tt := range []struct {
		line string
		want marker
		ok   bool
	}{
		{"ARMVM:tok:START 6.1.0-56-cloud-arm64 2", marker{kind: "START", rest: "6.1.0-56-cloud-arm64 2"}, true},
		{"ARMVM:tok:BEGIN internal/usdt", marker{kind: "BEGIN", name: "internal/usdt"}, true},
		{"ARMVM:tok:END internal/usdt 0", marker{kind: "END", name: "internal/usdt", code: 0}, true},
		{"ARMVM:tok:END internal/usdt 1", marker{kind: "END", name: "internal/usdt", code: 1}, true},
		{"PASSARMVM:tok:END internal/usdt 0", marker{kind: "END", name: "internal/usdt"}, true},
		{"ARMVM:tok:DONE", marker{kind: "DONE"}, true},
		{"  ARMVM:tok:DONE  ", marker{kind: "DONE"}, true},
		{"ARMVM:other:DONE", marker{}, false},
		{"ARMVM:tok:END internal/usdt x", marker{}, false},
		{"ARMVM:tok:END internal/usdt", marker{}, false},
		{"ARMVM:tok:END internal/usdt 0 extra", marker{}, false},
		{"ARMVM:tok:BEGIN", marker{}, false},
		{"ARMVM:tok:START", marker{}, false},
		{"ARMVM:tok:DONE now", marker{}, false},
		{"ARMVM:tok:", marker{}, false},
		{"ARMVM:tok:REBOOT", marker{}, false},
		{"=== RUN   TestX", marker{}, false},
	} {
		got, ok := parseMarker(tt.line, "tok")
		assert.Equal(t, tt.ok, ok, tt.line)
		assert.Equal(t, tt.want, got, tt.line)
	}
}

// fakeQEMU writes a shell script that stands for qemu-system-aarch64 and
// prints body's lines (with TOKEN replaced) as the console would.
func fakeQEMU(t *testing.T, token, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "qemu")
	script := "#!/bin/sh\n" + strings.ReplaceAll(body, "TOKEN", token)
	require.NoError(t, os.WriteFile(p, []byte(script), 0o755))
	return p
}

func TestVMRun(t *testing.T) {
	img := Image{Kernel: "k", Initramfs: "i", Token: "f00d", Tests: []string{"a", "b"}}
	for _, tt := range []struct {
		name     string
		body     string
		timeout  time.Duration
		failures []string
		codes    []int
		done     bool
	}{
		{"pass", `printf 'booting\r\nARMVM:TOKEN:START 6.1.0 2\r\n'
echo 'ARMVM:TOKEN:BEGIN a'; echo '--- PASS: TestX'; echo 'ARMVM:TOKEN:END a 0'
echo 'ARMVM:TOKEN:BEGIN b'; echo 'ARMVM:TOKEN:END b 0'
echo 'ARMVM:TOKEN:DONE'
`, time.Minute, nil, []int{0, 0}, true},
		{"fail", `echo 'ARMVM:TOKEN:START 6.1.0 2'
echo 'ARMVM:TOKEN:BEGIN a'; echo 'ARMVM:TOKEN:END a 1'
echo 'ARMVM:TOKEN:BEGIN b'; echo 'ARMVM:TOKEN:END b 0'
echo 'ARMVM:TOKEN:DONE'
`, time.Minute, []string{"a: exit code 1"}, []int{1, 0}, true},
		{"panic", `echo 'ARMVM:TOKEN:START 6.1.0 2'
echo 'ARMVM:TOKEN:BEGIN a'; echo 'Kernel panic - not syncing'; exit 0
`, time.Minute, []string{"a: did not finish", "b: did not finish", "the VM stopped before its last marker"}, []int{0, 0}, false},
		{"forged marker", `echo 'ARMVM:TOKEN:START 6.1.0 2'
echo 'ARMVM:TOKEN:BEGIN a'; echo 'ARMVM:beef:END a 0'; echo 'ARMVM:beef:DONE'
`, time.Minute, []string{"a: did not finish", "b: did not finish", "the VM stopped before its last marker"}, []int{0, 0}, false},
		{"hang", `echo 'ARMVM:TOKEN:START 6.1.0 2'
echo 'ARMVM:TOKEN:BEGIN a'
sleep 600 &
wait
`, 300 * time.Millisecond, []string{"a: did not finish", "b: did not finish", "the VM did not finish within the timeout"}, []int{0, 0}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var console strings.Builder
			vm := VM{QEMU: fakeQEMU(t, img.Token, tt.body), Timeout: tt.timeout, Console: &console}
			started := time.Now()
			rep, err := vm.Run(context.Background(), img)
			require.NoError(t, err)
			assert.Less(t, time.Since(started), 30*time.Second, "the timeout stops the run")
			assert.Equal(t, tt.failures, rep.Failures())
			assert.Equal(t, tt.done, rep.Done)
			require.Len(t, rep.Tests, 2)
			for i, c := range tt.codes {
				assert.Equal(t, c, rep.Tests[i].ExitCode, rep.Tests[i].Name)
			}
			assert.Equal(t, "6.1.0", rep.Kernel)
			assert.Equal(t, 2, rep.CPUs)
			assert.Contains(t, console.String(), "ARMVM:"+img.Token+":BEGIN a\n", "the console is copied without carriage returns")
		})
	}

	_, err := VM{QEMU: filepath.Join(t.TempDir(), "missing")}.Run(context.Background(), img)
	require.Error(t, err)
}

func TestVMArgs(t *testing.T) {
	args := VM{CPUs: 2}.Args(Image{Kernel: "/c/vmlinuz", Initramfs: "/w/initramfs.cpio"})
	assert.Equal(t, "-M virt -cpu cortex-a57 -smp 2 -m 2048 -nographic -no-reboot -net none "+
		"-kernel /c/vmlinuz -initrd /w/initramfs.cpio -append console=ttyAMA0 panic=-1 quiet", strings.Join(args, " "))
	assert.Contains(t, strings.Join(VM{MemoryMiB: 512}.Args(Image{}), " "), "-smp 1 -m 512 ")
}

func TestPickKernel(t *testing.T) {
	out := `linux-image-6.1.0-54-cloud-arm64-unsigned - Linux 6.1 for arm64 cloud
linux-image-6.1.0-9-cloud-arm64-unsigned - Linux 6.1 for arm64 cloud
linux-image-6.1.0-56-cloud-arm64-unsigned - Linux 6.1 for arm64 cloud
linux-image-6.1.0-56-cloud-arm64-unsigned-dbg - debug symbols
linux-image-6.1.0-57-arm64-unsigned - Linux 6.1 for 64-bit ARMv8 machines
`
	assert.Equal(t, "linux-image-6.1.0-56-cloud-arm64-unsigned", pickKernel(out))
	assert.Equal(t, "", pickKernel(""))
	assert.Equal(t, "", pickKernel("linux-image-cloud-arm64 - meta package"))

	dir := t.TempDir()
	assert.Equal(t, "", cachedKernel(dir))
	for _, n := range []string{"linux-image-6.1.0-9-cloud-arm64-unsigned", "linux-image-6.1.0-10-cloud-arm64-unsigned"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, n+".vmlinuz"), nil, 0o644))
	}
	assert.Equal(t, "linux-image-6.1.0-10-cloud-arm64-unsigned", cachedKernel(dir))
}

func TestDefaultCacheDir(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", "/x/cache")
	d, err := DefaultCacheDir()
	require.NoError(t, err)
	assert.Equal(t, "/x/cache/otel-uprobe/arm64", d)
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "/home/u")
	d, err = DefaultCacheDir()
	require.NoError(t, err)
	assert.Equal(t, "/home/u/.cache/otel-uprobe/arm64", d)
}

func TestReportFailures(t *testing.T) {
	r := Report{Tests: []TestReport{{Name: "a", Finished: true}}, Done: true}
	assert.Empty(t, r.Failures())
	r.TimedOut = true
	assert.Equal(t, []string{"the VM did not finish within the timeout"}, r.Failures())
}

// MakeImage puts busybox, /etc/hosts, the test binaries and the fixtures
// into the initramfs, and runs each binary with its package's -test.skip,
// -test.run and environment.
func TestMakeImage(t *testing.T) {
	dir := t.TempDir()
	touch := func(name string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(name), 0o755))
		return p
	}
	pkgs := []Package{
		{Path: "./internal/usdt", Skip: "^TestA$"},
		{Path: "./receiver", Run: "^(TestB|TestC)$"},
		{Path: "./harness/e2e/distrotest", Env: []string{"OTELCOL_UPROBE_BIN=" + DistroPath}, NeedsDistro: true},
	}
	bins := []string{touch("usdt.test"), touch("receiver.test"), touch("distrotest.test")}
	fixtures := []File{{Path: fixturesDir + "/demo-O2/demo", Mode: 0o755, Source: touch("demo")}}
	img, err := MakeImage(dir, Assets{Kernel: "vmlinuz", Busybox: touch("busybox")}, pkgs, bins, fixtures, InitOptions{CI: true})
	require.NoError(t, err)
	assert.Equal(t, []string{"internal/usdt", "receiver", "harness/e2e/distrotest"}, img.Tests)

	data, err := os.ReadFile(img.Initramfs)
	require.NoError(t, err)
	files, err := readInitramfs(data)
	require.NoError(t, err)
	byPath := map[string]File{}
	for _, f := range files {
		byPath[f.Path] = f
	}
	assert.Equal(t, []byte("busybox"), byPath["/bin/busybox"].Data)
	assert.Equal(t, []byte("demo"), byPath["/fixtures/demo-O2/demo"].Data)
	assert.Equal(t, []byte("receiver.test"), byPath["/tests/receiver.test"].Data)
	assert.Contains(t, string(byPath["/etc/hosts"].Data), "127.0.0.1 localhost")
	script := string(byPath["/init"].Data)
	for _, want := range []string{
		"'/tests/usdt.test' '-test.v' '-test.count=1' '-test.skip=^TestA$'\n",
		"'/tests/receiver.test' '-test.v' '-test.count=1' '-test.run=^(TestB|TestC)$'\n",
		"'/bin/env' 'OTELCOL_UPROBE_BIN=/fixtures/otelcol-uprobe' '/tests/distrotest.test' '-test.v' '-test.count=1'\n",
	} {
		assert.Contains(t, script, want)
	}
}
