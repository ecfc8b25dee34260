package usdt

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

// ErrUnsupportedVectorRegister is wrapped by the error of ParseArgFor for an
// arm64 argument in a floating-point or SIMD register (v0, q0, d0, s0, h0,
// b0, …), which pt_regs does not hold.
var ErrUnsupportedVectorRegister = errors.New("floating-point and SIMD registers are not supported")

// ParseArgsFor parses a whole argument list of a note of a file of
// architecture a (see regs.ArchOf): for ArchAMD64 it is [ParseArgs]; for
// ArchARM64 the specs are separated by spaces outside brackets, since an
// arm64 memory operand contains one ("-8@[sp, 16]"). An empty (or
// all-space) list gives no args and no error. Other architectures give an
// error wrapping ErrUnsupportedArch.
func ParseArgsFor(a regs.Arch, text string) ([]Arg, error) {
	switch a {
	case regs.ArchAMD64:
		return ParseArgs(text)
	case regs.ArchARM64:
	default:
		return nil, fmt.Errorf("parse arguments %q: %w: %v", text, ErrUnsupportedArch, a)
	}
	fields, err := splitARM64Args(text)
	if err != nil {
		return nil, err
	}
	if len(fields) == 0 {
		return nil, nil
	}
	args := make([]Arg, 0, len(fields))
	for _, f := range fields {
		arg, err := ParseArgFor(a, f)
		if err != nil {
			return nil, err
		}
		args = append(args, arg)
	}
	return args, nil
}

// ParseArgFor parses one argument spec "[-]SIZE[f]@OPERAND" of a file of
// architecture a: for ArchAMD64 it is [ParseArg]; for ArchARM64 OPERAND is
// in the GNU assembler's arm64 syntax, as gcc and clang write it through
// <sys/sdt.h>:
//
//	-4@x0, 4@w1             a register (w1 is the low 4 bytes of x1)
//	8@[sp, 16], -4@[x1, -8] memory at BASE + DISP
//	8@[x2]                  memory at BASE
//	-4@5, 8@-1              a constant
//	1@[x4, x3]              memory at BASE + INDEX
//	-8@[x7, #:lo12:counter] memory at BASE + the low 12 bits of counter's address
//
// It also accepts what the assembler accepts beyond that: a '#' before a
// number, hexadecimal numbers, the register aliases fp (x29), lr (x30), ip0
// and ip1 (x16, x17), the zero registers xzr and wzr as the constant 0, and
// memory with an index register, [BASE, Xm] and [BASE, Xm, lsl #K] (gcc
// writes [x4, x3] for a byte array element), and the low 12 bits of a
// symbol's address after an adrp, [BASE, #:lo12:SYM] (gcc writes
// "-8@[x7, #:lo12:counter]" for a global; see Operand.SymbolLow12). It
// refuses extended 32-bit index registers ([x2, w0, sxtw 3], with an
// overridden STAP_SDT_ARG_CONSTRAINT), pre-indexed operands, relocations
// other than :lo12:, and floating-point and SIMD registers. Its errors
// name the spec.
func ParseArgFor(a regs.Arch, text string) (Arg, error) {
	switch a {
	case regs.ArchAMD64:
		return ParseArg(text)
	case regs.ArchARM64:
	default:
		return Arg{}, fmt.Errorf("argument %q: %w: %v", text, ErrUnsupportedArch, a)
	}
	arg, err := parseSizeThen(text, parseARM64Operand)
	if err != nil {
		return Arg{}, fmt.Errorf("argument %q: %w", text, err)
	}
	return arg, nil
}

