package hostile

import (
	"debug/elf"
	"encoding/binary"
	"path/filepath"
	"testing"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

// Program builds testdata/hostile without debuginfo into a temporary
// directory and returns its path.
func Program(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "hostile")
	testutil.Gcc(t, dir, "-O2", "-g0", "-o", bin, testutil.Testdata("hostile", "hostile.c"))
	return bin
}

// WithType writes a copy of program (Program) whose DWARF describes its
// function work and work's parameter x, whose type is what typ writes
// into the unit (it returns the type's offset), and returns the copy's
// path. extra sections are added too.
func WithType(t testing.TB, program string, typ func(u *Unit) uint32, extra ...Section) string {
	t.Helper()
	return WithTypeUnits(t, program, typ, nil, extra...)
}

// WithTypeUnits is WithType with type units: the DWARF 4 ones in
// .debug_types, the DWARF 5 ones in .debug_info after the compile unit.
func WithTypeUnits(t testing.TB, program string, typ func(u *Unit) uint32, units []*TypeUnit, extra ...Section) string {
	t.Helper()
	addr, size, err := Symbol(program, "work")
	if err != nil {
		t.Fatal(err)
	}
	u := NewUnit(addr, size)
	ref := typ(u)
	u.Function("work", addr, size, "x", ref, 0)
	secs := DWARFSections(u)
	var types []byte
	for _, tu := range units {
		if tu.V5 {
			secs[1].Data = append(secs[1].Data, tu.Info()...)
		} else {
			types = append(types, tu.Info()...)
		}
	}
	if types != nil {
		secs = append(secs, Section{Name: ".debug_types", Type: elf.SHT_PROGBITS, Data: types})
	}
	out := filepath.Join(t.TempDir(), "hostile")
	if err := AddSections(program, out, append(secs, extra...)...); err != nil {
		t.Fatal(err)
	}
	return out
}

// WithNotes writes a copy of program whose .note.stapsdt holds n copies
// of the note of its probe hostile:tick, and returns its path.
func WithNotes(t testing.TB, program string, n int) string {
	t.Helper()
	return WithNotesApart(t, program, n, 0)
}

// WithNotesApart is WithNotes with copy i's address moved by i*step
// bytes: n distinct sites of hostile:tick (step 0: one site).
func WithNotesApart(t testing.TB, program string, n int, step uint64) string {
	t.Helper()
	f, err := elf.Open(program)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sec := f.Section(".note.stapsdt")
	if sec == nil {
		t.Fatalf("%s has no .note.stapsdt", program)
	}
	data, err := sec.Data()
	if err != nil {
		t.Fatal(err)
	}
	notes := make([]byte, 0, n*len(data))
	const addrAt = 12 + 8 // the note's header and owner name "stapsdt\0"
	for i := range n {
		at := len(notes)
		notes = append(notes, data...)
		addr := binary.LittleEndian.Uint64(notes[at+addrAt:])
		binary.LittleEndian.PutUint64(notes[at+addrAt:], addr+uint64(i)*step)
	}
	out := filepath.Join(t.TempDir(), "hostile")
	err = Patch(program, out, map[string]string{".note.stapsdt": ".note.stapsdt.orig"},
		Section{Name: ".note.stapsdt", Type: elf.SHT_NOTE, Data: notes, Align: sec.Addralign})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
