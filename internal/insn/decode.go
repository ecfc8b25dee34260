package insn

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"golang.org/x/arch/arm64/arm64asm"
	"golang.org/x/arch/x86/x86asm"
)

// Inst is one decoded instruction of a function.
type Inst struct {
	// Offset is where the instruction starts, counted in bytes from the
	// function's first instruction.
	Offset uint64
	// Len is the instruction's length in bytes, always at least 1.
	Len int
	// Op is the instruction's x86asm opcode, or 0 for the few instructions
	// x86asm does not know (endbr64, endbr32, rdpkru, …; see the package
	// documentation), which Text still names. It is 0 for arm64
	// instructions.
	Op x86asm.Op
	// ARM64Op is, for an instruction of DecodeARM64, its arm64asm opcode,
	// or 0 for words arm64asm does not know (PAC and BTI hints are
	// arm64asm.HINT; Text names them). It is 0 for x86-64 instructions.
	ARM64Op arm64asm.Op
	// Class says how the kernel runs a uprobe placed on the instruction.
	Class SiteClass
	// Ret is true for a near return (ret, ret $imm, rep ret, bnd ret; on
	// arm64 ret, retaa and retab).
	Ret bool
	// Nop is true for an instruction that does nothing: 0x90 (without
	// REX.B, which makes it xchg %r8,%rax) and the multi-byte nops
	// (0f 1f /0, with or without prefixes), as USDT sites are; on arm64
	// the nop hint (d503201f).
	Nop bool
	// Text is the instruction in AT&T syntax (x86asm's GNU syntax, close
	// to objdump's), with branch targets as offsets from the function
	// start, or the instruction's bytes when x86asm does not know it; for
	// arm64 in GNU syntax (arm64asm's, with PAC and BTI hints named), or
	// ".inst 0x…". It is meant for messages.
	Text string

	arm64 bool   // decoded by DecodeARM64
	word  uint32 // arm64: the instruction word

	endbr     bool  // endbr64
	stopsFlow bool  // control never falls through to the next instruction
	hasTarget bool  // a direct jmp, jcc or call
	target    int64 // its target, as an offset from the function start
	guardCmp  bool  // cmp %reg, 0x10/0x18(%r14 or %rcx): a Go stack check
}

// End returns the offset just past the instruction.
func (i Inst) End() uint64 { return i.Offset + uint64(i.Len) }

// Target returns the target of a direct jmp, jcc or call, as an offset
// from the function start (negative or past its end when it leaves the
// function), and false for any other instruction.
func (i Inst) Target() (int64, bool) { return i.target, i.hasTarget }

// Decode decodes code, the bytes of one function starting at its first
// instruction, into instructions in 64-bit mode.
//
// Bytes that cannot be decoded end the sweep: Decode then returns the
// instructions before them together with an error naming their offset. The
// exception is the padding compilers put after a function's last
// instruction: when the undecodable bytes follow an unconditional jump, a
// return or a trap and consist only of int3, nop and zero bytes (a nop cut
// short), Decode returns the instructions before them without error. Complete
// padding instructions (int3, nops) decode normally and are returned.
//
// Decode also fails when a direct jump or call lands inside the function but
// not on an instruction boundary, since that means the linear sweep has lost
// step (data between instructions) and its boundaries cannot be trusted. A
// jump over the prefixes of an instruction (glibc's jump over a lock
// prefix) is accepted; its target is not a boundary.
func Decode(code []byte) ([]Inst, error) { return decode(code, true) }

// decode is Decode; text says whether to fill the instructions' Text.
func decode(code []byte, text bool) ([]Inst, error) {
	if len(code) == 0 {
		return nil, errors.New("decode: no code")
	}
	insts := make([]Inst, 0, len(code)/4+1)
	for off := 0; off < len(code); {
		in, err := decodeOne(code[off:], uint64(off), text)
		if err != nil {
			if n := len(insts); n > 0 && insts[n-1].stopsFlow && isPadding(code[off:]) {
				break
			}
			end := min(off+8, len(code))
			return insts, fmt.Errorf("decode instruction at offset %#x (bytes % x): %w", off, code[off:end], err)
		}
		insts = append(insts, in)
		off += in.Len
	}
	if err := checkTargets(insts, code); err != nil {
		return insts, err
	}
	return insts, nil
}

