package insn

import (
	"fmt"
	"sort"

	"golang.org/x/arch/x86/x86asm"
)

// Piece is one contiguous part of a function's x86-64 code: the function
// itself, or a part the compiler moved elsewhere (gcc's name.cold).
type Piece struct {
	// Address is the virtual address of Code's first byte.
	Address uint64
	// Code is the part's bytes and Insts their instructions, from Decode.
	Code  []byte
	Insts []Inst
}

// StackUse is what RedZone found out about a function: whether it may keep
// live data below its stack pointer, in the red zone the x86-64 ABI gives
// leaf functions (the 128 bytes below %rsp, which signal handlers skip),
// and where. Any code that writes below %rsp while a value there is live —
// the call and the pushes of the kernel's optimized uprobe path on a 5-byte
// nop do — changes what the function computes.
type StackUse struct {
	// Below says the function may keep data below %rsp: some instruction
	// addresses memory below it, or does something the analysis cannot
	// follow (it is conservative: what it cannot prove safe is unsafe).
	Below bool
	// At is the virtual address of the first such instruction (by
	// address), Text that instruction, and Why what it does, e.g. "writes
	// 4 bytes at 0x14 bytes below %rsp". Empty when Below is false.
	At   uint64
	Text string
	Why  string

	entry    uint64 // the function's entry address
	entryEnd uint64 // addresses in [entry, entryEnd] see the stack as at entry
}

// SafeAt reports whether nothing below %rsp can be live at the instruction at
// virtual address addr of the function: at the function's entry (the caller's
// call left nothing there: below the return address is the callee's), on
// the first instructions when they only mark the entry (endbr64, nops,
// reached only from the entry), and anywhere in a function that never
// addresses memory below its stack pointer.
func (u StackUse) SafeAt(addr uint64) bool {
	return addr == u.entry || !u.Below || addr >= u.entry && addr <= u.entryEnd
}

// Unproven returns the StackUse of a function at entry whose code could
// not be analysed (it could not be read or decoded): only its entry is
// safe.
func Unproven(entry uint64, why string) StackUse {
	return StackUse{Below: true, At: entry, Why: why, entry: entry, entryEnd: entry}
}

// Reason is one phrase naming where and how the function uses memory below
// its stack pointer, e.g. "movl %edi,-0x14(%rbp) at +0x4 writes 4 bytes at
// 0x14 bytes below %rsp"; "" when it does not.
func (u StackUse) Reason() string {
	if !u.Below {
		return ""
	}
	where := fmt.Sprintf("%#x", u.At)
	if u.At >= u.entry {
		where = fmt.Sprintf("+%#x", u.At-u.entry)
	}
	if u.Text == "" {
		return fmt.Sprintf("at %s it %s", where, u.Why)
	}
	return fmt.Sprintf("%s at %s %s", u.Text, where, u.Why)
}

// redZoneMaxInsts bounds the instructions RedZone analyses; a larger
// function is reported as unproven.
const redZoneMaxInsts = 1 << 17

// redZoneMaxRounds bounds the passes over one block before the analysis
// gives up (loops that move the stack pointer without bound).
const redZoneMaxRounds = 64

// RedZone analyses an x86-64 function, pieces[0] being the part that holds
// its entry (at pieces[0].Address) and the others its parts elsewhere
// (gcc's name.cold), and says whether it may keep live data below its stack
// pointer.
//
// It follows, from the entry, the value of the stack pointer and of every
// general register derived from it, as an offset from %rsp at entry (the
// frame pointer after push %rbp; mov %rsp,%rbp is entry-8), through push,
// pop, call, leave, enter, add, sub, lea, mov and xchg, and merges them
// where paths join. An instruction is a use of the red zone when it
// addresses memory below the current %rsp through %rsp, through a register
// derived from it, or with such a register as an index; when it computes
// an address below %rsp (lea); and an instruction is unproven when it
// addresses memory relative to a register derived from %rsp in a way the
// analysis does not follow (masked, scaled, indexed), relative to the
// frame after %rsp moved by an unknown amount (alloca), when it is not an
// instruction the analysis knows, or when control leaves for code it
// cannot follow: a direct jump out of the pieces that tailCall does not
// call a function entry (a tail call), or code running past its end.
// Indirect jumps may land anywhere: their state reaches every instruction.
// Code no path reaches starts from the state after the function's calls
// (exception landing pads, where the unwinder enters) merged with the
// states of its indirect jumps; without calls and indirect jumps it is dead
// code and not checked, and neither is alignment padding.
//
// It assumes compiled code follows the ABI: memory a function released
// (above a %rsp that went up) is not read again through a pointer kept
// in memory, and callees preserve %rbx, %rbp, %r12-%r15 and %rsp. Pointers
// into the frame stored to memory are therefore not followed.
func RedZone(pieces []Piece, tailCall func(addr uint64) bool) StackUse {
	if len(pieces) == 0 || len(pieces[0].Insts) == 0 {
		return StackUse{Below: true, Why: "has no decoded code"}
	}
	a := newRedZoneAnalysis(pieces, tailCall)
	u := a.run()
	u.entry = pieces[0].Address
	u.entryEnd = a.entryRun()
	return u
}

