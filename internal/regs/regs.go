// Package regs names the registers that probes can read, for x86-64 and
// arm64, and the calling conventions that put arguments in them.
//
// For x86-64 these are the sixteen general-purpose registers and the
// instruction pointer, as 64-bit wholes, and the AT&T operand names (%eax,
// %ax, %al, %ah, %r8d, …) that select part of one. For arm64 they are x0…x30,
// sp, pc and pstate, and the assembler's 32-bit views w0…w30. The registers
// of both architectures share the Register type with disjoint values, so a
// Register says which architecture it belongs to ([Register.Arch]); the
// package-level functions and tables without an architecture in their name
// are the x86-64 ones, and [Arch] has the per-architecture equivalents.
// The architecture always comes from the traced ELF file ([ArchOf]), never
// from the host.
//
// It is pure Go and knows nothing of BPF: [Arch.Slot] gives the index of a
// register's 8-byte word in the kernel's struct pt_regs of its architecture,
// which the loader passes to the engine.
package regs

import "strings"

// Register is a whole 64-bit x86-64 register. The zero value is no register.
type Register uint8

// The registers, in the order of the SysV and Go ABIs' tables below.
const (
	None Register = iota
	RAX
	RBX
	RCX
	RDX
	RSI
	RDI
	RBP
	RSP
	R8
	R9
	R10
	R11
	R12
	R13
	R14
	R15
	RIP
)

var names = [PSTATE + 1]string{
	None: "", RAX: "rax", RBX: "rbx", RCX: "rcx", RDX: "rdx", RSI: "rsi", RDI: "rdi",
	RBP: "rbp", RSP: "rsp", R8: "r8", R9: "r9", R10: "r10", R11: "r11", R12: "r12",
	R13: "r13", R14: "r14", R15: "r15", RIP: "rip",
}

// String returns the name of the whole register: for amd64 its AT&T name
// without the %, e.g. "rdi"; for arm64 its assembler name, e.g. "x0", "sp",
// "pc", "pstate".
func (r Register) String() string {
	if int(r) < len(names) {
		return names[r]
	}
	return "invalid"
}

// SysVIntArgs lists the registers of the integer arguments 0..5 of the SysV
// x86-64 calling convention.
var SysVIntArgs = [...]Register{RDI, RSI, RDX, RCX, R8, R9}

// GoIntArgs lists the registers of the integer arguments and results 0..8
// of Go's register-based calling convention (ABIInternal, amd64, Go 1.17
// and later); a string takes two (pointer, length).
var GoIntArgs = [...]Register{RAX, RBX, RCX, RDI, RSI, R8, R9, R10, R11}

// SysVReturn is the register of an integer return value in the SysV x86-64
// calling convention.
const SysVReturn = RAX

// Operand is a register as an AT&T operand names it: the whole register, the
// width in bytes the name selects, and a right shift in bits (8 for %ah,
// %bh, %ch, %dh; otherwise 0).
type Operand struct {
	Reg   Register
	Size  uint8
	Shift uint8
}

var operands = map[string]Operand{}

func init() {
	legacy := []struct {
		reg           Register
		q, d, w, b, h string
	}{
		{RAX, "rax", "eax", "ax", "al", "ah"},
		{RBX, "rbx", "ebx", "bx", "bl", "bh"},
		{RCX, "rcx", "ecx", "cx", "cl", "ch"},
		{RDX, "rdx", "edx", "dx", "dl", "dh"},
		{RSI, "rsi", "esi", "si", "sil", ""},
		{RDI, "rdi", "edi", "di", "dil", ""},
		{RBP, "rbp", "ebp", "bp", "bpl", ""},
		{RSP, "rsp", "esp", "sp", "spl", ""},
	}
	for _, l := range legacy {
		operands[l.q] = Operand{l.reg, 8, 0}
		operands[l.d] = Operand{l.reg, 4, 0}
		operands[l.w] = Operand{l.reg, 2, 0}
		operands[l.b] = Operand{l.reg, 1, 0}
		if l.h != "" {
			operands[l.h] = Operand{l.reg, 1, 8}
		}
	}
	for r := R8; r <= R15; r++ {
		n := r.String()
		operands[n] = Operand{r, 8, 0}
		operands[n+"d"] = Operand{r, 4, 0}
		operands[n+"w"] = Operand{r, 2, 0}
		operands[n+"b"] = Operand{r, 1, 0}
		operands[n+"l"] = Operand{r, 1, 0}
	}
	operands["rip"] = Operand{RIP, 8, 0}
	operands["eip"] = Operand{RIP, 4, 0}
}

// ParseOperand returns the register an AT&T operand name selects, with or
// without the leading %, case-insensitively: "%eax" is the low 4 bytes of
// RAX, "%ah" the second byte.
func ParseOperand(name string) (Operand, bool) {
	op, ok := operands[strings.ToLower(strings.TrimPrefix(name, "%"))]
	return op, ok
}

// kernelNames are the struct pt_regs field names the kernel's probe syntax
// uses; each stands for the whole 64-bit register.
var kernelNames = map[string]Register{
	"ax": RAX, "bx": RBX, "cx": RCX, "dx": RDX, "si": RSI, "di": RDI,
	"bp": RBP, "sp": RSP, "ip": RIP,
}

// ParseWhole returns the whole register named the way kernel probe
// definitions name it (pt_regs names "ax", "di", "ip", …) or by its 64-bit
// AT&T name ("rax", "rdi", "r15", "rip"), with or without the leading %.
func ParseWhole(name string) (Register, bool) {
	n := strings.ToLower(strings.TrimPrefix(name, "%"))
	if r, ok := kernelNames[n]; ok {
		return r, true
	}
	if op, ok := operands[n]; ok && op.Size == 8 {
		return op.Reg, true
	}
	return None, false
}

// WholeNames lists every name ParseWhole accepts, for error messages.
func WholeNames() []string {
	out := []string{"ax", "bx", "cx", "dx", "si", "di", "bp", "sp", "ip"}
	for r := RAX; r <= RIP; r++ {
		out = append(out, r.String())
	}
	return out
}
