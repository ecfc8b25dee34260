package buildid

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// note encodes one note with the given alignment.
func note(order binary.ByteOrder, align int, name string, typ uint32, desc []byte) []byte {
	var b bytes.Buffer
	var w [4]byte
	nameBytes := []byte(name)
	if name != "" {
		nameBytes = append(nameBytes, 0)
	}
	for _, v := range []uint32{uint32(len(nameBytes)), uint32(len(desc)), typ} {
		order.PutUint32(w[:], v)
		b.Write(w[:])
	}
	pad := func() {
		for b.Len()%align != 0 {
			b.WriteByte(0)
		}
	}
	b.Write(nameBytes)
	pad()
	b.Write(desc)
	pad()
	return b.Bytes()
}

func TestParseNotes(t *testing.T) {
	le, be := binary.LittleEndian, binary.BigEndian
	id := []byte{0xde, 0xad, 0xbe, 0xef, 0x01}
	tests := []struct {
		name  string
		data  []byte
		order binary.ByteOrder
		align uint64
		want  []Note
	}{
		{
			name:  "GNU build id and ABI tag, align 4",
			data:  append(note(le, 4, "GNU", 1, []byte{0, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0}), note(le, 4, "GNU", 3, id)...),
			order: le, align: 4,
			want: []Note{{"GNU", 1, []byte{0, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0}}, {"GNU", 3, id}},
		},
		{
			name:  "align 8 (gnu property), name of 5 bytes",
			data:  append(note(le, 8, "Go12", 4, []byte("abc/def")), note(le, 8, "GNU", 3, id)...),
			order: le, align: 8,
			want: []Note{{"Go12", 4, []byte("abc/def")}, {"GNU", 3, id}},
		},
		{
			name:  "big endian",
			data:  note(be, 4, "GNU", 3, id),
			order: be, align: 4,
			want: []Note{{"GNU", 3, id}},
		},
		{
			name:  "alignment 0 or 1 means 4",
			data:  note(le, 4, "stapsdt", 3, []byte("x")),
			order: le, align: 1,
			want: []Note{{"stapsdt", 3, []byte("x")}},
		},
		{
			name:  "padding and a short tail",
			data:  append(append(note(le, 4, "GNU", 3, id), make([]byte, 16)...), 1, 2, 3),
			order: le, align: 4,
			want: []Note{{"GNU", 3, id}},
		},
		{
			name:  "empty",
			data:  nil,
			order: le, align: 4,
			want: nil,
		},
		{
			name:  "empty name and descriptor",
			data:  note(le, 4, "", 7, nil),
			order: le, align: 4,
			want: []Note{{"", 7, []byte{}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseNotes(tt.data, tt.order, tt.align)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestParseNotesErrors(t *testing.T) {
	le := binary.LittleEndian
	full := note(le, 4, "GNU", 3, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	_, err := ParseNotes(full[:len(full)-1], le, 4)
	require.EqualError(t, err, "note at offset 0: name of 4 and descriptor of 8 bytes do not fit in 23 bytes")
	huge := note(le, 4, "GNU", 3, nil)
	le.PutUint32(huge[4:], 0xffffffff)
	_, err = ParseNotes(huge, le, 4)
	require.ErrorContains(t, err, "descriptor of 4294967295 bytes do not fit")
	_, err = ParseNotes(full, le, 16)
	require.EqualError(t, err, "note alignment 16: want 4 or 8")
	var many []byte
	for i := 0; i <= MaxNotes; i++ {
		many = append(many, note(le, 4, "X", 1, nil)...)
	}
	_, err = ParseNotes(many, le, 4)
	require.EqualError(t, err, "more than 4096 notes")
}

func TestParseRawGoID(t *testing.T) {
	id, err := ParseRawGoID([]byte("junk\xff Go build ID: \"abc/def\"\n \xffmore"))
	require.NoError(t, err)
	assert.Equal(t, "abc/def", id)
	_, err = ParseRawGoID([]byte("nothing here"))
	require.ErrorIs(t, err, ErrNotFound)
	_, err = ParseRawGoID([]byte("\xff Go build ID: \"abc"))
	require.EqualError(t, err, "raw Go build id has no end within 1024 bytes")
	_, err = ParseRawGoID([]byte("\xff Go build ID: \"a\\q\"\n \xff"))
	require.ErrorContains(t, err, "raw Go build id: invalid syntax")
}

// TestGNUBuildIDGcc links C programs with chosen build ids.
func TestGNUBuildIDGcc(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "main.c")
	require.NoError(t, os.WriteFile(src, []byte("int main(void) { return 0; }\n"), 0o644))
	testutil.Gcc(t, dir, "-o", "fixed", "-Wl,--build-id=0x0123456789abcdef42", src)
	testutil.Gcc(t, dir, "-o", "none", "-Wl,--build-id=none", src)
	testutil.Gcc(t, dir, "-o", "sha1", "-Wl,--build-id=sha1", src)

	ids, err := ReadFile(filepath.Join(dir, "fixed"))
	require.NoError(t, err)
	assert.Equal(t, IDs{GNU: "0123456789abcdef42"}, ids)

	ids, err = ReadFile(filepath.Join(dir, "none"))
	require.NoError(t, err)
	assert.Equal(t, IDs{}, ids)
	f, err := elf.Open(filepath.Join(dir, "none"))
	require.NoError(t, err)
	defer f.Close()
	_, err = GNU(f)
	require.ErrorIs(t, err, ErrNotFound)

	ids, err = ReadFile(filepath.Join(dir, "sha1"))
	require.NoError(t, err)
	assert.Len(t, ids.GNU, 40)
	assert.Equal(t, readelfBuildID(t, filepath.Join(dir, "sha1")), ids.GNU)

	// Without section headers, the note is found through PT_NOTE.
	noSections := stripSectionHeaders(t, filepath.Join(dir, "fixed"))
	ids, err = ReadFile(noSections)
	require.NoError(t, err)
	assert.Equal(t, IDs{GNU: "0123456789abcdef42"}, ids)
}

// TestGNUBuildIDSystem reads the build id of a system program and compares
// it with what readelf shows.
func TestGNUBuildIDSystem(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	require.NoError(t, err)
	ids, err := ReadFile(sleep)
	require.NoError(t, err)
	assert.Equal(t, readelfBuildID(t, sleep), ids.GNU)
	assert.Empty(t, ids.Go)
}

// TestGoBuildID builds Go programs with a chosen build id: in the note,
// stripped, without section headers, and with the note removed (the raw
// string in the text remains).
func TestGoBuildID(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	require.NoError(t, os.WriteFile(src, []byte("package main\n\nfunc main() {}\n"), 0o644))
	build := func(name string, ldflags string) string {
		out := filepath.Join(dir, name)
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", out, "-ldflags="+ldflags, src)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GO111MODULE=off", "CGO_ENABLED=0")
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, "go build: %s", b)
		return out
	}
	const id = "actionhash/contenthash"
	plain := build("plain", "-buildid="+id)
	stripped := build("stripped", "-s -w -buildid="+id)
	for _, p := range []string{plain, stripped, stripSectionHeaders(t, plain)} {
		ids, err := ReadFile(p)
		require.NoError(t, err, p)
		assert.Equal(t, id, ids.Go, p)
	}

	if _, err := exec.LookPath("objcopy"); err != nil {
		testutil.SkipOrFail(t, "objcopy not found (binutils)")
	}
	noNote := filepath.Join(dir, "nonote")
	out, err := exec.Command("objcopy", "--remove-section", ".note.go.buildid", plain, noNote).CombinedOutput()
	require.NoError(t, err, "%s", out)
	f, err := elf.Open(noNote)
	require.NoError(t, err)
	defer f.Close()
	require.Nil(t, f.Section(".note.go.buildid"))
	_, err = Go(f)
	require.ErrorIs(t, err, ErrNotFound, "ELF Go binaries have no raw build id string")

	// The go command agrees on a default build.
	def := build("default", "")
	want, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "tool", "buildid", def).Output()
	require.NoError(t, err)
	ids, err := ReadFile(def)
	require.NoError(t, err)
	assert.Equal(t, strings.TrimSpace(string(want)), ids.Go)
	assert.Equal(t, readelfBuildID(t, def), ids.GNU, "Go's linker writes a GNU build id too")
}

func TestReadFileErrors(t *testing.T) {
	p := filepath.Join(t.TempDir(), "text")
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"), 0o644))
	_, err := ReadFile(p)
	require.Error(t, err)
	_, err = ReadFile(filepath.Join(t.TempDir(), "missing"))
	require.True(t, errors.Is(err, os.ErrNotExist))
}

// readelfBuildID returns the build id readelf -n shows for path.
func readelfBuildID(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command("readelf", "-n", path).Output()
	if err != nil {
		testutil.SkipOrFail(t, "readelf -n %s: %v", path, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Build ID: "); ok {
			return v
		}
	}
	t.Fatalf("readelf -n %s shows no build id:\n%s", path, out)
	return ""
}

// stripSectionHeaders copies an ELF file with its section header table
// cut off (e_shoff, e_shnum and e_shstrndx zeroed), as sstrip does.
func stripSectionHeaders(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, byte(elf.ELFCLASS64), data[elf.EI_CLASS])
	clear(data[40:48]) // e_shoff
	clear(data[60:64]) // e_shnum, e_shstrndx
	out := path + ".nosections"
	require.NoError(t, os.WriteFile(out, data, 0o755))
	f, err := elf.Open(out)
	require.NoError(t, err)
	defer f.Close()
	require.Empty(t, f.Sections)
	return out
}

func FuzzParseRawGoID(f *testing.F) {
	f.Add([]byte("junk\xff Go build ID: \"abc/def\"\n \xffmore"))
	f.Add([]byte("\xff Go build ID: \"a\\x00b\"\n \xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		id, err := ParseRawGoID(data)
		if err == nil && len(id) > maxIDLen {
			t.Fatalf("id of %d bytes", len(id))
		}
	})
}

func FuzzParseNotes(f *testing.F) {
	le := binary.LittleEndian
	f.Add(note(le, 4, "GNU", 3, []byte{1, 2, 3, 4}), uint8(4), false)
	f.Add(append(note(le, 8, "Go", 4, []byte("a/b")), note(le, 8, "GNU", 5, make([]byte, 16))...), uint8(8), false)
	f.Add(note(binary.BigEndian, 4, "stapsdt", 3, []byte("provider\x00name\x00")), uint8(4), true)
	f.Fuzz(func(t *testing.T, data []byte, align uint8, big bool) {
		var order binary.ByteOrder = binary.LittleEndian
		if big {
			order = binary.BigEndian
		}
		notes, err := ParseNotes(data, order, uint64(align))
		if err != nil {
			return
		}
		total := 0
		for _, n := range notes {
			total += 12 + len(n.Name) + len(n.Desc)
		}
		if total > len(data) {
			t.Fatalf("%d notes take %d bytes of %d", len(notes), total, len(data))
		}
		// Re-encoding the notes (with their names NUL-terminated) parses
		// to the same notes.
		if align <= 4 || align == 8 {
			a := 4
			if align == 8 {
				a = 8
			}
			var again []byte
			for _, n := range notes {
				if n.Name == "" || strings.IndexByte(n.Name, 0) >= 0 {
					return
				}
				again = append(again, note(order, a, n.Name, n.Type, n.Desc)...)
			}
			notes2, err := ParseNotes(again, order, uint64(a))
			if err != nil {
				t.Fatalf("re-encoded notes fail: %v", err)
			}
			if len(notes2) != len(notes) {
				t.Fatalf("re-encoded %d notes parse to %d", len(notes), len(notes2))
			}
			for i := range notes {
				if notes[i].Name != notes2[i].Name || notes[i].Type != notes2[i].Type || !bytes.Equal(notes[i].Desc, notes2[i].Desc) {
					t.Fatalf("note %d: %+v became %+v", i, notes[i], notes2[i])
				}
			}
		}
	})
}
