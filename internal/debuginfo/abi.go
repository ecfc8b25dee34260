package debuginfo

import (
	"debug/dwarf"
	"errors"
	"fmt"
)

// The x86-64 DWARF numbers of the SysV integer argument registers (rdi,
// rsi, rdx, rcx, r8, r9) and return registers (rax, rdx).
var (
	sysvArgRegs = []int{5, 4, 1, 2, 8, 9}
	sysvRetRegs = []int{0, 1}
)

// sysvMaxSSE is the number of SSE argument registers (xmm0..xmm7).
const sysvMaxSSE = 8

// eightbyte classes of the SysV x86-64 ABI.
const (
	classNone byte = iota
	classInteger
	classSSE
)

// sysvClassify classifies a C type for the SysV x86-64 calling convention:
// the class of each eightbyte, or memory when it is passed on the stack.
// ok is false for types it does not know (long double, bit-field layouts
// it cannot see), which the caller must not guess about.
func sysvClassify(t dwarf.Type) (classes []byte, memory, ok bool) {
	size := typeSize(t)
	if size < 0 {
		return nil, false, false
	}
	if size == 0 {
		return nil, false, true
	}
	if size > 16 {
		return nil, true, true
	}
	classes = make([]byte, (size+7)/8)
	if !sysvMerge(t, 0, classes, 0) {
		return nil, false, false
	}
	for i, c := range classes {
		if c == classNone {
			classes[i] = classSSE // padding only: the ABI's NO_CLASS ends up SSE
		}
	}
	return classes, false, true
}

// sysvMerge merges the classes of the scalars of t, at byte offset off,
// into classes.
func sysvMerge(t dwarf.Type, off int64, classes []byte, depth int) bool {
	if depth > 16 {
		return false
	}
	merge := func(at int64, c byte) bool {
		i := at / 8
		if i < 0 || int(i) >= len(classes) {
			return false
		}
		if classes[i] == classNone || c == classInteger {
			classes[i] = c
		}
		return true
	}
	switch x := resolve(t).(type) {
	case *dwarf.IntType, *dwarf.UintType, *dwarf.CharType, *dwarf.UcharType, *dwarf.BoolType,
		*dwarf.EnumType, *dwarf.PtrType, *dwarf.AddrType:
		size := typeSize(x)
		if size <= 0 || size > 8 || off%size != 0 {
			return false
		}
		return merge(off, classInteger)
	case *dwarf.FloatType:
		if x.ByteSize > 8 {
			return false // long double: x87, passed in memory
		}
		return merge(off, classSSE)
	case *dwarf.ComplexType:
		if x.ByteSize > 16 {
			return false
		}
		half := x.ByteSize / 2
		return merge(off, classSSE) && merge(off+half, classSSE)
	case *dwarf.StructType:
		for _, f := range x.Field {
			if f.BitSize != 0 || f.DataBitOffset != 0 && f.DataBitOffset%8 != 0 {
				if !merge(off+f.ByteOffset, classInteger) {
					return false
				}
				continue
			}
			if !sysvMerge(f.Type, off+f.ByteOffset, classes, depth+1) {
				return false
			}
		}
		return true
	case *dwarf.ArrayType:
		es := typeSize(x.Type)
		if es <= 0 || x.Count < 0 {
			return es == 0
		}
		for i := int64(0); i < x.Count; i++ {
			if !sysvMerge(x.Type, off+i*es, classes, depth+1) {
				return false
			}
		}
		return true
	}
	return false
}

