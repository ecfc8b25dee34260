package usdt

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
)

// Section names and note constants of the stapsdt format.
const (
	// NoteSection is the name of the section that holds the notes.
	NoteSection = ".note.stapsdt"
	// BaseSection is the name of the section whose virtual address the
	// notes' base word records at link time.
	BaseSection = ".stapsdt.base"
	// NoteOwner is the owner name of a USDT note.
	NoteOwner = "stapsdt"
	// NoteType is the type of a USDT note in the version 3 format.
	NoteType = 3
)

// MaxNoteBytes bounds the .note.stapsdt section Notes reads: 64 MiB is
// several hundred thousand notes.
const MaxNoteBytes = 64 << 20

// Note is one .note.stapsdt entry as stored in the file, with addresses
// already adjusted by .stapsdt.base.
type Note struct {
	// Provider and Name name the probe: provider:name.
	Provider, Name string
	// Address is the virtual address of the probe site.
	Address uint64
	// SemaphoreAddress is the virtual address of the semaphore, 0 if none.
	SemaphoreAddress uint64
	// Args is the argument specs as written in the note.
	Args string
	// Base is the note's base word as stored: the link-time virtual
	// address of the .stapsdt.base section.
	Base uint64
}

// ParseNote decodes one note descriptor (the desc bytes of an owner
// "stapsdt" type-3 note) for a file of the given class and byte order: three
// address-sized words (the site's virtual address, the link-time virtual
// address of .stapsdt.base, the semaphore's virtual address) then three
// NUL-terminated strings (provider, name, argument specs). Bytes after the
// third NUL (alignment padding) are ignored. It makes no .stapsdt.base
// adjustment: Address and SemaphoreAddress are the words as stored.
func ParseNote(desc []byte, class elf.Class, order binary.ByteOrder) (Note, error) {
	if order == nil {
		return Note{}, errors.New("decode note: no byte order")
	}
	var word int
	switch class {
	case elf.ELFCLASS32:
		word = 4
	case elf.ELFCLASS64:
		word = 8
	default:
		return Note{}, fmt.Errorf("decode note: unsupported elf class %v", class)
	}
	if len(desc) < 3*word {
		return Note{}, fmt.Errorf("decode note: descriptor of %d bytes is shorter than its three %d-byte addresses", len(desc), word)
	}
	get := func(i int) uint64 {
		b := desc[i*word : (i+1)*word]
		if word == 4 {
			return uint64(order.Uint32(b))
		}
		return order.Uint64(b)
	}
	n := Note{Address: get(0), Base: get(1), SemaphoreAddress: get(2)}
	rest := desc[3*word:]
	var strs [3]string
	for i, what := range [...]string{"provider", "name", "arguments"} {
		end := bytes.IndexByte(rest, 0)
		if end < 0 {
			return Note{}, fmt.Errorf("decode note: %s string is not NUL-terminated", what)
		}
		strs[i] = string(rest[:end])
		rest = rest[end+1:]
	}
	n.Provider, n.Name, n.Args = strs[0], strs[1], strs[2]
	if n.Provider == "" {
		return Note{}, errors.New("decode note: empty provider")
	}
	if n.Name == "" {
		return Note{}, fmt.Errorf("decode note: probe of provider %q has an empty name", n.Provider)
	}
	return n, nil
}

// Notes reads every stapsdt note of f from its .note.stapsdt section, in
// section order, and applies the .stapsdt.base adjustment: if f has a
// .stapsdt.base section, (the section's virtual address - the note's base
// word) is added to the site's virtual address and to a non-zero semaphore
// virtual address. Notes whose owner is not "stapsdt" or whose type is not 3
// are skipped. It returns nil, nil when f has no .note.stapsdt section.
func Notes(f *elf.File) ([]Note, error) {
	var notes []Note
	err := eachNote(f, func(n Note) error {
		notes = append(notes, n)
		return nil
	})
	return notes, err
}

