/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * abi.h is the one source of truth for everything the BPF engine and the Go
 * receiver exchange: limits, enums, the per-site spec filled from Go, the
 * per-probe and per-span statistics, and the ring-buffer span record.
 * The Go side is generated from this file by bpf2go (-type); a layout test in
 * internal/bpfobj checks sizes and offsets. Never duplicate a value by hand.
 */
#ifndef UPROBE_ABI_H
#define UPROBE_ABI_H

/* abi_limit bounds every array and loop in the engine. */
enum abi_limit {
	/* Values fetched at one site for one role (entry or exit). */
	ABI_MAX_FETCHES = 8,
	/* Pointer dereferences in one fetch. */
	ABI_MAX_DEREFS = 4,
	/* Fetches at one end of a SITE_ENTRY_REGS or SITE_EXIT_REGS site. */
	ABI_MAX_REG_FETCHES = 4,
	/* Open spans per thread or goroutine; deeper entries are counted, not recorded. */
	ABI_MAX_DEPTH = 512,
	/* Bytes of entry values the open spans of one thread or goroutine keep
	 * together; a span opened when they are used up records no entry
	 * values (its fetches count as failed and the record as truncated). */
	ABI_VALUE_STACK = 8192,
	/* Bytes of fetched values (entry and exit together) in one span record. */
	ABI_DATA_CAP = 1024,
	/* Largest string or byte capture, including the terminating NUL. */
	ABI_STRING_MAX = 256,
	/* log2 latency buckets per span: bucket i counts durations in (2^i, 2^(i+1)] ns. */
	ABI_HIST_BUCKETS = 64,
	/* buckets per sign of a value histogram: 1, then (2^(i-1), 2^i] up to 2^64 */
	ABI_VALUE_BUCKETS = 65,
	/* Conditions (filters) of one site, at entry and exit together. */
	ABI_MAX_FILTERS = 4,
	/* Bytes of the constant a string condition compares with. */
	ABI_FILTER_TEXT_MAX = 64,
	/* Targets whose processes are chosen (by pid or by a process
	 * selector): one bit each in a process's proc_entry mask. */
	ABI_MAX_CHOSEN_TARGETS = 63,
	/* Bytes of the executable's name and of its command line that a
	 * process record carries. */
	ABI_EXEC_FILENAME_MAX = 256,
	ABI_EXEC_ARGS_MAX = 512,
	/* The kernel's MAX_URETPROBE_DEPTH (include/linux/uprobes.h): a thread
	 * with this many pending return probes gets no more; the return of a
	 * call entered deeper is never reported. */
	ABI_KERNEL_RETURN_DEPTH = 64,
	/* Bytes of a thread context record's attrs-data (OTEP 4947) a span
	 * carries: the rest of a longer attrs-data is cut off. */
	ABI_THREAD_ATTRS_MAX = 128,
	/* Nanoseconds between two requests of the engine for one process's
	 * thread-context access (PROCESS_THREAD_CONTEXT), at most. */
	ABI_THREAD_ASK_NS = 100000000,
};

/*
 * The register slots: a register's value is the 8-byte word at byte offset
 * 8 * slot of the struct pt_regs the kernel hands a uprobe program. The
 * layout is the architecture's, so there is one enum per architecture; a
 * fetch_op's base_reg, index_reg and len_reg are slots of the architecture
 * the engine object was built for (bpf/regs.h). The Go side
 * (internal/regs, Arch.Slot) is checked against both enums by the layout
 * test in internal/bpfobj.
 */

/* reg_slot_x86 numbers the slots of the x86-64 struct pt_regs
 * (arch/x86/include/asm/ptrace.h). */
enum reg_slot_x86 {
	REG_X86_R15 = 0,
	REG_X86_R14 = 1,
	REG_X86_R13 = 2,
	REG_X86_R12 = 3,
	REG_X86_BP = 4,
	REG_X86_BX = 5,
	REG_X86_R11 = 6,
	REG_X86_R10 = 7,
	REG_X86_R9 = 8,
	REG_X86_R8 = 9,
	REG_X86_AX = 10,
	REG_X86_CX = 11,
	REG_X86_DX = 12,
	REG_X86_SI = 13,
	REG_X86_DI = 14,
	REG_X86_ORIG_AX = 15,
	REG_X86_IP = 16,
	REG_X86_CS = 17,
	REG_X86_FLAGS = 18,
	REG_X86_SP = 19,
	REG_X86_SS = 20,
	REG_X86_SLOT_COUNT = 21,
};

