package insn

import "golang.org/x/arch/x86/x86asm"

// TransferKind says how an instruction hands control to code outside its
// function while the function's frame is live (a call) or hands the frame
// over (a jump out of the function: a tail call, or a jump to the
// function's cold part).
type TransferKind uint8

const (
	// DirectCall is a call to a fixed address (call rel32; bl).
	DirectCall TransferKind = iota + 1
	// DirectJump is a jmp or jcc (b, b.cond, cbz, tbz…) to a fixed
	// address outside the function's instructions.
	DirectJump
	// SlotCall is a call through the pointer stored at a fixed address,
	// Slot: call *disp(%rip), or mov disp(%rip),%reg then call *%reg;
	// on arm64 adrp, ldr, blr (a GOT entry, a -fno-plt call).
	SlotCall
	// SlotJump is a jump through the pointer stored at Slot: a PLT
	// entry's jmp *disp(%rip) (arm64: adrp x16, ldr x17, br x17).
	SlotJump
	// JumpTable is an indirect jump through a compiler's jump table at
	// Table (a switch): gcc's and clang's position-independent idiom
	// (lea table(%rip),%B; movslq (%B,%I,4),%R; add %B,%R; jmp *%R),
	// whose entries are 4-byte offsets from Table (TableEntry 4,
	// TableRelative), or jmp *table(,%I,8), whose entries are 8-byte
	// addresses (TableEntry 8). The jump's targets are not checked here.
	JumpTable
	// ComputedJump is an indirect jump to an address computed from one
	// inside the function: jmp *%R where R is the sum of a register and
	// lea label(%rip), label in the function (glibc's hand-written
	// memmove jumps into blocks of its own code so). Table is label.
	ComputedJump
	// FieldCall is a call through a pointer loaded from a structure whose
	// address is loaded from a fixed slot: mov slot(%rip),%Q; mov
	// field(%Q),%R; call *%R (glibc's calls into the vDSO read its entry
	// points from the dynamic linker's _rtld_global_ro so). Slot is the
	// slot's address and Field the offset.
	FieldCall
	// IndirectCall is any other call through a register or memory.
	IndirectCall
	// IndirectJump is any other jump through a register or memory.
	IndirectJump
)

// Transfer is one instruction that runs code outside its function, as
// Transfers finds it.
type Transfer struct {
	// Inst is the instruction (for a SlotCall through a register, the
	// call).
	Inst Inst
	Kind TransferKind
	// Target is the virtual address a DirectCall or DirectJump goes to.
	Target uint64
	// Slot is the virtual address of the pointer a SlotCall or SlotJump
	// goes through.
	Slot uint64
	// Field is the offset of a FieldCall's pointer in its structure.
	Field int64
	// Table is the virtual address of a JumpTable (or a ComputedJump's
	// label), TableEntry the size of its entries in bytes, and
	// TableRelative says they are offsets from Table rather than
	// addresses.
	Table         uint64
	TableEntry    int
	TableRelative bool
	// TableEntries is the number of entries of a JumpTable its bound
	// check (cmp $N,%index; ja) allows, 0 when none was found.
	TableEntries int
}

// transferLookBack bounds how many instructions before an indirect call or
// jump Transfers reads to find where its register came from.
const transferLookBack = 12

