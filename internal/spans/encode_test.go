package spans

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

// rec hand-encodes the stored values of one span end the way the engine's
// fetch_one lays them out (bpf/engine.bpf.c):
//
//	StoreInt:    8 bytes little endian
//	StoreString: u16 LE length (without the NUL), the bytes, a NUL, zero
//	             padding to a multiple of 8 counting the 2-byte length
//	StoreBytes:  exactly MaxLen bytes, zero padding to a multiple of 8
//
// A failed fetch stores nothing, so the test simply does not call rec for it.
type rec []byte

func (r rec) int(v uint64) rec {
	return binary.LittleEndian.AppendUint64(r, v)
}

func (r rec) str(s string) rec {
	start := len(r)
	r = binary.LittleEndian.AppendUint16(r, uint16(len(s)))
	r = append(r, s...)
	r = append(r, 0)
	return r.pad(start, (2+len(s)+1+7)&^7)
}

func (r rec) bytes(b []byte, maxLen int) rec {
	if len(b) != maxLen {
		panic("bytes fetch stores exactly MaxLen bytes")
	}
	start := len(r)
	r = append(r, b...)
	return r.pad(start, (maxLen+7)&^7)
}

// raw appends bytes as they are, for malformed records.
func (r rec) raw(b ...byte) rec { return append(r, b...) }

func (r rec) pad(start, advance int) rec {
	for len(r)-start < advance {
		r = append(r, 0)
	}
	return r
}

// TestRecEncoder pins the helper to literal bytes, so that the golden tests
// rest on the documented layout and not only on the helper agreeing with
// the decoder.
func TestRecEncoder(t *testing.T) {
	require.Equal(t, []byte{0x01, 0x02, 0, 0, 0, 0, 0, 0x80}, []byte(rec{}.int(0x8000000000000201)))
	// "abc": 2 + 3 + 1 = 6 -> 8.
	require.Equal(t, []byte{3, 0, 'a', 'b', 'c', 0, 0, 0}, []byte(rec{}.str("abc")))
	// "abcde": 2 + 5 + 1 = 8 -> 8, no padding.
	require.Equal(t, []byte{5, 0, 'a', 'b', 'c', 'd', 'e', 0}, []byte(rec{}.str("abcde")))
	// "abcdef": 2 + 6 + 1 = 9 -> 16.
	require.Equal(t, []byte{6, 0, 'a', 'b', 'c', 'd', 'e', 'f', 0, 0, 0, 0, 0, 0, 0, 0}, []byte(rec{}.str("abcdef")))
	// "": 2 + 0 + 1 = 3 -> 8.
	require.Equal(t, []byte{0, 0, 0, 0, 0, 0, 0, 0}, []byte(rec{}.str("")))
	// bytes[5] -> 8.
	require.Equal(t, []byte{1, 2, 3, 4, 5, 0, 0, 0}, []byte(rec{}.bytes([]byte{1, 2, 3, 4, 5}, 5)))
	// bytes[16] -> 16.
	require.Len(t, rec{}.bytes(make([]byte, 16), 16), 16)
}
