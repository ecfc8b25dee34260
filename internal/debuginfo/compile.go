package debuginfo

import (
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
	"strings"

	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

// Access is a compiled path in the engine's terms (those of plan.Fetch):
//
//	v = Register (or 0 when Register is regs.None) + Disp
//	for each d in Derefs: v = *(u64 *)(v + d)   (the last reads ReadSize bytes
//	                                            for an integer)
//
// with LastIsAddress making the last dereference only add its offset (v =
// v + d: the value is an address, or a string or bytes are read there).
// Type says how the value is stored and shown: integers by size and sign,
// KindString for char * and char[N] (at v), KindBytes, KindGoString (a
// pointer and a length: in Register and LenRegister without dereferences,
// else the 16-byte header at v), KindHex for pointers.
type Access struct {
	// Path is the path as written, or "$name" for one of $$params.
	Path string
	// Name is the root variable's name ("$return" for the return value).
	Name string

	// Register is the base register; regs.None makes the base the
	// constant Disp (target.BaseConstant).
	Register regs.Register
	// Disp is added to the base before the dereferences.
	Disp int64
	// Derefs are the offsets of the dereferences, in order.
	Derefs []int64
	// LastIsAddress makes the last dereference only add its offset.
	LastIsAddress bool
	// ReadSize is the size in bytes of the last dereference of an integer
	// (1, 2, 4 or 8); 8 otherwise.
	ReadSize uint8
	// LenRegister holds a Go string's length when it has no dereferences.
	LenRegister regs.Register

	// Type is the default (or requested) kind of the value.
	Type fetch.Type
	// Enum is the value-to-name table of an enum type, nil otherwise (the
	// Type is then the enum's integer type); FormatEnum uses it.
	Enum []fetch.Enumerator
	// TypeName is the declared type, e.g. "const char *", "enum flags".
	TypeName string
	// Note says what the value is when the type is not shown as itself:
	// "the length of a []string", "the type word of an interface (0 is nil)".
	Note string
	// Via says where the root variable's location came from (Variable.How).
	Via string
}

// String returns the access in the kernel's probe syntax plus type, such
// as "+4(+16(%rdi)):string[16]", for messages and golden files.
func (a Access) String() string {
	var b strings.Builder
	for i := len(a.Derefs) - 1; i >= 0; i-- {
		fmt.Fprintf(&b, "%+d(", a.Derefs[i])
	}
	switch {
	case a.Register == regs.None:
		fmt.Fprintf(&b, "%#x", a.Disp)
	case a.Disp != 0:
		fmt.Fprintf(&b, "%%%s%+d", a.Register, a.Disp)
	default:
		fmt.Fprintf(&b, "%%%s", a.Register)
	}
	b.WriteString(strings.Repeat(")", len(a.Derefs)))
	if a.LastIsAddress {
		b.WriteString("&")
	}
	if a.LenRegister != regs.None {
		fmt.Fprintf(&b, ",len=%%%s", a.LenRegister)
	}
	b.WriteString(":" + a.Type.String())
	if a.Type.IsInteger() && len(a.Derefs) > 0 && !a.LastIsAddress && int(a.ReadSize) != int(a.Type.Size) {
		fmt.Fprintf(&b, "(read %d)", a.ReadSize)
	}
	if a.Enum != nil {
		b.WriteString(" enum")
	}
	return b.String()
}

// place is where the value reached so far is: in memory at an address
// (mem), or a value computed without memory (the address field then holds
// the value), or in pieces.
type place struct {
	mem    bool
	addr   Addr
	pieces []Piece
	typ    dwarf.Type
	// absolute marks addresses from DW_OP_addr.
	absolute bool
}

// Compile compiles a path at the scope into one Access with the default
// kind of its type. $$params needs CompileParams.
func (s *Scope) Compile(p *fetch.Path) (Access, error) {
	return s.compile(p, nil)
}

// CompileAs compiles a path and stores the value as t instead of the
// default: an integer type reads that many bytes of the value (or its
// memory); string reads the string a pointer (or an 8-byte integer)
// points to, or that an array or struct in memory holds; bytes[N] reads N
// bytes at what a pointer points to or where an object lies; gostring
// reads a Go string or []byte.
func (s *Scope) CompileAs(p *fetch.Path, t fetch.Type) (Access, error) {
	return s.compile(p, &t)
}

// CompileParams compiles $$params: every parameter of the innermost
// function at the pc, each named "$name", in declaration order. The
// parameters that cannot be fetched (optimized out, structs by value) are
// left out and their errors joined in the error; the accesses are
// returned either way.
func (s *Scope) CompileParams() ([]Access, error) {
	var out []Access
	var errs []error
	for _, v := range s.Params() {
		p := &fetch.Path{Text: "$" + v.Name, Kind: fetch.PathVariable, Root: v.Name}
		a, err := s.compileVar(p, v, p.Steps, nil)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, a)
	}
	return out, errors.Join(errs...)
}

