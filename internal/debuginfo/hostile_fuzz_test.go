package debuginfo

import (
	"bytes"
	"compress/zlib"
	"context"
	"debug/dwarf"
	"debug/elf"
	"testing"

	"github.com/otel-uprobe/uprobereceiver/internal/testutil/hostile"
)

// typeGraph writes a unit of types from spec, two bytes per type: its
// kind (typedef, const, pointer, base, struct with one member) and the
// index of the type it refers to, so that any graph, cycles included, can
// be written. It returns the unit and the offsets of its types.
func typeGraph(spec []byte) (*hostile.Unit, []uint32) {
	const maxTypes = 256
	n := min(len(spec)/2, maxTypes)
	if n == 0 {
		return nil, nil
	}
	// The size of each kind's DIE as Unit writes it (names "t", "b", "s",
	// member "f0").
	sizes := []uint32{7, 5, 6, 5, 20}
	u := hostile.NewUnit(0x1000, 0x10)
	offs := make([]uint32, n)
	at := u.Next()
	for i := range n {
		offs[i] = at
		at += sizes[int(spec[2*i])%len(sizes)]
	}
	for i := range n {
		ref := offs[int(spec[2*i+1])%n]
		switch int(spec[2*i]) % len(sizes) {
		case 0:
			u.Typedef("t", ref)
		case 1:
			u.Const(ref)
		case 2:
			u.Pointer(ref)
		case 3:
			u.Base("b", 8)
		case 4:
			u.Struct("s", 8, ref)
		}
	}
	return u, offs
}

// FuzzTypeGraph reads every type of a graph of typedefs, qualifiers,
// pointers and structs with arbitrary references (cycles included): each
// is read or refused, and the Size and name of every type read are
// computed without unbounded recursion (a stack overflow would end the
// fuzzer).
func FuzzTypeGraph(f *testing.F) {
	f.Add([]byte{0, 0})             // a typedef of itself
	f.Add([]byte{1, 0})             // a const of itself
	f.Add([]byte{2, 0})             // a pointer to itself
	f.Add([]byte{0, 1, 1, 0})       // typedef <-> const
	f.Add([]byte{4, 1, 2, 0})       // struct whose member points to it
	f.Add([]byte{0, 1, 0, 2, 3, 0}) // typedef, typedef, base
	f.Fuzz(func(t *testing.T, spec []byte) {
		u, offs := typeGraph(spec)
		if u == nil {
			return
		}
		d, err := dwarf.New(hostile.Abbrev(), nil, nil, u.Info(), nil, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		b := &budget{limit: 1 << 20}
		tr := newTypeReader(d, b)
		for _, off := range offs {
			typ, err := tr.typeAt(dwarf.Offset(off))
			if err != nil {
				continue
			}
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
