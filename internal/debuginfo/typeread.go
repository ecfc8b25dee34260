package debuginfo

import (
	"debug/dwarf"
	"fmt"
)

// maxTypeChain bounds a chain of typedefs, qualifiers and array
// dimensions: the methods of debug/dwarf's types (Size, String) follow
// such chains by recursion, which must stay shallow.
const maxTypeChain = 64

// typeReader reads DWARF types into debug/dwarf's Type values, as
// dwarf.Data.Type does, but without recursion and with every chain
// bounded: debug/dwarf reads a type by recursing into the types it names
// (a 1,000,000-deep pointer chain overflows the goroutine's stack, which
// no recover catches) and computes the size of a typedef by following
// typedefs (a typedef of itself recurses forever, a 100,000-long chain
// takes quadratic time). Here the types a type reaches are read with a
// work list; a chain of typedefs, qualifiers and arrays that cycles or is
// longer than maxTypeChain refuses the type, so that Size and String
// stay shallow on every type handed out; every type read is charged to
// the file's budget, which bounds the work and memory of all reads
// together (failed reads included). Types are cached by where their DIE
// is (section and offset), as debug/dwarf caches them by offset. A type
// in a type unit is reached by its signature (indexTypeUnits) as one more
// edge of the same work list, so signatures that refer to each other cost
// no recursion either.
type typeReader struct {
	budget *budget
	// spaces are where DIEs of types are read: .debug_info (infoSpace)
	// and, when the file has one that could be read, .debug_types.
	spaces [2]*typeSpace
	cache  map[typeKey]dwarf.Type
	failed map[typeKey]error
	// chain is the length of the typedef, qualifier and array chain that
	// starts at each accepted type of those kinds.
	chain map[dwarf.Type]int
	// sigs finds the type of each type unit signature (DW_FORM_ref_sig8,
	// DW_AT_signature); sigsErr says which type units were left out and
	// why (nil when none was).
	sigs    map[uint64]typeKey
	sigsErr error
}

// typeSpace is a section of DIEs as debug/dwarf reads it.
type typeSpace struct {
	data *dwarf.Data
	// entries reads the DIE of a type; kids walks the children of the
	// one being filled in.
	entries, kids *dwarf.Reader
	// units are the section's units by offset, when references must stay
	// inside their unit (.debug_types); nil for .debug_info.
	units []unit
}

// The spaces of typeReader.spaces.
const (
	infoSpace  = 0
	typesSpace = 1
)

// typeKey is where a type's DIE is: a section and an offset in it.
type typeKey struct {
	space uint8
	off   dwarf.Offset
}

// String names a DIE's place for messages: its .debug_info offset, or
// the section and offset.
func (k typeKey) String() string {
	if k.space == infoSpace {
		return fmt.Sprintf("%#x", k.off)
	}
	return fmt.Sprintf(".debug_types %#x", k.off)
}

func newTypeReader(d *dwarf.Data, b *budget) *typeReader {
	return &typeReader{
		budget: b,
		spaces: [2]*typeSpace{{data: d, entries: d.Reader(), kids: d.Reader()}},
		cache:  map[typeKey]dwarf.Type{}, failed: map[typeKey]error{}, chain: map[dwarf.Type]int{},
		sigs: map[uint64]typeKey{},
	}
}

// typeRead is one type being read: its DIE, where it is, the object made
// for it, and the bounds references from it must stay in (the whole
// section but in .debug_types, where it is the DIE's unit).
type typeRead struct {
	e        *dwarf.Entry
	key      typeKey
	t        dwarf.Type
	addrSize int
	lo, hi   uint64
}

// typeBuild is one call of typeAt: the types it made, which leave the
// cache again if it fails.
type typeBuild struct {
	tr       *typeReader
	queue    []typeRead
	made     []typeKey
	typedefs []*dwarf.TypedefType
	chained  []dwarf.Type // new typedefs, qualifiers and arrays
	zeroArr  []*dwarf.Type
}