/* reg_slot_arm64 numbers the slots of the arm64 struct user_pt_regs, the
 * head of its struct pt_regs and all of what a BPF program may read of it
 * (bpf_user_pt_regs_t, arch/arm64/include/uapi/asm/ptrace.h): regs[31]
 * (x0 to x30), sp, pc, pstate. */
enum reg_slot_arm64 {
	REG_ARM64_X0 = 0,
	REG_ARM64_X1 = 1,
	REG_ARM64_X2 = 2,
	REG_ARM64_X3 = 3,
	REG_ARM64_X4 = 4,
	REG_ARM64_X5 = 5,
	REG_ARM64_X6 = 6,
	REG_ARM64_X7 = 7,
	REG_ARM64_X8 = 8,
	REG_ARM64_X9 = 9,
	REG_ARM64_X10 = 10,
	REG_ARM64_X11 = 11,
	REG_ARM64_X12 = 12,
	REG_ARM64_X13 = 13,
	REG_ARM64_X14 = 14,
	REG_ARM64_X15 = 15,
	REG_ARM64_X16 = 16,
	REG_ARM64_X17 = 17,
	REG_ARM64_X18 = 18,
	REG_ARM64_X19 = 19,
	REG_ARM64_X20 = 20,
	REG_ARM64_X21 = 21,
	REG_ARM64_X22 = 22,
	REG_ARM64_X23 = 23,
	REG_ARM64_X24 = 24,
	REG_ARM64_X25 = 25,
	REG_ARM64_X26 = 26,
	REG_ARM64_X27 = 27,
	REG_ARM64_X28 = 28,
	REG_ARM64_X29 = 29,
	REG_ARM64_X30 = 30,
	REG_ARM64_SP = 31,
	REG_ARM64_PC = 32,
	REG_ARM64_PSTATE = 33,
	REG_ARM64_SLOT_COUNT = 34,
};

/* fetch_base says where a fetch starts. */
enum fetch_base {
	FETCH_BASE_NONE = 0,     /* unused slot */
	FETCH_BASE_REGISTER = 1, /* value of base_reg */
	FETCH_BASE_CONSTANT = 2, /* value of disp alone */
};

/* fetch_kind says what a fetch stores in the record. */
enum fetch_kind {
	FETCH_KIND_INT = 1,    /* 8 bytes, little endian, zero-extended from read_size */
	FETCH_KIND_STRING = 2, /* u16 length (without NUL), the bytes, padding to 8 */
	FETCH_KIND_BYTES = 3,  /* exactly max_len bytes, padding to 8 */
	FETCH_KIND_GOSTRING = 4, /* a Go string (pointer, length), stored like a STRING */
};

