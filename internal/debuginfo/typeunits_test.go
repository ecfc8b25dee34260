package debuginfo

import (
	"context"
	"debug/elf"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/harness/testutil/hostile"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
)

// srcBuilds are the type-unit fixtures: typeunits.c by gcc (as C), g++
// and clang++ (as C++), prog.c by gcc and prog.cc by g++ and clang++,
// each at DWARF 4 and 5 ("NAME-dwarfV"), and the same with
// -fdebug-types-section ("NAME-dwarfV-types").
var srcBuilds = typeUnitBuilds()

func typeUnitBuilds() map[string]srcBuild {
	gcc, gxx, clangxx := []string{"gcc"}, []string{"g++"}, []string{"clang++-14", "clang++"}
	cxx := []string{"-x", "c++"}
	m := map[string]srcBuild{}
	for _, c := range []struct {
		name  string
		cc    []string
		src   string
		flags []string
	}{
		{"tu-gcc-O0", gcc, "typeunits.c", []string{"-O0"}},
		{"tu-gcc-O2", gcc, "typeunits.c", []string{"-O2"}},
		{"tu-g++-O2", gxx, "typeunits.c", append(cxx, "-O2")},
		{"tu-clang++-O2", clangxx, "typeunits.c", append(cxx, "-O2")},
		{"prog-gcc-O2", gcc, "prog.c", []string{"-O2"}},
		{"prog-g++-O1", gxx, "prog.cc", []string{"-O1"}},
		{"prog-clang++-O1", clangxx, "prog.cc", []string{"-O1"}},
	} {
		for _, v := range []string{"4", "5"} {
			flags := append(append([]string{}, c.flags...), "-gdwarf-"+v)
			m[c.name+"-dwarf"+v] = srcBuild{cc: c.cc, src: c.src, flags: flags}
			m[c.name+"-dwarf"+v+"-types"] = srcBuild{cc: c.cc, src: c.src, flags: append(flags, "-fdebug-types-section")}
		}
	}
	return m
}

// tuGolden are the paths of typeunits.c: members of structs behind
// pointers and typedefs, nested, anonymous and by-value structs, a union,
// enums, arrays (of structs, of two dimensions), a global, a returned
// pointer, and refusals that list fields.
var tuGolden = []goldenCase{
	{"handle", SiteEntry, "", []string{
		"$req", "$req->id", "$req->path", "$req->path[1]", "$req->hdr", "$req->hdr->len", "$req->hdr->name",
		"$req->port", "$req->color", "$req->inline_hdr.len", "$req->inline_hdr.name", "$req->codes[3]",
		"$req->hdrs[1].len", "$req->hdrs[1].name", "$req->pos.y", "$req->num.l", "$req->num.i",
		"$req->next", "$req->next->next->id", "$req->grid[1][2]", "$other", "$other->hdr->name", "$other->color",
		"$c", "$pt.x", "$pt.y", "$n", "$$params", "$global_req.id", "$global_req.hdrs[0].len", "$global_req.next->port",
		// Refusals.
		"$req->nope", "$req->inline_hdr", "$req->codes", "$req->codes[4]", "$req->num", "$req->pos", "$c.x",
		"$req->grid[1]", "$pt", "$other->hdr->nope",
	}},
	{"handle", SiteReturn, "", []string{"$return"}},
	{"pick", SiteEntry, "", []string{"$req->hdrs[0].name", "$which", "$$params"}},
	{"pick", SiteReturn, "", []string{"$return", "$return->len", "$return->name", "$return->nope"}},
}

// typeUnitCount returns how many type units a file has, as readelf counts
// them: DWARF 4 units of .debug_types and DWARF 5 DW_UT_type units.
func typeUnitCount(t *testing.T, path string) int {
	t.Helper()
	out, err := exec.Command(requireTool(t, "readelf"), "--debug-dump=info", path).Output()
	require.NoError(t, err)
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "Signature:") {
			n++
		}
	}
	return n
}

