package fetch

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

func u(size uint8) Type { return Type{Kind: KindUnsigned, Size: size} }
func s(size uint8) Type { return Type{Kind: KindSigned, Size: size} }
func x(size uint8) Type { return Type{Kind: KindHex, Size: size} }
func str(n uint16) Type { return Type{Kind: KindString, MaxLen: n} }
func byt(n uint16) Type { return Type{Kind: KindBytes, MaxLen: n} }

func arg(n int) Expr             { return Expr{Root: RootArg, Arg: n} }
func reg(r regs.Register) Expr   { return Expr{Root: RootRegister, Register: r} }
func retval() Expr               { return Expr{Root: RootRetval} }
func name(p string) Expr         { return Expr{Root: RootName, Path: p} }
func (e Expr) typed(t Type) Expr { e.Type, e.Typed = t, true; return e }
func (e Expr) deref(offs ...int64) Expr {
	e.Derefs = offs
	return e
}

func TestParseValid(t *testing.T) {
	tests := []struct {
		text  string
		want  Expr
		canon string
	}{
		{"arg0", arg(0), "arg0"},
		{"arg12", arg(12), "arg12"},
		{"arg999", arg(999), "arg999"},
		{"retval", retval(), "retval"},
		{"%di", reg(regs.RDI), "%rdi"},
		{"$req", name("$req"), "$req"},
		{"  $req->hdr->name  ", name("$req->hdr->name"), "$req->hdr->name"},
		{"$req->id:x32", name("$req->id").typed(x(4)), "$req->id:x32"},
		{"$r.URL.Path : string[64]", name("$r.URL.Path").typed(str(64)), "$r.URL.Path:string[64]"},
		{"$return", name("$return"), "$return"},
		{"$$params", name("$$params"), "$$params"},
		{"$a [ 2 ]", name("$a [ 2 ]"), "$a [ 2 ]"},
		{"%rdi", reg(regs.RDI), "%rdi"},
		{"%ax", reg(regs.RAX), "%rax"},
		{"%RAX", reg(regs.RAX), "%rax"},
		{"%r15", reg(regs.R15), "%r15"},
		{"%sp", reg(regs.RSP), "%rsp"},
		{"%ip", reg(regs.RIP), "%rip"},
		{"%rip", reg(regs.RIP), "%rip"},
		{"%r8", reg(regs.R8), "%r8"},
		// arm64 names: x0 to x30, fp, lr, pc; %sp is the stack pointer of both.
		{"%x0", reg(regs.X0), "%x0"},
		{"%X7", reg(regs.X7), "%x7"},
		{"%x30", reg(regs.X30), "%x30"},
		{"%fp", reg(regs.X29), "%x29"},
		{"%lr", reg(regs.X30), "%x30"},
		{"%pc", reg(regs.PC), "%pc"},
		{"+8(%x1):s32", reg(regs.X1).deref(8).typed(s(4)), "+8(%x1):s32"},
		{"+0(+16(%sp)):string", reg(regs.RSP).deref(16, 0).typed(str(DefaultStringLen)), "+0(+16(%rsp)):string"},
		{"+0x10(%di)", reg(regs.RDI).deref(16), "+16(%rdi)"},
		{"-8(%bp)", reg(regs.RBP).deref(-8), "-8(%rbp)"},
		{"8(%di)", reg(regs.RDI).deref(8), "+8(%rdi)"},
		{"0x10(arg0)", arg(0).deref(16), "+16(arg0)"},
		{"0(arg0)", arg(0).deref(0), "+0(arg0)"},
		{"-0(arg0)", arg(0).deref(0), "+0(arg0)"},
		{"+0X1f(arg0)", arg(0).deref(31), "+31(arg0)"},
		{"+0x0010(arg0)", arg(0).deref(16), "+16(arg0)"},
		{"+0(+8(%ax))", reg(regs.RAX).deref(8, 0), "+0(+8(%rax))"},
		{"+0(+8(%ax)):string", reg(regs.RAX).deref(8, 0).typed(str(256)), "+0(+8(%rax)):string"},
		{"+1(+2(+3(retval)))", retval().deref(3, 2, 1), "+1(+2(+3(retval)))"},
		{"+9223372036854775807(%di)", reg(regs.RDI).deref(math.MaxInt64), "+9223372036854775807(%rdi)"},
		{"+0x7fffffffffffffff(%di)", reg(regs.RDI).deref(math.MaxInt64), "+9223372036854775807(%rdi)"},
		{"-0x8000000000000000(%di)", reg(regs.RDI).deref(math.MinInt64), "-9223372036854775808(%rdi)"},
		{"-9223372036854775808(%di)", reg(regs.RDI).deref(math.MinInt64), "-9223372036854775808(%rdi)"},
		{"arg0:string", arg(0).typed(str(DefaultStringLen)), "arg0:string"},
		{"arg0:string[256]", arg(0).typed(str(DefaultStringLen)), "arg0:string"},
		{"arg0:string[64]", arg(0).typed(str(64)), "arg0:string[64]"},
		{"arg0:string[2]", arg(0).typed(str(2)), "arg0:string[2]"},
		{"arg0:string[65535]", arg(0).typed(str(65535)), "arg0:string[65535]"},
		{"arg1:bytes[16]", arg(1).typed(byt(16)), "arg1:bytes[16]"},
		{"arg1:bytes[1]", arg(1).typed(byt(1)), "arg1:bytes[1]"},
		{"retval:x64", retval().typed(x(8)), "retval:x64"},
		{"+16(%di):s32", reg(regs.RDI).deref(16).typed(s(4)), "+16(%rdi):s32"},
		{"arg0:u8", arg(0).typed(u(1)), "arg0:u8"},
		{"arg0:u16", arg(0).typed(u(2)), "arg0:u16"},
		{"arg0:u32", arg(0).typed(u(4)), "arg0:u32"},
		{"arg0:u64", arg(0).typed(u(8)), "arg0:u64"},
		{"arg0:s8", arg(0).typed(s(1)), "arg0:s8"},
		{"arg0:s16", arg(0).typed(s(2)), "arg0:s16"},
		{"arg0:s64", arg(0).typed(s(8)), "arg0:s64"},
		{"arg0:x8", arg(0).typed(x(1)), "arg0:x8"},
		{"arg0:x16", arg(0).typed(x(2)), "arg0:x16"},
		{"arg0:x32", arg(0).typed(x(4)), "arg0:x32"},
		{"  arg0  ", arg(0), "arg0"},
		{"\targ0:u8\n", arg(0).typed(u(1)), "arg0:u8"},
		{" +8 ( %di ) : u32 ", reg(regs.RDI).deref(8).typed(u(4)), "+8(%rdi):u32"},
		{"+0( +8( %ax ) ) :string [ 32 ]", reg(regs.RAX).deref(8, 0).typed(str(32)), "+0(+8(%rax)):string[32]"},
		{"arg0:bytes [8]", arg(0).typed(byt(8)), "arg0:bytes[8]"},
		{strings.Repeat("+0(", MaxDepth) + "%di" + strings.Repeat(")", MaxDepth),
			reg(regs.RDI).deref(make([]int64, MaxDepth)...),
			strings.Repeat("+0(", MaxDepth) + "%rdi" + strings.Repeat(")", MaxDepth)},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			got, err := Parse(tt.text)
			require.NoError(t, err)
			want := tt.want
			want.Text = tt.text
			assert.Equal(t, want, got)
			assert.Equal(t, tt.canon, got.String())
		})
	}
}

