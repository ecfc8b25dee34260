// Package buildid reads the identities a build gives an ELF file, so that a
// target can be pinned to one build of a program and recognized across
// paths, containers and upgrades:
//
//   - the GNU build id: the NT_GNU_BUILD_ID note that GNU ld, gold, lld
//     and mold write (--build-id; on by default in Debian, Fedora, Ubuntu,
//     Alpine), a hash of the linked output, shown as lowercase hex as
//     readelf -n, file(1) and debuginfod show it;
//   - the Go build id: the string the Go linker writes into the
//     .note.go.buildid note of ELF files ("actionID/contentID" hashes, as
//     go tool buildid prints it); other formats carry it as the
//     "\xff Go build ID: \"…\"" string at the start of their text
//     ([ParseRawGoID]). Go's linker also writes a GNU build id derived from
//     it.
//
// Note parsing is plain Go, bounded, and fuzzed: files come from containers
// the collector does not trust. The standard library's debug/buildinfo
// reads a Go binary's module information but not its build id, hence the
// note reader here.
package buildid

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// ErrNotFound says the file has no build id of the kind asked for.
var ErrNotFound = errors.New("no build id")

// Note types and names read here.
const (
	// NoteGNUBuildID is NT_GNU_BUILD_ID, in notes named "GNU".
	NoteGNUBuildID = 3
	// NoteGoBuildID is the Go linker's note type (ELF_NOTE_GOBUILDID_TAG),
	// in notes named "Go".
	NoteGoBuildID = 4
)

// Bounds of what is read from a file.
const (
	// MaxNoteData bounds the bytes of one note section or segment read.
	MaxNoteData = 1 << 20
	// MaxNotes bounds the notes parsed from one section or segment.
	MaxNotes = 4096
	// maxIDLen bounds a build id's length (a GNU build id is 8 to 64 bytes,
	// a Go build id about 83 characters).
	maxIDLen = 1024
)

// Note is one ELF note.
type Note struct {
	// Name is the note's owner ("GNU", "Go", "stapsdt"), without its NUL.
	Name string
	// Type is the note's type, whose meaning depends on Name.
	Type uint32
	// Desc is the note's descriptor; it shares memory with the parsed data.
	Desc []byte
}

// ParseNotes parses the notes of an SHT_NOTE section or a PT_NOTE segment.
// order is the file's byte order; align is the section's or segment's
// alignment (4 for most notes, 8 for .note.gnu.property; smaller values
// mean 4): a note's descriptor and the next note start at multiples of it.
// All-zero note headers (padding) are skipped, as is a tail shorter than a
// header; a note that does not fit is an error. At most MaxNotes notes are
// returned.
func ParseNotes(data []byte, order binary.ByteOrder, align uint64) ([]Note, error) {
	if align < 4 {
		align = 4
	}
	if align > 8 {
		return nil, fmt.Errorf("note alignment %d: want 4 or 8", align)
	}
	up := func(n uint64) uint64 { return (n + align - 1) &^ (align - 1) }
	var notes []Note
	for off := uint64(0); uint64(len(data))-off >= 12; {
		if len(notes) == MaxNotes {
			return nil, fmt.Errorf("more than %d notes", MaxNotes)
		}
		nameSize := uint64(order.Uint32(data[off:]))
		descSize := uint64(order.Uint32(data[off+4:]))
		typ := order.Uint32(data[off+8:])
		nameOff := off + 12
		descOff := up(nameOff + nameSize)
		end := up(descOff + descSize)
		if descOff+descSize > uint64(len(data)) {
			return nil, fmt.Errorf("note at offset %d: name of %d and descriptor of %d bytes do not fit in %d bytes", off, nameSize, descSize, uint64(len(data))-off)
		}
		if nameSize == 0 && descSize == 0 && typ == 0 {
			off = end // padding
			continue
		}
		name := data[nameOff : nameOff+nameSize]
		notes = append(notes, Note{
			Name: string(bytes.TrimRight(name, "\x00")),
			Type: typ,
			Desc: data[descOff : descOff+descSize : descOff+descSize],
		})
		if end >= uint64(len(data)) {
			break
		}
		off = end
	}
	return notes, nil
}

// IDs are the build ids of one file; an empty field means the file has none
// of that kind.
type IDs struct {
	// GNU is the GNU build id in lowercase hex.
	GNU string
	// Go is the Go build id.
	Go string
}

// ReadFile reads the build ids of the ELF file at path. A file with
// neither is not an error: both fields are empty.
func ReadFile(path string) (IDs, error) {
	f, err := elf.Open(path)
	if err != nil {
		return IDs{}, err
	}
	defer f.Close()
	return FromELF(f)
}