// Types that live in type units (-fdebug-types-section: .debug_types at
// DWARF 4, DW_UT_type units at DWARF 5, named by DW_FORM_ref_sig8 and by
// declarations with DW_AT_signature) compile to exactly what the same
// program built without type units compiles to: structs behind pointers
// and typedefs, nested and anonymous structs, unions, enums, arrays,
// globals, results, C++ classes in namespaces; from gcc, g++ and clang++.
// Before, such types were refused ("types in DWARF 4 type units are not
// read") or dropped.
func TestTypeUnits(t *testing.T) {
	for _, c := range []struct {
		build string
		cases []goldenCase
		src   string
	}{
		{"tu-gcc-O0", tuGolden, "typeunits.c"}, {"tu-gcc-O2", tuGolden, "typeunits.c"},
		{"tu-g++-O2", tuGolden, "typeunits.c"}, {"tu-clang++-O2", tuGolden, "typeunits.c"},
		{"prog-gcc-O2", cGolden, "prog.c"}, {"prog-g++-O1", cppGolden, "prog.cc"},
		{"prog-clang++-O1", cppGolden, "prog.cc"},
	} {
		for _, v := range []string{"dwarf4", "dwarf5"} {
			t.Run(c.build+"-"+v, func(t *testing.T) {
				plain := fixture(t, c.build+"-"+v)
				types := fixture(t, c.build+"-"+v+"-types")
				require.Zero(t, typeUnitCount(t, plain))
				require.NotZero(t, typeUnitCount(t, types), "-fdebug-types-section made no type unit")
				want := strings.ReplaceAll(goldenText(t, plain, c.cases, c.src), filepath.Base(plain), "$BIN")
				got := strings.ReplaceAll(goldenText(t, types, c.cases, c.src), filepath.Base(types), "$BIN")
				require.NotContains(t, want, "type unit")
				require.Equal(t, want, got)
			})
		}
	}
}

// compileXWith is compileX with options: the path that reads the type of
// work's parameter x in a file made by hostile.WithTypeUnits.
func compileXWith(t *testing.T, path string, opts Options) (Access, error) {
	t.Helper()
	opts.DebugDirs = []string{}
	f, err := Open(context.Background(), path, opts)
	if err != nil {
		return Access{}, err
	}
	defer f.Close()
	fn, err := f.Function("work")
	require.NoError(t, err, "a bad type unit leaves the rest of the file readable")
	s, err := f.Scope(fn, 0, SiteEntry)
	if err != nil {
		return Access{}, err
	}
	p, err := fetch.ParsePath("$x->f0->f0->f0")
	require.NoError(t, err)
	return s.Compile(p)
}