// rzKind says what the analysis knows of a register's value.
type rzKind uint8

const (
	rzUnknown rzKind = iota // not derived from the stack pointer
	rzStack                 // %rsp at entry + off
	rzAtLeast               // at least %rsp at entry + off (a pointer moving up a frame)
	rzDerived               // derived from %rsp in a way not followed
)

// pointsInto says whether v is a known or bounded address in the frame.
func (v rzVal) pointsInto() bool { return v.kind == rzStack || v.kind == rzAtLeast }

type rzVal struct {
	kind rzKind
	off  int64
}

// rzSP says what the analysis knows of the stack pointer.
type rzSPKind uint8

const (
	spExact  rzSPKind = iota // %rsp = entry + off
	spAtMost                 // %rsp <= entry + off
	spLost                   // unknown
)

type rzState struct {
	reached bool
	sp      rzSPKind
	spOff   int64
	reg     [16]rzVal // index 4 (%rsp) is unused: sp holds it
}

func (s *rzState) spVal() rzVal {
	if s.sp == spExact {
		return rzVal{rzStack, s.spOff}
	}
	return rzVal{kind: rzDerived}
}

func (s *rzState) setSP(v rzVal) {
	if v.kind == rzStack {
		s.sp, s.spOff = spExact, v.off
		return
	}
	s.sp, s.spOff = spLost, 0
}

func (s *rzState) get(r int) rzVal {
	if r == 4 {
		return s.spVal()
	}
	return s.reg[r]
}

func (s *rzState) set(r int, v rzVal) {
	if r == 4 {
		s.setSP(v)
		return
	}
	s.reg[r] = v
}

// merge joins o into s and reports whether s changed.
func (s *rzState) merge(o *rzState) bool {
	if !o.reached {
		return false
	}
	if !s.reached {
		*s = *o
		return true
	}
	changed := false
	for i := range s.reg {
		a, b := s.reg[i], o.reg[i]
		if a == b {
			continue
		}
		v := rzVal{kind: rzUnknown}
		switch {
		case a.pointsInto() && b.pointsInto():
			v = rzVal{rzAtLeast, min(a.off, b.off)}
		case a.kind != rzUnknown || b.kind != rzUnknown:
			v = rzVal{kind: rzDerived}
		}
		if v != a {
			s.reg[i] = v
			changed = true
		}
	}
	sp, off := s.sp, s.spOff
	switch {
	case s.sp == spLost || o.sp == spLost:
		sp, off = spLost, 0
	case s.sp == spExact && o.sp == spExact && s.spOff == o.spOff:
	default:
		sp, off = spAtMost, max(s.spOff, o.spOff)
	}
	if sp != s.sp || off != s.spOff {
		s.sp, s.spOff = sp, off
		changed = true
	}
	return changed
}

// widen gives up on what keeps changing: the stack pointer and the
// registers derived from it.
func (s *rzState) widen() {
	s.sp, s.spOff = spLost, 0
	for i := range s.reg {
		if s.reg[i].kind != rzUnknown {
			s.reg[i] = rzVal{kind: rzDerived}
		}
	}
}

// rzInst is one instruction of the analysis.
type rzInst struct {
	addr    uint64
	in      Inst
	code    []byte
	xi      x86asm.Inst
	known   bool // xi holds x86asm's decoding
	last    bool // the last instruction of its piece
	segFSGS bool // prefixes x86asm could not take had an %fs or %gs override
	addr32p bool // … or an address-size override
}

// addr32 says whether the instruction computes 32-bit addresses.
func (ri *rzInst) addr32() bool { return ri.xi.AddrSize == 32 || ri.addr32p }

// decodeFor fills xi: x86asm's decoding of the instruction, or of the
// instruction without the prefixes x86asm refuses (see decodeOne).
func (ri *rzInst) decodeFor() {
	if ri.in.Op == 0 {
		return
	}
	if xi, err := x86Decode(ri.code); err == nil && xi.Op == ri.in.Op && xi.Len == ri.in.Len {
		ri.xi, ri.known = xi, true
		return
	}
	k := neutralPrefixes(ri.code)
	if k == 0 || k >= len(ri.code) {
		return
	}
	if xi, err := x86Decode(ri.code[k:]); err == nil && xi.Op == ri.in.Op && k+xi.Len == ri.in.Len {
		ri.xi, ri.known = xi, true
		for _, c := range ri.code[:k] {
			ri.segFSGS = ri.segFSGS || c == 0x64 || c == 0x65
			ri.addr32p = ri.addr32p || c == 0x67
		}
	}
}

type rzBlock struct {
	first, end int // instructions [first, end)
	in         rzState
	rounds     int
	queued     bool
	seeded     bool // reached by no path: entered as a landing pad
}

type rzProblem struct {
	addr      uint64
	text, why string
}

type redZoneAnalysis struct {
	insts    []rzInst
	byAddr   map[uint64]int
	blocks   []rzBlock
	blockOf  []int // instruction index -> block index, for leaders only
	tailCall func(uint64) bool
	hasSTD   bool
	indirect map[rzSPKey]*rzState // merged states of indirect jumps, by stack pointer
	landing  rzState              // merged state after calls: where landing pads start
	problem  *rzProblem
	queue    []int
}

