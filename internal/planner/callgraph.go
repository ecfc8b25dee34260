package planner

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/otel-uprobe/uprobereceiver/internal/insn"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

// Bounds of the call graph of one file (callGraph): beyond them, a function
// still unexplored counts as one an exception may unwind through.
const (
	// callGraphMaxFunctions bounds the functions decoded (glibc's
	// libc.so.6 has about 3,700 code ranges).
	callGraphMaxFunctions = 1 << 15
	// callGraphMaxCode bounds the code decoded, in bytes (libc.so.6 has
	// 1.3 MiB, decoded in about 0.3 s).
	callGraphMaxCode = 8 << 20
	// maxJumpTableEntries bounds the entries read of one jump table.
	maxJumpTableEntries = 4096
	// maxRelocationBytes bounds the dynamic relocations read.
	maxRelocationBytes = 16 << 20
	// stubBytes is how much of a call's target is read to recognize a
	// PLT entry (x86-64: endbr64, bnd jmp *slot(%rip); arm64: adrp, ldr,
	// add, br).
	stubBytes = 16
)

// Dynamic tags of RELR relocations (not in debug/elf).
const (
	dtRELRSZ elf.DynTag = 35
	dtRELR   elf.DynTag = 36
)

// cgState is where the search of a call-graph node stands.
type cgState uint8

const (
	cgUnknown cgState = iota // not yet decided
	cgSeen                   // entered by the current search
	cgClean                  // reaches no exit
	cgReaches                // reaches an exit
)

// cgExit is a place where control may leave a file's own code for code
// that may raise an exception into it (see callGraph).
type cgExit struct {
	fn   function
	in   insn.Inst
	what string // "a call through a pointer"
	stub uint64 // the PLT entry a direct call or jump goes to, 0 for none
}

// cgNode is one function of a file's call graph.
type cgNode struct {
	fn      function
	scanned bool
	own     *cgExit   // its first own exit
	edges   []*cgNode // the functions it calls or jumps to in the file
	state   cgState
	via     *cgNode // for cgReaches without own: the callee that reaches the exit

	// How it ends, for noReturn and finish: leaves says it has a RET
	// or a jump out of it other than a direct one (jumps are the
	// functions its direct jumps out go to: tail calls, its cold part);
	// lastStops that its last instruction, padding aside, stops the flow
	// (a jmp, a trap), lastIsCall that it is a call, and lastCall the
	// function that call goes to when direct; next is the function after
	// its end and padding, nil when unknown.
	leaves, lastStops, lastIsCall bool
	lastCall, next                *cgNode
	jumps                         []*cgNode
	noReturn                      int8 // 0 not decided, 1 never returns, -1 may return
	finished                      bool // edges completed with the fall-through (finish)
}

// callGraph is the call graph of a file whose code takes part in
// exception unwinding only through the personality routines of its
// call-frame information (C built with -fexceptions, such as glibc), built
// on demand and kept with the file: which functions reach, through direct
// calls and jumps inside the file, an exit through which an exception can
// come in (see file.callbackExit).
type callGraph struct {
	fl        *file
	nodes     map[uint64]*cgNode // by entry address
	functions int                // decoded
	codeBytes uint64             // decoded
	exhausted bool               // a bound was reached

	callees map[uint64]callee // resolved direct call and jump targets

	relocsRead bool
	relocs     map[uint64]slotReloc // dynamic relocations by the address they write
	relr       map[uint64]bool      // addresses RELR relocations write
	relocsErr  error
	dynsyms    []elf.Symbol
}

// callee is what a direct call or jump to an address goes to: functions of
// the file, or why it counts as an exit.
type callee struct {
	tos []function
	why string
}

// slotReloc is one dynamic relocation of a pointer-sized slot.
type slotReloc struct {
	typ    uint32
	sym    uint32 // index into .dynsym, 0 for none
	addend int64
}

