//go:build linux

package armvm

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// InitOptions configure the VM's /init script.
type InitOptions struct {
	// CI passes CI=true to the tests, so that a test that cannot run
	// fails instead of skipping.
	CI bool
	// TestTimeout is each test binary's -test.timeout; 0 leaves the
	// default (10 minutes).
	TestTimeout time.Duration
}

// TestRun is one command /init runs between markers.
type TestRun struct {
	// Name identifies the run in the markers and the report, e.g.
	// "internal/usdt".
	Name string
	// Command is the program and its arguments.
	Command []string
}

// The markers /init prints on the serial console, each on a line of its
// own: "ARMVM:<token>:START <kernel release> <cpus>", then
// "ARMVM:<token>:BEGIN <name>" and "ARMVM:<token>:END <name> <exit code>"
// around each test run, and "ARMVM:<token>:DONE" before powering off.
const markerPrefix = "ARMVM:"

// InitScript returns the VM's /init: a busybox shell script that mounts
// proc, sysfs, devtmpfs (busybox needs /dev/null for background jobs),
// tmpfs on /tmp and tracefs, brings the loopback interface up (tests talk
// to local servers), runs every test between markers from /tmp, and powers
// the machine off. Arguments must not hold single quotes.
func InitScript(token string, runs []TestRun, opt InitOptions) (string, error) {
	var b strings.Builder
	ci := "false"
	if opt.CI {
		ci = "true"
	}
	fmt.Fprintf(&b, `#!/bin/busybox sh
# /init of the harness/armvm test VM (generated).
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t tracefs tracefs /sys/kernel/tracing
ifconfig lo 127.0.0.1 up
export PATH=/bin HOME=/tmp TMPDIR=/tmp CI=%s %s=%s
m=%s%s:
echo "${m}START $(uname -r) $(nproc)"
cd /tmp
`, ci, FixturesEnv, fixturesDir, markerPrefix, token)
	for _, r := range runs {
		if r.Name == "" || strings.ContainsAny(r.Name, " \t\n'") || len(r.Command) == 0 {
			return "", fmt.Errorf("test run %q: want a name without spaces or quotes and a command", r.Name)
		}
		var cmd []string
		for _, a := range r.Command {
			if strings.ContainsAny(a, "'\n") {
				return "", fmt.Errorf("test run %s: argument %q holds a quote or a newline", r.Name, a)
			}
			cmd = append(cmd, "'"+a+"'")
		}
		fmt.Fprintf(&b, "echo \"${m}BEGIN %s\"\n%s\necho \"${m}END %s $?\"\n", r.Name, strings.Join(cmd, " "), r.Name)
	}
	b.WriteString("echo \"${m}DONE\"\nsync\npoweroff -f\n")
	return b.String(), nil
}

