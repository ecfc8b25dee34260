// Package bpfobj holds the pre-compiled BPF engine of the receiver (bpf2go
// output of bpf/engine.bpf.c, committed as .go and .o so that go get and ocb
// need no clang), the Go view of the ABI declared once in bpf/abi.h, and the
// one Go reader of the span records the engine writes.
// It owns no kernel objects: internal/tracer loads and attaches them.
package bpfobj

//go:generate go tool bpf2go -cc clang-14 -strip llvm-strip-14 -target bpfel -go-package bpfobj -output-stem engine -no-global-types -type span_record -type site -type fetch_op -type probe_stats -type span_stats -type abi_limit -type reg_slot -type fetch_base -type fetch_kind -type site_flag -type record_flag -type process_record -type proc_entry -type pending_key -type proc_mask_bit -type pending_kind -type record_kind -type process_event -type wake_mode engine ../../bpf/engine.bpf.c -- -I../../bpf -I/usr/include/x86_64-linux-gnu -O2 -g -Wall -Werror -mcpu=v3
