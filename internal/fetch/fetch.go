// Package fetch parses fetch expressions: the small language in which a
// user says, per captured attribute, which value to read at a probe site and
// how to store it. It is pure Go and only parses; the caller resolves what an
// argument means, checks the engine's own limits and compiles the result.
//
// An expression starts from a root, optionally wrapped in dereferences, and
// optionally ends with a type:
//
//	expr  = ( term | name ) [ ":" type ]
//	term  = "arg" N | "retval" | "%" register | OFF "(" term ")"
//	name  = "$" { any byte but ":" }
//	OFF   = [ "+" | "-" ] ( decimal | "0x" hex )
//	type  = "u8" | "u16" | "u32" | "u64"
//	      | "s8" | "s16" | "s32" | "s64"
//	      | "x8" | "x16" | "x32" | "x64"
//	      | "string" [ "[" N "]" ] | "bytes" "[" N "]"
//	      | "gostring" [ "[" N "]" ]
//
// The roots are argN, the Nth argument (0 to 999; the caller decides whether
// that is a USDT argument or an argument of the calling convention), retval,
// the return value, and %REG, a whole 64-bit register. An x86-64 register is
// named as the kernel's probe syntax names it (%di, %ax, %ip, …) or by its
// 64-bit AT&T name (%rdi, %rax, %r15, %rip); %ax means all of RAX, not its
// low 16 bits. An arm64 register is named %x0 to %x30, %fp (x29), %lr (x30)
// or %pc; %sp is the stack pointer of either architecture. Which
// architecture's registers an expression may name is the traced file's
// business: the caller refuses a register of the other one. Register names
// are case-insensitive; arg, retval and the types are lowercase.
//
// A name ($req->hdr->len, $return, $$params) is a path through the traced
// file's debuginfo in SystemTap's syntax; this package only separates it
// from its type (everything up to the first ":" is the path) and leaves its
// grammar to package debuginfo (fetch.ParsePath). A name stands alone:
// it cannot be wrapped in OFF(...), and its type is optional (the default
// comes from the variable's declared type).
//
// OFF(EXPR) reads memory at the value of EXPR plus OFF. An offset is decimal
// or hexadecimal with 0x, signed or not: +0x10(%di), -8(%bp) and 8(%di) are
// all dereferences. Dereferences nest: +0(+8(%ax)) reads the 8 bytes at
// rax+8, then reads at that value. A decimal offset must not have leading
// zeros, so that 010 is never mistaken for octal.
//
// The type says how the value is stored and shown: uN and sN are unsigned
// and signed integers of N bits, xN is an unsigned integer shown in hex,
// string is a NUL-terminated string of at most DefaultStringLen bytes
// including the NUL, string[N] one of at most N bytes (N >= 2), bytes[N]
// exactly N raw bytes (N >= 1), and gostring (gostring[N]) a Go string: a
// pointer and a length, read from two argument registers (argN:gostring)
// or from a string header in memory (+16(%ax):gostring), at most
// DefaultStringLen-1 (N-1) bytes of it. Only the whole expression has a type.
//
// Examples:
//
//	arg0:string
//	retval:x64
//	+16(%di):s32
//	+0(+8(%ax)):string[64]
//	arg1:bytes[16]
//	$req->hdr->name
//	$req->id:x32
//
// Blanks may surround any token, but not split one: "+8 ( %di ) : u32" is
// fine, "+ 8(%di)" and "% di" are not.
package fetch

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

// Root is what an expression starts from.
type Root uint8

// The roots of an expression.
const (
	// RootArg is argN: the Nth argument.
	RootArg Root = iota + 1
	// RootRetval is retval: the return value.
	RootRetval
	// RootRegister is %REG: a whole 64-bit register.
	RootRegister
	// RootName is a $name path resolved through the traced file's
	// debuginfo; Expr.Path holds it.
	RootName
)

// String returns the name of the root: "arg", "retval" or "register".
func (r Root) String() string {
	switch r {
	case RootArg:
		return "arg"
	case RootRetval:
		return "retval"
	case RootRegister:
		return "register"
	case RootName:
		return "name"
	}
	return "invalid"
}

