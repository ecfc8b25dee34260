package planner

import (
	"debug/elf"
	"errors"
	"fmt"
	"go/version"
	"strings"

	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
	"github.com/otel-uprobe/uprobereceiver/internal/usdt"
)

// role says at which end of a span a fetch runs.
type role uint8

const (
	atEntry role = iota
	atExit
)

// u64 is the type of untyped values that are not USDT arguments.
var u64 = fetch.Type{Kind: fetch.KindUnsigned, Size: 8}

// compile turns one fetch expression into the engine's terms for one
// location, in the registers of the location's file's architecture: argN of
// a USDT probe is that site's argument spec, argN of a uprobe the integer
// argument of the C calling convention (SysV x86-64, AAPCS64) or of Go's
// register ABI, retval the register of the return value at a return probe,
// %REG a register of the file's architecture.
func compile(a config.Attribute, p config.ProbeRef, loc location, r role) (plan.Fetch, error) {
	e := a.Expr
	f := plan.Fetch{Key: a.Key, Text: e.Text, Base: plan.BaseRegister}
	arch := regs.ArchAMD64
	if loc.file != nil {
		arch = loc.file.arch
	}
	var own []int64 // dereferences that read the argument itself
	switch e.Root {
	case fetch.RootRegister:
		reg, ok := registerOn(e.Register, arch)
		if !ok {
			return plan.Fetch{}, fmt.Errorf("%q: %%%s is %s register, and the file is %s (registers: %s)",
				e.Text, e.Register, archArticle(e.Register.Arch()), archName(arch), registerList(arch))
		}
		f.Register = reg
	case fetch.RootRetval:
		if !p.Returns() {
			return plan.Fetch{}, fmt.Errorf("%q: retval needs a uretprobe: or ret: exit", e.Text)
		}
		if loc.file != nil && loc.file.isGo {
			if err := goRegisterABI(loc.file); err != nil {
				return plan.Fetch{}, fmt.Errorf("%q: %w", e.Text, err)
			}
		}
		f.Register = arch.CReturn() // also Go's first result: rax, x0 (R0)
		if loc.file != nil && loc.file.isGo && e.Type.Kind == fetch.KindGoString {
			// A Go function's string (or []byte) result: its pointer
			// and length are its first two result registers, the first
			// two of Go's integer argument registers.
			f.LenRegister = arch.GoIntArgs()[1]
		}
	case fetch.RootArg:
		isGo := loc.file != nil && loc.file.isGo
		goArgs, cArgs := arch.GoIntArgs(), arch.CIntArgs()
		switch {
		case p.Kind == config.KindUSDT:
			var err error
			if own, err = usdtArg(&f, e.Arg, loc); err != nil {
				return plan.Fetch{}, fmt.Errorf("%q: %w", e.Text, err)
			}
		case p.Returns():
			return plan.Fetch{}, fmt.Errorf("%q: arguments are gone when a function returns", e.Text)
		case isGo && e.Arg < len(goArgs):
			if err := goRegisterABI(loc.file); err != nil {
				return plan.Fetch{}, fmt.Errorf("%q: %w", e.Text, err)
			}
			f.Register = goArgs[e.Arg]
			if e.Type.Kind == fetch.KindGoString {
				if e.Arg+1 >= len(goArgs) {
					return plan.Fetch{}, fmt.Errorf("%q: a Go string in arg%d would have its length on the stack", e.Text, e.Arg)
				}
				f.LenRegister = goArgs[e.Arg+1]
			}
		case isGo:
			return plan.Fetch{}, fmt.Errorf("%q: Go passes %d integer arguments in registers on %s; arg%d is on the stack", e.Text, len(goArgs), archName(arch), e.Arg)
		case e.Arg < len(cArgs):
			f.Register = cArgs[e.Arg]
			if e.Type.Kind == fetch.KindGoString && e.Arg+1 < len(cArgs) {
				f.LenRegister = cArgs[e.Arg+1]
			}
		case loc.AtEntry:
			// At the first instruction the stack arguments are above the
			// stack pointer: on x86-64 past the return address (stack
			// argument 6 at 8(%rsp)), on arm64 from [sp] on (argument 8).
			f.Register = arch.StackPointer()
			own = []int64{arch.CStackArgsOffset() + int64(8*(e.Arg-len(cArgs)))}
		default:
			return plan.Fetch{}, fmt.Errorf("%q: stack argument arg%d is only known at the function's first instruction", e.Text, e.Arg)
		}
	default:
		return plan.Fetch{}, fmt.Errorf("%q: unknown expression root", e.Text)
	}
	f.Derefs = append(own, e.Derefs...)
	if len(f.Derefs) > bpfobj.MaxDerefs {
		return plan.Fetch{}, fmt.Errorf("%q: %d dereferences here, at most %d", e.Text, len(f.Derefs), bpfobj.MaxDerefs)
	}

	// The value of argN itself: with no dereference of its own in the
	// expression, a USDT argument keeps its note's size and sign.
	fromArg := e.Root == fetch.RootArg && p.Kind == config.KindUSDT && len(e.Derefs) == 0
	typ := e.Type
	if !e.Typed {
		typ = u64
		if fromArg {
			typ = fetch.Type{Kind: fetch.KindUnsigned, Size: f.Value.ArgSize}
			if f.Value.ArgSigned {
				typ.Kind = fetch.KindSigned
			}
		}
	}
	f.Value.Type = typ
	f.Value.FromArg = fromArg
	if !fromArg {
		f.Value.ArgSize, f.Value.ArgSigned, f.Value.Shift = 0, false, 0
	}

	switch typ.Kind {
	case fetch.KindString:
		f.Store, f.MaxLen = plan.StoreString, typ.MaxLen
		f.LastIsAddress = len(e.Derefs) > 0
	case fetch.KindGoString:
		f.Store, f.MaxLen = plan.StoreGoString, typ.MaxLen
		f.LastIsAddress = len(e.Derefs) > 0
		if len(f.Derefs) == 0 && f.LenRegister == regs.None {
			return plan.Fetch{}, fmt.Errorf("%q: a gostring needs its length: use argN (pointer and length in two registers), retval of a Go function, or +OFF(EXPR):gostring (a string header in memory)", e.Text)
		}
	case fetch.KindBytes:
		f.Store, f.MaxLen = plan.StoreBytes, typ.MaxLen
		f.LastIsAddress = len(e.Derefs) > 0
	default:
		f.Store = plan.StoreInt
		f.ReadSize = typ.Size
		if fromArg && len(own) > 0 {
			f.ReadSize = f.Value.ArgSize
		}
	}
	if int(f.MaxLen) > bpfobj.StringMax {
		return plan.Fetch{}, fmt.Errorf("%q: %s is longer than the %d-byte capture limit", e.Text, typ, bpfobj.StringMax)
	}
	return f, nil
}

