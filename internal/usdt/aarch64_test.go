package usdt

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

// TestParseARM64Arg covers every operand form of arm64 notes: the ones gcc
// and clang write through <sys/sdt.h> (seen with readelf -n on cross-built
// objects, see TestARM64Fixtures) and the ones the assembler also accepts.
func TestParseARM64Arg(t *testing.T) {
	tests := []struct {
		text      string
		size      uint8
		signed    bool
		float     bool
		op        Operand
		canonical string // "" when the text is canonical
	}{
		// Registers, as gcc writes them.
		{"8@x0", 8, false, false, reg(regs.X0, 8, 0), ""},
		{"-4@x0", 4, true, false, reg(regs.X0, 8, 0), ""},
		{"-8@x1", 8, true, false, reg(regs.X1, 8, 0), ""},
		{"1@x2", 1, false, false, reg(regs.X2, 8, 0), ""},
		{"-2@x3", 2, true, false, reg(regs.X3, 8, 0), ""},
		{"-8@x26", 8, true, false, reg(regs.X26, 8, 0), ""},
		{"-8@x30", 8, true, false, reg(regs.X30, 8, 0), ""},
		{"-8@x18", 8, true, false, reg(regs.X18, 8, 0), ""},
		// The 32-bit views and the stack pointer.
		{"-4@w1", 4, true, false, reg(regs.X1, 4, 0), ""},
		{"4@w30", 4, false, false, reg(regs.X30, 4, 0), ""},
		{"8@sp", 8, false, false, reg(regs.SP, 8, 0), ""},
		{"4@wsp", 4, false, false, reg(regs.SP, 4, 0), ""},
		// Aliases and case.
		{"8@fp", 8, false, false, reg(regs.X29, 8, 0), "8@x29"},
		{"8@lr", 8, false, false, reg(regs.X30, 8, 0), "8@x30"},
		{"8@ip0", 8, false, false, reg(regs.X16, 8, 0), "8@x16"},
		{"8@ip1", 8, false, false, reg(regs.X17, 8, 0), "8@x17"},
		{"8@X5", 8, false, false, reg(regs.X5, 8, 0), "8@x5"},
		{"-4@W5", 4, true, false, reg(regs.X5, 4, 0), "-4@w5"},
		// Memory: [BASE, DISP], [BASE].
		{"8@[sp, 16]", 8, false, false, mem(regs.SP, regs.None, 0, 16, ""), ""},
		{"-8@[sp]", 8, true, false, mem(regs.SP, regs.None, 0, 0, ""), ""},
		{"-4@[x1, -8]", 4, true, false, mem(regs.X1, regs.None, 0, -8, ""), ""},
		{"8@[x2]", 8, false, false, mem(regs.X2, regs.None, 0, 0, ""), ""},
		{"-8@[x29, -16]", 8, true, false, mem(regs.X29, regs.None, 0, -16, ""), ""},
		{"1@[x0, 17]", 1, false, false, mem(regs.X0, regs.None, 0, 17, ""), ""},
		{"-2@[sp, 104]", 2, true, false, mem(regs.SP, regs.None, 0, 104, ""), ""},
		{"-4@[x8]", 4, true, false, mem(regs.X8, regs.None, 0, 0, ""), ""},
		{"8@[x2,16]", 8, false, false, mem(regs.X2, regs.None, 0, 16, ""), "8@[x2, 16]"},
		{"8@[ x2 , 16 ]", 8, false, false, mem(regs.X2, regs.None, 0, 16, ""), "8@[x2, 16]"},
		{"8@[x2, #16]", 8, false, false, mem(regs.X2, regs.None, 0, 16, ""), "8@[x2, 16]"},
		{"8@[x2, #-0x10]", 8, false, false, mem(regs.X2, regs.None, 0, -16, ""), "8@[x2, -16]"},
		{"8@[x2, 0]", 8, false, false, mem(regs.X2, regs.None, 0, 0, ""), "8@[x2]"},
		{"8@[fp, -8]", 8, false, false, mem(regs.X29, regs.None, 0, -8, ""), "8@[x29, -8]"},
		{"8@[SP, 8]", 8, false, false, mem(regs.SP, regs.None, 0, 8, ""), "8@[sp, 8]"},
		{"8@[x1, 9223372036854775807]", 8, false, false, mem(regs.X1, regs.None, 0, math.MaxInt64, ""), ""},
		{"8@[x1, -9223372036854775808]", 8, false, false, mem(regs.X1, regs.None, 0, math.MinInt64, ""), ""},
		// Memory with an index register (overridden constraints only).
		{"1@[x4, x3]", 1, false, false, mem(regs.X4, regs.X3, 1, 0, ""), ""},
		{"-8@[x1, x2]", 8, true, false, mem(regs.X1, regs.X2, 1, 0, ""), ""},
		{"-8@[x1, x2, lsl 3]", 8, true, false, mem(regs.X1, regs.X2, 8, 0, ""), ""},
		{"4@[x1, x2, lsl #2]", 4, false, false, mem(regs.X1, regs.X2, 4, 0, ""), "4@[x1, x2, lsl 2]"},
		{"2@[sp, x3, lsl 1]", 2, false, false, mem(regs.SP, regs.X3, 2, 0, ""), ""},
		{"1@[x1, x2, lsl 0]", 1, false, false, mem(regs.X1, regs.X2, 1, 0, ""), "1@[x1, x2]"},
		{"8@[x1, x2, sxtx 3]", 8, false, false, mem(regs.X1, regs.X2, 8, 0, ""), "8@[x1, x2, lsl 3]"},
		{"8@[x1, x2, sxtx]", 8, false, false, mem(regs.X1, regs.X2, 1, 0, ""), "8@[x1, x2]"},
		// The low 12 bits of a symbol's address, after an adrp.
		{"-8@[x7, #:lo12:counter]", 8, true, false, memLo12(regs.X7, 0, "counter"), ""},
		{"-8@[x0, #:lo12:.LANCHOR0]", 8, true, false, memLo12(regs.X0, 0, ".LANCHOR0"), ""},
		{"4@[x1, #:lo12:state+8]", 4, false, false, memLo12(regs.X1, 8, "state"), ""},
		{"4@[x1, #:lo12:state-4]", 4, false, false, memLo12(regs.X1, -4, "state"), ""},
		{"4@[x1, :lo12:state]", 4, false, false, memLo12(regs.X1, 0, "state"), "4@[x1, #:lo12:state]"},
		{"4@[x1, #:LO12:state]", 4, false, false, memLo12(regs.X1, 0, "state"), "4@[x1, #:lo12:state]"},
		{"4@[x1, #:lo12:8+state]", 4, false, false, memLo12(regs.X1, 8, "state"), "4@[x1, #:lo12:state+8]"},
		// Constants.
		{"-4@5", 4, true, false, imm(5), ""},
		{"-4@-1", 4, true, false, imm(-1), ""},
		{"-4@0", 4, true, false, imm(0), ""},
		{"-4@4096", 4, true, false, imm(4096), ""},
		{"-4@-4097", 4, true, false, imm(-4097), ""},
		{"1@-3", 1, false, false, imm(-3), ""},
		{"-8@20015998343868", 8, true, false, imm(0x123456789abc), ""},
		{"8@1099511627776", 8, false, false, imm(1 << 40), ""},
		{"8@18446744073709551615", 8, false, false, imm(-1), "8@-1"},
		{"8@#7", 8, false, false, imm(7), "8@7"},
		{"8@0x10", 8, false, false, imm(16), "8@16"},
		{"8@#-0x10", 8, false, false, imm(-16), "8@-16"},
		// The zero register reads as 0.
		{"8@xzr", 8, false, false, imm(0), "8@0"},
		{"4@wzr", 4, false, false, imm(0), "4@0"},
		// Floating-point values kept out of the vector registers.
		{"8f@[x1, 32]", 8, false, true, mem(regs.X1, regs.None, 0, 32, ""), ""},
		{"4f@x1", 4, false, true, reg(regs.X1, 8, 0), ""},
		{"8f@[sp]", 8, false, true, mem(regs.SP, regs.None, 0, 0, ""), ""},
		{"-8f@[x9]", 8, true, true, mem(regs.X9, regs.None, 0, 0, ""), ""},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			a, err := ParseArgFor(regs.ArchARM64, tt.text)
			require.NoError(t, err)
			assert.Equal(t, Arg{Size: tt.size, Signed: tt.signed, Float: tt.float, Operand: tt.op, Text: tt.text}, a)
			assert.Equal(t, tt.text, a.String())
			want := tt.canonical
			if want == "" {
				want = tt.text
			}
			assert.Equal(t, want, canonicalARM64(a), "canonical spec")
			// The canonical form parses back to the same operand.
			back, err := ParseArgFor(regs.ArchARM64, "8@"+a.Operand.Format(regs.ArchARM64))
			require.NoError(t, err, "canonical form %q", a.Operand.Format(regs.ArchARM64))
			assert.Equal(t, a.Operand, back.Operand)
			if a.Operand.Kind != OperandConstant {
				assert.Equal(t, a.Operand.Format(regs.ArchARM64), a.Operand.String(), "String uses the registers' architecture")
			}
		})
	}
}

