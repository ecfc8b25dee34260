package debuginfo

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseUnits(t *testing.T) {
	// A DWARF 4 unit (11-byte header) then a DWARF 5 compile unit (12).
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, 7+2)
	b = binary.LittleEndian.AppendUint16(b, 4)
	b = binary.LittleEndian.AppendUint32(b, 0) // abbrev offset
	b = append(b, 8, 1, 0)                     // address size, two DIE bytes
	second := len(b)
	b = binary.LittleEndian.AppendUint32(b, 8+1)
	b = binary.LittleEndian.AppendUint16(b, 5)
	b = append(b, 1, 8) // DW_UT_compile, address size
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = append(b, 0)
	units, err := parseUnits(b, binary.LittleEndian)
	require.NoError(t, err)
	require.Len(t, units, 2)
	assert.Equal(t, unit{off: 0, end: uint64(second), die: 11, version: 4, addrSize: 8}, units[0])
	assert.Equal(t, unit{off: uint64(second), end: uint64(len(b)), die: 25, version: 5, addrSize: 8}, units[1])

	f := &File{units: units}
	assert.Equal(t, &f.units[0], f.unitOf(11))
	assert.Equal(t, &f.units[1], f.unitOf(25))
	assert.Nil(t, f.unitOf(dwarfOffset(len(b))))

	for n := 1; n < second; n++ {
		_, err := parseUnits(b[:n], binary.LittleEndian)
		assert.ErrorIs(t, err, ErrMalformed, "truncated at %d", n)
	}
}

func FuzzParseUnits(f *testing.F) {
	f.Add([]byte{9, 0, 0, 0, 4, 0, 0, 0, 0, 0, 8, 1, 0})
	f.Add([]byte{9, 0, 0, 0, 5, 0, 1, 8, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		units, err := parseUnits(b, binary.LittleEndian)
		if err != nil {
			return
		}
		for _, u := range units {
			if u.end > uint64(len(b)) || uint64(u.die) > u.end {
				t.Fatalf("unit %+v past %d bytes", u, len(b))
			}
		}
	})
}