// newToken returns a random marker token.
func newToken() (string, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("making a marker token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// VM boots an Image with qemu-system-aarch64 (TCG emulation).
type VM struct {
	// QEMU is the emulator; "qemu-system-aarch64" when empty.
	QEMU string
	// CPUs is the number of virtual CPUs (-smp), 1 when 0.
	CPUs int
	// MemoryMiB is the guest's memory (-m), 2048 when 0.
	MemoryMiB int
	// Timeout bounds the whole run, from starting qemu to its exit.
	Timeout time.Duration
	// Console receives the serial console, line by line.
	Console io.Writer
}

// Args returns qemu's command line for img: the virt machine with a
// Cortex-A57, no network (which also spares qemu a missing efi-virtio.rom),
// no display, the console on stdio, and no reboot, so that a kernel panic
// (panic=-1) ends qemu at once.
func (vm VM) Args(img Image) []string {
	cpus, mem := max(vm.CPUs, 1), vm.MemoryMiB
	if mem == 0 {
		mem = 2048
	}
	return []string{
		"-M", "virt", "-cpu", "cortex-a57", "-smp", strconv.Itoa(cpus), "-m", strconv.Itoa(mem),
		"-nographic", "-no-reboot", "-net", "none",
		"-kernel", img.Kernel, "-initrd", img.Initramfs,
		"-append", "console=ttyAMA0 panic=-1 quiet",
	}
}

// TestReport is the outcome of one test run in the VM.
type TestReport struct {
	Name string
	// Finished is set when the END marker was seen.
	Finished bool
	// ExitCode is the test binary's exit status (valid when Finished).
	ExitCode int
	// Duration is the time between the BEGIN and END markers, as the host
	// saw them.
	Duration time.Duration
}

// Report is the outcome of a VM run.
type Report struct {
	// Kernel is the guest's kernel release and CPUs is its number of CPUs,
	// from the START marker.
	Kernel string
	CPUs   int
	// Boot is the time from starting qemu to the START marker.
	Boot time.Duration
	// Total is the time from starting qemu to its exit (or the timeout).
	Total time.Duration
	// Tests are the runs in image order.
	Tests []TestReport
	// Done is set when the DONE marker was seen.
	Done bool
	// TimedOut is set when the run was stopped by the timeout.
	TimedOut bool
}

// Failures lists what went wrong: tests that failed or never finished,
// and a VM that did not finish. It is empty for a good run.
func (r Report) Failures() []string {
	var out []string
	for _, t := range r.Tests {
		switch {
		case !t.Finished:
			out = append(out, fmt.Sprintf("%s: did not finish", t.Name))
		case t.ExitCode != 0:
			out = append(out, fmt.Sprintf("%s: exit code %d", t.Name, t.ExitCode))
		}
	}
	if r.TimedOut {
		out = append(out, "the VM did not finish within the timeout")
	} else if !r.Done {
		out = append(out, "the VM stopped before its last marker")
	}
	return out
}

// marker is one parsed marker line.
type marker struct {
	kind string // START, BEGIN, END, DONE
	name string
	code int
	rest string
}

// parseMarker parses a console line that is a marker of token. Test output
// interleaved on the same line before the marker is tolerated (the kernel
// and the tests share the console); anything after it is not.
func parseMarker(line, token string) (marker, bool) {
	prefix := markerPrefix + token + ":"
	i := strings.LastIndex(line, prefix)
	if i < 0 {
		return marker{}, false
	}
	fields := strings.Fields(line[i+len(prefix):])
	if len(fields) == 0 {
		return marker{}, false
	}
	m := marker{kind: fields[0]}
	switch {
	case m.kind == "DONE" && len(fields) == 1:
		return m, true
	case m.kind == "START" && len(fields) >= 2:
		m.rest = strings.Join(fields[1:], " ")
		return m, true
	case m.kind == "BEGIN" && len(fields) == 2:
		m.name = fields[1]
		return m, true
	case m.kind == "END" && len(fields) == 3:
		code, err := strconv.Atoi(fields[2])
		if err != nil {
			return marker{}, false
		}
		m.name, m.code = fields[1], code
		return m, true
	}
	return marker{}, false
}

// Run boots img and follows its console until qemu exits or the timeout
// passes (then qemu is killed). The error is for qemu not starting; what
// happened inside the VM is in the Report.
func (vm VM) Run(ctx context.Context, img Image) (Report, error) {
	rep := Report{}
	for _, n := range img.Tests {
		rep.Tests = append(rep.Tests, TestReport{Name: n})
	}
	qemu := vm.QEMU
	if qemu == "" {
		qemu = "qemu-system-aarch64"
	}
	timeout := vm.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu, vm.Args(img)...)
	// Stop the whole process group at the timeout, so that nothing keeps
	// the console pipe open.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		return rep, err
	}
	cmd.Stderr = cmd.Stdout
	console := vm.Console
	if console == nil {
		console = io.Discard
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return rep, fmt.Errorf("starting %s: %w", qemu, err)
	}
	began := map[string]time.Time{}
	r := bufio.NewReader(out)
	for {
		line, rerr := r.ReadString('\n')
		if line != "" {
			line = strings.TrimRight(line, "\r\n")
			fmt.Fprintln(console, line)
			if m, ok := parseMarker(line, img.Token); ok {
				vm.note(&rep, m, began, start)
			}
		}
		if rerr != nil {
			break
		}
	}
	werr := cmd.Wait()
	rep.Total = time.Since(start)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		rep.TimedOut = true
	} else if werr != nil && !rep.Done {
		fmt.Fprintf(console, "armvm: qemu: %v\n", werr)
	}
	return rep, nil
}

// note records a marker in the report.
func (vm VM) note(rep *Report, m marker, began map[string]time.Time, start time.Time) {
	now := time.Now()
	switch m.kind {
	case "START":
		rep.Boot = now.Sub(start)
		f := strings.Fields(m.rest)
		rep.Kernel = f[0]
		if len(f) > 1 {
			rep.CPUs, _ = strconv.Atoi(f[1])
		}
	case "BEGIN":
		began[m.name] = now
	case "END":
		for i := range rep.Tests {
			if rep.Tests[i].Name == m.name {
				rep.Tests[i].Finished = true
				rep.Tests[i].ExitCode = m.code
				if t, ok := began[m.name]; ok {
					rep.Tests[i].Duration = now.Sub(t)
				}
			}
		}
	case "DONE":
		rep.Done = true
	}
}
