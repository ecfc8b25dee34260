package regs

import (
	"debug/elf"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestArchOf(t *testing.T) {
	a, err := ArchOf(elf.EM_X86_64)
	require.NoError(t, err)
	assert.Equal(t, ArchAMD64, a)
	a, err = ArchOf(elf.EM_AARCH64)
	require.NoError(t, err)
	assert.Equal(t, ArchARM64, a)
	for _, m := range []elf.Machine{elf.EM_386, elf.EM_ARM, elf.EM_RISCV, elf.EM_NONE} {
		a, err = ArchOf(m)
		require.Error(t, err, m.String())
		assert.Contains(t, err.Error(), m.String())
		assert.Equal(t, ArchUnknown, a)
	}
	assert.Equal(t, elf.EM_X86_64, ArchAMD64.Machine())
	assert.Equal(t, elf.EM_AARCH64, ArchARM64.Machine())
	assert.Equal(t, elf.EM_NONE, ArchUnknown.Machine())
	assert.Equal(t, "amd64", ArchAMD64.String())
	assert.Equal(t, "arm64", ArchARM64.String())
	assert.Equal(t, "unknown", ArchUnknown.String())
	assert.Equal(t, "Arch(7)", Arch(7).String())
}

func TestARM64Registers(t *testing.T) {
	// The x86 registers keep their values; arm64 ones follow.
	assert.Equal(t, Register(17), RIP)
	assert.Equal(t, RIP+1, X0)
	assert.Equal(t, X0+30, X30)
	assert.Equal(t, X30+1, SP)
	assert.Equal(t, SP+1, PC)
	assert.Equal(t, PC+1, PSTATE)

	regsARM := ArchARM64.Registers()
	require.Len(t, regsARM, 34)
	for i, r := range regsARM {
		assert.Equal(t, ArchARM64, r.Arch(), r.String())
		slot, ok := ArchARM64.Slot(r)
		require.True(t, ok, r.String())
		assert.Equal(t, i, slot, "%s is slot %d of user_pt_regs", r, i)
	}
	regsAMD := ArchAMD64.Registers()
	require.Len(t, regsAMD, 17)
	for _, r := range regsAMD {
		assert.Equal(t, ArchAMD64, r.Arch(), r.String())
	}
	assert.Equal(t, ArchUnknown, None.Arch())
	assert.Equal(t, ArchUnknown, Register(PSTATE+1).Arch())
	assert.Empty(t, ArchUnknown.Registers())

	for i := 0; i <= 30; i++ {
		assert.Equal(t, fmt.Sprintf("x%d", i), (X0 + Register(i)).String())
		assert.Equal(t, fmt.Sprintf("R%d", i), (X0 + Register(i)).GoName())
	}
	assert.Equal(t, "sp", SP.String())
	assert.Equal(t, "pc", PC.String())
	assert.Equal(t, "pstate", PSTATE.String())
	assert.Equal(t, "RSP", SP.GoName())
	assert.Equal(t, "PC", PC.GoName())
	assert.Equal(t, "PSTATE", PSTATE.GoName())
	assert.Equal(t, "AX", RAX.GoName())
	assert.Equal(t, "SP", RSP.GoName())
	assert.Equal(t, "BP", RBP.GoName())
	assert.Equal(t, "R8", R8.GoName())
	assert.Equal(t, "R15", R15.GoName())
	assert.Equal(t, "PC", RIP.GoName())
	assert.Equal(t, "", None.GoName())
}

func TestSlots(t *testing.T) {
	// amd64: bpf/abi.h's enum reg_slot, the layout of struct pt_regs.
	amd64 := map[Register]int{
		R15: 0, R14: 1, R13: 2, R12: 3, RBP: 4, RBX: 5, R11: 6, R10: 7, R9: 8, R8: 9,
		RAX: 10, RCX: 11, RDX: 12, RSI: 13, RDI: 14, RIP: 16, RSP: 19,
	}
	for r, want := range amd64 {
		got, ok := ArchAMD64.Slot(r)
		require.True(t, ok, r.String())
		assert.Equal(t, want, got, r.String())
		off, ok := ArchAMD64.SlotOffset(r)
		require.True(t, ok)
		assert.Equal(t, 8*want, off, r.String())
		assert.Less(t, got, ArchAMD64.SlotCount())
	}
	// arm64: user_pt_regs.
	for _, c := range []struct {
		r         Register
		slot, off int
	}{
		{X0, 0, 0}, {X1, 1, 8}, {X7, 7, 56}, {X28, 28, 224}, {X29, 29, 232}, {X30, 30, 240},
		{SP, 31, 248}, {PC, 32, 256}, {PSTATE, 33, 264},
	} {
		got, ok := ArchARM64.Slot(c.r)
		require.True(t, ok, c.r.String())
		assert.Equal(t, c.slot, got, c.r.String())
		off, ok := ArchARM64.SlotOffset(c.r)
		require.True(t, ok)
		assert.Equal(t, c.off, off, c.r.String())
	}
	assert.Equal(t, 21, ArchAMD64.SlotCount())
	assert.Equal(t, 34, ArchARM64.SlotCount())
	assert.Equal(t, 0, ArchUnknown.SlotCount())

	// A register of the other architecture, or none, has no slot.
	for _, c := range []struct {
		a Arch
		r Register
	}{
		{ArchAMD64, X0}, {ArchAMD64, SP}, {ArchARM64, RAX}, {ArchARM64, RSP}, {ArchARM64, None},
		{ArchAMD64, None}, {ArchUnknown, X0}, {ArchARM64, PSTATE + 1},
	} {
		_, ok := c.a.Slot(c.r)
		assert.False(t, ok, "%s slot of %s", c.a, c.r)
		_, ok = c.a.SlotOffset(c.r)
		assert.False(t, ok)
	}
}

func TestARM64ParseOperand(t *testing.T) {
	want := map[string]Operand{
		"sp": {SP, 8, 0}, "wsp": {SP, 4, 0},
		"fp": {X29, 8, 0}, "lr": {X30, 8, 0}, "ip0": {X16, 8, 0}, "ip1": {X17, 8, 0},
	}
	for i := 0; i <= 30; i++ {
		want[fmt.Sprintf("x%d", i)] = Operand{X0 + Register(i), 8, 0}
		want[fmt.Sprintf("w%d", i)] = Operand{X0 + Register(i), 4, 0}
	}
	require.Len(t, want, 6+62)
	for name, w := range want {
		for _, spelled := range []string{name, strings.ToUpper(name)} {
			got, ok := ArchARM64.ParseOperand(spelled)
			if assert.True(t, ok, spelled) {
				assert.Equal(t, w, got, spelled)
			}
		}
	}
	for _, bad := range []string{
		"", "x31", "w31", "xzr", "wzr", "x", "w", "x-1", "x01", "r0", "R0", "pc", "pstate", "%x0",
		"x0 ", "d0", "s1", "v0", "q0", "b0", "h0", "rax", "eax", "rsp", "x32", "w99", "fp0",
	} {
		_, ok := ArchARM64.ParseOperand(bad)
		assert.False(t, ok, "ParseOperand(%q) must fail", bad)
	}
	// amd64 through the Arch is the package-level parser.
	op, ok := ArchAMD64.ParseOperand("%ah")
	require.True(t, ok)
	assert.Equal(t, Operand{RAX, 1, 8}, op)
	_, ok = ArchAMD64.ParseOperand("x0")
	assert.False(t, ok)
	_, ok = ArchUnknown.ParseOperand("x0")
	assert.False(t, ok)
	// "sp" is 2 bytes of rsp for amd64, all of sp for arm64.
	op, _ = ArchAMD64.ParseOperand("sp")
	assert.Equal(t, Operand{RSP, 2, 0}, op)
	op, _ = ArchARM64.ParseOperand("sp")
	assert.Equal(t, Operand{SP, 8, 0}, op)
}

func TestARM64ParseWhole(t *testing.T) {
	want := map[string]Register{
		"sp": SP, "pc": PC, "pstate": PSTATE, "fp": X29, "lr": X30, "ip0": X16, "ip1": X17, "RSP": SP,
	}
	for i := 0; i <= 30; i++ {
		want[fmt.Sprintf("x%d", i)] = X0 + Register(i)
		want[fmt.Sprintf("R%d", i)] = X0 + Register(i)
	}
	for name, w := range want {
		for _, spelled := range []string{name, "%" + name, strings.ToUpper(name), strings.ToLower(name)} {
			got, ok := ArchARM64.ParseWhole(spelled)
			if assert.True(t, ok, spelled) {
				assert.Equal(t, w, got, spelled)
			}
		}
	}
	for _, bad := range []string{
		"", "%", "w0", "wsp", "x31", "R31", "xzr", "rax", "ip", "di", "%%x0", "x0 ", "g", "R", "x",
	} {
		got, ok := ArchARM64.ParseWhole(bad)
		assert.False(t, ok, "ParseWhole(%q) must fail", bad)
		assert.Equal(t, None, got)
	}
	r, ok := ArchAMD64.ParseWhole("di")
	require.True(t, ok)
	assert.Equal(t, RDI, r)
	_, ok = ArchAMD64.ParseWhole("x0")
	assert.False(t, ok)
	_, ok = ArchUnknown.ParseWhole("x0")
	assert.False(t, ok)

	names := ArchARM64.WholeNames()
	seen := map[string]bool{}
	for _, n := range names {
		assert.False(t, seen[n], "%q listed twice", n)
		seen[n] = true
		_, ok := ArchARM64.ParseWhole(n)
		assert.True(t, ok, "WholeNames lists %q, which ParseWhole rejects", n)
	}
	assert.Len(t, names, 34+4+31+1)
	assert.Contains(t, names, "R0")
	assert.Contains(t, names, "x30")
	assert.Equal(t, WholeNames(), ArchAMD64.WholeNames())
	assert.Empty(t, ArchUnknown.WholeNames())
	// The caller owns the returned slice.
	names[0] = "changed"
	assert.Equal(t, "x0", ArchARM64.WholeNames()[0])
}

func TestCallingConventions(t *testing.T) {
	assert.Equal(t, []Register{X0, X1, X2, X3, X4, X5, X6, X7}, ArchARM64.CIntArgs())
	assert.Equal(t, []Register{RDI, RSI, RDX, RCX, R8, R9}, ArchAMD64.CIntArgs())
	assert.Equal(t, X0, ArchARM64.CReturn())
	assert.Equal(t, RAX, ArchAMD64.CReturn())
	assert.Equal(t, int64(0), ArchARM64.CStackArgsOffset())
	assert.Equal(t, int64(8), ArchAMD64.CStackArgsOffset())

	goARM := ArchARM64.GoIntArgs()
	require.Len(t, goARM, 16)
	for i, r := range goARM {
		assert.Equal(t, fmt.Sprintf("R%d", i), r.GoName())
	}
	assert.Equal(t, []Register{RAX, RBX, RCX, RDI, RSI, R8, R9, R10, R11}, ArchAMD64.GoIntArgs())
	assert.Equal(t, X28, ArchARM64.GoG())
	assert.Equal(t, "R28", ArchARM64.GoG().GoName())
	assert.Equal(t, R14, ArchAMD64.GoG())

	assert.Equal(t, SP, ArchARM64.StackPointer())
	assert.Equal(t, RSP, ArchAMD64.StackPointer())
	assert.Equal(t, PC, ArchARM64.InstructionPointer())
	assert.Equal(t, RIP, ArchAMD64.InstructionPointer())
	assert.Equal(t, X30, ArchARM64.LinkRegister())
	assert.Equal(t, None, ArchAMD64.LinkRegister())

	for _, f := range []func(Arch) Register{Arch.CReturn, Arch.GoG, Arch.StackPointer, Arch.InstructionPointer, Arch.LinkRegister} {
		assert.Equal(t, None, f(ArchUnknown))
	}
	assert.Nil(t, ArchUnknown.CIntArgs())
	assert.Nil(t, ArchUnknown.GoIntArgs())

	// Every register of every table belongs to its architecture and has a
	// pt_regs slot.
	for _, a := range []Arch{ArchAMD64, ArchARM64} {
		all := append(append([]Register{}, a.CIntArgs()...), a.GoIntArgs()...)
		all = append(all, a.CReturn(), a.GoG(), a.StackPointer(), a.InstructionPointer())
		for _, r := range all {
			_, ok := a.Slot(r)
			assert.True(t, ok, "%s: %s", a, r)
		}
	}
}