func newRedZoneAnalysis(pieces []Piece, tailCall func(uint64) bool) *redZoneAnalysis {
	a := &redZoneAnalysis{byAddr: map[uint64]int{}, tailCall: tailCall, indirect: map[rzSPKey]*rzState{}}
	total := 0
	for _, p := range pieces {
		total += len(p.Insts)
	}
	if total > redZoneMaxInsts {
		a.fail(pieces[0].Address, "", fmt.Sprintf("is too large to analyse (%d instructions; at most %d)", total, redZoneMaxInsts))
		return a
	}
	for _, p := range pieces {
		for k, in := range p.Insts {
			if in.arm64 || in.End() > uint64(len(p.Code)) {
				continue
			}
			ri := rzInst{addr: p.Address + in.Offset, in: in, code: p.Code[in.Offset:in.End()], last: k == len(p.Insts)-1}
			ri.decodeFor()
			if ri.known && ri.xi.Op == x86asm.STD {
				a.hasSTD = true
			}
			a.byAddr[ri.addr] = len(a.insts)
			a.insts = append(a.insts, ri)
		}
	}
	return a
}

func (a *redZoneAnalysis) fail(addr uint64, text, why string) {
	if a.problem == nil || addr < a.problem.addr {
		a.problem = &rzProblem{addr: addr, text: text, why: why}
	}
}

// target returns the absolute target of a direct branch.
func (ri *rzInst) target() (uint64, bool) {
	if !ri.in.hasTarget {
		return 0, false
	}
	return ri.addr - ri.in.Offset + uint64(ri.in.target), true
}

// isJump says whether the instruction is an unconditional jmp.
func (ri *rzInst) isJump() bool { return ri.in.Op == x86asm.JMP }

func (ri *rzInst) isCall() bool { return ri.in.Op == x86asm.CALL }

// indirectJump says whether the instruction is a jmp through a register or
// memory.
func (ri *rzInst) indirectJump() bool { return ri.isJump() && !ri.in.hasTarget }

// find returns the index of the instruction that holds addr: the one that
// starts there, or the one whose prefixes a branch jumps over.
func (a *redZoneAnalysis) find(addr uint64) (int, bool) {
	if i, ok := a.byAddr[addr]; ok {
		return i, true
	}
	i := sort.Search(len(a.insts), func(i int) bool { return a.insts[i].addr+uint64(a.insts[i].in.Len) > addr })
	if i < len(a.insts) && a.insts[i].addr < addr && allPrefixes(a.insts[i].code[:addr-a.insts[i].addr]) {
		return i, true
	}
	return 0, false
}

// successors lists the instructions control may go to after instruction i,
// besides the targets of indirect jumps, and records control leaving for
// code the analysis cannot follow.
func (a *redZoneAnalysis) successors(i int) []int {
	ri := &a.insts[i]
	var out []int
	if t, ok := ri.target(); ok && !ri.isCall() {
		if j, ok := a.find(t); ok {
			out = append(out, j)
		} else if a.tailCall == nil || !a.tailCall(t) {
			a.fail(ri.addr, ri.in.Text, fmt.Sprintf("jumps to %#x, out of the function into code the analysis cannot follow", t))
		}
	}
	if ri.in.stopsFlow {
		return out
	}
	if ri.last {
		if !ri.isCall() { // a call to a function that does not return ends code too
			a.fail(ri.addr, ri.in.Text, "is the last instruction and control runs past it")
		}
		return out
	}
	return append(out, i+1)
}

// run analyses the function and returns what it found.
func (a *redZoneAnalysis) run() StackUse {
	if len(a.insts) == 0 {
		a.fail(0, "", "has no x86-64 code")
	}
	if a.problem != nil {
		return a.result()
	}
	// Blocks start at the entry, at branch targets and after anything that
	// does not fall through.
	leader := make([]bool, len(a.insts))
	leader[0] = true
	for i := range a.insts {
		ri := &a.insts[i]
		if t, ok := ri.target(); ok && !ri.isCall() {
			if j, ok := a.find(t); ok {
				leader[j] = true
			}
		}
		if (ri.in.stopsFlow || ri.last || ri.in.hasTarget && !ri.isCall()) && i+1 < len(a.insts) {
			leader[i+1] = true
		}
	}
	a.blockOf = make([]int, len(a.insts))
	for i := range a.insts {
		if leader[i] {
			a.blocks = append(a.blocks, rzBlock{first: i})
		}
		a.blockOf[i] = len(a.blocks) - 1
	}
	for b := range a.blocks {
		a.blocks[b].end = len(a.insts)
		if b+1 < len(a.blocks) {
			a.blocks[b].end = a.blocks[b+1].first
		}
	}
	a.blocks[0].in = rzState{reached: true} // %rsp = entry + 0, nothing derived
	a.push(0)
	for {
		if !a.fixpoint() {
			return a.result()
		}
		// Code no path reached: landing pads enter with the state after a
		// call, targets of indirect jumps with theirs. Without either, it
		// is dead code; alignment padding (nops) is never entered.
		seed := a.landing
		for _, ind := range a.indirect {
			seed.merge(ind)
		}
		more := false
		for b := range a.blocks {
			if !a.blocks[b].in.reached && !a.padding(b) && a.blocks[b].in.merge(&seed) {
				a.blocks[b].seeded = true
				a.push(b)
				more = true
			}
		}
		if !more {
			break
		}
	}
	// Every reached instruction, with its final state: the checks.
	for b := range a.blocks {
		st := a.blocks[b].in
		for i := a.blocks[b].first; i < a.blocks[b].end; i++ {
			a.mergeIndirect(&st)
			a.step(i, &st, true)
		}
	}
	return a.result()
}

