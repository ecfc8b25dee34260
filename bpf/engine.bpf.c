// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * engine.bpf.c is the one generic, pre-compiled BPF engine of the uprobe
 * receiver. Every attached location carries a BPF cookie: count_hit reads it
 * as a probe id and counts; site_hit reads it as a site id whose spec (filled
 * from Go) says which span it opens or closes and which values to fetch.
 * Pairing lives in task-local storage, counters and latency histograms in
 * per-CPU arrays, and each completed span leaves as one ring-buffer record
 * submitted without a wakeup. Requires Linux 5.15 (attach cookies for uprobes).
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "abi.h"
#include "regs.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* abi_types keeps every ABI type in the object's BTF so that bpf2go can
 * generate its Go declaration. */
struct abi_types {
	struct span_record record;
	enum abi_limit limit;
	enum reg_slot slot;
	enum fetch_base base;
	enum fetch_kind kind;
	enum site_flag site_flag;
	enum record_flag record_flag;
};
const struct abi_types *unused_abi_types __attribute__((unused));

/* emit_records is false when no traces pipeline consumes span records: the
 * engine then only pairs, counts and aggregates. Set by the loader. */
volatile const __u8 emit_records = 1;

/* Sizes below are placeholders: the loader sets them from the plan. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct site);
	__uint(max_entries, 1);
} sites SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct probe_stats);
	__uint(max_entries, 1);
} probes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct span_stats);
	__uint(max_entries, 1);
} spans SEC(".maps");

/* frame is one open span: the record being built and its data area. The
 * data area has room for one more string beyond ABI_DATA_CAP so that bounds
 * the verifier can see are enough. */
struct frame {
	__u64 sp;       /* stack pointer at entry */
	__u8 function;  /* SITE_FUNCTION: the span is the activation of a function */
	__u8 pad[7];
	/* rec and data are contiguous: they leave as one ring-buffer record. */
	struct span_record rec;
	__u8 data[ABI_DATA_CAP + ABI_STRING_MAX + 8];
};

/* task_state is the pairing stack of one thread. */
struct task_state {
	__u32 depth;    /* frames in use */
	__u32 overflow; /* entries beyond ABI_MAX_DEPTH still open */
	struct frame frames[ABI_MAX_DEPTH];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_state);
} task_states SEC(".maps");

/* go_key names a goroutine: Go code runs a goroutine on any thread, so its
 * open spans are keyed by the g pointer the Go ABI keeps in R14. */
struct go_key {
	__u32 pid;
	__u32 pad;
	__u64 g;
};

/* go_states holds the open spans of goroutines. Entries stay: the Go runtime
 * reuses g structures, so the map holds about the peak number of goroutines
 * that ran a probed span; when it is full, entries are counted as no_state. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct go_key);
	__type(value, struct task_state);
	__uint(max_entries, 1); /* set by the loader */
} go_states SEC(".maps");

/* empty_state is the zero value new go_states entries are copied from. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct task_state);
	__uint(max_entries, 1);
} empty_state SEC(".maps");

/* state returns the open spans of whoever runs the probe: the goroutine for
 * Go sites, the thread otherwise. */
static __always_inline struct task_state *state(const struct pt_regs *regs, __u8 site_flags, int create,
						__u64 pid_tgid, __u64 *owner)
{
	if (site_flags & SITE_GO) {
		struct go_key key = {.pid = pid_tgid >> 32, .g = regs->r14};
		struct task_state *ts;

		*owner = key.g;
		ts = bpf_map_lookup_elem(&go_states, &key);
		if (ts || !create)
			return ts;
		__u32 zero = 0;
		struct task_state *empty = bpf_map_lookup_elem(&empty_state, &zero);
		if (!empty)
			return 0;
		bpf_map_update_elem(&go_states, &key, empty, BPF_NOEXIST);
		return bpf_map_lookup_elem(&go_states, &key);
	}
	*owner = (__u32)pid_tgid;
	return bpf_task_storage_get(&task_states, bpf_get_current_task_btf(), 0,
				    create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
}

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} records SEC(".maps");

static __always_inline void add(__u64 *counter, __u64 n)
{
	__sync_fetch_and_add(counter, n);
}