// Kind is how a fetched value is stored and shown.
type Kind uint8

// The kinds of a type.
const (
	// KindUnsigned is an unsigned integer, uN.
	KindUnsigned Kind = iota + 1
	// KindSigned is a signed integer, sN.
	KindSigned
	// KindHex is an unsigned integer shown as 0x%x, xN.
	KindHex
	// KindString is a NUL-terminated string, string or string[N].
	KindString
	// KindBytes is a fixed number of raw bytes, bytes[N].
	KindBytes
	// KindGoString is a Go string (a pointer and a length), gostring or
	// gostring[N]; MaxLen bounds it as for KindString.
	KindGoString
)

// String returns the name of the kind: "unsigned", "signed", "hex",
// "string" or "bytes".
func (k Kind) String() string {
	switch k {
	case KindUnsigned:
		return "unsigned"
	case KindSigned:
		return "signed"
	case KindHex:
		return "hex"
	case KindString:
		return "string"
	case KindBytes:
		return "bytes"
	case KindGoString:
		return "gostring"
	}
	return "invalid"
}

// Type is the declared type of a fetch.
type Type struct {
	Kind Kind
	// Size is the width of an integer in bytes: 1, 2, 4 or 8; 0 otherwise.
	Size uint8
	// MaxLen is, for KindString, the bound in bytes including the NUL
	// (DefaultStringLen when the text gave none) and, for KindBytes, the
	// exact length; it is 0 for integers.
	MaxLen uint16
}

// DefaultStringLen is the bound of a string without [N], in bytes including
// the NUL.
const DefaultStringLen = 256

// MaxTypeLen is the largest N the parser accepts in string[N] and bytes[N].
// The engine's tighter limits are for the caller to check.
const MaxTypeLen = math.MaxUint16

// MaxArg is the largest N the parser accepts in argN.
const MaxArg = 999

// MaxDepth is the most dereferences the parser accepts in one expression,
// so that no input can exhaust it. The engine's smaller limit is for the
// caller to check.
const MaxDepth = 64

// String returns the canonical text of the type: "u32", "x64", "string"
// (when MaxLen is DefaultStringLen), "string[64]", "bytes[16]".
func (t Type) String() string {
	switch t.Kind {
	case KindUnsigned:
		return "u" + strconv.Itoa(int(t.Size)*8)
	case KindSigned:
		return "s" + strconv.Itoa(int(t.Size)*8)
	case KindHex:
		return "x" + strconv.Itoa(int(t.Size)*8)
	case KindString:
		if t.MaxLen == DefaultStringLen {
			return "string"
		}
		return "string[" + strconv.Itoa(int(t.MaxLen)) + "]"
	case KindBytes:
		return "bytes[" + strconv.Itoa(int(t.MaxLen)) + "]"
	case KindGoString:
		if t.MaxLen == DefaultStringLen {
			return "gostring"
		}
		return "gostring[" + strconv.Itoa(int(t.MaxLen)) + "]"
	}
	return "invalid"
}

// IsInteger reports whether the type is an integer: uN, sN or xN.
func (t Type) IsInteger() bool {
	return t.Kind == KindUnsigned || t.Kind == KindSigned || t.Kind == KindHex
}

// Expr is a parsed fetch expression.
type Expr struct {
	// Text is the expression as written.
	Text string
	// Root is what the expression starts from.
	Root Root
	// Arg is N of argN (0..MaxArg), for RootArg.
	Arg int
	// Register is the register, for RootRegister: an x86-64 register for
	// an x86-64 name (regs.RSP for %sp, the stack pointer of both
	// architectures), an arm64 register for an arm64 name.
	Register regs.Register
	// Path is the $name path without its type and surrounding blanks, for
	// RootName: "$req->hdr->len", "$return", "$$params".
	Path string
	// Derefs are the offsets of the dereferences, innermost first:
	// "+0(+8(%ax))" gives [8, 0]. It is nil when there are none.
	Derefs []int64
	// Type is the declared type; it is the zero value when Typed is false.
	Type Type
	// Typed is false when the text had no ":type".
	Typed bool
}