// isPadding reports whether b consists only of bytes that compilers and
// assemblers use to fill the space between functions: int3, the bytes of
// the multi-byte nops and zeros.
func isPadding(b []byte) bool {
	for _, c := range b {
		switch c {
		case 0xcc, 0x90, 0x00, 0x66, 0x2e, 0x0f, 0x1f, 0x40, 0x44, 0x80, 0x84:
		default:
			return false
		}
	}
	return true
}

// checkTargets checks that every direct branch into the decoded range
// lands on an instruction boundary, or just past the prefixes of one: glibc
// jumps over the lock prefix of an atomic instruction when the process has
// a single thread. That inner offset is not a boundary (a uprobe there would
// turn the locked instruction into lock int3), but the instruction start
// still is.
func checkTargets(insts []Inst, code []byte) error {
	if len(insts) == 0 {
		return nil
	}
	end := insts[len(insts)-1].End()
	for _, in := range insts {
		if !in.hasTarget || in.target < 0 || uint64(in.target) >= end {
			continue
		}
		t := uint64(in.target)
		if i := find(insts, t); i >= 0 && insts[i].Offset != t && !allPrefixes(code[insts[i].Offset:t]) {
			return fmt.Errorf("check branch at offset %#x (%s): its target %#x is inside the instruction at %#x, so the code is not a plain instruction stream",
				in.Offset, in.Text, t, insts[i].Offset)
		}
	}
	return nil
}

// allPrefixes reports whether b consists of legacy prefixes only.
func allPrefixes(b []byte) bool {
	for _, c := range b {
		if !legacyPrefix(c) {
			return false
		}
	}
	return true
}

// find returns the index of the instruction that contains off, or -1.
func find(insts []Inst, off uint64) int {
	i := sort.Search(len(insts), func(i int) bool { return insts[i].End() > off })
	if i < len(insts) && insts[i].Offset <= off {
		return i
	}
	return -1
}

// Boundary checks that off is the start of one of insts, which must come
// from Decode or DecodeARM64 (where the boundaries are the multiples of 4).
// Otherwise the error names off, the instruction that contains
// it and the nearest instruction boundaries before and after it, e.g.
// "offset 0x5 is inside the instruction at 0x4 (4 bytes: sub $0x10,%rsp);
// nearest instruction boundaries: 0x4, 0x8".
func Boundary(insts []Inst, off uint64) error {
	if len(insts) == 0 {
		return fmt.Errorf("offset %#x: no decoded instructions", off)
	}
	i := find(insts, off)
	if i >= 0 && insts[i].Offset == off {
		return nil
	}
	if i < 0 {
		last := insts[len(insts)-1]
		return fmt.Errorf("offset %#x is past the decoded code, which ends at %#x; last instruction boundary: %#x",
			off, last.End(), last.Offset)
	}
	in := insts[i]
	if in.arm64 {
		return fmt.Errorf("offset %#x is not a multiple of 4 (arm64 instructions are 4 bytes and aligned): it is inside the instruction at %#x (%s); nearest instruction boundaries: %#x, %#x",
			off, in.Offset, in.Text, in.Offset, in.End())
	}
	return fmt.Errorf("offset %#x is inside the instruction at %#x (%d bytes: %s); nearest instruction boundaries: %#x, %#x",
		off, in.Offset, in.Len, in.Text, in.Offset, in.End())
}