func (a *redZoneAnalysis) push(b int) {
	if !a.blocks[b].queued {
		a.blocks[b].queued = true
		a.queue = append(a.queue, b)
	}
}

// fixpoint propagates states until nothing changes; false when it gave up.
func (a *redZoneAnalysis) fixpoint() bool {
	for len(a.queue) > 0 {
		b := a.queue[0]
		a.queue = a.queue[1:]
		blk := &a.blocks[b]
		blk.queued = false
		if blk.rounds++; blk.rounds > redZoneMaxRounds {
			first := a.insts[blk.first]
			a.fail(first.addr, first.in.Text, "is in a loop that moves the stack pointer without a bound the analysis can find")
			return false
		}
		if blk.rounds == redZoneMaxRounds/2 {
			blk.in.widen()
		}
		st := blk.in
		for i := blk.first; i < blk.end; i++ {
			a.mergeIndirect(&st)
			a.step(i, &st, false)
			ri := &a.insts[i]
			if ri.isCall() && a.landing.merge(&st) {
				a.requeueUnreachedAfter()
			}
			if ri.indirectJump() {
				k := st.spKey()
				if a.indirect[k] == nil {
					a.indirect[k] = &rzState{}
				}
				if a.indirect[k].merge(&st) {
					for k := range a.blocks {
						a.push(k)
					}
				}
			}
		}
		last := blk.end - 1
		for _, j := range a.successors(last) {
			nb := a.blockOf[j]
			if a.blocks[nb].in.merge(&st) {
				a.push(nb)
			}
		}
	}
	return true
}

// rzSPKey is what a state knows of the stack pointer.
type rzSPKey struct {
	sp  rzSPKind
	off int64
}

func (s *rzState) spKey() rzSPKey { return rzSPKey{s.sp, s.spOff} }

// mergeIndirect merges into st the state of the indirect jumps made with
// the same stack pointer: compiled code jumps through tables (switch) to
// code of the same frame, and tail-calls through a register with the
// frame gone, as at the entry.
func (a *redZoneAnalysis) mergeIndirect(st *rzState) {
	if ind := a.indirect[st.spKey()]; ind != nil && st.reached {
		st.merge(ind)
	}
}

// padding says whether block b holds nothing but nops and int3: the
// alignment compilers put after a jump or a return.
func (a *redZoneAnalysis) padding(b int) bool {
	for i := a.blocks[b].first; i < a.blocks[b].end; i++ {
		if in := a.insts[i].in; !in.Nop && in.Op != x86asm.INT {
			return false
		}
	}
	return true
}

// requeueUnreachedAfter is called when the state after calls grows: blocks
// seeded from it (reached only as landing pads) must see it.
func (a *redZoneAnalysis) requeueUnreachedAfter() {
	for b := range a.blocks {
		if a.blocks[b].seeded && a.blocks[b].in.merge(&a.landing) {
			a.push(b)
		}
	}
}

func (a *redZoneAnalysis) result() StackUse {
	if a.problem == nil {
		return StackUse{}
	}
	return StackUse{Below: true, At: a.problem.addr, Text: a.problem.text, Why: a.problem.why}
}

// entryRun returns the last address that sees the stack as at the entry:
// the instruction after the run of endbr64 and nops that starts the
// function, when no branch lands inside the run and no indirect jump
// could.
func (a *redZoneAnalysis) entryRun() uint64 {
	if len(a.insts) == 0 {
		return 0
	}
	entry := a.insts[0].addr
	for i := range a.insts {
		if a.insts[i].indirectJump() {
			return entry
		}
	}
	targets := map[int]bool{}
	for i := range a.insts {
		if t, ok := a.insts[i].target(); ok && !a.insts[i].isCall() {
			if j, ok := a.find(t); ok {
				targets[j] = true
			}
		}
	}
	end := entry
	for i := 1; i < len(a.insts); i++ {
		prev := &a.insts[i-1]
		if !prev.in.endbr && !prev.in.Nop || prev.last || targets[i] {
			break
		}
		end = a.insts[i].addr
	}
	return end
}

// gpr returns the index (0 = %rax … 15 = %r15) and size in bytes of a
// general register.
func gpr(r x86asm.Reg) (idx, size int, ok bool) {
	switch {
	case r >= x86asm.AL && r <= x86asm.BL:
		return int(r - x86asm.AL), 1, true
	case r >= x86asm.AH && r <= x86asm.BH:
		return int(r - x86asm.AH), 1, true
	case r >= x86asm.SPB && r <= x86asm.DIB:
		return int(r-x86asm.SPB) + 4, 1, true
	case r >= x86asm.R8B && r <= x86asm.R15B:
		return int(r-x86asm.R8B) + 8, 1, true
	case r >= x86asm.AX && r <= x86asm.R15W:
		return int(r - x86asm.AX), 2, true
	case r >= x86asm.EAX && r <= x86asm.R15L:
		return int(r - x86asm.EAX), 4, true
	case r >= x86asm.RAX && r <= x86asm.R15:
		return int(r - x86asm.RAX), 8, true
	}
	return 0, 0, false
}