// graph returns the file's call graph, created on first use.
func (fl *file) graph() *callGraph {
	if fl.cg == nil {
		fl.cg = &callGraph{fl: fl, nodes: map[uint64]*cgNode{}, callees: map[uint64]callee{}}
	}
	return fl.cg
}

// node returns the node of function fn.
func (g *callGraph) node(fn function) *cgNode {
	if n, ok := g.nodes[fn.Address]; ok {
		return n
	}
	n := &cgNode{fn: fn}
	g.nodes[fn.Address] = n
	return n
}

// exitOf returns the node of fn and, when fn reaches an exit, the path to
// it: fn's node, the callees it goes through, and last the node whose own
// exit it is. The search is an iterative depth-first search that stops at
// the first exit; what it proves (a function reaches an exit, or a whole
// explored part reaches none) is kept for later questions.
func (g *callGraph) exitOf(fn function) []*cgNode {
	root := g.node(fn)
	switch root.state {
	case cgReaches:
		return g.path(root)
	case cgClean:
		return nil
	}
	type frame struct {
		n    *cgNode
		next int
	}
	root.state = cgSeen
	seen := []*cgNode{root}
	stack := []frame{{n: root}}
	found := func(last *cgNode) []*cgNode {
		// Every function on the stack reaches last's exit.
		for i := len(stack) - 1; i >= 0; i-- {
			stack[i].n.state = cgReaches
			if stack[i].n != last {
				stack[i].n.via = last
			}
			last = stack[i].n
		}
		for _, n := range seen {
			if n.state == cgSeen { // explored, but it may reach what reaches the exit
				n.state = cgUnknown
			}
		}
		return g.path(root)
	}
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		n := top.n
		if !n.scanned {
			g.scan(n)
		}
		if n.own != nil {
			n.state = cgReaches
			return found(n)
		}
		if !n.finished {
			if g.finish(n); n.own != nil {
				n.state = cgReaches
				return found(n)
			}
		}
		if top.next == len(n.edges) {
			stack = stack[:len(stack)-1]
			continue
		}
		m := n.edges[top.next]
		top.next++
		switch m.state {
		case cgReaches:
			return found(m)
		case cgUnknown:
			m.state = cgSeen
			seen = append(seen, m)
			stack = append(stack, frame{n: m})
		}
	}
	// Everything reachable from fn was explored: none of it reaches an exit.
	for _, n := range seen {
		n.state = cgClean
	}
	return nil
}

// maxNoReturnDepth bounds the chain of last calls noReturn follows
// (__assert_fail, __assert_fail_base, abort).
const maxNoReturnDepth = 8

// finish completes n's edges once n is scanned: an edge to a function that
// never returns is dropped, and one to the function after n's end is added
// when n may run on into it: when its last instruction neither stops the
// flow nor is a call (a compiler ends a function with a call only to a
// function it knows does not return there; hand-written code may fall
// into the next function).
//
// A function that never returns (it has no RET, no jump out of it, and its
// last instruction stops the flow or calls another such function: abort,
// exit, _exit, __assert_fail, __libc_fatal, __stack_chk_fail, glibc's
// malloc_printerr, pthread_exit and the thread cancellation that unwinds
// by _Unwind_ForcedUnwind) ends the process or the thread, so what it
// runs is not followed: forced unwinding is not an exception (a kernel
// return trampoline ends it without an abort: the unwinder reports the end
// of the stack there, and glibc's stop function longjmps to the thread's
// start after the cancellation handlers), an exception escaping an atexit
// handler terminates the program by the C++ standard anyway, and an
// exception from a callback while the process reports a fatal error and
// aborts (a cookie stream on stderr) would only be turned from an escape
// out of an aborting path into an abort.
func (g *callGraph) finish(n *cgNode) {
	n.finished = true
	kept := n.edges[:0]
	for _, m := range n.edges {
		if !g.noReturn(m, 0) {
			kept = append(kept, m)
		}
	}
	n.edges = kept
	if !n.lastStops && !n.lastIsCall {
		if n.next == nil {
			n.own = &cgExit{fn: n.fn, what: "code that runs past its end into code of unknown extent"}
			return
		}
		n.edges = append(n.edges, n.next)
	}
}

