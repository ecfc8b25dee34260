// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * engine.bpf.c is the one generic, pre-compiled BPF engine of the uprobe
 * receiver. Every attached location carries a BPF cookie: count_hit reads it
 * as a probe id and counts; site_hit reads it as a site id whose spec (filled
 * from Go) says which span it opens or closes and which values to fetch.
 * Pairing lives in task-local storage (goroutines: a hash keyed by g),
 * counters and latency histograms in per-CPU arrays, and each completed span
 * leaves as one ring-buffer record submitted without a wakeup. Two tracing
 * programs end the open spans of a thread at exec and exit.
 * Requires Linux 5.17 (attach cookies for uprobes, bpf_loop).
 *
 * The same source builds the engine of each architecture (x86-64, arm64):
 * bpf/regs.h gives the layout of its struct pt_regs, and every register the
 * engine reads goes through the slots of that layout.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "abi.h"
#include "regs.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The kernel types the engine reads, relocated against the running
 * kernel's BTF (CO-RE). */
struct signal_struct {
	struct {
		int counter;
	} live;
} __attribute__((preserve_access_index));

/* The run context of a uprobe_multi or session program
 * (kernel/trace/bpf_trace.c), which bpf_get_attach_cookie and
 * bpf_session_is_return read: site_hit_session reads it itself where the
 * kernel has these fields. */
struct bpf_run_ctx {
} __attribute__((preserve_access_index));

struct bpf_session_run_ctx {
	struct bpf_run_ctx run_ctx;
	_Bool is_return;
} __attribute__((preserve_access_index));

struct bpf_uprobe {
	__u64 cookie;
} __attribute__((preserve_access_index));

struct bpf_uprobe_multi_run_ctx {
	struct bpf_session_run_ctx session_ctx;
	struct bpf_uprobe *uprobe;
} __attribute__((preserve_access_index));

struct uprobe_task {
	unsigned int depth; /* pending return probes */
} __attribute__((preserve_access_index));

struct linux_binprm {
	const char *filename;
} __attribute__((preserve_access_index));

struct super_block {
	__u32 s_dev;
} __attribute__((preserve_access_index));

struct inode {
	unsigned long i_ino;
	struct super_block *i_sb;
} __attribute__((preserve_access_index));

struct file {
	struct inode *f_inode;
} __attribute__((preserve_access_index));

/* The process's uprobe area: the kernel's return probe trampoline is at
 * its vaddr (uprobe_get_trampoline_vaddr). */
struct xol_area {
	unsigned long vaddr;
} __attribute__((preserve_access_index));

struct uprobes_state {
	struct xol_area *xol_area;
} __attribute__((preserve_access_index));

struct mm_struct {
	unsigned long arg_start;
	unsigned long arg_end;
	struct file *exe_file;
	int map_count; /* the process's mappings (VMAs) */
	struct uprobes_state uprobes_state;
} __attribute__((preserve_access_index));

struct kernfs_node {
	__u64 id; /* 64 bits since Linux 5.5 */
} __attribute__((preserve_access_index));

struct cgroup {
	struct kernfs_node *kn;
} __attribute__((preserve_access_index));

struct cgroup_subsys_state {
	struct cgroup *cgroup;
} __attribute__((preserve_access_index));

struct css_set {
	struct cgroup_subsys_state *subsys[1]; /* CGROUP_SUBSYS_COUNT in the kernel */
	struct cgroup *dfl_cgrp;
} __attribute__((preserve_access_index));

/* thread_struct holds the thread pointer of a user thread as the kernel
 * last saved it: fsbase on x86-64 (set by arch_prctl and clone, saved at
 * context switch), tpidr_el0 in uw.tp_value on arm64 (saved at context
 * switch: a thread that wrote it since it last left the CPU shows the old
 * value, 0 for one that never left it since exec). */
#if defined(__TARGET_ARCH_x86)
struct thread_struct {
	unsigned long fsbase;
} __attribute__((preserve_access_index));
#elif defined(__TARGET_ARCH_arm64)
struct thread_struct {
	struct {
		unsigned long tp_value;
	} uw;
} __attribute__((preserve_access_index));
#endif

struct task_struct {
	int pid;
	int tgid;
	struct mm_struct *mm;
	struct task_struct *group_leader;
	__u64 start_time;
	__u64 self_exec_id; /* 64 bits since Linux 5.7 */
	struct signal_struct *signal;
	struct uprobe_task *utask;
	struct css_set *cgroups;
	struct thread_struct thread;
	struct bpf_run_ctx *bpf_ctx;
} __attribute__((preserve_access_index));

/* The context of a task iterator (Linux 5.8). */
struct seq_file;
struct bpf_iter_meta {
	struct seq_file *seq;
} __attribute__((preserve_access_index));

struct bpf_iter__task {
	struct bpf_iter_meta *meta;
	struct task_struct *task;
} __attribute__((preserve_access_index));

/* abi_types keeps every ABI type in the object's BTF so that bpf2go can
 * generate its Go declaration. */
struct abi_types {
	struct span_record record;
	struct process_record process;
	struct proc_entry proc;
	struct pending_key pending;
	enum proc_mask_bit proc_bit;
	enum pending_kind pending_kind;
	enum record_kind record_kind;
	enum wake_mode wake_mode;
	enum process_event process_event;
	enum filter_op filter_op;
	struct value_hist value_hist;
	enum abi_limit limit;
	enum reg_slot_x86 slot_x86;
	enum reg_slot_arm64 slot_arm64;
	enum fetch_base base;
	enum fetch_kind kind;
	enum site_flag site_flag;
	enum record_flag record_flag;
	enum thread_ctx_access thread_ctx_access;
	enum thread_ctx_outcome thread_ctx_outcome;
	struct thread_ctx_proc thread_ctx_proc;
	struct thread_context thread_context;
	struct thread_ctx_stats thread_ctx_stats;
};
const struct abi_types *unused_abi_types __attribute__((unused));

/* emit_records is false when no traces pipeline consumes span records: the
 * engine then only pairs, counts and aggregates. Set by the loader. */
volatile const __u8 emit_records = 1;

/* selector_bits are the bits of proc_entry masks that process selectors
 * decide (as opposed to pid: targets): an exec clears them, marks the
 * process pending and sends a process record for user space to decide.
 * Zero when no target has a selector. Set by the loader. */
volatile const __u64 selector_bits = 0;

/* send_execs makes every exec send a process record, so that user space can
 * find targets' files in processes that start (containers of new images,
 * optional targets). Set by the loader. */
volatile const __u8 send_execs = 0;

/* process_facts makes the engine send a record at every exec, fork, exit
 * and cgroup move of a process, with what user space needs to know of it
 * while it is alive (its cgroups, its executable): its spans are built
 * later. Set by the loader. */
volatile const __u8 process_facts = 0;

/* cgroup1_subsys is the kernel's id (enum cgroup_subsys_id) of the
 * controller whose cgroup v1 hierarchy process records name, or
 * CGROUP1_NONE. Set by the loader. */
#define CGROUP1_NONE 0xffffffffu
volatile const __u32 cgroup1_subsys = CGROUP1_NONE;

/* process_lost counts process records the ring buffer refused. */
__u64 process_lost = 0;

/*
 * __subprog marks a helper compiled as a BPF function of its own rather
 * than inlined: its locals (bpf_loop contexts, map keys, spilled registers)
 * live in its own frame. On kernels with BPF private stacks (Linux 6.13,
 * x86-64 JIT), a function of a kprobe-type program (uprobe programs are)
 * or tracing program whose frame is 64 bytes or more (rounded up to 16)
 * runs on a per-CPU private stack; uprobe programs are preemptible
 * (migrate_disable, not preempt_disable), so two threads preempted on one
 * CPU would share it. Every function of the engine keeps its frame at 48
 * bytes or less (internal/tracer TestEngineStackDepth). A per-CPU scratch
 * map would be shared the same way, so large state goes in the task's own
 * state (task_state.closing) and the rest in calls. A call costs about
 * 10 ns where returns are mitigated (SRSO "safe RET"), so the usual paths
 * stay inline and only slow paths (bpf_loop walks, Go states, filters on
 * strings) and the parts too large for one frame are calls.
 */
#define __subprog static __noinline

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

/* value_hists holds the value histograms of counters (site.value_hist - 1). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct value_hist);
	__uint(max_entries, 1);
} value_hists SEC(".maps");

/*
 * frame is one open span: 32 bytes. Its entry values live in the state's
 * value stack at value_off; when it closes, its exit values and the record
 * trailer are written right after them and the record leaves from there.
 */
struct frame {
	__u64 start_ns;
	/* pos is the stack position at entry, ordered so that deeper
	 * activations have lower positions: the stack pointer for threads,
	 * ~(stack top - stack pointer) for goroutines, whose stacks move. */
	__u64 pos;
	__u32 span;
	__u32 entry_site;
	__u16 value_off;
	__u16 entry_len;
	__u16 carrier; /* 1 + index of the nearest enclosing carrier frame, 0 if none */
	__u8 flags;    /* enum record_flag */
	__u8 entry_failed;
};

/* VALUE_WINDOW is what one fetch sequence may touch from its start: the
 * record's data, and one more string so that bounds the verifier can see
 * are enough. */
#define VALUE_WINDOW (ABI_DATA_CAP + ABI_STRING_MAX + 8)
/* VALUE_BASE_MAX is the highest start of a frame's values: a frame stores
 * entry values only while the stack holds at most ABI_VALUE_STACK bytes,
 * and one that does adds at most ABI_DATA_CAP. */
#define VALUE_BASE_MAX (ABI_VALUE_STACK + ABI_DATA_CAP)

/* values is a window of the value stack, as fetch_one sees it. */
struct values {
	__u8 data[VALUE_WINDOW];
};

/* state_flag marks conditions of a task_state. */
enum state_flag {
	STATE_NO_POS = 1, /* stack positions unknown: the stale-span rules are off */
};

/*
 * task_state holds the open spans of one thread or goroutine: at most
 * ABI_MAX_DEPTH frames of 32 bytes, their return addresses and a stack of
 * their entry values. About 30.7 KiB per thread that ever opened a span
 * (31,392 bytes: below the 32 KiB of a per-CPU array value, which
 * empty_state is), freed with the thread
 * (goroutines: when their outermost span closes).
 */
struct task_state {
	__u32 depth;    /* frames in use */
	__u32 overflow; /* entries beyond ABI_MAX_DEPTH still open */
	__u32 top;      /* bytes of the value stack in use */
	__u32 flags;    /* enum state_flag */
	__u64 goid;     /* goroutine states: the goroutine id that owns it, 0 if unknown */
	/* closing is what the functions that close a span pass on (span_exit,
	 * close_span, send_span, fill_record) instead of keeping it on their
	 * stacks: the frame, the exit site and the time. The state belongs to
	 * the one thread or goroutine that runs the program, so no other
	 * program touches it, preempted or not (a per-CPU scratch area would
	 * be shared by threads preempted on one CPU). */
	struct {
		__u64 now;
		__u32 frame;
		__u32 site;
		__u32 values_end; /* bytes of the record's values (entry and exit) */
		__u32 pad;
		/* what place found: the start of the span's parent (0 for a
		 * root) and of its trace's root */
		__u64 parent_start_ns;
		__u64 root_start_ns;
		/* the current task's facts a record carries, read by the plain
		 * span program before it finds the span (task_facts), so that
		 * the task need not be kept or found again */
		__u64 process_start_ns;
		__u64 exec_id;
		__u32 pid;
		__u32 tid;
	} closing;
	/* The context the thread had published (OTEP 4947) when its outermost
	 * open span opened, with RECORD_THREAD_CONTEXT on that frame. */
	struct thread_context tctx;
	/* tctx_none is what thread_ctx_read found last for this thread's
	 * process when that was "no variable" (THREAD_CTX_NONE): the image
	 * (self_exec_id, high 32 bits) and the count of its mappings (low 32),
	 * bit 63 set; 0 otherwise. While both still hold, the outermost span
	 * skips the read: nothing was mapped since user space looked. */
	__u64 tctx_none;
	/* unsampled_pos is the stack pointer at the entry of the call that
	 * head sampling (sample_ratio, or the thread context's sampled flag)
	 * left out as the thread's outermost span and whose return the kernel
	 * skips (a SITE_SESSION entry): it opened no frame. unsampled_ret is
	 * the return address the call found at unsampled_pos, unsampled_span
	 * its span. While they still hold, an entry deeper in the stack with
	 * no frame open is inside that call and follows its decision (see
	 * in_unsampled_call); 0 for none. For a call of a leaf function
	 * (SITE_LEAF), unsampled_leaf_bytes is not 0, and unsampled_ret is
	 * the address of the call's entry site instead: a hit is inside the
	 * call when its address is within unsampled_leaf_bytes of it. */
	__u64 unsampled_pos;
	__u64 unsampled_ret;
	__u32 unsampled_span;
	__u32 unsampled_leaf_bytes;
	/* sent counts the span records of this state, so that only every
	 * FILL_CHECK_EVERY-th of them looks at how full the ring is. */
	__u32 sent;
	/* rng is the state of the thread's head-sampling draws (xorshift32,
	 * thread_random), seeded from the kernel's generator; 0 until the
	 * first draw. */
	__u32 rng;
	/* pos is the stack position of the hit being handled (see struct
	 * frame), set by state(): kept here, not on the callers' stacks. */
	__u64 pos;
	struct frame frames[ABI_MAX_DEPTH];
	__u8 stack[VALUE_BASE_MAX + VALUE_WINDOW + sizeof(struct span_record)];
	/* What only drop_stale and called_directly use, after what every
	 * span uses: the hot fields keep their cache lines. */
	/* direct_ret is the last return address that called_directly found
	 * to follow a direct call of the function entered: a call there
	 * calls that function every time. 0 for none. */
	__u64 direct_ret;
	/* call_ret is the return address of the call being entered at pos,
	 * as unwound read it (0 when unknown), for drop_stale's walk. */
	__u64 call_ret;
	/* rets[i] is the return address the call of frame i found, for a
	 * function span closed at its RET instructions (ret_frame): a tail
	 * call keeps it, a new call at the same position has its own (see
	 * drop_stale). Meaningless for the other frames. */
	__u64 rets[ABI_MAX_DEPTH];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_state);
} task_states SEC(".maps");

/* go_key names a goroutine: Go code runs a goroutine on any thread, so its
 * open spans are keyed by the g pointer the Go ABI keeps in a register
 * (REG_SLOT_GO_G: R14 on x86-64, R28 on arm64). */
struct go_key {
	__u32 pid;
	__u32 pad;
	__u64 g;
};

/* go_states holds the open spans of goroutines. An entry is created when a
 * goroutine opens its outermost span and deleted when that span closes, when
 * the process execs or exits; when the map is full, entries are counted as
 * no_state. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct go_key);
	__type(value, struct task_state);
	__uint(max_entries, 1); /* set by the loader */
} go_states SEC(".maps");

/* go_live counts the entries of go_states (slot 0), so that exec and exit
 * only walk go_states when it holds something. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, __s64);
	__uint(max_entries, 1);
} go_live SEC(".maps");

/* empty_state is the zero value new go_states entries are copied from. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct task_state);
	__uint(max_entries, 1);
} empty_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} records SEC(".maps");

/* reader_wake (enum wake_mode) is written by user space before it sleeps
 * and set to WAKE_SENT by the record that wakes it. */
__u32 reader_wake = WAKE_FILL;

/* wake_bytes is how full the ring gets before a record wakes a reader that
 * drains on a timer (a quarter of it). Set by the loader. */
volatile const __u64 wake_bytes = 1 << 20;

/* reader_urgent is set by a record user space is to act on at once (enum
 * wake_level): the reader, sleeping on its flush timer, drains when it is
 * set rather than when the timer ends. User space clears it as it reads. */
__u32 reader_urgent = 0;

/* wake_flags returns the flags to write a record with: a wakeup only when
 * the reader asked for one. A record whose program read the request just
 * before the reader made it goes without: the reader's sleep is bounded
 * (internal/tracer). */