const (
	rAX, rCX, rDX, rBX, rSP, rBP, rSI, rDI = 0, 1, 2, 3, 4, 5, 6, 7
	rR8, rR9, rR10, rR11                   = 8, 9, 10, 11
)

// callClobbered are the registers a call may change (System V: the
// argument and scratch registers).
var callClobbered = []int{rAX, rCX, rDX, rSI, rDI, rR8, rR9, rR10, rR11}

// regVal returns what a register operand holds: a full register's value,
// or, for part of one derived from %rsp, Derived.
func regVal(st *rzState, r x86asm.Reg) rzVal {
	idx, size, ok := gpr(r)
	if !ok {
		return rzVal{}
	}
	v := st.get(idx)
	if size < 8 && v.kind != rzUnknown {
		return rzVal{kind: rzDerived}
	}
	return v
}

// otherSpace says whether a memory operand addresses thread-local storage
// (%fs, %gs), never the stack.
func otherSpace(m x86asm.Mem, ri *rzInst) bool {
	return m.Segment == x86asm.FS || m.Segment == x86asm.GS || ri.segFSGS
}

// addrVal returns the address a memory operand computes.
func addrVal(st *rzState, m x86asm.Mem, ri *rzInst) rzVal {
	if otherSpace(m, ri) {
		return rzVal{}
	}
	base, index := rzVal{}, rzVal{}
	if m.Base != 0 {
		if m.Base == x86asm.RIP || m.Base == x86asm.EIP {
			return rzVal{}
		}
		base = regVal(st, m.Base)
	}
	if m.Index != 0 {
		index = regVal(st, m.Index)
	}
	switch {
	case index.kind != rzUnknown:
		return rzVal{kind: rzDerived}
	case base.pointsInto() && m.Index == 0 && !ri.addr32():
		return rzVal{base.kind, base.off + m.Disp}
	case base.kind != rzUnknown:
		return rzVal{kind: rzDerived}
	}
	return rzVal{}
}

// atOrAbove says whether an address at least entry+off is at or above the
// stack pointer of st.
func atOrAbove(st *rzState, off int64) bool {
	return st.sp != spLost && off >= st.spOff
}

// checkAddr returns the phrase saying that a memory operand (whose address
// is v) may lie below %rsp, or "".
func checkAddr(st *rzState, m x86asm.Mem, v rzVal, ri *rzInst) string {
	isSP := (m.Base == x86asm.RSP || m.Base == x86asm.ESP) && !otherSpace(m, ri)
	if isSP && m.Index == 0 {
		if m.Disp < 0 {
			return fmt.Sprintf("accesses memory %#x bytes below %%rsp", -m.Disp)
		}
		return ""
	}
	switch v.kind {
	case rzUnknown:
		return ""
	case rzDerived:
		if isSP {
			return "accesses memory at %rsp plus an index register, which may be below %rsp"
		}
		return "accesses memory through a register derived from %rsp in a way the analysis does not follow"
	}
	if atOrAbove(st, v.off) {
		return ""
	}
	if st.sp == spExact && v.kind == rzStack {
		return fmt.Sprintf("accesses memory %#x bytes below %%rsp", st.spOff-v.off)
	}
	return "accesses memory relative to the frame that may be below %rsp (it moved by an amount the analysis does not know)"
}

// escapes returns the phrase saying that storing v where the analysis
// cannot follow it (memory, a vector register) may hide a pointer below
// %rsp, or "".
func escapes(st *rzState, v rzVal) string {
	switch {
	case v.kind == rzDerived:
		return "stores a value derived from %rsp where the analysis cannot follow it"
	case v.pointsInto() && !atOrAbove(st, v.off):
		return "stores a pointer that may be below %rsp where the analysis cannot follow it"
	}
	return ""
}

// readOnlyFirst are the instructions whose first operand is read, not
// written.
var readOnlyFirst = map[x86asm.Op]bool{
	x86asm.CMP: true, x86asm.TEST: true, x86asm.BT: true, x86asm.PUSH: true,
	x86asm.CALL: true, x86asm.JMP: true, x86asm.UCOMISS: true, x86asm.UCOMISD: true,
	x86asm.COMISS: true, x86asm.COMISD: true, x86asm.PTEST: true, x86asm.VPTEST: true,
	x86asm.VTESTPS: true, x86asm.VTESTPD: true, x86asm.VUCOMISS: true, x86asm.VUCOMISD: true,
	x86asm.VCOMISS: true, x86asm.VCOMISD: true, x86asm.OUT: true,
}

// noAccess are instructions with a memory operand they do not access (or
// only hint about).
var noAccess = map[x86asm.Op]bool{
	x86asm.NOP: true, x86asm.LEA: true, x86asm.PREFETCHNTA: true, x86asm.PREFETCHT0: true,
	x86asm.PREFETCHT1: true, x86asm.PREFETCHT2: true, x86asm.PREFETCHW: true,
}

