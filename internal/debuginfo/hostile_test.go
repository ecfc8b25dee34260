package debuginfo

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil/hostile"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
)

// compileX opens a file made by hostile.WithType and compiles $x at the
// entry of work: the path that reads x's type.
func compileX(t *testing.T, path string) (Access, error) {
	t.Helper()
	f, err := Open(context.Background(), path, Options{DebugDirs: []string{}})
	if err != nil {
		return Access{}, err
	}
	defer f.Close()
	fn, err := f.Function("work")
	require.NoError(t, err)
	s, err := f.Scope(fn, 0, SiteEntry)
	if err != nil {
		return Access{}, err
	}
	p, err := fetch.ParsePath("$x")
	require.NoError(t, err)
	return s.Compile(p)
}

// Types that refer to themselves, and chains deep enough to overflow any
// recursion, are refused with a sentence (or read, for a pointer to
// itself, which is a pointer): never a stack overflow, which no recover
// catches and which took the collector down with every restart. The
// 100,000-long typedef chain took 25 s (quadratic) before.
func TestHostileTypes(t *testing.T) {
	prog := hostile.Program(t)
	const typedefSize = 7 // a typedef named "t": code, name, ref4
	for _, tc := range []struct {
		name string
		typ  func(u *hostile.Unit) uint32
		want string // "" for a readable type
		is   error
	}{
		{name: "typedef of itself", typ: func(u *hostile.Unit) uint32 { return u.Typedef("t", u.Next()) },
			want: "a typedef refers back to itself", is: ErrMalformed},
		{name: "const of itself", typ: func(u *hostile.Unit) uint32 { return u.Const(u.Next()) },
			want: "a qualified type refers back to itself", is: ErrMalformed},
		{name: "typedef of a const of the typedef", typ: func(u *hostile.Unit) uint32 {
			at := u.Next()
			u.Typedef("t", at+typedefSize)
			u.Const(at)
			return at
		}, want: "refers back to itself", is: ErrMalformed},
		{name: "anonymous pointer to itself", typ: func(u *hostile.Unit) uint32 { return u.Pointer(u.Next()) }},
		{name: "struct whose member points to it", typ: func(u *hostile.Unit) uint32 {
			at := u.Next()
			ptr := at + 1 + 2 + 4 + (1 + 3 + 4 + 4) + 1 // the struct "s", one member, its end
			u.Struct("s", 8, ptr)
			return u.Pointer(at)
		}},
		{name: "1,000,000-deep pointer chain", typ: func(u *hostile.Unit) uint32 {
			return u.PointerChain(1_000_000, u.Base("long", 8))
		}, want: "over the 134217728-byte budget of one file's debuginfo (max_debuginfo_bytes)", is: ErrOverBudget},
		{name: "100,000-long typedef chain", typ: func(u *hostile.Unit) uint32 {
			return u.TypedefChain(100_000, u.Base("long", 8))
		}, want: "over 64 typedefs, qualifiers and array dimensions in a row", is: ErrMalformed},
		{name: "64-long typedef chain", typ: func(u *hostile.Unit) uint32 {
			return u.TypedefChain(64, u.Base("long", 8))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := hostile.WithType(t, prog, tc.typ)
			start := cpuTime(t)
			a, err := compileX(t, path)
			took := cpuTime(t) - start
			// CPU time, not wall time: the machine may be shared.
			assert.Less(t, took, 2*time.Second, "refused or read fast")
			if tc.want == "" {
				require.NoError(t, err)
				assert.Equal(t, "%rdi", a.String()[:4])
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.ErrorIs(t, err, tc.is)
			t.Logf("%v (%v)", err, took)
		})
	}
}

// A compressed-section bomb (a section of about a megabyte that declares
// 1 GiB of zeros; then three of them) is refused before anything is
// decompressed: the budget is one for all sections of a file, checked
// against their declared sizes. It took the collector to 3.1 GiB (5.6 GiB
// with three), .debug_info being decompressed twice.
func TestCompressedSectionBombs(t *testing.T) {
	prog := hostile.Program(t)
	long := func(u *hostile.Unit) uint32 { return u.Base("long", 8) }
	bomb, err := hostile.Compressed(".debug_str", nil, 1<<30)
	require.NoError(t, err)
	for _, names := range [][]string{{".debug_str"}, {".debug_str", ".debug_line", ".debug_ranges"}} {
		t.Run(names[len(names)-1], func(t *testing.T) {
			var bombs []hostile.Section
			for _, name := range names {
				s := bomb
				s.Name = name
				bombs = append(bombs, s)
			}
			path := hostile.WithType(t, prog, long, bombs...)
			before := allocated()
			_, err := compileX(t, path)
			alloc := allocated() - before
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrOverBudget)
			assert.Contains(t, err.Error(), "once decompressed, over the 134217728-byte budget of one file's debuginfo (max_debuginfo_bytes)")
			assert.Less(t, alloc, uint64(16<<20), "allocated while refusing")
			t.Logf("%v; %d bytes allocated", err, alloc)
		})
	}
	// Under the budget, a bomb is read once: at most what it declares.
	s, err := hostile.Compressed(".debug_str", nil, 64<<20)
	require.NoError(t, err)
	path := hostile.WithType(t, prog, long, s)
	before := allocated()
	_, err = compileX(t, path)
	require.NoError(t, err)
	alloc := allocated() - before
	assert.Less(t, alloc, uint64(64<<20+16<<20), "one copy of the section")
}

