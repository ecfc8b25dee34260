package debuginfo

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// LocKind says where one piece of a variable is.
type LocKind uint8

// The kinds of a location piece.
const (
	// LocUndefined is a piece the compiler did not describe: optimized out.
	LocUndefined LocKind = iota
	// LocRegister is a value held in a register (DW_OP_regN).
	LocRegister
	// LocMemory is a value in memory at the address Addr.
	LocMemory
	// LocValue is a value that is not in memory: Addr computes the value
	// itself (DW_OP_stack_value, DW_OP_implicit_value, DW_OP_entry_value).
	LocValue
)

// String returns "undefined", "register", "memory" or "value".
func (k LocKind) String() string {
	switch k {
	case LocUndefined:
		return "undefined"
	case LocRegister:
		return "register"
	case LocMemory:
		return "memory"
	case LocValue:
		return "value"
	}
	return "invalid"
}

// Addr is an address or value the engine can compute: a DWARF register's
// value (Reg >= 0) or zero (Reg < 0, a constant), then one 8-byte read at
// v+d for each of Derefs, then plus Off.
type Addr struct {
	// Reg is the DWARF register number, or -1 for a constant.
	Reg int
	// Derefs are the offsets of reads, in order, before Off is added.
	Derefs []int64
	// Off is added last.
	Off int64
	// Absolute says the value came from DW_OP_addr or DW_OP_addrx: a
	// link-time virtual address, which a position-independent file only
	// has after adding its load bias.
	Absolute bool
}

// String returns the address in a short form for messages, such as
// "r7 deref(+8) +16".
func (a Addr) String() string {
	var b strings.Builder
	if a.Reg < 0 {
		b.WriteString("0")
	} else {
		fmt.Fprintf(&b, "r%d", a.Reg)
	}
	for _, d := range a.Derefs {
		fmt.Fprintf(&b, " deref(%+d)", d)
	}
	if a.Off != 0 || a.Reg < 0 {
		fmt.Fprintf(&b, " %+d", a.Off)
	}
	if a.Absolute {
		b.WriteString(" (absolute)")
	}
	return b.String()
}

// Piece is one part of a variable's location.
type Piece struct {
	Kind LocKind
	// Size is the size of the piece in bytes, 0 for the whole value.
	Size uint64
	// Reg is the DWARF register of a LocRegister piece.
	Reg int
	// Addr is the address of a LocMemory piece or the value of a LocValue
	// piece.
	Addr Addr
}

// Loc is a variable's location at one pc: one piece without a size for a
// whole value, or the pieces of DW_OP_piece in order.
type Loc struct {
	Pieces []Piece
}

// exprEnv is what evaluating an expression may need at its pc.
type exprEnv struct {
	order    binary.ByteOrder
	addrSize int
	// frameBase evaluates DW_AT_frame_base at the pc, for DW_OP_fbreg.
	frameBase func() (Addr, error)
	// cfa is the CFA rule at the pc, for DW_OP_call_frame_cfa.
	cfa func() (Addr, error)
	// debugAddr resolves DW_OP_addrx.
	debugAddr func(idx uint64) (uint64, error)
	// atEntry says the pc is the function's first instruction, where
	// DW_OP_entry_value(DW_OP_regN) is the register itself.
	atEntry bool
}

// maxExprStack bounds the evaluation stack of a DWARF expression.
const maxExprStack = 64

