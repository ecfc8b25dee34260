// Package tracer is the receiver's one door to the kernel: it checks kernel
// features, loads the pre-compiled engine from internal/bpfobj sized for a
// plan.Plan, fills the site specs, attaches every uprobe (all or nothing),
// drains the span ring buffer in batches through its own mapping and reads
// the per-CPU counters. For an overhead budget it attaches and detaches
// probes one by one (SetProbeAttached) and measures what a probe hit costs
// on this machine (Calibrate). It is the only package that imports cilium/ebpf's
// link package or reads a BPF ring buffer. Needs Linux 5.17 with BTF, and
// root or CAP_BPF with CAP_PERFMON (6.6 and later, through uprobe_multi
// links) or CAP_SYS_ADMIN (older kernels).
package tracer