static __always_inline __u64 wake_flags(void)
{
	__u32 want = *(volatile __u32 *)&reader_wake;

	if (want == WAKE_SENT)
		return BPF_RB_NO_WAKEUP;
	if (want == WAKE_FIRST || bpf_ringbuf_query(&records, BPF_RB_AVAIL_DATA) >= wake_bytes) {
		*(volatile __u32 *)&reader_wake = WAKE_SENT;
		return BPF_RB_FORCE_WAKEUP;
	}
	return BPF_RB_NO_WAKEUP;
}

/* FILL_CHECK_EVERY is how many span records of one thread or goroutine go
 * between two looks at how full the ring is while the reader drains on a
 * timer (WAKE_FILL): a look is a helper call, which costs a traced thread
 * as much as a map lookup and a counter do. The reader learns that the
 * ring holds wake_bytes at most that many records of each writer late: a
 * few KiB of a ring of MiBs. */
#define FILL_CHECK_EVERY 32

/* urgent_wake_flags returns the flags to write a record with that user
 * space is to act on at once: it sets reader_urgent, and wakes the reader
 * in either mode it sleeps in unless a wakeup is already on its way (the
 * reader then sees reader_urgent before it sleeps again). */
static __always_inline __u64 urgent_wake_flags(void)
{
	*(volatile __u32 *)&reader_urgent = 1;
	if (*(volatile __u32 *)&reader_wake == WAKE_SENT)
		return BPF_RB_NO_WAKEUP;
	*(volatile __u32 *)&reader_wake = WAKE_SENT;
	return BPF_RB_FORCE_WAKEUP;
}

/* record_wake_flags returns the flags to write a record with at a level of
 * enum wake_level. */
static __always_inline __u64 record_wake_flags(int level)
{
	if (level == WAKE_URGENT)
		return urgent_wake_flags();
	if (level == WAKE_ASKED)
		return wake_flags();
	return BPF_RB_NO_WAKEUP;
}

/* span_wake_flags is wake_flags for a span record of the state ts. */
static __always_inline __u64 span_wake_flags(struct task_state *ts)
{
	__u32 want = *(volatile __u32 *)&reader_wake;

	if (want == WAKE_SENT || (want == WAKE_FILL && ts->sent++ % FILL_CHECK_EVERY != 0))
		return BPF_RB_NO_WAKEUP;
	return wake_flags();
}

/* procs holds the processes of chosen targets (pid: or process:), by
 * thread group id. User space fills it for the processes it finds and
 * decides; the engine marks execing processes pending, copies entries to
 * forked children and deletes them at exit. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, struct proc_entry);
	__uint(max_entries, 1); /* set by the loader */
} procs SEC(".maps");

/* pending counts what pending processes did (see enum pending_kind), apart
 * from the probe and span counters: user space adds a process's counts when
 * it decides the process is chosen, and drops them otherwise. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct pending_key);
	__type(value, __u64);
	__uint(max_entries, 1); /* set by the loader */
} pending SEC(".maps");

/* proc_hits counts the hits of probes in files seen inside containers, per
 * process; user space turns processes into container ids and deletes the
 * entries of processes that are gone. When it is full, hits still count in
 * probes, without a process. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__type(key, struct proc_hits_key);
	__type(value, __u64);
	__uint(max_entries, 1); /* set by the loader */
} proc_hits SEC(".maps");

/* pending_add adds n to a counter of a pending process; it returns 0, or
 * -1 when the counter could not be had (the map is full). */
__subprog int pending_add(__u32 pid, __u8 kind, __u32 id, __u8 bucket, __u64 n)
{
	struct pending_key key = {.pid = pid, .id = id, .kind = kind, .bucket = bucket};
	__u64 *v = bpf_map_lookup_elem(&pending, &key);

	if (v) {
		__sync_fetch_and_add(v, n);
		return 0;
	}
	if (bpf_map_update_elem(&pending, &key, &n, BPF_NOEXIST) == 0)
		return 0;
	v = bpf_map_lookup_elem(&pending, &key); /* another CPU made it first */
	if (!v)
		return -1;
	__sync_fetch_and_add(v, n);
	return 0;
}

/* thread_ctx_procs holds what the engine knows of each process's
 * otel_thread_ctx_v1 (OTEP 4947), by pid: made by the engine when it asks
 * user space (a PROCESS_THREAD_CONTEXT record), filled in by user space,
 * deleted at exec and exit, copied at fork. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct thread_ctx_proc);
	__uint(max_entries, 1); /* set by the loader */
} thread_ctx_procs SEC(".maps");

/* thread_ctx_empty is the zero value new thread_ctx_procs entries are copied from. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__type(key, __u32);
	__type(value, struct thread_ctx_proc);
	__uint(max_entries, 1);
} thread_ctx_empty SEC(".maps");

/* thread_ctx_counts counts, per CPU, what reading thread contexts found. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct thread_ctx_stats);
	__uint(max_entries, 1);
} thread_ctx_counts SEC(".maps");

/* choice says whether a hit of site s counts, for a process pid. */
enum choice {
	CHOICE_NO = 0,
	CHOICE_YES = 1,
	CHOICE_PENDING = 2, /* counts as pending: user space decides later */
};

static __always_inline enum choice chosen(const struct site *s, __u32 pid)
{
	if (!(s->flags & SITE_CHOSEN))
		return CHOICE_YES;
	struct proc_entry *pe = bpf_map_lookup_elem(&procs, &pid);
	if (!pe)
		return CHOICE_NO;
	__u64 mask = pe->mask;
	if (s->target_bit < ABI_MAX_CHOSEN_TARGETS && (mask & (1ULL << s->target_bit)))
		return CHOICE_YES;
	if (mask & (1ULL << PROC_PENDING_BIT))
		return CHOICE_PENDING;
	return CHOICE_NO;
}

static __always_inline void add(__u64 *counter, __u64 n)
{
	__sync_fetch_and_add(counter, n);
}

static __always_inline struct span_stats *span_stats_of(__u32 span)
{
	return bpf_map_lookup_elem(&spans, &span);
}

/* count adds one to a counter of a span definition's statistics. */
#define count(span, field)                                               \
	do {                                                             \
		struct span_stats *__st = span_stats_of(span);           \
		if (__st)                                                \
			add(&__st->field, 1);                            \
	} while (0)

/*
 * frame_index returns i modulo ABI_MAX_DEPTH, computed at run time. Where
 * clang can prove the mask changes nothing (an index known to be below
 * ABI_MAX_DEPTH on every path it sees) it drops it, and verifiers that track
 * ranges less precisely than clang (Linux 6.1 does not learn i >= 1 from
 * i != 0) then see an unbounded index: the empty asm makes i opaque to
 * clang, so the mask stays.
 */
static __always_inline __u32 frame_index(__u32 i)
{
	asm volatile("" : "+r"(i));
	return i & (ABI_MAX_DEPTH - 1);
}

/*
 * at_most returns v, or max when v is larger, compared in the register
 * that is then used: clang may compare a copy, and the verifier of Linux
 * 6.1 does not carry a bound learned on a 32-bit register to its copies.
 */
static __always_inline __u32 at_most(__u32 v, __u32 max)
{
	asm volatile("" : "+r"(v));
	if (v > max)
		v = max;
	return v;
}

/* frame_at returns frame i (modulo ABI_MAX_DEPTH) of a state. */
#define frame_at(ts, i) (&(ts)->frames[frame_index(i)])

/* abandon_ctx is the state of abandon_one over frames [from, to). */
struct abandon_ctx {
	struct task_state *ts;
	__u32 from;
};

static long abandon_one(__u32 i, struct abandon_ctx *c)
{
	__u32 k = c->from + i;

	if (k >= ABI_MAX_DEPTH)
		return 1;
	count(c->ts->frames[k].span, abandoned);
	return 0;
}

/* abandon_range is abandon for from < to <= ABI_MAX_DEPTH. */
__subprog void abandon_range(struct task_state *ts, __u32 from, __u32 to)
{
	struct abandon_ctx c = {.ts = ts, .from = from};

	bpf_loop(to - from, abandon_one, &c, 0);
}

/* abandon counts the open spans in frames [from, to) as abandoned: their
 * exit can no longer come. It does not change the state. */
static __always_inline void abandon(struct task_state *ts, __u32 from, __u32 to)
{
	if (to > ABI_MAX_DEPTH)
		to = ABI_MAX_DEPTH;
	if (from < to)
		abandon_range(ts, from, to);
}

/* truncate keeps the frames below depth open and frees the rest of the
 * state: the value stack falls back to the first freed frame's values. */
static __always_inline void truncate(struct task_state *ts, __u32 depth)
{
	if (depth < ABI_MAX_DEPTH && depth < ts->depth)
		ts->top = ts->frames[depth].value_off;
	if (depth == 0)
		ts->top = 0;
	ts->depth = depth;
	ts->overflow = 0; /* deeper unrecorded entries went too */
}

/* reset abandons every open span of a state and empties it. */
static __always_inline void reset(struct task_state *ts)
{
	__u32 depth = ts->depth;

	abandon(ts, 0, depth);
	if (ts->overflow) {
		/* unrecorded entries: counted as overflow when they opened */
		ts->overflow = 0;
	}
	truncate(ts, 0);
	ts->unsampled_pos = 0;
}

/*
 * reg_value returns register slot slot (bpf/regs.h) of the probed thread, 0
 * for a slot the architecture does not have. The verifier forbids variable
 * offsets into the context: the switch reads it at constant offsets. A
 * global function, checked once, that takes the context (Linux 5.6); the
 * registers are never copied, which keeps the stack of the call chain
 * within the 512 bytes older verifiers allow.
 */
static __always_inline __u64 reg_value(struct pt_regs *regs, __u32 slot)
{
	if (!regs)
		return 0;
	__u64 v = 0;
	/* One load at a constant offset from the unmodified context pointer
	 * per case: written in assembly, since clang would otherwise merge
	 * the cases into one load through a computed pointer. */
#define REG_CASE(i)                                                                  \
	case i:                                                                      \
		if (i < REG_SLOT_COUNT)                                              \
			asm volatile("%0 = *(u64 *)(%1 + %2)" : "=r"(v) : "r"(regs), "i"(i * 8)); \
		return v;
	switch (slot) {
	REG_CASE(0) REG_CASE(1) REG_CASE(2) REG_CASE(3) REG_CASE(4) REG_CASE(5) REG_CASE(6) REG_CASE(7)
	REG_CASE(8) REG_CASE(9) REG_CASE(10) REG_CASE(11) REG_CASE(12) REG_CASE(13) REG_CASE(14) REG_CASE(15)
	REG_CASE(16) REG_CASE(17) REG_CASE(18) REG_CASE(19) REG_CASE(20) REG_CASE(21) REG_CASE(22) REG_CASE(23)
	REG_CASE(24) REG_CASE(25) REG_CASE(26) REG_CASE(27) REG_CASE(28) REG_CASE(29) REG_CASE(30) REG_CASE(31)
	REG_CASE(32) REG_CASE(33)
	}
#undef REG_CASE
	return 0;
}

_Static_assert(REG_SLOT_COUNT <= 34, "reg_value has a case for every slot");

/* fetch_result packs what fetch_one did: the new cursor and two flags. */
enum fetch_result {
	FETCH_RESULT_CURSOR = 0xffff,
	FETCH_RESULT_FAILED = 1 << 16,
	FETCH_RESULT_TRUNCATED = 1 << 17,
};

/*
 * fetch_one runs one fetch op and stores its value in w at cursor (bytes
 * from the start of the span's values). It is a global function so that the
 * verifier checks it once, not once per fetch and path. It returns the new
 * cursor and FETCH_RESULT_* flags.
 */
/*
 * resolve_value computes what a fetch op points at: the integer of an INT
 * (in *v), or the address of a STRING, BYTES or GOSTRING (in *v) and, for a
 * GOSTRING, its length (in *golen). It returns 0, or -1 when memory on the
 * way could not be read.
 */
static __always_inline int resolve_value(struct pt_regs *regs, const struct fetch_op *op, __u64 *v,
					 __u64 *golen)
{
	__u64 x = 0;

	if (op->base == FETCH_BASE_REGISTER)
		x = reg_value(regs, op->base_reg);
	x += op->disp;
	if (op->scale)
		x += reg_value(regs, op->index_reg) * op->scale;

	*golen = 0;
	if (op->kind == FETCH_KIND_GOSTRING && !op->deref_count)
		*golen = reg_value(regs, op->len_reg);
	for (__u32 d = 0; d < ABI_MAX_DEREFS; d++) {
		if (d >= op->deref_count)
			break;
		__u64 addr = x + op->deref_offsets[d];
		__u32 size = 8;
		if (d + 1 == op->deref_count && op->last_is_address) {
			x = addr;
			break;
		}
		if (d + 1 == op->deref_count && op->kind == FETCH_KIND_INT && op->read_size < 8)
			size = op->read_size;
		x = 0;
		if (bpf_probe_read_user(&x, size, (const void *)addr))
			return -1;
	}
	if (op->kind == FETCH_KIND_GOSTRING && op->deref_count) {
		/* x is the address of the string header: pointer, then length. */
		__u64 hdr[2];
		if (bpf_probe_read_user(hdr, sizeof(hdr), (const void *)x))
			return -1;
		x = hdr[0];
		*golen = hdr[1];
	}
	*v = x;
	return 0;
}

/*
 * fetch_one runs one fetch op and stores its value in w at cursor (bytes
 * from the start of the span's values). It is a global function so that the
 * verifier checks it once, not once per fetch and path. It returns the new
 * cursor and FETCH_RESULT_* flags.
 */
__noinline __u32 fetch_one(struct pt_regs *regs, const struct fetch_op *op, struct values *w,
			   __u32 cursor)
{
	__u64 v = 0, golen = 0;
	__u32 len, need;

	if (!regs || !op || !w)
		return cursor | FETCH_RESULT_FAILED;
	if (resolve_value(regs, op, &v, &golen))
		return cursor | FETCH_RESULT_FAILED;

	len = op->max_len;
	if (len > ABI_STRING_MAX)
		len = ABI_STRING_MAX;
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
		*(__u64 *)(w->data + cursor) = v;
		return cursor + 8;
	}
	if (op->kind == FETCH_KIND_STRING) {
		long n = bpf_probe_read_user_str(w->data + cursor + 2, len, (const void *)v);
		if (n <= 0)
			return cursor | FETCH_RESULT_FAILED;
		*(__u16 *)(w->data + cursor) = (__u16)(n - 1);
		return cursor + ((2 + (__u32)n + 7) & ~7u);
	}
	if (op->kind == FETCH_KIND_GOSTRING) {
		/* Go strings have no NUL: copy at most len-1 bytes and add one. */
		__u32 n = golen < len ? golen : (len ? len - 1 : 0);
		if (n > ABI_STRING_MAX - 1)
			n = ABI_STRING_MAX - 1;
		if (n && bpf_probe_read_user(w->data + cursor + 2, n, (const void *)v))
			return cursor | FETCH_RESULT_FAILED;
		__u32 end = cursor + 2 + n;
		if (end < sizeof(w->data))
			w->data[end] = 0;
		*(__u16 *)(w->data + cursor) = (__u16)n;
		return cursor + ((2 + n + 1 + 7) & ~7u);
	}
	if (bpf_probe_read_user(w->data + cursor, len, (const void *)v))
		return cursor | FETCH_RESULT_FAILED;
	return cursor + ((len + 7) & ~7u);
}

/* fetched packs what fetch_all did: the new cursor, which fetches stored
 * nothing (bit i: fetch i) and whether any was truncated. */
enum fetched {
	FETCHED_CURSOR = 0xffff,
	FETCHED_FAILED_SHIFT = 16, /* 8 bits */
	FETCHED_TRUNCATED = 1 << 24,
};

/* fetch_all runs count fetch ops from cursor on and returns the new cursor
 * with FETCHED_* flags. */
__subprog __u32 fetch_all(struct pt_regs *regs, const struct fetch_op *ops, __u32 count, struct values *w,
			  __u32 cursor)
{
	__u32 out = 0;

	for (__u32 i = 0; i < ABI_MAX_FETCHES; i++) {
		if (i >= count)
			break;
		__u32 r = fetch_one(regs, &ops[i], w, cursor);
		cursor = r & FETCH_RESULT_CURSOR;
		if (r & FETCH_RESULT_FAILED)
			out |= 1u << (FETCHED_FAILED_SHIFT + i);
		if (r & FETCH_RESULT_TRUNCATED)
			out |= FETCHED_TRUNCATED;
	}
	return out | (cursor & FETCHED_CURSOR);
}

