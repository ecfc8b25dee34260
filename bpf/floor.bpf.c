// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * floor.bpf.c is the benchmark's floor: the cheapest useful uprobe program,
 * one per-CPU counter. The benchmark attaches it by itself to measure what
 * the kernel costs per hit before the receiver does anything.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, __u64);
	__uint(max_entries, 1);
} floor_hits SEC(".maps");

SEC("uprobe")
int floor_count(void *ctx)
{
	__u32 key = 0;
	__u64 *v = bpf_map_lookup_elem(&floor_hits, &key);

	if (v)
		__sync_fetch_and_add(v, 1);
	return 0;
}