// evalExpr reduces a DWARF location expression to a Loc, or fails with
// ErrTooComplex (naming the operation) or ErrOptimizedOut (empty).
func evalExpr(expr []byte, env *exprEnv) (Loc, error) {
	if len(expr) == 0 {
		return Loc{}, ErrOptimizedOut
	}
	r := reader{b: expr, order: env.order}
	var (
		stack  []Addr
		loc    Loc
		cur    = Piece{Kind: LocUndefined}
		closed bool // the current piece is a register or value: only a piece op may follow
	)
	push := func(a Addr) error {
		if len(stack) >= maxExprStack {
			return fmt.Errorf("expression stack over %d entries: %w", maxExprStack, ErrTooComplex)
		}
		stack = append(stack, a)
		return nil
	}
	pop := func(op string) (Addr, error) {
		if len(stack) == 0 {
			return Addr{}, fmt.Errorf("%s on an empty stack: %w", op, ErrMalformed)
		}
		a := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		return a, nil
	}
	constant := func(v int64) Addr { return Addr{Reg: -1, Off: v} }
	isConst := func(a Addr) bool { return a.Reg < 0 && len(a.Derefs) == 0 }
	finishPiece := func(size uint64) {
		if !closed {
			if len(stack) > 0 {
				cur = Piece{Kind: LocMemory, Addr: stack[len(stack)-1]}
			} else {
				cur = Piece{Kind: LocUndefined}
			}
		}
		cur.Size = size
		loc.Pieces = append(loc.Pieces, cur)
		stack, cur, closed = nil, Piece{}, false
	}

	for !r.eof() {
		opOff := r.off
		op := r.u8()
		if closed && op != opPiece && op != opBitPiece && op != opNop {
			return Loc{}, fmt.Errorf("%s after a register or value location: %w", opName(op), ErrTooComplex)
		}
		var err error
		switch {
		case op == opAddr:
			err = push(Addr{Reg: -1, Off: int64(r.addr(env.addrSize)), Absolute: true})
		case op == opAddrx || op == opGNUAddrIndex:
			idx := r.uleb()
			if env.debugAddr == nil {
				return Loc{}, fmt.Errorf("%s without .debug_addr: %w", opName(op), ErrMalformed)
			}
			v, e := env.debugAddr(idx)
			if e != nil {
				return Loc{}, e
			}
			err = push(Addr{Reg: -1, Off: int64(v), Absolute: true})
		case op == opConstx || op == opGNUConstIndex:
			idx := r.uleb()
			if env.debugAddr == nil {
				return Loc{}, fmt.Errorf("%s without .debug_addr: %w", opName(op), ErrMalformed)
			}
			v, e := env.debugAddr(idx)
			if e != nil {
				return Loc{}, e
			}
			err = push(constant(int64(v)))
		case op >= opLit0 && op <= opLit0+31:
			err = push(constant(int64(op - opLit0)))
		case op == opConst1u:
			err = push(constant(int64(r.u8())))
		case op == opConst1s:
			err = push(constant(int64(int8(r.u8()))))
		case op == opConst2u:
			err = push(constant(int64(r.u16())))
		case op == opConst2s:
			err = push(constant(int64(int16(r.u16()))))
		case op == opConst4u:
			err = push(constant(int64(r.u32())))
		case op == opConst4s:
			err = push(constant(int64(int32(r.u32()))))
		case op == opConst8u, op == opConst8s:
			err = push(constant(int64(r.u64())))
		case op == opConstu:
			err = push(constant(int64(r.uleb())))
		case op == opConsts:
			err = push(constant(r.sleb()))
		case op >= opReg0 && op <= opReg0+31:
			cur, closed = Piece{Kind: LocRegister, Reg: int(op - opReg0)}, true
		case op == opRegx:
			cur, closed = Piece{Kind: LocRegister, Reg: int(r.uleb())}, true
		case op >= opBreg0 && op <= opBreg0+31:
			err = push(Addr{Reg: int(op - opBreg0), Off: r.sleb()})
		case op == opBregx:
			reg := int(r.uleb())
			err = push(Addr{Reg: reg, Off: r.sleb()})
		case op == opFbreg:
			off := r.sleb()
			if env.frameBase == nil {
				return Loc{}, fmt.Errorf("DW_OP_fbreg with no DW_AT_frame_base: %w", ErrMalformed)
			}
			fb, e := env.frameBase()
			if e != nil {
				return Loc{}, fmt.Errorf("frame base: %w", e)
			}
			fb.Off += off
			err = push(fb)
		case op == opCallFrameCFA:
			if env.cfa == nil {
				return Loc{}, fmt.Errorf("DW_OP_call_frame_cfa with no CFI: %w", ErrTooComplex)
			}
			cfa, e := env.cfa()
			if e != nil {
				return Loc{}, fmt.Errorf("CFA: %w", e)
			}
			err = push(cfa)
		case op == opPlusUconst:
			u := r.uleb()
			a, e := pop("DW_OP_plus_uconst")
			if e != nil {
				return Loc{}, e
			}
			a.Off += int64(u)
			err = push(a)
		case op == opPlus || op == opMinus:
			b, e1 := pop(opName(op))
			a, e2 := pop(opName(op))
			if e1 != nil || e2 != nil {
				return Loc{}, fmt.Errorf("%s on a short stack: %w", opName(op), ErrMalformed)
			}
			switch {
			case isConst(b) && op == opPlus:
				a.Off += b.Off
				a.Absolute = a.Absolute || b.Absolute
			case isConst(b):
				a.Off -= b.Off
			case isConst(a) && op == opPlus:
				b.Off += a.Off
				b.Absolute = a.Absolute || b.Absolute
				a = b
			default:
				return Loc{}, fmt.Errorf("%s of two register values: %w", opName(op), ErrTooComplex)
			}
			err = push(a)
		case op == opDeref:
			a, e := pop("DW_OP_deref")
			if e != nil {
				return Loc{}, e
			}
			if a.Reg < 0 && len(a.Derefs) == 0 && !a.Absolute {
				return Loc{}, fmt.Errorf("DW_OP_deref of a constant: %w", ErrTooComplex)
			}
			a.Derefs = append(append([]int64(nil), a.Derefs...), a.Off)
			a.Off = 0
			err = push(a)
		case op == opDerefSize:
			n := r.u8()
			if int(n) != env.addrSize {
				return Loc{}, fmt.Errorf("DW_OP_deref_size %d: %w", n, ErrTooComplex)
			}
			a, e := pop("DW_OP_deref_size")
			if e != nil {
				return Loc{}, e
			}
			a.Derefs = append(append([]int64(nil), a.Derefs...), a.Off)
			a.Off = 0
			err = push(a)
		case op == opDup:
			a, e := pop("DW_OP_dup")
			if e != nil {
				return Loc{}, e
			}
			if err = push(a); err == nil {
				err = push(a)
			}
		case op == opDrop:
			_, err = pop("DW_OP_drop")
		case op == opOver || op == opPick:
			n := 1
			if op == opPick {
				n = int(r.u8())
			}
			if n >= len(stack) {
				return Loc{}, fmt.Errorf("%s %d on a stack of %d: %w", opName(op), n, len(stack), ErrMalformed)
			}
			err = push(stack[len(stack)-1-n])
		case op == opSwap:
			if len(stack) < 2 {
				return Loc{}, fmt.Errorf("DW_OP_swap on a short stack: %w", ErrMalformed)
			}
			n := len(stack)
			stack[n-1], stack[n-2] = stack[n-2], stack[n-1]
		case op == opRot:
			if len(stack) < 3 {
				return Loc{}, fmt.Errorf("DW_OP_rot on a short stack: %w", ErrMalformed)
			}
			n := len(stack)
			stack[n-1], stack[n-2], stack[n-3] = stack[n-2], stack[n-3], stack[n-1]
		case op == opNop:
		case op == opStackValue:
			a, e := pop("DW_OP_stack_value")
			if e != nil {
				return Loc{}, e
			}
			cur, closed = Piece{Kind: LocValue, Addr: a}, true
		case op == opImplicitValue:
			n := r.uleb()
			b := r.bytes(n)
			if r.err != nil {
				return Loc{}, r.err
			}
			if n > 8 {
				return Loc{}, fmt.Errorf("DW_OP_implicit_value of %d bytes: %w", n, ErrTooComplex)
			}
			var buf [8]byte
			copy(buf[:], b)
			v := env.order.Uint64(buf[:])
			if env.order == binary.BigEndian {
				v >>= 8 * (8 - n)
			}
			cur, closed = Piece{Kind: LocValue, Addr: constant(int64(v))}, true
		case op == opEntryValue || op == opGNUEntryValue:
			n := r.uleb()
			sub := r.bytes(n)
			if r.err != nil {
				return Loc{}, r.err
			}
			reg, ok := entryValueReg(sub)
			if !ok {
				return Loc{}, fmt.Errorf("DW_OP_entry_value of anything but DW_OP_regN: %w", ErrTooComplex)
			}
			if !env.atEntry {
				return Loc{}, fmt.Errorf("DW_OP_entry_value(%s): the value the register had at the function's entry, which is gone here: %w", "DW_OP_reg"+fmt.Sprint(reg), ErrOptimizedOut)
			}
			err = push(Addr{Reg: reg})
		case op == opPiece:
			size := r.uleb()
			if r.err != nil {
				return Loc{}, r.err
			}
			finishPiece(size)
			if len(loc.Pieces) > 64 {
				return Loc{}, fmt.Errorf("over 64 pieces: %w", ErrTooComplex)
			}
		case op == opBitPiece:
			bits := r.uleb()
			boff := r.uleb()
			if bits%8 != 0 || boff != 0 {
				return Loc{}, fmt.Errorf("DW_OP_bit_piece of %d bits at bit %d: %w", bits, boff, ErrTooComplex)
			}
			finishPiece(bits / 8)
		case op == opFormTLSAddress || op == opGNUPushTLSAddress:
			return Loc{}, fmt.Errorf("%s (a thread-local variable): %w", opName(op), ErrTooComplex)
		case op == opImplicitPointer || op == opGNUImplicitPointer:
			return Loc{}, fmt.Errorf("%s (a pointer optimized away; the value it pointed to lives elsewhere): %w", opName(op), ErrOptimizedOut)
		default:
			return Loc{}, fmt.Errorf("%s at byte %d: %w", opName(op), opOff, ErrTooComplex)
		}
		if err != nil {
			return Loc{}, err
		}
		if r.err != nil {
			return Loc{}, r.err
		}
	}
	if len(loc.Pieces) > 0 {
		if closed || len(stack) > 0 {
			return Loc{}, fmt.Errorf("operations after the last DW_OP_piece: %w", ErrMalformed)
		}
		return loc, nil
	}
	if !closed {
		if len(stack) == 0 {
			return Loc{}, fmt.Errorf("expression leaves nothing: %w", ErrMalformed)
		}
		cur = Piece{Kind: LocMemory, Addr: stack[len(stack)-1]}
	}
	return Loc{Pieces: []Piece{cur}}, nil
}