/* reg_file is a copy of the probed thread's registers, indexed by enum
 * reg_slot. The verifier forbids variable offsets into the context, so the
 * fetch code reads this copy instead. */
struct reg_file {
	__u64 slot[REG_SLOT_COUNT];
};

static __always_inline void copy_regs(struct reg_file *rf, const struct pt_regs *regs)
{
	__builtin_memcpy(rf->slot, regs, sizeof(rf->slot));
}

/* fetch_result packs what fetch_one did: the new cursor and two flags. */
enum fetch_result {
	FETCH_RESULT_CURSOR = 0xffff,
	FETCH_RESULT_FAILED = 1 << 16,
	FETCH_RESULT_TRUNCATED = 1 << 17,
};

static __always_inline __u64 slot_value(const struct reg_file *rf, __u8 slot)
{
	return slot < REG_SLOT_COUNT ? rf->slot[slot] : 0;
}

/*
 * fetch_one runs one fetch op and stores its value in f->data at cursor. It
 * is a global function so that the verifier checks it once, not once per
 * fetch and path. It returns the new cursor and FETCH_RESULT_* flags.
 */
__noinline __u32 fetch_one(const struct reg_file *rf, const struct fetch_op *op, struct frame *f,
			   __u32 cursor)
{
	__u64 v = 0;
	__u32 len, need;

	if (!rf || !op || !f)
		return cursor | FETCH_RESULT_FAILED;
	if (op->base == FETCH_BASE_REGISTER)
		v = slot_value(rf, op->base_reg);
	v += op->disp;
	if (op->scale)
		v += slot_value(rf, op->index_reg) * op->scale;

	__u64 golen = 0;
	if (op->kind == FETCH_KIND_GOSTRING && !op->deref_count)
		golen = slot_value(rf, op->len_reg);
	for (__u32 d = 0; d < ABI_MAX_DEREFS; d++) {
		if (d >= op->deref_count)
			break;
		__u64 addr = v + op->deref_offsets[d];
		__u32 size = 8;
		if (d + 1 == op->deref_count && op->last_is_address) {
			v = addr;
			break;
		}
		if (d + 1 == op->deref_count && op->kind == FETCH_KIND_INT && op->read_size < 8)
			size = op->read_size;
		v = 0;
		if (bpf_probe_read_user(&v, size, (const void *)addr))
			return cursor | FETCH_RESULT_FAILED;
	}

	len = op->max_len;
	if (len > ABI_STRING_MAX)
		len = ABI_STRING_MAX;
	if (op->kind == FETCH_KIND_GOSTRING && op->deref_count) {
		/* v is the address of the string header: pointer, then length. */
		__u64 hdr[2];
		if (bpf_probe_read_user(hdr, sizeof(hdr), (const void *)v))
			return cursor | FETCH_RESULT_FAILED;
		v = hdr[0];
		golen = hdr[1];
	}
	switch (op->kind) {
	case FETCH_KIND_INT:
		need = 8;
		break;
	case FETCH_KIND_STRING:
	case FETCH_KIND_GOSTRING:
		need = 2 + len;
		break;
	case FETCH_KIND_BYTES:
		need = len;
		break;
	default:
		return cursor | FETCH_RESULT_FAILED;
	}
	if (cursor >= ABI_DATA_CAP || need > ABI_DATA_CAP - cursor)
		return cursor | FETCH_RESULT_FAILED | FETCH_RESULT_TRUNCATED;
	cursor &= ABI_DATA_CAP - 1;

	if (op->kind == FETCH_KIND_INT) {
		*(__u64 *)(f->data + cursor) = v;
		return cursor + 8;
	}
	if (op->kind == FETCH_KIND_STRING) {
		long n = bpf_probe_read_user_str(f->data + cursor + 2, len, (const void *)v);
		if (n <= 0)
			return cursor | FETCH_RESULT_FAILED;
		*(__u16 *)(f->data + cursor) = (__u16)(n - 1);
		return cursor + ((2 + (__u32)n + 7) & ~7u);
	}
	if (op->kind == FETCH_KIND_GOSTRING) {
		/* Go strings have no NUL: copy at most len-1 bytes and add one. */
		__u32 n = golen < len ? golen : (len ? len - 1 : 0);
		if (n > ABI_STRING_MAX - 1)
			n = ABI_STRING_MAX - 1;
		if (n && bpf_probe_read_user(f->data + cursor + 2, n, (const void *)v))
			return cursor | FETCH_RESULT_FAILED;
		__u32 end = cursor + 2 + n;
		if (end < sizeof(f->data))
			f->data[end] = 0;
		*(__u16 *)(f->data + cursor) = (__u16)n;
		return cursor + ((2 + n + 1 + 7) & ~7u);
	}
	if (bpf_probe_read_user(f->data + cursor, len, (const void *)v))
		return cursor | FETCH_RESULT_FAILED;
	return cursor + ((len + 7) & ~7u);
}

