package target

import (
	"debug/elf"
	"errors"
	"fmt"

	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
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
// location: argN of a USDT probe is that site's argument spec, argN of a
// uprobe the SysV x86-64 integer argument, retval RAX at a return probe.
func compile(a config.Attribute, p config.Probe, loc location, r role) (Fetch, error) {
	e := a.Expr
	f := Fetch{Key: a.Key, Text: e.Text, Base: BaseRegister}
	var own []int64 // dereferences that read the argument itself
	switch e.Root {
	case fetch.RootRegister:
		f.Register = e.Register
	case fetch.RootRetval:
		if !p.Returns() {
			return Fetch{}, fmt.Errorf("%q: retval needs a uretprobe: or ret: exit", e.Text)
		}
		f.Register = regs.SysVReturn // also Go's first result
	case fetch.RootArg:
		isGo := loc.file != nil && loc.file.isGo
		switch {
		case p.Kind == config.KindUSDT:
			var err error
			if own, err = usdtArg(&f, e.Arg, loc); err != nil {
				return Fetch{}, fmt.Errorf("%q: %w", e.Text, err)
			}
		case p.Returns():
			return Fetch{}, fmt.Errorf("%q: arguments are gone when a function returns", e.Text)
		case isGo && e.Arg < len(regs.GoIntArgs):
			f.Register = regs.GoIntArgs[e.Arg]
			if e.Type.Kind == fetch.KindGoString {
				if e.Arg+1 >= len(regs.GoIntArgs) {
					return Fetch{}, fmt.Errorf("%q: a Go string in arg%d would have its length on the stack", e.Text, e.Arg)
				}
				f.LenRegister = regs.GoIntArgs[e.Arg+1]
			}
		case isGo:
			return Fetch{}, fmt.Errorf("%q: Go passes %d integer arguments in registers; arg%d is on the stack", e.Text, len(regs.GoIntArgs), e.Arg)
		case e.Arg < len(regs.SysVIntArgs):
			f.Register = regs.SysVIntArgs[e.Arg]
			if e.Type.Kind == fetch.KindGoString && e.Arg+1 < len(regs.SysVIntArgs) {
				f.LenRegister = regs.SysVIntArgs[e.Arg+1]
			}
		case loc.AtEntry:
			// At the first instruction, 0(%rsp) is the return address and
			// stack argument 6 is at 8(%rsp).
			f.Register = regs.RSP
			own = []int64{int64(8 * (e.Arg - len(regs.SysVIntArgs) + 1))}
		default:
			return Fetch{}, fmt.Errorf("%q: stack argument arg%d is only known at the function's first instruction", e.Text, e.Arg)
		}
	default:
		return Fetch{}, fmt.Errorf("%q: unknown expression root", e.Text)
	}
	f.Derefs = append(own, e.Derefs...)
	if len(f.Derefs) > bpfobj.MaxDerefs {
		return Fetch{}, fmt.Errorf("%q: %d dereferences here, at most %d", e.Text, len(f.Derefs), bpfobj.MaxDerefs)
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
		f.Store, f.MaxLen = StoreString, typ.MaxLen
		f.LastIsAddress = len(e.Derefs) > 0
	case fetch.KindGoString:
		f.Store, f.MaxLen = StoreGoString, typ.MaxLen
		f.LastIsAddress = len(e.Derefs) > 0
		if len(f.Derefs) == 0 && f.LenRegister == regs.None {
			return Fetch{}, fmt.Errorf("%q: a gostring needs its length: use argN (pointer and length in two registers) or +OFF(EXPR):gostring (a string header in memory)", e.Text)
		}
	case fetch.KindBytes:
		f.Store, f.MaxLen = StoreBytes, typ.MaxLen
		f.LastIsAddress = len(e.Derefs) > 0
	default:
		f.Store = StoreInt
		f.ReadSize = typ.Size
		if fromArg && len(own) > 0 {
			f.ReadSize = f.Value.ArgSize
		}
	}
	if int(f.MaxLen) > bpfobj.StringMax {
		return Fetch{}, fmt.Errorf("%q: %s is longer than the %d-byte capture limit", e.Text, typ, bpfobj.StringMax)
	}
	return f, nil
}

// usdtArg points f at argument n of a USDT location and returns the
// dereference that reads an argument kept in memory.
func usdtArg(f *Fetch, n int, loc location) ([]int64, error) {
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
		f.Base, f.Register, f.Disp = BaseConstant, regs.None, op.Value
		return nil, nil
	case usdt.OperandMemory:
		disp := op.Disp
		if op.Symbol != "" {
			symAddr, err := loc.file.symbolAddress(op.Symbol)
			if err != nil {
				return nil, fmt.Errorf("site at %#x: arg%d (%q): %w", l.Address, n, arg.Text, err)
			}
			switch {
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
			f.Base, f.Register = BaseConstant, regs.None
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