/* site_flag says which roles a site plays besides counting its hits. */
enum site_flag {
	SITE_ENTRY = 1,   /* opens span entry_span */
	SITE_EXIT = 2,    /* closes span exit_span */
	SITE_CARRIER = 4,  /* entry_span carries a trace context for the spans nested in it */
	SITE_FUNCTION = 8, /* entry_span is a whole function: entry at its first instruction, exit at its return */
	SITE_GO = 16,      /* Go code: pair by goroutine (g in R14 on x86-64, R28 on arm64), not by thread */
	SITE_KERNEL_RETURN = 32, /* entry_span closes at a kernel return probe (uretprobe) */
	SITE_CHOSEN = 64,  /* only processes whose proc_entry has bit target_bit count */
	SITE_FILTERED_HITS = 128, /* a filtered counter: only hits that pass its filters count */
	SITE_PROC_HITS = 256, /* also count hits per process (proc_hits), for container.id */
	/* entry_span, opened as the outermost span of a thread, reads the
	 * thread's published context (OTEP 4947, struct thread_context) */
	SITE_THREAD_CONTEXT = 512,
	SITE_THREAD_ATTRS = 1024, /* with SITE_THREAD_CONTEXT: its attrs-data too */
	/* Every entry (exit) fetch is a register's integer, as an argument or
	 * a return value is (base a register, no index, no dereference), and
	 * there are at most ABI_MAX_REG_FETCHES: the engine reads them inline,
	 * without a call per fetch. Set by the loader. */
	SITE_ENTRY_REGS = 2048,
	SITE_EXIT_REGS = 4096,
	/* The entry of a function span attached as a session uprobe (Linux
	 * 6.12): the same program runs at the call's return, where it handles
	 * site return_site. An entry that rejects the call (its conditions do
	 * not hold, its process is not chosen) makes the kernel skip the
	 * return: the call pays only its entry. Set by the loader. */
	SITE_SESSION = 8192,
	/* The entry of a function span whose function is a leaf (x86-64): it
	 * makes no call and leaves its own code only by returning (no jump
	 * out of it, no indirect jump), as decoded from its code. Nothing runs
	 * inside one of its calls but its own instructions, and the thread's
	 * signal handlers. A call of it that head sampling leaves out is marked
	 * by its code's addresses (leaf_bytes from the entry site's), not by
	 * the return address the call left on the stack: no read of user
	 * memory. Set by the loader from the plan. */
	SITE_LEAF = 16384,
};

/* filter_op is how a condition compares a fetched value with its constant. */
enum filter_op {
	FILTER_EQ = 1,     /* integers and strings */
	FILTER_NE = 2,     /* integers and strings */
	FILTER_LT = 3,     /* integers, signed */
	FILTER_LE = 4,
	FILTER_GT = 5,
	FILTER_GE = 6,
	FILTER_LT_U = 7,   /* integers, unsigned */
	FILTER_LE_U = 8,
	FILTER_GT_U = 9,
	FILTER_GE_U = 10,
	FILTER_PREFIX = 11, /* strings: the value starts with text */
};

/*
 * proc_mask_bit names the bits of a proc_entry mask besides the chosen
 * targets' bits 0 to ABI_MAX_CHOSEN_TARGETS-1.
 */
enum proc_mask_bit {
	/* The process execed and user space has not yet decided which
	 * selectors it matches: its hits count as pending and its span records
	 * are marked RECORD_PENDING until the decision. */
	PROC_PENDING_BIT = 63,
};

/* proc_entry is what the engine knows of one process (thread group). */
struct proc_entry {
	__u64 mask;     /* bit t: the process belongs to chosen target t; PROC_PENDING_BIT */
	__u64 start_ns; /* start time of the process, to tell a reused pid */
};

/* pending_kind says what a pending_key counts. */
enum pending_kind {
	PENDING_HITS = 1,        /* hits of probe id */
	PENDING_SPAN_BUCKET = 2, /* completed spans of span id in bucket */
	PENDING_SPAN_SUM = 3,    /* their durations, summed (ns) */
	/* Completed spans of span id that were not recorded: the ring buffer
	 * refused their record, their trace was not sampled, or they were
	 * shorter than min_duration_ns (span_stats' lost, unsampled and
	 * short_spans, for a process that is chosen). */
	PENDING_SPAN_LOST = 4,
	PENDING_SPAN_UNSAMPLED = 5,
	PENDING_SPAN_SHORT = 6,
};

/* pending_key names one counter of a pending process: what it counted
 * while user space had not decided whether the process is chosen. */
struct pending_key {
	__u32 pid;
	__u32 id;     /* probe id or span id */
	__u8 kind;    /* enum pending_kind */
	__u8 bucket;  /* PENDING_SPAN_BUCKET */
	__u16 pad;
	__u32 pad2;
};

/* proc_hits_key names the hits of one probe in one process: its pid and
 * start time (CLOCK_MONOTONIC ns), which tell a reused pid apart. Counted
 * for files seen inside containers, so that metrics carry container.id. */
struct proc_hits_key {
	__u32 probe;
	__u32 pid;
	__u64 start_ns;
};