func TestParseInvalid(t *testing.T) {
	tests := []struct {
		text   string
		column int
		msg    string // the whole message, or a prefix when it ends in "…"
	}{
		{"", 1, "empty expression"},
		{"   ", 1, "empty expression"},
		{"arg", 4, `expected a number after "arg"`},
		{"argX", 4, `expected a number after "arg"`},
		{"arg1x", 5, `unexpected "x" in argument number`},
		{"arg01", 4, "leading zero in argument number"},
		{"arg1000", 4, "argument number out of range (want 0..999)"},
		{"arg99999999999999999999999", 4, "argument number out of range (want 0..999)"},
		{"ret", 1, `unknown name "ret" (want argN, retval, %register, OFF(EXPR) or a $name)`},
		{"retval2", 1, `unknown name "retval2" …`},
		{"rdi", 1, `unknown name "rdi" (registers take a %: "%rdi")`},
		{"ARG0", 1, `unknown name "ARG0" …`},
		{"%", 2, `expected register name after "%"`},
		{"% di", 2, `expected register name after "%"`},
		{"%xz", 1, `unknown register "%xz" (want one of ax, bx, cx, dx, si, di, bp, sp, ip, rax, …`},
		{"+8(%xz)", 4, `unknown register "%xz" …`},
		{"%eax", 1, `partial register "%eax" (want the whole register %rax)`},
		{"%ah", 1, `partial register "%ah" (want the whole register %rax)`},
		{"%r15d", 1, `partial register "%r15d" (want the whole register %r15)`},
		{"%w3", 1, `partial register "%w3" (want the whole register %x3)`},
		{"%x31", 1, `unknown register "%x31" …`},
		{"%x01", 1, `unknown register "%x01" …`},
		{"%r0", 1, `unknown register "%r0" …`},
		{"x0", 1, `unknown name "x0" (registers take a %: "%x0")`},
		{"+0(%ax", 7, `expected ")"`},
		{"+0(+8(%ax)", 11, `expected ")"`},
		{"+0(%ax))", 8, `unexpected ")"`},
		{"arg0)", 5, `unexpected ")"`},
		{"(%di)", 1, `missing offset before "(" (write +0(...))`},
		{"+8%di", 3, `expected "(" after offset`},
		{"+8", 3, `expected "(" after offset`},
		{"+(%di)", 2, `expected offset after "+"`},
		{"-", 2, `expected offset after "-"`},
		{"+ 8(%di)", 2, `expected offset after "+"`},
		{"+x(%di)", 2, `expected offset after "+"`},
		{"+8x(%di)", 3, `unexpected "x" in offset`},
		{"+0x(%di)", 4, `expected hex digits after "0x"`},
		{"+0x1g(%di)", 5, `unexpected "g" in offset`},
		{"+010(%di)", 2, "leading zero in offset (write decimal without it, or hex with 0x)"},
		{"+0x8000000000000000(%di)", 1, "offset out of range"},
		{"0x8000000000000000(%di)", 1, "offset out of range"},
		{"+9223372036854775808(%di)", 1, "offset out of range"},
		{"-9223372036854775809(%di)", 1, "offset out of range"},
		{"-0x8000000000000001(%di)", 1, "offset out of range"},
		{"+0x10000000000000000(%di)", 1, "offset out of range"},
		{"+99999999999999999999999(%di)", 1, "offset out of range"},
		{"arg0 arg1", 6, `unexpected "a"`},
		{"arg0:u32 x", 10, `unexpected "x"`},
		{"arg0:u32:u8", 9, `unexpected ":"`},
		{"+8(%di:u32)", 7, `expected ")" (a type goes after the whole expression)`},
		{"+8(%di) junk", 9, `unexpected "j"`},
		{"arg0:", 6, `expected a type after ":"`},
		{"arg0: ", 7, `expected a type after ":"`},
		{"arg0:[4]", 6, `expected a type after ":"`},
		{"arg0:u7", 6, `unknown type "u7" (want u8..u64, s8..s64, x8..x64, string, string[N], bytes[N], gostring, gostring[N])`},
		{"arg0:U32", 6, `unknown type "U32" …`},
		{"arg0:int", 6, `unknown type "int" …`},
		{"arg0:string[1]", 13, "string bound out of range (want 2..65535)"},
		{"arg0:string[0]", 13, "string bound out of range (want 2..65535)"},
		{"arg0:string[70000]", 13, "string bound out of range (want 2..65535)"},
		{"arg0:string[99999999999999999999]", 13, "string bound out of range (want 2..65535)"},
		{"arg0:string[]", 13, `expected a number after "["`},
		{"arg0:string[", 13, `expected a number after "["`},
		{"arg0:string[16", 15, `expected "]"`},
		{"arg0:string[16)", 15, `expected "]"`},
		{"arg0:string[-1]", 13, `expected a number after "["`},
		{"arg0:string[0x10]", 14, `unexpected "x" in string bound`},
		{"arg0:string[016]", 13, "leading zero in string bound"},
		{"arg0:bytes", 11, `expected "[" after "bytes" (want bytes[N])`},
		{"arg0:bytes[0]", 12, "bytes length out of range (want 1..65535)"},
		{"arg0:bytes[65536]", 12, "bytes length out of range (want 1..65535)"},
		{"arg0:u32[4]", 9, `unexpected "["`},
		{"$", 2, `expected a name after "$"`},
		{"$ :u32", 2, `expected a name after "$"`},
		{"+8($req)", 4, "a $name stands alone: it cannot be wrapped in OFF(...); write the path ($p->field, $a[N])"},
		{"$f(x)", 3, "a $name stands alone: it cannot be wrapped in OFF(...) or hold parentheses"},
		{"$req->id:u7", 10, `unknown type "u7" …`},
		{"$req->id:u32 x", 14, `unexpected "x"`},
		{"$a:u8:u8", 6, `unexpected ":"`},
		{"+8(", 4, `expected argN, retval, %register or OFF(EXPR)`},
		{"arg0:strïng", 6, `unknown type "str" …`},
		{"arg0:u8ï", 8, `unexpected "ï"`},
		{"\xff", 1, `unexpected "\xff" …`},
		{strings.Repeat("+0(", MaxDepth+1) + "%di" + strings.Repeat(")", MaxDepth+1),
			3*MaxDepth + 1, "too deeply nested (over 64 dereferences)"},
	}
	for _, tt := range tests {
		t.Run(tt.text, func(t *testing.T) {
			_, err := Parse(tt.text)
			require.Error(t, err)
			var se *SyntaxError
			require.True(t, errors.As(err, &se), "error is %T", err)
			assert.Equal(t, tt.text, se.Text)
			assert.Equal(t, tt.column, se.Column, "message: %s", se.Msg)
			if prefix, ok := strings.CutSuffix(tt.msg, "…"); ok {
				assert.True(t, strings.HasPrefix(se.Msg, prefix), "message %q does not start with %q", se.Msg, prefix)
			} else {
				assert.Equal(t, tt.msg, se.Msg)
			}
			assert.NotContains(t, se.Error(), "failed to")
		})
	}
}

