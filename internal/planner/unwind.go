package planner

import (
	"debug/elf"
	"fmt"
	"strings"

	"github.com/otel-uprobe/uprobereceiver/internal/elfaddr"
	"github.com/otel-uprobe/uprobereceiver/internal/insn"
)

// HazardUretprobeUnwind is the name accept_kernel_hazards gives the hazard
// of a kernel return probe on a function an exception may unwind through:
// the probe replaces the function's return address with the kernel's
// trampoline, which has no call-frame information, so the unwinder (libgcc)
// stops there and the program calls std::terminate (aborts). The kernel
// cleans up after longjmp, not after exceptions.
const HazardUretprobeUnwind = "uretprobe_unwind"

// exceptionSymbols are the symbols of the exception ABI that code which
// throws (__cxa_throw, _Unwind_RaiseException), catches
// (__cxa_begin_catch), resumes after a cleanup (_Unwind_Resume) or has
// handlers (a personality routine) imports. The value says whether a
// file that defines it holds a language's exception runtime (libstdc++,
// or a static C++, Rust, Ada or Objective-C program) and so code that
// throws; the unwinder's own entry points (libgcc_s, and libgcc_eh in any
// static program, for glibc's thread cancellation) do not say so.
var exceptionSymbols = map[string]bool{
	"__cxa_throw": true, "__cxa_rethrow": true, "__cxa_begin_catch": true,
	"__gxx_personality_v0": true, "rust_eh_personality": true, "__gnat_personality_v0": true, "__objc_personality_v0": true,
	"_Unwind_RaiseException": false, "_Unwind_Resume": false, "_Unwind_Resume_or_Rethrow": false, "__gcc_personality_v0": false,
}

// unwindSymbols is what a file's symbol tables say about its code taking
// part in exception unwinding: the first reason of each kind.
type unwindSymbols struct {
	imports string // "it imports __cxa_throw"
	defines string // "it defines __cxa_throw" (a language's runtime)
	cxx     string // "it has C++ symbols such as _ZN…": Itanium-mangled names (C++, Rust's legacy mangling)
	// fullSymbols says a symbol table (.symtab, the file's or its debug
	// file's) was read, not only the dynamic symbols.
	fullSymbols bool
}

// note records what symbol s (defined or imported) says.
func (u *unwindSymbols) note(s elf.Symbol) {
	undefined := s.Section == elf.SHN_UNDEF
	if language, ok := exceptionSymbols[s.Name]; ok {
		switch {
		case undefined && u.imports == "":
			u.imports = "it imports " + s.Name
		case !undefined && language && u.defines == "":
			u.defines = "it defines " + s.Name
		}
		return
	}
	if u.cxx == "" && strings.HasPrefix(s.Name, "_Z") && (undefined || elf.ST_TYPE(s.Info) == elf.STT_FUNC) {
		name := s.Name
		if len(name) > 48 {
			name = name[:48] + "…"
		}
		u.cxx = "it has C++ symbols such as " + name
	}
}

// why returns the first reason the symbols give, "" for none.
func (u *unwindSymbols) why() string {
	for _, w := range []string{u.imports, u.defines, u.cxx} {
		if w != "" {
			return w
		}
	}
	return ""
}

// staticExecutable says the file is a program that runs without shared
// libraries (no PT_INTERP; ET_EXEC, or ET_DYN marked DF_1_PIE: static-pie):
// its process runs only its own code.
func (fl *file) staticExecutable() bool {
	for _, p := range fl.elf.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	if fl.elf.Type == elf.ET_EXEC {
		return true
	}
	flags, err := fl.elf.DynValue(elf.DT_FLAGS_1)
	return err == nil && len(flags) > 0 && flags[0]&uint64(elf.DF_1_PIE) != 0
}