// Transfers returns, in order, the instructions of a function through which
// control leaves it while its frame is live or by handing the frame over
// (the instructions FirstCall looks for), each with what it goes to. addr
// is the virtual address of the function's first byte, code its bytes and
// insts their instructions from Decode or DecodeARM64 (all of the
// function). Direct jumps and jccs inside the function are not transfers.
//
// An indirect call or jump is a SlotCall or SlotJump when its pointer is
// loaded from a fixed address by the instruction itself or by a load in
// the same straight-line code just before it (no call, return or
// unconditional jump in between), a FieldCall when it reads the pointer
// from a structure a slot points to, a JumpTable or ComputedJump when it
// follows a jump-table idiom or jumps from a label of the function (x86-64
// only), and otherwise IndirectCall or IndirectJump: what it goes to is
// unknown. What a slot holds is the caller's to find out (the file's
// relocations), and so is where a jump table's entries go.
func Transfers(addr uint64, code []byte, insts []Inst) []Transfer {
	if len(insts) == 0 {
		return nil
	}
	if isARM64(insts) {
		return transfersARM64(addr, insts)
	}
	end := int64(insts[len(insts)-1].End())
	var out []Transfer
	for i, in := range insts {
		call := in.Op == x86asm.CALL || in.Op == x86asm.LCALL
		jump := in.Op == x86asm.JMP || in.Op == x86asm.LJMP
		switch {
		case in.hasTarget && (in.target < 0 || in.target >= end):
			kind := DirectJump
			if call {
				kind = DirectCall
			}
			out = append(out, Transfer{Inst: in, Kind: kind, Target: addr + uint64(in.target)})
		case in.hasTarget:
			if call { // a call into the function itself: recursion, or a pc thunk
				out = append(out, Transfer{Inst: in, Kind: DirectCall, Target: addr + uint64(in.target)})
			}
		case call || jump:
			out = append(out, indirectX86(addr, code, insts, i, call))
		}
	}
	return out
}

// x86At decodes instruction in (of code) again with x86asm, for its
// operands.
func x86At(code []byte, in Inst) (x86asm.Inst, bool) {
	if in.Op == 0 || in.End() > uint64(len(code)) {
		return x86asm.Inst{}, false
	}
	xi, err := x86Decode(code[in.Offset:in.End()])
	if err != nil || xi.Op != in.Op || xi.Len != in.Len {
		return x86asm.Inst{}, false
	}
	return xi, true
}

// indirectX86 classifies the indirect call or jump insts[i].
func indirectX86(addr uint64, code []byte, insts []Inst, i int, call bool) Transfer {
	in := insts[i]
	t := Transfer{Inst: in, Kind: IndirectJump}
	slot := SlotJump
	if call {
		t.Kind, slot = IndirectCall, SlotCall
	}
	xi, ok := x86At(code, in)
	if !ok || in.Op == x86asm.LCALL || in.Op == x86asm.LJMP {
		return t
	}
	switch a := xi.Args[0].(type) {
	case x86asm.Mem:
		switch {
		case a.Segment != 0:
		case a.Base == x86asm.RIP && a.Index == 0:
			t.Kind, t.Slot = slot, addr+uint64(int64(in.End())+disp(a))
		case !call && a.Base == 0 && a.Index != 0 && a.Scale == 8 && disp(a) > 0:
			t.Kind, t.Table, t.TableEntry = JumpTable, uint64(disp(a)), 8
			if x, _, ok := gpr(a.Index); ok {
				t.TableEntries = tableGuard(code, insts, i, x)
			}
		}
	case x86asm.Reg:
		r, size, ok := gpr(a)
		if !ok || size != 8 {
			return t
		}
		j, def, ok := defBefore(code, insts, i, r)
		if !ok {
			return t
		}
		if m, isMem := def.Args[1].(x86asm.Mem); isMem && def.Op == x86asm.MOV && m.Index == 0 && m.Segment == 0 {
			if m.Base == x86asm.RIP {
				t.Kind, t.Slot = slot, addr+uint64(int64(insts[j].End())+disp(m))
				return t
			}
			if q, size, ok := gpr(m.Base); ok && size == 8 && call {
				if k, st, ok := defBefore(code, insts, j, q); ok && st.Op == x86asm.MOV {
					if sm, ok := st.Args[1].(x86asm.Mem); ok && sm.Base == x86asm.RIP && sm.Index == 0 && sm.Segment == 0 {
						t.Kind, t.Slot, t.Field = FieldCall, addr+uint64(int64(insts[k].End())+disp(sm)), disp(m)
						return t
					}
				}
			}
		}
		if !call {
			if table, n, ok := jumpTableBase(addr, code, insts, j, def, r); ok {
				t.Kind, t.Table, t.TableEntry, t.TableRelative, t.TableEntries = JumpTable, table, 4, true, n
			} else if label, ok := computedBase(addr, code, insts, j, def, r); ok {
				t.Kind, t.Table = ComputedJump, label
			}
		}
	}
	return t
}