func (s *Scope) compile(p *fetch.Path, want *fetch.Type) (Access, error) {
	switch p.Kind {
	case fetch.PathParams:
		return Access{}, fmt.Errorf("%s: $$params stands for several values: use CompileParams", s.where())
	case fetch.PathReturn:
		if s.Site != SiteReturn {
			return Access{}, fmt.Errorf("%s: $return is only known at a return: %w", s.where(), ErrNotFound)
		}
		if len(s.Results) == 0 {
			return Access{}, fmt.Errorf("%s: $return: the function returns nothing: %w", s.where(), ErrNotFound)
		}
		return s.compileVar(p, s.Results[0], p.Steps, want)
	}
	v, steps, err := s.root(p)
	if err != nil {
		return Access{}, err
	}
	return s.compileVar(p, v, steps, want)
}

// root finds the variable a path starts from; a Go global's dotted name
// ("$main.counter") takes the field steps it is spelled with.
func (s *Scope) root(p *fetch.Path) (*Variable, []fetch.Step, error) {
	v, err := s.Lookup(p.Root)
	if err == nil {
		return v, p.Steps, nil
	}
	if !errors.Is(err, ErrNotFound) {
		return nil, nil, err
	}
	n := 0
	for n < len(p.Steps) && p.Steps[n].Kind == fetch.StepField && !p.Steps[n].Arrow {
		n++
	}
	for ; n > 0; n-- {
		name := p.Root
		for _, st := range p.Steps[:n] {
			name += "." + st.Field
		}
		if g, gerr := s.File.globalVar(name, s); gerr == nil {
			return g, p.Steps[n:], nil
		}
	}
	return nil, nil, err
}

// compileVar compiles steps from variable v.
func (s *Scope) compileVar(p *fetch.Path, v *Variable, steps []fetch.Step, want *fetch.Type) (Access, error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s: %s: "+format, append([]any{s.where(), p.Text}, args...)...)
	}
	if v.Err != nil {
		return Access{}, fail("%s %s: %w", v.Kind, v.Name, v.Err)
	}
	if v.Type == nil {
		return Access{}, fail("%s %s has no type", v.Kind, v.Name)
	}
	pl, err := s.placeOf(v)
	if err != nil {
		return Access{}, fail("%s %s: %w", v.Kind, v.Name, err)
	}
	walked := "$" + v.Name
	if p.Kind == fetch.PathReturn {
		walked = "$return"
	}
	for _, st := range steps {
		if pl, err = s.step(pl, st); err != nil {
			return Access{}, fail("%s: %w", walked, err)
		}
		if st.Kind == fetch.StepIndex {
			walked += fmt.Sprintf("[%d]", st.Index)
		} else if st.Arrow {
			walked += "->" + st.Field
		} else {
			walked += "." + st.Field
		}
	}
	a, err := s.finish(pl, want)
	if err != nil {
		return Access{}, fail("%s (%s): %w", walked, describeType(pl.typ), err)
	}
	a.Path, a.Name, a.Via = p.Text, v.Name, v.How
	if p.Kind == fetch.PathReturn {
		a.Name = "$return"
	}
	return a, nil
}

// placeOf turns a variable's location into a place.
func (s *Scope) placeOf(v *Variable) (place, error) {
	pcs := v.Loc.Pieces
	if len(pcs) == 0 {
		return place{}, fmt.Errorf("no location: %w", ErrOptimizedOut)
	}
	if len(pcs) == 1 {
		pc := pcs[0]
		return s.pieceToPlace(pc, v.Type)
	}
	// Pieces that lie contiguously in memory are one object in memory.
	if base, ok := contiguous(pcs); ok {
		return place{mem: true, addr: base, typ: v.Type, absolute: base.Absolute}, nil
	}
	return place{pieces: pcs, typ: v.Type}, nil
}