// decodeOne decodes the instruction at the start of b, which sits at offset
// off of its function; withText says whether to fill its Text.
func decodeOne(b []byte, off uint64, withText bool) (Inst, error) {
	p := prefixEnd(b)
	if n, op, ok := vzero(b, p); ok {
		return finish(b[:n], off, op, strings.ToLower(op.String()), nil), nil
	}
	xi, err := x86Decode(b)
	if err == nil && xi.Op != 0 && xi.Len > 0 && xi.Len <= len(b) {
		text := ""
		if withText {
			text = gnuText(xi, off)
		}
		return finish(b[:xi.Len], off, xi.Op, text, &xi), nil
	}
	if n, text, ok := supplement(b, p); ok {
		return finish(b[:n], off, 0, text, nil), nil
	}
	if k := neutralPrefixes(b); k > 0 && k < len(b) {
		// x86asm rejects some prefixes that do not change the length,
		// such as addr32 before a VEX instruction (OpenSSL pads code
		// with them): decode without them.
		if in, err2 := decodeOne(b[k:], off+uint64(k), withText); err2 == nil && k+in.Len <= 15 {
			out := finish(b[:k+in.Len], off, in.Op, fmt.Sprintf("(prefix % x) %s", b[:k], in.Text), nil)
			out.hasTarget, out.target, out.guardCmp = in.hasTarget, in.target, in.guardCmp
			return out, nil
		}
	}
	if err == nil || errors.Is(err, x86asm.ErrTruncated) {
		// x86asm returns a lone prefix, without error, for bytes it
		// cannot make sense of after a prefix, and for instructions cut
		// short.
		if p >= len(b) || len(b) < 15 && truncatedPrefix(b) {
			return Inst{}, x86asm.ErrTruncated
		}
		return Inst{}, x86asm.ErrUnrecognized
	}
	return Inst{}, err
}

// x86Decode decodes the instruction at the start of b with x86asm in 64-bit
// mode, turning a panic of the decoder into an error.
func x86Decode(b []byte) (xi x86asm.Inst, err error) {
	defer func() {
		if r := recover(); r != nil {
			xi, err = x86asm.Inst{}, fmt.Errorf("x86asm: %v", r)
		}
	}()
	return x86asm.Decode(b, 64)
}

// neutralPrefixes returns how many bytes at the start of b are segment,
// address-size or lock prefixes, which do not change an instruction's length
// in 64-bit mode.
func neutralPrefixes(b []byte) int {
	k := 0
	for k < len(b) && k < 14 {
		switch b[k] {
		case 0x26, 0x2e, 0x36, 0x3e, 0x64, 0x65, 0x67, 0xf0:
			k++
			continue
		}
		break
	}
	return k
}

// truncatedPrefix reports whether b is too short to hold the instruction it
// starts, judged by asking x86asm again with zero bytes appended.
func truncatedPrefix(b []byte) bool {
	var buf [15]byte
	copy(buf[:], b)
	xi, err := x86Decode(buf[:])
	return err == nil && xi.Op != 0 && xi.Len > len(b)
}

// gnuText formats xi in AT&T syntax with branch targets as offsets from the
// function start. (At offset 0, GNUSyntax takes the pc as unknown and
// prints a branch target as .+N.)
func gnuText(xi x86asm.Inst, off uint64) (text string) {
	defer func() {
		if r := recover(); r != nil {
			text = xi.Op.String()
		}
	}()
	return x86asm.GNUSyntax(xi, off, nil)
}

// finish builds the Inst for the instruction bytes b.
func finish(b []byte, off uint64, op x86asm.Op, text string, xi *x86asm.Inst) Inst {
	in := Inst{Offset: off, Len: len(b), Op: op, Text: text}
	in.Class = classify(b)
	in.endbr = len(b) == 4 && b[0] == 0xf3 && b[1] == 0x0f && b[2] == 0x1e && b[3] == 0xfa
	in.Nop = isNop(b)
	switch op {
	case x86asm.RET:
		in.Ret = true
		in.stopsFlow = true
	case x86asm.JMP, x86asm.LRET, x86asm.UD2, x86asm.UD1, x86asm.UD0, x86asm.HLT, x86asm.IRET, x86asm.IRETD, x86asm.IRETQ:
		in.stopsFlow = true
	case x86asm.INT:
		in.stopsFlow = len(b) == 1 // int3
	}
	if xi == nil {
		return in
	}
	for _, a := range xi.Args {
		switch a := a.(type) {
		case x86asm.Rel:
			in.hasTarget = true
			in.target = int64(off) + int64(xi.Len) + int64(a)
		case x86asm.Mem:
			if op == x86asm.CMP && a.Index == 0 && a.Segment == 0 &&
				(a.Base == x86asm.R14 || a.Base == x86asm.RCX) && (a.Disp == 0x10 || a.Disp == 0x18) {
				if r, ok := xi.Args[0].(x86asm.Reg); ok && r >= x86asm.RAX && r <= x86asm.R15 {
					in.guardCmp = true
				}
			}
		}
	}
	return in
}

