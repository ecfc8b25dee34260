package regs

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseOperand(t *testing.T) {
	type want struct {
		reg   Register
		size  uint8
		shift uint8
	}
	ok := map[string]want{
		// The legacy registers, every width.
		"rax": {RAX, 8, 0}, "eax": {RAX, 4, 0}, "ax": {RAX, 2, 0}, "al": {RAX, 1, 0}, "ah": {RAX, 1, 8},
		"rbx": {RBX, 8, 0}, "ebx": {RBX, 4, 0}, "bx": {RBX, 2, 0}, "bl": {RBX, 1, 0}, "bh": {RBX, 1, 8},
		"rcx": {RCX, 8, 0}, "ecx": {RCX, 4, 0}, "cx": {RCX, 2, 0}, "cl": {RCX, 1, 0}, "ch": {RCX, 1, 8},
		"rdx": {RDX, 8, 0}, "edx": {RDX, 4, 0}, "dx": {RDX, 2, 0}, "dl": {RDX, 1, 0}, "dh": {RDX, 1, 8},
		"rsi": {RSI, 8, 0}, "esi": {RSI, 4, 0}, "si": {RSI, 2, 0}, "sil": {RSI, 1, 0},
		"rdi": {RDI, 8, 0}, "edi": {RDI, 4, 0}, "di": {RDI, 2, 0}, "dil": {RDI, 1, 0},
		"rbp": {RBP, 8, 0}, "ebp": {RBP, 4, 0}, "bp": {RBP, 2, 0}, "bpl": {RBP, 1, 0},
		"rsp": {RSP, 8, 0}, "esp": {RSP, 4, 0}, "sp": {RSP, 2, 0}, "spl": {RSP, 1, 0},
		// The instruction pointer.
		"rip": {RIP, 8, 0}, "eip": {RIP, 4, 0},
	}
	// r8..r15 with the d/w/b suffixes and the l alias of b.
	for r := R8; r <= R15; r++ {
		n := r.String()
		ok[n] = want{r, 8, 0}
		ok[n+"d"] = want{r, 4, 0}
		ok[n+"w"] = want{r, 2, 0}
		ok[n+"b"] = want{r, 1, 0}
		ok[n+"l"] = want{r, 1, 0}
	}
	require.Len(t, ok, 8*5-4+2+8*5, "table covers every name")

	for name, w := range ok {
		for _, spelled := range []string{name, "%" + name, strings.ToUpper(name), "%" + strings.ToUpper(name), "%" + strings.ToUpper(name[:1]) + name[1:]} {
			got, found := ParseOperand(spelled)
			if assert.True(t, found, "ParseOperand(%q)", spelled) {
				assert.Equal(t, Operand{Reg: w.reg, Size: w.size, Shift: w.shift}, got, "ParseOperand(%q)", spelled)
			}
		}
	}

	// Spot checks spelled out, as the brief lists them.
	for _, c := range []struct {
		in   string
		want Operand
	}{
		{"%ah", Operand{RAX, 1, 8}},
		{"%sil", Operand{RSI, 1, 0}},
		{"%r8d", Operand{R8, 4, 0}},
		{"%r8w", Operand{R8, 2, 0}},
		{"%r8b", Operand{R8, 1, 0}},
		{"%r8l", Operand{R8, 1, 0}},
		{"%eip", Operand{RIP, 4, 0}},
		{"%R15D", Operand{R15, 4, 0}},
		{"%AH", Operand{RAX, 1, 8}},
	} {
		got, found := ParseOperand(c.in)
		require.True(t, found, c.in)
		assert.Equal(t, c.want, got, c.in)
	}

	for _, bad := range []string{
		"", "%", "%%rax", "rax%", " rax", "rax ", "%r16", "%r7", "%r8x", "%r8h", "%xmm0", "%ymm1",
		"%ip", "%sih", "%dih", "%bph", "%sph", "%eflags", "%cs", "%st(0)", "%r8dd", "%e8", "%rr8",
		"%spl ", "%ax,", "%rax)", "$5", "%r08",
	} {
		_, found := ParseOperand(bad)
		assert.False(t, found, "ParseOperand(%q) must fail", bad)
	}
}

