/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * regs.h declares struct pt_regs as the kernel hands it to uprobe programs
 * on the architecture the engine is compiled for, chosen by
 * -D__TARGET_ARCH_x86 or -D__TARGET_ARCH_arm64 (internal/bpfobj compiles
 * engine.bpf.c once for each), and the register slots the engine itself
 * uses. Slot i of the architecture's enum in abi.h is the 8-byte field at
 * offset 8*i:
 *   - x86-64: the layout of arch/x86/include/asm/ptrace.h, stable since 2.6;
 *   - arm64: struct user_pt_regs (arch/arm64/include/uapi/asm/ptrace.h),
 *     the head of the kernel's struct pt_regs and all of it a BPF program
 *     may read (bpf_user_pt_regs_t).
 *
 * REG_SLOT_COUNT is the number of slots the engine copies (struct
 * reg_file), REG_SLOT_SP the stack pointer's and REG_SLOT_GO_G the
 * register of the Go ABI that holds the current goroutine's g (R14 on
 * x86-64, R28 on arm64).
 */
#ifndef UPROBE_REGS_H
#define UPROBE_REGS_H

#if defined(__TARGET_ARCH_x86)

struct pt_regs {
	unsigned long r15;
	unsigned long r14;
	unsigned long r13;
	unsigned long r12;
	unsigned long bp;
	unsigned long bx;
	unsigned long r11;
	unsigned long r10;
	unsigned long r9;
	unsigned long r8;
	unsigned long ax;
	unsigned long cx;
	unsigned long dx;
	unsigned long si;
	unsigned long di;
	unsigned long orig_ax;
	unsigned long ip;
	unsigned long cs;
	unsigned long flags;
	unsigned long sp;
	unsigned long ss;
};

#define REG_SLOT_COUNT REG_X86_SLOT_COUNT
#define REG_SLOT_SP REG_X86_SP
#define REG_SLOT_IP REG_X86_IP
#define REG_SLOT_GO_G REG_X86_R14

_Static_assert(__builtin_offsetof(struct pt_regs, sp) == REG_X86_SP * 8, "sp is slot REG_X86_SP");
_Static_assert(__builtin_offsetof(struct pt_regs, r14) == REG_X86_R14 * 8, "r14 is slot REG_X86_R14");
_Static_assert(__builtin_offsetof(struct pt_regs, ax) == REG_X86_AX * 8, "ax is slot REG_X86_AX");
_Static_assert(__builtin_offsetof(struct pt_regs, ip) == REG_X86_IP * 8, "ip is slot REG_X86_IP");

#elif defined(__TARGET_ARCH_arm64)

/* The kernel hands uprobe programs a bpf_user_pt_regs_t, which is struct
 * user_pt_regs on arm64: global functions that take the context must name
 * it so. */
#define pt_regs user_pt_regs
struct pt_regs {
	unsigned long regs[31]; /* x0 to x30 */
	unsigned long sp;
	unsigned long pc;
	unsigned long pstate;
};

#define REG_SLOT_COUNT REG_ARM64_SLOT_COUNT
#define REG_SLOT_SP REG_ARM64_SP
#define REG_SLOT_IP REG_ARM64_PC
#define REG_SLOT_GO_G REG_ARM64_X28

_Static_assert(__builtin_offsetof(struct pt_regs, regs[28]) == REG_ARM64_X28 * 8, "x28 is slot REG_ARM64_X28");
_Static_assert(__builtin_offsetof(struct pt_regs, regs[30]) == REG_ARM64_X30 * 8, "x30 is slot REG_ARM64_X30");
_Static_assert(__builtin_offsetof(struct pt_regs, sp) == REG_ARM64_SP * 8, "sp is slot REG_ARM64_SP");
_Static_assert(__builtin_offsetof(struct pt_regs, pc) == REG_ARM64_PC * 8, "pc is slot REG_ARM64_PC");

#else
#error "define __TARGET_ARCH_x86 or __TARGET_ARCH_arm64"
#endif

_Static_assert(sizeof(struct pt_regs) == REG_SLOT_COUNT * 8, "pt_regs has one slot per register slot");

/* reg_at reads slot s (a constant) of the probed thread's registers. */
#define reg_at(regs, s) (((const unsigned long *)(regs))[s])

#endif /* UPROBE_REGS_H */