// exceptions reports whether exceptions may unwind through the code of the
// file, and why, decided once per file. The file takes part in exception
// unwinding when
//
//   - its symbols import the exception ABI (exceptionSymbols: it throws,
//     catches, has cleanups or handlers), define a language's exception
//     runtime, or are C++ names (C++ exceptions unwind through C++ code
//     that has no handler, cleanup or throw of its own, even built with
//     -fno-exceptions); or
//   - its .eh_frame has a CIE with a personality routine (code with
//     handlers or cleanups in any language: C built with -fexceptions, as
//     glibc builds qsort, bsearch and its other functions that call back
//     into the program; such a file holds no code that throws, so only its
//     functions that reach a callback or another file's code can be
//     unwound through: unwindCallbacksOnly, see callbackExit), or cannot
//     be read: a wrong yes costs the file's own RET probes, a wrong no an
//     aborted program. A static executable
//     with a symbol table is the exception: its process runs only its own
//     code, so what could raise an exception there shows in its symbols
//     (a static C program holds glibc's -fexceptions code and libgcc's
//     unwinder, for thread cancellation, which unwinds without aborting).
//
// Otherwise (a C program or library, even one linked against libstdc++
// that calls none of it) the file holds no code that throws, catches or
// cleans up; an exception could cross its frames only from a callback it
// calls into another file's code and back to a handler in a caller in
// another file, which the rule assumes C code without -fexceptions is not
// used for. A file without .eh_frame cannot be unwound through at all.
func (fl *file) exceptions() (bool, string) {
	if fl.unwindDone {
		return fl.unwindWhy != "", fl.unwindWhy
	}
	fl.unwindDone = true
	if fl.unwindWhy = fl.unwind.why(); fl.unwindWhy != "" || fl.unwind.fullSymbols && fl.staticExecutable() {
		return fl.unwindWhy != "", fl.unwindWhy
	}
	switch has, err := elfaddr.HasPersonality(fl.elf); {
	case err != nil:
		fl.unwindWhy = fmt.Sprintf("its call-frame information cannot be read to prove otherwise (%v)", err)
	case has:
		fl.unwindWhy = "its call-frame information names a personality routine"
		fl.unwindCallbacksOnly = true
	}
	return fl.unwindWhy != "", fl.unwindWhy
}

// unwoundThrough says whether an exception may unwind through function fn
// (its instructions insts), and why: its file takes part in exception
// unwinding (exceptions) and fn calls other code or leaves by a jump
// (insn.FirstCall). Go functions are not asked: their returns are never
// kernel return probes.
//
// In a file that takes part only through the personality routines of its
// call-frame information (C built with -fexceptions, as glibc is), no code
// throws, so an exception can only come in from code the file does not
// hold: fn may be unwound through only if, through direct calls and jumps
// inside the file, it reaches an exit to such code (file.callbackExit).
func (fl *file) unwoundThrough(fn function, insts []insn.Inst) (string, bool) {
	ok, why := fl.exceptions()
	if !ok {
		return "", false
	}
	in, ok := insn.FirstCall(insts)
	if !ok {
		return "", false
	}
	if fl.unwindCallbacksOnly {
		reach, ok := fl.callbackExit(fn)
		if !ok {
			return "", false
		}
		return fmt.Sprintf("%s reaches %s, where an exception of other code may come in, and its file unwinds exceptions (%s)", fn.Name, reach, why), true
	}
	return fmt.Sprintf("%s runs other code (+%#x: %s) and its file unwinds exceptions (%s)", fn.Name, in.Offset, fl.branchText(fn, in), why), true
}

