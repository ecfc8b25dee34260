package usdt

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

func reg(r regs.Register, size, shift uint8) Operand {
	return Operand{Kind: OperandRegister, Register: regs.Operand{Reg: r, Size: size, Shift: shift}}
}

func mem(base, index regs.Register, scale uint8, disp int64, sym string) Operand {
	return Operand{Kind: OperandMemory, Base: base, Index: index, Scale: scale, Disp: disp, Symbol: sym}
}

func imm(v int64) Operand { return Operand{Kind: OperandConstant, Value: v} }

func TestParseArg(t *testing.T) {
	tests := []struct {
		text   string
		size   uint8
		signed bool
		float  bool
		op     Operand
	}{
		// Whole registers and every width of every register.
		{"8@%rax", 8, false, false, reg(regs.RAX, 8, 0)},
		{"-8@%rbx", 8, true, false, reg(regs.RBX, 8, 0)},
		{"-4@%eax", 4, true, false, reg(regs.RAX, 4, 0)},
		{"2@%ax", 2, false, false, reg(regs.RAX, 2, 0)},
		{"1@%al", 1, false, false, reg(regs.RAX, 1, 0)},
		{"1@%ah", 1, false, false, reg(regs.RAX, 1, 8)},
		{"1@%bh", 1, false, false, reg(regs.RBX, 1, 8)},
		{"-1@%ch", 1, true, false, reg(regs.RCX, 1, 8)},
		{"1@%dh", 1, false, false, reg(regs.RDX, 1, 8)},
		{"1@%dl", 1, false, false, reg(regs.RDX, 1, 0)},
		{"1@%sil", 1, false, false, reg(regs.RSI, 1, 0)},
		{"1@%dil", 1, false, false, reg(regs.RDI, 1, 0)},
		{"1@%bpl", 1, false, false, reg(regs.RBP, 1, 0)},
		{"1@%spl", 1, false, false, reg(regs.RSP, 1, 0)},
		{"2@%si", 2, false, false, reg(regs.RSI, 2, 0)},
		{"4@%edi", 4, false, false, reg(regs.RDI, 4, 0)},
		{"4@%esp", 4, false, false, reg(regs.RSP, 4, 0)},
		{"8@%rbp", 8, false, false, reg(regs.RBP, 8, 0)},
		{"8@%r8", 8, false, false, reg(regs.R8, 8, 0)},
		{"-4@%r8d", 4, true, false, reg(regs.R8, 4, 0)},
		{"2@%r9w", 2, false, false, reg(regs.R9, 2, 0)},
		{"1@%r10b", 1, false, false, reg(regs.R10, 1, 0)},
		{"1@%r15l", 1, false, false, reg(regs.R15, 1, 0)},
		{"-4@%r14d", 4, true, false, reg(regs.R14, 4, 0)},
		{"8@%rip", 8, false, false, reg(regs.RIP, 8, 0)},
		{"8@%RAX", 8, false, false, reg(regs.RAX, 8, 0)},
		{"-4@%R8D", 4, true, false, reg(regs.R8, 4, 0)},
		// A size that differs from the register's is kept as written.
		{"8@%eax", 8, false, false, reg(regs.RAX, 4, 0)},
		// Memory.
		{"-4@-140(%rbp)", 4, true, false, mem(regs.RBP, regs.None, 0, -140, "")},
		{"8@(%rsp)", 8, false, false, mem(regs.RSP, regs.None, 0, 0, "")},
		{"-8@8(%rbp)", 8, true, false, mem(regs.RBP, regs.None, 0, 8, "")},
		{"4@0(%r13)", 4, false, false, mem(regs.R13, regs.None, 0, 0, "")},
		{"-4@112(%rsp)", 4, true, false, mem(regs.RSP, regs.None, 0, 112, "")},
		{"1@-96(%rbp,%rax,8)", 1, false, false, mem(regs.RBP, regs.RAX, 8, -96, "")},
		{"4@(%rax,%rdx)", 4, false, false, mem(regs.RAX, regs.RDX, 1, 0, "")},
		{"1@(%r8,%rcx)", 1, false, false, mem(regs.R8, regs.RCX, 1, 0, "")},
		{"-4@(%rdx,%rdi,4)", 4, true, false, mem(regs.RDX, regs.RDI, 4, 0, "")},
		{"4@(,%rax,4)", 4, false, false, mem(regs.None, regs.RAX, 4, 0, "")},
		{"4@(,%rax)", 4, false, false, mem(regs.None, regs.RAX, 1, 0, "")},
		{"2@(%rbx,%r12,2)", 2, false, false, mem(regs.RBX, regs.R12, 2, 0, "")},
		{"-4@table(,%rdi,4)", 4, true, false, mem(regs.None, regs.RDI, 4, 0, "table")},
		{"8@0x10(%rax)", 8, false, false, mem(regs.RAX, regs.None, 0, 16, "")},
		{"8@-0x10(%rax)", 8, false, false, mem(regs.RAX, regs.None, 0, -16, "")},
		{"8@0XfF(%rax)", 8, false, false, mem(regs.RAX, regs.None, 0, 255, "")},
		{"8@-2147483648(%rax)", 8, false, false, mem(regs.RAX, regs.None, 0, math.MinInt32, "")},
		{"8@9223372036854775807(%rax)", 8, false, false, mem(regs.RAX, regs.None, 0, math.MaxInt64, "")},
		{"8@-9223372036854775808(%rax)", 8, false, false, mem(regs.RAX, regs.None, 0, math.MinInt64, "")},
		{"8@1234(%rip)", 8, false, false, mem(regs.RIP, regs.None, 0, 1234, "")},
		{"8@counter(%rip)", 8, false, false, mem(regs.RIP, regs.None, 0, 0, "counter")},
		{"-4@counter+8(%rip)", 4, true, false, mem(regs.RIP, regs.None, 0, 8, "counter")},
		{"4@counter-4(%rip)", 4, false, false, mem(regs.RIP, regs.None, 0, -4, "counter")},
		{"-4@40+CheckpointStats(%rip)", 4, true, false, mem(regs.RIP, regs.None, 0, 40, "CheckpointStats")},
		{"-4@NBuffers(%rip)", 4, true, false, mem(regs.RIP, regs.None, 0, 0, "NBuffers")},
		{"8@_ZN3foo3barE+0x10(%rip)", 8, false, false, mem(regs.RIP, regs.None, 0, 16, "_ZN3foo3barE")},
		{"8@.LC0(%rip)", 8, false, false, mem(regs.RIP, regs.None, 0, 0, ".LC0")},
		{"8@sym.part.0+8-4(%rbx)", 8, false, false, mem(regs.RBX, regs.None, 0, 4, "sym.part.0")},
		{"4@-8+arr(%rax,%rcx,4)", 4, false, false, mem(regs.RAX, regs.RCX, 4, -8, "arr")},
		{"8@-8(%RBP)", 8, false, false, mem(regs.RBP, regs.None, 0, -8, "")},
		// Constants.
		{"1@$5", 1, false, false, imm(5)},
		{"-4@$-1", 4, true, false, imm(-1)},
		{"-4@$0", 4, true, false, imm(0)},
		{"8@$0x10", 8, false, false, imm(16)},
		{"8@$-0x10", 8, false, false, imm(-16)},
		{"-4@$8192", 4, true, false, imm(8192)},
		{"8@$9223372036854775807", 8, false, false, imm(math.MaxInt64)},
		{"-8@$-9223372036854775808", 8, true, false, imm(math.MinInt64)},
		{"8@$18446744073709551615", 8, false, false, imm(-1)},
		{"8@$0xffffffffffffffff", 8, false, false, imm(-1)},
		// Floating-point values outside xmm registers.
		{"-8f@-16(%rbp)", 8, true, true, mem(regs.RBP, regs.None, 0, -16, "")},
		{"8f@-64(%rbp)", 8, false, true, mem(regs.RBP, regs.None, 0, -64, "")},
		{"8f@%rdi", 8, false, true, reg(regs.RDI, 8, 0)},
		{"4f@(%rsp)", 4, false, true, mem(regs.RSP, regs.None, 0, 0, "")},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			a, err := ParseArg(tt.text)
			require.NoError(t, err)
			assert.Equal(t, Arg{Size: tt.size, Signed: tt.signed, Float: tt.float, Operand: tt.op, Text: tt.text}, a)
			assert.Equal(t, tt.text, a.String())
			// The canonical form parses back to the same operand.
			back, err := ParseArg("8@" + a.Operand.String())
			require.NoError(t, err, "canonical form %q", a.Operand.String())
			assert.Equal(t, a.Operand, back.Operand, "canonical form %q", a.Operand.String())
		})
	}
}