func memLo12(base regs.Register, disp int64, sym string) Operand {
	return Operand{Kind: OperandMemory, Base: base, Disp: disp, Symbol: sym, SymbolLow12: true}
}

// canonicalARM64 formats a spec the way gcc writes it.
func canonicalARM64(a Arg) string {
	s := ""
	if a.Signed {
		s = "-"
	}
	s += string(rune('0' + a.Size))
	if a.Float {
		s += "f"
	}
	return s + "@" + a.Operand.Format(regs.ArchARM64)
}

func TestParseARM64ArgErrors(t *testing.T) {
	tests := []struct{ text, want string }{
		{"", `argument "": no "@" between size and operand`},
		{"x0", `no "@" between size and operand`},
		{"@x0", `missing size`},
		{"3@x0", `invalid size "3": want 1, 2, 4 or 8`},
		{"8@", `empty operand`},
		{"8@x31", `argument "8@x31": unknown register "x31"`},
		{"8@w31", `unknown register "w31"`},
		{"8@x01", `unknown register "x01"`},
		{"8@pc", `unknown register "pc"`},
		{"8@%x0", `unknown register "%x0"`},
		{"8@$5", `unknown register "$5"`},
		{"8@rax", `unknown register "rax"`},
		{"8@d0", `register "d0": floating-point and SIMD registers are not supported`},
		{"8f@v1", `floating-point and SIMD registers are not supported`},
		{"8f@s31", `floating-point and SIMD registers are not supported`},
		{"8f@q0", `floating-point and SIMD registers are not supported`},
		{"8@s32", `unknown register "s32"`},
		{"8@#", `constant "#": number "": no digits`},
		{"8@-", `no digits`},
		{"8@5x", `invalid number "5x"`},
		{"8@010", `leading zero (octal) is not supported`},
		{"8@18446744073709551616", `out of range`},
		{"8@[x0", `junk after the closing bracket`},
		{"8@[x0]x", `junk after the closing bracket`},
		{"8@[x0, 8]!", `pre-indexed operands are not supported`},
		{"8@[[x0]]", `unbalanced brackets`},
		{"8@[]", `no base register`},
		{"8@[, 8]", `no base register`},
		{"8@[x0,]", `empty offset`},
		{"8@[w0]", `base register "w0" is not a 64-bit register`},
		{"8@[xzr]", `base register "xzr": the zero register is not supported`},
		{"8@[x0, xzr]", `index register "xzr": the zero register is not supported`},
		{"8@[d0]", `floating-point and SIMD registers are not supported`},
		{"8@[x99]", `unknown register "x99"`},
		{"8@[x0, 8, 9]", `junk after the offset`},
		{"8@[x0, x1, lsl 3, 4]", `more than base, index and shift`},
		{"8@[x0, w1, sxtw 3]", `index register "w1": extended 32-bit index registers are not supported`},
		{"8@[x0, w1, uxtw]", `extended 32-bit index registers are not supported`},
		{"8@[x0, x1, sxtw 3]", `shift "sxtw 3": extended 32-bit index registers are not supported`},
		{"8@[x0, x1, lsl 4]", `shift "lsl 4": amount must be 0, 1, 2 or 3`},
		{"8@[x0, x1, lsl]", `shift "lsl": no amount`},
		{"8@[x0, x1, asr 2]", `shift "asr 2": want lsl`},
		{"8@[x0, sp]", `index register "sp": sp cannot be an index register`},
		{"8@[x0, #:got_lo12:counter]", `relocation "#:got_lo12:counter" is not supported: want :lo12:`},
		{"8@[x0, #:tprel_lo12_nc:counter]", `is not supported: want :lo12:`},
		{"8@[x0, #:lo12]", `is not supported: want :lo12:`},
		{"8@[x0, #:lo12:]", `:lo12: without a symbol`},
		{"8@[x0, #:lo12:8]", `:lo12: without a symbol`},
		{"8@[x0, #:lo12:a+b]", `more than one symbol`},
		{"8@[x0, #:lo12:counter, 8]", `junk after the offset`},
		{"8@[x0, counter]", `unknown register "counter"`},
		{"8@[x0, 9223372036854775808]", `out of range`},
		{"8@[x0, 0x]", `no digits`},
		{"8@counter", `unknown register "counter"`},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			a, err := ParseArgFor(regs.ArchARM64, tt.text)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.Contains(t, err.Error(), `argument "`, "the error names the spec")
			assert.Equal(t, Arg{}, a)
		})
	}
	_, err := ParseArgFor(regs.ArchARM64, "8@d0")
	assert.True(t, errors.Is(err, ErrUnsupportedVectorRegister))
	assert.False(t, errors.Is(err, ErrUnsupportedFloatRegister))
}

