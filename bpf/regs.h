/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * regs.h declares the x86-64 struct pt_regs as the kernel hands it to uprobe
 * programs (the layout of arch/x86/include/asm/ptrace.h, stable since 2.6).
 * Slot i of enum reg_slot in abi.h is the 8-byte field at offset 8*i.
 */
#ifndef UPROBE_REGS_H
#define UPROBE_REGS_H

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

_Static_assert(sizeof(struct pt_regs) == REG_SLOT_COUNT * 8, "pt_regs has one slot per reg_slot");

#endif /* UPROBE_REGS_H */