// noReturn reports whether n's function never returns (see finish).
func (g *callGraph) noReturn(n *cgNode, depth int) bool {
	if n.noReturn != 0 {
		return n.noReturn > 0
	}
	if !n.scanned {
		g.scan(n)
	}
	no := false
	switch {
	case n.leaves || depth >= maxNoReturnDepth:
	case n.lastStops:
		no = true
	case n.lastCall != nil && n.lastCall != n:
		no = g.noReturn(n.lastCall, depth+1)
	}
	for _, m := range n.jumps {
		no = no && m != n && g.noReturn(m, depth+1)
	}
	// A "may return" the depth bound gave is kept too: it only keeps
	// edges.
	n.noReturn = -1
	if no {
		n.noReturn = 1
	}
	return no
}

// path follows via from a node that reaches an exit to the node whose own
// exit it is.
func (g *callGraph) path(n *cgNode) []*cgNode {
	p := []*cgNode{n}
	for n.own == nil && n.via != nil && len(p) <= len(g.nodes) {
		n = n.via
		p = append(p, n)
	}
	return p
}

// scan decodes n's function and finds its own first exit or, without one,
// its edges.
func (g *callGraph) scan(n *cgNode) {
	n.scanned = true
	fl, fn := g.fl, n.fn
	exit := func(in insn.Inst, format string, args ...any) {
		n.own = &cgExit{fn: fn, in: in, what: fmt.Sprintf(format, args...)}
	}
	if g.functions >= callGraphMaxFunctions || g.codeBytes+fn.Size > callGraphMaxCode {
		g.exhausted = true
		exit(insn.Inst{}, "more code than the search of its call graph reads (%d functions, %d MiB)", callGraphMaxFunctions, callGraphMaxCode>>20)
		return
	}
	g.functions++
	g.codeBytes += fn.Size
	if fn.Size == 0 {
		exit(insn.Inst{}, "code whose extent is unknown")
		return
	}
	code, err := fl.read(fn.Address, fn.Size)
	if err != nil {
		exit(insn.Inst{}, "code that cannot be read (%v)", err)
		return
	}
	insts, err := insn.DecodeFlow(fl.arch, code)
	if err != nil {
		exit(insn.Inst{}, "code that cannot be decoded (%v)", err)
		return
	}
	transfers := insn.Transfers(fn.Address, code, insts)
	g.ending(n, insts, transfers)
	seen := map[uint64]bool{}
	edge := func(to function) {
		if !seen[to.Address] {
			seen[to.Address] = true
			n.edges = append(n.edges, g.node(to))
		}
	}
	cold := fl.functions[fn.Name+".cold"] // gcc's cold part: a switch may jump there through a table
	for _, c := range cold {
		if c.Size > 0 {
			edge(c)
		}
	}
	direct := map[uint64]bool{} // the functions fn jumps to directly, and its cold part
	for _, c := range cold {
		direct[c.Address] = true
	}
	for _, t := range transfers {
		if t.Kind == insn.DirectJump {
			if to, ok := fl.containing(t.Target); ok {
				direct[to.Address] = true
			}
		}
	}
	for _, t := range transfers {
		var tos []function
		var why string
		switch t.Kind {
		case insn.DirectCall, insn.DirectJump:
			tos, why = g.callee(t.Target)
		case insn.SlotCall, insn.SlotJump:
			tos, why = g.slot(t.Slot)
		case insn.JumpTable:
			tos, why = g.jumpTable(fn, t, direct)
		case insn.ComputedJump:
			continue // into its own code, which the scan covers
		case insn.FieldCall:
			if g.vdsoCall(t, insts) {
				continue
			}
			why = "a call through a pointer"
		case insn.IndirectCall:
			why = "a call through a pointer"
		default:
			why = "a jump through a pointer"
		}
		if why == callsBack {
			why = ""
			for _, a := range insn.CodeAddresses(fn.Address, code, insts) {
				if to, ok := fl.containing(a); ok && to.Address == a && fl.executableAddress(a) {
					tos = append(tos, to)
				}
			}
		}
		if why != "" {
			exit(t.Inst, "%s", why)
			if _, isStub := g.stub(t.Target); isStub && (t.Kind == insn.DirectCall || t.Kind == insn.DirectJump) {
				n.own.stub = t.Target
			}
			return
		}
		for _, to := range tos {
			edge(to)
		}
	}
}

