package usdt

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

// Arg is one parsed argument spec "[-]SIZE[f]@OPERAND" of an x86-64 or
// arm64 note.
type Arg struct {
	// Size is the width of the value in bytes: 1, 2, 4 or 8.
	Size uint8
	// Signed reports that the spec's size was negative.
	Signed bool
	// Float reports an "f" suffix on the size: a floating-point value.
	// Values in xmm (x86-64) or v/d/s (arm64) registers are refused, since
	// pt_regs does not hold them; a Float value in memory or in a
	// general-purpose register parses.
	Float bool
	// Operand is where the value lives.
	Operand Operand
	// Text is the spec as written.
	Text string
}

// String returns the spec as written.
func (a Arg) String() string { return a.Text }

// OperandKind says which kind of place an Operand is.
type OperandKind uint8

// The operand kinds.
const (
	// OperandRegister is a register or part of one: %rax, %eax, %ax, %al,
	// %ah, %r8d, %rip, … on x86-64; x0, w0, sp, … on arm64.
	OperandRegister OperandKind = iota + 1
	// OperandMemory is memory at DISP(BASE[,INDEX[,SCALE]]), with an
	// optional symbol in the displacement: sym(%rip), sym+8(%rip),
	// 40+sym(%rip), -140(%rbp), (%rsp), -96(%rbp,%rax,8), (,%rax,8) on
	// x86-64; [BASE, DISP], [BASE] or [BASE, INDEX, lsl K] on arm64.
	OperandMemory
	// OperandConstant is an immediate value: $5, $-3, $0x10 on x86-64; 5,
	// -3 on arm64.
	OperandConstant
)

// String returns "register", "memory" or "constant".
func (k OperandKind) String() string {
	switch k {
	case OperandRegister:
		return "register"
	case OperandMemory:
		return "memory"
	case OperandConstant:
		return "constant"
	}
	return fmt.Sprintf("OperandKind(%d)", uint8(k))
}

// Operand is where an argument's value lives.
//
// For OperandMemory the value is read at the virtual address
// (Symbol's virtual address, when Symbol != "") + Disp + Base + Index*Scale,
// with two exceptions: arm64 operands with SymbolLow12 (see there), and one
// that follows the assembler's meaning of %rip: when Base
// is regs.RIP and Symbol is set ("counter+8(%rip)"), the virtual address is
// Symbol's virtual address + Disp and the value of %rip is not added (the
// assembler turned the symbol into a displacement relative to the
// instruction). A numeric "1234(%rip)" means the value of %rip at the probe
// site (the site's virtual address as pt_regs reports it) + 1234. A
// Symbol's virtual address is a link-time virtual address of the traced
// file: for a PIE executable or a shared library the load bias must be
// added at run time.
type Operand struct {
	// Kind says which of the fields below apply.
	Kind OperandKind
	// Register is, for OperandRegister, the register and the part of it
	// the name selects.
	Register regs.Operand
	// Base is, for OperandMemory, the base register; it is regs.None only
	// when Index is set (never on arm64).
	Base regs.Register
	// Index is, for OperandMemory, the index register, regs.None when
	// absent.
	Index regs.Register
	// Scale is, for OperandMemory, 1, 2, 4 or 8 when Index is set, else 0.
	Scale uint8
	// Disp is, for OperandMemory, the numeric displacement.
	Disp int64
	// Symbol is, for OperandMemory, the symbol in the displacement, e.g.
	// "counter" for "counter+8(%rip)" (Disp is then 8), or "".
	Symbol string
	// SymbolLow12 is set, for an arm64 OperandMemory, when Symbol stands
	// for the low 12 bits of its virtual address only, as in
	// "[x7, #:lo12:counter]": the virtual address is then Base + ((Symbol's
	// virtual address + Disp) & 0xfff), Disp being the symbol's addend
	// ("#:lo12:counter+8"). The compiler loaded the symbol's 4 KiB page
	// into Base with adrp, and since a load bias is a multiple of the page
	// size, the low 12 bits of the link-time and run-time virtual
	// addresses agree. Symbol may be an assembler-local name (".LANCHOR0")
	// that the file's symbol table does not hold.
	SymbolLow12 bool
	// Value is, for OperandConstant, the constant.
	Value int64
}

// RIPRelativeSymbol reports whether o is a symbolic %rip-relative memory
// operand ("counter(%rip)"), whose virtual address is Symbol's virtual
// address + Disp without the value of %rip.
func (o Operand) RIPRelativeSymbol() bool {
	return o.Kind == OperandMemory && o.Base == regs.RIP && o.Symbol != ""
}