// writesReg reports whether xi writes general register r (as its first
// operand, the destination in x86asm's Intel order, in any size), or may
// (instructions that write registers they do not name).
func writesReg(xi x86asm.Inst, r int) bool {
	switch xi.Op {
	case x86asm.CPUID, x86asm.RDTSC, x86asm.RDTSCP, x86asm.MUL, x86asm.IMUL, x86asm.DIV, x86asm.IDIV,
		x86asm.CWD, x86asm.CDQ, x86asm.CQO, x86asm.CDQE, x86asm.CWDE, x86asm.CBW, x86asm.SYSCALL,
		x86asm.XCHG, x86asm.XADD, x86asm.CMPXCHG, x86asm.CMPXCHG16B, x86asm.CMPXCHG8B,
		x86asm.LODSB, x86asm.LODSW, x86asm.LODSD, x86asm.LODSQ, x86asm.STOSB, x86asm.STOSW, x86asm.STOSD, x86asm.STOSQ,
		x86asm.MOVSB, x86asm.MOVSW, x86asm.MOVSD, x86asm.MOVSQ, x86asm.SCASB, x86asm.SCASW, x86asm.SCASD, x86asm.SCASQ,
		x86asm.CMPSB, x86asm.CMPSW, x86asm.CMPSD, x86asm.CMPSQ, x86asm.POP, x86asm.PUSH, x86asm.LEAVE, x86asm.ENTER,
		x86asm.RDRAND, x86asm.XGETBV, x86asm.RDPMC, x86asm.RDMSR:
		return true
	}
	switch xi.Op {
	case x86asm.CMP, x86asm.TEST, x86asm.BT:
		return false
	}
	if reg, ok := xi.Args[0].(x86asm.Reg); ok {
		if idx, _, ok := gpr(reg); ok && idx == r {
			return true
		}
	}
	return false
}

// defBefore finds the instruction that last set general register r before
// insts[i], within transferLookBack instructions of straight-line code: it
// fails at a call, return, unconditional jump or an instruction it cannot
// decode.
func defBefore(code []byte, insts []Inst, i, r int) (int, x86asm.Inst, bool) {
	for j := i - 1; j >= 0 && j >= i-transferLookBack; j-- {
		in := insts[j]
		if in.stopsFlow || in.Op == x86asm.CALL || in.Op == x86asm.LCALL {
			return 0, x86asm.Inst{}, false
		}
		xi, ok := x86At(code, in)
		if !ok {
			return 0, x86asm.Inst{}, false
		}
		if writesReg(xi, r) {
			return j, xi, true
		}
	}
	return 0, x86asm.Inst{}, false
}