// usdtArg points f at argument n of a USDT location and returns the
// dereference that reads an argument kept in memory.
func usdtArg(f *plan.Fetch, n int, loc location) ([]int64, error) {
	l := loc.USDT
	if l == nil {
		return nil, errors.New("not a USDT location")
	}
	if l.ArgsErr != nil {
		return nil, fmt.Errorf("site at %#x: argument specs %q: %w", l.Address, l.ArgsText, l.ArgsErr)
	}
	if n >= len(l.Args) {
		return nil, fmt.Errorf("site at %#x has %d arguments (%q); arg%d does not exist", l.Address, len(l.Args), l.ArgsText, n)
	}
	arg := l.Args[n]
	if arg.Float {
		return nil, fmt.Errorf("site at %#x: arg%d (%q) is a floating-point value, which cannot be fetched", l.Address, n, arg.Text)
	}
	f.Value.ArgSize, f.Value.ArgSigned = arg.Size, arg.Signed
	op := arg.Operand
	switch op.Kind {
	case usdt.OperandRegister:
		f.Register = op.Register.Reg
		f.Value.Shift = op.Register.Shift
		if op.Register.Size < arg.Size {
			f.Value.ArgSize = op.Register.Size
		}
		return nil, nil
	case usdt.OperandConstant:
		f.Base, f.Register, f.Disp = plan.BaseConstant, regs.None, op.Value
		return nil, nil
	case usdt.OperandMemory:
		disp := op.Disp
		if op.Symbol != "" {
			symAddr, err := loc.file.symbolAddress(op.Symbol)
			if err != nil {
				if strings.HasPrefix(op.Symbol, ".L") {
					err = fmt.Errorf("%w: it is an assembler-local label (a gcc section anchor) that only the object file knew, so the variable's address cannot be had; building the program with -fno-section-anchors makes gcc name the variable itself", err)
				}
				return nil, fmt.Errorf("site at %#x: arg%d (%q): %w", l.Address, n, arg.Text, err)
			}
			switch {
			case op.SymbolLow12:
				// arm64 "[x0, #:lo12:sym]": the base register holds the
				// symbol's 4 KiB page (adrp), and a load bias is a
				// multiple of the page size, so the low 12 bits of the
				// link-time address are those at run time.
				disp = int64((symAddr + uint64(op.Disp)) & 0xfff)
			case op.Base == regs.RIP:
				// At the probe, %rip holds the runtime address of the
				// instruction the uprobe is on (which may be the nop5 after
				// the note's site), so the symbol is at
				// rip + (symbol - probed address) whatever the load bias.
				disp += int64(symAddr - loc.Address)
			case loc.file.elf.Type == elf.ET_EXEC:
				// A non-PIE executable runs at its link-time addresses.
				disp += int64(symAddr)
			default:
				return nil, fmt.Errorf("site at %#x: arg%d (%q): an absolute symbol address in a position-independent file needs its load address, which the engine does not know", l.Address, n, arg.Text)
			}
		}
		if op.Base == regs.None {
			f.Base, f.Register = plan.BaseConstant, regs.None
		} else {
			f.Register = op.Base
		}
		if op.Index != regs.None {
			f.Index, f.Scale = op.Index, op.Scale
		}
		return []int64{disp}, nil
	}
	return nil, fmt.Errorf("site at %#x: arg%d (%q): unknown operand", l.Address, n, arg.Text)
}