// ending records how n's function ends (see cgNode), from its
// instructions and transfers.
func (g *callGraph) ending(n *cgNode, insts []insn.Inst, transfers []insn.Transfer) {
	for _, in := range insts {
		n.leaves = n.leaves || in.Ret
	}
	for _, t := range transfers {
		switch t.Kind {
		case insn.DirectJump:
			// A tail call or a jump to its cold part: it returns if
			// that code does.
			if tos, why := g.callee(t.Target); why == "" && len(tos) == 1 {
				n.jumps = append(n.jumps, g.node(tos[0]))
			} else {
				n.leaves = true
			}
		case insn.SlotJump, insn.IndirectJump, insn.JumpTable:
			// A jump table's entries may lead to its cold part,
			// which may return: not followed here.
			n.leaves = true
		}
	}
	last := len(insts) - 1
	for last > 0 && insn.Padding(insts[last]) {
		last--
	}
	in := insts[last]
	n.lastStops = insn.StopsFlow(in)
	if n.lastStops {
		return
	}
	for _, t := range transfers {
		if t.Inst.Offset != in.Offset {
			continue
		}
		switch t.Kind {
		case insn.DirectCall, insn.SlotCall, insn.FieldCall, insn.IndirectCall:
			n.lastIsCall = true
		}
		if t.Kind == insn.DirectCall {
			if tos, why := g.callee(t.Target); why == "" && len(tos) == 1 && tos[0].Address == t.Target {
				n.lastCall = g.node(tos[0])
			}
		}
	}
	// Past the end, after padding, the next function.
	end := n.fn.Address + insts[len(insts)-1].End()
	for d := uint64(0); d <= maxPadding; d++ {
		if next, ok := g.fl.containing(end + d); ok {
			if next.Address == end+d || d == 0 {
				n.next = g.node(next)
			}
			break
		}
	}
}

// maxPadding bounds the padding between one function's end and the next
// function's entry, in bytes.
const maxPadding = 64

// vdsoCall reports whether t, a FieldCall of a function whose
// instructions are insts, is glibc's call into the vDSO (clock_gettime,
// gettimeofday, time, clock_getres, sched_getcpu): through a pointer it
// reads from the dynamic linker's _rtld_global_ro, in a function that
// falls back on the system call when the vDSO has none. The vDSO is the
// kernel's code and calls none of the program's. The other pointers of
// _rtld_global_ro (_dl_open, _dl_catch_error…) run constructors; the
// functions calling them make no system call.
func (g *callGraph) vdsoCall(t insn.Transfer, insts []insn.Inst) bool {
	if g.readRelocations() != nil {
		return false
	}
	r, ok := g.relocs[t.Slot]
	if !ok || r.sym == 0 || int(r.sym) > len(g.dynsyms) || r.typ != g.globDatType() || !g.fl.readOnlyAfterRelocation(t.Slot) {
		return false
	}
	s := g.dynsyms[r.sym-1]
	if s.Name != "_rtld_global_ro" || s.Section != elf.SHN_UNDEF || !strings.HasPrefix(s.Library, "ld-linux") {
		return false
	}
	for _, in := range insts {
		if insn.Syscall(in) {
			return true
		}
	}
	return false
}

