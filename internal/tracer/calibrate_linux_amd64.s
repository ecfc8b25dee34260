// The functions calibration probes (calibrate_linux.go): each kind of first
// instruction the kernel runs differently under a uprobe, each with an
// identical twin that is never probed. They take no arguments, touch no
// register but the ones named, and are only called through callN.
//
// A uretprobe replaces a return address on the stack, which Go's runtime
// must never see (golang/go#22008): here it cannot. callN and the probed
// functions are assembly, never preempted asynchronously and never a
// safe point, so no stack is scanned or moved while the replaced address
// is on it, and NOSPLIT leaves cannot grow the stack.

#include "textflag.h"

// push %rbp: emulated by the kernel in its int3 handler.
TEXT ·calibEmulated(SB), NOSPLIT|NOFRAME, $0-0
	PUSHQ BP
	POPQ BP
	RET

TEXT ·calibEmulatedTwin(SB), NOSPLIT|NOFRAME, $0-0
	PUSHQ BP
	POPQ BP
	RET

// The 5-byte nop 0f 1f 44 00 00: rewritten by kernels with optimized
// uprobes into a call to the uprobe trampoline after its first hit.
TEXT ·calibOptimizable(SB), NOSPLIT|NOFRAME, $0-0
	BYTE $0x0f; BYTE $0x1f; BYTE $0x44; BYTE $0x00; BYTE $0x00
	RET

TEXT ·calibOptimizableTwin(SB), NOSPLIT|NOFRAME, $0-0
	BYTE $0x0f; BYTE $0x1f; BYTE $0x44; BYTE $0x00; BYTE $0x00
	RET

// mov %rdi,%rax: copied out of line and single-stepped.
TEXT ·calibSingleStepped(SB), NOSPLIT|NOFRAME, $0-0
	MOVQ DI, AX
	RET

TEXT ·calibSingleSteppedTwin(SB), NOSPLIT|NOFRAME, $0-0
	MOVQ DI, AX
	RET

// push %rbp again, for an entry uprobe with a uretprobe (the return leg).
TEXT ·calibReturn(SB), NOSPLIT|NOFRAME, $0-0
	PUSHQ BP
	POPQ BP
	RET

TEXT ·calibReturnTwin(SB), NOSPLIT|NOFRAME, $0-0
	PUSHQ BP
	POPQ BP
	RET

// func callN(fn uintptr, n int)
TEXT ·callN(SB), NOSPLIT, $0-16
	MOVQ fn+0(FP), BX
	MOVQ n+8(FP), CX
loop:
	TESTQ CX, CX
	JEQ done
	CALL BX
	DECQ CX
	JMP loop
done:
	RET

// func calibAddresses(out *[8]uintptr)
TEXT ·calibAddresses(SB), NOSPLIT, $0-8
	MOVQ out+0(FP), DI
	LEAQ ·calibEmulated(SB), AX
	MOVQ AX, 0(DI)
	LEAQ ·calibEmulatedTwin(SB), AX
	MOVQ AX, 8(DI)
	LEAQ ·calibOptimizable(SB), AX
	MOVQ AX, 16(DI)
	LEAQ ·calibOptimizableTwin(SB), AX
	MOVQ AX, 24(DI)
	LEAQ ·calibSingleStepped(SB), AX
	MOVQ AX, 32(DI)
	LEAQ ·calibSingleSteppedTwin(SB), AX
	MOVQ AX, 40(DI)
	LEAQ ·calibReturn(SB), AX
	MOVQ AX, 48(DI)
	LEAQ ·calibReturnTwin(SB), AX
	MOVQ AX, 56(DI)
	RET