// callbackExit says whether function fn of a file that takes part in
// exception unwinding only through its call-frame information reaches,
// transitively through the direct calls and jumps inside the file, an exit
// through which an exception can come into it, and describes the first
// found ("a call through a pointer (call *%rax at msort_with_tmp+0x1c2,
// through qsort_r, msort_with_tmp)"). Such a file holds no code that
// throws (no C++ symbols, no import or definition of the exception ABI;
// even a file that hides C++ code would throw through the unwinder, which
// calls personality routines through pointers: an exit), so an exception
// can only come from code it calls that is not its own. The exits are
//
//   - a call or jump through a pointer that is not a fixed slot
//     (function pointers, callbacks: qsort's comparator, NSS modules,
//     dl_iterate_phdr's and pthread_once's callbacks, atexit handlers);
//   - a call through a slot (a PLT entry, a GOT entry) that the dynamic
//     linker binds to a symbol (JUMP_SLOT, GLOB_DAT): a function of
//     another file, or one of this file's that another file may
//     interpose (LD_PRELOAD, a program's own malloc), which may call back;
//   - a slot the program may change (outside PT_GNU_RELRO), a slot no
//     relocation sets, a relocation of another kind, a jump table that is
//     not read-only or whose first entry leaves the function;
//   - code whose extent, bytes or instructions are not known, and any
//     code past the search's bounds (callGraphMaxFunctions,
//     callGraphMaxCode).
//
// Not exits: direct calls and jumps to the file's functions (followed,
// with a function's gcc cold part by name), calls through slots the
// dynamic linker fills with this file's code (R_*_RELATIVE, RELR; and
// R_*_IRELATIVE, glibc's ifunc'd memcpy or strlen, followed to every
// implementation the ifunc's resolver computes the address of, a resolver
// that calls anything being an exit), and jumps through a compiler's jump
// table inside the function. Each function is decoded at most once per
// file and what the search proves is kept.
func (fl *file) callbackExit(fn function) (string, bool) {
	path := fl.graph().exitOf(fn)
	if len(path) == 0 {
		return "", false
	}
	last := path[len(path)-1]
	e := *last.own
	if e.in.Len > 0 {
		// The graph decodes without text: the instruction, named.
		if insts, err := fl.decodeText(e.fn); err == nil {
			if i := instAt(insts, e.in.Offset); i >= 0 && insts[i].Offset == e.in.Offset {
				e.in = insts[i]
			}
		}
	}
	where := "in " + e.fn.Name
	switch {
	case e.stub != 0:
		mnemonic, _, _ := strings.Cut(e.in.Text, " ")
		where = fmt.Sprintf("%s+%#x: %s %#x, a PLT entry", e.fn.Name, e.in.Offset, mnemonic, e.stub)
	case e.in.Text != "":
		where = fmt.Sprintf("%s+%#x: %s", e.fn.Name, e.in.Offset, fl.branchText(e.fn, e.in))
	}
	if len(path) > 1 {
		names := make([]string, 0, len(path)-1)
		for i, n := range path[1:] {
			if i == 4 && len(path) > 6 {
				names = append(names, "…")
				n = path[len(path)-1]
			} else if i > 4 {
				break
			}
			names = append(names, n.fn.Name)
		}
		where += ", through " + strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s (%s)", e.what, where), true
}

// branchText describes a branch of fn: its mnemonic and, for a direct one,
// the function it goes to.
func (fl *file) branchText(fn function, in insn.Inst) string {
	text := in.Text
	if text == "" { // decoded without text (file.decode)
		text = fl.textAt(fn, in.Offset)
	}
	t, ok := in.Target()
	if !ok {
		return text
	}
	mnemonic, _, _ := strings.Cut(text, " ")
	addr := fn.Address + uint64(t)
	if to, ok := fl.containing(addr); ok {
		if to.Address == addr {
			return mnemonic + " " + to.Name
		}
		return fmt.Sprintf("%s %s+%#x", mnemonic, to.Name, addr-to.Address)
	}
	return fmt.Sprintf("%s %#x", mnemonic, addr)
}

// UnwindHazardError refuses a kernel return probe on a function that an
// exception may unwind through (see HazardUretprobeUnwind).
type UnwindHazardError struct {
	// Function is the function's name; Why says why an exception may
	// unwind through it.
	Function, Why string
	// Instead is what to do instead: the ret: reference of its RET
	// instructions, or "" when it has none.
	Instead string
}

// Error is one sentence: what would happen, why, and what to do.
func (e *UnwindHazardError) Error() string {
	instead := "it has no RET instruction to probe instead (it leaves by tail calls), so probe its callers"
	if e.Instead != "" {
		instead = "probe its returns with " + e.Instead + " instead (returns: ret or auto; the kernel single-steps RET: about 9 µs per return instead of 0.4 µs)"
	}
	return fmt.Sprintf("a kernel return probe on %s would abort the program when an exception unwinds through it, since the unwinder cannot step through the kernel's return trampoline and calls std::terminate (%s); %s, or accept the hazard with accept_kernel_hazards: [%s]",
		e.Function, e.Why, instead, HazardUretprobeUnwind)
}

// unwindRefusal refuses a kernel return probe on fn, which an exception
// may unwind through for the reason why.
func (fl *file) unwindRefusal(fn function, why string, insts []insn.Inst) error {
	e := &UnwindHazardError{Function: fn.Name, Why: why}
	if len(insn.Returns(insts)) > 0 {
		e.Instead = "ret:"
		if _, named := fl.functions[fn.Name]; named {
			e.Instead += fn.Name
		}
	}
	return e
}