// callee resolves a direct call or jump to addr: the function there (a
// jump into the middle of a function stands for all of it), or the
// functions a PLT entry there may go to; or why it counts as an exit.
func (g *callGraph) callee(addr uint64) ([]function, string) {
	if c, ok := g.callees[addr]; ok {
		return c.tos, c.why
	}
	var c callee
	if slot, ok := g.stub(addr); ok {
		c.tos, c.why = g.slot(slot)
	} else if to, ok := g.fl.containing(addr); ok {
		c.tos = []function{to}
	} else {
		c.why = fmt.Sprintf("a jump to %#x, code of unknown extent", addr)
	}
	g.callees[addr] = c
	return c.tos, c.why
}

// stub reports whether the code at addr is a PLT entry (or any thunk that
// starts by jumping through a pointer): its first transfer of control,
// within stubBytes and after nothing but instructions that do not branch,
// is a jump through a fixed slot. It returns the slot.
func (g *callGraph) stub(addr uint64) (uint64, bool) {
	code, err := g.fl.readUpTo(addr, stubBytes)
	if err != nil || len(code) == 0 {
		return 0, false
	}
	if g.fl.arch == regs.ArchARM64 {
		code = code[:len(code)&^3]
	}
	insts, _ := insn.DecodeFlow(g.fl.arch, code) // the bytes after the stub may be cut short
	ts := insn.Transfers(addr, code, insts)
	if len(ts) == 0 || ts[0].Kind != insn.SlotJump {
		return 0, false
	}
	return ts[0].Slot, true
}

// dynamicLinkerCalls are functions of glibc's dynamic linker (ld-linux,
// its private interface to libc) that run no code of the program: they
// look up, allocate (with the program's malloc, see
// replaceableAllocator), copy or report and exit. The value says the
// function calls a callback its caller passes (__tunable_get_val, which
// libc's malloc gives its own setters). Others of its functions are exits:
// _dl_catch_exception and dlopen's workers run constructors, the audit
// entries run LD_AUDIT modules.
var dynamicLinkerCalls = map[string]bool{
	"__tls_get_addr": false, "_dl_find_object": false, "_dl_find_dso_for_object": false,
	"_dl_allocate_tls": false, "_dl_allocate_tls_init": false, "_dl_deallocate_tls": false,
	"__nptl_change_stack_perm": false, "_dl_exception_create": false, "_dl_rtld_di_serinfo": false,
	"_dl_fatal_printf": false, "__tunable_get_val": true,
}

// callsBack is what slot and callee return for a function of another file
// that calls back the functions its caller passes: the caller's scan
// follows every function whose address the caller computes.
const callsBack = "\x00calls back"

// replaceableAllocator are the functions glibc lets a program or another
// library replace ("Replacing malloc" in its manual) and so calls through
// the dynamic linker. glibc declares them __THROW, noexcept for C++: an
// exception that escapes a C++ replacement terminates the program in the
// replacement's own frame, never unwinding into the caller's, and a C
// replacement calls no code of the program. A call of one of them defined
// in the file itself is followed into its definition there.
var replaceableAllocator = map[string]bool{
	"malloc": true, "free": true, "calloc": true, "realloc": true, "aligned_alloc": true,
	"malloc_usable_size": true, "memalign": true, "posix_memalign": true, "pvalloc": true, "valloc": true,
}