// String returns the canonical form of the expression, such as
// "+0(+8(%rax)):string". Parse accepts it and gives back an equal Expr
// (except for Text).
func (e Expr) String() string {
	var b strings.Builder
	if e.Root == RootName {
		b.WriteString(e.Path)
		if e.Typed {
			b.WriteString(":" + e.Type.String())
		}
		return b.String()
	}
	for i := len(e.Derefs) - 1; i >= 0; i-- {
		if e.Derefs[i] >= 0 {
			b.WriteByte('+')
		}
		b.WriteString(strconv.FormatInt(e.Derefs[i], 10))
		b.WriteByte('(')
	}
	switch e.Root {
	case RootArg:
		b.WriteString("arg" + strconv.Itoa(e.Arg))
	case RootRetval:
		b.WriteString("retval")
	case RootRegister:
		b.WriteString("%" + e.Register.String())
	default:
		b.WriteString("invalid")
	}
	b.WriteString(strings.Repeat(")", len(e.Derefs)))
	if e.Typed {
		b.WriteString(":" + e.Type.String())
	}
	return b.String()
}

// SyntaxError says where a fetch expression went wrong.
type SyntaxError struct {
	// Text is the whole expression.
	Text string
	// Column is the 1-based column, in bytes, of the offending character,
	// or len(Text)+1 when the text ended too early.
	Column int
	// Msg is a short lowercase phrase such as `expected ")"`.
	Msg string
}

// Error formats the error as
// `fetch expression "+0(%ax" at column 7: expected ")"`.
func (e *SyntaxError) Error() string {
	return fmt.Sprintf("fetch expression %q at column %d: %s", e.Text, e.Column, e.Msg)
}

const (
	wantTerm = `want argN, retval, %register, OFF(EXPR) or a $name`
	wantType = `want u8..u64, s8..s64, x8..x64, string, string[N], bytes[N], gostring, gostring[N]`
)

// Parse parses one fetch expression. Its errors are *SyntaxError.
func Parse(text string) (Expr, error) {
	p := parser{text: text}
	e := Expr{Text: text}
	p.skipSpace()
	if p.eof() {
		return Expr{}, p.errAt(0, "empty expression")
	}
	if p.peek() == '$' {
		return p.name(e)
	}

	// Offsets, outermost first, up to the root.
	var offs []int64
	for {
		p.skipSpace()
		c := p.peek()
		if c == '+' || c == '-' || isDigit(c) {
			start := p.pos
			if len(offs) == MaxDepth {
				return Expr{}, p.errAt(start, fmt.Sprintf("too deeply nested (over %d dereferences)", MaxDepth))
			}
			off, err := p.offset()
			if err != nil {
				return Expr{}, err
			}
			p.skipSpace()
			if p.peek() != '(' {
				return Expr{}, p.errAt(p.pos, `expected "(" after offset`)
			}
			p.pos++
			offs = append(offs, off)
			continue
		}
		if c == '(' {
			return Expr{}, p.errAt(p.pos, `missing offset before "(" (write +0(...))`)
		}
		if c == '$' {
			return Expr{}, p.errAt(p.pos, "a $name stands alone: it cannot be wrapped in OFF(...); write the path ($p->field, $a[N])")
		}
		if err := p.root(&e); err != nil {
			return Expr{}, err
		}
		break
	}
	for range offs {
		p.skipSpace()
		switch p.peek() {
		case ')':
			p.pos++
		case ':':
			return Expr{}, p.errAt(p.pos, `expected ")" (a type goes after the whole expression)`)
		default:
			return Expr{}, p.errAt(p.pos, `expected ")"`)
		}
	}
	if len(offs) > 0 {
		e.Derefs = make([]int64, len(offs))
		for i, off := range offs {
			e.Derefs[len(offs)-1-i] = off
		}
	}

	p.skipSpace()
	if p.peek() == ':' {
		p.pos++
		t, err := p.typ()
		if err != nil {
			return Expr{}, err
		}
		e.Type, e.Typed = t, true
		p.skipSpace()
	}
	if !p.eof() {
		return Expr{}, p.errAt(p.pos, "unexpected "+p.quoteAt(p.pos))
	}
	return e, nil
}