func (s *Scope) pieceToPlace(pc Piece, t dwarf.Type) (place, error) {
	switch pc.Kind {
	case LocRegister:
		return place{addr: Addr{Reg: pc.Reg}, typ: t}, nil
	case LocMemory:
		return place{mem: true, addr: pc.Addr, typ: t, absolute: pc.Addr.Absolute}, nil
	case LocValue:
		return place{addr: pc.Addr, typ: t, absolute: pc.Addr.Absolute}, nil
	}
	return place{}, fmt.Errorf("optimized out here: %w", ErrOptimizedOut)
}

// contiguous reports whether memory pieces follow each other at one base.
func contiguous(pcs []Piece) (Addr, bool) {
	first := pcs[0]
	if first.Kind != LocMemory {
		return Addr{}, false
	}
	off := first.Addr.Off
	for _, p := range pcs {
		if p.Kind != LocMemory || p.Addr.Reg != first.Addr.Reg || !equalDerefs(p.Addr.Derefs, first.Addr.Derefs) || p.Addr.Off != off {
			return Addr{}, false
		}
		off += int64(p.Size)
	}
	return first.Addr, true
}

func equalDerefs(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// derefPointer turns a place holding a pointer into the place of what it
// points to. A place that starts at a link-time address (a global, or a
// pointer whose value is one) still does after the dereference: fix
// rebases its first read.
func derefPointer(pl place, target dwarf.Type) (place, error) {
	absolute := pl.absolute || pl.addr.Absolute
	switch {
	case pl.pieces != nil:
		return place{}, fmt.Errorf("a pointer in pieces: %w", ErrTooComplex)
	case pl.mem:
		a := pl.addr
		a.Derefs = append(append([]int64(nil), a.Derefs...), a.Off)
		a.Off = 0
		a.Absolute = false
		return place{mem: true, addr: a, typ: target, absolute: absolute}, nil
	default:
		a := pl.addr
		a.Absolute = false
		return place{mem: true, addr: a, typ: target, absolute: absolute}, nil
	}
}

// selectBytes narrows a place to the part at [off, off+size) of its object.
func selectBytes(pl place, off, size int64, t dwarf.Type) (place, error) {
	switch {
	case pl.pieces != nil:
		at := int64(0)
		for _, p := range pl.pieces {
			ps := int64(p.Size)
			if off >= at && off+size <= at+ps {
				if off != at {
					return place{}, fmt.Errorf("byte %d of a piece held in a register: %w", off-at, ErrTooComplex)
				}
				switch p.Kind {
				case LocRegister:
					return place{addr: Addr{Reg: p.Reg}, typ: t}, nil
				case LocMemory:
					return place{mem: true, addr: p.Addr, typ: t}, nil
				case LocValue:
					return place{addr: p.Addr, typ: t}, nil
				}
				return place{}, fmt.Errorf("that part is %w", ErrOptimizedOut)
			}
			at += ps
		}
		return place{}, fmt.Errorf("bytes [%d, %d) span pieces: %w", off, off+size, ErrTooComplex)
	case pl.mem:
		a := pl.addr
		a.Off += off
		return place{mem: true, addr: a, typ: t, absolute: pl.absolute}, nil
	default:
		if off != 0 {
			return place{}, fmt.Errorf("byte %d of a value held in a register: %w", off, ErrTooComplex)
		}
		return place{addr: pl.addr, typ: t}, nil
	}
}

// step applies one step of a path.
func (s *Scope) step(pl place, st fetch.Step) (place, error) {
	t := resolve(pl.typ)
	switch st.Kind {
	case fetch.StepField:
		if ptr, ok := t.(*dwarf.PtrType); ok {
			target := resolve(ptr.Type)
			if _, isStruct := target.(*dwarf.StructType); !isStruct {
				return place{}, fmt.Errorf("%s points to %s, which has no fields: %w", typeName(pl.typ), typeName(ptr.Type), ErrNotFound)
			}
			var err error
			if pl, err = derefPointer(pl, ptr.Type); err != nil {
				return place{}, err
			}
			t = target
		} else if st.Arrow {
			return place{}, fmt.Errorf("\"->%s\" on %s, which is not a pointer (write .%s)", st.Field, typeName(pl.typ), st.Field)
		}
		str, ok := t.(*dwarf.StructType)
		if !ok {
			return place{}, fmt.Errorf("%s has no fields", typeName(pl.typ))
		}
		if str.Incomplete {
			return place{}, fmt.Errorf("%s is declared but not defined here", typeName(pl.typ))
		}
		f, off, ok := findField(str, st.Field, 0)
		if !ok {
			return place{}, fmt.Errorf("%s has no field %q (fields: %s): %w", typeName(pl.typ), st.Field, fieldNames(str), ErrNotFound)
		}
		if f.BitSize != 0 {
			return place{}, fmt.Errorf("field %q is a bit-field: %w", st.Field, ErrNotFetchable)
		}
		return selectBytes(pl, off, typeSize(f.Type), f.Type)
	case fetch.StepIndex:
		switch x := t.(type) {
		case *dwarf.ArrayType:
			if x.Count >= 0 && st.Index >= x.Count {
				return place{}, fmt.Errorf("index %d out of %s", st.Index, typeName(pl.typ))
			}
			es := typeSize(x.Type)
			if es <= 0 {
				return place{}, fmt.Errorf("elements of %s have no size", typeName(pl.typ))
			}
			return selectBytes(pl, st.Index*es, es, x.Type)
		case *dwarf.PtrType:
			es := typeSize(x.Type)
			if es <= 0 {
				return place{}, fmt.Errorf("%s points to %s, which has no size", typeName(pl.typ), typeName(x.Type))
			}
			target, err := derefPointer(pl, x.Type)
			if err != nil {
				return place{}, err
			}
			target.addr.Off += st.Index * es
			return target, nil
		}
		if elem, ok := goSlice(t); ok {
			es := typeSize(elem)
			if es <= 0 {
				return place{}, fmt.Errorf("elements of %s have no size", typeName(pl.typ))
			}
			arr, err := selectBytes(pl, 0, 8, &dwarf.PtrType{Type: elem})
			if err != nil {
				return place{}, err
			}
			target, err := derefPointer(arr, elem)
			if err != nil {
				return place{}, err
			}
			target.addr.Off += st.Index * es
			return target, nil
		}
		return place{}, fmt.Errorf("%s cannot be indexed", typeName(pl.typ))
	}
	return place{}, fmt.Errorf("unknown step")
}

// finish turns the final place into an Access of the default kind of its
// type, or of want.
func (s *Scope) finish(pl place, want *fetch.Type) (Access, error) {
	a := Access{TypeName: typeName(pl.typ), ReadSize: 8}
	t := resolve(pl.typ)
	if want != nil {
		return s.finishAs(a, pl, t, *want)
	}
	if pl.pieces != nil {
		return s.finishPieces(a, pl, t)
	}
	size := typeSize(t)
	switch x := t.(type) {
	case *dwarf.IntType, *dwarf.CharType:
		return s.scalar(a, pl, fetch.KindSigned, size)
	case *dwarf.UintType, *dwarf.UcharType, *dwarf.BoolType:
		return s.scalar(a, pl, fetch.KindUnsigned, size)
	case *dwarf.EnumType:
		kind := fetch.KindUnsigned
		if enumSigned(x) {
			kind = fetch.KindSigned
		}
		a.Enum = enumerators(x)
		return s.scalar(a, pl, kind, size)
	case *dwarf.PtrType:
		if x.Type != nil && isCharType(x.Type) && !isUnsignedChar(x.Type) {
			a.Type = fetch.Type{Kind: fetch.KindString, MaxLen: fetch.DefaultStringLen}
			return s.valueOf(a, pl)
		}
		return s.scalar(a, pl, fetch.KindHex, 8)
	case *dwarf.FuncType, *dwarf.AddrType:
		return s.scalar(a, pl, fetch.KindHex, 8)
	case *dwarf.ArrayType:
		if x.Count > 0 && isCharType(x.Type) {
			n := x.Count
			if n > fetch.MaxTypeLen {
				n = fetch.MaxTypeLen
			}
			if isUnsignedChar(x.Type) && !s.isGo {
				a.Type = fetch.Type{Kind: fetch.KindBytes, MaxLen: uint16(n)}
			} else if s.isGo {
				a.Type = fetch.Type{Kind: fetch.KindBytes, MaxLen: uint16(n)}
			} else {
				// string[N] holds N-1 bytes and a NUL: a char[n] takes
				// n+1, so that an array filled to its end, with no NUL,
				// shows whole. The read stops at the array's end all
				// the same (at most N-1 bytes are read).
				n = min(n+1, max(n, fetch.DefaultStringLen))
				a.Type = fetch.Type{Kind: fetch.KindString, MaxLen: uint16(n)}
			}
			return s.addressOf(a, pl)
		}
		return Access{}, fmt.Errorf("an array: index it ([N]) or read it as bytes[%d]: %w", max(size, 1), ErrNotFetchable)
	case *dwarf.StructType:
		switch {
		case goString(t):
			return s.goStringAt(a, pl)
		case goInterface(t):
			a.Note = "the type word of an interface (0 is nil)"
			return s.fieldScalar(a, pl, 0, fetch.KindHex)
		}
		if elem, ok := goSlice(t); ok {
			if isUnsignedChar(elem) {
				a.Note = "the bytes of a []byte as a string"
				return s.goStringAt(a, pl)
			}
			a.Note = "the length of a " + typeName(pl.typ)
			return s.fieldScalar(a, pl, 8, fetch.KindSigned)
		}
		return Access{}, s.structRefusal(pl, x, size)
	case *dwarf.FloatType, *dwarf.ComplexType:
		return Access{}, fmt.Errorf("floating-point: read its bits as x%d: %w", size*8, ErrNotFetchable)
	case *dwarf.VoidType, nil:
		return Access{}, fmt.Errorf("void: %w", ErrNotFetchable)
	}
	return Access{}, fmt.Errorf("type %s: %w", typeName(pl.typ), ErrNotFetchable)
}

// finishPieces handles a value in several pieces: a Go string or []byte in
// two registers, the length of a slice, an interface's type word.
func (s *Scope) finishPieces(a Access, pl place, t dwarf.Type) (Access, error) {
	if goString(t) || isByteSlice(t) {
		ptr, err := selectBytes(pl, 0, 8, nil)
		if err != nil {
			return Access{}, fmt.Errorf("its pointer: %w", err)
		}
		ln, err := selectBytes(pl, 8, 8, nil)
		if err != nil {
			return Access{}, fmt.Errorf("its length: %w", err)
		}
		if ptr.mem || ln.mem || len(ptr.addr.Derefs) > 0 || ln.addr.Reg < 0 || ln.addr.Off != 0 || len(ln.addr.Derefs) > 0 {
			return Access{}, fmt.Errorf("a string's pointer and length in other places than two registers: %w", ErrTooComplex)
		}
		r, err := s.reg(ptr.addr.Reg)
		if err != nil {
			return Access{}, err
		}
		lr, err := s.reg(ln.addr.Reg)
		if err != nil {
			return Access{}, err
		}
		a.Register, a.Disp, a.LenRegister = r, ptr.addr.Off, lr
		a.Type = fetch.Type{Kind: fetch.KindGoString, MaxLen: fetch.DefaultStringLen}
		if isByteSlice(t) {
			a.Note = "the bytes of a []byte as a string"
		}
		return a, nil
	}
	if goInterface(t) {
		a.Note = "the type word of an interface (0 is nil)"
		return s.fieldScalar(a, pl, 0, fetch.KindHex)
	}
	if _, ok := goSlice(t); ok {
		a.Note = "the length of a " + a.TypeName
		return s.fieldScalar(a, pl, 8, fetch.KindSigned)
	}
	if str, ok := t.(*dwarf.StructType); ok {
		return Access{}, s.structRefusal(pl, str, typeSize(t))
	}
	return Access{}, fmt.Errorf("a value in %d pieces: %w", len(pl.pieces), ErrTooComplex)
}

// structRefusal is the error that refuses a struct (or union) read as one
// value. It suggests only what compiles from where the struct is: the
// fields a step reaches (every field of one in memory; of one in
// registers, the fields that start a register or a piece: the upper bytes
// of a register cannot be read alone), bytes[N] for one in memory, xN for
// one held whole in a register (div_t's quot and rem in %rax: $return.quot
// or $return:x64, never $return.rem).
func (s *Scope) structRefusal(pl place, x *dwarf.StructType, size int64) error {
	var names []string
	for _, f := range x.Field {
		if f.Name == "" || f.BitSize != 0 {
			continue
		}
		if _, err := s.step(pl, fetch.Step{Kind: fetch.StepField, Field: f.Name}); err == nil {
			names = append(names, f.Name)
		}
	}
	fields := "name one of its fields (" + strings.Join(names, ", ") + ")"
	switch {
	case len(names) == 1:
		fields = "name its field " + names[0]
	case len(names) == 0:
		fields = "none of its fields (" + fieldNames(x) + ") starts a register"
	}
	switch {
	case pl.mem:
		return fmt.Errorf("a %s: %s, or read it as bytes[%d]: %w", x.Kind, fields, max(size, 1), ErrNotFetchable)
	case pl.pieces != nil:
		return fmt.Errorf("a %s held in registers: %s: %w", x.Kind, fields, ErrNotFetchable)
	case size == 1 || size == 2 || size == 4 || size == 8:
		return fmt.Errorf("a %s held in a register: %s, or read the register as x%d: %w", x.Kind, fields, size*8, ErrNotFetchable)
	}
	return fmt.Errorf("a %s held in a register: %s: %w", x.Kind, fields, ErrNotFetchable)
}

func isByteSlice(t dwarf.Type) bool {
	elem, ok := goSlice(t)
	return ok && isUnsignedChar(elem)
}

// fieldScalar reads the 8-byte word at off of a place as kind.
func (s *Scope) fieldScalar(a Access, pl place, off int64, kind fetch.Kind) (Access, error) {
	f, err := selectBytes(pl, off, 8, nil)
	if err != nil {
		return Access{}, err
	}
	return s.scalar(a, f, kind, 8)
}

// reg maps a DWARF register to the engine's.
func (s *Scope) reg(n int) (regs.Register, error) {
	return s.File.Arch.Register(n)
}

// fix rebases a link-time address (DW_OP_addr): as is in a non-PIE
// executable, which runs at its link-time addresses; rip-relative at a
// known pc on x86-64, since the engine reads the probed instruction's
// runtime address in rip; refused otherwise (a uretprobe's rip is in the
// caller, and the engine does not know the load bias).
func (s *Scope) fix(addr Addr, absolute bool) (Addr, error) {
	if addr.Reg >= 0 || !(absolute || addr.Absolute) {
		return addr, nil
	}
	f := s.File
	if f.Type == elf.ET_EXEC {
		return addr, nil
	}
	if f.Arch.Machine != archX86_64.Machine || s.PC == 0 {
		return Addr{}, fmt.Errorf("a link-time address in a position-independent file needs its load address, which the engine does not know here: %w", ErrTooComplex)
	}
	out := Addr{Reg: archX86_64.ReturnAddress, Derefs: append([]int64(nil), addr.Derefs...), Off: addr.Off}
	if len(out.Derefs) > 0 {
		out.Derefs[0] -= int64(s.PC)
	} else {
		out.Off -= int64(s.PC)
	}
	return out, nil
}

// start sets a's base register from an address, after fix.
func (s *Scope) start(a *Access, pl place) (Addr, error) {
	addr, err := s.fix(pl.addr, pl.absolute)
	if err != nil {
		return Addr{}, err
	}
	a.Register, a.Disp = regs.None, 0
	if addr.Reg >= 0 {
		if a.Register, err = s.reg(addr.Reg); err != nil {
			return Addr{}, err
		}
	}
	return addr, nil
}

// scalar reads an integer of size bytes from a place: the bytes in memory,
// or the value itself.
func (s *Scope) scalar(a Access, pl place, kind fetch.Kind, size int64) (Access, error) {
	if size != 1 && size != 2 && size != 4 && size != 8 {
		return Access{}, fmt.Errorf("an integer of %d bytes: %w", size, ErrNotFetchable)
	}
	a.Type = fetch.Type{Kind: kind, Size: uint8(size)}
	if pl.mem {
		if err := s.memory(&a, pl); err != nil {
			return Access{}, err
		}
		a.ReadSize = uint8(size)
		return a, nil
	}
	return s.computed(a, pl)
}

// memory sets a to read the 8 bytes (or ReadSize) at a place's address:
// the last dereference reads the value.
func (s *Scope) memory(a *Access, pl place) error {
	addr, err := s.start(a, pl)
	if err != nil {
		return err
	}
	a.Derefs = append(append([]int64(nil), addr.Derefs...), addr.Off)
	return nil
}

// computed sets a to the value of a place's address itself: a value held
// in a register or computed (not in memory), or the address of an object
// in memory.
func (s *Scope) computed(a Access, pl place) (Access, error) {
	addr, err := s.start(&a, pl)
	if err != nil {
		return Access{}, err
	}
	switch {
	case len(addr.Derefs) == 0:
		a.Disp = addr.Off
	case addr.Off == 0:
		a.Derefs = append([]int64(nil), addr.Derefs...)
	default:
		a.Derefs = append(append([]int64(nil), addr.Derefs...), addr.Off)
		a.LastIsAddress = true
	}
	return a, nil
}

// valueOf sets a to a pointer's value: read from memory, or as computed.
func (s *Scope) valueOf(a Access, pl place) (Access, error) {
	if pl.mem {
		if err := s.memory(&a, pl); err != nil {
			return Access{}, err
		}
		return a, nil
	}
	return s.computed(a, pl)
}

// addressOf sets a to the address of a place in memory (strings and bytes
// read there).
func (s *Scope) addressOf(a Access, pl place) (Access, error) {
	if !pl.mem {
		return Access{}, fmt.Errorf("not in memory here (in a register or computed), so it has no address: %w", ErrTooComplex)
	}
	return s.computed(a, pl)
}

// goStringAt reads a Go string (or []byte) header that lies in memory.
func (s *Scope) goStringAt(a Access, pl place) (Access, error) {
	a.Type = fetch.Type{Kind: fetch.KindGoString, MaxLen: fetch.DefaultStringLen}
	if pl.pieces != nil {
		return s.finishPieces(a, pl, resolve(pl.typ))
	}
	if !pl.mem {
		return Access{}, fmt.Errorf("a string header that is not in memory: %w", ErrTooComplex)
	}
	addr, err := s.start(&a, pl)
	if err != nil {
		return Access{}, err
	}
	// The engine reads a Go string's header at v after its dereferences,
	// so the header's address comes from a last, address-only step.
	a.Derefs = append(append([]int64(nil), addr.Derefs...), addr.Off)
	a.LastIsAddress = true
	return a, nil
}

// finishAs stores the final place as the requested type.
func (s *Scope) finishAs(a Access, pl place, t dwarf.Type, want fetch.Type) (Access, error) {
	if pl.pieces != nil {
		if want.Kind == fetch.KindGoString && (goString(t) || isByteSlice(t)) {
			a, err := s.finishPieces(a, pl, t)
			if err == nil {
				a.Type = want
			}
			return a, err
		}
		first, err := selectBytes(pl, 0, int64(max(want.Size, 1)), t)
		if err != nil || !want.IsInteger() {
			return Access{}, fmt.Errorf("a value in %d pieces as %s: %w", len(pl.pieces), want, ErrTooComplex)
		}
		pl = first
	}
	_, isPtr := t.(*dwarf.PtrType)
	size := typeSize(t)
	switch {
	case want.IsInteger():
		out, err := s.scalar(a, pl, want.Kind, int64(want.Size))
		out.Type = want
		return out, err
	case want.Kind == fetch.KindString || want.Kind == fetch.KindBytes:
		var (
			out Access
			err error
		)
		switch {
		case isPtr || (size == 8 && isIntegerType(t)):
			out, err = s.valueOf(a, pl)
		case pl.mem:
			out, err = s.addressOf(a, pl)
		default:
			return Access{}, fmt.Errorf("%s is neither a pointer nor in memory: %w", typeName(pl.typ), ErrNotFetchable)
		}
		out.Type = want
		return out, err
	case want.Kind == fetch.KindGoString:
		if !goString(t) && !isByteSlice(t) {
			return Access{}, fmt.Errorf("gostring needs a Go string or []byte: %w", ErrNotFetchable)
		}
		out, err := s.goStringAt(a, pl)
		out.Type = want
		return out, err
	}
	return Access{}, fmt.Errorf("type %s: %w", want, ErrNotFetchable)
}

func isIntegerType(t dwarf.Type) bool {
	switch resolve(t).(type) {
	case *dwarf.IntType, *dwarf.UintType:
		return true
	}
	return false
}