// Hostile type units, at DWARF 4 (.debug_types) and 5 (DW_UT_type units
// of .debug_info): signatures that refer to each other in a cycle (through
// typedefs, or declarations whose type is a declaration again) are
// refused with a sentence, and through pointers read (a pointer is a
// pointer); a reference to a signature no unit has, a reference out of a
// type unit and a type offset outside its unit are refused; a
// 1,000,000-long chain of signatures is refused by the budget, or within
// a larger one walked without recursion and refused at 64 typedefs in a
// row; a bomb of 2,000,000 type units (a 64 MB section, 4 MB compressed)
// is refused before anything is decoded, and the rest of the file is
// still read. Each in well under 2 s of CPU (the walk of a million units
// in 5). Before, every type in a type unit was refused, and a declaration
// by signature was an empty struct.
func TestHostileTypeUnits(t *testing.T) {
	prog := hostile.Program(t)
	bomb, err := hostile.Compressed(".debug_types", hostile.TypeUnitBomb(2_000_000, false), 0)
	require.NoError(t, err)
	// unit writes a type unit of either version.
	unit := func(v5 bool, sig uint64) *hostile.TypeUnit {
		if v5 {
			return hostile.NewTypeUnit5(sig)
		}
		return hostile.NewTypeUnit(sig)
	}
	type hostileCase struct {
		name  string
		typ   func(u *hostile.Unit) uint32
		units func(v5 bool) []*hostile.TypeUnit
		extra []hostile.Section
		opts  Options
		want  string // "" for a readable type: $x->f0->f0->f0
		is    error
		cpu   time.Duration // the bound on CPU time, 2 s when 0
		mem   uint64        // the bound on bytes allocated, none when 0
	}
	cases := []hostileCase{
		{name: "typedefs by signature in a cycle",
			typ: func(u *hostile.Unit) uint32 { return u.TypedefSig("x", 1) },
			units: func(v5 bool) []*hostile.TypeUnit {
				a, b := unit(v5, 1), unit(v5, 2)
				a.TypedefSig("a", 2)
				b.TypedefSig("b", 1)
				return []*hostile.TypeUnit{a, b}
			}, want: "a typedef refers back to itself", is: ErrMalformed},
		{name: "declarations by signature in a cycle",
			typ: func(u *hostile.Unit) uint32 { return u.Pointer(u.DeclSig("s", 1)) },
			units: func(v5 bool) []*hostile.TypeUnit {
				a, b := unit(v5, 1), unit(v5, 2)
				a.DeclSig("a", 2)
				b.DeclSig("b", 1)
				return []*hostile.TypeUnit{a, b}
			}, want: "type units refer to each other in a cycle of 2 declarations by signature", is: ErrMalformed},
		{name: "structs pointing to each other by signature",
			typ: func(u *hostile.Unit) uint32 { return u.PointerSig(1) },
			units: func(v5 bool) []*hostile.TypeUnit {
				a, b := unit(v5, 1), unit(v5, 2)
				a.StructSig("a", 8, 3)
				b.StructSig("b", 8, 4)
				pa, pb := unit(v5, 3), unit(v5, 4)
				pa.PointerSig(2)
				pb.PointerSig(1)
				return []*hostile.TypeUnit{a, b, pa, pb}
			}},
		{name: "a missing signature",
			typ:   func(u *hostile.Unit) uint32 { return u.PointerSig(0xdead) },
			units: func(v5 bool) []*hostile.TypeUnit { u := unit(v5, 1); u.Base("long", 8); return []*hostile.TypeUnit{u} },
			want:  "no type unit has signature 0xdead", is: ErrMalformed},
		{name: "a reference out of its type unit",
			typ: func(u *hostile.Unit) uint32 { return u.PointerSig(1) },
			units: func(v5 bool) []*hostile.TypeUnit {
				u := unit(v5, 1)
				u.Pointer(1 << 20)
				return []*hostile.TypeUnit{u}
			}},
		{name: "a type offset outside its unit",
			typ: func(u *hostile.Unit) uint32 { return u.PointerSig(1) },
			units: func(v5 bool) []*hostile.TypeUnit {
				u := unit(v5, 1)
				u.Base("long", 8)
				u.SetType(1 << 20)
				return []*hostile.TypeUnit{u}
			}, want: "the offset of its type, 0x100000, is outside the unit", is: ErrMalformed},
	}
	for _, v5 := range []bool{false, true} {
		for _, c := range cases {
			name := c.name + map[bool]string{false: " (DWARF 4)", true: " (DWARF 5)"}[v5]
			t.Run(name, func(t *testing.T) {
				units := c.units(v5)
				if c.name == "a reference out of its type unit" {
					if v5 {
						// .debug_info is one space: the DIE is not there.
						c.want, c.is = "reading the type at 0x100055: offset out of range", ErrMalformed
					} else {
						c.want, c.is = "names a type outside its type unit", ErrMalformed
					}
				}
				path := hostile.WithTypeUnits(t, prog, c.typ, units)
				checkHostile(t, path, c.opts, c.want, c.is, c.cpu, c.mem)
			})
		}
	}
	for _, c := range []hostileCase{
		{name: "1,000,000-long chain of pointers by signature",
			typ: func(u *hostile.Unit) uint32 { return u.PointerSig(1) },
			extra: []hostile.Section{{Name: ".debug_types", Type: elf.SHT_PROGBITS,
				Data: hostile.TypeUnitChain(1_000_000, 1, false)}},
			want: "1000000 type units: 256000000 bytes with the", is: ErrOverBudget,
			mem: (37 + 16) << 20}, // the section and little more
		{name: "1,000,000-long chain of typedefs by signature, in a 1 GiB budget",
			typ: func(u *hostile.Unit) uint32 { return u.PointerSig(1) },
			extra: []hostile.Section{{Name: ".debug_types", Type: elf.SHT_PROGBITS,
				Data: hostile.TypeUnitChain(1_000_000, 1, true)}},
			opts: Options{MaxBytes: 1 << 30},
			want: "over 64 typedefs, qualifiers and array dimensions in a row", is: ErrMalformed,
			cpu: 5 * time.Second}, // linear: about 2 µs per unit read
		{name: "2,000,000 type units",
			typ:   func(u *hostile.Unit) uint32 { return u.PointerSig(1) },
			extra: []hostile.Section{bomb},
			want:  "2000000 type units: 512000000 bytes with the", is: ErrOverBudget,
			mem: (61 + 16) << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := hostile.WithTypeUnits(t, prog, c.typ, nil, c.extra...)
			checkHostile(t, path, c.opts, c.want, c.is, c.cpu, c.mem)
		})
	}
	// DWARF 5 type units are units of .debug_info: a bomb of them refuses
	// the file, as any bomb of units there does, before debug/dwarf reads
	// their headers.
	t.Run("2,000,000 DWARF 5 type units", func(t *testing.T) {
		addr, size, err := hostile.Symbol(prog, "work")
		require.NoError(t, err)
		u := hostile.NewUnit(addr, size)
		u.Function("work", addr, size, "x", u.PointerSig(1), 0)
		info, err := hostile.Compressed(".debug_info", append(u.Info(), hostile.TypeUnitBomb(2_000_000, true)...), 0)
		require.NoError(t, err)
		path := filepath.Join(t.TempDir(), "bomb5")
		require.NoError(t, hostile.AddSections(prog, path,
			hostile.Section{Name: ".debug_abbrev", Type: elf.SHT_PROGBITS, Data: hostile.Abbrev()}, info))
		before := allocated()
		start := cpuTime(t)
		_, err = Open(context.Background(), path, Options{DebugDirs: []string{}})
		took, alloc := cpuTime(t)-start, allocated()-before
		t.Logf("%v; %v of CPU, %d MB allocated", err, took, alloc>>20)
		require.Error(t, err)
		assert.ErrorIs(t, err, ErrOverBudget)
		assert.Contains(t, err.Error(), "over the 134217728-byte budget of one file's debuginfo")
		assert.Less(t, took, 2*time.Second)
		assert.Less(t, alloc, uint64(64+16)<<20, "the section and little more")
	})
}