// name parses a $name path and its optional type: the path is everything
// up to the first ":" (its own grammar is package debuginfo's).
func (p *parser) name(e Expr) (Expr, error) {
	start := p.pos
	end := strings.IndexByte(p.text[start:], ':')
	if end < 0 {
		end = len(p.text)
	} else {
		end += start
	}
	e.Root = RootName
	e.Path = strings.TrimRight(p.text[start:end], " \t\n\r\v\f")
	if e.Path == "$" {
		return Expr{}, p.errAt(start+1, `expected a name after "$"`)
	}
	for i := start; i < start+len(e.Path); i++ {
		if c := p.text[i]; c == '(' || c == ')' {
			return Expr{}, p.errAt(i, "a $name stands alone: it cannot be wrapped in OFF(...) or hold parentheses")
		}
	}
	p.pos = end
	if p.peek() == ':' {
		p.pos++
		t, err := p.typ()
		if err != nil {
			return Expr{}, err
		}
		e.Type, e.Typed = t, true
		p.skipSpace()
	}
	if !p.eof() {
		return Expr{}, p.errAt(p.pos, "unexpected "+p.quoteAt(p.pos))
	}
	return e, nil
}

// parser is the state of one Parse: the text and the byte offset reached.
type parser struct {
	text string
	pos  int
}

func (p *parser) errAt(pos int, msg string) *SyntaxError {
	return &SyntaxError{Text: p.text, Column: pos + 1, Msg: msg}
}

func (p *parser) eof() bool { return p.pos >= len(p.text) }

// peek returns the byte at the current position, or 0 at the end.
func (p *parser) peek() byte {
	if p.eof() {
		return 0
	}
	return p.text[p.pos]
}

func (p *parser) skipSpace() {
	for !p.eof() && isSpace(p.text[p.pos]) {
		p.pos++
	}
}

// word consumes a run of letters, digits and underscores and returns it.
func (p *parser) word() string {
	start := p.pos
	for !p.eof() && isWord(p.text[p.pos]) {
		p.pos++
	}
	return p.text[start:p.pos]
}

// quoteAt quotes the character at pos (a whole UTF-8 sequence if it is one,
// else a single byte) for an error message.
func (p *parser) quoteAt(pos int) string {
	_, n := utf8.DecodeRuneInString(p.text[pos:])
	return strconv.Quote(p.text[pos : pos+n])
}

// offset parses [+|-](decimal|0xhex) at the current position.
func (p *parser) offset() (int64, error) {
	start := p.pos
	neg := false
	sign := ""
	if c := p.peek(); c == '+' || c == '-' {
		neg = c == '-'
		sign = string(c)
		p.pos++
	}
	numStart := p.pos
	num := p.word()
	if num == "" || !isDigit(num[0]) {
		return 0, p.errAt(numStart, fmt.Sprintf("expected offset after %q", sign))
	}
	var (
		mag      uint64
		overflow bool
	)
	if len(num) >= 2 && num[0] == '0' && (num[1] == 'x' || num[1] == 'X') {
		digits := num[2:]
		if digits == "" {
			return 0, p.errAt(numStart+2, fmt.Sprintf("expected hex digits after %q", num[:2]))
		}
		for i := 0; i < len(digits); i++ {
			d, ok := hexVal(digits[i])
			if !ok {
				return 0, p.errAt(numStart+2+i, "unexpected "+p.quoteAt(numStart+2+i)+" in offset")
			}
			if mag > math.MaxUint64>>4 {
				overflow = true
			}
			mag = mag<<4 | uint64(d)
		}
	} else {
		for i := 0; i < len(num); i++ {
			if !isDigit(num[i]) {
				return 0, p.errAt(numStart+i, "unexpected "+p.quoteAt(numStart+i)+" in offset")
			}
		}
		if len(num) > 1 && num[0] == '0' {
			return 0, p.errAt(numStart, "leading zero in offset (write decimal without it, or hex with 0x)")
		}
		for i := 0; i < len(num); i++ {
			d := uint64(num[i] - '0')
			if mag > (math.MaxUint64-d)/10 {
				overflow = true
			}
			mag = mag*10 + d
		}
	}
	limit := uint64(math.MaxInt64)
	if neg {
		limit = 1 << 63
	}
	if overflow || mag > limit {
		return 0, p.errAt(start, "offset out of range")
	}
	if !neg {
		return int64(mag), nil
	}
	if mag == 1<<63 {
		return math.MinInt64, nil
	}
	return -int64(mag), nil
}