// typeAt returns the type whose DIE is at off in .debug_info.
func (tr *typeReader) typeAt(off dwarf.Offset) (dwarf.Type, error) {
	return tr.typeAtKey(typeKey{infoSpace, off})
}

// typeOf returns the type a DW_AT_type value names: a .debug_info offset
// or a type unit's signature (DW_FORM_ref_sig8). Values of other forms
// name no type (nil, nil).
func (tr *typeReader) typeOf(v any) (dwarf.Type, error) {
	switch v := v.(type) {
	case dwarf.Offset:
		return tr.typeAt(v)
	case uint64:
		key, err := tr.sigType(v)
		if err != nil {
			return nil, err
		}
		return tr.typeAtKey(key)
	}
	return nil, nil
}

// typeAtKey returns the type whose DIE is at key.
func (tr *typeReader) typeAtKey(key typeKey) (dwarf.Type, error) {
	if t, ok := tr.cache[key]; ok {
		return t, nil
	}
	if err, ok := tr.failed[key]; ok {
		return nil, err
	}
	b := &typeBuild{tr: tr}
	t, err := b.run(key)
	if err != nil {
		for _, k := range b.made {
			delete(tr.cache, k)
		}
		for _, t := range b.chained {
			delete(tr.chain, t)
		}
		err = fmt.Errorf("type at %s: %w", key, err)
		tr.failed[key] = err
		return nil, err
	}
	return t, nil
}

// sigType returns where the type of a type unit's signature is.
func (tr *typeReader) sigType(sig uint64) (typeKey, error) {
	if key, ok := tr.sigs[sig]; ok {
		return key, nil
	}
	if tr.sigsErr != nil {
		return typeKey{}, fmt.Errorf("no type unit with signature %#x was read (%w)", sig, tr.sigsErr)
	}
	return typeKey{}, fmt.Errorf("no type unit has signature %#x: %w", sig, ErrMalformed)
}

func (b *typeBuild) run(root typeKey) (dwarf.Type, error) {
	t, err := b.node(root)
	if err != nil {
		return nil, err
	}
	for len(b.queue) > 0 {
		p := b.queue[len(b.queue)-1]
		b.queue = b.queue[:len(b.queue)-1]
		if err := b.fill(p); err != nil {
			return nil, err
		}
	}
	if err := b.checkChains(); err != nil {
		return nil, err
	}
	// As debug/dwarf does once the graph is complete: the size of a
	// typedef without its own is its type's, and a last zero-width array
	// member (a flexible array) has no elements.
	for _, td := range b.typedefs {
		td.ByteSize = td.Type.Size()
	}
	for _, at := range b.zeroArr {
		a := (*at).(*dwarf.ArrayType)
		if a.Type.Size() == 0 {
			continue
		}
		c := *a
		c.Count = 0
		*at = &c
	}
	return t, nil
}

// maxSigHops bounds a chain of declarations that name their type by
// signature (DW_AT_signature) and whose type is such a declaration again:
// compilers write none, a hostile file may write a cycle.
const maxSigHops = 8

