package regs

import (
	"strconv"
	"strings"
)

// The arm64 registers, in pt_regs slot order (see [Arch.Slot]): the 31
// general-purpose registers x0…x30 (Go's R0…R30; x29 is the frame pointer,
// x30 the link register), the stack pointer, the program counter and
// PSTATE. Each is a whole 64-bit register; the 32-bit views w0…w30 are
// Operands of these ([Arch.ParseOperand]). They follow the amd64 registers,
// so that one Register value never names registers of two architectures.
const (
	X0 Register = iota + RIP + 1
	X1
	X2
	X3
	X4
	X5
	X6
	X7
	X8
	X9
	X10
	X11
	X12
	X13
	X14
	X15
	X16
	X17
	X18
	X19
	X20
	X21
	X22
	X23
	X24
	X25
	X26
	X27
	X28
	X29
	X30
	// SP is the arm64 stack pointer (Go's RSP).
	SP
	// PC is the arm64 program counter.
	PC
	// PSTATE is the arm64 processor state (condition flags and more), as
	// the kernel saves it in pt_regs.
	PSTATE
)

// AAPCS64IntArgs lists the registers of the integer arguments 0..7 of the
// AAPCS64 (arm64 C) calling convention; later ones are on the stack,
// starting at the stack pointer at the function's first instruction.
var AAPCS64IntArgs = [...]Register{X0, X1, X2, X3, X4, X5, X6, X7}

// AAPCS64Return is the register of an integer return value in the AAPCS64
// calling convention.
const AAPCS64Return = X0

// GoARM64IntArgs lists the registers of the integer arguments and results
// 0..15 of Go's register-based calling convention on arm64 (ABIInternal,
// Go 1.18 and later): Go's R0…R15; a string takes two (pointer, length).
var GoARM64IntArgs = [...]Register{X0, X1, X2, X3, X4, X5, X6, X7, X8, X9, X10, X11, X12, X13, X14, X15}

// GoARM64G is the register that holds the current goroutine's g in Go code
// on arm64 (Go's R28, which its assembler also calls g).
const GoARM64G = X28

var (
	// arm64Operands maps the GNU assembler's lowercase register names to
	// register parts.
	arm64Operands = map[string]Operand{}
	// arm64Wholes maps every name Arch.ParseWhole accepts for arm64,
	// lowercased, to its register.
	arm64Wholes = map[string]Register{}
	// arm64WholeOrder lists those names, as written in the documentation
	// ("x0", "R0"), for error messages.
	arm64WholeOrder []string
)

func init() {
	for r := X0; r <= X30; r++ {
		n := strconv.Itoa(int(r - X0))
		names[r] = "x" + n
		arm64Operands["x"+n] = Operand{r, 8, 0}
		arm64Operands["w"+n] = Operand{r, 4, 0}
	}
	names[SP], names[PC], names[PSTATE] = "sp", "pc", "pstate"
	arm64Operands["sp"] = Operand{SP, 8, 0}
	arm64Operands["wsp"] = Operand{SP, 4, 0}
	for alias, r := range map[string]Register{"fp": X29, "lr": X30, "ip0": X16, "ip1": X17} {
		arm64Operands[alias] = Operand{r, 8, 0}
	}

	add := func(name string, r Register) {
		arm64Wholes[strings.ToLower(name)] = r
		arm64WholeOrder = append(arm64WholeOrder, name)
	}
	for r := X0; r <= PSTATE; r++ {
		add(r.String(), r)
	}
	add("fp", X29)
	add("lr", X30)
	add("ip0", X16)
	add("ip1", X17)
	for r := X0; r <= X30; r++ {
		add(r.GoName(), r)
	}
	add(SP.GoName(), SP)
}