// root parses argN, retval or %REG at the current position into e.
func (p *parser) root(e *Expr) error {
	start := p.pos
	c := p.peek()
	switch {
	case c == '%':
		p.pos++
		name := p.word()
		if name == "" {
			return p.errAt(p.pos, `expected register name after "%"`)
		}
		full := p.text[start:p.pos]
		r, ok := regs.ParseWhole(name)
		if !ok {
			r, ok = arm64Register(name)
		}
		if !ok {
			if op, ok := regs.ParseOperand(name); ok {
				return p.errAt(start, fmt.Sprintf("partial register %q (want the whole register %%%s)", full, op.Reg))
			}
			if op, ok := regs.ArchARM64.ParseOperand(name); ok && op.Size < 8 {
				return p.errAt(start, fmt.Sprintf("partial register %q (want the whole register %%%s)", full, op.Reg))
			}
			return p.errAt(start, fmt.Sprintf("unknown register %q (want one of %s; on arm64 %s)", full, strings.Join(regs.WholeNames(), ", "), arm64Names))
		}
		e.Root, e.Register = RootRegister, r
		return nil
	case isWord(c):
		w := p.word()
		switch {
		case w == "retval":
			e.Root = RootRetval
			return nil
		case strings.HasPrefix(w, "arg"):
			n, err := p.argNum(start+3, w[3:])
			if err != nil {
				return err
			}
			e.Root, e.Arg = RootArg, n
			return nil
		}
		if _, ok := regs.ParseWhole(w); ok {
			return p.errAt(start, fmt.Sprintf("unknown name %q (registers take a %%: %q)", w, "%"+w))
		}
		if _, ok := arm64Register(w); ok {
			return p.errAt(start, fmt.Sprintf("unknown name %q (registers take a %%: %q)", w, "%"+w))
		}
		return p.errAt(start, fmt.Sprintf("unknown name %q (%s)", w, wantTerm))
	case p.eof():
		return p.errAt(p.pos, `expected argN, retval, %register or OFF(EXPR)`)
	}
	return p.errAt(p.pos, "unexpected "+p.quoteAt(p.pos)+" ("+wantTerm+")")
}

// arm64Names lists the arm64 register names of fetch expressions, for
// messages.
const arm64Names = "x0…x30, fp, lr, sp, pc"

// arm64Register returns the arm64 register a fetch expression names with
// an arm64 name: x0 to x30, fp (x29), lr (x30) and pc, case-insensitively;
// sp is the x86-64 kernel name of the stack pointer as well, which
// ParseWhole takes first. Go's register names (R0, RSP) are not fetch
// names: R8 to R15 are x86-64 registers too.
func arm64Register(name string) (regs.Register, bool) {
	n := strings.ToLower(name)
	switch {
	case n == "fp", n == "lr", n == "pc":
	case len(n) >= 2 && n[0] == 'x' && (n == "x0" || n[1] != '0'):
		if _, err := strconv.Atoi(n[1:]); err != nil {
			return regs.None, false
		}
	default:
		return regs.None, false
	}
	return regs.ArchARM64.ParseWhole(n)
}