// jumpTableBase recognizes the position-independent jump-table idiom whose
// sum def (insts[j]) sets register r: add %B,%R or add %R',%B (or lea
// (%B,%R'),%R), where one addend was loaded by movslq (%B,%I,4) and B holds
// lea table(%rip). It returns the table's address and the number of its
// entries its bound check allows (tableGuard), 0 when unknown.
func jumpTableBase(addr uint64, code []byte, insts []Inst, j int, def x86asm.Inst, r int) (table uint64, entries int, ok bool) {
	var p, q int // the two addends
	switch def.Op {
	case x86asm.ADD:
		src, ok := def.Args[1].(x86asm.Reg)
		if !ok {
			return 0, 0, false
		}
		s, size, ok := gpr(src)
		if !ok || size != 8 {
			return 0, 0, false
		}
		p, q = r, s
	case x86asm.LEA:
		m, ok := def.Args[1].(x86asm.Mem)
		if !ok || m.Segment != 0 || m.Disp != 0 || m.Scale != 1 || m.Base == 0 || m.Index == 0 {
			return 0, 0, false
		}
		b, bs, ok1 := gpr(m.Base)
		x, xs, ok2 := gpr(m.Index)
		if !ok1 || !ok2 || bs != 8 || xs != 8 {
			return 0, 0, false
		}
		p, q = b, x
	default:
		return 0, 0, false
	}
	// For add, p (= r) was set before j too; for lea, both were.
	defs := map[int]x86asm.Inst{}
	idx := map[int]int{}
	for _, reg := range []int{p, q} {
		k, xi, ok := defBefore(code, insts, j, reg)
		if !ok {
			return 0, 0, false
		}
		defs[reg], idx[reg] = xi, k
	}
	for _, pair := range [][2]int{{p, q}, {q, p}} {
		base, loaded := pair[0], pair[1]
		ld := defs[loaded]
		m, ok := ld.Args[1].(x86asm.Mem)
		if ld.Op != x86asm.MOVSXD || !ok || m.Segment != 0 || m.Scale != 4 || m.Disp != 0 {
			continue
		}
		if b, _, ok := gpr(m.Base); !ok || b != base {
			continue
		}
		// base must hold the table from before the load as well.
		k, lea, ok := defBefore(code, insts, idx[loaded], base)
		if !ok || lea.Op != x86asm.LEA {
			continue
		}
		lm, ok := lea.Args[1].(x86asm.Mem)
		if !ok || lm.Base != x86asm.RIP || lm.Index != 0 || lm.Segment != 0 {
			continue
		}
		entries := 0
		if x, _, ok := gpr(m.Index); ok {
			entries = tableGuard(code, insts, idx[loaded], x)
		}
		return addr + uint64(int64(insts[k].End())+disp(lm)), entries, true
	}
	return 0, 0, false
}

// tableGuard finds the bound check of a jump table's index register r,
// read by insts[i]: cmp $N, %r (or a register copied into r, or the
// memory r was loaded from) immediately followed by ja or jae, in the
// straight-line code before insts[i]. It
// returns the number of entries the check allows (N+1 for ja, N for jae),
// 0 when it finds none.
func tableGuard(code []byte, insts []Inst, i, r int) int {
	var loadedFrom *x86asm.Mem // the memory r was loaded from
	for j := i - 1; j >= 0 && j >= i-transferLookBack; j-- {
		in := insts[j]
		if in.stopsFlow || in.Op == x86asm.CALL || in.Op == x86asm.LCALL {
			return 0
		}
		xi, ok := x86At(code, in)
		if !ok {
			return 0
		}
		if xi.Op == x86asm.CMP {
			imm, ok := xi.Args[1].(x86asm.Imm)
			checked := false
			switch a := xi.Args[0].(type) {
			case x86asm.Reg:
				idx, _, ok := gpr(a)
				checked = ok && idx == r && loadedFrom == nil
			case x86asm.Mem:
				checked = loadedFrom != nil && a == *loadedFrom
			}
			if ok && checked && imm >= 0 && imm < maxTableGuard && j+1 < i {
				switch insts[j+1].Op {
				case x86asm.JA:
					return int(imm) + 1
				case x86asm.JAE:
					return int(imm)
				}
			}
			continue
		}
		if loadedFrom != nil || !writesReg(xi, r) {
			continue
		}
		if m, ok := xi.Args[1].(x86asm.Mem); ok && (xi.Op == x86asm.MOV || xi.Op == x86asm.MOVZX) && m.Segment == 0 && m.Base != x86asm.RIP {
			// mov or movzx from memory: look for the check of that memory.
			loadedFrom = &m
			continue
		}
		// mov %J,%R (a copy, or the zero-extending mov %Jd,%Rd or
		// movzbl %Jb,%Rd): look for the check of J.
		src, ok := xi.Args[1].(x86asm.Reg)
		if xi.Op != x86asm.MOV && xi.Op != x86asm.MOVZX || !ok {
			return 0
		}
		if r, _, ok = gpr(src); !ok {
			return 0
		}
	}
	return 0
}