// registerOn returns register r of a fetch expression as a register of
// architecture a: r itself when it is one of a's, the stack pointer for the
// stack pointer of the other architecture (%sp names it on both); false
// for a register a does not have.
func registerOn(r regs.Register, a regs.Arch) (regs.Register, bool) {
	switch {
	case r.Arch() == a:
		return r, true
	case r == regs.RSP && a == regs.ArchARM64:
		return regs.SP, true
	case r == regs.SP && a == regs.ArchAMD64:
		return regs.RSP, true
	}
	return regs.None, false
}

// archName names an architecture in messages: "x86-64" or "arm64".
func archName(a regs.Arch) string {
	if a == regs.ArchAMD64 {
		return "x86-64"
	}
	return a.String()
}

// archArticle says "an x86-64" or "an arm64".
func archArticle(a regs.Arch) string {
	return "an " + archName(a)
}

// registerList lists the register names fetch expressions take for a.
func registerList(a regs.Arch) string {
	if a == regs.ArchARM64 {
		return "%x0…%x30, %fp, %lr, %sp, %pc"
	}
	return "%ax, %bx, %cx, %dx, %si, %di, %bp, %sp, %ip, %r8…%r15 and their 64-bit AT&T names"
}

// goRegisterABI says why Go file fl does not pass its functions'
// arguments and results in registers, or nil when it does or may: Go's
// register ABI (ABIInternal) came with Go 1.17 on x86-64 and Go 1.18 on
// arm64; before, they are on the stack and the registers hold something
// else. The version is the build information's; without it, the function
// table's layout tells Go 1.2-1.15 (go1.2: the stack) and Go 1.16-1.17
// (go1.16: the stack on arm64, either on x86-64).
func goRegisterABI(fl *file) error {
	since, arch := "go1.17", "x86-64"
	if fl.arch == regs.ArchARM64 {
		since, arch = "go1.18", "arm64"
	}
	old := false
	switch {
	case version.IsValid(fl.goVersion):
		old = version.Compare(fl.goVersion, since) < 0
	case fl.goVersion != "":
		// A development build ("devel go1.27-…"): newer than any release.
	case fl.goPclntab == "go1.2":
		old = true
	case fl.goPclntab == "go1.16":
		old = fl.arch == regs.ArchARM64
	}
	if !old {
		return nil
	}
	built := fl.goVersion
	if built == "" {
		built = "a Go whose function table has the " + fl.goPclntab + " layout"
	}
	return fmt.Errorf("%s passes a Go function's arguments on the stack: arguments by register need Go %s or later on %s", built, strings.TrimPrefix(since, "go"), arch)
}