// noEffect are instructions that change no general register and access no
// memory (their length x86asm gets wrong, see decode.go).
var noEffect = map[x86asm.Op]bool{x86asm.VZEROUPPER: true, x86asm.VZEROALL: true}

// implicitWrites are general registers instructions write without naming
// them as operands (string instructions' %rsi/%rdi/%rcx included).
var implicitWrites = map[x86asm.Op][]int{
	x86asm.CPUID: {rAX, rBX, rCX, rDX}, x86asm.RDTSC: {rAX, rDX}, x86asm.RDTSCP: {rAX, rCX, rDX},
	x86asm.RDPMC: {rAX, rDX}, x86asm.RDMSR: {rAX, rDX}, x86asm.XGETBV: {rAX, rDX},
	x86asm.SYSCALL: {rAX, rCX, rR11}, x86asm.SYSENTER: {rAX, rCX, rDX},
	x86asm.CQO: {rDX}, x86asm.CDQ: {rDX}, x86asm.CWD: {rDX}, x86asm.CDQE: {rAX}, x86asm.CWDE: {rAX}, x86asm.CBW: {rAX},
	x86asm.LAHF: {rAX}, x86asm.XLATB: {rAX}, x86asm.LOOP: {rCX}, x86asm.LOOPE: {rCX}, x86asm.LOOPNE: {rCX},
	x86asm.CMPXCHG: {rAX}, x86asm.CMPXCHG8B: {rAX, rDX}, x86asm.CMPXCHG16B: {rAX, rDX},
	x86asm.MOVSB: {rSI, rDI, rCX}, x86asm.MOVSW: {rSI, rDI, rCX}, x86asm.MOVSD: {rSI, rDI, rCX}, x86asm.MOVSQ: {rSI, rDI, rCX},
	x86asm.CMPSB: {rSI, rDI, rCX}, x86asm.CMPSW: {rSI, rDI, rCX}, x86asm.CMPSD: {rSI, rDI, rCX}, x86asm.CMPSQ: {rSI, rDI, rCX},
	x86asm.STOSB: {rDI, rCX}, x86asm.STOSW: {rDI, rCX}, x86asm.STOSD: {rDI, rCX}, x86asm.STOSQ: {rDI, rCX},
	x86asm.SCASB: {rDI, rCX}, x86asm.SCASW: {rDI, rCX}, x86asm.SCASD: {rDI, rCX}, x86asm.SCASQ: {rDI, rCX},
	x86asm.LODSB: {rAX, rSI, rCX}, x86asm.LODSW: {rAX, rSI, rCX}, x86asm.LODSD: {rAX, rSI, rCX}, x86asm.LODSQ: {rAX, rSI, rCX},
	x86asm.INSB: {rDI, rCX}, x86asm.INSW: {rDI, rCX}, x86asm.INSD: {rDI, rCX},
	x86asm.OUTSB: {rSI, rCX}, x86asm.OUTSW: {rSI, rCX}, x86asm.OUTSD: {rSI, rCX},
}

// stringOps are the string instructions: they access memory at %rdi or
// %rsi and move them up (down after std).
var stringOps = map[x86asm.Op]bool{
	x86asm.MOVSB: true, x86asm.MOVSW: true, x86asm.MOVSD: true, x86asm.MOVSQ: true,
	x86asm.CMPSB: true, x86asm.CMPSW: true, x86asm.CMPSD: true, x86asm.CMPSQ: true,
	x86asm.STOSB: true, x86asm.STOSW: true, x86asm.STOSD: true, x86asm.STOSQ: true,
	x86asm.SCASB: true, x86asm.SCASW: true, x86asm.SCASD: true, x86asm.SCASQ: true,
	x86asm.LODSB: true, x86asm.LODSW: true, x86asm.LODSD: true, x86asm.LODSQ: true,
	x86asm.INSB: true, x86asm.INSW: true, x86asm.INSD: true,
	x86asm.OUTSB: true, x86asm.OUTSW: true, x86asm.OUTSD: true,
}

// storesRAX are the string instructions that store %rax.
var storesRAX = map[x86asm.Op]bool{x86asm.STOSB: true, x86asm.STOSW: true, x86asm.STOSD: true, x86asm.STOSQ: true}

// oneOperand are the multiplications and divisions that, with one named
// operand, write %rax and %rdx.
var oneOperand = map[x86asm.Op]bool{x86asm.MUL: true, x86asm.IMUL: true, x86asm.DIV: true, x86asm.IDIV: true}