func TestParseArgsFor(t *testing.T) {
	// arm64: spaces inside brackets do not separate specs.
	args, err := ParseArgsFor(regs.ArchARM64, "-8@x0 -8@[sp] -8@[sp, 8]  -4@5 8f@[x1, 32]\t1@w3")
	require.NoError(t, err)
	require.Len(t, args, 6)
	assert.Equal(t, []string{"-8@x0", "-8@[sp]", "-8@[sp, 8]", "-4@5", "8f@[x1, 32]", "1@w3"},
		[]string{args[0].Text, args[1].Text, args[2].Text, args[3].Text, args[4].Text, args[5].Text})
	assert.Equal(t, mem(regs.SP, regs.None, 0, 8, ""), args[2].Operand)
	assert.Equal(t, imm(5), args[3].Operand)
	assert.Equal(t, reg(regs.X3, 4, 0), args[5].Operand)

	for _, empty := range []string{"", "   ", "\t"} {
		args, err = ParseArgsFor(regs.ArchARM64, empty)
		require.NoError(t, err)
		assert.Nil(t, args)
	}

	for _, tt := range []struct{ text, want string }{
		{"8@x0 8@[sp, 8", `parse arguments "8@x0 8@[sp, 8": unbalanced brackets`},
		{"8@x0] 8@x1", `unbalanced brackets`},
		{"8@x0 8@x99", `argument "8@x99": unknown register "x99"`},
		{"8@x0 8@[sp, 8]]", `unbalanced brackets`},
	} {
		args, err = ParseArgsFor(regs.ArchARM64, tt.text)
		require.Error(t, err, tt.text)
		assert.Contains(t, err.Error(), tt.want)
		assert.Nil(t, args)
	}

	// amd64 is ParseArgs; other architectures are refused.
	args, err = ParseArgsFor(regs.ArchAMD64, "-4@%eax 8@-8(%rbp)")
	require.NoError(t, err)
	require.Len(t, args, 2)
	assert.Equal(t, reg(regs.RAX, 4, 0), args[0].Operand)
	_, err = ParseArgsFor(regs.ArchAMD64, "8@x0")
	require.Error(t, err)
	_, err = ParseArgsFor(regs.ArchUnknown, "8@x0")
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrUnsupportedArch))
	_, err = ParseArgFor(regs.ArchUnknown, "8@x0")
	assert.True(t, errors.Is(err, ErrUnsupportedArch))
	a, err := ParseArgFor(regs.ArchAMD64, "1@%ah")
	require.NoError(t, err)
	assert.Equal(t, reg(regs.RAX, 1, 8), a.Operand)
}

