package insn

import (
	"bytes"
	"fmt"
)

// SiteClass says how the kernel runs a uprobe placed on an instruction, and
// so what each hit costs. The values are ordered from cheapest to worst.
type SiteClass uint8

const (
	// Optimizable is a 5-byte nop: the kernel handles the first hit with
	// an int3 and then rewrites the nop into a call to a trampoline
	// (about 0.4 µs per hit), unless the nop straddles a page boundary, in
	// which case it stays at the cost of Emulated.
	Optimizable SiteClass = iota
	// Emulated instructions are carried out by the kernel in the int3
	// handler (about 0.5 µs per hit): push %reg, the canonical nops of up
	// to 8 bytes, jmp, call and jcc with a relative target.
	Emulated
	// SingleStepped instructions are copied to a scratch page and
	// single-stepped there (about 11 µs per hit): everything the kernel
	// neither emulates nor refuses, e.g. mov, lea, sub, cmp, endbr64, ret.
	SingleStepped
	// Unsupported instructions are refused by the kernel: attaching a
	// uprobe there fails with ENOTSUPP (error 524). Among them: any
	// instruction with a cs/ds/es/ss segment override or a lock prefix
	// (including notrack jmp and the cs-prefixed nopw of gcc padding),
	// int3, in/out, hlt, int N, 66-prefixed jmp/call/jcc and the VEX/EVEX
	// instructions whose opcode byte the kernel finds invalid in its
	// one-byte opcode table (vmovdqu, vpxor, …).
	Unsupported
	// Unsafe instructions are accepted by the kernel but then run wrongly,
	// corrupting the traced program: VEX/EVEX instructions whose opcode
	// byte is that of a jcc, jmp, call or nop (vpcmpeqb, vmovd, vmovdqu
	// stores, vzeroupper, …) are "emulated" as that branch, so the
	// instruction itself is skipped, and xchg %r8,%rax (REX.B 90) is
	// skipped as a nop.
	Unsafe
)

// String returns "optimizable", "emulated", "single-stepped",
// "unsupported" or "unsafe".
func (c SiteClass) String() string {
	switch c {
	case Optimizable:
		return "optimizable"
	case Emulated:
		return "emulated"
	case SingleStepped:
		return "single-stepped"
	case Unsupported:
		return "unsupported"
	case Unsafe:
		return "unsafe"
	}
	return fmt.Sprintf("SiteClass(%d)", uint8(c))
}

// Probeable reports whether a uprobe may be placed on an instruction of
// class c: the kernel accepts it and runs the instruction correctly.
func (c SiteClass) Probeable() bool { return c <= SingleStepped }

// Classify decodes the instruction at the start of code and returns how the
// kernel runs a uprobe placed on it. Bytes after the first instruction are
// ignored.
func Classify(code []byte) (SiteClass, error) {
	in, err := decodeOne(code, 0, true)
	if err != nil {
		return 0, fmt.Errorf("decode instruction (bytes % x): %w", code[:min(len(code), 8)], err)
	}
	return in.Class, nil
}

// x86nops are the kernel's canonical nops of 1 to 8 bytes (x86_nops in
// arch/x86/include/asm/nops.h), which it emulates. Other nop encodings of
// the same length are single-stepped.
var x86nops = [...][]byte{
	1: {0x90},
	2: {0x66, 0x90},
	3: {0x0f, 0x1f, 0x00},
	4: {0x0f, 0x1f, 0x40, 0x00},
	5: {0x0f, 0x1f, 0x44, 0x00, 0x00},
	6: {0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00},
	7: {0x0f, 0x1f, 0x80, 0x00, 0x00, 0x00, 0x00},
	8: {0x0f, 0x1f, 0x84, 0x00, 0x00, 0x00, 0x00, 0x00},
}