// isNop reports whether the instruction whose bytes are exactly b is a nop:
// operand-size prefixes, then 0x90 or 0f 1f with a ModRM reg field of 0.
// Other prefixes (rep: pause; segment overrides; lock) and REX.B are not.
func isNop(b []byte) bool {
	p := 0
	for p < len(b) && b[p] == 0x66 {
		p++
	}
	if p < len(b) && b[p]&0xf0 == 0x40 {
		if b[p]&1 != 0 && p+1 < len(b) && b[p+1] == 0x90 {
			return false // xchg %r8,%rax
		}
		p++
	}
	switch {
	case p == len(b)-1:
		return b[p] == 0x90
	case p+2 < len(b):
		return b[p] == 0x0f && b[p+1] == 0x1f && (b[p+2]>>3)&7 == 0
	}
	return false
}

// DecodeOne decodes the one instruction at the start of code, which is at
// offset 0 of its function. Bytes after it are ignored.
func DecodeOne(code []byte) (Inst, error) {
	in, err := decodeOne(code, 0, true)
	if err != nil {
		return Inst{}, fmt.Errorf("decode instruction (bytes % x): %w", code[:min(len(code), 8)], err)
	}
	return in, nil
}

// legacyPrefix reports whether c is a legacy instruction prefix.
func legacyPrefix(c byte) bool {
	switch c {
	case 0x26, 0x2e, 0x36, 0x3e, 0x64, 0x65, 0x66, 0x67, 0xf0, 0xf2, 0xf3:
		return true
	}
	return false
}

// prefixEnd returns the index of the opcode byte in b: past the legacy
// prefixes and an optional REX prefix.
func prefixEnd(b []byte) int {
	p := 0
	for p < len(b) && p < 14 && legacyPrefix(b[p]) {
		p++
	}
	if p < len(b) && b[p]&0xf0 == 0x40 {
		p++
	}
	return p
}

// vzero recognizes vzeroupper and vzeroall (VEX.0F 77), which x86asm
// v0.32.0 decodes as if they had a ModRM byte.
func vzero(b []byte, p int) (int, x86asm.Op, bool) {
	if p >= len(b) {
		return 0, 0, false
	}
	var l byte
	var n int
	switch {
	case b[p] == 0xc5 && p+2 < len(b) && b[p+2] == 0x77:
		l, n = b[p+1]&4, p+3
	case b[p] == 0xc4 && p+3 < len(b) && b[p+1]&0x1f == 1 && b[p+3] == 0x77:
		l, n = b[p+2]&4, p+4
	default:
		return 0, 0, false
	}
	if l != 0 {
		return n, x86asm.VZEROALL, true
	}
	return n, x86asm.VZEROUPPER, true
}

