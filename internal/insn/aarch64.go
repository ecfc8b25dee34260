package insn

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/arch/arm64/arm64asm"

	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

// ARM64InstLen is the length in bytes of every arm64 instruction.
const ARM64InstLen = 4

// DecodeFor decodes code, the bytes of one function starting at its first
// instruction, for architecture a (regs.ArchOf of the traced file's
// machine): [Decode] for amd64, [DecodeARM64] for arm64.
func DecodeFor(a regs.Arch, code []byte) ([]Inst, error) {
	switch a {
	case regs.ArchAMD64:
		return Decode(code)
	case regs.ArchARM64:
		return DecodeARM64(code)
	}
	return nil, fmt.Errorf("decode: unsupported architecture %v", a)
}

// DecodeFlow is DecodeFor without the instructions' Text (empty), for
// analyses that read many functions and name few of their instructions
// (the call graph of a file's exception exits): formatting is about half
// of the time Decode takes.
func DecodeFlow(a regs.Arch, code []byte) ([]Inst, error) {
	switch a {
	case regs.ArchAMD64:
		return decode(code, false)
	case regs.ArchARM64:
		return decodeARM64(code, false)
	}
	return nil, fmt.Errorf("decode: unsupported architecture %v", a)
}

// ClassifyFor returns how the kernel runs a uprobe placed on the
// instruction at the start of code, for architecture a: [Classify] for
// amd64, [ClassifyARM64] for arm64.
func ClassifyFor(a regs.Arch, code []byte) (SiteClass, error) {
	switch a {
	case regs.ArchAMD64:
		return Classify(code)
	case regs.ArchARM64:
		return ClassifyARM64(code)
	}
	return 0, fmt.Errorf("classify: unsupported architecture %v", a)
}

// DecodeARM64 decodes code, the bytes of one arm64 function starting at
// its first instruction, into its 4-byte little-endian instructions.
//
// Every instruction is 4 bytes and functions start 4-byte aligned, so the
// instruction boundaries are the offsets that are multiples of 4 and a
// sweep cannot lose step as it can on x86-64. Words arm64asm does not know
// (newer extensions, padding such as Go's zero words, data of a literal
// pool) are listed too, with Text ".inst 0x…" and ARM64Op 0, and classified
// by their bits as the kernel would, except that the instructions between
// an exclusive load and its exclusive store are Unsafe (see
// markExclusiveSequences). DecodeARM64 fails only for no code or
// a length that is not a multiple of 4; it then returns the complete
// instructions before the trailing bytes.
func DecodeARM64(code []byte) ([]Inst, error) { return decodeARM64(code, true) }

// decodeARM64 is DecodeARM64; text says whether to fill the instructions'
// Text.
func decodeARM64(code []byte, text bool) ([]Inst, error) {
	if len(code) == 0 {
		return nil, errors.New("decode: no code")
	}
	n := len(code) / ARM64InstLen
	insts := make([]Inst, 0, n)
	for i := 0; i < n; i++ {
		off := uint64(i * ARM64InstLen)
		insts = append(insts, decodeARM64Word(binary.LittleEndian.Uint32(code[off:]), off, text))
	}
	markExclusiveSequences(insts)
	if rest := len(code) % ARM64InstLen; rest != 0 {
		return insts, fmt.Errorf("decode instruction at offset %#x: %d trailing bytes, not a whole 4-byte instruction", n*ARM64InstLen, rest)
	}
	return insts, nil
}

// maxExclusiveSequence is how many instructions after an exclusive load
// markExclusiveSequences looks for the exclusive store that ends the
// sequence, as the kernel's kprobes check does (MAX_ATOMIC_CONTEXT_SIZE).
const maxExclusiveSequence = 16