/*
 * fetch_op is one compiled fetch expression. The engine computes
 *   v = base + disp + index_reg * scale
 * then, for each of deref_count offsets, v = *(v + offset) read from user
 * memory: 8 bytes for every dereference but the last of an INT fetch, which
 * reads read_size bytes. With last_is_address, the last offset is only added
 * (v = v + offset): "+8(%di):string" is the string at di+8, as in the
 * kernel's probe syntax. STRING and BYTES fetches then read at address v.
 */
struct fetch_op {
	__s64 disp;
	__s64 deref_offsets[ABI_MAX_DEREFS];
	__u8 base;        /* enum fetch_base */
	__u8 base_reg;    /* register slot (enum reg_slot_x86 or reg_slot_arm64) */
	__u8 index_reg;   /* register slot, used when scale != 0 */
	__u8 scale;       /* 0, 1, 2, 4 or 8 */
	__u8 deref_count; /* 0..ABI_MAX_DEREFS */
	__u8 kind;        /* enum fetch_kind */
	__u8 read_size;   /* 1, 2, 4 or 8: bytes of the last dereference of an INT */
	__u8 last_is_address; /* the last dereference computes an address, reads nothing */
	__u16 max_len;    /* STRING, GOSTRING: buffer bytes including NUL; BYTES: bytes */
	__u8 len_reg;     /* GOSTRING without dereference: register slot of the length;
			   * with one, the length is the 8 bytes after the pointer */
	__u8 pad2;
	__u32 pad3;
};

/*
 * filter is one condition of a site: the value fetched by value (an INT, or
 * the address of a STRING or a GOSTRING) compared by op with constant (an
 * integer: the value's low size bytes, sign-extended for the signed ops)
 * or with the len bytes of text. Evaluated before anything is copied or
 * recorded; a value that cannot be read fails the condition.
 */
struct filter {
	struct fetch_op value;
	__s64 constant;
	__u16 len;    /* strings: bytes of text that count */
	__u8 op;      /* enum filter_op */
	__u8 at_exit; /* evaluated at the span's exit, not at its entry */
	__u8 size;    /* integers: bytes of the value that count (1, 2, 4 or 8) */
	__u8 pad[3];
	char text[ABI_FILTER_TEXT_MAX];
};

/* value_hist is the per-CPU histogram of the values one counter saw, on the
 * buckets of an exponential histogram of scale 0 shifted by one: positive[0]
 * counts the value 1, positive[i] for i > 0 the values in (2^(i-1), 2^i],
 * negative[i] their negations, zero the zeros. The sum is a 128-bit two's
 * complement integer (sum_hi:sum_lo). Values that could not be read are
 * counted in unread only. */
struct value_hist {
	__u64 count;
	__u64 sum_lo;
	__s64 sum_hi;
	__u64 zero;
	__u64 unread;
	__u64 positive[ABI_VALUE_BUCKETS];
	__u64 negative[ABI_VALUE_BUCKETS];
};

/*
 * site is the spec of one attached location, selected by the BPF cookie of
 * the uprobe link. Entry fetches are stored in the open frame, exit fetches
 * appended at exit; both travel in one span record.
 */
struct site {
	__u32 probe_id;   /* index into probe_stats */
	__u32 entry_span; /* index into span_stats, valid with SITE_ENTRY */
	__u32 exit_span;  /* index into span_stats, valid with SITE_EXIT */
	__u16 flags;      /* enum site_flag */
	__u8 entry_fetch_count;
	__u8 exit_fetch_count;
	/* SITE_GO: byte offset of goid in the Go runtime's g structure of the
	 * traced binary, 0 when unknown. A goroutine's open spans are kept
	 * under its g pointer, which the runtime reuses for later goroutines:
	 * the id tells a new goroutine from the one that left spans open. */
	__u16 goid_offset;
	__u8 target_bit; /* SITE_CHOSEN: the target's bit in proc_entry.mask */
	__u8 filter_count;
	/* 1 + the index of the value histogram this counter feeds with
	 * hist_value, 0 for none. */
	__u16 value_hist;
	__u8 hist_size;   /* bytes of the hist_value integer that count: 1, 2, 4 or 8 */
	__u8 hist_signed; /* the hist_value integer is signed */
	/* SITE_SESSION: the site the call's return is (the span's exit site). */
	__u32 return_site;
	/* SITE_LEAF: the bytes of the function's code from this (entry) site's
	 * address to the function's end. */
	__u32 leaf_bytes;
	/* Head sampling of entry_span when it opens a thread's outermost span:
	 * recorded when a random u32 is below this; 1 << 32 records all. Nested
	 * spans follow the outermost span's decision. */
	__u64 sample_threshold;
	/* Spans of exit_span shorter than this are counted but not recorded. */
	__u64 min_duration_ns;
	struct fetch_op entry[ABI_MAX_FETCHES];
	struct fetch_op exit[ABI_MAX_FETCHES];
	struct filter filters[ABI_MAX_FILTERS];
	struct fetch_op hist_value;
};