// node returns the type at key: cached, or made now (its fields filled in
// later, from the queue). A declaration that names its type by signature
// (DW_AT_signature, as GCC writes in place of a type moved to a type
// unit) is that type.
func (b *typeBuild) node(key typeKey) (dwarf.Type, error) {
	tr := b.tr
	var stubs []typeKey
	alias := func(t dwarf.Type) {
		for _, k := range stubs {
			tr.cache[k] = t
			b.made = append(b.made, k)
		}
	}
	var (
		e  *dwarf.Entry
		sp *typeSpace
	)
	for {
		if t, ok := tr.cache[key]; ok {
			alias(t)
			return t, nil
		}
		if err, ok := tr.failed[key]; ok {
			return nil, err
		}
		if err := tr.budget.charge(typeCost, "types"); err != nil {
			return nil, err
		}
		if sp = tr.spaces[key.space]; sp == nil {
			return nil, fmt.Errorf("no type at %s: %w", key, ErrMalformed)
		}
		sp.entries.Seek(key.off)
		var err error
		if e, err = sp.entries.Next(); err != nil {
			return nil, fmt.Errorf("reading the type at %s: %v: %w", key, err, ErrMalformed)
		}
		if e == nil || e.Offset != key.off {
			return nil, fmt.Errorf("no type at %s: %w", key, ErrMalformed)
		}
		sig, ok := e.Val(dwarf.AttrSignature).(uint64)
		if !ok {
			break
		}
		for i, k := range stubs {
			if k == key {
				return nil, fmt.Errorf("type units refer to each other in a cycle of %d declarations by signature: %w", len(stubs)-i, ErrMalformed)
			}
		}
		if len(stubs) >= maxSigHops {
			return nil, fmt.Errorf("over %d declarations by signature in a row: %w", maxSigHops, ErrMalformed)
		}
		stubs = append(stubs, key)
		if key, err = tr.sigType(sig); err != nil {
			return nil, fmt.Errorf("DIE at %s: %w", stubs[len(stubs)-1], err)
		}
	}
	lo, hi := uint64(0), uint64(1)<<63
	if sp.units != nil {
		u := unitAt(sp.units, key.off)
		if u == nil {
			return nil, fmt.Errorf("no type at %s: %w", key, ErrMalformed)
		}
		lo, hi = u.off, u.end
	}
	var err error
	var t dwarf.Type
	switch e.Tag {
	case dwarf.TagArrayType:
		t = new(dwarf.ArrayType)
	case dwarf.TagBaseType:
		if t, err = baseType(e); err != nil {
			return nil, err
		}
	case dwarf.TagClassType, dwarf.TagStructType, dwarf.TagUnionType:
		t = new(dwarf.StructType)
	case dwarf.TagConstType, dwarf.TagVolatileType, dwarf.TagRestrictType:
		t = new(dwarf.QualType)
	case dwarf.TagEnumerationType:
		t = new(dwarf.EnumType)
	case dwarf.TagPointerType:
		t = new(dwarf.PtrType)
	case dwarf.TagSubroutineType:
		t = new(dwarf.FuncType)
	case dwarf.TagTypedef:
		t = new(dwarf.TypedefType)
	case dwarf.TagUnspecifiedType:
		t = new(dwarf.UnspecifiedType)
	default:
		t = new(dwarf.UnsupportedType)
	}
	tr.cache[key] = t
	b.made = append(b.made, key)
	alias(t)
	b.queue = append(b.queue, typeRead{e: e, key: key, t: t, addrSize: sp.entries.AddressSize(), lo: lo, hi: hi})
	return t, nil
}

// baseType makes the type of a DW_TAG_base_type by its encoding.
func baseType(e *dwarf.Entry) (dwarf.Type, error) {
	enc, ok := e.Val(dwarf.AttrEncoding).(int64)
	if !ok {
		return nil, fmt.Errorf("base type at %#x: no encoding: %w", e.Offset, ErrMalformed)
	}
	switch enc {
	case 0x01: // DW_ATE_address
		return new(dwarf.AddrType), nil
	case 0x02: // DW_ATE_boolean
		return new(dwarf.BoolType), nil
	case 0x03: // DW_ATE_complex_float
		return new(dwarf.ComplexType), nil
	case 0x04: // DW_ATE_float
		return new(dwarf.FloatType), nil
	case 0x05: // DW_ATE_signed
		return new(dwarf.IntType), nil
	case 0x06: // DW_ATE_signed_char
		return new(dwarf.CharType), nil
	case 0x07: // DW_ATE_unsigned
		return new(dwarf.UintType), nil
	case 0x08: // DW_ATE_unsigned_char
		return new(dwarf.UcharType), nil
	}
	return nil, fmt.Errorf("base type at %#x: encoding %d: %w", e.Offset, enc, ErrMalformed)
}