/*
 * fetch_regs stores the count (at most ABI_MAX_REG_FETCHES) fetches of one
 * end of a SITE_ENTRY_REGS or SITE_EXIT_REGS site, each a register's
 * integer, from cursor on as fetch_one would, and returns the new cursor
 * (as fetch_all does: nothing of them can fail): inline, without the two
 * calls fetch_all and fetch_one cost each fetch, the usual span's ~25 ns
 * per end. The caller checks cursor + 8 * ABI_MAX_REG_FETCHES <=
 * ABI_DATA_CAP.
 */
static __always_inline __u32 fetch_regs(struct pt_regs *regs, const struct fetch_op *ops, __u32 count,
					struct values *w, __u32 cursor)
{
	cursor = at_most(cursor, ABI_DATA_CAP - 8 * ABI_MAX_REG_FETCHES);
	for (__u32 i = 0; i < ABI_MAX_REG_FETCHES; i++) {
		if (i >= count)
			break;
		*(__u64 *)(w->data + cursor) = reg_value(regs, ops[i].base_reg) + ops[i].disp;
		cursor += 8;
	}
	return cursor;
}

/* fetch_end runs the count fetch ops of one end of a site from cursor on
 * and returns what fetch_all does: inline when regs_only (the site's
 * SITE_ENTRY_REGS or SITE_EXIT_REGS) and they fit, through fetch_all
 * otherwise. */