// markExclusiveSequences marks Unsafe the probeable instructions between an
// exclusive load (ldxr, ldaxr, ldxp, ldaxp) and the exclusive store (stxr,
// stlxr, stxp, stlxp) that follows it within maxExclusiveSequence
// instructions. A uprobe there returns to user space through an exception
// return, which clears the exclusive monitor, so the store always fails and
// the usual retry loop never ends. The kernel checks this for kprobes
// (is_probed_address_atomic) but not for uprobes.
func markExclusiveSequences(insts []Inst) {
	for i := range insts {
		if !a64IsLoadExclusive(insts[i].word) {
			continue
		}
		for j := i + 1; j < len(insts) && j <= i+maxExclusiveSequence; j++ {
			if a64IsStoreExclusive(insts[j].word) {
				for k := i + 1; k < j; k++ {
					if insts[k].Class.Probeable() {
						insts[k].Class = Unsafe
					}
				}
				break
			}
			if a64IsLoadExclusive(insts[j].word) {
				break
			}
		}
	}
}

// a64IsLoadExclusive reports an exclusive load: ldxr, ldaxr (all sizes),
// ldxp, ldaxp; not the ordered ldar nor casp, which share the encoding
// space.
func a64IsLoadExclusive(w uint32) bool {
	return a64IsExclusive(w) && w&(1<<22) != 0 && !a64IsCasp(w)
}

// a64IsStoreExclusive reports an exclusive store: stxr, stlxr, stxp, stlxp.
func a64IsStoreExclusive(w uint32) bool {
	return a64IsExclusive(w) && w&(1<<22) == 0 && !a64IsCasp(w)
}

// a64IsCasp reports casp, caspa, caspl and caspal.
func a64IsCasp(w uint32) bool { return a64Is(w, 0xbfa07c00, 0x08207c00) }

// ClassifyARM64 returns how the kernel runs a uprobe placed on the arm64
// instruction in the first 4 bytes of code (little-endian). Bytes after it
// are ignored. See classifyARM64 for the kernel's rules. An instruction
// inside an exclusive load/store sequence is Unsafe although ClassifyARM64,
// which sees one instruction, calls it SingleStepped or Emulated; DecodeARM64
// sees the sequence and says so.
func ClassifyARM64(code []byte) (SiteClass, error) {
	if len(code) < ARM64InstLen {
		return 0, fmt.Errorf("classify: %d bytes, want a 4-byte arm64 instruction", len(code))
	}
	return classifyARM64(binary.LittleEndian.Uint32(code)), nil
}

// decodeARM64Word builds the Inst of the instruction word w at offset off
// of its function.
func decodeARM64Word(w uint32, off uint64, text bool) Inst {
	in := Inst{Offset: off, Len: ARM64InstLen, Class: classifyARM64(w), Nop: w == a64Nop, arm64: true, word: w}
	xi, err := arm64Decode(w)
	switch {
	case err == nil:
		in.ARM64Op = xi.Op
		if text {
			in.Text = arm64Text(xi, w, off)
		}
	case text:
		in.Text = arm64Name(w)
		if in.Text == "" {
			in.Text = fmt.Sprintf(".inst %#08x", w)
		}
	}
	in.Ret = a64IsRet(w) || a64IsRetAuth(w)
	in.stopsFlow = a64IsB(w) || a64IsBr(w) || a64IsBrAuth(w) || in.Ret || a64IsEret(w) || a64IsEretAuth(w)
	if t, ok := a64BranchOffset(w); ok {
		in.hasTarget = true
		in.target = int64(off) + t
	}
	return in
}

// arm64Decode decodes one word with arm64asm, turning a panic of the
// decoder into an error.
func arm64Decode(w uint32) (xi arm64asm.Inst, err error) {
	defer func() {
		if r := recover(); r != nil {
			xi, err = arm64asm.Inst{}, fmt.Errorf("arm64asm: %v", r)
		}
	}()
	var b [ARM64InstLen]byte
	binary.LittleEndian.PutUint32(b[:], w)
	return arm64asm.Decode(b[:])
}