// entryValueReg recognizes the one DW_OP_entry_value operand the package
// supports: DW_OP_regN or DW_OP_regx N.
func entryValueReg(sub []byte) (int, bool) {
	switch {
	case len(sub) == 1 && sub[0] >= opReg0 && sub[0] <= opReg0+31:
		return int(sub[0] - opReg0), true
	case len(sub) >= 2 && sub[0] == opRegx:
		r := reader{b: sub[1:]}
		n := r.uleb()
		if r.err == nil && r.off == uint64(len(sub)-1) {
			return int(n), true
		}
	}
	return 0, false
}

// DWARF expression operations (DWARF 5 section 7.7.1, plus GNU ones).
const (
	opAddr               = 0x03
	opDeref              = 0x06
	opConst1u            = 0x08
	opConst1s            = 0x09
	opConst2u            = 0x0a
	opConst2s            = 0x0b
	opConst4u            = 0x0c
	opConst4s            = 0x0d
	opConst8u            = 0x0e
	opConst8s            = 0x0f
	opConstu             = 0x10
	opConsts             = 0x11
	opDup                = 0x12
	opDrop               = 0x13
	opOver               = 0x14
	opPick               = 0x15
	opSwap               = 0x16
	opRot                = 0x17
	opMinus              = 0x1c
	opPlus               = 0x22
	opPlusUconst         = 0x23
	opLit0               = 0x30
	opReg0               = 0x50
	opBreg0              = 0x70
	opRegx               = 0x90
	opFbreg              = 0x91
	opBregx              = 0x92
	opPiece              = 0x93
	opDerefSize          = 0x94
	opNop                = 0x96
	opFormTLSAddress     = 0x9b
	opCallFrameCFA       = 0x9c
	opBitPiece           = 0x9d
	opImplicitValue      = 0x9e
	opStackValue         = 0x9f
	opImplicitPointer    = 0xa0
	opAddrx              = 0xa1
	opConstx             = 0xa2
	opEntryValue         = 0xa3
	opGNUPushTLSAddress  = 0xe0
	opGNUImplicitPointer = 0xf2
	opGNUEntryValue      = 0xf3
	opGNUAddrIndex       = 0xfb
	opGNUConstIndex      = 0xfc
)