func TestSyntaxErrorFormat(t *testing.T) {
	_, err := Parse("+0(%ax")
	require.Error(t, err)
	assert.EqualError(t, err, `fetch expression "+0(%ax" at column 7: expected ")"`)
}

func TestUnknownRegisterListsAllNames(t *testing.T) {
	_, err := Parse("%xz")
	require.Error(t, err)
	assert.Contains(t, err.Error(), strings.Join(regs.WholeNames(), ", "))
	assert.Contains(t, err.Error(), "on arm64 x0…x30, fp, lr, sp, pc")
}

func TestRoundTrip(t *testing.T) {
	texts := []string{
		"arg0", "arg999", "retval", "%di", "%R15", "%ip", "%x0", "%FP", "%pc", "+16(%x30):s8",
		"+0(+8(%ax)):string", "-8(%bp):s64", "0x10(arg0):x16",
		"-0x8000000000000000(retval):bytes[3]", "+0x7fffffffffffffff(%sp)",
		" +1 ( -2 ( 3 ( arg7 ) ) ) : string [ 2 ] ",
		"arg0:string[256]", "arg0:string[65535]",
	}
	for _, text := range texts {
		t.Run(text, func(t *testing.T) {
			e, err := Parse(text)
			require.NoError(t, err)
			canon := e.String()
			again, err := Parse(canon)
			require.NoError(t, err, "canonical form %q", canon)
			e.Text = canon
			assert.Equal(t, e, again)
			assert.Equal(t, canon, again.String(), "String is not a fixed point")
		})
	}
}