// arm64Text formats xi in GNU syntax, naming the hints arm64asm v0.32.0
// prints as "hint #N" (paciasp, bti c, …) and giving the targets of direct
// branches, adr and literal loads as offsets from the function start.
func arm64Text(xi arm64asm.Inst, w uint32, off uint64) (text string) {
	defer func() {
		if r := recover(); r != nil {
			text = strings.ToLower(xi.Op.String())
		}
	}()
	if name := arm64Name(w); name != "" {
		return name
	}
	text = strings.TrimSpace(arm64asm.GNUSyntax(xi))
	if a64IsAdrp(w) {
		return text // relative to the 4 KiB page of the pc, not to the pc
	}
	for _, a := range xi.Args {
		if rel, ok := a.(arm64asm.PCRel); ok {
			// Branches, adr and literal loads: an offset from the
			// function's start.
			return strings.Replace(text, rel.String(), fmt.Sprintf("%#x", int64(off)+int64(rel)), 1)
		}
	}
	return text
}

// arm64Name names the instructions arm64asm v0.32.0 does not know or
// prints as plain hints: pointer authentication, BTI, speculation barriers,
// the authenticating branches and returns, and the MOPS memory copy and
// set instructions. It returns "" for others.
func arm64Name(w uint32) string {
	if a64IsHint(w) {
		switch (w >> 5) & 0x7f {
		case 0x07:
			return "xpaclri"
		case 0x08:
			return "pacia1716"
		case 0x0a:
			return "pacib1716"
		case 0x0c:
			return "autia1716"
		case 0x0e:
			return "autib1716"
		case 0x10:
			return "esb"
		case 0x11:
			return "psb csync"
		case 0x12:
			return "tsb csync"
		case 0x14:
			return "csdb"
		case 0x16:
			return "clearbhb"
		case 0x18:
			return "paciaz"
		case 0x19:
			return "paciasp"
		case 0x1a:
			return "pacibz"
		case 0x1b:
			return "pacibsp"
		case 0x1c:
			return "autiaz"
		case 0x1d:
			return "autiasp"
		case 0x1e:
			return "autibz"
		case 0x1f:
			return "autibsp"
		case 0x20:
			return "bti"
		case 0x22:
			return "bti c"
		case 0x24:
			return "bti j"
		case 0x26:
			return "bti jc"
		}
		return ""
	}
	switch {
	case w == 0xd65f0bff:
		return "retaa"
	case w == 0xd65f0fff:
		return "retab"
	case a64IsEretAuth(w):
		return "eretaa/eretab"
	case a64IsBrAuth(w) || a64IsBlrAuth(w):
		name := "br"
		if a64IsBlrAuth(w) {
			name = "blr"
		}
		name += "a"
		if w&(1<<10) == 0 {
			name += "a"
		} else {
			name += "b"
		}
		if w&(1<<24) == 0 {
			return fmt.Sprintf("%sz x%d", name, (w>>5)&31)
		}
		return fmt.Sprintf("%s x%d, %s", name, (w>>5)&31, a64RegName(w&31))
	case a64IsMops(w):
		return ".inst (memory copy/set)"
	}
	return ""
}