/* probe_stats counts, per CPU, what happened at the sites of one probe. */
struct probe_stats {
	__u64 hits; /* every time any site of the probe fired */
	__u64 lost; /* span records the ring buffer refused at this (exit) probe */
};

/* span_stats aggregates, per CPU, the completed spans of one span definition. */
struct span_stats {
	__u64 sum_ns;     /* sum of the durations of completed spans (recorded or not) */
	__u64 lost;       /* records the ring buffer refused */
	__u64 unmatched;  /* exits with no open entry on the thread */
	__u64 abandoned;  /* open spans discarded: an outer span closed first, or their stack was unwound */
	__u64 overflow;   /* entries deeper than ABI_MAX_DEPTH, not recorded */
	__u64 no_state;   /* entries dropped because no state could be had (goroutine states full) */
	__u64 return_limit; /* entries not recorded: the kernel would not report their
			     * return (ABI_KERNEL_RETURN_DEPTH pending on the thread) */
	__u64 unsampled;  /* completed spans not recorded: their trace was not sampled */
	__u64 short_spans; /* completed spans not recorded: shorter than min_duration_ns */
	__u64 filtered;   /* spans whose filters did not hold: not recorded, not in the histogram */
	__u64 pending_full; /* completed spans of a pending process that could not be
			     * counted (the pending counters were full): not recorded,
			     * not in the histogram */
	__u64 buckets[ABI_HIST_BUCKETS]; /* their sum is the number of completed spans */
};

/* record_flag marks conditions of one span record (and of its open frame). */
enum record_flag {
	RECORD_TRUNCATED = 1, /* a fetch did not fit in ABI_DATA_CAP or in the value stack */
	RECORD_UNSAMPLED = 2, /* in the frame only: the span's trace is not sampled */
	RECORD_CARRIER = 4,   /* the span carries a trace context (SITE_CARRIER at entry) */
	RECORD_FUNCTION = 8,  /* the span is one activation of a function (SITE_FUNCTION) */
	RECORD_HAS_CHILD = 16, /* a span nested in it was recorded: it is recorded too,
				* whatever min_duration_ns says, so that its children's
				* parent exists */
	RECORD_PENDING = 32,  /* the process was pending: keep the span only if it is chosen */
	RECORD_FILTERED = 64, /* in the frame only: its filters did not hold: never recorded */
	/* the span's thread had a published context when its outermost span
	 * opened: a struct thread_context (32 bytes and its attrs) precedes the
	 * trailer */
	RECORD_THREAD_CONTEXT = 128,
};

/*
 * wake_mode is what the ring buffer's reader (user space) wants to be woken
 * for, in the engine's global of that name. Records are written without a
 * wakeup but when it asks: the reader sleeps on a timer while records flow,
 * and not at all while none do.
 */
enum wake_mode {
	WAKE_FILL = 0,  /* when the ring holds wake_bytes (the reader drains on a timer) */
	WAKE_FIRST = 1, /* at the next record (the ring was empty: the reader sleeps) */
	WAKE_SENT = 2,  /* a wakeup is on its way: no other until the reader asks again */
};

/*
 * wake_level says how a process record wakes the reader: not at all (read
 * with the next records), as the reader asked (wake_mode), or at once,
 * setting reader_urgent, for a record user space is to act on before its
 * flush timer ends (an exec, a pending process's fork, a thread-context
 * question).
 */
enum wake_level {
	WAKE_NONE = 0,
	WAKE_ASKED = 1,
	WAKE_URGENT = 2,
};

/*
 * record_kind is the last byte of every ring-buffer record: it says which
 * trailer ends the record.
 */