// maxTableGuard bounds the entries a jump table's bound check may allow.
const maxTableGuard = 1 << 16

// computedBase recognizes a jump target computed as a register plus a label
// of the function itself: def (insts[j]) is add %B,%R, add %R',%B or
// lea (%B,%R'),%R, and B (or R before the add) holds lea label(%rip) with
// label inside the function's instructions. It returns label's address.
func computedBase(addr uint64, code []byte, insts []Inst, j int, def x86asm.Inst, r int) (uint64, bool) {
	var addends []int
	switch def.Op {
	case x86asm.ADD:
		src, ok := def.Args[1].(x86asm.Reg)
		if !ok {
			return 0, false
		}
		s, size, ok := gpr(src)
		if !ok || size != 8 {
			return 0, false
		}
		addends = []int{r, s}
	case x86asm.LEA:
		m, ok := def.Args[1].(x86asm.Mem)
		if !ok || m.Segment != 0 || m.Base == 0 || m.Index == 0 || m.Base == x86asm.RIP {
			return 0, false
		}
		b, _, ok1 := gpr(m.Base)
		x, _, ok2 := gpr(m.Index)
		if !ok1 || !ok2 {
			return 0, false
		}
		addends = []int{b, x}
	default:
		return 0, false
	}
	end := int64(insts[len(insts)-1].End())
	for _, reg := range addends {
		k, lea, ok := defBefore(code, insts, j, reg)
		if !ok || lea.Op != x86asm.LEA {
			continue
		}
		m, ok := lea.Args[1].(x86asm.Mem)
		if !ok || m.Base != x86asm.RIP || m.Index != 0 || m.Segment != 0 {
			continue
		}
		if label := int64(insts[k].End()) + disp(m); label >= 0 && label < end {
			return addr + uint64(label), true
		}
	}
	return 0, false
}

// transfersARM64 is Transfers for arm64 instructions: bl, b (and the
// conditional branches) out of the function, blr and br (and their
// authenticating forms), which are SlotCall or SlotJump when the register
// was loaded by ldr Xt, [Xn, #imm] from an address adrp put in Xn.
func transfersARM64(addr uint64, insts []Inst) []Transfer {
	end := int64(insts[len(insts)-1].End())
	var out []Transfer
	for i, in := range insts {
		w := in.word
		call := a64IsBl(w) || a64IsBlr(w) || a64IsBlrAuth(w)
		switch {
		case in.hasTarget && (a64IsBl(w) || in.target < 0 || in.target >= end):
			kind := DirectJump
			if call {
				kind = DirectCall
			}
			out = append(out, Transfer{Inst: in, Kind: kind, Target: addr + uint64(in.target)})
		case a64IsBlr(w), a64IsBr(w):
			t := Transfer{Inst: in, Kind: IndirectJump}
			slot := SlotJump
			if call {
				t.Kind, slot = IndirectCall, SlotCall
			}
			if s, ok := a64SlotBefore(addr, insts, i, (w>>5)&31); ok {
				t.Kind, t.Slot = slot, s
			}
			out = append(out, t)
		case a64IsBlrAuth(w):
			out = append(out, Transfer{Inst: in, Kind: IndirectCall})
		case a64IsBrAuth(w):
			out = append(out, Transfer{Inst: in, Kind: IndirectJump})
		}
	}
	return out
}