func TestOperandFormat(t *testing.T) {
	tests := []struct {
		op         Operand
		arm64, att string
	}{
		{reg(regs.X0, 8, 0), "x0", "%x0/8"},
		{reg(regs.X7, 4, 0), "w7", "%x7/4"},
		{reg(regs.SP, 8, 0), "sp", "%sp/8"},
		{reg(regs.SP, 4, 0), "wsp", "%sp/4"},
		{mem(regs.SP, regs.None, 0, 16, ""), "[sp, 16]", "16(%sp)"},
		{mem(regs.X1, regs.None, 0, -8, ""), "[x1, -8]", "-8(%x1)"},
		{mem(regs.X2, regs.None, 0, 0, ""), "[x2]", "(%x2)"},
		{mem(regs.X1, regs.X2, 8, 0, ""), "[x1, x2, lsl 3]", "(%x1,%x2,8)"},
		{mem(regs.X1, regs.X2, 1, 0, ""), "[x1, x2]", "(%x1,%x2,1)"},
		{memLo12(regs.X7, 0, "counter"), "[x7, #:lo12:counter]", "counter(%x7)"},
		{memLo12(regs.X7, -8, "counter"), "[x7, #:lo12:counter-8]", "counter-8(%x7)"},
		{imm(-1), "-1", "$-1"},
		{Operand{}, "Operand(kind 0)", "Operand(kind 0)"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.arm64, tt.op.Format(regs.ArchARM64))
		assert.Equal(t, tt.att, tt.op.Format(regs.ArchAMD64))
	}
	// String follows the registers' architecture; constants are AT&T.
	assert.Equal(t, "[sp, 16]", mem(regs.SP, regs.None, 0, 16, "").String())
	assert.Equal(t, "w1", reg(regs.X1, 4, 0).String())
	assert.Equal(t, "-8(%rbp)", mem(regs.RBP, regs.None, 0, -8, "").String())
	assert.Equal(t, "$5", imm(5).String())
	assert.Equal(t, "5", imm(5).Format(regs.ArchARM64))
}