static __always_inline __u32 fetch_end(struct pt_regs *regs, const struct fetch_op *ops, __u32 count, int regs_only,
				       struct values *w, __u32 cursor)
{
	if (regs_only && count <= ABI_MAX_REG_FETCHES && cursor <= ABI_DATA_CAP - 8 * ABI_MAX_REG_FETCHES)
		return fetch_regs(regs, ops, count, w, cursor);
	return fetch_all(regs, ops, count, w, cursor);
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

/* TEXT_CHUNK is how many bytes of a string condition's value are read and
 * compared at a time: the value is never copied whole onto the stack. */
#define TEXT_CHUNK 8

/* chunk_equal compares the n (at most TEXT_CHUNK) bytes of chunk with the
 * condition's text from byte at on. */
static __always_inline int chunk_equal(const char *chunk, const struct filter *f, __u32 at, __u32 n)
{
	for (__u32 j = 0; j < TEXT_CHUNK; j++) {
		if (j >= n)
			break;
		__u32 i = at + j;
		if (i >= ABI_FILTER_TEXT_MAX)
			return 0;
		if (chunk[j] != f->text[i])
			return 0;
	}
	return 1;
}

/* go_text compares the first n bytes of the Go string at v with the
 * condition's text: 1 when equal, 0 when not, -1 when they cannot be read. */
__subprog int go_text(const struct filter *f, __u64 v, __u32 n)
{
	char chunk[TEXT_CHUNK];
	int equal = 1;

	for (__u32 i = 0; i < ABI_FILTER_TEXT_MAX / TEXT_CHUNK; i++) {
		__u32 at = i * TEXT_CHUNK;
		if (at >= n)
			break;
		__u32 m = at_most(n - at, TEXT_CHUNK);
		if (!m || bpf_probe_read_user(chunk, m, (const void *)(v + at)))
			return -1;
		equal &= chunk_equal(chunk, f, at, m);
	}
	return equal;
}

/* c_chunk reads up to want (at most TEXT_CHUNK) bytes of the C string at
 * v + at, and the byte after them, and compares them with the condition's
 * text from byte at on: it returns the bytes before the NUL shifted left
 * by one, with 1 when they equal the text's; -1 when they cannot be read. */
__subprog long c_chunk(const struct filter *f, __u64 v, __u32 at, __u32 want)
{
	char chunk[TEXT_CHUNK + 1];
	long r = bpf_probe_read_user_str(chunk, at_most(want, TEXT_CHUNK) + 1, (const void *)(v + at));

	if (r <= 0)
		return -1;
	return (r - 1) << 1 | chunk_equal(chunk, f, at, r - 1);
}

/* c_text reads the C string at v up to len bytes (and the byte after,
 * as a read of len + 1 bytes would) and compares them with the condition's
 * text: it returns the bytes before the NUL, at most len, shifted left by
 * one, with 1 when they equal the text's; -1 when they cannot be read. */
__subprog long c_text(const struct filter *f, __u64 v, __u32 len)
{
	__u32 equal = 1;

	for (__u32 i = 0; i <= ABI_FILTER_TEXT_MAX / TEXT_CHUNK; i++) {
		__u32 at = i * TEXT_CHUNK;
		if (at > len)
			break;
		__u32 want = len - at < TEXT_CHUNK ? len - at : TEXT_CHUNK;
		long r = c_chunk(f, v, at, want);
		if (r < 0)
			return -1;
		equal &= r & 1;
		if ((r >> 1) < want)
			return (long)(at + (r >> 1)) << 1 | equal;
	}
	return (long)len << 1 | equal;
}

/*
 * text_holds evaluates a string condition on the value at address v (a Go
 * string of golen bytes, or a C string), read TEXT_CHUNK bytes at a time.
 * The value as a span attribute shows it counts: at most its capture's
 * buffer less the NUL. A value that cannot be read fails the condition.
 */
__subprog int text_holds(const struct filter *f, __u64 v, __u64 golen)
{
	__u32 bound = f->value.max_len ? f->value.max_len - 1 : ABI_STRING_MAX - 1;
	__u32 len = f->len, have;
	int equal;

	if (len > ABI_FILTER_TEXT_MAX)
		len = ABI_FILTER_TEXT_MAX;
	if (len > bound)
		return f->op == FILTER_NE; /* the value is never that long */
	if (f->value.kind == FETCH_KIND_GOSTRING) {
		__u64 shown = golen < bound ? golen : bound;
		__u32 n = shown < len ? shown : len;
		char one;
		if (!n && shown && bpf_probe_read_user(&one, 1, (const void *)v))
			return 0; /* unreadable, as a C string's would be */
		equal = go_text(f, v, n);
		if (equal < 0)
			return 0;
		have = shown > len ? len + 1 : shown; /* longer than len is all that matters */
	} else {
		long r = c_text(f, v, len);
		if (r < 0)
			return 0;
		have = r >> 1;
		equal = r & 1;
		if (have == len && len < bound) {
			/* Does the string go on past len? One more byte says. */
			char more = 0;
			bpf_probe_read_user(&more, 1, (const void *)(v + len));
			if (more)
				have = len + 1;
		}
	}
	switch (f->op) {
	case FILTER_EQ:
		return have == len && equal;
	case FILTER_NE:
		return !(have == len && equal);
	case FILTER_PREFIX:
		return have >= len && equal;
	}
	return 0;
}

/* sign_extend keeps the low size bytes of v, sign-extended. */
static __always_inline __s64 sign_extend(__u64 v, __u8 size)
{
	switch (size) {
	case 1:
		return (__s8)v;
	case 2:
		return (__s16)v;
	case 4:
		return (__s32)v;
	}
	return (__s64)v;
}

/* low_bytes keeps the low size bytes of v. */
static __always_inline __u64 low_bytes(__u64 v, __u8 size)
{
	switch (size) {
	case 1:
		return (__u8)v;
	case 2:
		return (__u16)v;
	case 4:
		return (__u32)v;
	}
	return v;
}

/* TEXT_FAST_MAX is the longest text of a condition on a C string that
 * short_text_holds compares: the usual short constants take one read of
 * the string onto the stack instead of text_holds' chunks. */
#define TEXT_FAST_MAX 14

/* short_text_holds is text_holds for a condition on the C string at v
 * whose text is at most TEXT_FAST_MAX bytes and shorter than the value's
 * capture less one (so that the capture's bound cannot make the value
 * equal): one read of len + 1 bytes and the NUL says whether the value
 * equals, starts with or differs from the text. */
static __always_inline int short_text_holds(const struct filter *f, __u64 v, __u32 len)
{
	char buf[TEXT_FAST_MAX + 2] = {};
	long n = bpf_probe_read_user_str(buf, at_most(len + 2, sizeof(buf)), (const void *)v);

	if (n <= 0)
		return 0; /* unreadable: fails, as in text_holds */
	__u32 have = n - 1, equal = 1;
	for (__u32 j = 0; j < TEXT_FAST_MAX; j++) {
		if (j >= len)
			break;
		if (buf[j] != f->text[j]) {
			equal = 0;
			break;
		}
	}
	switch (f->op) {
	case FILTER_EQ:
		return have == len && equal;
	case FILTER_NE:
		return !(have == len && equal);
	case FILTER_PREFIX:
		return have >= len && equal;
	}
	return 0;
}

/*
 * filter_holds evaluates one condition. A global function, checked once by
 * the verifier. A value that cannot be read fails the condition.
 */
__noinline int filter_holds(struct pt_regs *regs, const struct filter *f)
{
	__u64 v = 0, golen = 0;

	if (!regs || !f)
		return 0;
	if (resolve_value(regs, &f->value, &v, &golen))
		return 0;
	if (f->value.kind == FETCH_KIND_INT) {
		__s64 s = sign_extend(v, f->size);
		__u64 u = low_bytes(v, f->size);
		switch (f->op) {
		case FILTER_EQ:
			return u == low_bytes((__u64)f->constant, f->size);
		case FILTER_NE:
			return u != low_bytes((__u64)f->constant, f->size);
		case FILTER_LT:
			return s < f->constant;
		case FILTER_LE:
			return s <= f->constant;
		case FILTER_GT:
			return s > f->constant;
		case FILTER_GE:
			return s >= f->constant;
		case FILTER_LT_U:
			return u < (__u64)f->constant;
		case FILTER_LE_U:
			return u <= (__u64)f->constant;
		case FILTER_GT_U:
			return u > (__u64)f->constant;
		case FILTER_GE_U:
			return u >= (__u64)f->constant;
		}
		return 0;
	}
	__u32 bound = f->value.max_len ? f->value.max_len - 1 : ABI_STRING_MAX - 1;
	if (f->value.kind == FETCH_KIND_STRING && f->len <= TEXT_FAST_MAX && f->len + 1 < bound)
		return short_text_holds(f, v, f->len);
	return text_holds(f, v, golen);
}

/* filters_hold says whether every condition of site s for one end holds; a
 * global function, checked once by the verifier. */
__noinline int filters_hold(struct pt_regs *regs, const struct site *s, __u32 at_exit)
{
	if (!regs || !s)
		return 0;
	for (__u32 i = 0; i < ABI_MAX_FILTERS; i++) {
		if (i >= s->filter_count)
			break;
		const struct filter *f = &s->filters[i];
		if (f->at_exit == at_exit && !filter_holds(regs, f))
			return 0;
	}
	return 1;
}

/* hist_value computes the integer a counter's histogram records; a global
 * function, checked once by the verifier. It returns 0, or -1 when memory on
 * the way could not be read. */
__noinline int hist_value(struct pt_regs *regs, const struct fetch_op *op, __u64 *v)
{
	__u64 golen;

	if (!regs || !op || !v)
		return -1;
	return resolve_value(regs, op, v, &golen);
}

/* hist_add adds an integer of value histogram id: v's low size bytes,
 * signed or not. */
static __always_inline void hist_add(__u32 id, __u64 v, __u8 size, __u8 is_signed)
{
	struct value_hist *h = bpf_map_lookup_elem(&value_hists, &id);
	__u64 m;
	int negative = 0;

	if (!h)
		return;
	if (is_signed) {
		__s64 sv = sign_extend(v, size);
		negative = sv < 0;
		m = negative ? -(__u64)sv : (__u64)sv;
		v = (__u64)sv;
	} else {
		v = m = low_bytes(v, size);
	}
	add(&h->count, 1);
	/* The sum is a 128-bit two's complement integer: no value overflows it. */
	__u64 old = __sync_fetch_and_add(&h->sum_lo, v);
	__u64 hi = negative ? (__u64)-1 : 0;
	if (old + v < old)
		hi++;
	if (hi)
		add((__u64 *)&h->sum_hi, hi);
	if (m == 0) {
		add(&h->zero, 1);
		return;
	}
	/* bucket 0 holds 1, bucket b > 0 holds (2^(b-1), 2^b] */
	__u32 b = m > 1 ? log2_bucket(m - 1) + 1 : 0;
	b = at_most(b, ABI_VALUE_BUCKETS - 1);
	if (negative)
		add(&h->negative[b], 1);
	else
		add(&h->positive[b], 1);
}

/* hist_unread counts a hit whose value histogram id could not read its
 * value. */
static __always_inline void hist_unread(__u32 id)
{
	struct value_hist *h = bpf_map_lookup_elem(&value_hists, &id);

	if (h)
		add(&h->unread, 1);
}

/* window returns the value stack from byte base on, or 0 when base is out
 * of bounds (which the engine never lets happen). */
static __always_inline struct values *window(struct task_state *ts, __u32 base)
{
	if (base > VALUE_BASE_MAX)
		return 0;
	return (struct values *)(ts->stack + base);
}

/* find_ctx is the state of find_one: the innermost frame below depth whose
 * span is span, or -1. */
struct find_ctx {
	struct task_state *ts;
	__u32 depth;
	__u32 span;
	int found;
};

static long find_one(__u32 i, struct find_ctx *c)
{
	__u32 k = c->depth - 1 - i;

	if (k >= ABI_MAX_DEPTH)
		return 1;
	if (c->ts->frames[k].span == c->span) {
		c->found = k;
		return 1;
	}
	return 0;
}

/* find_below is find over the frames below depth, 0 < depth < ABI_MAX_DEPTH. */
__subprog int find_below(struct task_state *ts, __u32 depth, __u32 span)
{
	struct find_ctx c = {.ts = ts, .depth = depth, .span = span, .found = -1};

	bpf_loop(depth, find_one, &c, 0);
	return c.found;
}

/* find returns the index of the innermost open frame of span below depth,
 * or -1. */
static __always_inline int find(struct task_state *ts, __u32 depth, __u32 span)
{
	if (depth == 0)
		return -1;
	if (depth > ABI_MAX_DEPTH)
		depth = ABI_MAX_DEPTH;
	if (frame_at(ts, depth - 1)->span == span)
		return depth - 1; /* the usual case: the innermost one */
	if (depth == 1)
		return -1;
	return find_below(ts, depth - 1, span);
}

/* ret_frame says whether a frame opened at site flags is a function
 * span's closed at its RET instructions (not a kernel return probe's, not
 * Go's): its return address is kept (ts->rets). */
#define ret_frame(flags) (((flags) & (SITE_FUNCTION | SITE_KERNEL_RETURN | SITE_GO)) == SITE_FUNCTION)

/* unwound_ctx is the state of unwound_one: how many frames from the top are
 * function spans whose activation is gone, and what is above them. */
struct unwound_ctx {
	struct task_state *ts;
	__u64 pos;
	__u32 depth;
	__u32 keep;
};

/* new_call says whether the call at c->pos (its return address in
 * c->ts->call_ret), which frame k (f) of a function span saw at its entry
 * too, is a new call rather than a tail call: its return address is
 * neither the one f's call found (ts->rets, for a span closed at its RET
 * instructions) nor the kernel's return probe trampoline, where a kernel
 * return probe of f, or of a function it tail-called, made the return go
 * (uprobe_get_trampoline_vaddr: a tail call inherits it). */
static __always_inline int new_call(const struct unwound_ctx *c, const struct frame *f, __u32 k)
{
	__u64 ret = c->ts->call_ret;
	__u32 key = f->entry_site;
	const struct site *s = bpf_map_lookup_elem(&sites, &key);

	if (!ret || !s)
		return 0;
	if (ret_frame(s->flags)) {
		__u64 own = c->ts->rets[k & (ABI_MAX_DEPTH - 1)];
		if (!own || ret == own)
			return 0; /* unknown (unreadable at entry), or a tail call */
	} else if (!(s->flags & SITE_KERNEL_RETURN)) {
		return 0;
	}
	struct xol_area *area = bpf_get_current_task_btf()->mm->uprobes_state.xol_area;
	return !area || ret != area->vaddr;
}

static long unwound_one(__u32 i, struct unwound_ctx *c)
{
	__u32 k = c->depth - 1 - i;

	if (k >= ABI_MAX_DEPTH)
		return 1;
	struct frame *f = &c->ts->frames[k];
	/* A span that is not a function's opened inside the activation of
	 * the function span below it, or before it: that one decides. */
	if (!(f->flags & RECORD_FUNCTION))
		return 0;
	if (!f->pos || f->pos > c->pos)
		return 1;
	/* At the same position: a tail call, unless the call there does not
	 * return where the kernel's return probe of this function put it. */
	if (f->pos == c->pos && !new_call(c, f, k))
		return 1;
	c->keep = k;
	return 0;
}

/* unwound returns how many of the depth innermost frames stay: the
 * function spans whose activation is gone, and every span opened after
 * them, go (see drop_stale). The hit at pos is a call (regs its
 * registers at entry). */
__subprog __u32 unwound(struct task_state *ts, __u32 depth, __u64 pos, struct pt_regs *regs)
{
	struct unwound_ctx u = {.ts = ts, .depth = depth, .pos = pos, .keep = depth};

	/* The return address, in the state: the context stays within 24
	 * bytes (bpf_loop's inlining adds 24 to the frame). */
#if defined(__TARGET_ARCH_x86)
	(void)regs; /* at the stack pointer */
	if (bpf_probe_read_user(&ts->call_ret, sizeof(ts->call_ret), (const void *)pos))
		ts->call_ret = 0;
#else
	ts->call_ret = reg_value(regs, REG_ARM64_X30); /* in the link register */
#endif
	bpf_loop(depth, unwound_one, &u, 0);
	return u.keep;
}

/*
 * drop_stale drops open spans whose exit can no longer come because the
 * stack was unwound past them (longjmp, exceptions, Go panics), so that they
 * do not become the parents of everything after them:
 *  - a function span is dead once a probe fires at a stack position above
 *    the one its entry saw (its activation is gone), or at the same one for
 *    a call that does not return to the kernel's return probe trampoline
 *    where the span closes at a kernel return probe (its return would have
 *    closed it; a tail call returns there); at the same position otherwise
 *    it is a tail call;
 *  - the spans opened after a dead function span (above it), functions'
 *    or not, are dead too;
 *  - when a span opens again while one of its definition is open, at a stack
 *    position at or above the one that open span's entry saw, the open one is
 *    dead (a span can only nest in itself deeper in the stack), with
 *    everything opened after it: "start, error, start again".
 * Dropped spans count as abandoned, and so do entries lost to overflow.
 */
static __always_inline void drop_stale(struct task_state *ts, __u32 span, __u64 pos, struct pt_regs *regs)
{
	__u32 depth = ts->depth;

	if (depth > ABI_MAX_DEPTH)
		depth = ABI_MAX_DEPTH;
	__u32 keep = depth;
	struct frame *top = frame_at(ts, depth - 1);
	/* The innermost function span decides; one that is not a function's
	 * above it (a USDT pair opened last) is looked past, one deep. */
	if (!(top->flags & RECORD_FUNCTION) && depth > 1)
		top = frame_at(ts, depth - 2);
	if ((top->flags & RECORD_FUNCTION) && top->pos && top->pos <= pos)
		keep = unwound(ts, depth, pos, regs); /* the usual case skips this: the innermost span is still live */
	int k = find(ts, keep, span);
	if (k >= 0) {
		__u64 at = frame_at(ts, k)->pos;
		if (at && at <= pos)
			keep = k;
	}
	if (keep < depth) {
		abandon(ts, keep, depth);
		truncate(ts, keep);
	}
}

/* go_g_header is the start of the Go runtime's g: the goroutine's stack
 * bounds (runtime.stack{lo, hi}), at offset 0 in every Go version. */
struct go_g_header {
	__u64 lo;
	__u64 hi;
};

/* go_live_add adds n to the count of go_states entries. */
static __always_inline void go_live_add(__s64 n)
{
	__u32 zero = 0;
	__s64 *live = bpf_map_lookup_elem(&go_live, &zero);

	if (live)
		__sync_fetch_and_add(live, n);
}

/* go_where sets *pos to the stack position of the goroutine that runs the
 * probe (0 when its stack bounds cannot be read) and returns its goroutine
 * id (0 if unknown). */
__subprog __u64 go_where(struct pt_regs *regs, const struct site *s, __u64 *pos)
{
	__u64 sp = reg_at(regs, REG_SLOT_SP), g = reg_at(regs, REG_SLOT_GO_G);
	struct go_g_header hdr = {};
	__u64 goid = 0;

	if (bpf_probe_read_user(&hdr, sizeof(hdr), (const void *)g) || hdr.hi < sp)
		hdr.hi = 0;
	*pos = hdr.hi ? ~(hdr.hi - sp) : 0;
	if (s->goid_offset && bpf_probe_read_user(&goid, sizeof(goid), (const void *)(g + s->goid_offset)))
		goid = 0;
	return goid;
}

/* go_create makes the empty state of a goroutine and returns it, 0 when
 * the map is full. */
__subprog struct task_state *go_create(const struct go_key *key)
{
	__u32 zero = 0;
	struct task_state *empty = bpf_map_lookup_elem(&empty_state, &zero);

	if (!empty)
		return 0;
	if (bpf_map_update_elem(&go_states, key, empty, BPF_NOEXIST) == 0)
		go_live_add(1);
	return bpf_map_lookup_elem(&go_states, key);
}

/*
 * go_state returns the open spans of the goroutine that runs the probe, its
 * stack position in their pos; 0 when there are none (create unset) or
 * none can be had.
 */
__subprog struct task_state *go_state(struct pt_regs *regs, const struct site *s, int create)
{
	struct go_key key = {.pid = bpf_get_current_pid_tgid() >> 32, .g = reg_at(regs, REG_SLOT_GO_G)};
	__u64 pos;
	__u64 goid = go_where(regs, s, &pos);
	struct task_state *ts;

	ts = bpf_map_lookup_elem(&go_states, &key);
	if (!ts && create)
		ts = go_create(&key);
	if (!ts)
		return 0;
	if (goid && ts->goid != goid) {
		/* The g was reused by a new goroutine: whatever the old one left
		 * open will never close. */
		reset(ts);
		ts->goid = goid;
	}
	ts->flags = pos ? 0 : STATE_NO_POS;
	ts->pos = pos;
	return ts;
}

/*
 * state returns the open spans of whoever runs the probe (task, the
 * current task): the goroutine for Go sites, the thread otherwise, with the
 * stack position of the hit in their pos; 0 when there are none (create
 * unset) or none can be had.
 */
static __always_inline struct task_state *state(struct pt_regs *regs, const struct site *s,
						int create, struct task_struct *task)
{
	if (s->flags & SITE_GO)
		return go_state(regs, s, create);
	struct task_state *ts =
		bpf_task_storage_get(&task_states, task, 0, create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
	if (ts)
		ts->pos = reg_at(regs, REG_SLOT_SP);
	return ts;
}

/* go_release deletes a goroutine's state once nothing is open in it. */
__subprog void go_release(struct pt_regs *regs, struct task_state *ts)
{
	if (ts->depth || ts->overflow)
		return;
	struct go_key key = {.pid = bpf_get_current_pid_tgid() >> 32, .g = reg_at(regs, REG_SLOT_GO_G)};
	if (bpf_map_delete_elem(&go_states, &key) == 0)
		go_live_add(-1);
}

/*
 * Thread contexts (OTEP 4947). An SDK publishes the active span of a thread
 * through the ELF TLS variable otel_thread_ctx_v1, a pointer to a record:
 * trace-id[16], span-id[8], valid, trace-flags, attrs-data-size (u16),
 * attrs-data. User space finds the variable in the process's modules and
 * tells the engine how to reach it from a thread (struct thread_ctx_proc);
 * the outermost span a thread opens reads it.
 */

/* thread_pointer returns the thread pointer of a user task as the kernel
 * saved it (see struct thread_struct): fsbase on x86-64, tpidr_el0 on arm64. */
static __always_inline __u64 thread_pointer(struct task_struct *task)
{
#if defined(__TARGET_ARCH_x86)
	return task->thread.fsbase;
#elif defined(__TARGET_ARCH_arm64)
	return task->thread.uw.tp_value;
#endif
}

/* glibc's dynamic thread vector: the thread control block at the thread
 * pointer holds a pointer to it (tcbhead_t.dtv: after the tcb pointer on
 * x86-64, first on aarch64); each entry is 16 bytes (union dtv: the block's
 * address and the one to free), entry 0 the generation and the entry before
 * it the number of entries. A block not yet allocated for the thread is
 * TLS_DTV_UNALLOCATED (-1). */
#if defined(__TARGET_ARCH_x86)
#define DTV_AT_TP 8
#else
#define DTV_AT_TP 0
#endif
#define DTV_ENTRY 16
#define DTV_UNALLOCATED ((__u64)-1)

/* THREAD_RECORD_HEADER is the size of a context record's fixed part
 * (trace-id to attrs-data-size): attrs-data follows. */
#define THREAD_RECORD_HEADER __builtin_offsetof(struct thread_context, attrs_len)
_Static_assert(THREAD_RECORD_HEADER == 28, "the OTEP 4947 record header is 28 bytes");

/* What thread_ctx_dtv returns when it finds no variable. */
#define TLS_VAR_NONE 0       /* the thread has no block for the module */
#define TLS_VAR_UNREADABLE 1 /* the DTV could not be read */

/* thread_ctx_dtv returns the address of the variable in the current
 * thread (thread pointer tp) for a THREAD_CTX_DTV process p: in the block
 * of module p->dtv_module, at p->tls_offset; or TLS_VAR_NONE or
 * TLS_VAR_UNREADABLE. */
__subprog __u64 thread_ctx_dtv(__u64 tp, const struct thread_ctx_proc *p)
{
	__u64 dtv = 0, v = 0;

	if (bpf_probe_read_user(&dtv, sizeof(dtv), (const void *)(tp + DTV_AT_TP)) || !dtv ||
	    bpf_probe_read_user(&v, sizeof(v), (const void *)(dtv - DTV_ENTRY)))
		return TLS_VAR_UNREADABLE;
	__u64 m = p->dtv_module;
	if (m == 0 || m > v)
		return TLS_VAR_NONE; /* loaded after the thread last grew its DTV: it never used it */
	if (bpf_probe_read_user(&v, sizeof(v), (const void *)(dtv + m * DTV_ENTRY)))
		return TLS_VAR_UNREADABLE;
	if (v == 0 || v == DTV_UNALLOCATED)
		return TLS_VAR_NONE;
	return v + p->tls_offset;
}

/* thread_ctx_count counts one thread_ctx_stats counter (field offset off). */
static __always_inline void thread_ctx_count(__u32 off)
{
	__u32 zero = 0;
	__u8 *st = bpf_map_lookup_elem(&thread_ctx_counts, &zero);

	if (st && off <= sizeof(struct thread_ctx_stats) - sizeof(__u64))
		add((__u64 *)(st + off), 1);
}

#define THREAD_CTX_OUTCOME(o) ((o) * sizeof(__u64))
#define THREAD_CTX_ASKED_COUNT __builtin_offsetof(struct thread_ctx_stats, asked)
#define THREAD_CTX_NO_ENTRY_COUNT __builtin_offsetof(struct thread_ctx_stats, no_entry)

static __always_inline void send_process(struct task_struct *task, __u8 event, __u32 pid, __u32 parent,
					 __u64 parent_start_ns, int wake);

/*
 * thread_ctx_ask asks user space how to reach the current process's
 * otel_thread_ctx_v1: it makes its thread_ctx_procs entry (p, 0 for none)
 * THREAD_CTX_ASKED for its image, at now, and sends a
 * PROCESS_THREAD_CONTEXT record that the reader acts on at once.
 */
__subprog void thread_ctx_ask(struct task_struct *task, struct thread_ctx_proc *p, __u64 now)
{
	__u32 pid = task->tgid;

	if (!p) {
		__u32 zero = 0;
		struct thread_ctx_proc *empty = bpf_map_lookup_elem(&thread_ctx_empty, &zero);
		if (!empty)
			return;
		long err = bpf_map_update_elem(&thread_ctx_procs, &pid, empty, BPF_NOEXIST);
		if (err) {
			if (err != -17 /* EEXIST: another thread asks */)
				thread_ctx_count(THREAD_CTX_NO_ENTRY_COUNT);
			return;
		}
		p = bpf_map_lookup_elem(&thread_ctx_procs, &pid);
		if (!p)
			return;
	}
	p->access = THREAD_CTX_ASKED;
	p->asked_ns = now;
	p->start_ns = task->group_leader->start_time;
	p->exec_id = task->self_exec_id;
	p->map_count = task->mm->map_count;
	thread_ctx_count(THREAD_CTX_ASKED_COUNT);
	send_process(task, PROCESS_THREAD_CONTEXT, pid, 0, 0, WAKE_URGENT);
}

/*
 * thread_ctx_read reads the context the current thread published into
 * ts->tctx, for site s opening the thread's outermost span, and returns
 * the flags of that span's frame: RECORD_THREAD_CONTEXT when it is valid
 * (valid is 1 and both ids are not zero), with RECORD_UNSAMPLED when its
 * trace is not sampled; 0 otherwise. The record's head is copied in one
 * read while its thread is stopped in this probe, as OTEP 4947's reading
 * protocol has it: only the thread itself writes its record, so the read
 * cannot be torn; a record caught mid-update (the writer set valid to 0
 * to rewrite it in place) is no context. A writer on another thread breaks
 * the protocol, and no re-read of valid could catch it (the record has no
 * sequence counter): each helper call costs about 65 ns here. A process
 * whose access the engine does not know is asked about instead. Each
 * outcome is counted.
 */
/* tctx_none_key is the key of struct task_state's tctx_none for the
 * current task: its image and how many mappings its process has. */
static __always_inline __u64 tctx_none_key(struct task_struct *task)
{
	return 1ULL << 63 | (__u64)task->self_exec_id << 32 | (__u32)task->mm->map_count;
}

__subprog __u32 thread_ctx_read(const struct site *s, struct task_state *ts)
{
	/* One buffer for the map key, the variable and the record's head:
	 * the frame stays within 48 bytes. */
	__u64 buf[4];
	struct task_struct *task = bpf_get_current_task_btf();

	*(__u32 *)buf = task->tgid;
	struct thread_ctx_proc *p = bpf_map_lookup_elem(&thread_ctx_procs, buf);
	if (!p || p->start_ns != task->group_leader->start_time || p->exec_id != task->self_exec_id) {
		thread_ctx_ask(task, p, bpf_ktime_get_ns());
		return 0;
	}
	if (p->access < THREAD_CTX_STATIC) {
		/* Not answered, or no variable in what the process mapped then:
		 * ask again, at most every ABI_THREAD_ASK_NS (the answer may
		 * have been lost; a library may have been loaded since). */
		if (p->access == THREAD_CTX_NONE && p->map_count == task->mm->map_count) {
			ts->tctx_none = tctx_none_key(task);
			return 0;
		}
		if (p->access == THREAD_CTX_ASKED || p->map_count != task->mm->map_count) {
			__u64 now = bpf_ktime_get_ns();
			if (now - p->asked_ns >= ABI_THREAD_ASK_NS)
				thread_ctx_ask(task, p, now);
		}
		return 0;
	}

	__u32 outcome = THREAD_CTX_UNREADABLE, flags = 0;
	__u64 tp = thread_pointer(task), var, rec;
	if (!tp)
		goto out;
	if (p->access == THREAD_CTX_STATIC) {
		var = tp + p->tls_offset;
	} else {
		var = thread_ctx_dtv(tp, p);
		if (var == TLS_VAR_NONE)
			outcome = THREAD_CTX_NO_CONTEXT;
		if (var == TLS_VAR_NONE || var == TLS_VAR_UNREADABLE)
			goto out;
	}
	if (bpf_probe_read_user(buf, sizeof(buf[0]), (const void *)var))
		goto out;
	rec = buf[0];
	outcome = THREAD_CTX_NO_CONTEXT;
	if (!rec)
		goto out;
	outcome = THREAD_CTX_INVALID;
	if (rec & 1)
		goto out; /* records start at an even address */
	/* The head in one read, onto the stack: into a map value (ts), the
	 * kernel's hardened-usercopy check of the destination costs more
	 * (harness/bench, Linux 6.18 x86-64). */
	outcome = THREAD_CTX_UNREADABLE;
	if (bpf_probe_read_user(buf, THREAD_RECORD_HEADER, (const void *)rec))
		goto out;
	__u8 valid = ((__u8 *)buf)[__builtin_offsetof(struct thread_context, valid)];
	outcome = valid == 0 ? THREAD_CTX_NO_CONTEXT : THREAD_CTX_INVALID;
	if (valid != 1 || !(buf[0] | buf[1]) || !buf[2])
		goto out;
	struct thread_context *c = &ts->tctx;
	__u64 *dst = (__u64 *)c;
	dst[0] = buf[0];
	dst[1] = buf[1];
	dst[2] = buf[2];
	((__u32 *)dst)[6] = ((__u32 *)buf)[6];
	__u64 n = 0;
	if ((s->flags & SITE_THREAD_ATTRS) && c->attrs_size) {
		/* Bounded in a 64-bit register: clang copies the value it
		 * compares, and the verifier of Linux 6.1 carries a bound to
		 * the copies of a 64-bit register only (at_most's 32-bit one
		 * was refused there). */
		n = c->attrs_size;
		asm volatile("" : "+r"(n));
		if (n > ABI_THREAD_ATTRS_MAX)
			n = ABI_THREAD_ATTRS_MAX;
		if (bpf_probe_read_user(c->attrs, n, (const void *)(rec + THREAD_RECORD_HEADER)))
			n = 0;
	}
	c->attrs_len = n;
	outcome = THREAD_CTX_READ;
	flags = RECORD_THREAD_CONTEXT | (c->trace_flags & 1 ? 0 : RECORD_UNSAMPLED);
out:
	thread_ctx_count(THREAD_CTX_OUTCOME(outcome));
	return flags;
}

/* thread_ctx_copy writes the thread context of ts as a span record
 * carries it (32 bytes and its attrs, rounded up to 8) into w at end, and
 * returns where it ends. */
static __always_inline __u32 thread_ctx_copy(struct task_state *ts, struct values *w, __u32 end)
{
	end = at_most(end, ABI_DATA_CAP);
	__u64 *dst = (__u64 *)(w->data + end);
	__u64 *src = (__u64 *)&ts->tctx;
	__u32 words = (__builtin_offsetof(struct thread_context, attrs) + ts->tctx.attrs_len + 7) / 8;

	words = at_most(words, sizeof(struct thread_context) / 8);
	for (__u32 i = 0; i < sizeof(struct thread_context) / 8; i++) {
		if (i >= words)
			break;
		dst[i] = src[i];
	}
	return end + 8 * words;
}

/* frame_ret keeps the return address of the call that entered the
 * innermost frame of ts (just opened) at ts->pos, for drop_stale: at the
 * stack pointer on x86-64, in the link register on arm64. A call: RET
 * probes are single-stepped, it is little beside them. */
__subprog void frame_ret(struct task_state *ts, struct pt_regs *regs)
{
	__u32 k = frame_index(ts->depth - 1);

#if defined(__TARGET_ARCH_x86)
	(void)regs;
	if (bpf_probe_read_user(&ts->rets[k], sizeof(ts->rets[k]), (const void *)ts->pos))
		ts->rets[k] = 0;
#else
	ts->rets[k] = reg_value(regs, REG_ARM64_X30);
#endif
}

/*
 * open_frame opens the next frame of ts for site s (its id in the high 32
 * bits of at, RECORD_PENDING and RECORD_FILTERED in the low ones, and for
 * the outermost span what thread_ctx_read returned) at the stack position
 * ts->pos, with the values of its entry. Inlined in span_entry, whose
 * frame stays small because the position lives in the state, not on the
 * stack.
 */
static __always_inline void open_frame(const struct site *s, struct pt_regs *regs, struct task_state *ts, __u64 at)
{
	__u32 depth = frame_index(ts->depth);
	struct frame *f = &ts->frames[depth];
	__u8 flags = 0;
	__u16 carrier = 0;
	if (depth > 0) {
		struct frame *parent = frame_at(ts, depth - 1);
		flags = parent->flags & (RECORD_UNSAMPLED | RECORD_THREAD_CONTEXT);
		carrier = parent->flags & RECORD_CARRIER ? depth : parent->carrier;
	}
	/* At the root, the head-sampling decision comes with at (root_sampling). */
	if (s->flags & SITE_CARRIER)
		flags |= RECORD_CARRIER;
	if (s->flags & SITE_FUNCTION)
		flags |= RECORD_FUNCTION;
	flags |= (__u8)at; /* RECORD_PENDING, RECORD_FILTERED; at the root RECORD_THREAD_CONTEXT, RECORD_UNSAMPLED */

	f->span = s->entry_span;
	f->entry_site = at >> 32;
	f->pos = ts->pos;
	f->carrier = carrier;

	__u8 failed = 0, truncated = 0;
	__u32 base = ts->top, len = 0;
	if (base > VALUE_BASE_MAX)
		base = VALUE_BASE_MAX; /* never: top stays within */
	if (s->entry_fetch_count && !(flags & (RECORD_UNSAMPLED | RECORD_FILTERED))) {
		struct values *w = base <= ABI_VALUE_STACK ? window(ts, base) : 0;
		if (w) {
			__u32 r = fetch_end(regs, s->entry, s->entry_fetch_count, s->flags & SITE_ENTRY_REGS, w, 0);
			len = r & FETCHED_CURSOR;
			failed = r >> FETCHED_FAILED_SHIFT;
			truncated = !!(r & FETCHED_TRUNCATED);
			if (len > ABI_DATA_CAP)
				len = ABI_DATA_CAP;
		} else {
			/* The value stack is used up: the span opens without values. */
			__u32 n = s->entry_fetch_count;
			if (n > ABI_MAX_FETCHES)
				n = ABI_MAX_FETCHES;
			failed = (__u8)((1u << n) - 1);
			truncated = 1;
		}
	}
	f->value_off = base;
	f->entry_len = len;
	f->entry_failed = failed;
	f->flags = flags | (truncated ? RECORD_TRUNCATED : 0);
	ts->top = base + len;
	f->start_ns = bpf_ktime_get_ns();
	ts->depth = depth + 1;
	if (ret_frame(s->flags))
		frame_ret(ts, regs);
}

/* not_recorded counts a completed span of definition span that is not
 * recorded (kind PENDING_SPAN_UNSAMPLED or PENDING_SPAN_SHORT): in its
 * statistics, or in the pending counters of a pending process. */
__subprog void not_recorded(__u32 span, __u32 pending, __u8 kind)
{
	if (pending)
		pending_add(bpf_get_current_pid_tgid() >> 32, kind, span, 0, 1);
	else if (kind == PENDING_SPAN_UNSAMPLED)
		count(span, unsampled);
	else
		count(span, short_spans);
}

/* proc_hit counts a hit of probe in the current process. */
__subprog void proc_hit(__u32 probe)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct proc_hits_key k = {.probe = probe, .pid = task->tgid, .start_ns = task->group_leader->start_time};
	__u64 *n = bpf_map_lookup_elem(&proc_hits, &k);

	if (n) {
		add(n, 1);
		return;
	}
	__u64 one = 1;
	if (bpf_map_update_elem(&proc_hits, &k, &one, BPF_NOEXIST) == -17 /* EEXIST */) {
		/* another thread of the process made it meanwhile */
		n = bpf_map_lookup_elem(&proc_hits, &k);
		if (n)
			add(n, 1);
	}
}

/* return_hit counts the hit that the return of session entry s would have
 * had (site return_site), when the entry made the kernel skip it: a return
 * probe's hits stay those of every call. */
__subprog void return_hit(const struct site *s, __u32 pending)
{
	__u32 key = s->return_site;
	const struct site *rs = bpf_map_lookup_elem(&sites, &key);

	if (!rs)
		return;
	if (pending) {
		pending_add(bpf_get_current_pid_tgid() >> 32, PENDING_HITS, rs->probe_id, 0, 1);
		return;
	}
	key = rs->probe_id;
	struct probe_stats *ps = bpf_map_lookup_elem(&probes, &key);
	if (ps)
		add(&ps->hits, 1);
	if (rs->flags & SITE_PROC_HITS)
		proc_hit(rs->probe_id);
}

/*
 * Head sampling. The outermost span of a thread (or goroutine) decides
 * whether its trace is recorded (root_sampling); the spans nested in it
 * follow. A span left out is not recorded and not in the duration
 * histogram (close_unsampled), so that the kernel can skip its return
 * where the span's entry is a session uprobe (skip_unsampled): the call
 * then pays its entry only. Its hits and its count as unsampled are the
 * same either way.
 */

/* ROOT_DECIDED, in the low 32 bits of span_entry's at but above the 8 of
 * a frame's flags (open_frame keeps only those), says that root_sampling
 * decided: RECORD_UNSAMPLED and RECORD_THREAD_CONTEXT come with it.
 * Internal to the engine. */
#define ROOT_DECIDED 0x100

/* TCTX_ASK, beside ROOT_DECIDED in span_entry's at, says that the thread
 * context is to be read should the span be its thread's outermost: the
 * site reads one and its process is not known to publish none. Set before
 * the first call after the task is found, so that the task is not kept
 * across calls. Internal to the engine. */
#define TCTX_ASK 0x200

/* thread_random returns the next draw of the thread's head sampling: a
 * xorshift32 sequence (period 2^32 - 1) in its task state, seeded from
 * bpf_get_prandom_u32 at its first draw. Inline, it costs a few
 * instructions where the helper costs a call. */
static __always_inline __u32 thread_random(struct task_state *ts)
{
	__u32 x = ts->rng;

	if (!x)
		x = bpf_get_prandom_u32() | 1;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	ts->rng = x;
	return x;
}

/* unsampled_ret_holds says whether the return address of the call
 * ts->unsampled_pos marks is still in its slot, and forgets the mark when
 * it is not. */
__subprog int unsampled_ret_holds(struct task_state *ts)
{
	__u64 ret = 0;

	if (!bpf_probe_read_user(&ret, sizeof(ret), (const void *)ts->unsampled_pos) && ret == ts->unsampled_ret)
		return 1;
	ts->unsampled_pos = 0;
	return 0;
}

/*
 * in_unsampled_call says whether a hit of span at ts->pos and address ip,
 * with no frame open on the thread, is inside the call that
 * ts->unsampled_pos marks (see struct task_state): deeper in the stack, or
 * at the same position in another span (a tail call: as drop_stale has
 * it, the same span there is a new call), and the call's return address
 * still in its slot, or, for a leaf function's call, the hit in the
 * function's code (nothing else runs inside such a call: the call
 * returned if the hit is elsewhere). A hit above the mark, or one that
 * finds another return address there (the call returned and its caller
 * made another that went deeper), forgets the mark. The usual hit, the
 * next call of the span left out, reads nothing.
 */
static __always_inline int in_unsampled_call(struct task_state *ts, __u32 span, __u64 ip)
{
	__u64 at = ts->unsampled_pos;

	if (ts->pos > at || (ts->pos == at && span == ts->unsampled_span)) {
		ts->unsampled_pos = 0;
		return 0;
	}
	if (ts->unsampled_leaf_bytes) {
		if (ip - ts->unsampled_ret < ts->unsampled_leaf_bytes)
			return 1;
		ts->unsampled_pos = 0;
		return 0;
	}
	return unsampled_ret_holds(ts);
}

/*
 * root_sampling_slow decides head sampling for the outermost span of ts
 * opening at site s (ask: read the thread context): it returns ROOT_DECIDED,
 * with RECORD_UNSAMPLED when the trace is left out (nothing is recorded
 * without a traces pipeline; the hit is inside a call left out; the
 * thread's context says its trace is not sampled; a random draw against
 * sample_threshold), and RECORD_THREAD_CONTEXT as thread_ctx_read says.
 */
__subprog __u32 root_sampling_slow(const struct site *s, struct task_state *ts, __u32 ask, __u64 ip)
{
	__u32 flags = ROOT_DECIDED;

	if (!emit_records)
		return flags | RECORD_UNSAMPLED;
	if (ts->unsampled_pos && in_unsampled_call(ts, s->entry_span, ip))
		return flags | RECORD_UNSAMPLED;
	/* The thread's outermost span joins the trace the thread published. */
	if (ask)
		flags |= thread_ctx_read(s, ts);
	if (!(flags & RECORD_THREAD_CONTEXT) && s->sample_threshold <= 0xffffffffULL &&
	    thread_random(ts) >= s->sample_threshold)
		flags |= RECORD_UNSAMPLED;
	return flags;
}

/* root_sampling is root_sampling_slow with its usual answer inline: a
 * span recorded whole (sample_ratio 1), no call left out on the thread,
 * and no thread context to read (none configured, or the process is known
 * to publish none) take no call. */
static __always_inline __u32 root_sampling(const struct site *s, struct task_state *ts, __u64 at, struct pt_regs *regs)
{
	if (emit_records && !ts->unsampled_pos && s->sample_threshold > 0xffffffffULL && !(at & TCTX_ASK))
		return ROOT_DECIDED;
	return root_sampling_slow(s, ts, at & TCTX_ASK, reg_at(regs, REG_SLOT_IP));
}

/* left_out says whether the span about to open in ts (the root's decision
 * in at) is left out by head sampling while a traces pipeline records. */
static __always_inline int left_out(struct task_state *ts, __u64 at)
{
	if (!emit_records)
		return 0;
	if (ts->depth)
		return frame_at(ts, ts->depth - 1)->flags & RECORD_UNSAMPLED;
	return at & RECORD_UNSAMPLED;
}

#if defined(__TARGET_ARCH_x86)
/* call_rel32 is a call rel32 instruction (x86-64): e8 and a displacement
 * from the next instruction. */
struct call_rel32 {
	__u8 op;
	__s32 rel;
} __attribute__((packed));

/*
 * called_directly says whether the call of the function at ip whose return
 * address is ret came from a call rel32 at ret - 5 that calls ip (or the
 * endbr64 right before it: an entry probe goes after it, see
 * insn.CheapEntry), or calls a PLT stub (a jmp through the GOT, after an endbr64 with IBT, and a bnd
 * prefix with MPX: a stub always jumps to one function). Only then does
 * every call made there enter this function: a call through a function
 * pointer may enter another one next time at the same stack position,
 * with the same return address, which the mark of a call left out would
 * take to be inside it (in_unsampled_call). The answer for the last
 * return address that passed is kept in ts->direct_ret: a loop calling
 * the function from one place reads the code once (its callers look at
 * ts->direct_ret before they call).
 */
__subprog int called_directly(struct task_state *ts, __u64 ret, __u64 ip)
{
	struct call_rel32 c;

	if (bpf_probe_read_user(&c, sizeof(c), (const void *)(ret - sizeof(c))) || c.op != 0xe8)
		return 0;
	__u64 target = ret + c.rel;
	if (target != ip) {
		__u8 stub[8];
		if (bpf_probe_read_user(stub, sizeof(stub), (const void *)target))
			return 0;
		__u32 at = 0;
		if (stub[0] == 0xf3 && stub[1] == 0x0f && stub[2] == 0x1e && stub[3] == 0xfa) {
			at = 4; /* endbr64 */
			if (target + 4 == ip)
				goto direct; /* the entry probe is after the function's endbr64 */
		}
		if (stub[at & 7] == 0xf2)
			at++; /* bnd */
		if (stub[at & 7] != 0xff || stub[(at + 1) & 7] != 0x25 || at > 5)
			return 0;
	}
direct:
	ts->direct_ret = ret;
	return 1;
}
#endif

#if defined(__TARGET_ARCH_x86)
/* mark_leaf marks in ts the call of leaf function s (SITE_LEAF) entered
 * at ip that head sampling leaves out (see struct task_state). */
static __always_inline void mark_leaf(struct task_state *ts, const struct site *s, __u64 ip)
{
	ts->unsampled_pos = ts->pos;
	ts->unsampled_ret = ip;
	ts->unsampled_leaf_bytes = s->leaf_bytes;
	ts->unsampled_span = s->entry_span;
}
#endif

/*
 * skip_unsampled handles a call at session entry s that head sampling
 * leaves out, without a frame: it counts it as unsampled and the hit its
 * return would have had, and returns 1 (the kernel skips the return). The
 * outermost span of a thread marks the call in ts first, so that the
 * spans nested in it follow (in_unsampled_call): from the return address
 * the call finds at the stack pointer, which x86-64 has and arm64 keeps in
 * a register until the callee stores it anywhere in its frame, or, for a
 * leaf function, from its code's addresses. Where the mark cannot be had
 * (arm64, the stack unreadable) it returns 0 and the span opens, left
 * out, as without sessions.
 */
__subprog int skip_unsampled(const struct site *s, struct task_state *ts, __u32 pending, struct pt_regs *regs)
{
	if (!ts->depth && !ts->unsampled_pos) {
#if defined(__TARGET_ARCH_x86)
		__u64 ret = 0;
		if (s->flags & SITE_LEAF && s->leaf_bytes) {
			mark_leaf(ts, s, reg_at(regs, REG_X86_IP));
			goto marked;
		}
		if (bpf_probe_read_user(&ret, sizeof(ret), (const void *)ts->pos) ||
		    (ret != ts->direct_ret && !called_directly(ts, ret, reg_at(regs, REG_X86_IP))))
			return 0;
		ts->unsampled_pos = ts->pos;
		ts->unsampled_ret = ret;
		ts->unsampled_leaf_bytes = 0;
		ts->unsampled_span = s->entry_span;
	marked:;
#else
		(void)regs;
		return 0;
#endif
	}
	not_recorded(s->entry_span, pending, PENDING_SPAN_UNSAMPLED);
	return_hit(s, pending);
	return 1;
}

/* close_unsampled closes frame k of ts, a span of site s's exit span that
 * head sampling left out: not recorded, not in the duration histogram
 * (as a call skip_unsampled handled), counted as unsampled where its
 * process is chosen. */
__subprog void close_unsampled(const struct site *s, struct task_state *ts, __u32 k)
{
	__u32 pending = ts->frames[frame_index(k)].flags & RECORD_PENDING;

	truncate(ts, k);
	if (pending) {
		enum choice c = chosen(s, bpf_get_current_pid_tgid() >> 32);
		if (c == CHOICE_NO)
			return;
		pending = c == CHOICE_PENDING;
	}
	not_recorded(s->exit_span, pending, PENDING_SPAN_UNSAMPLED);
}

/*
 * span_entry_task opens a span of site s for whoever runs the probe (task:
 * the current task, or 0 to find it here), with extra_flags
 * (RECORD_PENDING, RECORD_FILTERED) on its frame. It returns 1
 * when the kernel is to skip the call's return (a SITE_SESSION entry whose
 * conditions did not hold, or that head sampling leaves out), 0 otherwise.
 */
static __always_inline int span_entry_task(const struct site *s, __u32 site_id, __u32 extra_flags,
					   struct pt_regs *regs, struct task_struct *task)
{
	__u64 at = (__u64)site_id << 32 | extra_flags;
	struct task_state *ts;

