package debuginfo

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
)

func reg(n int) Piece { return Piece{Kind: LocRegister, Reg: n} }

func TestEvalExpr(t *testing.T) {
	env := func(atEntry bool) *exprEnv {
		return &exprEnv{
			order:     binary.LittleEndian,
			addrSize:  8,
			atEntry:   atEntry,
			frameBase: func() (Addr, error) { return Addr{Reg: 7, Off: 8}, nil },  // CFA = rsp+8
			cfa:       func() (Addr, error) { return Addr{Reg: 6, Off: 16}, nil }, // rbp+16
			debugAddr: func(i uint64) (uint64, error) { return 0x4000 + i*8, nil },
		}
	}
	addr8 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	ok := []struct {
		name    string
		expr    []byte
		atEntry bool
		want    Loc
	}{
		{"reg5", []byte{opReg0 + 5}, false, Loc{Pieces: []Piece{reg(5)}}},
		{"regx 17", []byte{opRegx, 17}, false, Loc{Pieces: []Piece{reg(17)}}},
		{"breg7 -8", []byte{opBreg0 + 7, 0x78}, false, Loc{Pieces: []Piece{{Kind: LocMemory, Addr: Addr{Reg: 7, Off: -8}}}}},
		{"bregx 3 +16", []byte{opBregx, 3, 16}, false, Loc{Pieces: []Piece{{Kind: LocMemory, Addr: Addr{Reg: 3, Off: 16}}}}},
		{"fbreg -20", []byte{opFbreg, 0x6c}, false, Loc{Pieces: []Piece{{Kind: LocMemory, Addr: Addr{Reg: 7, Off: -12}}}}},
		{"call_frame_cfa", []byte{opCallFrameCFA}, false, Loc{Pieces: []Piece{{Kind: LocMemory, Addr: Addr{Reg: 6, Off: 16}}}}},
		{"addr", append([]byte{opAddr}, addr8(0x402c)...), false, Loc{Pieces: []Piece{{Kind: LocMemory, Addr: Addr{Reg: -1, Off: 0x402c, Absolute: true}}}}},
		{"addrx 2", []byte{opAddrx, 2}, false, Loc{Pieces: []Piece{{Kind: LocMemory, Addr: Addr{Reg: -1, Off: 0x4010, Absolute: true}}}}},
		{"breg13 -1 stack_value", []byte{opBreg0 + 13, 0x7f, opStackValue}, false, Loc{Pieces: []Piece{{Kind: LocValue, Addr: Addr{Reg: 13, Off: -1}}}}},
		{"lit7 stack_value", []byte{opLit0 + 7, opStackValue}, false, Loc{Pieces: []Piece{{Kind: LocValue, Addr: Addr{Reg: -1, Off: 7}}}}},
		{"const2s stack_value", []byte{opConst2s, 0xfe, 0xff, opStackValue}, false, Loc{Pieces: []Piece{{Kind: LocValue, Addr: Addr{Reg: -1, Off: -2}}}}},
		{"implicit_value 4", []byte{opImplicitValue, 4, 1, 2, 0, 0}, false, Loc{Pieces: []Piece{{Kind: LocValue, Addr: Addr{Reg: -1, Off: 0x201}}}}},
		{"entry_value at entry", []byte{opEntryValue, 1, opReg0 + 5, opStackValue}, true, Loc{Pieces: []Piece{{Kind: LocValue, Addr: Addr{Reg: 5}}}}},
		{"GNU_entry_value regx", []byte{opGNUEntryValue, 2, opRegx, 4, opStackValue}, true, Loc{Pieces: []Piece{{Kind: LocValue, Addr: Addr{Reg: 4}}}}},
		{"breg plus_uconst deref", []byte{opBreg0 + 7, 8, opDeref, opPlusUconst, 16}, false, Loc{Pieces: []Piece{{Kind: LocMemory, Addr: Addr{Reg: 7, Derefs: []int64{8}, Off: 16}}}}},
		{"breg lit plus", []byte{opBreg0 + 6, 0, opLit0 + 4, opPlus}, false, Loc{Pieces: []Piece{{Kind: LocMemory, Addr: Addr{Reg: 6, Off: 4}}}}},
		{"breg lit minus", []byte{opBreg0 + 6, 0, opLit0 + 4, opMinus}, false, Loc{Pieces: []Piece{{Kind: LocMemory, Addr: Addr{Reg: 6, Off: -4}}}}},
		{"go string pieces", []byte{opReg0 + 2, opPiece, 8, opReg0 + 5, opPiece, 8}, false, Loc{Pieces: []Piece{{Kind: LocRegister, Reg: 2, Size: 8}, {Kind: LocRegister, Reg: 5, Size: 8}}}},
		{"missing first piece", []byte{opPiece, 8, opReg0 + 5, opPiece, 8}, false, Loc{Pieces: []Piece{{Kind: LocUndefined, Size: 8}, {Kind: LocRegister, Reg: 5, Size: 8}}}},
		{"memory piece", []byte{opFbreg, 24, opPiece, 8}, false, Loc{Pieces: []Piece{{Kind: LocMemory, Size: 8, Addr: Addr{Reg: 7, Off: 32}}}}},
		{"bit_piece 64", []byte{opReg0, opBitPiece, 64, 0}, false, Loc{Pieces: []Piece{{Kind: LocRegister, Reg: 0, Size: 8}}}},
		{"dup drop swap over", []byte{opBreg0 + 1, 0, opDup, opDrop, opLit0 + 1, opSwap}, false, Loc{Pieces: []Piece{{Kind: LocMemory, Addr: Addr{Reg: 1}}}}},
		{"nop", []byte{opNop, opReg0 + 3, opNop, opPiece, 4}, false, Loc{Pieces: []Piece{{Kind: LocRegister, Reg: 3, Size: 4}}}},
	}
	for _, c := range ok {
		got, err := evalExpr(c.expr, env(c.atEntry))
		if assert.NoError(t, err, c.name) {
			assert.Equal(t, c.want, got, c.name)
		}
	}

	bad := []struct {
		name string
		expr []byte
		want error
	}{
		{"empty", nil, ErrOptimizedOut},
		{"entry_value away from entry", []byte{opEntryValue, 1, opReg0 + 5, opStackValue}, ErrOptimizedOut},
		{"entry_value of memory", []byte{opEntryValue, 2, opBreg0 + 5, 0, opStackValue}, ErrTooComplex},
		{"shl", []byte{opBreg0 + 5, 0, opLit0 + 1, 0x24, opStackValue}, ErrTooComplex},
		{"mul", []byte{opBreg0 + 5, 0, opLit0 + 2, 0x1e, opStackValue}, ErrTooComplex},
		{"plus of two registers", []byte{opBreg0 + 5, 0, opBreg0 + 4, 0, opPlus}, ErrTooComplex},
		{"tls", []byte{opConst8u, 0, 0, 0, 0, 0, 0, 0, 0, opGNUPushTLSAddress}, ErrTooComplex},
		{"implicit_pointer", []byte{opImplicitPointer, 0, 0, 0, 0, 0}, ErrOptimizedOut},
		{"deref_size 4", []byte{opBreg0, 0, opDerefSize, 4}, ErrTooComplex},
		{"bit_piece 3", []byte{opReg0, opBitPiece, 3, 0}, ErrTooComplex},
		{"op after register", []byte{opReg0, opLit0}, ErrTooComplex},
		{"truncated breg", []byte{opBreg0 + 7}, ErrMalformed},
		{"truncated addr", []byte{opAddr, 1, 2}, ErrMalformed},
		{"plus on empty", []byte{opPlus}, ErrMalformed},
		{"convert", []byte{0xa8, 0}, ErrTooComplex},
	}
	for _, c := range bad {
		_, err := evalExpr(c.expr, env(false))
		assert.ErrorIs(t, err, c.want, c.name)
	}
	// fbreg without a frame base, call_frame_cfa without CFI.
	_, err := evalExpr([]byte{opFbreg, 0}, &exprEnv{order: binary.LittleEndian, addrSize: 8})
	assert.ErrorIs(t, err, ErrMalformed)
	_, err = evalExpr([]byte{opCallFrameCFA}, &exprEnv{order: binary.LittleEndian, addrSize: 8})
	assert.ErrorIs(t, err, ErrTooComplex)
}