var opNames = map[byte]string{
	0x03: "DW_OP_addr", 0x06: "DW_OP_deref", 0x12: "DW_OP_dup", 0x13: "DW_OP_drop", 0x14: "DW_OP_over",
	0x15: "DW_OP_pick", 0x16: "DW_OP_swap", 0x17: "DW_OP_rot", 0x18: "DW_OP_xderef", 0x19: "DW_OP_abs",
	0x1a: "DW_OP_and", 0x1b: "DW_OP_div", 0x1c: "DW_OP_minus", 0x1d: "DW_OP_mod", 0x1e: "DW_OP_mul",
	0x1f: "DW_OP_neg", 0x20: "DW_OP_not", 0x21: "DW_OP_or", 0x22: "DW_OP_plus", 0x23: "DW_OP_plus_uconst",
	0x24: "DW_OP_shl", 0x25: "DW_OP_shr", 0x26: "DW_OP_shra", 0x27: "DW_OP_xor", 0x28: "DW_OP_bra",
	0x29: "DW_OP_eq", 0x2a: "DW_OP_ge", 0x2b: "DW_OP_gt", 0x2c: "DW_OP_le", 0x2d: "DW_OP_lt",
	0x2e: "DW_OP_ne", 0x2f: "DW_OP_skip", 0x90: "DW_OP_regx", 0x91: "DW_OP_fbreg", 0x92: "DW_OP_bregx",
	0x93: "DW_OP_piece", 0x94: "DW_OP_deref_size", 0x95: "DW_OP_xderef_size", 0x96: "DW_OP_nop",
	0x97: "DW_OP_push_object_address", 0x98: "DW_OP_call2", 0x99: "DW_OP_call4", 0x9a: "DW_OP_call_ref",
	0x9b: "DW_OP_form_tls_address", 0x9c: "DW_OP_call_frame_cfa", 0x9d: "DW_OP_bit_piece",
	0x9e: "DW_OP_implicit_value", 0x9f: "DW_OP_stack_value", 0xa0: "DW_OP_implicit_pointer",
	0xa1: "DW_OP_addrx", 0xa2: "DW_OP_constx", 0xa3: "DW_OP_entry_value", 0xa4: "DW_OP_const_type",
	0xa5: "DW_OP_regval_type", 0xa6: "DW_OP_deref_type", 0xa7: "DW_OP_xderef_type", 0xa8: "DW_OP_convert",
	0xa9: "DW_OP_reinterpret", 0xe0: "DW_OP_GNU_push_tls_address", 0xf0: "DW_OP_GNU_uninit",
	0xf1: "DW_OP_GNU_encoded_addr", 0xf2: "DW_OP_GNU_implicit_pointer", 0xf3: "DW_OP_GNU_entry_value",
	0xf4: "DW_OP_GNU_const_type", 0xf5: "DW_OP_GNU_regval_type", 0xf6: "DW_OP_GNU_deref_type",
	0xf7: "DW_OP_GNU_convert", 0xf9: "DW_OP_GNU_reinterpret", 0xfa: "DW_OP_GNU_parameter_ref",
	0xfb: "DW_OP_GNU_addr_index", 0xfc: "DW_OP_GNU_const_index", 0xfd: "DW_OP_GNU_variable_value",
}

// opName names a DWARF operation for messages.
func opName(op byte) string {
	switch {
	case op >= opLit0 && op <= opLit0+31:
		return fmt.Sprintf("DW_OP_lit%d", op-opLit0)
	case op >= opReg0 && op <= opReg0+31:
		return fmt.Sprintf("DW_OP_reg%d", op-opReg0)
	case op >= opBreg0 && op <= opBreg0+31:
		return fmt.Sprintf("DW_OP_breg%d", op-opBreg0)
	case op >= opConst1u && op <= opConsts:
		return "DW_OP_const"
	}
	if n, ok := opNames[op]; ok {
		return n
	}
	return fmt.Sprintf("DW_OP_%#x", op)
}