// FromELF reads the build ids of an open ELF file (for example one opened
// through procfs.Root and elf.NewFile). A file with neither is not an
// error: both fields are empty.
func FromELF(f *elf.File) (IDs, error) {
	var ids IDs
	gnu, err := GNU(f)
	switch {
	case err == nil:
		ids.GNU = gnu
	case !errors.Is(err, ErrNotFound):
		return IDs{}, err
	}
	goID, err := Go(f)
	switch {
	case err == nil:
		ids.Go = goID
	case !errors.Is(err, ErrNotFound):
		return IDs{}, err
	}
	return ids, nil
}

// GNU returns the file's GNU build id in lowercase hex, or ErrNotFound.
func GNU(f *elf.File) (string, error) {
	desc, err := findNote(f, "GNU", NoteGNUBuildID)
	if err != nil {
		return "", err
	}
	if len(desc) == 0 {
		return "", fmt.Errorf("GNU build id note is empty")
	}
	return hex.EncodeToString(desc), nil
}

// Go returns the file's Go build id, from its .note.go.buildid note, or
// ErrNotFound when it has none (a file not built by Go's linker; gccgo's
// build id is the GNU one).
func Go(f *elf.File) (string, error) {
	desc, err := findNote(f, "Go", NoteGoBuildID)
	if err != nil {
		return "", err
	}
	if len(desc) == 0 {
		return "", fmt.Errorf("Go build id note is empty")
	}
	return string(desc), nil
}

// goBuildPrefix and goBuildEnd delimit the raw Go build id, as the go
// command writes and reads it (cmd/internal/buildid).
var (
	goBuildPrefix = []byte("\xff Go build ID: \"")
	goBuildEnd    = []byte("\"\n \xff")
)

// ParseRawGoID finds the raw Go build id ("\xff Go build ID: \"…\"\n \xff")
// in data and returns it unquoted, or ErrNotFound. Go's linker writes this
// string at the start of the text of Mach-O, PE and other non-ELF
// binaries; in ELF files the build id is only in the note (measured with
// Go 1.26: no raw string in an ELF binary), which [Go] reads.
func ParseRawGoID(data []byte) (string, error) {
	i := bytes.Index(data, goBuildPrefix)
	if i < 0 {
		return "", ErrNotFound
	}
	rest := data[i+len(goBuildPrefix):]
	if len(rest) > maxIDLen {
		rest = rest[:maxIDLen]
	}
	j := bytes.Index(rest, goBuildEnd)
	if j < 0 {
		return "", fmt.Errorf("raw Go build id has no end within %d bytes", maxIDLen)
	}
	id, err := strconv.Unquote(string(data[i+len(goBuildPrefix)-1 : i+len(goBuildPrefix)+j+1]))
	if err != nil {
		return "", fmt.Errorf("raw Go build id: %w", err)
	}
	return id, nil
}

// findNote returns the descriptor of the first note with this name and type,
// in the file's SHT_NOTE sections or, when it has no section headers, its
// PT_NOTE segments. A note section or segment that is too big or malformed
// (a .note.stapsdt with thousands of probes, a corrupt one) is skipped; its
// error is returned only when no note matches.
func findNote(f *elf.File, name string, typ uint32) ([]byte, error) {
	var firstErr error
	try := func(what string, size uint64, open func() io.ReadSeeker, align uint64) ([]byte, bool) {
		if size > MaxNoteData {
			return nil, false
		}
		data, err := readAll(open(), MaxNoteData)
		if err == nil {
			var desc []byte
			var ok bool
			if desc, ok, err = lookup(data, f.ByteOrder, align, name, typ); ok {
				return desc, true
			}
		}
		if err != nil && firstErr == nil {
			firstErr = fmt.Errorf("%s: %w", what, err)
		}
		return nil, false
	}
	var sawSections bool
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOTE {
			continue
		}
		sawSections = true
		if desc, ok := try(s.Name, s.Size, s.Open, s.Addralign); ok {
			return desc, nil
		}
	}
	if !sawSections {
		for i, p := range f.Progs {
			if p.Type != elf.PT_NOTE {
				continue
			}
			if desc, ok := try(fmt.Sprintf("note segment %d", i), p.Filesz, p.Open, p.Align); ok {
				return desc, nil
			}
		}
	}
	if firstErr != nil {
		return nil, fmt.Errorf("%w (%w)", ErrNotFound, firstErr)
	}
	return nil, ErrNotFound
}

func lookup(data []byte, order binary.ByteOrder, align uint64, name string, typ uint32) ([]byte, bool, error) {
	notes, err := ParseNotes(data, order, align)
	if err != nil {
		return nil, false, err
	}
	for _, n := range notes {
		if n.Name == name && n.Type == typ {
			if len(n.Desc) > maxIDLen {
				return nil, false, fmt.Errorf("%s build id of %d bytes, more than %d", name, len(n.Desc), maxIDLen)
			}
			return n.Desc, true, nil
		}
	}
	return nil, false, nil
}

// readAll reads at most limit bytes; more is an error.
func readAll(r io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("longer than %d bytes", limit)
	}
	return data, nil
}