// checkHostile compiles $x->f0->f0->f0 in a hostile file: it is read (want
// "") or refused with want, within cpu of CPU time and mem bytes
// allocated.
func checkHostile(t *testing.T, path string, opts Options, want string, is error, cpu time.Duration, mem uint64) {
	t.Helper()
	if cpu == 0 {
		cpu = 2 * time.Second
	}
	before := allocated()
	start := cpuTime(t)
	a, err := compileXWith(t, path, opts)
	took := cpuTime(t) - start
	alloc := allocated() - before
	// CPU time, not wall time: the machine may be shared.
	assert.Less(t, took, cpu, "refused or read fast")
	if mem > 0 {
		assert.Less(t, alloc, mem, "bytes allocated")
	}
	t.Logf("%v; %v of CPU, %d MB allocated", err, took, alloc>>20)
	if want == "" {
		require.NoError(t, err)
		assert.Equal(t, "+0(+0(+0(%rdi))):x64", a.String())
		return
	}
	require.Error(t, err)
	assert.Contains(t, err.Error(), want)
	assert.ErrorIs(t, err, is)
}

// Split DWARF (-gsplit-dwarf, DWARF 4 with GCC's DW_AT_GNU_dwo_name and
// DWARF 5 skeleton units) is not read: the file's own DWARF is skeletons
// whose DIEs are in .dwo files. A function or line looked up in such a
// file is refused with that reason, not a bare "not found".
func TestSplitDWARF(t *testing.T) {
	requireTool(t, "gcc")
	for _, version := range []string{"-gdwarf-4", "-gdwarf-5"} {
		t.Run(version, func(t *testing.T) {
			dir := t.TempDir()
			bin := filepath.Join(dir, "prog")
			run(t, dir, nil, "gcc", "-O2", version, "-gsplit-dwarf", "-o", bin, testutil.Testdata("debuginfo", "prog.c"))
			f := open(t, bin)
			_, err := f.Function("handle_request")
			require.ErrorIs(t, err, ErrNotFound)
			assert.Contains(t, err.Error(), `(its DWARF is split, -gsplit-dwarf: 1 skeleton units whose DWARF is in .dwo files such as "`+bin+`.dwo", which are not read; build without -gsplit-dwarf)`)
			_, err = f.Lines("prog.c", markerLine(t, "prog.c", "total"))
			require.ErrorIs(t, err, ErrNotFound)
			assert.Contains(t, err.Error(), "its DWARF is split")
		})
	}
}
