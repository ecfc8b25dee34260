package regs

import (
	"debug/elf"
	"fmt"
	"strconv"
	"strings"
)

// Arch is a processor architecture whose registers probes can read. It is
// taken from the traced ELF file's e_machine ([ArchOf]), never from the
// host, so that a collector may trace programs of another architecture's
// files (and tests may parse them on any host). The zero value is no
// architecture.
type Arch uint8

// The architectures.
const (
	// ArchUnknown is the zero Arch: no architecture.
	ArchUnknown Arch = iota
	// ArchAMD64 is x86-64 (elf.EM_X86_64): registers RAX…R15 and RIP.
	ArchAMD64
	// ArchARM64 is AArch64 (elf.EM_AARCH64): registers X0…X30, SP, PC and
	// PSTATE.
	ArchARM64
)

// ArchOf returns the architecture of an ELF file's machine, e.g.
// ArchOf(f.Machine) for the traced file f. Machines other than EM_X86_64 and
// EM_AARCH64 give an error naming the machine.
func ArchOf(m elf.Machine) (Arch, error) {
	switch m {
	case elf.EM_X86_64:
		return ArchAMD64, nil
	case elf.EM_AARCH64:
		return ArchARM64, nil
	}
	return ArchUnknown, fmt.Errorf("unsupported machine %v: want EM_X86_64 or EM_AARCH64", m)
}

// String returns the architecture's GOARCH name: "amd64" or "arm64".
func (a Arch) String() string {
	switch a {
	case ArchAMD64:
		return "amd64"
	case ArchARM64:
		return "arm64"
	case ArchUnknown:
		return "unknown"
	}
	return fmt.Sprintf("Arch(%d)", uint8(a))
}

// Machine returns the ELF e_machine value of the architecture, or
// elf.EM_NONE for ArchUnknown.
func (a Arch) Machine() elf.Machine {
	switch a {
	case ArchAMD64:
		return elf.EM_X86_64
	case ArchARM64:
		return elf.EM_AARCH64
	}
	return elf.EM_NONE
}

// Arch returns the architecture r belongs to: ArchAMD64 for RAX…RIP,
// ArchARM64 for X0…PSTATE, ArchUnknown for None and invalid values.
func (r Register) Arch() Arch {
	switch {
	case r >= RAX && r <= RIP:
		return ArchAMD64
	case r >= X0 && r <= PSTATE:
		return ArchARM64
	}
	return ArchUnknown
}

// Registers returns every register of a, in pt_regs slot order for arm64
// and in the order of the Register constants for amd64.
func (a Arch) Registers() []Register {
	var out []Register
	switch a {
	case ArchAMD64:
		for r := RAX; r <= RIP; r++ {
			out = append(out, r)
		}
	case ArchARM64:
		for r := X0; r <= PSTATE; r++ {
			out = append(out, r)
		}
	}
	return out
}

// pt_regs slots. The kernel hands a uprobe's BPF program (and a tracefs
// probe's fetch arguments) a struct pt_regs; a register's value is the
// 8-byte word at byte offset 8*slot of it.
//
// On x86-64 the slots are those of struct pt_regs (arch/x86/include/asm/
// ptrace.h, also bpf/abi.h's enum reg_slot_x86): r15, r14, r13, r12, bp, bx,
// r11, r10, r9, r8, ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss.
//
// On arm64 the kernel's struct pt_regs starts with struct user_pt_regs
// (arch/arm64/include/uapi/asm/ptrace.h): u64 regs[31] (x0…x30), sp, pc,
// pstate, so x0…x30 are slots 0…30, sp is 31, pc 32 and pstate 33 (bpf/abi.h's
// enum reg_slot_arm64; internal/bpfobj's layout test checks both enums
// against Slot). (In an
// instruction, register number 31 means sp or the zero register depending
// on the instruction; in pt_regs, slot 31 is always sp.)
var amd64Slots = map[Register]int{
	R15: 0, R14: 1, R13: 2, R12: 3, RBP: 4, RBX: 5, R11: 6, R10: 7, R9: 8, R8: 9,
	RAX: 10, RCX: 11, RDX: 12, RSI: 13, RDI: 14, RIP: 16, RSP: 19,
}

// AMD64SlotCount is the number of 8-byte slots of the x86-64 struct
// pt_regs (r15 … ss).
const AMD64SlotCount = 21

// ARM64SlotCount is the number of 8-byte slots of the arm64 struct
// user_pt_regs (regs[31], sp, pc, pstate), the head of its struct pt_regs.
const ARM64SlotCount = 34

// SlotCount returns the number of 8-byte pt_regs slots of a that hold user
// registers: AMD64SlotCount, ARM64SlotCount, or 0 for ArchUnknown.
func (a Arch) SlotCount() int {
	switch a {
	case ArchAMD64:
		return AMD64SlotCount
	case ArchARM64:
		return ARM64SlotCount
	}
	return 0
}

// Slot returns the index of r's 8-byte word in a's struct pt_regs: for
// amd64 the value of bpf/abi.h's enum reg_slot_x86 (RAX is 10, RIP 16, RSP 19),
// for arm64 the index into user_pt_regs (X0 is 0, X30 30, SP 31, PC 32,
// PSTATE 33). It reports false when r is not a register of a (an arm64
// register asked of amd64, or None).
func (a Arch) Slot(r Register) (int, bool) {
	if r.Arch() != a {
		return 0, false
	}
	switch a {
	case ArchAMD64:
		s, ok := amd64Slots[r]
		return s, ok
	case ArchARM64:
		return int(r - X0), true
	}
	return 0, false
}

