package threadctx

import (
	"bytes"
	"encoding/binary"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
)

// anyString encodes AnyValue{string_value}.
func anyString(s string) []byte {
	return protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), s)
}

// keyValue encodes ProcessContext.attributes entry KeyValue{key, value}.
func keyValue(key string, value []byte) []byte {
	kv := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), key)
	kv = protowire.AppendBytes(protowire.AppendTag(kv, 2, protowire.BytesType), value)
	return protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), kv)
}

// keyMap encodes AnyValue{array_value{values}} of strings, and one integer
// value where an entry is "".
func keyMap(names ...string) []byte {
	var arr []byte
	for _, n := range names {
		v := anyString(n)
		if n == "" {
			v = protowire.AppendVarint(protowire.AppendTag(nil, 3, protowire.VarintType), 7)
		}
		arr = protowire.AppendBytes(protowire.AppendTag(arr, 1, protowire.BytesType), v)
	}
	return protowire.AppendBytes(protowire.AppendTag(nil, 5, protowire.BytesType), arr)
}

func payload() []byte {
	resource := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), []byte("\x0a\x00"))
	b := append(resource, keyValue("service.name", anyString("shop"))...)
	b = append(b, keyValue(KeySchemaVersion, anyString("tlsdesc_v1_dev"))...)
	return append(b, keyValue(KeyAttributeMap, keyMap("http.route", "", "user.id"))...)
}

// The payload's thread-local keys are kept, the rest skipped; a key map
// entry of another type keeps its index, unnamed.
func TestDecodeProcessContext(t *testing.T) {
	pc, err := DecodeProcessContext(payload())
	require.NoError(t, err)
	assert.Equal(t, ProcessContext{SchemaVersion: "tlsdesc_v1_dev", Keys: []string{"http.route", "", "user.id"}}, pc)

	_, err = DecodeProcessContext([]byte{0x12, 0x40, 0x01})
	require.ErrorContains(t, err, "decoding the process context")
}

// header encodes a process context header.
func header(sig string, version, size uint32, published, payload uint64) []byte {
	b := make([]byte, contextHeaderSize)
	copy(b, sig)
	binary.LittleEndian.PutUint32(b[8:], version)
	binary.LittleEndian.PutUint32(b[12:], size)
	binary.LittleEndian.PutUint64(b[16:], published)
	binary.LittleEndian.PutUint64(b[24:], payload)
	return b
}

// The OTEP 4719 reading protocol: signature and version, a published time
// that is not zero, the payload, the same published time after it.
func TestReadProcessContext(t *testing.T) {
	p := payload()
	n := uint32(len(p))
	pc, err := ReadProcessContext(fakeMemory{0x1000: header("OTEL_CTX", 2, n, 77, 0x2000), 0x2000: p}, 0x1000)
	require.NoError(t, err)
	assert.Equal(t, uint64(77), pc.PublishedNs)
	assert.Equal(t, []string{"http.route", "", "user.id"}, pc.Keys)

	_, err = ReadProcessContext(fakeMemory{0x1000: header("OTEL_CTY", 2, n, 77, 0x2000)}, 0x1000)
	require.ErrorIs(t, err, ErrNoProcessContext)
	_, err = ReadProcessContext(fakeMemory{0x1000: header("OTEL_CTX", 3, n, 77, 0x2000)}, 0x1000)
	require.ErrorIs(t, err, ErrNoProcessContext)
	_, err = ReadProcessContext(fakeMemory{0x1000: header("OTEL_CTX", 2, n, 0, 0x2000)}, 0x1000)
	require.ErrorContains(t, err, "changed during 3 reads", "being written")
	_, err = ReadProcessContext(fakeMemory{0x1000: header("OTEL_CTX", 2, MaxPayload+1, 77, 0x2000)}, 0x1000)
	require.ErrorContains(t, err, "more than")
	_, err = ReadProcessContext(fakeMemory{0x1000: header("OTEL_CTX", 2, n, 77, 0x2000)}, 0x1000)
	require.ErrorContains(t, err, "payload")
	_, err = ReadProcessContext(changing{fakeMemory{0x1000: header("OTEL_CTX", 2, n, 77, 0x2000), 0x2000: p}}, 0x1000)
	require.ErrorContains(t, err, "changed during")
}