// sysvEntry gives parameters whose DWARF location the prologue has not
// filled yet at the entry (an -O0 stack slot, or a slot relative to a frame
// pointer not set up yet) the place the SysV x86-64 calling convention
// passes them in: registers, or the caller's stack at rsp+8 onwards.
// Classification stops at the first parameter whose type it does not know
// (x87 long double, 16-byte aligned members): later places are unknown.
func (s *Scope) sysvEntry() {
	params := s.Params()
	need := false
	for _, p := range params {
		need = need || errors.Is(p.Err, errPrologueSlot)
	}
	if !need {
		return
	}
	nextInt, nextSSE := 0, 0
	stack := int64(8) // the return address is at rsp+0
	if s.ReturnType != nil {
		if _, memory, ok := sysvClassify(s.ReturnType); ok && memory {
			nextInt++ // the hidden pointer to the returned struct takes rdi
		} else if !ok {
			return
		}
	}
	for _, p := range params {
		classes, memory, ok := sysvClassify(p.Type)
		if ok && memory && sysvAlign16(p.Type) {
			ok = false
		}
		if !ok {
			if errors.Is(p.Err, errPrologueSlot) {
				p.Err = fmt.Errorf("%w, and its type %s is beyond the SysV classification this package does", p.Err, typeName(p.Type))
			}
			return // later places are unknown too
		}
		var ints, sses int
		for _, c := range classes {
			if c == classInteger {
				ints++
			} else {
				sses++
			}
		}
		size := typeSize(p.Type)
		if memory || nextInt+ints > len(sysvArgRegs) || nextSSE+sses > sysvMaxSSE {
			// Passed on the stack, in eightbytes.
			if errors.Is(p.Err, errPrologueSlot) {
				p.Loc = Loc{Pieces: []Piece{{Kind: LocMemory, Addr: Addr{Reg: archX86_64.SP, Off: stack}}}}
				p.Err, p.How = nil, "SysV calling convention at entry"
			}
			stack += (size + 7) &^ 7
			continue
		}
		regsOf := make([]int, 0, len(classes))
		sseOnly := true
		for _, c := range classes {
			if c == classInteger {
				regsOf = append(regsOf, sysvArgRegs[nextInt])
				nextInt++
				sseOnly = false
			} else {
				regsOf = append(regsOf, -1)
				nextSSE++
			}
		}
		if !errors.Is(p.Err, errPrologueSlot) {
			continue
		}
		if sseOnly && len(classes) > 0 {
			p.Err = fmt.Errorf("passed in an SSE register, which the engine does not read: %w", ErrTooComplex)
			continue
		}
		var loc Loc
		for i, r := range regsOf {
			piece := Piece{Kind: LocRegister, Reg: r, Size: 8}
			if r < 0 {
				piece = Piece{Kind: LocUndefined, Size: 8}
			}
			if i == len(regsOf)-1 {
				piece.Size = uint64(size) - 8*uint64(i)
			}
			loc.Pieces = append(loc.Pieces, piece)
		}
		if len(loc.Pieces) == 1 {
			loc.Pieces[0].Size = 0
		}
		p.Loc, p.Err, p.How = loc, nil, "SysV calling convention at entry"
	}
}

// sysvAlign16 reports whether a type passed in memory may need 16-byte
// alignment on the stack (a 16-byte scalar member: long double,
// __int128), which the stack offsets here do not model.
func sysvAlign16(t dwarf.Type) bool {
	found := false
	var walk func(t dwarf.Type, depth int)
	walk = func(t dwarf.Type, depth int) {
		if found || depth > 16 {
			return
		}
		switch x := resolve(t).(type) {
		case *dwarf.StructType:
			for _, f := range x.Field {
				walk(f.Type, depth+1)
			}
		case *dwarf.ArrayType:
			walk(x.Type, depth+1)
		case *dwarf.FloatType, *dwarf.IntType, *dwarf.UintType, *dwarf.ComplexType:
			found = found || typeSize(x) >= 16
		}
	}
	walk(t, 0)
	return found
}

// sysvReturn locates a C function's return value after it returns: rax,
// or rax and rdx, for integer classes; memory at rax for a struct returned
// through a hidden pointer (the callee returns that pointer in rax).
func sysvReturn(a *Arch, t dwarf.Type) (Loc, error) {
	if t == nil {
		return Loc{}, fmt.Errorf("the function returns void: %w", ErrNotFound)
	}
	if a.Machine == archARM64.Machine {
		return aapcsReturn(t)
	}
	if a.Machine != archX86_64.Machine {
		return Loc{}, fmt.Errorf("return values on %s: %w", a.Machine, ErrUnsupportedMachine)
	}
	classes, memory, ok := sysvClassify(t)
	switch {
	case !ok:
		return Loc{}, fmt.Errorf("return type %s: beyond the SysV classification this package does: %w", typeName(t), ErrTooComplex)
	case memory:
		return Loc{Pieces: []Piece{{Kind: LocMemory, Addr: Addr{Reg: 0}}}}, nil
	}
	size := typeSize(t)
	var loc Loc
	for i, c := range classes {
		if c != classInteger {
			return Loc{}, fmt.Errorf("return type %s is returned in SSE registers, which the engine does not read: %w", typeName(t), ErrTooComplex)
		}
		p := Piece{Kind: LocRegister, Reg: sysvRetRegs[i], Size: 8}
		if i == len(classes)-1 {
			p.Size = uint64(size) - 8*uint64(i)
		}
		loc.Pieces = append(loc.Pieces, p)
	}
	if len(loc.Pieces) == 1 {
		loc.Pieces[0].Size = 0
	}
	return loc, nil
}

// aapcsReturn locates an arm64 C return value: x0 for integers and
// pointers up to 8 bytes; anything else is refused.
func aapcsReturn(t dwarf.Type) (Loc, error) {
	switch resolve(t).(type) {
	case *dwarf.IntType, *dwarf.UintType, *dwarf.CharType, *dwarf.UcharType, *dwarf.BoolType, *dwarf.EnumType, *dwarf.PtrType:
		return Loc{Pieces: []Piece{{Kind: LocRegister, Reg: 0}}}, nil
	}
	return Loc{}, fmt.Errorf("return type %s on arm64: only integers and pointers in x0: %w", typeName(t), ErrTooComplex)
}

