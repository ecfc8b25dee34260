// Package bpfobj holds the pre-compiled BPF engine of the receiver (bpf2go
// output of bpf/engine.bpf.c, one object for x86-64 and one for arm64,
// committed as .go and .o so that go get and ocb need no clang), the Go view
// of the ABI declared once in bpf/abi.h, and the one Go reader of the span
// records the engine writes. Spec returns the engine of the running
// architecture (Arch, from runtime.GOARCH).
// It owns no kernel objects: internal/tracer loads and attaches them.
package bpfobj

// The engine is compiled once per architecture from the one source, with
// the architecture's struct pt_regs (bpf/regs.h); both objects are embedded
// and Spec picks the one of the running architecture. The Go ABI types are
// generated from the x86-64 object: they are the same in both, which
// TestLayout checks against each object's BTF.
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -target bpfel,bpfeb -go-package bpfobj -output-stem engine_x86 -no-global-types -type span_record -type site -type fetch_op -type probe_stats -type span_stats -type abi_limit -type fetch_base -type fetch_kind -type site_flag -type record_flag -type process_record -type proc_entry -type pending_key -type proc_mask_bit -type pending_kind -type record_kind -type process_event -type proc_hits_key -type filter -type value_hist -type filter_op -type wake_mode -type thread_ctx_access -type thread_ctx_proc -type thread_context -type thread_ctx_outcome -type thread_ctx_stats engineX86 ../../bpf/engine.bpf.c -- -D__TARGET_ARCH_x86 -I../../bpf -I/usr/include/x86_64-linux-gnu -O2 -g -Wall -Werror -mcpu=v3
//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -target bpfel,bpfeb -go-package bpfobj -output-stem engine_arm64 -no-global-types engineArm64 ../../bpf/engine.bpf.c -- -D__TARGET_ARCH_arm64 -I../../bpf -I/usr/include/x86_64-linux-gnu -O2 -g -Wall -Werror -mcpu=v3