// changing is a memory whose context's published time changes at every
// read of it alone (a writer updating it all the time).
type changing struct{ fakeMemory }

func (c changing) ReadAt(p []byte, addr uint64) error {
	if addr == 0x1010 {
		binary.LittleEndian.PutUint64(p, 78)
		return nil
	}
	return c.fakeMemory.ReadAt(p, addr)
}

func TestIsProcessContext(t *testing.T) {
	for name, want := range map[string]bool{
		"[anon_shmem:OTEL_CTX]": true, "[anon:OTEL_CTX]": true, "/memfd:OTEL_CTX": true, "/memfd:OTEL_CTX (deleted)": true,
		"[anon:OTEL]": false, "/usr/lib/libc.so.6": false, "": false, "[heap]": false,
	} {
		assert.Equal(t, want, IsProcessContext(name), name)
	}
}

// attrs-data: entries in order, the last of a key wins, an unknown index
// is skipped and reported, an entry that does not fit ends the parse.
func TestDecodeAttributes(t *testing.T) {
	keys := []string{"method", "route", ""}
	for _, tc := range []struct {
		name    string
		data    []byte
		want    [][2]string
		unknown bool
	}{
		{"two", []byte{0, 3, 'G', 'E', 'T', 1, 2, '/', 'a'}, [][2]string{{"method", "GET"}, {"route", "/a"}}, false},
		{"last wins", []byte{1, 1, 'x', 0, 1, 'P', 1, 1, 'y'}, [][2]string{{"method", "P"}, {"route", "y"}}, false},
		{"unknown index", []byte{9, 1, 'z', 0, 1, 'G'}, [][2]string{{"method", "G"}}, true},
		{"unnamed index", []byte{2, 1, 'z'}, nil, true},
		{"cut entry", []byte{0, 3, 'G', 'E', 'T', 1, 9, '/'}, [][2]string{{"method", "GET"}}, false},
		{"empty value", []byte{0, 0}, [][2]string{{"method", ""}}, false},
		{"invalid UTF-8", []byte{0, 2, 0xff, 'a'}, [][2]string{{"method", "\uFFFDa"}}, false},
		{"one byte", []byte{0}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got [][2]string
			unknown := DecodeAttributes(tc.data, keys, func(k, v string) { got = append(got, [2]string{k, v}) })
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.unknown, unknown)
		})
	}
	many := make([]string, 40)
	var data []byte
	for i := range many {
		many[i] = string(rune('a' + i%26))
		data = append(data, byte(i), 1, 'v')
	}
	n := 0
	DecodeAttributes(data, many, func(string, string) { n++ })
	assert.Equal(t, MaxAttributes, n)
}

func FuzzDecodeProcessContext(f *testing.F) {
	f.Add(payload())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		pc, err := DecodeProcessContext(b)
		if err != nil {
			return
		}
		require.LessOrEqual(t, len(pc.Keys), MaxKeys)
		for _, k := range pc.Keys {
			require.LessOrEqual(t, len(k), 3*MaxKeyBytes)
		}
	})
}

func FuzzDecodeAttributes(f *testing.F) {
	f.Add([]byte{0, 3, 'G', 'E', 'T', 1, 2, '/', 'a'})
	f.Fuzz(func(t *testing.T, b []byte) {
		n := 0
		DecodeAttributes(b, []string{"a", "b", "c"}, func(string, string) { n++ })
		require.LessOrEqual(t, n, 3)
	})
}

// FuzzReadModule reads what the fuzzer makes of an ELF file (seeded with
// the test binary itself): ReadModule never panics and bounds what it keeps.
func FuzzReadModule(f *testing.F) {
	if exe, err := os.Executable(); err == nil {
		if b, err := os.ReadFile(exe); err == nil && len(b) < 64<<20 {
			f.Add(b[:min(len(b), 1<<16)])
		}
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ReadModule(bytes.NewReader(b))
		if err != nil {
			return
		}
		require.LessOrEqual(t, len(m.Relocs), maxRelocs)
		require.LessOrEqual(t, len(m.Loads), 64)
	})
}