// String formats o canonically in the assembler syntax of the architecture
// of its registers (see [Operand.Format]): AT&T syntax for x86-64, e.g.
// "%eax", "-8(%rbp,%rax,8)", "counter+8(%rip)", "$-1"; arm64 syntax when a
// register is an arm64 one, e.g. "w1", "[sp, 16]". A constant names no
// register and is formatted in AT&T syntax ("$5"); Format(regs.ArchARM64)
// gives "5". Parsing the result gives o back.
func (o Operand) String() string { return o.Format(o.arch()) }

// formatATT formats o in AT&T syntax, canonically.
func (o Operand) formatATT() string {
	switch o.Kind {
	case OperandRegister:
		return "%" + operandName(o.Register)
	case OperandConstant:
		return "$" + strconv.FormatInt(o.Value, 10)
	case OperandMemory:
		var b strings.Builder
		b.WriteString(o.Symbol)
		switch {
		case o.Symbol != "" && o.Disp > 0:
			b.WriteString("+" + strconv.FormatInt(o.Disp, 10))
		case o.Symbol != "" && o.Disp < 0:
			b.WriteString(strconv.FormatInt(o.Disp, 10))
		case o.Symbol == "" && o.Disp != 0:
			b.WriteString(strconv.FormatInt(o.Disp, 10))
		}
		b.WriteByte('(')
		if o.Base != regs.None {
			b.WriteString("%" + o.Base.String())
		}
		if o.Index != regs.None {
			fmt.Fprintf(&b, ",%%%s,%d", o.Index, o.Scale)
		}
		b.WriteByte(')')
		return b.String()
	}
	return fmt.Sprintf("Operand(kind %d)", uint8(o.Kind))
}

// operandName finds the AT&T name of a register part.
func operandName(op regs.Operand) string {
	for _, name := range partNames(op.Reg) {
		if got, ok := regs.ParseOperand(name); ok && got == op {
			return name
		}
	}
	return fmt.Sprintf("%s/%d", op.Reg, op.Size)
}

func partNames(r regs.Register) []string {
	n := r.String()
	switch {
	case r >= regs.R8 && r <= regs.R15:
		return []string{n, n + "d", n + "w", n + "b"}
	case r == regs.RIP:
		return []string{"rip", "eip"}
	case r >= regs.RAX && r <= regs.RDX:
		c := n[1:2]
		return []string{n, "e" + c + "x", c + "x", c + "l", c + "h"}
	case r >= regs.RSI && r <= regs.RSP:
		c := n[1:]
		return []string{n, "e" + c, c, c + "l"}
	}
	return nil
}

// ErrUnsupportedFloatRegister is wrapped by the error of ParseArg for an
// argument in an xmm (or ymm, zmm) register, which pt_regs does not hold.
var ErrUnsupportedFloatRegister = errors.New("floating-point arguments in xmm registers are not supported")

// ParseArgs parses a whole space-separated argument list. An empty (or
// all-space) list gives no args and no error.
func ParseArgs(text string) ([]Arg, error) {
	fields := strings.Fields(text)
	if len(fields) == 0 {
		return nil, nil
	}
	args := make([]Arg, 0, len(fields))
	for _, f := range fields {
		a, err := ParseArg(f)
		if err != nil {
			return nil, err
		}
		args = append(args, a)
	}
	return args, nil
}

// ParseArg parses one x86-64 argument spec "[-]SIZE[f]@OPERAND". Its errors
// name the spec, e.g. `argument "8@%xyz": unknown register "%xyz"`.
func ParseArg(text string) (Arg, error) {
	a, err := parseArg(text)
	if err != nil {
		return Arg{}, fmt.Errorf("argument %q: %w", text, err)
	}
	return a, nil
}

func parseArg(text string) (Arg, error) {
	return parseSizeThen(text, parseOperand)
}

// parseSizeThen parses the "[-]SIZE[f]@" part of a spec and hands the rest
// to parseOperand.
func parseSizeThen(text string, parseOperand func(string) (Operand, error)) (Arg, error) {
	a := Arg{Text: text}
	size, operand, ok := strings.Cut(text, "@")
	if !ok {
		return a, errors.New(`no "@" between size and operand`)
	}
	if s, ok := strings.CutPrefix(size, "-"); ok {
		a.Signed, size = true, s
	}
	if s, ok := strings.CutSuffix(size, "f"); ok {
		a.Float, size = true, s
	}
	switch size {
	case "1", "2", "4", "8":
		a.Size = size[0] - '0'
	case "":
		return a, errors.New("missing size")
	default:
		return a, fmt.Errorf("invalid size %q: want 1, 2, 4 or 8", size)
	}
	op, err := parseOperand(operand)
	if err != nil {
		return a, err
	}
	a.Operand = op
	return a, nil
}

