package debuginfo

import (
	"bytes"
	"compress/zlib"
	"context"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"testing"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil/hostile"
)

// typeGraph writes types from spec, two bytes per type: its kind
// (typedef, const, pointer, base, struct with one member, declaration by
// signature) and the index of the type it refers to, so that any graph,
// cycles included, can be written. With units type units (DWARF 5 ones
// in .debug_info with v5, else DWARF 4 ones in .debug_types), type i
// lives in unit i%(units+1), unit 0 being the compile unit and unit u
// the type unit of signature u whose type is its first: a reference
// within a unit is by offset, across units by the signature of the
// other unit (the compile unit has none, nor has 0xbad, which a
// reference byte of 0xf8 or more names). It returns the sections and the
// offsets in .debug_info of the compile unit's types.
func typeGraph(spec []byte, units int, v5 bool) (info, types []byte, offs []uint32) {
	const maxTypes = 256
	n := min(len(spec)/2, maxTypes)
	if n == 0 {
		return nil, nil, nil
	}
	unitOf := func(i int) int { return i % (units + 1) }
	// Each type's kind and, for those that refer, its target: a type in
	// its own unit (by offset), or a signature.
	type ref struct {
		local int // -1: by signature sig
		sig   uint64
	}
	kinds := make([]int, n)
	refs := make([]ref, n)
	for i := range n {
		kinds[i] = int(spec[2*i]) % 6
		b := spec[2*i+1]
		j := int(b) % n
		switch {
		case b >= 0xf8:
			refs[i] = ref{local: -1, sig: 0xbad}
		case kinds[i] == 5 || unitOf(j) != unitOf(i):
			refs[i] = ref{local: -1, sig: uint64(unitOf(j))}
		default:
			refs[i] = ref{local: j}
		}
	}
	// The size of each DIE as Unit writes it (names "t", "b", "s",
	// member "f0"), by offset and by signature.
	size := func(i int) uint32 {
		bySig := refs[i].local < 0
		switch kinds[i] {
		case 0:
			return map[bool]uint32{false: 7, true: 11}[bySig]
		case 1:
			return map[bool]uint32{false: 5, true: 9}[bySig]
		case 2:
			return map[bool]uint32{false: 6, true: 10}[bySig]
		case 3:
			return 5
		case 4:
			return map[bool]uint32{false: 20, true: 24}[bySig]
		}
		return 11
	}
	cu := hostile.NewUnit(0x1000, 0x10)
	us := []*hostile.Unit{cu}
	var tus []*hostile.TypeUnit
	for u := 1; u <= units; u++ {
		tu := hostile.NewTypeUnit(uint64(u))
		if v5 {
			tu = hostile.NewTypeUnit5(uint64(u))
		}
		tus = append(tus, tu)
		us = append(us, &tu.Unit)
	}
	at := make([]uint32, len(us))
	for u := range us {
		at[u] = us[u].Next()
	}
	dieOff := make([]uint32, n)
	for i := range n {
		dieOff[i] = at[unitOf(i)]
		at[unitOf(i)] += size(i)
	}
	for i := range n {
		u, r := us[unitOf(i)], refs[i]
		switch kinds[i] {
		case 0:
			if r.local < 0 {
				u.TypedefSig("t", r.sig)
			} else {
				u.Typedef("t", dieOff[r.local])
			}
		case 1:
			if r.local < 0 {
				u.ConstSig(r.sig)
			} else {
				u.Const(dieOff[r.local])
			}
		case 2:
			if r.local < 0 {
				u.PointerSig(r.sig)
			} else {
				u.Pointer(dieOff[r.local])
			}
		case 3:
			u.Base("b", 8)
		case 4:
			if r.local < 0 {
				u.StructSig("s", 8, r.sig)
			} else {
				u.Struct("s", 8, dieOff[r.local])
			}
		case 5:
			u.DeclSig("s", r.sig)
		}
		if unitOf(i) == 0 {
			offs = append(offs, dieOff[i])
		}
	}
	info = cu.Info()
	for _, tu := range tus {
		if tu.Next() == hostile.FirstType(v5) {
			tu.Base("b", 8) // a unit with no type of the spec
		}
		if v5 {
			info = append(info, tu.Info()...)
		} else {
			types = append(types, tu.Info()...)
		}
	}
	return info, types, offs
}

