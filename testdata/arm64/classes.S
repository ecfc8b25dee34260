/*
 * Instructions of each class of internal/insn's ClassifyARM64, each at a
 * global label site_NAME, for harness/armvm's kernel check: the test
 * places a uprobe on each label and compares what the kernel does with the
 * class. run_sites executes every site the kernel accepts once and stores
 * what it computed in out[0..3]; never_run holds the sites the kernel
 * refuses (and some that would trap at EL0), which only need to be mapped.
 * excl_inc is an exclusive load/store loop with a probeable instruction
 * (excl_mid, not a site_: the kernel accepts it) inside.
 */
	.arch armv8-a
	.text

	.globl	run_sites
	.type	run_sites, %function
	.p2align 2
run_sites:				// void run_sites(long out[4])
	stp	x29, x30, [sp, #-32]!
	mov	x29, sp
	str	x19, [sp, #16]
	mov	x19, x0
	.globl	site_nop
site_nop:
	nop
	.globl	site_b
site_b:
	b	1f
	brk	#0
1:
	.globl	site_cbz
site_cbz:
	cbz	xzr, 2f
	brk	#0
2:
	.globl	site_tbnz
site_tbnz:
	tbnz	x19, #63, 3f		// not taken: a user pointer
	.globl	site_bl
site_bl:
	bl	leaf
	.globl	site_adr
site_adr:
	adr	x1, lit
	.globl	site_adrp
site_adrp:
	adrp	x2, lit
	add	x2, x2, :lo12:lit
	sub	x1, x2, x1		// 0 when both found lit
	str	x1, [x19, #8]
	.globl	site_stp
site_stp:
	stp	x1, x2, [sp, #-16]!
	.globl	site_ldp
site_ldp:
	ldp	x1, x2, [sp], #16
	.globl	site_mrs_nzcv
site_mrs_nzcv:
	mrs	x7, nzcv
	.globl	site_mrs_tpidr
site_mrs_tpidr:
	mrs	x6, tpidr_el0
	.globl	site_dmb
site_dmb:
	dmb	ish
	.globl	site_paciasp
site_paciasp:
	hint	#25			// paciasp: a nop without FEAT_PAuth
	.globl	site_xpaclri
site_xpaclri:
	hint	#7			// xpaclri
	.globl	site_bti
site_bti:
	hint	#34			// bti c
	.globl	site_add
site_add:
	add	x3, x19, #1
	sub	x3, x3, x19
	str	x3, [x19, #16]		// 1
	adr	x4, 4f
	.globl	site_br
site_br:
	br	x4
	brk	#0
4:
	.globl	site_ldr_d_lit
site_ldr_d_lit:
	ldr	d0, lit			// unsafe: stepped at the wrong address
	fmov	x5, d0
	str	x5, [x19]
3:
	ldr	x19, [sp, #16]
	ldp	x29, x30, [sp], #32
	.globl	site_ret
site_ret:
	ret
	.size	run_sites, .-run_sites

	.type	leaf, %function
leaf:
	mov	x0, #7
	str	x0, [x19, #24]		// 7
	ret
	.size	leaf, .-leaf

	.p2align 3
lit:
	.quad	0x4045000000000000	// 42.0

	// long excl_inc(long *p): an atomic increment as compilers write it
	// without LSE atomics. A uprobe between the exclusive load and store
	// returns through an exception return, which clears the exclusive
	// monitor: the store fails every time and the loop never ends.
	.globl	excl_inc
	.type	excl_inc, %function
	.p2align 2
excl_inc:
1:	ldaxr	x1, [x0]
	.globl	excl_mid
excl_mid:
	add	x1, x1, #1
	stlxr	w2, x1, [x0]
	cbnz	w2, 1b
	mov	x0, x1
	ret
	.size	excl_inc, .-excl_inc

	.globl	never_run
	.type	never_run, %function
	.p2align 2
never_run:
	.globl	site_ldr_lit
site_ldr_lit:
	ldr	x0, lit
	.globl	site_ldrsw_lit
site_ldrsw_lit:
	ldrsw	x0, lit
	.globl	site_prfm_lit
site_prfm_lit:
	prfm	pldl1keep, lit
	.globl	site_ldxr
site_ldxr:
	ldxr	x0, [x1]
	.globl	site_stxr
site_stxr:
	stxr	w2, x3, [x4]
	.globl	site_ldaxr
site_ldaxr:
	ldaxr	w0, [x1]
	.globl	site_svc
site_svc:
	svc	#0
	.globl	site_brk
site_brk:
	brk	#1
	.globl	site_mrs_daif
site_mrs_daif:
	mrs	x0, daif
	.globl	site_msr_tpidr
site_msr_tpidr:
	msr	tpidr_el0, x0
	.globl	site_msr_daifset
site_msr_daifset:
	msr	daifset, #2
	.globl	site_yield
site_yield:
	yield
	.globl	site_wfe
site_wfe:
	wfe
	.globl	site_autiasp
site_autiasp:
	hint	#29			// autiasp
	.globl	site_retaa
site_retaa:
	.inst	0xd65f0bff		// retaa
	.globl	site_ldar
site_ldar:
	ldar	x0, [x1]		// stepped, but never run here
	ret
	.size	never_run, .-never_run

	.section .note.GNU-stack,"",%progbits