// classifyARM64 returns the class of the arm64 instruction word w,
// following arch_uprobe_analyze_insn and arm_probe_decode_insn
// (arch/arm64/kernel/probes/uprobes.c, decode-insn.c, Linux 6.13–6.18).
// The kernel's verdicts map onto SiteClass as:
//
//   - INSN_GOOD_NO_SLOT (simulated in the breakpoint handler, no return
//     to user space before the probe completes): Emulated. These are nop
//     (since Linux 6.13; 6.1–6.12 step it out of line), b, bl, b.cond,
//     cbz, cbnz, tbz, tbnz, br, blr, ret, adr and adrp.
//   - INSN_GOOD (copied to the XOL page and single-stepped there):
//     SingleStepped. That is every instruction aarch64_insn_is_steppable
//     accepts: loads and stores other than exclusive and literal ones, data
//     processing, barriers, system instructions, mrs (except of DAIF), and
//     the hints nop, bti and the PAC signing hints (paciasp, pacibsp,
//     paciaz, pacibz, pacia1716, pacib1716, xpaclri).
//   - INSN_REJECTED (uprobe registration fails with EINVAL): Unsupported.
//     Exclusive loads and stores (ldxr, stxr, ldaxr, stlxr, ldxp, stxp, …,
//     and casp, which shares their encoding space), ldr and ldrsw (literal)
//     and prfm (literal) (simulated for uprobes before the fix "arm64:
//     probes: Remove broken LDR (literal) uprobe support", Linux 6.12 and
//     its stable backports, which read user memory unsafely), the MOPS
//     copy/set instructions (6.12+), exception-generating instructions
//     (svc, hvc, smc, brk, hlt, dcps*), msr (register and immediate),
//     mrs of DAIF, eret, the authenticating branches and returns (braa,
//     blraa, retaa, …), and all other hints (autiasp and the other PAC
//     authentication hints, yield, wfe, wfi, sev, sevl, esb, csdb, …).
//
// Unsafe is the SIMD&FP ldr (literal) (ldr s0/d0/q0, label): the kernel's
// literal check covers only the general-purpose forms, so it steps the
// instruction out of line, where it loads from the wrong address.
func classifyARM64(w uint32) SiteClass {
	if w == a64Nop {
		return Emulated
	}
	if a64Steppable(w) {
		if a64IsLdrLitSIMD(w) {
			return Unsafe
		}
		return SingleStepped
	}
	switch {
	case a64IsBcond(w), a64IsCbz(w), a64IsCbnz(w), a64IsTbz(w), a64IsTbnz(w),
		a64IsAdr(w), a64IsAdrp(w), a64IsB(w), a64IsBl(w), a64IsBr(w), a64IsBlr(w), a64IsRet(w):
		return Emulated
	}
	return Unsupported
}

// a64Steppable is aarch64_insn_is_steppable of decode-insn.c.
func a64Steppable(w uint32) bool {
	if a64IsClassBranchSys(w) {
		if a64IsBranch(w) || a64IsMsrImm(w) || a64IsMsrReg(w) || a64IsException(w) || a64IsEret(w) || a64IsEretAuth(w) {
			return false
		}
		if a64IsMrs(w) {
			return (w&0x1fffe0)>>5 != a64SysregDAIF
		}
		if a64IsHint(w) {
			return a64IsSteppableHint(w)
		}
		return true
	}
	return !(a64UsesLiteral(w) || a64IsExclusive(w) || a64IsMops(w))
}

// The encodings below are those of arch/arm64/include/asm/insn.h, whose
// __AARCH64_INSN_FUNCS(name, mask, value) test (insn & mask) == value.
const (
	a64Nop        = 0xd503201f
	a64SysregDAIF = 0xda11
)

func a64Is(w, mask, value uint32) bool { return w&mask == value }