// splitARM64Args splits an arm64 argument list at the spaces outside
// brackets.
func splitARM64Args(text string) ([]string, error) {
	var (
		fields []string
		depth  int
		start  = -1
	)
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case c == '[':
			depth++
		case c == ']':
			depth--
			if depth < 0 {
				return nil, fmt.Errorf("parse arguments %q: unbalanced brackets", text)
			}
		case isSpace(c) && depth == 0:
			if start >= 0 {
				fields = append(fields, text[start:i])
				start = -1
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("parse arguments %q: unbalanced brackets", text)
	}
	if start >= 0 {
		fields = append(fields, text[start:])
	}
	return fields, nil
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

func parseARM64Operand(s string) (Operand, error) {
	switch {
	case s == "":
		return Operand{}, errors.New("empty operand")
	case s[0] == '[':
		return parseARM64Memory(s)
	case s[0] == '#' || s[0] == '-' || s[0] >= '0' && s[0] <= '9':
		v, err := parseNumber(strings.TrimPrefix(s, "#"), true)
		if err != nil {
			return Operand{}, fmt.Errorf("constant %q: %w", s, err)
		}
		return Operand{Kind: OperandConstant, Value: v}, nil
	}
	switch strings.ToLower(s) {
	case "xzr", "wzr":
		// The zero register reads as 0; pt_regs has no slot for it.
		return Operand{Kind: OperandConstant, Value: 0}, nil
	}
	r, err := parseARM64Register(s)
	if err != nil {
		return Operand{}, err
	}
	return Operand{Kind: OperandRegister, Register: r}, nil
}

func parseARM64Register(s string) (regs.Operand, error) {
	if r, ok := regs.ArchARM64.ParseOperand(s); ok {
		return r, nil
	}
	if isVectorRegister(s) {
		return regs.Operand{}, fmt.Errorf("register %q: %w", s, ErrUnsupportedVectorRegister)
	}
	return regs.Operand{}, fmt.Errorf("unknown register %q", s)
}

// isVectorRegister reports whether s names an arm64 floating-point or SIMD
// register: v, q, d, s, h or b followed by 0…31.
func isVectorRegister(s string) bool {
	if len(s) < 2 || len(s) > 3 || !strings.ContainsRune("vqdshbVQDSHB", rune(s[0])) {
		return false
	}
	n, err := strconv.Atoi(s[1:])
	return err == nil && n >= 0 && n <= 31 && strconv.Itoa(n) == s[1:]
}

// parseARM64AddressRegister parses the base or index register of a memory
// operand, which must be a whole 64-bit register (sp only as a base).
func parseARM64AddressRegister(s, what string) (regs.Register, error) {
	switch strings.ToLower(s) {
	case "xzr", "wzr":
		return regs.None, fmt.Errorf("%s register %q: the zero register is not supported", what, s)
	}
	r, err := parseARM64Register(s)
	if err != nil {
		return regs.None, err
	}
	if r.Size != 8 {
		if what == "index" {
			return regs.None, fmt.Errorf("index register %q: extended 32-bit index registers are not supported", s)
		}
		return regs.None, fmt.Errorf("%s register %q is not a 64-bit register", what, s)
	}
	if what == "index" && r.Reg == regs.SP {
		return regs.None, fmt.Errorf("index register %q: sp cannot be an index register", s)
	}
	return r.Reg, nil
}

func parseARM64Memory(s string) (Operand, error) {
	op := Operand{Kind: OperandMemory}
	if strings.HasSuffix(s, "]!") {
		return op, fmt.Errorf("memory operand %q: pre-indexed operands are not supported", s)
	}
	if !strings.HasSuffix(s, "]") {
		return op, fmt.Errorf("memory operand %q: junk after the closing bracket", s)
	}
	inner := s[1 : len(s)-1]
	if strings.ContainsAny(inner, "[]") {
		return op, fmt.Errorf("memory operand %q: unbalanced brackets", s)
	}
	parts := strings.Split(inner, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	if len(parts) > 3 {
		return op, fmt.Errorf("memory operand %q: more than base, index and shift", s)
	}
	if parts[0] == "" {
		return op, fmt.Errorf("memory operand %q: no base register", s)
	}
	var err error
	if op.Base, err = parseARM64AddressRegister(parts[0], "base"); err != nil {
		return op, fmt.Errorf("memory operand %q: %w", s, err)
	}
	if len(parts) == 1 {
		return op, nil
	}
	second := parts[1]
	if second == "" {
		return op, fmt.Errorf("memory operand %q: empty offset", s)
	}
	if lo12, ok := strings.CutPrefix(strings.TrimPrefix(second, "#"), ":"); ok {
		if len(parts) == 3 {
			return op, fmt.Errorf("memory operand %q: junk after the offset", s)
		}
		spec, expr, ok := strings.Cut(lo12, ":")
		if !ok || strings.ToLower(spec) != "lo12" {
			return op, fmt.Errorf("memory operand %q: relocation %q is not supported: want :lo12:", s, second)
		}
		if op.Symbol, op.Disp, err = parseDisplacement(expr); err != nil {
			return op, fmt.Errorf("memory operand %q: offset: %w", s, err)
		}
		if op.Symbol == "" {
			return op, fmt.Errorf("memory operand %q: :lo12: without a symbol", s)
		}
		op.SymbolLow12 = true
		return op, nil
	}
	if c := second[0]; c == '#' || c == '-' || c >= '0' && c <= '9' {
		if len(parts) == 3 {
			return op, fmt.Errorf("memory operand %q: junk after the offset", s)
		}
		if op.Disp, err = parseNumber(strings.TrimPrefix(second, "#"), false); err != nil {
			return op, fmt.Errorf("memory operand %q: offset: %w", s, err)
		}
		return op, nil
	}
	if op.Index, err = parseARM64AddressRegister(second, "index"); err != nil {
		return op, fmt.Errorf("memory operand %q: %w", s, err)
	}
	op.Scale = 1
	if len(parts) == 3 {
		if op.Scale, err = parseARM64Shift(parts[2]); err != nil {
			return op, fmt.Errorf("memory operand %q: %w", s, err)
		}
	}
	return op, nil
}

// parseARM64Shift parses the shift of an index register, "lsl #K" or
// "lsl K" (or sxtx, the same for a 64-bit index) with K 0…3, into a scale.
func parseARM64Shift(s string) (uint8, error) {
	kind, amount, ok := strings.Cut(s, " ")
	amount = strings.TrimSpace(amount)
	switch k := strings.ToLower(kind); {
	case k == "uxtw" || k == "sxtw":
		return 0, fmt.Errorf("shift %q: extended 32-bit index registers are not supported", s)
	case k != "lsl" && k != "sxtx" && k != "uxtx":
		return 0, fmt.Errorf("shift %q: want lsl", s)
	case !ok && k == "lsl":
		return 0, fmt.Errorf("shift %q: no amount", s)
	}
	if amount == "" {
		return 1, nil // sxtx without an amount
	}
	switch strings.TrimPrefix(amount, "#") {
	case "0":
		return 1, nil
	case "1":
		return 2, nil
	case "2":
		return 4, nil
	case "3":
		return 8, nil
	}
	return 0, fmt.Errorf("shift %q: amount must be 0, 1, 2 or 3", s)
}

// Format formats o in the assembler syntax of architecture a, canonically:
// for ArchAMD64 in AT&T syntax ("%eax", "-8(%rbp,%rax,8)", "$-1"); for
// ArchARM64 the way gcc writes it ("x0", "w1", "[sp, 16]", "[x2]",
// "[x1, x2, lsl 3]", "[x7, #:lo12:counter]", "-1"). Parsing the result with ParseArgFor(a)
// gives o back.
func (o Operand) Format(a regs.Arch) string {
	if a != regs.ArchARM64 {
		return o.formatATT()
	}
	switch o.Kind {
	case OperandRegister:
		return arm64OperandName(o.Register)
	case OperandConstant:
		return strconv.FormatInt(o.Value, 10)
	case OperandMemory:
		var b strings.Builder
		b.WriteString("[" + o.Base.String())
		if o.SymbolLow12 {
			b.WriteString(", #:lo12:" + o.Symbol)
			if o.Disp > 0 {
				b.WriteString("+")
			}
			if o.Disp != 0 {
				b.WriteString(strconv.FormatInt(o.Disp, 10))
			}
		} else if o.Index != regs.None {
			b.WriteString(", " + o.Index.String())
			switch o.Scale {
			case 2:
				b.WriteString(", lsl 1")
			case 4:
				b.WriteString(", lsl 2")
			case 8:
				b.WriteString(", lsl 3")
			}
		} else if o.Disp != 0 {
			b.WriteString(", " + strconv.FormatInt(o.Disp, 10))
		}
		b.WriteByte(']')
		return b.String()
	}
	return fmt.Sprintf("Operand(kind %d)", uint8(o.Kind))
}

// arm64OperandName names an arm64 register part: "x3", "w3", "sp", "wsp".
func arm64OperandName(op regs.Operand) string {
	n := op.Reg.String()
	if op.Size == 4 {
		if op.Reg == regs.SP {
			return "wsp"
		}
		return "w" + strings.TrimPrefix(n, "x")
	}
	return n
}

// arch returns the architecture of o's registers: ArchARM64 when one is an
// arm64 register, otherwise ArchAMD64 (also for constants, which name
// none).
func (o Operand) arch() regs.Arch {
	for _, r := range []regs.Register{o.Register.Reg, o.Base, o.Index} {
		if r.Arch() == regs.ArchARM64 {
			return regs.ArchARM64
		}
	}
	return regs.ArchAMD64
}
