package insn

import "golang.org/x/arch/x86/x86asm"

// CheapEntry returns the offset where an entry probe on a C function is
// cheapest while still seeing the function's arguments and its caller's
// return address at the top of the stack, and the class of the instruction
// there.
//
// That is 4 when the function starts with endbr64 (which the kernel
// single-steps) followed by an instruction the kernel emulates, typically
// push %rbp: endbr64 changes neither registers nor the stack, so the probe
// at +4 sees what a probe at +0 would, and a uretprobe may be placed there
// as well. Otherwise it is 0. With no instructions it returns 0 and
// SingleStepped.
//
// For arm64 instructions (from DecodeARM64) it is always 0, see
// cheapEntryARM64.
func CheapEntry(insts []Inst) (uint64, SiteClass) {
	if len(insts) == 0 {
		return 0, SingleStepped
	}
	if isARM64(insts) {
		return cheapEntryARM64(insts)
	}
	if len(insts) > 1 && insts[0].endbr && insts[1].Class <= Emulated {
		return insts[1].Offset, insts[1].Class
	}
	return 0, insts[0].Class
}

// goPrologue is how many instructions from a Go function's start GoEntry
// looks for the stack check: the largest check (mov, sub, jb, cmp, jbe)
// has five, and ABI0 functions load g first.
const goPrologue = 8

// goMorestackBlock is how many instructions after the stack check's branch
// target GoEntry looks for the call to runtime.morestack and the jump back.
const goMorestackBlock = 64

// GoEntry returns the offset of the first instruction after a Go function's
// stack check, and that instruction's class; 0 and the class of the first
// instruction when the function has no stack check.
//
// Go functions start by comparing the stack pointer (or the stack pointer
// minus the frame size, in %r12) with the goroutine's stack guard at
// 0x10(%r14) (0x10(%rcx) in ABI0 assembly, 0x18 for the system stack) and
// jumping with jbe to a block at the function's end that calls
// runtime.morestack and then jumps back to the function's first
// instruction. When the stack grows, the function's first instructions run
// twice for one call, so an entry probe belongs after the jbe, where it
// fires once per call and the argument registers are still untouched
// (usually on push %rbp, which the kernel emulates). GoEntry recognizes the
// check by the cmp against the guard, the jbe right after it, and a jump
// back to the check's start in the block the jbe targets; functions marked
// nosplit, small leaf functions and most assembly functions have none.
//
// For arm64 instructions (from DecodeARM64) it recognizes the arm64 check
// (ldr x16, [x28, #16]; cmp; b.ls to a block that calls morestack and
// branches back), see goEntryARM64.
func GoEntry(insts []Inst) (uint64, SiteClass) {
	if len(insts) == 0 {
		return 0, SingleStepped
	}
	if isARM64(insts) {
		return goEntryARM64(insts)
	}
	for i := 0; i+2 < len(insts) && i < goPrologue; i++ {
		cmp, jbe := insts[i], insts[i+1]
		if !cmp.guardCmp || jbe.Op != x86asm.JBE || !jbe.hasTarget || jbe.target <= int64(jbe.Offset) {
			continue
		}
		if jumpsBack(insts, uint64(jbe.target), cmp.Offset) {
			return insts[i+2].Offset, insts[i+2].Class
		}
		break
	}
	return 0, insts[0].Class
}

// jumpsBack reports whether the block at offset start calls a function and
// then jumps back to an offset at or before limit (the start of the stack
// check), as the morestack block of a Go function does.
func jumpsBack(insts []Inst, start, limit uint64) bool {
	i := find(insts, start)
	if i < 0 || insts[i].Offset != start {
		return false
	}
	called := false
	for end := min(len(insts), i+goMorestackBlock); i < end; i++ {
		in := insts[i]
		switch {
		case in.Op == x86asm.CALL:
			called = true
		case in.Op == x86asm.JMP:
			return called && in.hasTarget && in.target >= 0 && uint64(in.target) <= limit
		case in.stopsFlow:
			return false
		}
	}
	return false
}

// Returns returns the offsets of every near RET instruction in insts (on
// arm64 every ret, retaa and retab; the kernel refuses to probe the last
// two), in order. Go return probes go there, since kernel uretprobes crash Go
// programs. A function may also leave through a tail jump (Go's ABI
// wrappers and some assembly functions do), by panicking, or by a call that
// never returns; those exits have no RET.
func Returns(insts []Inst) []uint64 {
	var offs []uint64
	for _, in := range insts {
		if in.Ret {
			offs = append(offs, in.Offset)
		}
	}
	return offs
}

// CallsSelf reports whether a function calls its own first instruction
// directly (call on x86-64, bl on arm64): it recurses, so its activations
// can nest deeply.
func CallsSelf(insts []Inst) bool {
	for _, in := range insts {
		isCall := in.Op == x86asm.CALL
		if in.arm64 {
			isCall = a64IsBl(in.word)
		}
		if isCall && in.hasTarget && in.target == 0 {
			return true
		}
	}
	return false
}

// Leaf reports whether a function is a leaf: FirstCall finds nothing in
// it, and its last instruction before any padding stops the flow (a
// return, a jump inside it, a trap), so that control cannot run on past
// the code insts cover (a symbol size shorter than the code). Nothing but
// its own instructions then runs while one of its calls is on the stack,
// but the thread's signal handlers. insts must be all of the function.
func Leaf(insts []Inst) bool {
	if _, calls := FirstCall(insts); calls {
		return false
	}
	for i := len(insts) - 1; i >= 0; i-- {
		if !Padding(insts[i]) {
			return StopsFlow(insts[i])
		}
	}
	return false
}

// FirstCall returns the first instruction of a function through which it
// runs other code while its frame is live, or hands its frame to other
// code: a call, direct or indirect (call; on arm64 bl, blr and the
// authenticating blr), a direct jmp or jcc whose target is outside the
// instructions (a tail call, or a jump to the function's cold part, gcc's
// name.cold, which is not followed), or an indirect jmp (a tail call
// through a pointer or a jump table, which are not told apart; on arm64
// br and the authenticating br). It returns false for a function that has
// none: control stays in its own instructions until it returns.
//
// An exception can unwind through a function's frame only from code that
// frame called, so one without any of these cannot be unwound through
// (unless it is built with -fnon-call-exceptions and a signal handler
// throws, which FirstCall does not consider). Bytes Decode could not read
// are not instructions: insts must be all of the function.
func FirstCall(insts []Inst) (Inst, bool) {
	if len(insts) == 0 {
		return Inst{}, false
	}
	end := int64(insts[len(insts)-1].End())
	for _, in := range insts {
		var call, indirectJump bool
		if in.arm64 {
			call = a64IsBl(in.word) || a64IsBlr(in.word) || a64IsBlrAuth(in.word)
			indirectJump = a64IsBr(in.word) || a64IsBrAuth(in.word)
		} else {
			call = in.Op == x86asm.CALL || in.Op == x86asm.LCALL
			indirectJump = in.Op == x86asm.JMP && !in.hasTarget || in.Op == x86asm.LJMP
		}
		leaves := in.hasTarget && (in.target < 0 || in.target >= end)
		if call || indirectJump || leaves {
			return in, true
		}
	}
	return Inst{}, false
}
