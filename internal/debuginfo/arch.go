package debuginfo

import (
	"debug/elf"
	"fmt"

	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

// Arch is what the package knows of one machine: how DWARF numbers its
// registers, which of them the engine can read, and the rules of its calling
// conventions that locations depend on.
type Arch struct {
	// Machine is the ELF machine.
	Machine elf.Machine
	// Names are the DWARF register names, by DWARF register number.
	Names []string
	// Registers map DWARF register numbers to the engine's registers;
	// numbers past its end, or mapped to regs.None, are registers the
	// engine cannot read.
	Registers []regs.Register
	// SP and PC are the DWARF numbers of the stack pointer and of the
	// register CFI uses for the return address.
	SP, ReturnAddress int
	// EntryCFAOffset is the CFA minus the stack pointer at a function's
	// first instruction: 8 on x86-64 (the call pushed the return address),
	// 0 on arm64.
	EntryCFAOffset int64
	// PtrSize is the size of a pointer in bytes.
	PtrSize int
}

// archX86_64 is x86-64: DWARF registers 0..16 are rax, rdx, rcx, rbx, rsi,
// rdi, rbp, rsp, r8..r15 and the return address (rip); 17..32 are
// xmm0..xmm15, named for messages but not readable by the engine.
var archX86_64 = &Arch{
	Machine: elf.EM_X86_64,
	Names: []string{"rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp",
		"r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15", "rip",
		"xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
		"xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15"},
	Registers: []regs.Register{regs.RAX, regs.RDX, regs.RCX, regs.RBX, regs.RSI, regs.RDI, regs.RBP, regs.RSP,
		regs.R8, regs.R9, regs.R10, regs.R11, regs.R12, regs.R13, regs.R14, regs.R15, regs.RIP},
	SP:             7,
	ReturnAddress:  16,
	EntryCFAOffset: 8,
	PtrSize:        8,
}

// archARM64 is arm64: DWARF registers 0..30 are x0..x30 and 31 is sp.
// Locations, CFI and types work as on x86-64; the calling-convention
// fallbacks (SysV at entry, Go results) are x86-64 only.
var archARM64 = func() *Arch {
	a := &Arch{Machine: elf.EM_AARCH64, SP: 31, ReturnAddress: 30, EntryCFAOffset: 0, PtrSize: 8}
	for i := 0; i <= 30; i++ {
		a.Names = append(a.Names, fmt.Sprintf("x%d", i))
		a.Registers = append(a.Registers, regs.X0+regs.Register(i))
	}
	a.Names = append(a.Names, "sp")
	a.Registers = append(a.Registers, regs.SP)
	return a
}()

// ArchFor returns the Arch of an ELF machine, or an error for machines the
// package does not know.
func ArchFor(m elf.Machine) (*Arch, error) {
	switch m {
	case elf.EM_X86_64:
		return archX86_64, nil
	case elf.EM_AARCH64:
		return archARM64, nil
	}
	return nil, fmt.Errorf("machine %s: %w", m, ErrUnsupportedMachine)
}

// RegName returns the name of DWARF register n, e.g. "rdi" or "x0", or
// "dwarf register N" for a number the Arch does not name.
func (a *Arch) RegName(n int) string {
	if n >= 0 && n < len(a.Names) {
		return a.Names[n]
	}
	return fmt.Sprintf("dwarf register %d", n)
}

// Register returns the engine's register for DWARF register n, or an error
// that names it when the engine cannot read it.
func (a *Arch) Register(n int) (regs.Register, error) {
	if n >= 0 && n < len(a.Registers) && a.Registers[n] != regs.None {
		return a.Registers[n], nil
	}
	return regs.None, fmt.Errorf("register %s (%s): %w", a.RegName(n), a.Machine, ErrRegisterUnreadable)
}