/* fetch_all runs count fetch ops from cursor on; it sets *failed (bit i:
 * fetch i stored nothing) and *truncated, and returns the new cursor. */
static __always_inline __u32 fetch_all(const struct reg_file *rf, const struct fetch_op *ops,
				       __u32 count, struct frame *f, __u32 cursor, __u8 *failed,
				       __u8 *truncated)
{
	for (__u32 i = 0; i < ABI_MAX_FETCHES; i++) {
		if (i >= count)
			break;
		__u32 r = fetch_one(rf, &ops[i], f, cursor);
		cursor = r & FETCH_RESULT_CURSOR;
		if (r & FETCH_RESULT_FAILED)
			*failed |= 1 << i;
		if (r & FETCH_RESULT_TRUNCATED)
			*truncated = 1;
	}
	return cursor;
}

static __always_inline struct span_stats *span_stats_of(__u32 span)
{
	return bpf_map_lookup_elem(&spans, &span);
}

static __always_inline void abandon(struct task_state *ts, __u32 k)
{
	struct span_stats *ast = span_stats_of(ts->frames[k & (ABI_MAX_DEPTH - 1)].rec.span);

	if (ast)
		add(&ast->abandoned, 1);
}

/*
 * drop_stale drops open spans whose exit can no longer come because the
 * stack was unwound past them (longjmp, exceptions), so that they do not
 * become the parents of everything after them on the thread:
 *  - a function span is dead once a probe fires with the stack pointer above
 *    the one its entry saw (its activation is gone; equal is a tail call);
 *  - when a span opens again while one of its definition is open, at a stack
 *    pointer at or above the one that open span's entry saw, the open one is
 *    dead (a span can only nest in itself deeper in the stack), with
 *    everything opened after it: "start, error, start again".
 * Dropped spans count as abandoned, and so do entries lost to overflow.
 */
static __always_inline void drop_stale(struct task_state *ts, __u32 span, __u64 sp)
{
	__u32 depth = ts->depth;
	int dropped = 0;

	if (depth > ABI_MAX_DEPTH)
		depth = ABI_MAX_DEPTH;
	for (__u32 i = 0; i < ABI_MAX_DEPTH; i++) {
		if (depth == 0)
			break;
		struct frame *top = &ts->frames[(depth - 1) & (ABI_MAX_DEPTH - 1)];
		if (!top->function || top->sp >= sp)
			break;
		abandon(ts, depth - 1);
		depth--;
		dropped = 1;
	}
	for (__u32 i = 0; i < ABI_MAX_DEPTH; i++) {
		if (i >= depth)
			break;
		__u32 k = (depth - 1 - i) & (ABI_MAX_DEPTH - 1);
		struct frame *f = &ts->frames[k];
		if (f->rec.span != span)
			continue;
		/* The innermost open span of this definition decides: outer
		 * ones have higher stack pointers. */
		if (f->sp <= sp) {
			for (__u32 j = 0; j < ABI_MAX_DEPTH; j++) {
				if (k + j >= depth)
					break;
				abandon(ts, k + j);
			}
			depth = k;
			dropped = 1;
		}
		break;
	}
	if (dropped) {
		ts->depth = depth;
		ts->overflow = 0; /* deeper unrecorded entries were unwound too */
	}
}

/* count adds one to a counter of a span definition's statistics. */
#define count(span, field)                                               \
	do {                                                             \
		struct span_stats *__st = span_stats_of(span);           \
		if (__st)                                                \
			add(&__st->field, 1);                            \
	} while (0)