// SlotOffset returns the byte offset of r in a's struct pt_regs: 8 times
// [Arch.Slot].
func (a Arch) SlotOffset(r Register) (int, bool) {
	s, ok := a.Slot(r)
	return 8 * s, ok
}

// CIntArgs returns the registers of the integer arguments of a's C calling
// convention, in argument order: rdi, rsi, rdx, rcx, r8, r9 (SysV x86-64);
// x0 … x7 (AAPCS64). Later integer arguments are on the stack, see
// [Arch.CStackArgsOffset].
func (a Arch) CIntArgs() []Register {
	switch a {
	case ArchAMD64:
		return SysVIntArgs[:]
	case ArchARM64:
		return AAPCS64IntArgs[:]
	}
	return nil
}

// CReturn returns the register of an integer return value of a's C calling
// convention: rax or x0.
func (a Arch) CReturn() Register {
	switch a {
	case ArchAMD64:
		return SysVReturn
	case ArchARM64:
		return AAPCS64Return
	}
	return None
}

// CStackArgsOffset returns, in bytes, how far above the stack pointer the
// first stack-passed integer argument of a C function lies at the
// function's first instruction: 8 on x86-64, where the call pushed the
// return address, and 0 on arm64, where the return address is in x30. Each
// later stack argument is 8 bytes further.
func (a Arch) CStackArgsOffset() int64 {
	if a == ArchAMD64 {
		return 8
	}
	return 0
}

// GoIntArgs returns the registers of the integer arguments and results of
// Go's register-based calling convention (ABIInternal) on a: nine on amd64
// (GoIntArgs), sixteen on arm64 (GoARM64IntArgs, Go's R0…R15).
func (a Arch) GoIntArgs() []Register {
	switch a {
	case ArchAMD64:
		return GoIntArgs[:]
	case ArchARM64:
		return GoARM64IntArgs[:]
	}
	return nil
}

// GoG returns the register that holds the current goroutine's g in Go code
// on a: r14 on amd64, x28 (Go's R28, "g") on arm64.
func (a Arch) GoG() Register {
	switch a {
	case ArchAMD64:
		return R14
	case ArchARM64:
		return GoARM64G
	}
	return None
}

// StackPointer returns a's stack pointer register: rsp or sp.
func (a Arch) StackPointer() Register {
	switch a {
	case ArchAMD64:
		return RSP
	case ArchARM64:
		return SP
	}
	return None
}

// InstructionPointer returns a's program counter: rip or pc.
func (a Arch) InstructionPointer() Register {
	switch a {
	case ArchAMD64:
		return RIP
	case ArchARM64:
		return PC
	}
	return None
}

// LinkRegister returns the register that holds the return address at a
// function's first instruction: x30 on arm64; None on amd64, where the
// return address is at the top of the stack.
func (a Arch) LinkRegister() Register {
	if a == ArchARM64 {
		return X30
	}
	return None
}

// ParseOperand returns the register part an assembler operand name selects
// on a: for amd64 the AT&T names of the package-level [ParseOperand]
// ("%eax", "%ah"), for arm64 the GNU assembler's names ("x0"…"x30" and
// "w0"…"w30" for their low 4 bytes, "sp" and "wsp", and the aliases "fp"
// for x29, "lr" for x30, "ip0" and "ip1" for x16 and x17), case-insensitively.
// The zero registers xzr and wzr are refused: they are not in pt_regs.
func (a Arch) ParseOperand(name string) (Operand, bool) {
	switch a {
	case ArchAMD64:
		return ParseOperand(name)
	case ArchARM64:
		op, ok := arm64Operands[strings.ToLower(name)]
		return op, ok
	}
	return Operand{}, false
}

// ParseWhole returns the whole register named the way a's kernel probe
// definitions, assembler or Go assembler name it, with or without a leading
// %, case-insensitively. For amd64 it is the package-level [ParseWhole].
// For arm64 it accepts the pt_regs names "x0"…"x30", "sp", "pc" and
// "pstate", the aliases "fp", "lr", "ip0" and "ip1", and Go's names
// "R0"…"R30" and "RSP".
func (a Arch) ParseWhole(name string) (Register, bool) {
	switch a {
	case ArchAMD64:
		return ParseWhole(name)
	case ArchARM64:
		r, ok := arm64Wholes[strings.ToLower(strings.TrimPrefix(name, "%"))]
		return r, ok
	}
	return None, false
}

// WholeNames lists every name [Arch.ParseWhole] accepts for a, for error
// messages.
func (a Arch) WholeNames() []string {
	switch a {
	case ArchAMD64:
		return WholeNames()
	case ArchARM64:
		out := make([]string, 0, len(arm64WholeOrder))
		return append(out, arm64WholeOrder...)
	}
	return nil
}

// GoName returns the Go assembler's name of r: "AX", "R8", "SP" for amd64
// registers ("PC" for RIP); "R0"…"R30", "RSP", "PC" and "PSTATE" for arm64
// ones; "" for None and invalid values.
func (r Register) GoName() string {
	switch {
	case r >= RAX && r <= RSP:
		return strings.ToUpper(r.String()[1:])
	case r >= R8 && r <= R15:
		return strings.ToUpper(r.String())
	case r == RIP, r == PC:
		return "PC"
	case r >= X0 && r <= X30:
		return "R" + strconv.Itoa(int(r-X0))
	case r == SP:
		return "RSP"
	case r == PSTATE:
		return "PSTATE"
	}
	return ""
}