// ref returns the type an entry of p's DIE (itself or a child) names by
// DW_AT_type: void when it names none.
func (b *typeBuild) ref(p typeRead, e *dwarf.Entry) (dwarf.Type, error) {
	switch v := e.Val(dwarf.AttrType).(type) {
	case dwarf.Offset:
		if uint64(v) < p.lo || uint64(v) >= p.hi {
			return nil, fmt.Errorf("DIE at %s names a type outside its type unit: %w", typeKey{p.key.space, e.Offset}, ErrMalformed)
		}
		return b.node(typeKey{p.key.space, v})
	case uint64:
		key, err := b.tr.sigType(v)
		if err != nil {
			return nil, fmt.Errorf("DIE at %s: %w", typeKey{p.key.space, e.Offset}, err)
		}
		return b.node(key)
	}
	return new(dwarf.VoidType), nil
}

// children calls fn for each direct child of e, as debug/dwarf reads
// them: a child with children of its own is skipped with them.
func (b *typeBuild) children(p typeRead, fn func(kid *dwarf.Entry) error) error {
	e := p.e
	if !e.Children {
		return nil
	}
	r := b.tr.spaces[p.key.space].kids
	r.Seek(e.Offset)
	if _, err := r.Next(); err != nil {
		return err
	}
	depth := 0
	for {
		kid, err := r.Next()
		if err != nil {
			return err
		}
		if kid == nil {
			return fmt.Errorf("children of DIE %#x: no terminator: %w", e.Offset, ErrMalformed)
		}
		if kid.Tag == 0 {
			if depth == 0 {
				return nil
			}
			depth--
			continue
		}
		if kid.Children {
			depth++
		}
		if depth > 0 {
			continue
		}
		if err := fn(kid); err != nil {
			return err
		}
	}
}