enum record_kind {
	RECORD_KIND_SPAN = 0,    /* span_record */
	RECORD_KIND_PROCESS = 1, /* process_record */
};

/* process_event says what happened to a process. */
enum process_event {
	PROCESS_EXEC = 1, /* it execed: filename and command line follow */
	PROCESS_FORK = 2, /* pid was forked by parent (a pending process, or any with process_facts) */
	PROCESS_EXIT = 3, /* a process the engine knew exited (any, with process_facts) */
	PROCESS_SEEN = 4, /* it was running when user space listed the processes (task iterator) */
	PROCESS_CGROUP = 5, /* it moved to another cgroup (with process_facts): its facts now */
	/* A span opened in a process whose thread-context access the engine
	 * does not know (no thread_ctx_proc, or THREAD_CTX_ASKED past
	 * ABI_THREAD_ASK_NS, or THREAD_CTX_NONE and the process has mapped
	 * more since): user space looks for otel_thread_ctx_v1 in it. */
	PROCESS_THREAD_CONTEXT = 6,
};

/*
 * thread_ctx_access says how the engine finds a process's otel_thread_ctx_v1
 * (OTEP 4947), the thread-local pointer to the thread's context record.
 */
enum thread_ctx_access {
	THREAD_CTX_ASKED = 0,  /* user space was asked (PROCESS_THREAD_CONTEXT) and has not answered */
	THREAD_CTX_NONE = 1,   /* no module the process maps defines it */
	/* it is at tls_offset from the thread pointer (static TLS: the
	 * executable's, initial-exec, or a TLSDESC resolved to static TLS) */
	THREAD_CTX_STATIC = 2,
	/* it is at tls_offset in the TLS block of module dtv_module, found in
	 * the thread's dynamic thread vector (glibc's layout) */
	THREAD_CTX_DTV = 3,
};

/*
 * thread_ctx_proc is what the engine knows of one process's thread
 * context, by pid (map thread_ctx_procs): the engine makes it when it asks,
 * user space fills it in. It holds for the image of start_ns and exec_id;
 * exec and exit delete it, fork copies it.
 */
struct thread_ctx_proc {
	__u64 start_ns; /* start time of the process */
	__u64 exec_id;  /* the kernel's self_exec_id of its image */
	__s64 tls_offset;
	__u64 dtv_module; /* THREAD_CTX_DTV: the module id, an index into the DTV */
	__u64 asked_ns;   /* when the engine last asked (bpf_ktime_get_ns) */
	__u32 map_count;  /* the process's mappings when the engine last asked */
	__u8 access;      /* enum thread_ctx_access */
	__u8 pad[3];
};

/*
 * thread_context is what the engine read of the thread's context record
 * (OTEP 4947: trace-id, span-id, valid, trace-flags, attrs-data-size, then
 * attrs-data), kept while the outermost span of the thread is open. A span
 * record with RECORD_THREAD_CONTEXT carries its first 32 bytes and attrs_len
 * bytes of attrs rounded up to 8, between its values and its trailer.
 */
struct thread_context {
	__u8 trace_id[16];
	__u8 span_id[8];
	__u8 valid;       /* 1 */
	__u8 trace_flags; /* W3C trace flags: bit 0 sampled */
	__u16 attrs_size; /* attrs-data-size as the writer set it */
	__u16 attrs_len;  /* bytes of attrs read: attrs_size up to ABI_THREAD_ATTRS_MAX, 0 without SITE_THREAD_ATTRS */
	__u8 pad[2];
	__u8 attrs[ABI_THREAD_ATTRS_MAX];
};

/* thread_ctx_outcome is what the engine found at a root span's entry in a
 * process whose access it knows (the index of thread_ctx_stats.outcomes). */
enum thread_ctx_outcome {
	THREAD_CTX_READ = 0,       /* a valid context: the span joins its trace */
	THREAD_CTX_NO_CONTEXT = 1, /* the pointer is NULL, valid is 0, or the thread has no TLS block for the module */
	THREAD_CTX_INVALID = 2,    /* valid is neither 0 nor 1, an id is zero, or the pointer is odd */
	THREAD_CTX_UNREADABLE = 3, /* the variable or the record could not be read */
	THREAD_CTX_OUTCOMES = 4,
};