// cpuTime returns the CPU time the test binary has used.
func cpuTime(t *testing.T) time.Duration {
	var ru unix.Rusage
	require.NoError(t, unix.Getrusage(unix.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// allocated returns the bytes allocated so far by the test binary.
func allocated() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

// DIEs nested 20,000,000 deep (40 MB of .debug_info) are skipped without
// recursion: debug/dwarf's SkipChildren recursed once per level, a fatal
// stack overflow.
func TestDeeplyNestedDIEs(t *testing.T) {
	prog := hostile.Program(t)
	addr, size, err := hostile.Symbol(prog, "work")
	require.NoError(t, err)
	u := hostile.NewUnit(addr, size)
	long := u.Base("long", 8)
	u.Function("work", addr, size, "x", long, 20_000_000)
	path := t.TempDir() + "/nested"
	require.NoError(t, hostile.AddSections(prog, path, hostile.DWARFSections(u)...))
	f, err := Open(context.Background(), path, Options{DebugDirs: []string{}})
	require.NoError(t, err)
	defer f.Close()
	fn, err := f.Function("work")
	require.NoError(t, err)
	assert.Equal(t, addr, fn.Entry)
	s, err := f.Scope(fn, 0, SiteEntry)
	require.NoError(t, err)
	require.Len(t, s.Vars, 1)
	_, err = f.Scope(fn, addr+1, SiteLine)
	assert.ErrorContains(t, err, "scopes nested over 64 deep")
}

// A DWARF 5 line program whose header declares a billion files in a few
// bytes is refused before debug/dwarf allocates them (16 GB up front).
func TestLineHeaderBomb(t *testing.T) {
	prog := hostile.Program(t)
	addr, size, err := hostile.Symbol(prog, "work")
	require.NoError(t, err)
	u := hostile.NewUnitWithLines(addr, size)
	u.Function("work", addr, size, "x", u.Base("long", 8), 0)
	path := t.TempDir() + "/lines"
	require.NoError(t, hostile.AddSections(prog, path, append(hostile.DWARFSections(u),
		hostile.Section{Name: ".debug_line", Type: elf.SHT_PROGBITS, Data: hostile.LineProgramV5(1, 1_000_000_000)})...))
	f, err := Open(context.Background(), path, Options{DebugDirs: []string{}})
	require.NoError(t, err)
	defer f.Close()
	before := allocated()
	_, err = f.Lines("hostile.c", 1)
	require.Error(t, err)
	assert.Less(t, allocated()-before, uint64(16<<20))
	files, err := f.lineFiles(f.idx.cus[0])
	assert.Empty(t, files)
	assert.ErrorIs(t, err, ErrOverBudget)
	assert.Contains(t, err.Error(), "declares 1000000000 entries")
}

// A unit whose last bytes are an unterminated LEB128 (every byte with its
// high bit set) makes debug/dwarf return a null entry without moving, on
// every call: the index must end with ErrMalformed, not loop. Before the
// bound the index spun forever (found by FuzzCompressedSections in CI).
func TestUnterminatedLEB128EndsTheIndex(t *testing.T) {
	u := hostile.NewUnit(0x1000, 0x10)
	u.Function("work", 0x1000, 0x10, "x", u.Base("long", 8), 1)
	info := u.Info()
	info = append(info[:len(info)-1], 0x80, 0x80, 0x80) // no terminator: a LEB128 that never ends
	binary.LittleEndian.PutUint32(info, uint32(len(info)-4))
	file, err := hostile.AppendSections(hostile.MinimalELF(),
		hostile.Section{Name: ".debug_abbrev", Type: elf.SHT_PROGBITS, Data: hostile.Abbrev()},
		hostile.Section{Name: ".debug_info", Type: elf.SHT_PROGBITS, Data: info})
	require.NoError(t, err)
	ef, err := elf.NewFile(bytes.NewReader(file))
	require.NoError(t, err)
	f, err := OpenELF(context.Background(), "leb128", ef, Options{DebugDirs: []string{}})
	require.NoError(t, err)
	defer f.Close()
	done := make(chan error, 1)
	go func() {
		_, err := f.Functions()
		done <- err
	}()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, ErrMalformed)
	case <-time.After(20 * time.Second):
		t.Fatal("the index of a unit ending in an unterminated LEB128 did not end in 20 s")
	}
}