static __always_inline void span_entry(const struct pt_regs *regs, const struct site *s, __u32 site_id)
{
	struct task_state *ts;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 owner;

	ts = state(regs, s->flags, 1, pid_tgid, &owner);
	if (!ts) {
		count(s->entry_span, no_state);
		return;
	}
	__u64 sp = regs->sp;
	/* Go stacks move when they grow: stack pointers do not order goroutine frames. */
	if (ts->depth && !(s->flags & SITE_GO))
		drop_stale(ts, s->entry_span, sp);
	if (ts->overflow || ts->depth >= ABI_MAX_DEPTH) {
		ts->overflow++;
		count(s->entry_span, overflow);
		return;
	}

	__u32 depth = ts->depth & (ABI_MAX_DEPTH - 1);
	struct frame *f = &ts->frames[depth];

	f->rec.parent_start_ns = 0;
	f->rec.root_start_ns = 0;
	f->rec.context_start_ns = 0;
	if (depth > 0) {
		struct frame *parent = &ts->frames[(depth - 1) & (ABI_MAX_DEPTH - 1)];
		f->rec.parent_start_ns = parent->rec.start_ns;
		f->rec.root_start_ns = parent->rec.root_start_ns;
		f->rec.context_start_ns = parent->rec.flags & RECORD_CARRIER ? parent->rec.start_ns
									 : parent->rec.context_start_ns;
	}
	__u8 unsampled;
	if (depth > 0)
		unsampled = ts->frames[(depth - 1) & (ABI_MAX_DEPTH - 1)].rec.flags & RECORD_UNSAMPLED;
	else
		unsampled = !emit_records ||
			    (s->sample_threshold <= 0xffffffffULL && bpf_get_prandom_u32() >= s->sample_threshold);
	unsampled = unsampled ? RECORD_UNSAMPLED : 0;

	f->rec.owner = owner;
	f->rec.pid = pid_tgid >> 32;
	f->rec.tid = (__u32)pid_tgid;
	f->rec.span = s->entry_span;
	f->rec.entry_site = site_id;
	f->rec.exit_site = 0;
	f->rec.depth = depth;
	f->rec.exit_len = 0;
	f->rec.exit_failed = 0;
	f->sp = sp;
	f->function = s->flags & SITE_FUNCTION ? 1 : 0;

	__u8 failed = 0, truncated = 0;
	__u32 len = 0;
	if (s->entry_fetch_count && !unsampled) {
		struct reg_file rf;
		copy_regs(&rf, regs);
		len = fetch_all(&rf, s->entry, s->entry_fetch_count, f, 0, &failed, &truncated);
	}
	f->rec.entry_len = len;
	f->rec.entry_failed = failed;
	f->rec.flags = (truncated ? RECORD_TRUNCATED : 0) | unsampled |
		       (s->flags & SITE_CARRIER ? RECORD_CARRIER : 0);

	f->rec.start_ns = bpf_ktime_get_ns();
	if (depth == 0)
		f->rec.root_start_ns = f->rec.start_ns;
	ts->depth = depth + 1;
}

static __always_inline __u32 log2_bucket(__u64 v)
{
	/* floor(log2(v)) for v >= 1, 0 for v == 0 */
	__u32 r = 0;
	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) { r += 1; }
	return r;
}

static __always_inline void span_exit(const struct pt_regs *regs, const struct site *s, __u32 site_id,
				      struct probe_stats *ps)
{
	__u64 now = bpf_ktime_get_ns();
	struct span_stats *st = span_stats_of(s->exit_span);
	struct task_state *ts;
	__u32 depth, k;
	int found = -1;

	if (!st)
		return;
	/* The thread id only changes between entry and exit for Go code. */
	__u64 pid_tgid = s->flags & SITE_GO ? bpf_get_current_pid_tgid() : 0;
	__u64 owner;
	ts = state(regs, s->flags, 0, pid_tgid, &owner);
	if (!ts) {
		add(&st->unmatched, 1);
		return;
	}
	if (ts->overflow) {
		/* The innermost open entry was not recorded: this exit is its. */
		ts->overflow--;
		return;
	}