/* thread_ctx_stats counts, per CPU, the engine's thread-context work. */
struct thread_ctx_stats {
	__u64 outcomes[THREAD_CTX_OUTCOMES]; /* enum thread_ctx_outcome */
	__u64 asked;    /* PROCESS_THREAD_CONTEXT records sent */
	__u64 no_entry; /* requests that found thread_ctx_procs full */
};

/*
 * process_record is the trailer of a process record. Exec records are sent
 * while some target chooses its processes by a selector, while user space
 * looks at every exec (send_execs) or wants every process's facts
 * (process_facts); fork and exit records for pending processes, or for
 * every process with process_facts. An exec record is ABI_EXEC_FILENAME_MAX
 * bytes holding the executable's name as given to execve (filename_len of
 * them used), ABI_EXEC_ARGS_MAX bytes holding its command line (NUL
 * separated; args_len used), then this structure; the other records are
 * this structure alone. The facts (cgroups, executable) are the process's
 * when the record was written: while it was alive.
 */
struct process_record {
	__u64 time_ns;  /* CLOCK_MONOTONIC */
	__u64 start_ns; /* start time of the process */
	__u64 exec_id;  /* the kernel's self_exec_id of the process (span_record's) */
	__u64 parent_start_ns; /* PROCESS_FORK: start time of the process that forked */
	/* The kernfs id of the process's cgroup in the unified (v2)
	 * hierarchy: the inode number of its directory in a cgroup2 mount. */
	__u64 cgroup_id;
	/* The kernfs id of its cgroup in the v1 hierarchy of controller
	 * cgroup1_subsys (the inode number of its directory there), 0 when the
	 * loader chose none. */
	__u64 cgroup1_id;
	__u64 exe_ino;  /* inode number of its executable, 0 for none */
	__u32 exe_dev;  /* the device of that inode (kernel dev_t: major << 20 | minor) */
	__u32 pid;
	__u32 parent;   /* PROCESS_FORK: the pid that forked */
	__u16 filename_len;
	__u16 args_len;
	__u8 event;     /* enum process_event */
	__u8 pad[6];
	__u8 kind;      /* RECORD_KIND_PROCESS */
};

/*
 * span_record is the trailer of one ring-buffer record: the record holds
 * entry_len bytes of entry values, then exit_len bytes of exit values (in
 * site fetch order), then with RECORD_THREAD_CONTEXT the thread context
 * (struct thread_context: 32 bytes, then attrs_len bytes of attrs rounded
 * up to 8), then this structure, so that a record is built where the entry
 * values already are. Times are CLOCK_MONOTONIC nanoseconds
 * (bpf_ktime_get_ns).
 */
struct span_record {
	__u64 start_ns;
	__u64 end_ns;
	__u64 parent_start_ns; /* start of the enclosing open span on the thread, 0 for a root */
	__u64 root_start_ns;   /* start of the outermost open span on the thread */
	__u64 context_start_ns; /* start of the nearest enclosing carrier span, 0 if none */
	__u64 owner;           /* what pairs the span: the thread id, or the goroutine (g pointer) */
	/* The process image the span ran in: a pid reused by a new process has
	 * another start time, an image replaced by execve another exec id. */
	__u64 process_start_ns; /* start time of the thread group leader (CLOCK_MONOTONIC) */
	__u64 exec_id;          /* the kernel's self_exec_id: one more at each execve */
	__u32 pid;             /* thread group id, in the initial pid namespace */
	__u32 tid;             /* thread id at exit, in the initial pid namespace */
	__u32 span;            /* span definition index */
	__u32 entry_site;
	__u32 exit_site;
	__u16 entry_len;
	__u16 exit_len;
	__u16 depth; /* open spans below this one on the thread */
	__u8 flags;  /* enum record_flag */
	__u8 entry_failed; /* bit i: entry fetch i failed and stored nothing */
	__u8 exit_failed;  /* bit i: exit fetch i failed and stored nothing */
	__u8 pad[2];
	__u8 kind;         /* RECORD_KIND_SPAN */
};

#endif /* UPROBE_ABI_H */