// FuzzTypeGraph reads every type of a graph of typedefs, qualifiers,
// pointers, structs and declarations by signature with arbitrary
// references (cycles included), across type units (DWARF 4 .debug_types
// or DWARF 5 type units, see typeGraph) that name each other by
// signature, in cycles, or name signatures no unit has: each is read or
// refused, and the Size and name of every type read are computed without
// unbounded recursion (a stack overflow would end the fuzzer).
func FuzzTypeGraph(f *testing.F) {
	f.Add([]byte{0, 0}, uint8(0))             // a typedef of itself
	f.Add([]byte{1, 0}, uint8(0))             // a const of itself
	f.Add([]byte{2, 0}, uint8(0))             // a pointer to itself
	f.Add([]byte{0, 1, 1, 0}, uint8(0))       // typedef <-> const
	f.Add([]byte{4, 1, 2, 0}, uint8(0))       // struct whose member points to it
	f.Add([]byte{0, 1, 0, 2, 3, 0}, uint8(0)) // typedef, typedef, base
	f.Add([]byte{0, 1, 0, 2, 0, 1}, uint8(2)) // typedefs across two type units in a cycle
	f.Add([]byte{5, 1, 5, 2, 5, 1}, uint8(6)) // declarations by signature in a cycle (DWARF 5)
	f.Add([]byte{2, 1, 4, 2, 2, 1}, uint8(2)) // a struct and pointers across units, in a cycle
	f.Add([]byte{2, 0xff, 3, 0}, uint8(1))    // a missing signature
	f.Fuzz(func(t *testing.T, spec []byte, units uint8) {
		info, types, offs := typeGraph(spec, int(units%4), units&4 != 0)
		if info == nil {
			return
		}
		raw := map[string]*[]byte{}
		for _, name := range dwarfSections {
			raw[name] = new([]byte)
		}
		*raw[".debug_abbrev"], *raw[".debug_info"], *raw[".debug_types"] = hostile.Abbrev(), info, types
		b := &budget{limit: 1 << 20}
		us, err := parseUnits(info, binary.LittleEndian, b)
		if err != nil {
			t.Fatal(err)
		}
		d, err := newDWARF(raw, us, binary.LittleEndian, b)
		if err != nil {
			t.Fatal(err)
		}
		tr := newTypeReader(d, b)
		tr.indexTypeUnits(us, raw, binary.LittleEndian)
		if tr.sigsErr != nil {
			t.Fatalf("type units not read: %v", tr.sigsErr)
		}
		var read []dwarf.Type
		for _, off := range offs {
			if typ, err := tr.typeAt(dwarf.Offset(off)); err == nil {
				read = append(read, typ)
			}
		}
		for sig := range uint64(units%4) + 2 {
			if typ, err := tr.typeOf(sig); err == nil {
				read = append(read, typ)
			}
		}
		for _, typ := range read {
			_ = typeSize(typ)
			_ = typeName(typ)
			_ = describeType(typ)
			_ = isCharType(typ)
		}
	})
}

// FuzzCompressedSections opens a file whose .debug_info is a compressed
// section with a header that may lie (declared size) over a stream that
// may not be zlib, within a small budget: it is read or refused, and
// never takes more than the budget.
func FuzzCompressedSections(f *testing.F) {
	u := hostile.NewUnit(0x1000, 0x10)
	u.Function("work", 0x1000, 0x10, "x", u.Base("long", 8), 3)
	info := u.Info()
	f.Add(info, uint32(len(info)), true)
	f.Add(info, uint32(1<<30), true)
	f.Add(info, uint32(4), true)
	f.Add([]byte{0x78, 0x9c, 0x03, 0x00}, uint32(100), false)
	f.Fuzz(func(t *testing.T, payload []byte, declared uint32, compress bool) {
		raw := payload
		if compress {
			var buf bytes.Buffer
			w := zlib.NewWriter(&buf)
			_, _ = w.Write(payload)
			_ = w.Close()
			raw = buf.Bytes()
		}
		file, err := hostile.AppendSections(hostile.MinimalELF(),
			hostile.Section{Name: ".debug_abbrev", Type: elf.SHT_PROGBITS, Data: hostile.Abbrev()},
			hostile.CompressedRaw(".debug_info", raw, uint64(declared)))
		if err != nil {
			t.Fatal(err)
		}
		ef, err := elf.NewFile(bytes.NewReader(file))
		if err != nil {
			t.Fatal(err)
		}
		const limit = 1 << 20
		before := allocated()
		fl, err := OpenELF(context.Background(), "fuzz", ef, Options{DebugDirs: []string{}, MaxBytes: limit})
		if err != nil {
			return
		}
		defer fl.Close()
		if fl.budget.used > limit {
			t.Fatalf("budget: %d bytes used of %d", fl.budget.used, limit)
		}
		if fns, err := fl.Functions(); err == nil {
			for _, fn := range fns {
				if s, err := fl.Scope(fn, 0, SiteEntry); err == nil {
					for _, v := range s.Vars {
						_ = typeName(v.Type)
					}
				}
			}
		}
		if got := allocated() - before; got > 16*limit {
			t.Fatalf("%d bytes allocated with a budget of %d", got, limit)
		}
	})
}