// slot resolves a call or jump through the pointer at address slot: the
// functions of the file it may hold, from the relocation that sets it;
// or why it counts as an exit.
func (g *callGraph) slot(slot uint64) ([]function, string) {
	fl := g.fl
	if err := g.readRelocations(); err != nil {
		return nil, fmt.Sprintf("a call through the pointer at %#x, whose relocations cannot be read (%v)", slot, err)
	}
	r, ok := g.relocs[slot]
	pltSlot := ok && (r.typ == g.jumpSlotType() || r.typ == g.iRelativeType())
	if !pltSlot && !fl.readOnlyAfterRelocation(slot) {
		return nil, fmt.Sprintf("a call through the pointer at %#x, which the program may change", slot)
	}
	var target uint64
	switch {
	case ok && r.sym != 0:
		if int(r.sym) > len(g.dynsyms) {
			return nil, fmt.Sprintf("a call through the pointer at %#x, whose relocation names no symbol", slot)
		}
		s := g.dynsyms[r.sym-1]
		if s.Section == elf.SHN_UNDEF {
			if ld, ok := dynamicLinkerCalls[s.Name]; ok && strings.HasPrefix(s.Library, "ld-linux") {
				if ld {
					return nil, callsBack
				}
				return nil, ""
			}
			return nil, fmt.Sprintf("a call of %s, which another file defines", s.Name)
		}
		// Defined here but bound at run time: another file's definition
		// (an interposer, LD_PRELOAD) may take it.
		name, _, _ := strings.Cut(s.Name, "@")
		if !replaceableAllocator[name] || elf.ST_TYPE(s.Info) != elf.STT_FUNC {
			return nil, fmt.Sprintf("a call of %s, which another file's definition may take", name)
		}
		target = s.Value
	case ok && r.typ == g.iRelativeType():
		return g.ifunc(uint64(r.addend))
	case ok && r.typ == g.relativeType():
		target = uint64(r.addend)
	case ok:
		return nil, fmt.Sprintf("a call through the pointer at %#x, set by relocation type %d", slot, r.typ)
	case g.relr[slot] || fl.elf.Type == elf.ET_EXEC:
		b, err := fl.read(slot, 8)
		if err != nil {
			return nil, fmt.Sprintf("a call through the pointer at %#x, which cannot be read (%v)", slot, err)
		}
		target = binary.LittleEndian.Uint64(b)
	default:
		return nil, fmt.Sprintf("a call through the pointer at %#x, which no relocation sets", slot)
	}
	to, ok := fl.containing(target)
	if !ok || !fl.executableAddress(target) {
		return nil, fmt.Sprintf("a call through the pointer at %#x to %#x, code of unknown extent", slot, target)
	}
	return []function{to}, ""
}

// ifunc resolves a call through a PLT slot that an IRELATIVE relocation
// sets: to what the ifunc's resolver at address resolver returns, one of
// the implementations whose addresses it computes (a resolver is a leaf
// that picks among lea'd addresses by the CPU's features). A resolver
// that calls other code, or computes no address of code, counts as an exit.
func (g *callGraph) ifunc(resolver uint64) ([]function, string) {
	fl := g.fl
	fn, ok := fl.containing(resolver)
	if !ok || fn.Address != resolver || fn.Size == 0 || fn.Size > 1<<16 {
		return nil, fmt.Sprintf("a call of the ifunc whose resolver at %#x has no known extent", resolver)
	}
	code, err := fl.read(fn.Address, fn.Size)
	if err != nil {
		return nil, fmt.Sprintf("a call of the ifunc whose resolver %s cannot be read (%v)", fn.Name, err)
	}
	insts, err := insn.DecodeFlow(fl.arch, code)
	if err != nil {
		return nil, fmt.Sprintf("a call of the ifunc whose resolver %s cannot be decoded (%v)", fn.Name, err)
	}
	if ts := insn.Transfers(fn.Address, code, insts); len(ts) > 0 {
		return nil, fmt.Sprintf("a call of the ifunc whose resolver %s runs other code (at +%#x)", fn.Name, ts[0].Inst.Offset)
	}
	var tos []function
	for _, a := range insn.CodeAddresses(fn.Address, code, insts) {
		if to, ok := fl.containing(a); ok && to.Address == a && fl.executableAddress(a) {
			tos = append(tos, to)
		}
	}
	if len(tos) == 0 {
		return nil, fmt.Sprintf("a call of the ifunc whose resolver %s computes no address of code", fn.Name)
	}
	return tos, ""
}

