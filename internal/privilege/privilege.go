// Package privilege is the single source of truth for the Linux
// capabilities the uprobe receiver needs, why it needs each, and whether the
// running process has them. The Kubernetes manifests in deploy/kubernetes
// grant exactly [Required]([Modern]) (a test checks it), and the receiver
// names what is missing with [Check] in one sentence.
//
// Capabilities are needed for two things:
//
//   - attaching at all ([Attach]): CAP_BPF and CAP_PERFMON on kernels with
//     uprobe_multi links (Linux 6.6 and later), which the receiver always
//     uses there, or CAP_SYS_ADMIN on older ones, whose uprobe perf events
//     require it since the fix of CVE-2025-38466 ("perf: Revert to
//     requiring CAP_SYS_ADMIN for uprobes", Linux 6.16 and the stable
//     kernels of July 2025 on; before it CAP_PERFMON was enough, which the
//     receiver does not count on). Measured on 6.18: with CAP_BPF and
//     CAP_PERFMON alone a uprobe_multi link attaches and a uprobe perf
//     event is refused (EACCES); CAP_SYS_ADMIN alone does both, as it
//     stands in for CAP_BPF and CAP_PERFMON (internal/tracer
//     TestAttachPrivileges);
//   - reaching other processes and their files ([Processes]): CAP_SYS_PTRACE
//     and CAP_DAC_READ_SEARCH.
//
// Root outside a container has all of them. Nothing here loads BPF
// programs: only package tracer touches the kernel.
package privilege

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// Capability is one Linux capability the receiver may need.
type Capability struct {
	// Name is the capability's name, e.g. "CAP_BPF".
	Name string
	// Number is its bit in the capability sets (capability.h).
	Number uint
	// Reason says what the receiver does with it, as a verb phrase that
	// completes "needed to …".
	Reason string
}

// KubernetesName returns the name Kubernetes uses in
// securityContext.capabilities: Name without "CAP_".
func (c Capability) KubernetesName() string { return strings.TrimPrefix(c.Name, "CAP_") }

// The capabilities the receiver may need.
var (
	// BPF allows loading BPF programs and creating maps (Linux 5.8).
	BPF = Capability{
		Name:   "CAP_BPF",
		Number: 39,
		Reason: "load the BPF engine and create its maps and ring buffer",
	}
	// Perfmon allows loading tracing programs (kprobe type, as uprobe
	// programs are) and attaching them through uprobe_multi links (Linux
	// 5.8 for the capability, 6.6 for the links).
	Perfmon = Capability{
		Name:   "CAP_PERFMON",
		Number: 38,
		Reason: "load uprobe programs and attach them through uprobe_multi links (Linux 6.6 and later)",
	}
	// SysAdmin is what uprobe perf events require since the fix of
	// CVE-2025-38466, and so kernels without uprobe_multi links; it also
	// grants what BPF and Perfmon grant.
	SysAdmin = Capability{
		Name:   "CAP_SYS_ADMIN",
		Number: 21,
		Reason: "create uprobe perf events on kernels without uprobe_multi links (before Linux 6.6), which require it since the fix of CVE-2025-38466",
	}
	// SysPtrace passes the kernel's ptrace access check
	// (PTRACE_MODE_READ_FSCREDS) on processes of other users, and on
	// processes of the same user that hold capabilities the reader lacks —
	// which in a container that dropped its others is nearly every root
	// daemon and container process (measured on Linux 6.18: readlink of
	// /proc/PID/exe, /proc/PID/root and /proc/PID/ns/mnt fails with EACCES
	// without it; /proc/PID/cmdline, stat and cgroup need nothing; maps
	// needs CAP_PERFMON or this).
	SysPtrace = Capability{
		Name:   "CAP_SYS_PTRACE",
		Number: 19,
		Reason: "read /proc/PID/exe, /proc/PID/root and /proc/PID/ns/mnt of processes of other users or with more capabilities, to name their executables and reach their files inside their containers",
	}
	// DACReadSearch bypasses read permission on files and search
	// permission on directories (not write permission, which
	// CAP_DAC_OVERRIDE would bypass too).
	DACReadSearch = Capability{
		Name:   "CAP_DAC_READ_SEARCH",
		Number: 2,
		Reason: "read traced files, and search the directories leading to them, that the collector's user may not read by their mode (other users' 0700 binaries, pods in user namespaces)",
	}
	// SysResource raised RLIMIT_MEMLOCK before Linux 5.11 charged BPF
	// memory to the memory cgroup; the receiver needs Linux 5.15, so it
	// never needs it.
	SysResource = Capability{
		Name:   "CAP_SYS_RESOURCE",
		Number: 24,
		Reason: "raise RLIMIT_MEMLOCK for BPF maps on kernels before Linux 5.11, which charge them to it rather than to the memory cgroup",
	}
)