func TestParseWhole(t *testing.T) {
	ok := map[string]Register{
		// Kernel pt_regs names: each is the whole 64-bit register.
		"ax": RAX, "bx": RBX, "cx": RCX, "dx": RDX, "si": RSI, "di": RDI, "bp": RBP, "sp": RSP, "ip": RIP,
		// 64-bit AT&T names.
		"rax": RAX, "rbx": RBX, "rcx": RCX, "rdx": RDX, "rsi": RSI, "rdi": RDI, "rbp": RBP, "rsp": RSP,
		"r8": R8, "r9": R9, "r10": R10, "r11": R11, "r12": R12, "r13": R13, "r14": R14, "r15": R15,
		"rip": RIP,
	}
	for name, want := range ok {
		for _, spelled := range []string{name, "%" + name, strings.ToUpper(name), "%" + strings.ToUpper(name)} {
			got, found := ParseWhole(spelled)
			if assert.True(t, found, "ParseWhole(%q)", spelled) {
				assert.Equal(t, want, got, "ParseWhole(%q)", spelled)
			}
		}
	}

	// %ax is 2 bytes as an AT&T operand, but all of RAX as a kernel name.
	op, found := ParseOperand("%ax")
	require.True(t, found)
	assert.Equal(t, uint8(2), op.Size)
	r, found := ParseWhole("%ax")
	require.True(t, found)
	assert.Equal(t, RAX, r)

	for _, bad := range []string{
		"", "%", "%eax", "eax", "%al", "%ah", "%sil", "%dil", "%r8d", "%r8w", "%r8b", "%r8l",
		"%eip", "%r16", "%xmm0", "%%rax", "rax ", "%flags", "%spl", "%bpl",
	} {
		got, found := ParseWhole(bad)
		assert.False(t, found, "ParseWhole(%q) must fail", bad)
		assert.Equal(t, None, got, "ParseWhole(%q)", bad)
	}
}

func TestWholeNames(t *testing.T) {
	names := WholeNames()
	seen := map[string]bool{}
	for _, n := range names {
		assert.False(t, seen[n], "%q listed twice", n)
		seen[n] = true
		_, found := ParseWhole(n)
		assert.True(t, found, "WholeNames lists %q, which ParseWhole rejects", n)
	}
	// Every register is reachable by at least one listed name.
	for r := RAX; r <= RIP; r++ {
		assert.True(t, seen[r.String()], "%s missing from WholeNames", r)
	}
	assert.Len(t, names, 9+17)
}

func TestRegisterString(t *testing.T) {
	assert.Equal(t, "", None.String())
	assert.Equal(t, "rax", RAX.String())
	assert.Equal(t, "r15", R15.String())
	assert.Equal(t, "rip", RIP.String())
	assert.Equal(t, "x0", Register(RIP+1).String(), "the arm64 registers follow the amd64 ones")
	assert.Equal(t, "invalid", Register(PSTATE+1).String())
	assert.Equal(t, "invalid", Register(255).String())
	// Every register's name parses back to it.
	for r := RAX; r <= RIP; r++ {
		got, found := ParseWhole(r.String())
		require.True(t, found, r.String())
		assert.Equal(t, r, got)
		op, found := ParseOperand(r.String())
		require.True(t, found, r.String())
		assert.Equal(t, Operand{r, 8, 0}, op)
	}
}

func TestSysVTables(t *testing.T) {
	assert.Equal(t, [...]Register{RDI, RSI, RDX, RCX, R8, R9}, SysVIntArgs)
	assert.Equal(t, RAX, SysVReturn)
}