func TestOpName(t *testing.T) {
	assert.Equal(t, "DW_OP_reg5", opName(opReg0+5))
	assert.Equal(t, "DW_OP_breg7", opName(opBreg0+7))
	assert.Equal(t, "DW_OP_lit3", opName(opLit0+3))
	assert.Equal(t, "DW_OP_shl", opName(0x24))
	assert.Equal(t, "DW_OP_0xee", opName(0xee))
}

func FuzzEvalExpr(f *testing.F) {
	for _, seed := range [][]byte{
		{opReg0 + 5}, {opFbreg, 0x6c}, {opBreg0 + 7, 8, opDeref, opPlusUconst, 16},
		{opReg0 + 2, opPiece, 8, opReg0 + 5, opPiece, 8}, {opEntryValue, 1, opReg0 + 5, opStackValue},
		{opImplicitValue, 4, 1, 2, 3, 4}, {opAddrx, 2}, {opCallFrameCFA},
	} {
		f.Add(seed, false)
	}
	f.Fuzz(func(t *testing.T, expr []byte, atEntry bool) {
		env := &exprEnv{
			order: binary.LittleEndian, addrSize: 8, atEntry: atEntry,
			frameBase: func() (Addr, error) { return Addr{Reg: 7, Off: 8}, nil },
			cfa:       func() (Addr, error) { return Addr{Reg: 7, Off: 8}, nil },
			debugAddr: func(i uint64) (uint64, error) { return i, nil },
		}
		loc, err := evalExpr(expr, env)
		if err == nil && len(loc.Pieces) == 0 {
			t.Fatal("no error and no pieces")
		}
	})
}