func TestTypeString(t *testing.T) {
	tests := []struct {
		t    Type
		want string
	}{
		{u(1), "u8"}, {u(8), "u64"}, {s(2), "s16"}, {x(4), "x32"},
		{str(DefaultStringLen), "string"}, {str(64), "string[64]"},
		{byt(16), "bytes[16]"}, {Type{}, "invalid"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.t.String())
	}
	assert.True(t, x(8).IsInteger())
	assert.False(t, str(2).IsInteger())
	assert.False(t, byt(2).IsInteger())
}

func TestNames(t *testing.T) {
	assert.Equal(t, "arg", RootArg.String())
	assert.Equal(t, "retval", RootRetval.String())
	assert.Equal(t, "register", RootRegister.String())
	assert.Equal(t, "name", RootName.String())
	assert.Equal(t, "invalid", Root(0).String())
	assert.Equal(t, "unsigned", KindUnsigned.String())
	assert.Equal(t, "signed", KindSigned.String())
	assert.Equal(t, "hex", KindHex.String())
	assert.Equal(t, "string", KindString.String())
	assert.Equal(t, "bytes", KindBytes.String())
	assert.Equal(t, "invalid", Kind(0).String())
	assert.Equal(t, "invalid", Expr{}.String())
}

func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"", " ", "arg0", "arg12", "arg999", "arg1000", "arg", "argX", "arg01", "retval", "retval:x64",
		"%di", "%rdi", "%ax", "%r15", "%sp", "%ip", "%eax", "%ah", "%xz", "%", "rdi",
		"%x0", "%x30", "%x31", "%fp", "%lr", "%pc", "%w1", "%X9", "+8(%x2):u32", "x3",
		"+0x10(%di)", "-8(%bp)", "8(%di)", "0x10(arg0)", "+0(+8(%ax))", "+0(+8(%ax)):string",
		"+16(%di):s32", "arg1:bytes[16]", "arg0:string[64]", "arg0:string[1]", "arg0:string[0]",
		"arg0:bytes[0]", "arg0:string[70000]", "+8(%di:u32)", "+0(%ax", "+0(%ax))", "(%di)",
		"-0x8000000000000000(%di)", "+0x8000000000000000(%di)", "+99999999999999999999(%di)",
		" +8 ( %di ) : u32 ", "arg0:u7", "arg0:", "arg0:bytes", "+010(%di)", "+0x(%di)",
		"arg0:string [ 8 ]", "\xff", "$req->hdr->name", "$req->id:x32", "$$params", "$return:s64", "$", "+0($a)", "$a:", "arg0:strïng", strings.Repeat("+0(", 70) + "%di" + strings.Repeat(")", 70),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		e, err := Parse(text)
		if err != nil {
			var se *SyntaxError
			require.True(t, errors.As(err, &se), "error is %T", err)
			require.GreaterOrEqual(t, se.Column, 1)
			require.LessOrEqual(t, se.Column, len(text)+1)
			require.Equal(t, text, se.Text)
			require.NotEmpty(t, se.Msg)
			return
		}
		require.Equal(t, text, e.Text)
		canon := e.String()
		again, err := Parse(canon)
		require.NoError(t, err, "canonical form %q of %q", canon, text)
		e.Text = canon
		require.Equal(t, e, again)
		require.Equal(t, canon, again.String())
		require.LessOrEqual(t, len(e.Derefs), MaxDepth)
		if e.Typed {
			require.NotEqual(t, Type{}, e.Type)
		} else {
			require.Equal(t, Type{}, e.Type)
		}
	})
}
