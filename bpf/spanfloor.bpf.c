// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * spanfloor.bpf.c is the benchmark's delivered-span floor: the least a
 * program can do that delivers one span per call of a function with an
 * argument and its return value. The entry program keeps the start time and
 * the first argument in task-local storage (a stack of them: calls nest);
 * the return program reserves one fixed-size record in a ring buffer, fills
 * it (start, end, pid, tid, the argument, the return value) and submits it
 * without a wakeup. The
 * benchmark drains the ring with the receiver's own batched reader
 * (internal/tracer RingReader). Compiled for the x86-64 register layout:
 * the benchmark's workload is x86-64 code.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "abi.h"
#include "regs.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct task_struct;

/* FLOOR_DEPTH is how many nested calls a thread's floor_start keeps (a
 * call tree of the benchmark is three deep); deeper calls are counted and
 * not recorded. */
#define FLOOR_DEPTH 8

/* floor_start is what the entries leave for their returns, per thread: a
 * stack of start times and first arguments. */
struct floor_start {
	__u32 depth;
	__u32 pad;
	__u64 start_ns[FLOOR_DEPTH];
	__u64 arg0[FLOOR_DEPTH];
};

/* floor_span is one record: 64 bytes, as the receiver's span with two
 * integer attributes is about. */
struct floor_span {
	__u64 start_ns;
	__u64 end_ns;
	__u32 pid;
	__u32 tid;
	__u64 arg0;
	__u64 ret;
	__u64 pad[3];
};

_Static_assert(sizeof(struct floor_span) == 64, "a floor record is 64 bytes");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct floor_start);
} floor_starts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} floor_spans SEC(".maps");

/* floor_lost counts records the ring refused; floor_unmatched returns
 * without an entry on the thread. */
__u64 floor_lost = 0;
__u64 floor_unmatched = 0;

SEC("uprobe")
int floor_span_entry(struct pt_regs *ctx)
{
	struct floor_start *st = bpf_task_storage_get(&floor_starts, bpf_get_current_task_btf(), 0,
						      BPF_LOCAL_STORAGE_GET_F_CREATE);

	if (!st)
		return 0;
	__u32 d = st->depth;
	st->depth = d + 1;
	if (d >= FLOOR_DEPTH)
		return 0;
	st->arg0[d] = reg_at(ctx, REG_X86_DI);
	st->start_ns[d] = bpf_ktime_get_ns();
	return 0;
}

SEC("uretprobe")
int floor_span_exit(struct pt_regs *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	struct floor_start *st = bpf_task_storage_get(&floor_starts, bpf_get_current_task_btf(), 0, 0);

	if (!st || !st->depth) {
		__sync_fetch_and_add(&floor_unmatched, 1);
		return 0;
	}
	__u32 d = --st->depth;
	if (d >= FLOOR_DEPTH)
		return 0;
	struct floor_span *rec = bpf_ringbuf_reserve(&floor_spans, sizeof(*rec), 0);
	if (!rec) {
		__sync_fetch_and_add(&floor_lost, 1);
		return 0;
	}
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	rec->start_ns = st->start_ns[d];
	rec->end_ns = now;
	rec->pid = pid_tgid >> 32;
	rec->tid = (__u32)pid_tgid;
	rec->arg0 = st->arg0[d];
	rec->ret = reg_at(ctx, REG_X86_AX);
	rec->pad[0] = rec->pad[1] = rec->pad[2] = 0;
	bpf_ringbuf_submit(rec, BPF_RB_NO_WAKEUP);
	return 0;
}