func TestParseArgErrors(t *testing.T) {
	tests := []struct{ text, want string }{
		{"", `argument "": no "@" between size and operand`},
		{"8", `argument "8": no "@" between size and operand`},
		{"%rax", `argument "%rax": no "@" between size and operand`},
		{"@%rax", `argument "@%rax": missing size`},
		{"-@%rax", `argument "-@%rax": missing size`},
		{"f@%rax", `argument "f@%rax": missing size`},
		{"3@%rax", `argument "3@%rax": invalid size "3": want 1, 2, 4 or 8`},
		{"16@%rax", `invalid size "16"`},
		{"0@%rax", `invalid size "0"`},
		{"08@%rax", `invalid size "08"`},
		{"+8@%rax", `invalid size "+8"`},
		{"--8@%rax", `invalid size "-8"`},
		{"8ff@%rax", `invalid size "8f"`},
		{"f8@%rax", `invalid size "f8"`},
		{"8@", `argument "8@": empty operand`},
		{"8@%xyz", `argument "8@%xyz": unknown register "%xyz"`},
		{"8@%", `empty register name "%"`},
		{"8@%rax!", `unknown register "%rax!"`},
		{"8@%rax,", `unknown register "%rax,"`},
		{"8@%rax ", `unknown register "%rax "`},
		{"8@%r16", `unknown register "%r16"`},
		{"1@%sih", `unknown register "%sih"`},
		{"8@%st(0)", `unknown register "%st(0)"`},
		{"8f@%xmm0", `argument "8f@%xmm0": register "%xmm0": floating-point arguments in xmm registers are not supported`},
		{"8@%xmm15", `floating-point arguments in xmm registers are not supported`},
		{"8@%ymm1", `floating-point arguments in xmm registers are not supported`},
		{"8f@%XMM3", `floating-point arguments in xmm registers are not supported`},
		{"8@8@%rax", `argument "8@8@%rax": memory operand "8@%rax": absolute addresses are not supported`},
		{"8@$", `constant "$": number "": no digits`},
		{"8@$-", `no digits`},
		{"8@$x", `invalid number "x"`},
		{"8@$5x", `invalid number "5x"`},
		{"8@$0x", `number "0x": no digits`},
		{"8@$010", `leading zero (octal) is not supported`},
		{"8@$--1", `invalid number "-1"`},
		{"8@$+1", `invalid number "+1"`},
		{"8@$18446744073709551616", `out of range`},
		{"8@$-9223372036854775809", `out of range`},
		{"8@$0x10000000000000000", `out of range`},
		{"8@$counter", `invalid number "counter"`},
		{"8@1234", `absolute addresses are not supported`},
		{"8@counter", `absolute addresses are not supported`},
		{"8@-8(%rbp", `junk after the closing parenthesis`},
		{"8@-8(%rbp)x", `junk after the closing parenthesis`},
		{"8@-8)(%rbp)", `unbalanced parentheses`},
		{"8@-8(%rbp))", `unbalanced parentheses`},
		{"8@((%rbp))", `unbalanced parentheses`},
		{"8@-8%rbp)", `unbalanced parentheses`},
		{"8@()", `no base or index register`},
		{"8@8()", `no base or index register`},
		{"8@(,)", `empty index register`},
		{"8@(%rax,)", `empty index register`},
		{"8@(%rax,%rbx,)", `empty scale`},
		{"8@(%rax,%rbx,3)", `invalid scale "3": want 1, 2, 4 or 8`},
		{"8@(%rax,%rbx,0)", `invalid scale "0"`},
		{"8@(%rax,%rbx,16)", `invalid scale "16"`},
		{"8@(%rax,%rbx,08)", `invalid scale "08"`},
		{"8@(%rax,%rbx,8,1)", `more than base, index and scale`},
		{"8@(%rax,,8)", `empty index register`},
		{"8@(rax)", `base register "rax" has no %`},
		{"8@(%rax,rbx)", `index register "rbx" has no %`},
		{"8@(%eax)", `base register "%eax" is not a 64-bit register`},
		{"8@(%rax,%ebx,2)", `index register "%ebx" is not a 64-bit register`},
		{"8@(%ah)", `base register "%ah" is not a 64-bit register`},
		{"8@(%xyz)", `unknown register "%xyz"`},
		{"8@(%rax,%rsp,1)", `%rsp cannot be an index register`},
		{"8@(%rax,%rip,1)", `%rip cannot be an index register`},
		{"8@sym(%rip,%rax,1)", `%rip-relative operands take no index register`},
		{"8@-(%rbp)", `empty term`},
		{"8@8-(%rbp)", `empty term`},
		{"8@+8(%rbp)", `displacement "+8": empty term`},
		{"8@8++8(%rbp)", `empty term`},
		{"8@a+b(%rip)", `more than one symbol`},
		{"8@-counter(%rip)", `negated symbol "counter"`},
		{"8@8-counter(%rip)", `negated symbol "counter"`},
		{"8@sym@GOTPCREL(%rip)", `invalid symbol "sym@GOTPCREL"`},
		{"8@0x(%rax)", `number "0x": no digits`},
		{"8@010(%rax)", `leading zero (octal) is not supported`},
		{"8@1x(%rax)", `invalid number "1x"`},
		{"8@9223372036854775808(%rax)", `displacement "9223372036854775808": number "9223372036854775808": out of range`},
		{"8@-9223372036854775809(%rax)", `out of range`},
		{"8@9223372036854775807+1(%rax)", `displacement "9223372036854775807+1": out of range`},
		{"8@-9223372036854775807-2(%rax)", `out of range`},
		{"8@ (%rax)", `invalid number " "`},
		{"8@8 (%rax)", `invalid number "8 "`},
		{"8@( %rax)", `base register " %rax" has no %`},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			a, err := ParseArg(tt.text)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.Contains(t, err.Error(), `argument "`, "the error names the spec")
			assert.Equal(t, Arg{}, a)
		})
	}
}

