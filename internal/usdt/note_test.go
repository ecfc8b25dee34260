package usdt

import (
	"debug/elf"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// byteOrder is binary.LittleEndian or binary.BigEndian.
type byteOrder interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

// makeDesc builds a stapsdt note descriptor the way <sys/sdt.h> lays it out.
func makeDesc(class elf.Class, order byteOrder, site, base, sem uint64, provider, name, args string) []byte {
	var b []byte
	for _, w := range []uint64{site, base, sem} {
		if class == elf.ELFCLASS32 {
			b = order.AppendUint32(b, uint32(w))
		} else {
			b = order.AppendUint64(b, w)
		}
	}
	b = append(b, provider+"\x00"+name+"\x00"+args+"\x00"...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

// makeNote builds one raw note (header, padded owner name, padded
// descriptor) with the given alignment.
func makeNote(order byteOrder, owner string, typ uint32, desc []byte, align int) []byte {
	name := []byte(owner + "\x00")
	var b []byte
	b = order.AppendUint32(b, uint32(len(name)))
	b = order.AppendUint32(b, uint32(len(desc)))
	b = order.AppendUint32(b, typ)
	b = append(b, name...)
	for len(b)%align != 0 {
		b = append(b, 0)
	}
	b = append(b, desc...)
	for len(b)%align != 0 {
		b = append(b, 0)
	}
	return b
}

func TestParseNote(t *testing.T) {
	tests := []struct {
		name  string
		class elf.Class
		order byteOrder
		site  uint64
		base  uint64
		sem   uint64
	}{
		{"64-bit little-endian", elf.ELFCLASS64, binary.LittleEndian, 0x42512a, 0x8cc5a0, 0xa84276},
		{"32-bit little-endian", elf.ELFCLASS32, binary.LittleEndian, 0x0804912a, 0x0804a5a0, 0x0804c276},
		{"64-bit big-endian", elf.ELFCLASS64, binary.BigEndian, 0x10001234, 0x10005678, 0},
		{"32-bit big-endian", elf.ELFCLASS32, binary.BigEndian, 0x10001234, 0x10005678, 0x10020000},
		{"64-bit high addresses", elf.ELFCLASS64, binary.LittleEndian, 0xffffffff81000000, 0xffffffffffffffff, 0x8000000000000000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			desc := makeDesc(tt.class, tt.order, tt.site, tt.base, tt.sem, "python", "function__entry", "8@%rbp 8@%r12 -4@%eax")
			n, err := ParseNote(desc, tt.class, tt.order)
			require.NoError(t, err)
			assert.Equal(t, Note{
				Provider: "python", Name: "function__entry",
				Address: tt.site, Base: tt.base, SemaphoreAddress: tt.sem,
				Args: "8@%rbp 8@%r12 -4@%eax",
			}, n)

			// Without padding after the last NUL.
			trimmed := desc
			for len(trimmed) > 0 && trimmed[len(trimmed)-1] == 0 {
				trimmed = trimmed[:len(trimmed)-1]
			}
			n2, err := ParseNote(append(trimmed, 0), tt.class, tt.order)
			require.NoError(t, err)
			assert.Equal(t, n, n2)

			// Every truncation errors (the last NUL is needed).
			for i := 0; i < len(trimmed)+1; i++ {
				_, err := ParseNote(desc[:i], tt.class, tt.order)
				assert.Error(t, err, "truncated to %d bytes", i)
			}
		})
	}
}

func TestParseNoteEmptyArgs(t *testing.T) {
	desc := makeDesc(elf.ELFCLASS64, binary.LittleEndian, 0x1139, 0x2004, 0, "fixture", "noargs", "")
	n, err := ParseNote(desc, elf.ELFCLASS64, binary.LittleEndian)
	require.NoError(t, err)
	assert.Equal(t, Note{Provider: "fixture", Name: "noargs", Address: 0x1139, Base: 0x2004}, n)
}

func TestParseNoteErrors(t *testing.T) {
	le := binary.LittleEndian
	good := makeDesc(elf.ELFCLASS64, le, 1, 2, 3, "p", "n", "8@%rax")
	tests := []struct {
		name  string
		desc  []byte
		class elf.Class
		order binary.ByteOrder
		want  string
	}{
		{"empty", nil, elf.ELFCLASS64, le, "decode note: descriptor of 0 bytes is shorter than its three 8-byte addresses"},
		{"short 64-bit", make([]byte, 23), elf.ELFCLASS64, le, "shorter than its three 8-byte addresses"},
		{"short 32-bit", make([]byte, 11), elf.ELFCLASS32, le, "shorter than its three 4-byte addresses"},
		{"no strings", make([]byte, 24), elf.ELFCLASS64, le, "decode note: provider string is not NUL-terminated"},
		{"empty provider", append(make([]byte, 24), 0, 'n', 0, 0), elf.ELFCLASS64, le, "decode note: empty provider"},
		{"empty name", append(make([]byte, 24), 'p', 0, 0, 0), elf.ELFCLASS64, le, `decode note: probe of provider "p" has an empty name`},
		{"unterminated name", append(make([]byte, 24), 'p', 0, 'n'), elf.ELFCLASS64, le, "decode note: name string is not NUL-terminated"},
		{"unterminated args", append(make([]byte, 24), 'p', 0, 'n', 0, '8', '@'), elf.ELFCLASS64, le, "decode note: arguments string is not NUL-terminated"},
		{"garbage", []byte("\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8\xf7\xf6\xf5\xf4\xf3\xf2\xf1\xf0\xef\xee\xed\xec\xeb\xea\xe9\xe8garbage"), elf.ELFCLASS64, le, "provider string is not NUL-terminated"},
		{"bad class", good, elf.ELFCLASSNONE, le, "decode note: unsupported elf class ELFCLASSNONE"},
		{"no byte order", good, elf.ELFCLASS64, nil, "decode note: no byte order"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseNote(tt.desc, tt.class, tt.order)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestWalkNotes(t *testing.T) {
	for _, tt := range []struct {
		name  string
		class elf.Class
		order byteOrder
		align int
	}{
		{"64-bit little-endian", elf.ELFCLASS64, binary.LittleEndian, 4},
		{"32-bit little-endian", elf.ELFCLASS32, binary.LittleEndian, 4},
		{"64-bit big-endian", elf.ELFCLASS64, binary.BigEndian, 4},
		{"32-bit big-endian", elf.ELFCLASS32, binary.BigEndian, 4},
		{"64-bit little-endian, 8-byte alignment", elf.ELFCLASS64, binary.LittleEndian, 8},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.order
			var sec []byte
			sec = append(sec, makeNote(o, "stapsdt", 3, makeDesc(tt.class, o, 0x1000, 0x2000, 0x4000, "prov", "a", "8@%rax"), tt.align)...)
			sec = append(sec, makeNote(o, "GNU", 3, []byte("not a probe, no NULs......."), tt.align)...)
			sec = append(sec, makeNote(o, "stapsdt", 1, []byte{1, 2, 3}, tt.align)...)
			sec = append(sec, makeNote(o, "stapsdtx", 3, nil, tt.align)...)
			sec = append(sec, makeNote(o, "", 0, nil, tt.align)...)
			sec = append(sec, makeNote(o, "stapsdt", 3, makeDesc(tt.class, o, 0x1010, 0x2000, 0, "prov", "b", ""), tt.align)...)
			notes, err := walkNotes(sec, o, tt.class, uint64(tt.align))
			require.NoError(t, err)
			assert.Equal(t, []Note{
				{Provider: "prov", Name: "a", Address: 0x1000, Base: 0x2000, SemaphoreAddress: 0x4000, Args: "8@%rax"},
				{Provider: "prov", Name: "b", Address: 0x1010, Base: 0x2000},
			}, notes)

			// Any truncation inside a note's header, owner name or
			// descriptor errors; cutting only the padding does not.
			desc := makeDesc(tt.class, o, 1, 2, 3, "p", "n", "1@$1")
			last := makeNote(o, "stapsdt", 3, desc, tt.align)
			descEnd := (12+8+tt.align-1)/tt.align*tt.align + len(desc)
			for i := descEnd; i <= len(last); i++ {
				_, err = walkNotes(last[:i], o, tt.class, uint64(tt.align))
				require.NoError(t, err, "truncated to %d bytes", i)
			}
			for i := 1; i < descEnd; i++ {
				_, err := walkNotes(last[:i], o, tt.class, uint64(tt.align))
				assert.Error(t, err, "truncated to %d bytes", i)
			}
		})
	}
}

func TestWalkNotesErrors(t *testing.T) {
	le := binary.LittleEndian
	hdr := func(namesz, descsz, typ uint32) []byte {
		return le.AppendUint32(le.AppendUint32(le.AppendUint32(nil, namesz), descsz), typ)
	}
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"short header", []byte{1, 2, 3}, "walk notes: truncated note header at section offset 0x0"},
		{"huge name", hdr(0xffffffff, 0, 3), "walk notes: note at section offset 0x0: name of 4294967295 bytes runs past the section end"},
		{"huge descriptor", append(hdr(8, 0xfffffff0, 3), "stapsdt\x00"...), "descriptor of 4294967280 bytes runs past the section end"},
		{"bad descriptor", append(append(hdr(8, 4, 3), "stapsdt\x00"...), 0, 0, 0, 0), "walk notes: note at section offset 0x0: decode note: descriptor of 4 bytes is shorter"},
		{"trailing bytes", append(hdr(0, 0, 0), 0, 0, 0, 0), "truncated note header at section offset 0xc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := walkNotes(tt.data, le, elf.ELFCLASS64, 4)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	_, err := walkNotes(nil, nil, elf.ELFCLASS64, 4)
	assert.EqualError(t, err, "walk notes: no byte order")

	notes, err := walkNotes(nil, le, elf.ELFCLASS64, 4)
	require.NoError(t, err)
	assert.Nil(t, notes)
}