// Kernel is what the running kernel offers, as far as the capabilities the
// receiver needs depend on it. Package tracer detects it.
type Kernel struct {
	// UprobeMulti says the kernel has uprobe_multi links (Linux 6.6).
	UprobeMulti bool
	// MemcgAccounting says the kernel charges BPF memory to the memory
	// cgroup instead of RLIMIT_MEMLOCK (Linux 5.11).
	MemcgAccounting bool
}

// Modern is a kernel of Linux 6.6 or later, the kernel the Kubernetes
// manifests are written for.
var Modern = Kernel{UprobeMulti: true, MemcgAccounting: true}

// Attach returns the capabilities without which nothing attaches on kernel
// k: CAP_BPF and CAP_PERFMON with uprobe_multi links, CAP_SYS_ADMIN
// without; CAP_SYS_RESOURCE too on kernels without memory cgroup
// accounting of BPF memory.
func Attach(k Kernel) []Capability {
	var caps []Capability
	if k.UprobeMulti {
		caps = append(caps, BPF, Perfmon)
	} else {
		caps = append(caps, SysAdmin)
	}
	if !k.MemcgAccounting {
		caps = append(caps, SysResource)
	}
	return caps
}

// Processes returns the capabilities needed to resolve targets in
// processes the collector does not own: their executables, their libraries
// and files through /proc/PID/root, their mount namespaces. A collector
// tracing only its own user's unprivileged processes does without them.
func Processes() []Capability {
	return []Capability{SysPtrace, DACReadSearch}
}

// Required returns everything the receiver needs on kernel k to trace any
// process on the host: Attach(k) followed by Processes().
func Required(k Kernel) []Capability {
	return append(Attach(k), Processes()...)
}

// AttachRequirement says, in words, who may attach: for error messages
// such as the tracer's permission error.
const AttachRequirement = "root, or CAP_BPF with CAP_PERFMON (Linux 6.6 and later, which have uprobe_multi links), or CAP_SYS_ADMIN (older kernels, whose uprobe perf events require it since the fix of CVE-2025-38466)"

// Set is a capability set: bit n stands for capability number n.
type Set uint64

// SetOf returns the set of the given capabilities.
func SetOf(caps ...Capability) Set {
	var s Set
	for _, c := range caps {
		s |= 1 << c.Number
	}
	return s
}

// Has says whether the set holds c.
func (s Set) Has(c Capability) bool { return s&(1<<c.Number) != 0 }

// Missing returns the capabilities of need that the set lacks, in need's
// order. CAP_SYS_ADMIN stands in for CAP_BPF and CAP_PERFMON, as the kernel
// has it (bpf_capable, perfmon_capable).
func (s Set) Missing(need []Capability) []Capability {
	var out []Capability
	for _, c := range need {
		if !s.Has(c) && !((c == BPF || c == Perfmon) && s.Has(SysAdmin)) {
			out = append(out, c)
		}
	}
	return out
}

// ParseStatus returns the effective capability set of a /proc/PID/status
// file (its "CapEff:" line, 16 hex digits).
func ParseStatus(status []byte) (Set, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "CapEff:")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			return 0, fmt.Errorf("status CapEff %q: %w", strings.TrimSpace(v), err)
		}
		return Set(n), nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("status has no CapEff line")
}

// CheckSet returns nil when have holds every capability of need, or one
// sentence naming each missing one and what it is needed for.
func CheckSet(have Set, need []Capability) error {
	missing := have.Missing(need)
	if len(missing) == 0 {
		return nil
	}
	parts := make([]string, len(missing))
	k8s := make([]string, len(missing))
	for i, c := range missing {
		parts[i] = fmt.Sprintf("%s (needed to %s)", c.Name, c.Reason)
		k8s[i] = c.KubernetesName()
	}
	noun, pronoun := "capability", "it"
	if len(missing) > 1 {
		noun, pronoun = "capabilities", "them"
	}
	return fmt.Errorf("missing %s %s; run the collector as root, or grant %s (Kubernetes: securityContext.capabilities.add: [%s])",
		noun, joinAnd(parts), pronoun, strings.Join(k8s, ", "))
}

// Check reads the calling thread's effective capabilities and returns nil
// when it holds every capability of need, or one sentence naming what is
// missing.
func Check(need []Capability) error {
	have, err := Effective()
	if err != nil {
		return fmt.Errorf("reading the effective capabilities: %w", err)
	}
	return CheckSet(have, need)
}

func joinAnd(s []string) string {
	switch len(s) {
	case 0:
		return ""
	case 1:
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}
