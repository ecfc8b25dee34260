package tracer

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/insn"
)

// The canary is the program its listing says: an x86-64 executable of one
// read-execute segment, whose code decodes to the listed instructions and
// whose seccomp filter denies exactly 335, 336 and getppid.
func TestCanaryImage(t *testing.T) {
	image, probed := canaryELF()
	f, err := elf.NewFile(bytes.NewReader(image))
	require.NoError(t, err)
	assert.Equal(t, elf.EM_X86_64, f.Machine)
	assert.Equal(t, elf.ET_EXEC, f.Type)
	assert.Equal(t, uint64(canaryBase+canaryCode), f.Entry)
	require.Len(t, f.Progs, 1)
	p := f.Progs[0]
	assert.Equal(t, elf.PT_LOAD, p.Type)
	assert.Equal(t, elf.PF_R|elf.PF_X, p.Flags)
	assert.Equal(t, uint64(len(image)), p.Filesz)

	insts, err := insn.Decode(canaryText[:0x98])
	require.NoError(t, err)
	var text []string
	for _, in := range insts {
		text = append(text, in.Text)
	}
	assert.Equal(t, []string{
		"mov $0x9d,%eax", "mov $0x26,%edi", "mov $0x1,%esi", "xor %edx,%edx", "xor %r10d,%r10d", "xor %r8d,%r8d", "syscall",
		"test %rax,%rax", "jne 0x6b",
		"lea 0x73(%rip),%rax", "push %rax", "pushq $0x6",
		"mov $0x13d,%eax", "mov $0x1,%edi", "xor %esi,%esi", "mov %rsp,%rdx", "syscall", "test %rax,%rax", "jne 0x6b",
		"mov $0x6e,%eax", "syscall", "cmp $-0x1,%rax", "jne 0x77",
		"callq 0x90", "cmp $0x2a,%rax", "jne 0x5f",
		"mov $0xe7,%eax", "xor %edi,%edi", "syscall",
		"mov $0xe7,%eax", "mov $0x1,%edi", "syscall",
		"mov $0xe7,%eax", "mov $0x2,%edi", "syscall",
		"mov $0xe7,%eax", "mov $0x3,%edi", "syscall",
		"data32 nopw %cs:(%rax,%rax)", "data16 nop",
		"push %rbp", "pop %rbp", "mov $0x2a,%eax", "retq",
	}, text)
	assert.Equal(t, uint64(canaryCode+0x90), probed)
	assert.Equal(t, byte(0x55), image[probed], "the probed function starts with push %rbp, which the kernel emulates")

	type sockFilter struct {
		code   uint16
		jt, jf uint8
		k      uint32
	}
	var filter []sockFilter
	for b := canaryText[0x98:]; len(b) >= 8; b = b[8:] {
		filter = append(filter, sockFilter{binary.LittleEndian.Uint16(b), b[2], b[3], binary.LittleEndian.Uint32(b[4:])})
	}
	assert.Equal(t, []sockFilter{
		{0x20, 0, 0, 0},          // ld [0]
		{0x15, 3, 0, 335},        // jeq #335, deny
		{0x15, 2, 0, 336},        // jeq #336, deny
		{0x15, 1, 0, 110},        // jeq #110, deny
		{0x06, 0, 0, 0x7fff0000}, // ret ALLOW
		{0x06, 0, 0, 0x00050001}, // ret ERRNO(EPERM)
	}, filter)
}

func TestCanaryVerdict(t *testing.T) {
	for _, tc := range []struct {
		code     int
		signal   string
		hits     uint64
		ok       bool
		hazard   bool
		contains string
	}{
		{0, "", 1, true, false, "ran on right under a return probe that fired 1 time(s)"},
		{0, "SIGSEGV", 0, true, true, "died of SIGSEGV"},
		{0, "SIGSYS", 0, true, true, "died of SIGSYS"},
		{canaryWrongValue, "", 1, true, true, "wrong return value"},
		{0, "", 0, false, false, ""},
		{canaryNoFilter, "", 0, false, false, ""},
		{canaryUnfiltered, "", 1, false, false, ""},
	} {
		v, ok := canaryVerdict(tc.code, tc.signal, tc.hits)
		assert.Equal(t, tc.ok, ok, "%+v", tc)
		assert.Equal(t, tc.hazard, v.Hazard, "%+v", tc)
		assert.Equal(t, tc.ok, v.Measured, "%+v", tc)
		assert.Contains(t, v.Reason, tc.contains)
	}
}

func TestUretprobeSeccompByRelease(t *testing.T) {
	for release, hazard := range map[string]bool{
		"6.10.14":           false,
		"6.11.0-1-amd64":    true,
		"6.12.0":            true,
		"6.12.13":           true,
		"6.12.14":           false,
		"6.12.57-cloud":     false,
		"6.13.2":            true,
		"6.13.3":            false,
		"6.14.0":            false,
		"6.18.44-fc-v669":   false,
		"5.15.0-91-generic": false,
		"7.0.1":             false,
		"garbage":           true,
		"6.12-rc3":          true,
	} {
		v := uretprobeSeccompByRelease(release)
		assert.Equal(t, hazard, v.Hazard, "%s: %s", release, v.Reason)
		assert.False(t, v.Measured)
		assert.NotEmpty(t, v.Reason)
	}
}

// On this kernel (which lets the uretprobe system call pass seccomp
// filters) the canary runs on right under its return probe, which fires;
// without the probe it exits 0 too, and the check takes milliseconds.
func TestCheckUretprobeSeccomp(t *testing.T) {
	testutil.RequireRoot(t)
	if Arch().String() != "x86-64" && Arch().String() != "amd64" {
		t.Skip("the uretprobe system call is x86-64's")
	}
	image, _ := canaryELF()
	bin := filepath.Join(t.TempDir(), "canary")
	require.NoError(t, os.WriteFile(bin, image, 0o755))
	require.NoError(t, exec.Command(bin).Run(), "the canary alone sets its filter, checks it and exits 0")

	start := time.Now()
	v := CheckUretprobeSeccomp()
	took := time.Since(start)
	t.Logf("%+v in %v", v, took)
	assert.False(t, v.Hazard, v.Reason)
	assert.True(t, v.Measured, v.Reason)
	assert.Contains(t, v.Reason, "ran on right under a return probe that fired 1 time(s)")
	assert.Less(t, took, time.Second)
}