	asm volatile("" : "+r"(at)); /* one value to keep across calls, not two */
	if (!task)
		task = bpf_get_current_task_btf();

	if (!s || !regs)
		return 0;

	if ((s->flags & SITE_SESSION) && (extra_flags & RECORD_FILTERED)) {
		/* The call's conditions did not hold: no frame, no return. What
		 * its return would have counted is counted now (an entry past
		 * ABI_MAX_DEPTH counts as filtered here, not as overflow). */
		count(s->entry_span, filtered);
		return_hit(s, extra_flags & RECORD_PENDING);
		return 1;
	}
	if (s->flags & SITE_KERNEL_RETURN) {
		/* The kernel sets up this call's return probe after the entry
		 * programs ran: with ABI_KERNEL_RETURN_DEPTH pending, it will not. */
		struct uprobe_task *ut = task->utask;
		if (ut && ut->depth >= ABI_KERNEL_RETURN_DEPTH) {
			count(s->entry_span, return_limit);
			return 0;
		}
	}
	ts = state(regs, s, 1, task);
	if (!ts) {
		count(s->entry_span, no_state);
		return 0;
	}
	if ((s->flags & SITE_THREAD_CONTEXT) && !(s->flags & SITE_GO) && ts->tctx_none != tctx_none_key(task))
		at |= TCTX_ASK;
	if (ts->depth && !(ts->flags & STATE_NO_POS))
		drop_stale(ts, s->entry_span, ts->pos, regs);
	if (ts->overflow || ts->depth >= ABI_MAX_DEPTH) {
		ts->overflow++;
		count(s->entry_span, overflow);
		return 0;
	}
	if (!ts->depth && !(at & ROOT_DECIDED))
		at |= root_sampling(s, ts, at, regs);
	if ((s->flags & SITE_SESSION) && left_out(ts, at) && skip_unsampled(s, ts, at & RECORD_PENDING, regs))
		return 1;
	open_frame(s, regs, ts, at);
	return 0;
}

/* span_entry_in is span_entry_task for the current task, found here. */
static __always_inline int span_entry_in(const struct site *s, __u32 site_id, __u32 extra_flags,
					 struct pt_regs *regs)
{
	return span_entry_task(s, site_id, extra_flags, regs, 0);
}

/* span_entry is span_entry_in as a global function, so that the verifier
 * checks it once, not once per path of site_hit. */
__noinline int span_entry(const struct site *s, __u32 site_id, __u32 extra_flags, struct pt_regs *regs)
{
	return span_entry_in(s, site_id, extra_flags, regs);
}

/* below_ctx is the state of below_one: the nearest frame under from that
 * is not filtered, or -1. */
struct below_ctx {
	struct task_state *ts;
	__u32 from;
	int found;
};

static long below_one(__u32 i, struct below_ctx *c)
{
	__u32 k = c->from - 1 - i;

	if (k >= ABI_MAX_DEPTH)
		return 1;
	if (!(frame_at(c->ts, k)->flags & RECORD_FILTERED)) {
		c->found = k;
		return 1;
	}
	return 0;
}

/* recorded_below_from is recorded_below past frame from - 1, filtered. */
__subprog int recorded_below_from(struct task_state *ts, __u32 from)
{
	struct below_ctx c = {.ts = ts, .from = from, .found = -1};

	bpf_loop(from, below_one, &c, 0);
	return c.found;
}

/* recorded_below returns the nearest frame under k whose span can be
 * recorded (not filtered): the parent of a span closing at k; -1 for none. */
static __always_inline int recorded_below(struct task_state *ts, __u32 k)
{
	if (k == 0 || k > ABI_MAX_DEPTH)
		return -1;
	if (!(frame_at(ts, k - 1)->flags & RECORD_FILTERED))
		return k - 1; /* the usual case */
	return recorded_below_from(ts, k - 1);
}

/* up_ctx is the state of up_one: the lowest frame up to last that is not
 * filtered. */
struct up_ctx {
	struct task_state *ts;
	int found;
};

static long up_one(__u32 i, struct up_ctx *c)
{
	if (i >= ABI_MAX_DEPTH)
		return 1;
	if (!(frame_at(c->ts, i)->flags & RECORD_FILTERED)) {
		c->found = i;
		return 1;
	}
	return 0;
}

/* recorded_root_up is recorded_root when frame 0 is filtered. */
__subprog int recorded_root_up(struct task_state *ts, int p)
{
	struct up_ctx c = {.ts = ts, .found = p};

	bpf_loop((__u32)p + 1, up_one, &c, 0);
	return c.found;
}

/* recorded_root returns the outermost frame, up to p, that can be recorded:
 * the root of the trace of a span whose parent is p. */
static __always_inline int recorded_root(struct task_state *ts, int p)
{
	if (!(ts->frames[0].flags & RECORD_FILTERED))
		return 0; /* the usual case */
	return recorded_root_up(ts, p);
}

/* place_below is place where a frame below k is filtered: the parent
 * and the root are the nearest frames that are not. */
__subprog void place_below(struct task_state *ts, __u32 k)
{
	int p = recorded_below(ts, k);

	if (p >= 0) {
		struct frame *parent = frame_at(ts, p);
		ts->closing.parent_start_ns = parent->start_ns;
		int r = recorded_root(ts, p);
		ts->closing.root_start_ns = frame_at(ts, r)->start_ns;
		/* The parent is recorded too, so that this span has one. */
		parent->flags |= RECORD_HAS_CHILD;
	}
}

/*
 * place finds the parent and the root of the span closing in frame k of ts
 * (ts->closing.parent_start_ns, root_start_ns) and marks the parent
 * RECORD_HAS_CHILD. The usual case is inline; the walks past filtered
 * frames are a call made before send_span holds anything but ts, so that
 * no value is spilled around it.
 */
static __always_inline void place(struct task_state *ts, __u32 k)
{
	k = frame_index(k);
	ts->closing.parent_start_ns = 0;
	ts->closing.root_start_ns = ts->frames[k].start_ns;
	if (k == 0)
		return;
	struct frame *parent = frame_at(ts, k - 1);
	if ((parent->flags | ts->frames[0].flags) & RECORD_FILTERED) {
		place_below(ts, k);
		return;
	}
	ts->closing.parent_start_ns = parent->start_ns;
	ts->closing.root_start_ns = ts->frames[0].start_ns;
	/* The parent is recorded too, so that this span has one. */
	parent->flags |= RECORD_HAS_CHILD;
}

/*
 * fill_record writes into rec what the record of the span closing in ts
 * says about its place (parent and root, from place; carrier), its process
 * and thread (the current task); send_span writes the rest. Inlined in
 * span_exit: a call costs ~8 ns.
 */
static __always_inline void fill_record(const struct site *s, struct pt_regs *regs, struct task_state *ts,
					struct span_record *rec, int task_facts)
{
	__u32 k = frame_index(ts->closing.frame);
	struct frame *f = &ts->frames[k];