// argNum checks the digits of argN, which start at byte pos.
func (p *parser) argNum(pos int, digits string) (int, error) {
	if digits == "" || !isDigit(digits[0]) {
		return 0, p.errAt(pos, `expected a number after "arg"`)
	}
	for i := 0; i < len(digits); i++ {
		if !isDigit(digits[i]) {
			return 0, p.errAt(pos+i, "unexpected "+p.quoteAt(pos+i)+" in argument number")
		}
	}
	if len(digits) > 1 && digits[0] == '0' {
		return 0, p.errAt(pos, "leading zero in argument number")
	}
	if len(digits) > len(strconv.Itoa(MaxArg)) {
		return 0, p.errAt(pos, fmt.Sprintf("argument number out of range (want 0..%d)", MaxArg))
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n > MaxArg {
		return 0, p.errAt(pos, fmt.Sprintf("argument number out of range (want 0..%d)", MaxArg))
	}
	return n, nil
}

var intTypes = map[string]Type{
	"u8": {KindUnsigned, 1, 0}, "u16": {KindUnsigned, 2, 0}, "u32": {KindUnsigned, 4, 0}, "u64": {KindUnsigned, 8, 0},
	"s8": {KindSigned, 1, 0}, "s16": {KindSigned, 2, 0}, "s32": {KindSigned, 4, 0}, "s64": {KindSigned, 8, 0},
	"x8": {KindHex, 1, 0}, "x16": {KindHex, 2, 0}, "x32": {KindHex, 4, 0}, "x64": {KindHex, 8, 0},
}

// typ parses the type after the ":".
func (p *parser) typ() (Type, error) {
	p.skipSpace()
	start := p.pos
	w := p.word()
	if w == "" {
		return Type{}, p.errAt(start, `expected a type after ":"`)
	}
	if t, ok := intTypes[w]; ok {
		return t, nil
	}
	switch w {
	case "string", "gostring":
		kind := KindString
		if w == "gostring" {
			kind = KindGoString
		}
		save := p.pos
		p.skipSpace()
		if p.peek() != '[' {
			p.pos = save
			return Type{Kind: kind, MaxLen: DefaultStringLen}, nil
		}
		n, err := p.bound(2, w+" bound")
		if err != nil {
			return Type{}, err
		}
		return Type{Kind: kind, MaxLen: n}, nil
	case "bytes":
		p.skipSpace()
		if p.peek() != '[' {
			return Type{}, p.errAt(p.pos, `expected "[" after "bytes" (want bytes[N])`)
		}
		n, err := p.bound(1, "bytes length")
		if err != nil {
			return Type{}, err
		}
		return Type{Kind: KindBytes, MaxLen: n}, nil
	}
	return Type{}, p.errAt(start, fmt.Sprintf("unknown type %q (%s)", w, wantType))
}

// bound parses "[N]" at the current position, with min <= N <= MaxTypeLen.
func (p *parser) bound(min int, what string) (uint16, error) {
	p.pos++ // "["
	p.skipSpace()
	start := p.pos
	num := p.word()
	if num == "" {
		return 0, p.errAt(start, `expected a number after "["`)
	}
	for i := 0; i < len(num); i++ {
		if !isDigit(num[i]) {
			return 0, p.errAt(start+i, "unexpected "+p.quoteAt(start+i)+" in "+what)
		}
	}
	if len(num) > 1 && num[0] == '0' {
		return 0, p.errAt(start, "leading zero in "+what)
	}
	n := 0
	for i := 0; i < len(num) && n <= MaxTypeLen; i++ {
		n = n*10 + int(num[i]-'0')
	}
	if n < min || n > MaxTypeLen {
		return 0, p.errAt(start, fmt.Sprintf("%s out of range (want %d..%d)", what, min, MaxTypeLen))
	}
	p.skipSpace()
	if p.peek() != ']' {
		return 0, p.errAt(p.pos, `expected "]"`)
	}
	p.pos++
	return uint16(n), nil
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func isWord(c byte) bool {
	return isDigit(c) || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_'
}

func hexVal(c byte) (byte, bool) {
	switch {
	case isDigit(c):
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