func TestParseArgXMMSentinel(t *testing.T) {
	_, err := ParseArg("8f@%xmm0")
	assert.True(t, errors.Is(err, ErrUnsupportedFloatRegister))
}

func TestParseArgs(t *testing.T) {
	args, err := ParseArgs("")
	require.NoError(t, err)
	assert.Nil(t, args)

	args, err = ParseArgs("   ")
	require.NoError(t, err)
	assert.Nil(t, args)

	args, err = ParseArgs("-4@$1 1@-57(%rbp) -4@%edx -4@%r12d  -4@40+CheckpointStats(%rip) 8@-96(%rbp,%rax,8)")
	require.NoError(t, err)
	require.Len(t, args, 6)
	assert.Equal(t, imm(1), args[0].Operand)
	assert.Equal(t, mem(regs.RBP, regs.None, 0, -57, ""), args[1].Operand)
	assert.Equal(t, uint8(1), args[1].Size)
	assert.Equal(t, reg(regs.RDX, 4, 0), args[2].Operand)
	assert.Equal(t, reg(regs.R12, 4, 0), args[3].Operand)
	assert.Equal(t, mem(regs.RIP, regs.None, 0, 40, "CheckpointStats"), args[4].Operand)
	assert.True(t, args[4].Operand.RIPRelativeSymbol())
	assert.False(t, args[1].Operand.RIPRelativeSymbol())
	assert.Equal(t, "8@-96(%rbp,%rax,8)", args[5].Text)

	args, err = ParseArgs("8@%rax 8@%xyz")
	require.EqualError(t, err, `argument "8@%xyz": unknown register "%xyz"`)
	assert.Nil(t, args)
}

func TestOperandString(t *testing.T) {
	tests := []struct {
		op   Operand
		want string
	}{
		{reg(regs.RAX, 1, 8), "%ah"},
		{reg(regs.R9, 2, 0), "%r9w"},
		{reg(regs.RSP, 1, 0), "%spl"},
		{reg(regs.RIP, 4, 0), "%eip"},
		{mem(regs.RBP, regs.None, 0, -140, ""), "-140(%rbp)"},
		{mem(regs.None, regs.RAX, 8, 0, ""), "(,%rax,8)"},
		{mem(regs.RIP, regs.None, 0, -4, "counter"), "counter-4(%rip)"},
		{mem(regs.RIP, regs.None, 0, 40, "CheckpointStats"), "CheckpointStats+40(%rip)"},
		{imm(-3), "$-3"},
		{Operand{}, "Operand(kind 0)"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.op.String())
	}
	assert.Equal(t, "memory", OperandMemory.String())
	assert.Equal(t, "register", OperandRegister.String())
	assert.Equal(t, "constant", OperandConstant.String())
	assert.Equal(t, "OperandKind(9)", OperandKind(9).String())
}