// step applies instruction i to st; with check it records what the
// instruction does below the stack pointer.
func (a *redZoneAnalysis) step(i int, st *rzState, check bool) {
	ri := &a.insts[i]
	bad := func(why string) {
		if check && why != "" {
			a.fail(ri.addr, ri.in.Text, why)
		}
	}
	if noEffect[ri.in.Op] || ri.in.endbr {
		return
	}
	if !ri.known {
		bad("is an instruction the analysis does not know")
		st.widen()
		for r := range st.reg {
			st.reg[r] = rzVal{kind: rzDerived}
		}
		return
	}
	xi := &ri.xi
	op := xi.Op

	// Every memory operand the instruction accesses.
	for _, arg := range xi.Args {
		if m, ok := arg.(x86asm.Mem); ok && !noAccess[op] {
			v := addrVal(st, m, ri)
			if stringOps[op] && a.hasSTD && v.kind != rzUnknown {
				bad("moves through memory downwards from a pointer derived from %rsp (the function uses std)")
			}
			bad(checkAddr(st, m, v, ri))
		}
	}
	// Stored register values the analysis loses track of.
	switch _, toMem := xi.Args[0].(x86asm.Mem); {
	case storesRAX[op]:
		bad(escapes(st, st.get(rAX)))
	case op == x86asm.PUSH:
		if r, ok := xi.Args[0].(x86asm.Reg); ok {
			bad(escapes(st, regVal(st, r)))
		}
	case op == x86asm.MOV || op == x86asm.XCHG || op == x86asm.XADD || op == x86asm.CMPXCHG:
		if r, ok := xi.Args[1].(x86asm.Reg); ok && toMem {
			bad(escapes(st, regVal(st, r)))
		}
		if r, ok := xi.Args[0].(x86asm.Reg); ok && op == x86asm.XCHG {
			if _, mem := xi.Args[1].(x86asm.Mem); mem {
				bad(escapes(st, regVal(st, r)))
			}
		}
	case !readOnlyFirst[op] && !isGPR(xi.Args[0]):
		for _, arg := range xi.Args[1:] {
			if r, ok := arg.(x86asm.Reg); ok {
				bad(escapes(st, regVal(st, r)))
			}
		}
	}

	switch op {
	case x86asm.PUSH, x86asm.PUSHF, x86asm.PUSHFQ:
		moveSP(st, -pushSize(xi))
		return
	case x86asm.POP, x86asm.POPF, x86asm.POPFQ:
		if r, ok := xi.Args[0].(x86asm.Reg); ok {
			if idx, _, ok := gpr(r); ok {
				if idx == rSP {
					st.setSP(rzVal{kind: rzDerived})
					return
				}
				st.set(idx, rzVal{})
			}
		}
		moveSP(st, pushSize(xi))
		return
	case x86asm.LEAVE:
		st.setSP(st.get(rBP))
		moveSP(st, 8)
		st.set(rBP, rzVal{})
		return
	case x86asm.ENTER:
		size, _ := xi.Args[0].(x86asm.Imm)
		level, _ := xi.Args[1].(x86asm.Imm)
		moveSP(st, -8)
		st.set(rBP, st.spVal())
		if level != 0 {
			st.setSP(rzVal{kind: rzDerived})
			return
		}
		moveSP(st, -int64(size))
		return
	case x86asm.CALL, x86asm.LCALL:
		for _, r := range callClobbered {
			st.set(r, rzVal{})
		}
		return
	case x86asm.RET, x86asm.JMP, x86asm.NOP, x86asm.CMP, x86asm.TEST, x86asm.BT,
		x86asm.UCOMISS, x86asm.UCOMISD, x86asm.COMISS, x86asm.COMISD:
		return
	case x86asm.LEA:
		a.lea(ri, st, bad)
		return
	case x86asm.MOV, x86asm.MOVZX, x86asm.MOVSX, x86asm.MOVSXD:
		dst, ok := xi.Args[0].(x86asm.Reg)
		if !ok {
			return // a store
		}
		idx, size, ok := gpr(dst)
		if !ok {
			return
		}
		var v rzVal
		if src, ok := xi.Args[1].(x86asm.Reg); ok {
			v = regVal(st, src)
			if op != x86asm.MOV && v.kind != rzUnknown {
				v = rzVal{kind: rzDerived}
			}
		}
		if size < 8 && v.kind != rzUnknown {
			v = rzVal{kind: rzDerived}
		}
		if size < 4 {
			v = joinTaint(v, st.get(idx)) // the rest of the register stays
		}
		st.set(idx, v)
		return
	case x86asm.XCHG:
		r0, ok0 := xi.Args[0].(x86asm.Reg)
		r1, ok1 := xi.Args[1].(x86asm.Reg)
		i0, s0, g0 := gpr(r0)
		i1, s1, g1 := gpr(r1)
		switch {
		case ok0 && ok1 && g0 && g1 && s0 == 8 && s1 == 8:
			v0, v1 := st.get(i0), st.get(i1)
			st.set(i0, v1)
			st.set(i1, v0)
		case ok0 && ok1 && g0 && g1:
			t := joinTaint(st.get(i0), st.get(i1))
			st.set(i0, t)
			st.set(i1, t)
		case ok0 && g0:
			st.set(i0, rzVal{}) // loaded from memory
		case ok1 && g1:
			st.set(i1, rzVal{})
		}
		return
	case x86asm.ADD, x86asm.SUB:
		if a.addImm(xi, st) || op == x86asm.SUB && clears(xi, st) {
			return
		}
	case x86asm.XOR:
		if clears(xi, st) {
			return
		}
	case x86asm.AND:
		dst, ok := xi.Args[0].(x86asm.Reg)
		imm, isImm := xi.Args[1].(x86asm.Imm)
		if ok && isImm && dst == x86asm.RSP && imm < 0 {
			// Aligning the stack down: %rsp only goes lower.
			if st.sp != spLost {
				st.sp = spAtMost
			}
			return
		}
	}

	// Everything else: the written operand (the first, unless the
	// instruction only reads it) and the implicit ones become unknown, or
	// derived when a register the instruction reads derives from %rsp.
	taint := rzVal{}
	for _, arg := range xi.Args {
		if r, ok := arg.(x86asm.Reg); ok {
			taint = joinTaint(taint, regVal(st, r))
		}
	}
	writes := implicitWrites[op]
	one := oneOperand[op] && xi.Args[1] == nil
	if one {
		writes = []int{rAX, rDX}
	}
	for _, r := range writes {
		taint = joinTaint(taint, st.get(r))
	}
	result := rzVal{}
	if taint.kind != rzUnknown {
		result = rzVal{kind: rzDerived}
	}
	if r, ok := xi.Args[0].(x86asm.Reg); ok && !readOnlyFirst[op] && !one {
		if idx, _, ok := gpr(r); ok {
			st.set(idx, result)
		}
	}
	if op == x86asm.XADD {
		if r, ok := xi.Args[1].(x86asm.Reg); ok {
			if idx, _, ok := gpr(r); ok {
				st.set(idx, result)
			}
		}
	}
	for _, r := range writes {
		st.set(r, result)
	}
}