	rec->start_ns = f->start_ns;
	rec->parent_start_ns = ts->closing.parent_start_ns;
	rec->root_start_ns = ts->closing.root_start_ns;
	rec->context_start_ns = 0;
	if (f->carrier > 0 && f->carrier <= k)
		rec->context_start_ns = frame_at(ts, f->carrier - 1)->start_ns;
	if (task_facts) {
		/* What task_facts read of the task before. */
		__u32 tid = ts->closing.tid;
		rec->owner = tid; /* not SITE_GO: plain spans are not Go's */
		rec->process_start_ns = ts->closing.process_start_ns;
		rec->exec_id = ts->closing.exec_id;
		rec->pid = ts->closing.pid;
		rec->tid = tid;
	} else {
		/* The task is looked up here rather than kept across
		 * send_span's calls: one register fewer to spill keeps
		 * span_exit's frame within 48 bytes with the thread context's
		 * copy. The task's ids are what bpf_get_current_pid_tgid()
		 * would say (the initial pid namespace's), read without its
		 * call. */
		struct task_struct *task = bpf_get_current_task_btf();
		__u32 tid = task->pid;
		rec->owner = s->flags & SITE_GO ? reg_at(regs, REG_SLOT_GO_G) : tid;
		rec->process_start_ns = task->group_leader->start_time;
		rec->exec_id = task->self_exec_id;
		rec->pid = task->tgid;
		rec->tid = tid;
	}
	rec->span = s->exit_span;
	rec->entry_site = f->entry_site;
	rec->entry_failed = f->entry_failed;
	rec->kind = RECORD_KIND_SPAN;
}

/*
 * send_span sends the record of the span closing in ts (ts->closing), with
 * the values of its exit fetched into the value stack after its entry's.
 */
static __always_inline void send_span(const struct site *s, struct pt_regs *regs, struct task_state *ts,
				      int task_facts)
{
	place(ts, ts->closing.frame);
	__u32 k = frame_index(ts->closing.frame);
	struct frame *f = &ts->frames[k];
	struct values *w = window(ts, f->value_off);

	if (!w)
		return;
	__u32 entry_len = f->entry_len;
	if (entry_len > ABI_DATA_CAP)
		entry_len = ABI_DATA_CAP;
	__u32 r = entry_len; /* what fetch_all returns: nothing failed, nothing truncated */
	if (s->exit_fetch_count) {
		r = fetch_end(regs, s->exit, s->exit_fetch_count, s->flags & SITE_EXIT_REGS, w, entry_len);
		/* What the fetches did not change is read again from the state
		 * rather than kept across them: fewer registers to spill keep
		 * close_span's frame within 48 bytes. */
		asm volatile("" ::: "memory");
		k = frame_index(ts->closing.frame);
		f = &ts->frames[k];
		entry_len = at_most(f->entry_len, ABI_DATA_CAP);
	}
	__u32 end = r & FETCHED_CURSOR;
	if (end > ABI_DATA_CAP || end < entry_len)
		end = entry_len;
	end = at_most(end, ABI_DATA_CAP); /* the same bound, where the verifier sees it */
	ts->closing.values_end = end;
	if (f->flags & RECORD_THREAD_CONTEXT)
		end = thread_ctx_copy(ts, w, end);
	end = at_most(end, ABI_DATA_CAP + sizeof(struct thread_context));

	struct span_record *rec = (struct span_record *)(w->data + end);
	rec->end_ns = ts->closing.now;
	rec->exit_site = ts->closing.site;
	rec->entry_len = entry_len;
	rec->exit_len = ts->closing.values_end - entry_len;
	rec->depth = k;
	rec->flags = (f->flags & ~RECORD_THREAD_CONTEXT) | (end > ts->closing.values_end ? RECORD_THREAD_CONTEXT : 0) |
		     (r & FETCHED_TRUNCATED ? RECORD_TRUNCATED : 0);
	rec->exit_failed = r >> FETCHED_FAILED_SHIFT;
	fill_record(s, regs, ts, rec, task_facts);
	if (bpf_ringbuf_output(&records, w, end + sizeof(struct span_record), span_wake_flags(ts))) {
		if (f->flags & RECORD_PENDING) {
			/* Counted with the process's choice, as its duration. */
			pending_add(bpf_get_current_pid_tgid() >> 32, PENDING_SPAN_LOST, s->exit_span, 0, 1);
			return;
		}
		/* Keys are copied to the stack: s is a global function's
		 * argument (memory of a known size), which Linux 6.1 does not
		 * take as a map key (only the stack, map keys and values). One
		 * variable for both keys keeps close_span's frame at 32 bytes. */
		__u32 key = s->probe_id;
		struct probe_stats *ps = bpf_map_lookup_elem(&probes, &key);
		if (ps)
			add(&ps->lost, 1);
		key = s->exit_span;
		struct span_stats *st = bpf_map_lookup_elem(&spans, &key);
		if (st)
			add(&st->lost, 1);
	}
}

/* count_duration adds the duration of a span of definition span to its
 * histogram. */
static __always_inline void count_duration(__u32 span, __u64 duration)
{
	/* bucket i holds (2^i, 2^(i+1)]; durations of 0 and 1 ns go to bucket 0 */
	__u32 b = duration > 1 ? log2_bucket(duration - 1) : 0;
	struct span_stats *st = span_stats_of(span);

	if (st) {
		add(&st->sum_ns, duration); /* the count is the sum of the buckets */
		add(&st->buckets[b & (ABI_HIST_BUCKETS - 1)], 1);
	}
}

/*
 * count_pending counts the duration of the span closing in frame k of ts,
 * which opened while its process was pending: the choice made since, if
 * any, is what counts. Chosen, it counts as any other span (and loses
 * RECORD_PENDING); still pending, in the process's pending counters. It
 * returns 0 when the span is done with (its process is not chosen, or the
 * pending counters are full: counted nowhere, not recorded).
 */
__subprog int count_pending(const struct site *s, struct task_state *ts, __u32 k, __u64 duration)
{
	struct frame *f = &ts->frames[frame_index(k)];
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	enum choice c = chosen(s, pid);

	if (c == CHOICE_YES) {
		f->flags &= ~RECORD_PENDING;
		count_duration(s->exit_span, duration);
		return 1;
	}
	__u32 b = duration > 1 ? log2_bucket(duration - 1) : 0;
	if (c == CHOICE_PENDING && pending_add(pid, PENDING_SPAN_BUCKET, s->exit_span, b & (ABI_HIST_BUCKETS - 1), 1) == 0) {
		pending_add(pid, PENDING_SPAN_SUM, s->exit_span, 0, duration);
		return 1;
	}
	if (c == CHOICE_PENDING)
		count(s->exit_span, pending_full);
	truncate(ts, k);
	return 0;
}

/*
 * close_span closes the span closing in ts (ts->closing): its duration goes
 * to the histogram, and unless unsampled or too short it is sent.
 */
static __always_inline void close_span(const struct site *s, struct pt_regs *regs, struct task_state *ts,
				       int task_facts)
{
	__u32 k = frame_index(ts->closing.frame);
	struct frame *f = &ts->frames[k];
	__u64 duration = ts->closing.now - f->start_ns;

	if (!(f->flags & RECORD_PENDING))
		count_duration(s->exit_span, duration);
	else if (!count_pending(s, ts, k, duration))
		return;
	truncate(ts, k);
	if (f->flags & RECORD_UNSAMPLED) {
		not_recorded(s->exit_span, f->flags & RECORD_PENDING, PENDING_SPAN_UNSAMPLED);
		return;
	}
	if (duration < s->min_duration_ns && !(f->flags & RECORD_HAS_CHILD)) {
		not_recorded(s->exit_span, f->flags & RECORD_PENDING, PENDING_SPAN_SHORT);
		return;
	}
	send_span(s, regs, ts, task_facts);
}

/*
 * span_exit_task closes the innermost open span of site s's exit span and
 * sends its record, counting into ps what is lost; it returns 0. task is
 * the current task, or 0 to find it here; with task_facts (a site that is
 * not Go's) what the record says of the task is read from it into
 * ts->closing once the state is found, rather than from a task found
 * again to fill the record: the task is not kept across the calls.
 */
static __always_inline int span_exit_task(const struct site *s, __u32 site_id, struct probe_stats *ps,
					  struct pt_regs *regs, struct task_struct *task, int task_facts)
{
	__u64 now = bpf_ktime_get_ns();
	struct task_state *ts;
	__u32 depth;
	int found;