	depth = ts->depth;
	if (depth > ABI_MAX_DEPTH)
		depth = ABI_MAX_DEPTH;
	for (__u32 i = 0; i < ABI_MAX_DEPTH; i++) {
		if (i >= depth)
			break;
		k = (depth - 1 - i) & (ABI_MAX_DEPTH - 1);
		if (ts->frames[k].rec.span == s->exit_span) {
			found = k;
			break;
		}
	}
	if (found < 0) {
		add(&st->unmatched, 1);
		return;
	}
	/* Open spans above the match never saw their exit: drop them. */
	for (__u32 i = 0; i < ABI_MAX_DEPTH; i++) {
		if (found + 1 + i >= depth)
			break;
		abandon(ts, found + 1 + i);
	}

	struct frame *f = &ts->frames[found & (ABI_MAX_DEPTH - 1)];
	__u64 duration = now - f->rec.start_ns;

	add(&st->sum_ns, duration); /* the count is the sum of the buckets */
	/* bucket i holds (2^i, 2^(i+1)]; durations of 0 and 1 ns go to bucket 0 */
	__u32 b = duration > 1 ? log2_bucket(duration - 1) : 0;
	add(&st->buckets[b & (ABI_HIST_BUCKETS - 1)], 1);

	ts->depth = found;
	if (f->rec.flags & RECORD_UNSAMPLED) {
		add(&st->unsampled, 1);
		return;
	}
	if (duration < s->min_duration_ns) {
		add(&st->short_spans, 1);
		return;
	}

	f->rec.end_ns = now;
	f->rec.exit_site = site_id;
	if (pid_tgid)
		f->rec.tid = (__u32)pid_tgid;
	__u32 entry_len = f->rec.entry_len & (ABI_DATA_CAP - 1);
	if (f->rec.entry_len > ABI_DATA_CAP)
		entry_len = ABI_DATA_CAP;
	__u8 failed = 0, truncated = 0;
	__u32 end = entry_len;
	if (s->exit_fetch_count) {
		struct reg_file rf;
		copy_regs(&rf, regs);
		end = fetch_all(&rf, s->exit, s->exit_fetch_count, f, entry_len, &failed, &truncated);
	}
	if (end > ABI_DATA_CAP || end < entry_len)
		end = entry_len;
	f->rec.exit_len = end - entry_len;
	f->rec.exit_failed = failed;
	if (truncated)
		f->rec.flags |= RECORD_TRUNCATED;

	if (bpf_ringbuf_output(&records, &f->rec, sizeof(struct span_record) + end, BPF_RB_NO_WAKEUP)) {
		add(&st->lost, 1);
		add(&ps->lost, 1);
	}
}

static __always_inline int count_hit_impl(struct pt_regs *ctx)
{
	__u32 probe_id = bpf_get_attach_cookie(ctx);
	struct probe_stats *ps = bpf_map_lookup_elem(&probes, &probe_id);

	if (ps)
		add(&ps->hits, 1);
	return 0;
}

static __always_inline int site_hit_impl(struct pt_regs *ctx)
{
	__u32 site_id = bpf_get_attach_cookie(ctx);
	const struct site *s = bpf_map_lookup_elem(&sites, &site_id);
	struct probe_stats *ps;

	if (!s)
		return 0;
	ps = bpf_map_lookup_elem(&probes, &s->probe_id);
	if (!ps)
		return 0;
	add(&ps->hits, 1);
	if (s->flags & SITE_EXIT)
		span_exit(ctx, s, site_id, ps);
	if (s->flags & SITE_ENTRY)
		span_entry(ctx, s, site_id);
	return 0;
}

/*
 * Each program comes twice: attached one location at a time through a perf
 * event ("uprobe"), or many locations at once through a uprobe_multi link
 * (Linux 6.6, "uprobe.multi"). The loader keeps the pair it uses.
 */

/* count_hit is attached to sites that only count: the cookie is the probe id. */
SEC("uprobe")
int count_hit(struct pt_regs *ctx)
{
	return count_hit_impl(ctx);
}

SEC("uprobe.multi")
int count_hit_multi(struct pt_regs *ctx)
{
	return count_hit_impl(ctx);
}

/* site_hit is attached to sites that open or close spans: the cookie is the site id. */
SEC("uprobe")
int site_hit(struct pt_regs *ctx)
{
	return site_hit_impl(ctx);
}

SEC("uprobe.multi")
int site_hit_multi(struct pt_regs *ctx)
{
	return site_hit_impl(ctx);
}
