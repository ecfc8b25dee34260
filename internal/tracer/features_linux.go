package tracer

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
)

// ErrPermission says the process may not load BPF programs or create uprobes.
var ErrPermission = errors.New("permission denied: the uprobe receiver needs root, or CAP_BPF with CAP_PERFMON (Linux 6.6 and later, which have uprobe_multi links), or CAP_SYS_ADMIN (older kernels, whose uprobe perf events require it)")

// CheckKernel detects what the engine needs from the running kernel and
// returns one sentence naming the first thing missing, or nil. Minimum:
// Linux 5.17 with BTF (attach cookies for uprobes, task storage, ring
// buffers, bpf_loop, BTF tracepoints).
func CheckKernel() error {
	if _, err := btf.LoadKernelSpec(); err != nil {
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
func HaveOptimizedUprobes() bool {
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasSuffix(sc.Text(), " arch_uprobe_optimize") {
			return true
		}
	}
	return false
}

// HaveUprobeMulti says whether the kernel has uprobe_multi links (Linux
// 6.6), which attach many locations at once and need only CAP_BPF with
// CAP_PERFMON.
func HaveUprobeMulti() bool { return features.HaveBPFLinkUprobeMulti() == nil }