	if (!s || !ps || !regs)
		return 0;
	if (!span_stats_of(s->exit_span))
		return 0;
	if (!task)
		task = bpf_get_current_task_btf();
	ts = state(regs, s, 0, task);
	if (!ts) {
		count(s->exit_span, unmatched);
		return 0;
	}
	if (ts->overflow) {
		/* The innermost open entry was not recorded: this exit is its. */
		ts->overflow--;
		return 0;
	}
	if (task_facts) {
		ts->closing.process_start_ns = task->group_leader->start_time;
		ts->closing.exec_id = task->self_exec_id;
		ts->closing.pid = task->tgid;
		ts->closing.tid = task->pid;
	}
	ts->closing.now = now;
	ts->closing.site = site_id;
	depth = ts->depth;
	if (depth > ABI_MAX_DEPTH)
		depth = ABI_MAX_DEPTH;
	found = find(ts, depth, s->exit_span);
	if (found < 0) {
		count(s->exit_span, unmatched);
		if (s->flags & SITE_GO)
			go_release(regs, ts);
		return 0;
	}
	__u32 k = frame_index(found);
	/* Open spans above the match never saw their exit: drop them. */
	abandon(ts, k + 1, depth);

	struct frame *f = &ts->frames[k];
	if (emit_records && (f->flags & (RECORD_UNSAMPLED | RECORD_FILTERED)) == RECORD_UNSAMPLED) {
		/* Left out by head sampling: whatever its exit conditions say, as
		 * where its return was skipped. */
		close_unsampled(s, ts, k);
	} else if ((f->flags & RECORD_FILTERED) ||
		   (s->filter_count && !(f->flags & RECORD_HAS_CHILD) && !filters_hold(regs, s, 1))) {
		/* Its conditions did not hold: not recorded, not in the histogram.
		 * A span whose nested spans were recorded is kept whatever its
		 * exit conditions say, so that they have their parent (as with
		 * min_duration_ns). */
		count(s->exit_span, filtered);
		truncate(ts, k);
	} else {
		ts->closing.frame = k;
		close_span(s, regs, ts, task_facts);
	}
	if (s->flags & SITE_GO)
		go_release(regs, ts);
	return 0;
}

/* span_exit_in is span_exit_task for the current task, found where it is
 * used. */
static __always_inline int span_exit_in(const struct site *s, __u32 site_id, struct probe_stats *ps, struct pt_regs *regs)
{
	return span_exit_task(s, site_id, ps, regs, 0, 0);
}

/* span_exit is span_exit_in as a global function, like span_entry. */
__noinline int span_exit(const struct site *s, __u32 site_id, struct probe_stats *ps, struct pt_regs *regs)
{
	return span_exit_in(s, site_id, ps, regs);
}

static __always_inline int count_hit_impl(struct pt_regs *ctx, int per_process)
{
	__u32 probe_id = bpf_get_attach_cookie(ctx);
	struct probe_stats *ps = bpf_map_lookup_elem(&probes, &probe_id);

	if (ps)
		add(&ps->hits, 1);
	if (per_process)
		proc_hit(probe_id);
	return 0;
}

/* What site_hit_at's caller already found out (checked). */
enum checked {
	CHECKED_FILTERS = 1, /* the site's conditions at entry hold */
	CHECKED_SAMPLED = 2, /* the call opens its thread's outermost span, sampled (session_samples) */
	/* the call opens its thread's outermost span, left out, but cannot
	 * skip its return (session_samples): it opens a frame */
	CHECKED_UNSAMPLED = 4,
};

/* site_hist adds the value of site s's counter to its histogram: what
 * site_hit_at does inline, in a function of its own for the programs
 * that inline span_exit. */
__subprog void site_hist(struct pt_regs *ctx, const struct site *s)
{
	__u64 v = 0;

	if (hist_value(ctx, &s->hist_value, &v) == 0)
		hist_add(s->value_hist - 1, v, s->hist_size, s->hist_signed);
	else
		hist_unread(s->value_hist - 1);
}

/* site_hit_at handles a hit of site site_id (checked: enum checked). For the entry of a session site (SITE_SESSION)
 * it returns 1 when the kernel is to skip the call's return (see
 * span_entry; a process not chosen has nothing to close either), 0
 * otherwise. With inline_entry (the uprobe_multi program: Linux 6.6)
 * span_entry, and span_exit where the site only closes a span (its last
 * step then), are inlined rather than called: a call costs ~8 ns where
 * returns are mitigated (SRSO "safe RET"); older verifiers check the
 * global functions once instead. A counter's value histogram is then a
 * call (site_hist), which keeps the frame within 48 bytes. */
static __always_inline int site_hit_at(struct pt_regs *ctx, __u32 site_id, int checked, int inline_entry)
{
	const struct site *s = bpf_map_lookup_elem(&sites, &site_id);
	struct probe_stats *ps;

	if (!s)
		return 0;
	/* The process's choice only where the site has one: the helper call
	 * that gives the pid costs as much as a map lookup and a counter. */
	enum choice c = s->flags & SITE_CHOSEN ? chosen(s, bpf_get_current_pid_tgid() >> 32) : CHOICE_YES;
	if (c == CHOICE_NO)
		return !!(s->flags & SITE_SESSION);
	ps = bpf_map_lookup_elem(&probes, &s->probe_id);
	if (!ps)
		return 0;
	/* Conditions before anything is copied or recorded (unless the
	 * caller found they hold). */
	/* The flags of a span opening here, in one value kept across the
	 * calls below (the frame stays within 48 bytes). */
	__u32 entry_flags = checked & CHECKED_SAMPLED ? ROOT_DECIDED : 0;
	if (checked & CHECKED_UNSAMPLED)
		entry_flags = ROOT_DECIDED | RECORD_UNSAMPLED;
	if (!(checked & CHECKED_FILTERS) && s->filter_count && !filters_hold(ctx, s, 0)) {
		if (s->flags & SITE_FILTERED_HITS)
			return 0; /* a filtered counter counts what passes */
		entry_flags |= RECORD_FILTERED;
	}
	if (c == CHOICE_PENDING) {
		pending_add(bpf_get_current_pid_tgid() >> 32, PENDING_HITS, s->probe_id, 0, 1);
		entry_flags |= RECORD_PENDING;
	} else {
		add(&ps->hits, 1);
		if (s->flags & SITE_PROC_HITS)
			proc_hit(s->probe_id);
	}
	if (s->value_hist && inline_entry) {
		site_hist(ctx, s); /* a call: inline, it takes the frame past 48 bytes with span_exit_in */
	} else if (s->value_hist) {
		__u64 v = 0;
		if (hist_value(ctx, &s->hist_value, &v) == 0)
			hist_add(s->value_hist - 1, v, s->hist_size, s->hist_signed);
		else
			hist_unread(s->value_hist - 1);
	}
	if (s->flags & SITE_EXIT) {
		if (inline_entry && !(s->flags & SITE_ENTRY))
			return span_exit_in(s, site_id, ps, ctx);
		span_exit(s, site_id, ps, ctx);
	}
	if (s->flags & SITE_ENTRY)
		return inline_entry ? span_entry_in(s, site_id, entry_flags, ctx) : span_entry(s, site_id, entry_flags, ctx);
	return 0;
}

static __always_inline int site_hit_impl(struct pt_regs *ctx)
{
	site_hit_at(ctx, bpf_get_attach_cookie(ctx), 0, 0);
	return 0;
}

/* bpf_rdonly_cast (Linux 6.2), which the verifier inlines: the programs
 * that use it are loaded only with uprobe_multi links (Linux 6.6). */
extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;

/* multi_run_ctx returns the run context of the uprobe_multi or session
 * program running (the current task's bpf_ctx), 0 where the kernel's
 * struct bpf_uprobe_multi_run_ctx has no uprobe (then the callers use
 * the helpers). Reading it costs one inlined call, where
 * bpf_get_attach_cookie is a helper call (~15 ns with SRSO "safe RET"). */
static __always_inline struct bpf_uprobe_multi_run_ctx *multi_run_ctx(void)
{
	if (!bpf_core_field_exists(struct bpf_uprobe_multi_run_ctx, uprobe) ||
	    !bpf_core_field_exists(struct bpf_uprobe, cookie))
		return 0;
	return bpf_rdonly_cast(bpf_get_current_task_btf()->bpf_ctx,
			       bpf_core_type_id_kernel(struct bpf_uprobe_multi_run_ctx));
}

/* site_hit_multi_impl is site_hit_impl for uprobe_multi links: the cookie
 * read from the run context. */
static __always_inline int site_hit_multi_impl(struct pt_regs *ctx)
{
	struct bpf_uprobe_multi_run_ctx *rc = multi_run_ctx();

	site_hit_at(ctx, rc ? rc->uprobe->cookie : bpf_get_attach_cookie(ctx), 0, 1);
	return 0;
}

/*
 * Each program comes twice: attached one location at a time through a perf
 * event ("uprobe"), or many locations at once through a uprobe_multi link
 * (Linux 6.6, "uprobe.multi"). The loader keeps the pair it uses, and
 * site_hit_session where the kernel has session uprobes.
 */

/* count_hit is attached to sites that only count: the cookie is the probe id. */
SEC("uprobe")
int count_hit(struct pt_regs *ctx)
{
	return count_hit_impl(ctx, 0);
}

SEC("uprobe.multi")
int count_hit_multi(struct pt_regs *ctx)
{
	return count_hit_impl(ctx, 0);
}

/* count_hit_proc also counts per process: for files seen inside containers. */
SEC("uprobe")
int count_hit_proc(struct pt_regs *ctx)
{
	return count_hit_impl(ctx, 1);
}

SEC("uprobe.multi")
int count_hit_proc_multi(struct pt_regs *ctx)
{
	return count_hit_impl(ctx, 1);
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
	return site_hit_multi_impl(ctx);
}

/*
 * The plain span. Most spans are a function's or a USDT pair's: an entry
 * site that only opens the span and an exit site that only closes it,
 * with no conditions, no process choice, no per-process hits, no value
 * histogram, attributes read from registers, in code that is not Go
 * (plain_site). Their sites run site_hit_plain_multi, where the kernel
 * has uprobe_multi links and the tracer chooses it (internal/tracer):
 * the task is found once per hit and kept, and nothing the plain site
 * does not use is looked at. The span's exactness is span_entry_task's
 * and span_exit_task's, which it inlines.
 */

/* PLAIN_EXCLUDED are the site flags that keep a site off the plain program. */
#define PLAIN_EXCLUDED (SITE_GO | SITE_CHOSEN | SITE_FILTERED_HITS | SITE_PROC_HITS | SITE_SESSION)

/* plain_site says whether site s is a plain span's (see above): the
 * tracer's choice (internal/tracer plainSite) says the same. */
static __always_inline int plain_site(const struct site *s)
{
	__u16 role = s->flags & (SITE_ENTRY | SITE_EXIT);

	if ((s->flags & PLAIN_EXCLUDED) || s->filter_count || s->value_hist)
		return 0;
	if (role == SITE_ENTRY)
		return !s->entry_fetch_count || (s->flags & SITE_ENTRY_REGS);
	if (role == SITE_EXIT)
		return !s->exit_fetch_count || (s->flags & SITE_EXIT_REGS);
	return 0;
}

/* plain_refused counts the hits site_hit_plain_multi refused because their
 * site is not plain (plain_site): none, as long as the tracer's plainSpec
 * and plain_site agree (Open refuses a plan where plainSite and plainSpec
 * do not). The general program is not its fallback: verified inside the
 * plain program, it would double the time the kernel takes to load it. */
__u64 plain_refused = 0;

/* site_hit_plain_multi is attached, through uprobe_multi links, to the
 * sites of plain spans: the cookie is the site id. */
SEC("uprobe.multi")
int site_hit_plain_multi(struct pt_regs *ctx)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 site_id;

	if (bpf_core_field_exists(struct bpf_uprobe_multi_run_ctx, uprobe) &&
	    bpf_core_field_exists(struct bpf_uprobe, cookie))
		site_id = ((struct bpf_uprobe_multi_run_ctx *)bpf_rdonly_cast(
				   task->bpf_ctx, bpf_core_type_id_kernel(struct bpf_uprobe_multi_run_ctx)))
				  ->uprobe->cookie;
	else
		site_id = bpf_get_attach_cookie(ctx);

	const struct site *s = bpf_map_lookup_elem(&sites, &site_id);
	if (!s)
		return 0;
	if (!plain_site(s)) {
		__sync_fetch_and_add(&plain_refused, 1);
		return 0;
	}
	struct probe_stats *ps = bpf_map_lookup_elem(&probes, &s->probe_id);
	if (!ps)
		return 0;
	add(&ps->hits, 1);
	/* Their results are not returned: one register less to keep (a
	 * uprobe_multi program's result means nothing). */
	if (s->flags & SITE_EXIT)
		span_exit_task(s, site_id, ps, ctx, task, 1);
	else
		span_entry_task(s, site_id, 0, ctx, task);
	return 0;
}

/* session_hit is site_hit_at in a function of its own: inlined in
 * site_hit_session, it takes the program's frame past 48 bytes. */
__subprog int session_hit(struct pt_regs *ctx, __u32 site_id, int checked)
{
	return site_hit_at(ctx, site_id, checked, 0);
}

/*
 * session_rejects evaluates the conditions of session entry s where they
 * are its only question (no process choice, no per-process hits, no value
 * histogram): for a call they reject it counts what site_hit_at and
 * span_entry would (the hits of the entry and of the skipped return, a
 * filtered span) without their calls, and returns 1. It returns 0 when
 * they hold (*checked set) or are not its to evaluate.
 */
static __always_inline int session_rejects(struct pt_regs *ctx, const struct site *s, int *checked)
{
	if ((s->flags & (SITE_CHOSEN | SITE_PROC_HITS | SITE_FILTERED_HITS)) || s->value_hist || !s->filter_count)
		return 0;
	/* One condition, the usual filter: filter_holds without filters_hold's
	 * loop and call. */
	int holds = s->filter_count == 1 && !s->filters[0].at_exit ? filter_holds(ctx, &s->filters[0])
								   : filters_hold(ctx, s, 0);
	if (holds) {
		*checked = CHECKED_FILTERS;
		return 0;
	}
	struct probe_stats *ps = bpf_map_lookup_elem(&probes, &s->probe_id);
	if (ps)
		add(&ps->hits, 1);
	count(s->entry_span, filtered);
	const struct site *rs = bpf_map_lookup_elem(&sites, &s->return_site);
	if (rs && (ps = bpf_map_lookup_elem(&probes, &rs->probe_id)))
		add(&ps->hits, 1);
	return 1;
}