// jumpTable returns the functions outside fn that the jump table of t, a
// jump of fn, may jump to (gcc puts switch cases in fn's cold part), or
// why the jump counts as an exit. The table must lie in memory the program
// cannot change. With a bound check (insn.Transfer.TableEntries) its
// entries are exactly known; without one (glibc's hand-written string
// functions compute their indices) they are read up to the first that
// jumps neither into fn nor into code fn jumps to directly or names as its
// cold part (name.cold), taken as the end of the table: what follows is
// usually the next table, whose offsets are from another base. A switch
// case the compiler moved to the cold part that only such a table
// reaches, in a file without symbols naming its cold parts, is not
// followed.
func (g *callGraph) jumpTable(fn function, t insn.Transfer, direct map[uint64]bool) ([]function, string) {
	fl := g.fl
	if !fl.readOnlyAfterRelocation(t.Table) && !fl.readOnlySegment(t.Table) {
		return nil, fmt.Sprintf("a jump through the table at %#x, which the program may change", t.Table)
	}
	n := maxJumpTableEntries
	if t.TableEntries > 0 {
		n = min(n, t.TableEntries)
	}
	b, err := fl.readUpTo(t.Table, uint64(n*t.TableEntry))
	if err != nil || len(b) < t.TableEntry || t.TableEntries > 0 && len(b) < n*t.TableEntry {
		return nil, fmt.Sprintf("a jump through the table at %#x, which cannot be read", t.Table)
	}
	var tos []function
	seen := map[uint64]bool{}
entries:
	for k := 0; k+t.TableEntry <= len(b); k += t.TableEntry {
		var to uint64
		if t.TableRelative {
			to = t.Table + uint64(int64(int32(binary.LittleEndian.Uint32(b[k:]))))
		} else {
			to = binary.LittleEndian.Uint64(b[k:])
		}
		if to >= fn.Address && to < fn.Address+fn.Size {
			continue
		}
		r, ok := fl.containing(to)
		code := ok && fl.executableAddress(to)
		switch {
		case t.TableEntries > 0 && !code:
			return nil, fmt.Sprintf("a jump through the table at %#x, whose entry %d points at no code", t.Table, k/t.TableEntry)
		case t.TableEntries > 0, direct[r.Address]:
			if !seen[r.Address] {
				seen[r.Address] = true
				tos = append(tos, r)
			}
			continue
		case k == 0:
			return nil, fmt.Sprintf("a jump through the table at %#x, whose first entry leaves %s", t.Table, fn.Name)
		}
		break entries // past the table's end
	}
	return tos, ""
}

// readRelocations reads the file's dynamic relocations (DT_RELA,
// DT_JMPREL, DT_RELR: what the dynamic linker applies) and dynamic symbols
// once.
func (g *callGraph) readRelocations() error {
	if g.relocsRead {
		return g.relocsErr
	}
	g.relocsRead = true
	g.relocsErr = g.readRelocationsOnce()
	return g.relocsErr
}