func a64IsClassBranchSys(w uint32) bool { return a64Is(w, 0x1c000000, 0x14000000) }
func a64IsAdr(w uint32) bool            { return a64Is(w, 0x9f000000, 0x10000000) }
func a64IsAdrp(w uint32) bool           { return a64Is(w, 0x9f000000, 0x90000000) }
func a64IsPrfmLit(w uint32) bool        { return a64Is(w, 0xff000000, 0xd8000000) }
func a64IsLdrLit(w uint32) bool         { return a64Is(w, 0xbf000000, 0x18000000) }
func a64IsLdrswLit(w uint32) bool       { return a64Is(w, 0xff000000, 0x98000000) }
func a64IsExclusive(w uint32) bool      { return a64Is(w, 0x3f800000, 0x08000000) }
func a64IsMops(w uint32) bool           { return a64Is(w, 0x3b200c00, 0x19000400) }
func a64IsB(w uint32) bool              { return a64Is(w, 0xfc000000, 0x14000000) }
func a64IsBl(w uint32) bool             { return a64Is(w, 0xfc000000, 0x94000000) }
func a64IsCbz(w uint32) bool            { return a64Is(w, 0x7f000000, 0x34000000) }
func a64IsCbnz(w uint32) bool           { return a64Is(w, 0x7f000000, 0x35000000) }
func a64IsTbz(w uint32) bool            { return a64Is(w, 0x7f000000, 0x36000000) }
func a64IsTbnz(w uint32) bool           { return a64Is(w, 0x7f000000, 0x37000000) }
func a64IsBcond(w uint32) bool          { return a64Is(w, 0xff000010, 0x54000000) }
func a64IsException(w uint32) bool      { return a64Is(w, 0xff000000, 0xd4000000) }
func a64IsHint(w uint32) bool           { return a64Is(w, 0xfffff01f, 0xd503201f) }
func a64IsBr(w uint32) bool             { return a64Is(w, 0xfffffc1f, 0xd61f0000) }
func a64IsBrAuth(w uint32) bool         { return a64Is(w, 0xfefff800, 0xd61f0800) }
func a64IsBlr(w uint32) bool            { return a64Is(w, 0xfffffc1f, 0xd63f0000) }
func a64IsBlrAuth(w uint32) bool        { return a64Is(w, 0xfefff800, 0xd63f0800) }
func a64IsRet(w uint32) bool            { return a64Is(w, 0xfffffc1f, 0xd65f0000) }
func a64IsRetAuth(w uint32) bool        { return a64Is(w, 0xfffffbff, 0xd65f0bff) }
func a64IsEret(w uint32) bool           { return a64Is(w, 0xffffffff, 0xd69f03e0) }
func a64IsEretAuth(w uint32) bool       { return a64Is(w, 0xfffffbff, 0xd69f0bff) }
func a64IsMrs(w uint32) bool            { return a64Is(w, 0xfff00000, 0xd5300000) }
func a64IsMsrImm(w uint32) bool         { return a64Is(w, 0xfff8f01f, 0xd500401f) }
func a64IsMsrReg(w uint32) bool         { return a64Is(w, 0xfff00000, 0xd5100000) }

// a64IsLdrLitSIMD reports an ldr (literal) into a SIMD&FP register (opc
// 00, 01 or 10 with V=1: ldr s, d or q), which aarch64_insn_uses_literal
// does not cover.
func a64IsLdrLitSIMD(w uint32) bool {
	return a64Is(w, 0x3f000000, 0x1c000000) && w>>30 != 3
}

func a64UsesLiteral(w uint32) bool {
	return a64IsLdrLit(w) || a64IsLdrswLit(w) || a64IsAdr(w) || a64IsAdrp(w) || a64IsPrfmLit(w)
}

// a64IsBranch is aarch64_insn_is_branch: b, bl, cb*, tb*, ret*, b.cond,
// br*, blr*.
func a64IsBranch(w uint32) bool {
	return a64IsB(w) || a64IsBl(w) || a64IsCbz(w) || a64IsCbnz(w) || a64IsTbz(w) || a64IsTbnz(w) ||
		a64IsRet(w) || a64IsRetAuth(w) || a64IsBr(w) || a64IsBrAuth(w) || a64IsBlr(w) || a64IsBlrAuth(w) ||
		a64IsBcond(w)
}

// a64IsSteppableHint is aarch64_insn_is_steppable_hint: nop, the PAC
// signing hints and bti may be stepped out of line.
func a64IsSteppableHint(w uint32) bool {
	if !a64IsHint(w) {
		return false
	}
	switch (w & 0xfe0) >> 5 {
	case 0x07, 0x08, 0x0a, 0x18, 0x19, 0x1a, 0x1b, 0x20, 0x22, 0x24, 0x26, 0x00:
		return true
	}
	return false
}

// a64BranchOffset returns the target of a direct branch (b, bl, b.cond,
// cbz, cbnz, tbz, tbnz) relative to the branch itself, in bytes.
func a64BranchOffset(w uint32) (int64, bool) {
	switch {
	case a64IsB(w), a64IsBl(w):
		return int64(int32(w<<6)>>6) * 4, true
	case a64IsBcond(w), a64IsCbz(w), a64IsCbnz(w):
		return int64(int32(w<<8)>>13) * 4, true
	case a64IsTbz(w), a64IsTbnz(w):
		return int64(int32(w<<13)>>18) * 4, true
	}
	return 0, false
}