/* samples_only says whether head sampling is the only question of session
 * entry s: no condition, process choice, per-process hits or value
 * histogram, and a sample_ratio below 1 while records go out. */
static __always_inline int samples_only(const struct site *s)
{
	return emit_records && s->sample_threshold <= 0xffffffffULL && !s->filter_count && !s->value_hist &&
	       !(s->flags & (SITE_CHOSEN | SITE_PROC_HITS | SITE_FILTERED_HITS));
}

/*
 * session_samples decides head sampling for a call at session entry s
 * (samples_only) that opens its thread's outermost span, as root_sampling
 * and skip_unsampled would, without site_hit_at's and span_entry's calls:
 * for a call left out it counts what they would (the hits of the entry
 * and of the skipped return, an unsampled span) and returns 1; a sampled
 * call returns CHECKED_SAMPLED, and a call left out that cannot be
 * marked (the stack unreadable, or not a direct call: called_directly)
 * CHECKED_UNSAMPLED: it opens a frame, left out, and its return runs.
 * It returns 0 where span_entry is to decide (spans open on the thread; a
 * thread context to read; arm64, where skip_unsampled cannot mark the
 * call).
 */
static __always_inline int session_samples(struct pt_regs *ctx, const struct site *s, struct task_struct *task)
{
#if defined(__TARGET_ARCH_x86)
	struct task_state *ts = bpf_task_storage_get(&task_states, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	__u64 ret = 0;

	if (!ts || ts->depth || ts->overflow)
		return 0;
	ts->pos = reg_at(ctx, REG_SLOT_SP);
	if (!ts->unsampled_pos || !in_unsampled_call(ts, s->entry_span, reg_at(ctx, REG_X86_IP))) {
		/* The thread context decides where the process may publish
		 * one (root_sampling). */
		if ((s->flags & SITE_THREAD_CONTEXT) && ts->tctx_none != tctx_none_key(task))
			return 0;
		if (thread_random(ts) < s->sample_threshold)
			return CHECKED_SAMPLED;
		if (s->flags & SITE_LEAF && s->leaf_bytes) {
			/* Nothing runs inside the call but its own code: no read. */
			mark_leaf(ts, s, reg_at(ctx, REG_X86_IP));
		} else {
			if (bpf_probe_read_user(&ret, sizeof(ret), (const void *)ts->pos) ||
			    (ret != ts->direct_ret && !called_directly(ts, ret, reg_at(ctx, REG_X86_IP))))
				return CHECKED_UNSAMPLED; /* left out, with its return */
			ts->unsampled_pos = ts->pos;
			ts->unsampled_ret = ret;
			ts->unsampled_leaf_bytes = 0;
			ts->unsampled_span = s->entry_span;
		}
	}
	struct probe_stats *ps = bpf_map_lookup_elem(&probes, &s->probe_id);
	if (ps)
		add(&ps->hits, 1);
	count(s->entry_span, unsampled);
	const struct site *rs = bpf_map_lookup_elem(&sites, &s->return_site);
	if (rs && (ps = bpf_map_lookup_elem(&probes, &rs->probe_id)))
		add(&ps->hits, 1);
	return 1;
#else
	return 0;
#endif
}

/* The kfuncs of session programs (Linux 6.12 for uprobes): the loader
 * loads site_hit_session only where the kernel has them. */
extern _Bool bpf_session_is_return(void) __ksym;

/*
 * site_hit_session is attached, as a session uprobe (Linux 6.12), to the
 * entries of function spans that may reject a call at entry (SITE_SESSION):
 * it runs at the entry, where returning 1 makes the kernel skip the
 * call's return, and at the return, where it handles the entry site's
 * return_site. The cookie is the entry site's id.
 */
SEC("uprobe.session")
int site_hit_session(struct pt_regs *ctx)
{
	__u32 site_id;
	int at_return, checked = 0;
	struct task_struct *task = bpf_get_current_task_btf();

	if (bpf_core_field_exists(struct bpf_uprobe_multi_run_ctx, uprobe) &&
	    bpf_core_field_exists(struct bpf_uprobe, cookie) &&
	    bpf_core_field_exists(struct bpf_session_run_ctx, is_return)) {
		/* What bpf_get_attach_cookie and bpf_session_is_return read,
		 * without their two calls: one call for the current task, and
		 * loads (a rejected call's every nanosecond counts). */
		struct bpf_uprobe_multi_run_ctx *rc =
			bpf_rdonly_cast(task->bpf_ctx, bpf_core_type_id_kernel(struct bpf_uprobe_multi_run_ctx));
		site_id = rc->uprobe->cookie;
		at_return = rc->session_ctx.is_return;
	} else {
		site_id = bpf_get_attach_cookie(ctx);
		at_return = bpf_session_is_return();
	}
	const struct site *s = bpf_map_lookup_elem(&sites, &site_id);

	if (!s)
		return 0;
	if (at_return)
		site_id = s->return_site;
	else if (session_rejects(ctx, s, &checked))
		return 1; /* the usual rejected call: no more calls than the conditions' */
	else if (samples_only(s) && (checked = session_samples(ctx, s, task)) == 1)
		return 1; /* the usual call left out: decided inline, no call */
	/* A session program returns 0 or 1. */
	return session_hit(ctx, site_id, checked) && !at_return ? 1 : 0;
}

/*
 * Process lifetime. A thread's task storage survives execve, and goroutine
 * states are keyed by a pid the next process may get: at exec and at the
 * exit of a thread, what is open is counted as abandoned and forgotten.
 */

/* forget_one deletes the goroutine state of *pid at key, if it is one. */
static long forget_one(void *map, struct go_key *key, struct task_state *ts, __u32 *pid)
{
	if (key->pid != *pid)
		return 0;
	reset(ts);
	if (bpf_map_delete_elem(&go_states, key) == 0)
		go_live_add(-1);
	return 0;
}

/* forget_goroutines deletes every goroutine state of process pid. */
static __always_inline void forget_goroutines(__u32 pid)
{
	__u32 zero = 0;
	__s64 *live = bpf_map_lookup_elem(&go_live, &zero);

	if (live && *live > 0)
		bpf_for_each_map_elem(&go_states, forget_one, &pid, 0);
}

/* forget_thread abandons the open spans of a thread and frees its state. */
__subprog void forget_thread(struct task_struct *task)
{
	struct task_state *ts = bpf_task_storage_get(&task_states, task, 0, 0);

	if (!ts)
		return;
	reset(ts);
	bpf_task_storage_delete(&task_states, task);
}

/* process_buf is the layout of an exec record: the executable's name, the
 * command line, then the trailer. Other process records are the trailer
 * alone. */
struct process_buf {
	char filename[ABI_EXEC_FILENAME_MAX];
	char args[ABI_EXEC_ARGS_MAX];
	struct process_record rec;
};

/* cgroup1_id returns the kernfs id of the cgroup of task in the v1
 * hierarchy of controller cgroup1_subsys, 0 for none. The controller's
 * index into css_set.subsys is only known at run time: the reads go
 * through bpf_probe_read_kernel, at offsets relocated against the running
 * kernel (CO-RE). */
static __always_inline __u64 cgroup1_id(struct task_struct *task)
{
	__u32 ssid = cgroup1_subsys;
	struct cgroup_subsys_state *css = 0;

	if (ssid >= 64)
		return 0;
	__u64 cset = (__u64)BPF_CORE_READ(task, cgroups);
	if (!cset || bpf_probe_read_kernel(&css, sizeof(css),
					   (const void *)(cset + bpf_core_field_offset(struct css_set, subsys) +
							  ssid * sizeof(css))))
		return 0;
	return BPF_CORE_READ(css, cgroup, kn, id);
}

/* process_facts_of fills the facts of a process record with task's: its
 * cgroups and its executable. A function of its own: the reads' temporaries
 * stay off the programs' frames. */
__subprog void process_facts_of(struct process_record *rec, struct task_struct *task)
{
	rec->cgroup_id = BPF_CORE_READ(task, cgroups, dfl_cgrp, kn, id);
	rec->cgroup1_id = cgroup1_id(task);
	rec->exe_ino = BPF_CORE_READ(task, mm, exe_file, f_inode, i_ino);
	rec->exe_dev = BPF_CORE_READ(task, mm, exe_file, f_inode, i_sb, s_dev);
}

/* process_header fills the trailer of a process record of task. */
static __always_inline void process_header(struct process_record *rec, struct task_struct *task, __u8 event,
					   __u32 pid, __u32 parent, __u64 parent_start_ns)
{
	rec->time_ns = bpf_ktime_get_ns();
	rec->start_ns = task->group_leader->start_time;
	rec->exec_id = task->self_exec_id;
	rec->parent_start_ns = parent_start_ns;
	rec->pid = pid;
	rec->parent = parent;
	rec->filename_len = 0;
	rec->args_len = 0;
	rec->event = event;
	for (int i = 0; i < sizeof(rec->pad); i++)
		rec->pad[i] = 0;
	rec->kind = RECORD_KIND_PROCESS;
	process_facts_of(rec, task);
}

/* send_process sends a process record of task, a trailer alone, woken as
 * wake (enum wake_level) says; a lost one is counted in process_lost. Only
 * records user space acts on wake it: the others are read with the next
 * span record, which they precede in the ring, or when the reader's sleep
 * ends. */
static __always_inline void send_process(struct task_struct *task, __u8 event, __u32 pid, __u32 parent,
					 __u64 parent_start_ns, int wake)
{
	struct process_record *rec = bpf_ringbuf_reserve(&records, sizeof(*rec), 0);

	if (!rec) {
		__sync_fetch_and_add(&process_lost, 1);
		return;
	}
	process_header(rec, task, event, pid, parent, parent_start_ns);
	bpf_ringbuf_submit(rec, record_wake_flags(wake));
}

/* send_exec sends the exec record of task (the current process), with the
 * executable's name and the command line of its new image. User space acts
 * on it at once (WAKE_URGENT) when selectors or send_execs want it: a
 * pending process's hits are counted apart until it is decided, and a new
 * program's files are found from its exec. */
static __always_inline void send_exec(struct task_struct *task, __u32 pid, struct linux_binprm *bprm)
{
	struct process_buf *b = bpf_ringbuf_reserve(&records, sizeof(*b), 0);

	if (!b) {
		__sync_fetch_and_add(&process_lost, 1);
		return;
	}
	process_header(&b->rec, task, PROCESS_EXEC, pid, 0, 0);
	long n = bpf_probe_read_kernel_str(b->filename, sizeof(b->filename), bprm->filename);
	if (n > 0)
		b->rec.filename_len = n - 1;
	struct mm_struct *mm = task->mm;
	__u64 start = mm->arg_start, end = mm->arg_end;
	__u64 len = end > start ? end - start : 0;
	if (len > sizeof(b->args))
		len = sizeof(b->args);
	if (len && bpf_probe_read_user(b->args, len, (const void *)start) == 0)
		b->rec.args_len = len;
	bpf_ringbuf_submit(b, record_wake_flags(selector_bits || send_execs ? WAKE_URGENT : WAKE_NONE));
}

SEC("tp_btf/sched_process_exec")
int on_exec(__u64 *ctx)
{
	struct task_struct *task = (struct task_struct *)ctx[0];
	struct linux_binprm *bprm = (struct linux_binprm *)ctx[2];
	__u32 pid = task->tgid;

	forget_thread(task);
	forget_goroutines(pid);
	bpf_map_delete_elem(&thread_ctx_procs, &pid); /* another image: other modules */
	if (selector_bits) {
		/* A new program: which selectors it matches is for user space to say. */
		struct proc_entry *pe = bpf_map_lookup_elem(&procs, &pid);
		struct proc_entry e = {.start_ns = task->group_leader->start_time};
		e.mask = (pe ? pe->mask & ~selector_bits : 0) | (1ULL << PROC_PENDING_BIT);
		bpf_map_update_elem(&procs, &pid, &e, BPF_ANY);
	}
	if (selector_bits || send_execs || process_facts)
		send_exec(task, pid, bprm);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int on_fork(__u64 *ctx)
{
	struct task_struct *parent = (struct task_struct *)ctx[0];
	struct task_struct *child = (struct task_struct *)ctx[1];
	__u32 ppid = parent->tgid, pid = child->tgid;

	if (pid == ppid)
		return 0; /* a thread */
	int pending = 0;
	struct proc_entry *pe = bpf_map_lookup_elem(&procs, &ppid);
	if (pe) {
		/* Forked, not execed: the same program, the same choice of
		 * process: targets (selector_bits) and the same pending state.
		 * A pid: target's bit is its process's alone: where its links
		 * take every process (uprobe_multi before Linux 6.11) the
		 * child must not count for it. */
		struct proc_entry e = {.mask = pe->mask & (selector_bits | (1ULL << PROC_PENDING_BIT)),
				       .start_ns = child->start_time};
		pending = bpf_map_update_elem(&procs, &pid, &e, BPF_ANY) == 0 && (e.mask & (1ULL << PROC_PENDING_BIT));
	}
	if (pending || process_facts)
		send_process(child, PROCESS_FORK, pid, ppid, parent->group_leader->start_time, pending ? WAKE_URGENT : WAKE_NONE);
	/* The same image, the same thread-local variables: the child's
	 * threads reach the context as the parent's did. */
	struct thread_ctx_proc *tc = bpf_map_lookup_elem(&thread_ctx_procs, &ppid);
	if (tc && tc->access != THREAD_CTX_ASKED && bpf_map_update_elem(&thread_ctx_procs, &pid, tc, BPF_ANY) == 0) {
		tc = bpf_map_lookup_elem(&thread_ctx_procs, &pid);
		if (tc)
			tc->start_ns = child->start_time;
	}
	return 0;
}

SEC("tp_btf/sched_process_exit")
int on_exit(__u64 *ctx)
{
	struct task_struct *task = (struct task_struct *)ctx[0];
	__u32 pid = task->tgid;

	forget_thread(task);
	if (task->signal->live.counter != 0)
		return 0; /* not the last thread of the process */
	forget_goroutines(pid);
	bpf_map_delete_elem(&thread_ctx_procs, &pid);
	int chosen_exit = bpf_map_delete_elem(&procs, &pid) == 0 && selector_bits;
	if (chosen_exit || process_facts)
		send_process(task, PROCESS_EXIT, pid, 0, 0, chosen_exit ? WAKE_ASKED : WAKE_NONE);
	return 0;
}

/* on_cgroup_attach follows a process that moves to another cgroup (a
 * runtime that puts it in its container's after it started, in any
 * hierarchy): with process_facts, its facts are sent again. Its arguments
 * are the destination cgroup, its path, the task moved and whether its
 * whole thread group moved. */
SEC("tp_btf/cgroup_attach_task")
int on_cgroup_attach(__u64 *ctx)
{
	struct task_struct *task = (struct task_struct *)ctx[2];

	if (!process_facts || !task)
		return 0;
	task = task->group_leader;
	send_process(task, PROCESS_CGROUP, task->tgid, 0, 0, WAKE_NONE);
	return 0;
}

/* seen_scratch holds the record seen_task writes: too large for its stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__type(key, __u32);
	__type(value, struct process_record);
	__uint(max_entries, 1);
} seen_scratch SEC(".maps");

/*
 * seen_task writes a PROCESS_SEEN record (a trailer) for every process
 * (thread group leader) to the task iterator's output: user space learns
 * the facts of the processes that were running before the exec, fork and
 * exit programs could tell it of them.
 */
SEC("iter/task")
int seen_task(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	__u32 zero = 0;

	if (!task || task->pid != task->tgid)
		return 0;
	struct process_record *rec = bpf_map_lookup_elem(&seen_scratch, &zero);
	if (!rec)
		return 0;
	process_header(rec, task, PROCESS_SEEN, task->tgid, 0, 0);
	bpf_seq_write(ctx->meta->seq, rec, sizeof(*rec));
	return 0;
}