// fill fills in the fields of a type made by node.
func (b *typeBuild) fill(p typeRead) error {
	e := p.e
	var err error
	name, _ := e.Val(dwarf.AttrName).(string)
	switch t := p.t.(type) {
	case *dwarf.ArrayType:
		b.chained = append(b.chained, t)
		if t.Type, err = b.ref(p, e); err != nil {
			return err
		}
		t.StrideBitSize, _ = e.Val(dwarf.AttrStrideSize).(int64)
		var dims []int64
		err = b.children(p, func(kid *dwarf.Entry) error {
			switch kid.Tag {
			case dwarf.TagSubrangeType:
				if len(dims) >= maxTypeChain {
					return fmt.Errorf("array at %#x: over %d dimensions: %w", e.Offset, maxTypeChain, ErrMalformed)
				}
				count, ok := kid.Val(dwarf.AttrCount).(int64)
				if !ok {
					if count, ok = kid.Val(dwarf.AttrUpperBound).(int64); ok {
						count++
					} else if len(dims) == 0 {
						count = -1
					}
				}
				dims = append(dims, count)
			case dwarf.TagEnumerationType:
				return fmt.Errorf("array at %#x: an enumeration type as a bound: %w", e.Offset, ErrTooComplex)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(dims) == 0 {
			dims = []int64{-1}
		}
		t.Count = dims[0]
		for i := len(dims) - 1; i >= 1; i-- {
			inner := &dwarf.ArrayType{Type: t.Type, Count: dims[i]}
			b.chained = append(b.chained, inner)
			t.Type = inner
		}
	case *dwarf.StructType:
		switch e.Tag {
		case dwarf.TagClassType:
			t.Kind = "class"
		case dwarf.TagStructType:
			t.Kind = "struct"
		case dwarf.TagUnionType:
			t.Kind = "union"
		}
		t.StructName = name
		t.Incomplete = e.Val(dwarf.AttrDeclaration) != nil
		t.Field = make([]*dwarf.StructField, 0, 8)
		var (
			lastType     *dwarf.Type
			lastBitSize  int64
			lastByteOff  int64
			zeroLastType = func(at *dwarf.Type) {
				if at != nil {
					if _, ok := (*at).(*dwarf.ArrayType); ok {
						b.zeroArr = append(b.zeroArr, at)
					}
				}
			}
		)
		err = b.children(p, func(kid *dwarf.Entry) error {
			if kid.Tag != dwarf.TagMember {
				return nil
			}
			if err := b.tr.budget.charge(typeMemberCost, "struct members"); err != nil {
				return err
			}
			f := new(dwarf.StructField)
			var err error
			if f.Type, err = b.ref(p, kid); err != nil {
				return err
			}
			switch loc := kid.Val(dwarf.AttrDataMemberLoc).(type) {
			case []byte:
				r := reader{b: loc}
				if r.u8() != 0x23 { // DW_OP_plus_uconst
					return fmt.Errorf("member at %#x: location is not DW_OP_plus_uconst: %w", kid.Offset, ErrTooComplex)
				}
				f.ByteOffset = int64(r.uleb())
				if r.err != nil {
					return fmt.Errorf("member at %#x: %w", kid.Offset, r.err)
				}
			case int64:
				f.ByteOffset = loc
			}
			f.Name, _ = kid.Val(dwarf.AttrName).(string)
			f.ByteSize, _ = kid.Val(dwarf.AttrByteSize).(int64)
			var hasBitOff, hasDataBitOff bool
			f.BitOffset, hasBitOff = kid.Val(dwarf.AttrBitOffset).(int64)
			f.DataBitOffset, hasDataBitOff = kid.Val(dwarf.AttrDataBitOffset).(int64)
			if hasBitOff && hasDataBitOff {
				return fmt.Errorf("member at %#x: both bit offset attributes: %w", kid.Offset, ErrMalformed)
			}
			f.BitSize, _ = kid.Val(dwarf.AttrBitSize).(int64)
			t.Field = append(t.Field, f)
			if lastBitSize == 0 && lastByteOff == f.ByteOffset && t.Kind != "union" {
				zeroLastType(lastType) // the last member had no width: a zero-length array
			}
			lastType, lastByteOff, lastBitSize = &f.Type, f.ByteOffset, f.BitSize
			return nil
		})
		if err != nil {
			return err
		}
		if t.Kind != "union" {
			if size, ok := e.Val(dwarf.AttrByteSize).(int64); ok && size == lastByteOff {
				zeroLastType(lastType)
			}
		}
	case *dwarf.QualType:
		b.chained = append(b.chained, t)
		if t.Type, err = b.ref(p, e); err != nil {
			return err
		}
		switch e.Tag {
		case dwarf.TagConstType:
			t.Qual = "const"
		case dwarf.TagRestrictType:
			t.Qual = "restrict"
		case dwarf.TagVolatileType:
			t.Qual = "volatile"
		}
	case *dwarf.EnumType:
		t.EnumName = name
		t.Val = make([]*dwarf.EnumValue, 0, 8)
		err = b.children(p, func(kid *dwarf.Entry) error {
			if kid.Tag != dwarf.TagEnumerator {
				return nil
			}
			if err := b.tr.budget.charge(typeMemberCost, "enumerators"); err != nil {
				return err
			}
			v := new(dwarf.EnumValue)
			v.Name, _ = kid.Val(dwarf.AttrName).(string)
			v.Val, _ = kid.Val(dwarf.AttrConstValue).(int64)
			t.Val = append(t.Val, v)
			return nil
		})
		if err != nil {
			return err
		}
	case *dwarf.PtrType:
		if e.Val(dwarf.AttrType) == nil {
			t.Type = &dwarf.VoidType{}
		} else if t.Type, err = b.ref(p, e); err != nil {
			return err
		}
	case *dwarf.FuncType:
		if t.ReturnType, err = b.ref(p, e); err != nil {
			return err
		}
		t.ParamType = make([]dwarf.Type, 0, 8)
		err = b.children(p, func(kid *dwarf.Entry) error {
			var param dwarf.Type
			switch kid.Tag {
			case dwarf.TagFormalParameter:
				if err := b.tr.budget.charge(typeMemberCost, "parameters"); err != nil {
					return err
				}
				var err error
				if param, err = b.ref(p, kid); err != nil {
					return err
				}
			case dwarf.TagUnspecifiedParameters:
				param = &dwarf.DotDotDotType{}
			default:
				return nil
			}
			t.ParamType = append(t.ParamType, param)
			return nil
		})
		if err != nil {
			return err
		}
	case *dwarf.TypedefType:
		b.chained = append(b.chained, t)
		t.Name = name
		if t.Type, err = b.ref(p, e); err != nil {
			return err
		}
	case *dwarf.UnspecifiedType:
		t.Name = name
	case *dwarf.UnsupportedType:
		t.Tag = e.Tag
		t.Name = name
	default: // the base types
		bt := p.t.(interface{ Basic() *dwarf.BasicType }).Basic()
		if e.Val(dwarf.AttrEncoding) == int64(0x03) && name == "complex" {
			// clang names complex float and complex double "complex".
			switch size, _ := e.Val(dwarf.AttrByteSize).(int64); size {
			case 8:
				name = "complex float"
			case 16:
				name = "complex double"
			}
		}
		bt.Name = name
		bt.BitSize, _ = e.Val(dwarf.AttrBitSize).(int64)
		var hasBitOff, hasDataBitOff bool
		bt.BitOffset, hasBitOff = e.Val(dwarf.AttrBitOffset).(int64)
		bt.DataBitOffset, hasDataBitOff = e.Val(dwarf.AttrDataBitOffset).(int64)
		if hasBitOff && hasDataBitOff {
			return fmt.Errorf("base type at %#x: both bit offset attributes: %w", e.Offset, ErrMalformed)
		}
	}
	size, ok := e.Val(dwarf.AttrByteSize).(int64)
	if !ok {
		size = -1
		switch t := p.t.(type) {
		case *dwarf.TypedefType:
			b.typedefs = append(b.typedefs, t) // sized once its chain is checked
		case *dwarf.PtrType:
			size = int64(p.addrSize)
		}
	}
	p.t.Common().ByteSize = size
	return nil
}

// next returns the type a typedef, qualifier or array stands on, and
// whether t is one of those.
func chainNext(t dwarf.Type) (dwarf.Type, bool) {
	switch x := t.(type) {
	case *dwarf.TypedefType:
		return x.Type, true
	case *dwarf.QualType:
		return x.Type, true
	case *dwarf.ArrayType:
		return x.Type, true
	}
	return nil, false
}

// checkChains measures the typedef, qualifier and array chain from every
// new such type, in time linear in their number (lengths are remembered),
// and refuses a chain that cycles or exceeds maxTypeChain.
func (b *typeBuild) checkChains() error {
	chain := b.tr.chain
	onPath := map[dwarf.Type]bool{}
	for _, start := range b.chained {
		if _, ok := chain[start]; ok {
			continue
		}
		var path []dwarf.Type
		t := start
		base := 0
		for {
			if n, ok := chain[t]; ok {
				base = n
				break
			}
			next, isChain := chainNext(t)
			if !isChain {
				break
			}
			if onPath[t] {
				return fmt.Errorf("a %s refers back to itself through typedefs, qualifiers or arrays: %w", typeKind(t), ErrMalformed)
			}
			onPath[t] = true
			path = append(path, t)
			if len(path)+base > maxTypeChain {
				return fmt.Errorf("over %d typedefs, qualifiers and array dimensions in a row: %w", maxTypeChain, ErrMalformed)
			}
			t = next
		}
		if len(path)+base > maxTypeChain {
			return fmt.Errorf("over %d typedefs, qualifiers and array dimensions in a row: %w", maxTypeChain, ErrMalformed)
		}
		for i := len(path) - 1; i >= 0; i-- {
			base++
			chain[path[i]] = base
			delete(onPath, path[i])
		}
	}
	return nil
}

// typeKind names the kind of a type for messages, without following it.
func typeKind(t dwarf.Type) string {
	switch t.(type) {
	case *dwarf.TypedefType:
		return "typedef"
	case *dwarf.QualType:
		return "qualified type"
	case *dwarf.ArrayType:
		return "array type"
	case *dwarf.PtrType:
		return "pointer type"
	case *dwarf.StructType:
		return "struct type"
	}
	return "type"
}
