package tracer

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/privilege"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

// ErrPermission says the process may not load BPF programs or create uprobes.
var ErrPermission = errors.New("permission denied: the uprobe receiver needs " + privilege.AttachRequirement)

// CheckKernel detects what the engine needs from the running kernel and
// returns one sentence naming the first thing missing, or nil. Minimum:
// Linux 5.17 with BTF (attach cookies for uprobes, task storage, ring
// buffers, bpf_loop, BTF tracepoints).
func CheckKernel() error {
	return checkKernel(btf.NewCache())
}

// checkKernel is CheckKernel reading the kernel's BTF through cache.
func checkKernel(cache *btf.Cache) error {
	if _, err := cache.Kernel(); err != nil {
		return fmt.Errorf("the kernel has no BTF (/sys/kernel/btf/vmlinux): the receiver needs a kernel built with CONFIG_DEBUG_INFO_BTF (Linux 5.17 or newer): %w", err)
	}
	checks := []struct {
		what  string
		check func() error
	}{
		{"kprobe/uprobe BPF programs", func() error { return features.HaveProgramType(ebpf.Kprobe) }},
		{"BPF ring buffers (Linux 5.8)", func() error { return features.HaveMapType(ebpf.RingBuf) }},
		{"task-local storage (Linux 5.11)", func() error { return features.HaveMapType(ebpf.TaskStorage) }},
		{"task storage in uprobe programs (Linux 5.11)", func() error { return features.HaveProgramHelper(ebpf.Kprobe, asm.FnTaskStorageGet) }},
		{"BPF attach cookies for uprobes (Linux 5.15)", func() error { return features.HaveProgramHelper(ebpf.Kprobe, asm.FnGetAttachCookie) }},
		{"bpf_loop (Linux 5.17)", func() error { return features.HaveProgramHelper(ebpf.Kprobe, asm.FnLoop) }},
	}
	for _, c := range checks {
		err := c.check()
		switch {
		case err == nil:
		case errors.Is(err, os.ErrPermission):
			return ErrPermission
		case errors.Is(err, ebpf.ErrNotSupported):
			return fmt.Errorf("the kernel lacks %s; the receiver needs Linux 5.17 or newer with BTF", c.what)
		default:
			return fmt.Errorf("probing the kernel for %s: %w", c.what, err)
		}
	}
	return nil
}

// HaveOptimizedUprobes says whether the kernel turns uprobes on 5-byte nops
// into calls into a trampoline (x86-64, Linux 6.17), found through
// /proc/kallsyms: calling the uprobe syscall to find out would raise SIGILL.
// That call writes below the probed thread's stack pointer (see package
// insn, RedZone): package planner places probes on 5-byte nops only where
// nothing below it is live.
func HaveOptimizedUprobes() bool {
	if Arch() != regs.ArchAMD64 {
		return false
	}
	has, _ := procfs.FS{}.KernelHas("arch_uprobe_optimize")
	return has["arch_uprobe_optimize"]
}

// HaveUprobeMulti says whether the kernel has uprobe_multi links (Linux
// 6.6), which attach many locations at once and need only CAP_BPF with
// CAP_PERFMON (uprobe perf events need CAP_SYS_ADMIN since the fix of
// CVE-2025-38466). A process not allowed to load the feature probe's
// program finds out from the kernel's symbols, so that a missing
// capability is named as such, not as a missing kernel feature.
func HaveUprobeMulti() bool {
	err := features.HaveBPFLinkUprobeMulti()
	if err == nil || errors.Is(err, ebpf.ErrNotSupported) {
		return err == nil
	}
	has, kerr := procfs.FS{}.KernelHas("bpf_uprobe_multi_link_attach")
	return kerr == nil && has["bpf_uprobe_multi_link_attach"]
}

// HaveUprobeSession says whether the kernel has session uprobes (Linux
// 6.12): one program at a function's entry and return, whose entry can
// make the kernel skip the return. Found in the kernel's BTF: its enum
// bpf_attach_type names BPF_TRACE_UPROBE_SESSION.
func HaveUprobeSession() bool { return haveUprobeSession(nil) }

// uprobeSession holds what haveUprobeSession found.
var uprobeSession struct {
	once sync.Once
	have bool
}

// haveUprobeSession is HaveUprobeSession reading the kernel's BTF through
// cache (nil: a cache of its own), once per process.
func haveUprobeSession(cache *btf.Cache) bool {
	uprobeSession.once.Do(func() {
		if cache == nil {
			cache = btf.NewCache()
		}
		uprobeSession.have = findUprobeSession(cache)
	})
	return uprobeSession.have
}

func findUprobeSession(cache *btf.Cache) bool {
	spec, err := cache.Kernel()
	if err != nil {
		return false
	}
	var e *btf.Enum
	if err := spec.TypeByName("bpf_attach_type", &e); err != nil {
		return false
	}
	for _, v := range e.Values {
		if v.Name == "BPF_TRACE_UPROBE_SESSION" {
			return v.Value == attachTraceUprobeSession
		}
	}
	return false
}

// Arch returns the architecture the tracer runs on and attaches uprobes
// for (the running program's GOARCH): the kernel runs uprobes only in
// programs of its own architecture, and the engine reads its struct pt_regs.
func Arch() regs.Arch { return bpfobj.Arch() }

// ARM64StepsNop says whether the kernel single-steps a uprobe on an arm64
// nop, as Linux did before 6.13 (which simulates it, "arm64: probes: Add
// support for nop"): on arm64 kernels older than 6.13. False on x86-64.
func ARM64StepsNop() bool {
	if Arch() != regs.ArchARM64 {
		return false
	}
	major, minor, ok := kernelVersion()
	return !ok || major < 6 || major == 6 && minor < 13
}

// kernelVersion returns the running kernel's major and minor version from
// uname, false when the release cannot be read.
func kernelVersion() (major, minor int, ok bool) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return 0, 0, false
	}
	return parseRelease(unix.ByteSliceToString(u.Release[:]))
}

// parseRelease reads "MAJOR.MINOR" at the start of a kernel release such as
// "6.1.0-27-cloud-arm64".
func parseRelease(release string) (major, minor int, ok bool) {
	n, err := fmt.Sscanf(release, "%d.%d", &major, &minor)
	return major, minor, err == nil && n == 2
}