// Go's ABIInternal result registers, as DWARF numbers: x86-64 rax, rbx,
// rcx, rdi, rsi, r8, r9, r10, r11 (and 15 float registers X0..X14);
// arm64 R0..R15 (and 16 float registers).
var (
	goIntRegsAMD64 = []int{0, 3, 2, 5, 4, 8, 9, 10, 11}
	goIntRegsARM64 = []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
)

const (
	goFloatRegsAMD64 = 15
	goFloatRegsARM64 = 16
)

// goAssigner assigns values to Go's result registers by the ABIInternal
// rules: each result, in order, goes wholly into the next free registers
// (integers and pointers one integer register each, strings two, slices
// three, interfaces two, floats one float register, structs field by
// field, arrays of length 0 or 1 by their element) or, when it does not
// fit or is an array of more, wholly onto the stack.
type goAssigner struct {
	ints          []int
	nextInt       int
	nextFloat     int
	maxFloat      int
	pieces        []Piece
	off           int64
	floatRegFirst int
}

func (g *goAssigner) assign(t dwarf.Type, depth int) bool {
	if depth > 16 {
		return false
	}
	size := typeSize(t)
	if size < 0 {
		return false
	}
	pad := func(to int64) {
		if to > g.off {
			g.pieces = append(g.pieces, Piece{Kind: LocUndefined, Size: uint64(to - g.off)})
			g.off = to
		}
	}
	switch x := resolve(t).(type) {
	case *dwarf.StructType:
		start := g.off
		for _, f := range x.Field {
			if typeSize(f.Type) == 0 {
				continue
			}
			pad(start + f.ByteOffset)
			if !g.assign(f.Type, depth+1) {
				return false
			}
		}
		pad(start + size)
		return true
	case *dwarf.ArrayType:
		switch x.Count {
		case 0:
			return true
		case 1:
			return g.assign(x.Type, depth+1)
		}
		return false
	case *dwarf.FloatType:
		if g.nextFloat >= g.maxFloat {
			return false
		}
		g.pieces = append(g.pieces, Piece{Kind: LocRegister, Reg: g.floatRegFirst + g.nextFloat, Size: uint64(size)})
		g.nextFloat++
		g.off += size
		return true
	case *dwarf.ComplexType:
		half := size / 2
		for i := 0; i < 2; i++ {
			if g.nextFloat >= g.maxFloat {
				return false
			}
			g.pieces = append(g.pieces, Piece{Kind: LocRegister, Reg: g.floatRegFirst + g.nextFloat, Size: uint64(half)})
			g.nextFloat++
			g.off += half
		}
		return true
	case *dwarf.IntType, *dwarf.UintType, *dwarf.CharType, *dwarf.UcharType, *dwarf.BoolType, *dwarf.PtrType,
		*dwarf.AddrType, *dwarf.EnumType, *dwarf.FuncType, *dwarf.UnspecifiedType:
		if size == 0 {
			return true
		}
		if size > 8 || g.nextInt >= len(g.ints) {
			return false
		}
		g.pieces = append(g.pieces, Piece{Kind: LocRegister, Reg: g.ints[g.nextInt], Size: uint64(size)})
		g.nextInt++
		g.off += size
		return true
	}
	return false
}

// goResults locates Go results at a return instruction by the ABI's
// register assignment. Go's DWARF describes results only as stack slots
// (with -N -l) or not at all (optimized), and at the RET those slots lie
// below the stack pointer, so the registers are the only reliable place.
func (s *Scope) goResults() {
	g := &goAssigner{}
	switch s.File.Arch.Machine {
	case archX86_64.Machine:
		g.ints, g.maxFloat, g.floatRegFirst = goIntRegsAMD64, goFloatRegsAMD64, 17 // xmm0 is DWARF 17
	case archARM64.Machine:
		g.ints, g.maxFloat, g.floatRegFirst = goIntRegsARM64, goFloatRegsARM64, 64 // v0 is DWARF 64
	default:
		for _, v := range s.Results {
			v.Err = fmt.Errorf("Go results on %s: %w", s.File.Arch.Machine, ErrUnsupportedMachine)
		}
		return
	}
	if s.PC == 0 {
		for _, v := range s.Results {
			v.Err = fmt.Errorf("a Go function's results are read at its RET instructions, not after it returns: %w", ErrTooComplex)
		}
		return
	}
	for i, v := range s.Results {
		saveInt, saveFloat := g.nextInt, g.nextFloat
		g.pieces, g.off = nil, 0
		if v.Type == nil || !g.assign(v.Type, 0) {
			g.nextInt, g.nextFloat = saveInt, saveFloat
			v.Err = fmt.Errorf("result %d (%s %s) is returned on the stack, which this package does not locate: %w", i, v.Name, typeName(v.Type), ErrTooComplex)
			continue
		}
		v.Loc = Loc{Pieces: g.pieces}
		if len(g.pieces) == 1 {
			v.Loc.Pieces[0].Size = 0
		}
		v.How, v.Err = "Go ABI result registers", nil
	}
}