// supplement decodes the length of the instructions x86asm v0.32.0 does not
// know: some of the 0f map (hint nops such as endbr64, groups 7, 9 and 15,
// PadLock, three-byte opcodes) and, through supplementVEX, some VEX and XOP
// ones. p is the index of the opcode byte.
func supplement(b []byte, p int) (int, string, bool) {
	if p+1 >= len(b) {
		return 0, "", false
	}
	if b[p] == 0xc4 || b[p] == 0x8f {
		return supplementVEX(b, p)
	}
	if b[p] != 0x0f {
		return 0, "", false
	}
	var n int
	switch op2 := b[p+1]; {
	case op2 >= 0x18 && op2 <= 0x1f, op2 == 0x0d, op2 == 0xae, op2 == 0xb9:
		// hint nops, endbr, rdssp, MPX, prefetch, group 15, ud1
		m, ok := modrmLen(b, p+2)
		if !ok {
			return 0, "", false
		}
		n = p + 2 + m
	case op2 == 0x01 || op2 == 0xc7 || op2 == 0xa6 || op2 == 0xa7:
		// group 7 (rdpkru, serialize, …), group 9 (rdpid, …) and VIA
		// PadLock (xsha, xcrypt, xstore)
		if p+2 >= len(b) {
			return 0, "", false
		}
		if b[p+2]>>6 == 3 {
			n = p + 3
			break
		}
		m, ok := modrmLen(b, p+2)
		if !ok {
			return 0, "", false
		}
		n = p + 2 + m
	case op2 == 0x38 || op2 == 0x3a:
		// three-byte opcodes (adcx, adox, sha, …); 0f 3a takes an imm8
		m, ok := modrmLen(b, p+3)
		if !ok {
			return 0, "", false
		}
		n = p + 3 + m
		if op2 == 0x3a {
			n++
		}
	default:
		return 0, "", false
	}
	if n > len(b) || n > 15 {
		return 0, "", false
	}
	return n, supplementText(b[:n], p), true
}

// supplementVEX decodes the length of the 3-byte-VEX instructions of the
// 0f 38 and 0f 3a maps and of the AMD XOP instructions that x86asm v0.32.0
// does not know (mulx, FMA4, …). Both prefixes are 3 bytes, followed by
// the opcode, a ModRM byte and, in maps 0f 3a and XOP 8, an imm8 (an imm32
// in XOP map 0a).
func supplementVEX(b []byte, p int) (int, string, bool) {
	if p+4 >= len(b) {
		return 0, "", false
	}
	imm := 0
	switch m := b[p+1] & 0x1f; {
	case b[p] == 0xc4 && m == 2:
	case b[p] == 0xc4 && m == 3, b[p] == 0x8f && m == 8:
		imm = 1
	case b[p] == 0x8f && m == 9:
	case b[p] == 0x8f && m == 0xa:
		imm = 4
	default:
		return 0, "", false
	}
	m, ok := modrmLen(b, p+4)
	if !ok {
		return 0, "", false
	}
	n := p + 4 + m + imm
	if n > len(b) || n > 15 {
		return 0, "", false
	}
	return n, fmt.Sprintf(".byte % #x", b[:n]), true
}

// supplementText names an instruction decoded by supplement.
func supplementText(b []byte, p int) string {
	hasF3 := false
	for _, c := range b[:p] {
		hasF3 = hasF3 || c == 0xf3
	}
	switch {
	case len(b) == 4 && hasF3 && b[p+1] == 0x1e && b[p+2] == 0xfa:
		return "endbr64"
	case len(b) == 4 && hasF3 && b[p+1] == 0x1e && b[p+2] == 0xfb:
		return "endbr32"
	case len(b) == 3 && b[1] == 0x01 && b[2] == 0xee:
		return "rdpkru"
	case len(b) == 3 && b[1] == 0x01 && b[2] == 0xef:
		return "wrpkru"
	}
	return fmt.Sprintf(".byte % #x", b)
}

// modrmLen returns the length of the ModRM byte at b[at] with its SIB byte
// and displacement, asking x86asm to decode nop r/m (0f 1f /0) with the same
// addressing form.
func modrmLen(b []byte, at int) (int, bool) {
	if at >= len(b) {
		return 0, false
	}
	var buf [8]byte
	buf[0], buf[1] = 0x0f, 0x1f
	n := copy(buf[2:], b[at:])
	buf[2] &^= 0x38 // reg field 0: nop r/m
	xi, err := x86Decode(buf[:2+n])
	if err != nil || xi.Op != x86asm.NOP || xi.Len < 3 {
		return 0, false
	}
	return xi.Len - 2, true
}