// a64SlotBefore finds, in the straight-line code just before insts[i],
// ldr X<reg>, [Xn, #imm] and before it adrp Xn, page, and returns the
// address loaded from (page + imm). Any other instruction whose
// destination field (bits 0-4) names the register looked for ends the
// search, as does a branch.
func a64SlotBefore(addr uint64, insts []Inst, i int, reg uint32) (uint64, bool) {
	loaded, base, off := false, uint32(0), uint64(0)
	for j := i - 1; j >= 0 && j >= i-transferLookBack; j-- {
		w := insts[j].word
		if insts[j].stopsFlow || insts[j].hasTarget || a64IsBlr(w) || a64IsBlrAuth(w) {
			return 0, false
		}
		switch {
		case !loaded && w&0xffc00000 == 0xf9400000 && w&31 == reg: // ldr Xt, [Xn, #imm12*8]
			loaded, base, off = true, (w>>5)&31, uint64((w>>10)&0xfff)*8
		case !loaded && w&31 == reg:
			return 0, false
		case loaded && a64IsAdrp(w) && w&31 == base:
			imm := int64(((w>>5)&0x7ffff)<<2|(w>>29)&3) << 43 >> 31 // sign-extended, times 4096
			page := (addr + insts[j].Offset) &^ 0xfff
			return uint64(int64(page)+imm) + off, true
		case loaded && w&31 == base:
			return 0, false
		}
	}
	return 0, false
}

// a64IsAddImm64 reports whether w is add Xd, Xn, #imm (64-bit, no flags).
func a64IsAddImm64(w uint32) bool { return a64Is(w, 0xff800000, 0x91000000) }

// CodeAddresses returns the addresses a function computes from its own
// position (rip-relative lea on x86-64; adrp then add, or adr, on arm64),
// in order, duplicates removed. An ifunc resolver returns one of these:
// the implementations it chooses between.
func CodeAddresses(addr uint64, code []byte, insts []Inst) []uint64 {
	seen := map[uint64]bool{}
	var out []uint64
	add := func(a uint64) {
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	if isARM64(insts) {
		pages := map[uint32]uint64{} // register -> page adrp put there
		for _, in := range insts {
			w := in.word
			pc := addr + in.Offset
			switch {
			case a64IsAdrp(w):
				imm := int64(((w>>5)&0x7ffff)<<2|(w>>29)&3) << 43 >> 31
				pages[w&31] = uint64(int64(pc&^0xfff) + imm)
			case a64IsAdr(w):
				imm := int64(((w>>5)&0x7ffff)<<2|(w>>29)&3) << 43 >> 43
				add(uint64(int64(pc) + imm))
			case a64IsAddImm64(w):
				if page, ok := pages[(w>>5)&31]; ok && (w>>22)&1 == 0 {
					add(page + uint64((w>>10)&0xfff))
				}
			}
		}
		return out
	}
	for _, in := range insts {
		if in.Op != x86asm.LEA {
			continue
		}
		xi, ok := x86At(code, in)
		if !ok {
			continue
		}
		if m, ok := xi.Args[1].(x86asm.Mem); ok && m.Base == x86asm.RIP && m.Index == 0 && m.Segment == 0 {
			add(addr + uint64(int64(in.End())+disp(m)))
		}
	}
	return out
}

// StopsFlow reports whether control never goes on from the instruction to
// the next one: an unconditional jump, a return, or a trap (int3, ud2,
// hlt; on arm64 b, br, ret, eret, brk and udf).
func StopsFlow(in Inst) bool {
	return in.stopsFlow || in.arm64 && (a64Is(in.word, 0xffe0001f, 0xd4200000) || in.word>>16 == 0)
}

// Padding reports whether an instruction is one compilers and assemblers
// put between functions: a nop of any length and prefixes, int3, and on
// arm64 nop and the zero word (udf #0).
func Padding(in Inst) bool {
	if in.arm64 {
		return in.Nop || in.word == 0
	}
	return in.Nop || in.Op == x86asm.NOP || in.Op == x86asm.INT && in.Len == 1
}

// Syscall reports whether an instruction is a system call (syscall; on
// arm64 svc #0).
func Syscall(in Inst) bool {
	if in.arm64 {
		return in.word == 0xd4000001
	}
	return in.Op == x86asm.SYSCALL
}

// disp returns a memory operand's displacement, sign-extended: x86asm
// gives a 32-bit displacement (all but movabs's) as its unsigned value.
func disp(m x86asm.Mem) int64 {
	if m.Disp>>32 == 0 {
		return int64(int32(uint32(m.Disp)))
	}
	return m.Disp
}