// eachNote calls fn with every stapsdt note of f, as Notes returns them,
// without keeping them: a section of a million copies of one note costs
// its bytes, not a million Notes.
func eachNote(f *elf.File, fn func(Note) error) error {
	sec := f.Section(NoteSection)
	if sec == nil {
		return nil
	}
	if sec.Type == elf.SHT_NOBITS {
		return fmt.Errorf("read %s: section has no file data", NoteSection)
	}
	if sec.Flags&elf.SHF_COMPRESSED != 0 {
		// No toolchain compresses notes; debug/elf would decompress
		// whatever size the header claims.
		return fmt.Errorf("read %s: a compressed note section", NoteSection)
	}
	if sec.Size > MaxNoteBytes {
		return fmt.Errorf("read %s: %d bytes, more than %d", NoteSection, sec.Size, MaxNoteBytes)
	}
	data, err := sec.Data()
	if err != nil {
		return fmt.Errorf("read %s: %w", NoteSection, err)
	}
	base := f.Section(BaseSection)
	mask := ^uint64(0)
	if f.Class == elf.ELFCLASS32 {
		mask = 0xffffffff
	}
	var fnErr error
	err = walkNotesFunc(data, f.ByteOrder, f.Class, sec.Addralign, func(n Note) error {
		if base != nil {
			delta := base.Addr - n.Base
			n.Address = (n.Address + delta) & mask
			if n.SemaphoreAddress != 0 {
				n.SemaphoreAddress = (n.SemaphoreAddress + delta) & mask
			}
		}
		fnErr = fn(n)
		return fnErr
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", NoteSection, err)
	}
	return nil
}

// walkNotes walks the raw notes of a note section's bytes (namesz, descsz
// and type words in the file's byte order, then the owner name and the
// descriptor, each ending padded to the section's alignment from the note's
// start: 4, or 8 when align is 8, as readelf reads them) and decodes the
// stapsdt type-3 ones, without the .stapsdt.base adjustment.
func walkNotes(data []byte, order binary.ByteOrder, class elf.Class, align uint64) ([]Note, error) {
	var notes []Note
	err := walkNotesFunc(data, order, class, align, func(n Note) error {
		notes = append(notes, n)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return notes, nil
}

// walkNotesFunc is walkNotes calling fn with each note instead of
// collecting them; an error from fn ends the walk.
func walkNotesFunc(data []byte, order binary.ByteOrder, class elf.Class, align uint64, fn func(Note) error) error {
	if order == nil {
		return errors.New("walk notes: no byte order")
	}
	pad := 4
	if align == 8 {
		pad = 8
	}
	padded := func(n uint64) uint64 { return (n + uint64(pad) - 1) &^ uint64(pad-1) }
	off := uint64(0)
	size := uint64(len(data))
	for off < size {
		if size-off < 12 {
			return fmt.Errorf("walk notes: truncated note header at section offset %#x", off)
		}
		namesz := uint64(order.Uint32(data[off:]))
		descsz := uint64(order.Uint32(data[off+4:]))
		typ := order.Uint32(data[off+8:])
		nameStart := off + 12
		descStart := off + padded(12+namesz)
		if descStart > size {
			return fmt.Errorf("walk notes: note at section offset %#x: name of %d bytes runs past the section end", off, namesz)
		}
		if descsz > size-descStart {
			return fmt.Errorf("walk notes: note at section offset %#x: descriptor of %d bytes runs past the section end", off, descsz)
		}
		name := data[nameStart : nameStart+namesz]
		desc := data[descStart : descStart+descsz]
		next := descStart + padded(descsz)
		if next > size {
			// The last note's padding may be cut off by the section's end.
			next = size
		}
		if typ == NoteType && string(bytes.TrimRight(name, "\x00")) == NoteOwner {
			n, err := ParseNote(desc, class, order)
			if err != nil {
				return fmt.Errorf("walk notes: note at section offset %#x: %w", off, err)
			}
			if err := fn(n); err != nil {
				return err
			}
		}
		off = next
	}
	return nil
}