// a64RegName names general-purpose register number n where 31 is sp.
func a64RegName(n uint32) string {
	if n == 31 {
		return "sp"
	}
	return fmt.Sprintf("x%d", n)
}

// a64Cond returns the condition of a b.cond.
func a64Cond(w uint32) uint32 { return w & 0xf }

// The conditions of b.cond GoEntry looks for.
const (
	a64CondLS = 0x9 // unsigned lower or same
)

// a64GuardLoad reports whether w is "ldr xN, [x28, #16]" (or #24): Go's
// load of the goroutine's stack guard (g.stackguard0, or stackguard1 on the
// system stack) from g in x28, the first instruction of a stack check.
func a64GuardLoad(w uint32) bool {
	if !a64Is(w, 0xffc00000, 0xf9400000) || (w>>5)&31 != 28 {
		return false
	}
	imm := (w >> 10) & 0xfff
	return imm == 2 || imm == 3
}

// goPrologueARM64 is how many instructions from a Go arm64 function's start
// goEntryARM64 looks for the stack guard load, and how many after it for
// the b.ls: the largest check (ldr, mov, subs, b.lo, cmp, b.ls) has six.
const goPrologueARM64 = 8

// goEntryARM64 is GoEntry for arm64 code. A Go arm64 function checks its
// stack with
//
//	ldr  x16, [x28, #16]     // MOVD 16(g), R16: the stack guard
//	cmp  sp, x16             // CMP R16, RSP (or sub x17, sp, #frame; cmp x17, x16)
//	b.ls morestack           // BLS
//
// (large frames add mov x27, #frame; subs x17, sp, x27; b.lo morestack
// before the cmp), and the block at morestack saves the argument registers,
// calls runtime.morestack_noctxt with bl and jumps back to the function's
// first instruction with b. The entry probe belongs on the instruction
// after the b.ls, typically "str x30, [sp, #-N]!" (single-stepped).
func goEntryARM64(insts []Inst) (uint64, SiteClass) {
	for g := 0; g < len(insts) && g < goPrologueARM64; g++ {
		if !a64GuardLoad(insts[g].word) {
			continue
		}
		for i := g + 1; i+1 < len(insts) && i <= g+goPrologueARM64; i++ {
			bls := insts[i]
			if !a64IsBcond(bls.word) || a64Cond(bls.word) != a64CondLS || bls.target <= int64(bls.Offset) {
				continue
			}
			if jumpsBackARM64(insts, uint64(bls.target), insts[g].Offset) {
				return insts[i+1].Offset, insts[i+1].Class
			}
			break
		}
		break
	}
	return 0, insts[0].Class
}

// jumpsBackARM64 reports whether the block at offset start calls a function
// with bl and then branches back with b to an offset at or before limit,
// as the morestack block of a Go arm64 function does.
func jumpsBackARM64(insts []Inst, start, limit uint64) bool {
	i := find(insts, start)
	if i < 0 || insts[i].Offset != start {
		return false
	}
	called := false
	for end := min(len(insts), i+goMorestackBlock); i < end; i++ {
		in := insts[i]
		switch {
		case a64IsBl(in.word):
			called = true
		case a64IsB(in.word):
			return called && in.target >= 0 && uint64(in.target) <= limit
		case in.stopsFlow:
			return false
		}
	}
	return false
}

// cheapEntryARM64 is CheapEntry for arm64 code: always the first
// instruction. No prologue instruction is cheaper to probe than another
// (the kernel simulates only branches, adr/adrp and, since 6.13, nop; it
// single-steps bti, paciasp, stp and mov alike), and probing past paciasp
// would see x30 signed, which a uretprobe must not replace.
func cheapEntryARM64(insts []Inst) (uint64, SiteClass) {
	return 0, insts[0].Class
}

// isARM64 reports whether insts came from DecodeARM64.
func isARM64(insts []Inst) bool { return len(insts) > 0 && insts[0].arm64 }