func (g *callGraph) readRelocationsOnce() error {
	fl := g.fl
	g.relocs, g.relr = map[uint64]slotReloc{}, map[uint64]bool{}
	syms, err := fl.elf.DynamicSymbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return fmt.Errorf("reading dynamic symbols: %w", err)
	}
	g.dynsyms = syms
	dyn := func(tag elf.DynTag) uint64 {
		v, err := fl.elf.DynValue(tag)
		if err != nil || len(v) == 0 {
			return 0
		}
		return v[0]
	}
	if p, err := fl.elf.DynValue(elf.DT_PLTREL); err == nil && len(p) > 0 && p[0] != uint64(elf.DT_RELA) {
		return errors.New("its PLT relocations are not RELA")
	}
	total := uint64(0)
	for _, t := range [][2]elf.DynTag{{elf.DT_RELA, elf.DT_RELASZ}, {elf.DT_JMPREL, elf.DT_PLTRELSZ}} {
		addr, size := dyn(t[0]), dyn(t[1])
		if addr == 0 || size == 0 {
			continue
		}
		if total += size; total > maxRelocationBytes {
			return fmt.Errorf("more than %d bytes of relocations", maxRelocationBytes)
		}
		b, err := fl.read(addr, size)
		if err != nil {
			return fmt.Errorf("reading relocations at %#x: %w", addr, err)
		}
		for k := 0; k+24 <= len(b); k += 24 {
			off, info := binary.LittleEndian.Uint64(b[k:]), binary.LittleEndian.Uint64(b[k+8:])
			g.relocs[off] = slotReloc{typ: uint32(info), sym: uint32(info >> 32), addend: int64(binary.LittleEndian.Uint64(b[k+16:]))}
		}
	}
	if addr, size := dyn(dtRELR), dyn(dtRELRSZ); addr != 0 && size != 0 {
		if total += size; total > maxRelocationBytes {
			return fmt.Errorf("more than %d bytes of relocations", maxRelocationBytes)
		}
		b, err := fl.read(addr, size)
		if err != nil {
			return fmt.Errorf("reading RELR relocations at %#x: %w", addr, err)
		}
		// An even entry is an address; an odd one a bitmap of the 63
		// words after the previous address.
		var where uint64
		for k := 0; k+8 <= len(b); k += 8 {
			e := binary.LittleEndian.Uint64(b[k:])
			if e&1 == 0 {
				g.relr[e] = true
				where = e + 8
				continue
			}
			for i := uint64(0); i < 63; i++ {
				if e>>(i+1)&1 != 0 {
					g.relr[where+i*8] = true
				}
			}
			where += 63 * 8
		}
	}
	return nil
}

// The relocation types of the file's architecture.
func (g *callGraph) jumpSlotType() uint32 {
	if g.fl.arch == regs.ArchARM64 {
		return uint32(elf.R_AARCH64_JUMP_SLOT)
	}
	return uint32(elf.R_X86_64_JMP_SLOT)
}

func (g *callGraph) globDatType() uint32 {
	if g.fl.arch == regs.ArchARM64 {
		return uint32(elf.R_AARCH64_GLOB_DAT)
	}
	return uint32(elf.R_X86_64_GLOB_DAT)
}

func (g *callGraph) iRelativeType() uint32 {
	if g.fl.arch == regs.ArchARM64 {
		return uint32(elf.R_AARCH64_IRELATIVE)
	}
	return uint32(elf.R_X86_64_IRELATIVE)
}

func (g *callGraph) relativeType() uint32 {
	if g.fl.arch == regs.ArchARM64 {
		return uint32(elf.R_AARCH64_RELATIVE)
	}
	return uint32(elf.R_X86_64_RELATIVE)
}

// readOnlyAfterRelocation reports whether the dynamic linker makes the
// 8 bytes at addr read-only after relocating them (PT_GNU_RELRO).
func (fl *file) readOnlyAfterRelocation(addr uint64) bool {
	for _, p := range fl.elf.Progs {
		if p.Type == elf.PT_GNU_RELRO && addr >= p.Vaddr && addr+8 <= p.Vaddr+p.Memsz {
			return true
		}
	}
	return false
}

// readOnlySegment reports whether addr lies in the file bytes of a
// loadable segment that is not writable.
func (fl *file) readOnlySegment(addr uint64) bool {
	for _, p := range fl.elf.Progs {
		if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr < p.Vaddr+p.Filesz {
			return p.Flags&elf.PF_W == 0
		}
	}
	return false
}

// executableAddress reports whether addr lies in the file bytes of an
// executable loadable segment.
func (fl *file) executableAddress(addr uint64) bool {
	for _, p := range fl.elf.Progs {
		if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr < p.Vaddr+p.Filesz {
			return p.Flags&elf.PF_X != 0
		}
	}
	return false
}
