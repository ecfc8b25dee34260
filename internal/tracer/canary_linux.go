package tracer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
	"github.com/otel-uprobe/uprobereceiver/internal/tracer/floor"
)

// canaryTimeout bounds one canary run, which makes six system calls.
const canaryTimeout = 2 * time.Second

// uretprobeSyscall is the kernel symbol of the uretprobe system call
// (x86-64, Linux 6.11).
const uretprobeSyscall = "__x64_sys_uretprobe"

// CheckUretprobeSeccomp finds out whether a kernel return probe kills a
// process whose seccomp filter denies the uretprobe system call: on x86-64
// from Linux 6.11 (whose return probes return through that system call)
// to the kernels that let it pass every filter. It runs the canary (see
// canaryText) in a child process built in memory, under a return probe on
// the memory file's inode that no other process maps, and decides from the
// kernel's release when no canary can run (memory files not executable, no
// permission to attach). Nothing runs in the collector's own threads but
// the attaching; about 40 ms (more on a loaded machine).
func CheckUretprobeSeccomp() UretprobeSeccomp {
	if Arch() != regs.ArchAMD64 {
		return UretprobeSeccomp{Reason: "on this architecture return probes return through a breakpoint, not a system call"}
	}
	has, err := procfs.FS{}.KernelHas(uretprobeSyscall)
	if err == nil && !has[uretprobeSyscall] {
		return UretprobeSeccomp{Reason: "the kernel has no uretprobe system call (Linux before 6.11): return probes return through a breakpoint"}
	}
	v, err := runCanary()
	if err == nil {
		return v
	}
	var u unix.Utsname
	release := "unknown"
	if unix.Uname(&u) == nil {
		release = unix.ByteSliceToString(u.Release[:])
	}
	v = uretprobeSeccompByRelease(release)
	v.Reason += fmt.Sprintf(" (the canary could not tell: %v)", err)
	return v
}

// runCanary runs the canary under a kernel return probe and returns what it
// shows, or an error when it shows nothing.
func runCanary() (UretprobeSeccomp, error) {
	image, probed := canaryELF()
	fd, err := unix.MemfdCreate("otelcol-uprobe-canary", unix.MFD_CLOEXEC|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) {
		fd, err = unix.MemfdCreate("otelcol-uprobe-canary", unix.MFD_CLOEXEC) // before Linux 6.3, no MFD_EXEC
	}
	if err != nil {
		return UretprobeSeccomp{}, fmt.Errorf("creating the canary's memory file: %w", err)
	}
	file := os.NewFile(uintptr(fd), "otelcol-uprobe-canary")
	defer file.Close()
	if _, err := file.Write(image); err != nil {
		return UretprobeSeccomp{}, fmt.Errorf("writing the canary: %w", err)
	}
	path := fmt.Sprintf("/proc/self/fd/%d", fd)

	spec, err := floor.Spec()
	if err != nil {
		return UretprobeSeccomp{}, fmt.Errorf("reading the counter program: %w", err)
	}
	multi := features.HaveBPFLinkUprobeMulti() == nil
	if multi {
		spec.Programs[floor.Program].AttachType = ebpf.AttachTraceUprobeMulti
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return UretprobeSeccomp{}, fmt.Errorf("loading the counter program: %w", err)
	}
	defer coll.Close()
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return UretprobeSeccomp{}, fmt.Errorf("opening the canary: %w", err)
	}
	var l link.Link
	if multi {
		l, err = ex.UretprobeMulti(nil, coll.Programs[floor.Program], &link.UprobeMultiOptions{Addresses: []uint64{probed}})
	} else {
		l, err = ex.Uretprobe("canary", coll.Programs[floor.Program], &link.UprobeOptions{Address: probed, TraceFSPrefix: "otelcol_uprobe"})
	}
	if err != nil {
		return UretprobeSeccomp{}, fmt.Errorf("attaching the canary's return probe: %w", err)
	}
	defer l.Close()

	ctx, cancel := context.WithTimeout(context.Background(), canaryTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path)
	cmd.Env = []string{}
	err = cmd.Run()
	code, signal := 0, ""
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		ws, _ := ee.Sys().(syscall.WaitStatus)
		if ws.Signaled() {
			signal = unix.SignalName(ws.Signal())
		} else {
			code = ws.ExitStatus()
		}
	case err != nil:
		return UretprobeSeccomp{}, fmt.Errorf("running the canary: %w", err)
	}
	if ctx.Err() != nil {
		return UretprobeSeccomp{}, fmt.Errorf("the canary did not end within %v", canaryTimeout)
	}
	hits, err := sumPerCPU(coll.Maps[floor.Map])
	if err != nil {
		return UretprobeSeccomp{}, err
	}
	v, ok := canaryVerdict(code, signal, hits)
	if !ok {
		return UretprobeSeccomp{}, fmt.Errorf("the canary ended with code %d and its return probe fired %d time(s), which shows nothing", code, hits)
	}
	return v, nil
}