func parseOperand(s string) (Operand, error) {
	switch {
	case s == "":
		return Operand{}, errors.New("empty operand")
	case s[0] == '%':
		r, err := parseRegister(s)
		if err != nil {
			return Operand{}, err
		}
		return Operand{Kind: OperandRegister, Register: r}, nil
	case s[0] == '$':
		v, err := parseNumber(s[1:], true)
		if err != nil {
			return Operand{}, fmt.Errorf("constant %q: %w", s, err)
		}
		return Operand{Kind: OperandConstant, Value: v}, nil
	}
	return parseMemory(s)
}

func parseRegister(s string) (regs.Operand, error) {
	name := strings.TrimPrefix(s, "%")
	if name == "" {
		return regs.Operand{}, fmt.Errorf("empty register name %q", s)
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return regs.Operand{}, fmt.Errorf("unknown register %q", s)
		}
	}
	// The assembler takes register names in any case; compilers write
	// them in lowercase.
	if r, ok := regs.ParseOperand(name); ok {
		return r, nil
	}
	for _, p := range []string{"xmm", "ymm", "zmm"} {
		if strings.HasPrefix(strings.ToLower(name), p) {
			return regs.Operand{}, fmt.Errorf("register %q: %w", s, ErrUnsupportedFloatRegister)
		}
	}
	return regs.Operand{}, fmt.Errorf("unknown register %q", s)
}

// parseAddressRegister parses the base or index register of a memory
// operand, which must be a whole 64-bit register.
func parseAddressRegister(s, what string) (regs.Register, error) {
	if !strings.HasPrefix(s, "%") {
		return regs.None, fmt.Errorf("%s register %q has no %%", what, s)
	}
	r, err := parseRegister(s)
	if err != nil {
		return regs.None, err
	}
	if r.Size != 8 || r.Shift != 0 {
		return regs.None, fmt.Errorf("%s register %q is not a 64-bit register", what, s)
	}
	return r.Reg, nil
}

func parseMemory(s string) (Operand, error) {
	op := Operand{Kind: OperandMemory}
	open := strings.IndexByte(s, '(')
	if open < 0 {
		if strings.IndexByte(s, ')') >= 0 {
			return op, fmt.Errorf("memory operand %q: unbalanced parentheses", s)
		}
		return op, fmt.Errorf("memory operand %q: absolute addresses are not supported", s)
	}
	if !strings.HasSuffix(s, ")") {
		return op, fmt.Errorf("memory operand %q: junk after the closing parenthesis", s)
	}
	disp, inner := s[:open], s[open+1:len(s)-1]
	if strings.ContainsAny(inner, "()") || strings.IndexByte(disp, ')') >= 0 {
		return op, fmt.Errorf("memory operand %q: unbalanced parentheses", s)
	}
	var err error
	if op.Symbol, op.Disp, err = parseDisplacement(disp); err != nil {
		return op, fmt.Errorf("memory operand %q: %w", s, err)
	}
	parts := strings.Split(inner, ",")
	if len(parts) > 3 {
		return op, fmt.Errorf("memory operand %q: more than base, index and scale", s)
	}
	if parts[0] != "" {
		if op.Base, err = parseAddressRegister(parts[0], "base"); err != nil {
			return op, fmt.Errorf("memory operand %q: %w", s, err)
		}
	}
	if len(parts) >= 2 {
		if parts[1] == "" {
			return op, fmt.Errorf("memory operand %q: empty index register", s)
		}
		if op.Index, err = parseAddressRegister(parts[1], "index"); err != nil {
			return op, fmt.Errorf("memory operand %q: %w", s, err)
		}
		if op.Index == regs.RSP || op.Index == regs.RIP {
			return op, fmt.Errorf("memory operand %q: %%%s cannot be an index register", s, op.Index)
		}
		op.Scale = 1
	}
	if len(parts) == 3 {
		switch parts[2] {
		case "1", "2", "4", "8":
			op.Scale = parts[2][0] - '0'
		case "":
			return op, fmt.Errorf("memory operand %q: empty scale", s)
		default:
			return op, fmt.Errorf("memory operand %q: invalid scale %q: want 1, 2, 4 or 8", s, parts[2])
		}
	}
	if op.Base == regs.None && op.Index == regs.None {
		return op, fmt.Errorf("memory operand %q: no base or index register", s)
	}
	if op.Base == regs.RIP && op.Index != regs.None {
		return op, fmt.Errorf("memory operand %q: %%rip-relative operands take no index register", s)
	}
	return op, nil
}