// lea applies lea: the computed address goes to the register, an address
// below %rsp is a use of the red zone, and lea into %rsp moves it.
func (a *redZoneAnalysis) lea(ri *rzInst, st *rzState, bad func(string)) {
	xi := &ri.xi
	dst, _ := xi.Args[0].(x86asm.Reg)
	m, _ := xi.Args[1].(x86asm.Mem)
	idx, size, ok := gpr(dst)
	if !ok {
		return
	}
	fromSP := (m.Base == x86asm.RSP || m.Base == x86asm.ESP) && m.Index == 0
	v := addrVal(st, m, ri)
	if idx == rSP {
		switch {
		case v.kind == rzStack:
			st.setSP(v)
		case fromSP && st.sp == spAtMost:
			st.spOff += m.Disp
		default:
			st.setSP(rzVal{kind: rzDerived})
		}
		return
	}
	switch {
	case fromSP && m.Disp < 0:
		bad(fmt.Sprintf("points %#x bytes below %%rsp", -m.Disp))
	case fromSP && st.sp != spExact:
		v = rzVal{kind: rzDerived} // %rsp + disp, not an offset from the entry
	case v.pointsInto() && !atOrAbove(st, v.off):
		if st.sp == spExact && v.kind == rzStack {
			bad(fmt.Sprintf("points %#x bytes below %%rsp", st.spOff-v.off))
		} else {
			bad("points into the frame, possibly below %rsp (it moved by an amount the analysis does not know)")
		}
	}
	if size < 8 && v.kind != rzUnknown {
		v = rzVal{kind: rzDerived}
	}
	st.set(idx, v)
}

// addImm applies add or sub of an immediate to a 64-bit register: %rsp
// moves, a frame pointer moves with it. It reports whether it applied.
func (a *redZoneAnalysis) addImm(xi *x86asm.Inst, st *rzState) bool {
	dst, ok := xi.Args[0].(x86asm.Reg)
	if !ok {
		return false
	}
	idx, size, ok := gpr(dst)
	imm, isImm := xi.Args[1].(x86asm.Imm)
	if !ok || size != 8 || !isImm {
		return false
	}
	d := int64(imm)
	if xi.Op == x86asm.SUB {
		d = -d
	}
	if idx == rSP {
		moveSP(st, d)
		return true
	}
	if v := st.get(idx); v.pointsInto() {
		st.set(idx, rzVal{v.kind, v.off + d})
		return true
	}
	return false
}

// clears applies xor or sub of a register with itself (xor %eax,%eax),
// which zeroes it, and reports whether it was that.
func clears(xi *x86asm.Inst, st *rzState) bool {
	r0, ok0 := xi.Args[0].(x86asm.Reg)
	r1, ok1 := xi.Args[1].(x86asm.Reg)
	if !ok0 || !ok1 || r0 != r1 {
		return false
	}
	idx, size, ok := gpr(r0)
	if !ok || size < 4 || idx == rSP {
		return false
	}
	st.set(idx, rzVal{})
	return true
}

// isGPR says whether an operand is a general register.
func isGPR(arg x86asm.Arg) bool {
	r, ok := arg.(x86asm.Reg)
	if !ok {
		return false
	}
	_, _, ok = gpr(r)
	return ok
}

// joinTaint returns Derived when either value derives from %rsp.
func joinTaint(a, b rzVal) rzVal {
	if a.kind != rzUnknown || b.kind != rzUnknown {
		return rzVal{kind: rzDerived}
	}
	return rzVal{}
}

// pushSize returns how far push or pop moves the stack pointer.
func pushSize(xi *x86asm.Inst) int64 {
	if xi.DataSize == 16 {
		return 2
	}
	if r, ok := xi.Args[0].(x86asm.Reg); ok {
		if _, size, ok := gpr(r); ok && size == 2 {
			return 2
		}
	}
	return 8
}

// moveSP adds d to the stack pointer.
func moveSP(st *rzState, d int64) {
	if st.sp != spLost {
		st.spOff += d
	}
}