// goodInsns64 is the kernel's table of the one-byte opcodes it accepts
// uprobes on in 64-bit code (good_insns_64 in arch/x86/kernel/uprobes.c):
// bit n of word n/32 stands for opcode n.
var goodInsns64 = func() [8]uint32 {
	rows := [16]uint16{
		0x00: 0b1011_1111_0011_1111, // 06, 07, 0e invalid
		0x01: 0b0011_1111_0011_1111, // 16, 17, 1e, 1f invalid
		0x02: 0b0111_1111_0111_1111, // 27, 2f invalid
		0x03: 0b0111_1111_0111_1111, // 37, 3f invalid
		0x04: 0b1111_1111_1111_1111,
		0x05: 0b1111_1111_1111_1111,
		0x06: 0b0000_1111_1111_1000, // 60-62, 6c-6f (ins/outs) refused
		0x07: 0b1111_1111_1111_1111,
		0x08: 0b1111_1111_1111_1011, // 82 invalid
		0x09: 0b1111_1011_1111_1111, // 9a invalid
		0x0a: 0b1111_1111_1111_1111,
		0x0b: 0b1111_1111_1111_1111,
		0x0c: 0b0000_1111_1111_1111, // cc int3, cd int N, ce, cf iret refused
		0x0d: 0b1111_1111_1000_1111, // d4-d6 invalid
		0x0e: 0b0000_1011_0000_1111, // e4-e7, ea, ec-ef refused
		0x0f: 0b1111_0011_1110_1101, // f1, f4, fa, fb refused
	}
	var t [8]uint32
	for r, bits := range rows {
		t[r/2] |= uint32(bits) << (16 * (r % 2))
	}
	return t
}()

func good64(op byte) bool { return goodInsns64[op/32]&(1<<(op%32)) != 0 }

// classify returns the class of the instruction whose bytes are exactly b,
// following the decisions of arch_uprobe_analyze_insn in Linux 6.18.
func classify(b []byte) SiteClass {
	n := len(b)
	p := 0
	has66 := false
	for p < n && legacyPrefix(b[p]) {
		switch b[p] {
		case 0x26, 0x2e, 0x36, 0x3e, 0xf0: // is_prefix_bad
			return Unsupported
		case 0x66:
			has66 = true
		}
		p++
	}
	var rex byte
	if p < n && b[p]&0xf0 == 0x40 {
		rex = b[p]
		p++
	}
	if p >= n {
		return SingleStepped
	}
	op := b[p]

	// VEX and EVEX: the kernel's decoder takes the byte after the prefix
	// as the (only) opcode byte and then treats it like a one-byte opcode.
	vexLen := 0
	switch op {
	case 0xc5:
		vexLen = 2
	case 0xc4:
		vexLen = 3
	case 0x62:
		vexLen = 4
	}
	if vexLen > 0 {
		if p+vexLen >= n {
			return SingleStepped
		}
		vop := b[p+vexLen]
		switch {
		case !good64(vop):
			return Unsupported
		case vop >= 0x70 && vop <= 0x7f, vop == 0x90, vop == 0xe8, vop == 0xe9, vop == 0xeb:
			return Unsafe
		}
		return SingleStepped
	}

	if !good64(op) {
		return Unsupported
	}
	if op == 0x8e && p+1 < n && (b[p+1]>>3)&7 == 2 { // mov to %ss
		return Unsupported
	}

	// Nops: the canonical ones are emulated; any 5-byte nop is optimized.
	if n < len(x86nops) && bytes.Equal(b, x86nops[n]) {
		if n == 5 {
			return Optimizable
		}
		return Emulated
	}
	if n == 5 && (op == 0x90 || op == 0x0f && p+2 < n && b[p+1] == 0x1f && (b[p+2]>>3)&7 == 0) {
		return Optimizable
	}
	if op == 0x90 { // "prefix* + nop", which includes pause and xchg %r8,%rax
		if rex&1 != 0 {
			return Unsafe
		}
		return Emulated
	}

	isBranch := op == 0xe8 || op == 0xe9 || op == 0xeb || op >= 0x70 && op <= 0x7f ||
		op == 0x0f && p+1 < n && b[p+1] >= 0x80 && b[p+1] <= 0x8f
	if isBranch {
		if has66 {
			return Unsupported
		}
		return Emulated
	}
	if op >= 0x50 && op <= 0x57 && (n == 1 || n == 2 && b[0] == 0x41) {
		return Emulated
	}
	return SingleStepped
}