// parseDisplacement parses the displacement of a memory operand: a sum of
// numbers and at most one symbol ("", "-140", "0x10", "counter",
// "counter+8", "counter-4", "40+CheckpointStats").
func parseDisplacement(s string) (string, int64, error) {
	if s == "" {
		return "", 0, nil
	}
	var (
		sym   string
		total int64
	)
	rest := s
	first := true
	for {
		neg := false
		switch {
		case strings.HasPrefix(rest, "+") && !first:
			rest = rest[1:]
		case strings.HasPrefix(rest, "-"):
			neg, rest = true, rest[1:]
		case !first:
			return "", 0, fmt.Errorf("displacement %q: junk %q", s, rest)
		}
		end := strings.IndexAny(rest, "+-")
		if end < 0 {
			end = len(rest)
		}
		term := rest[:end]
		rest = rest[end:]
		switch {
		case term == "":
			return "", 0, fmt.Errorf("displacement %q: empty term", s)
		case isSymbolStart(term[0]):
			if !isSymbol(term) {
				return "", 0, fmt.Errorf("displacement %q: invalid symbol %q", s, term)
			}
			if sym != "" {
				return "", 0, fmt.Errorf("displacement %q: more than one symbol", s)
			}
			if neg {
				return "", 0, fmt.Errorf("displacement %q: negated symbol %q", s, term)
			}
			sym = term
		default:
			if neg {
				term = "-" + term
			}
			v, err := parseNumber(term, false)
			if err != nil {
				return "", 0, fmt.Errorf("displacement %q: %w", s, err)
			}
			sum, overflow := addInt64(total, v)
			if overflow {
				return "", 0, fmt.Errorf("displacement %q: out of range", s)
			}
			total = sum
		}
		first = false
		if rest == "" {
			return sym, total, nil
		}
	}
}

func addInt64(a, b int64) (int64, bool) {
	s := a + b
	return s, (a >= 0) == (b >= 0) && (s >= 0) != (a >= 0)
}

func isSymbolStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '.'
}

func isSymbol(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isSymbolStart(c) && !(c >= '0' && c <= '9') && !(c == '$' && i > 0) {
			return false
		}
	}
	return s != ""
}

// parseNumber parses a decimal or 0x-prefixed hexadecimal number with an
// optional leading minus. The result must fit an int64, except that a
// positive number up to 2^64-1 is kept as its two's complement bit pattern
// when wrap is set (an unsigned 64-bit constant).
func parseNumber(s string, wrap bool) (int64, error) {
	digits, neg := strings.CutPrefix(s, "-")
	u, err := parseMagnitude(digits)
	if err != nil {
		return 0, err
	}
	switch {
	case neg && u > 1<<63:
		return 0, fmt.Errorf("number %q: out of range", s)
	case neg:
		return int64(-u), nil // two's complement; 1<<63 gives MinInt64
	case !wrap && u > math.MaxInt64:
		return 0, fmt.Errorf("number %q: out of range", s)
	}
	return int64(u), nil
}

// parseMagnitude parses an unsigned decimal or 0x-prefixed hexadecimal
// number. Octal-looking numbers with a leading 0 are refused, since the
// assembler would read them as octal.
func parseMagnitude(s string) (uint64, error) {
	base := 10
	digits := s
	if r, ok := strings.CutPrefix(s, "0x"); ok {
		base, digits = 16, r
	} else if r, ok := strings.CutPrefix(s, "0X"); ok {
		base, digits = 16, r
	} else if len(s) > 1 && s[0] == '0' {
		return 0, fmt.Errorf("number %q: leading zero (octal) is not supported", s)
	}
	if digits == "" {
		return 0, fmt.Errorf("number %q: no digits", s)
	}
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		ok := c >= '0' && c <= '9' || base == 16 && (c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F')
		if !ok {
			return 0, fmt.Errorf("invalid number %q", s)
		}
	}
	u, err := strconv.ParseUint(digits, base, 64)
	if err != nil {
		return 0, fmt.Errorf("number %q: out of range", s)
	}
	return u, nil
}
