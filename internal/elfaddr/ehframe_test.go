package elfaddr

import (
	"debug/elf"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

// TestFunctionRangesMatchSymbols checks, on real files, that every function
// with a size in the symbol table has exactly one FDE with its bounds.
func TestFunctionRangesMatchSymbols(t *testing.T) {
	for _, path := range []string{"/usr/bin/python3.11", "/bin/bash", "/usr/lib/postgresql/15/bin/postgres"} {
		t.Run(path, func(t *testing.T) {
			f, err := elf.Open(path)
			if err != nil {
				testutil.SkipOrFail(t, "%v", err)
			}
			defer f.Close()
			ranges, err := FunctionRanges(f)
			require.NoError(t, err)
			require.NotEmpty(t, ranges)
			byStart := map[uint64]uint64{}
			for _, r := range ranges {
				byStart[r.Start] = r.End
			}
			syms, _ := f.DynamicSymbols()
			more, _ := f.Symbols()
			checked := 0
			for _, s := range append(syms, more...) {
				if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size == 0 || s.Section == elf.SHN_UNDEF {
					continue
				}
				end, ok := byStart[s.Value]
				if !ok {
					continue // hand-written assembly may have no CFI
				}
				assert.Equal(t, s.Value+s.Size, end, "%s", s.Name)
				r, ok := Containing(ranges, s.Value+s.Size/2)
				assert.True(t, ok, s.Name)
				assert.Equal(t, s.Value, r.Start, s.Name)
				checked++
			}
			assert.Greater(t, checked, 100)
		})
	}
}

func TestContaining(t *testing.T) {
	ranges := []Range{{0x10, 0x20}, {0x20, 0x30}, {0x40, 0x50}}
	for _, tc := range []struct {
		addr uint64
		want Range
		ok   bool
	}{
		{0x10, Range{0x10, 0x20}, true}, {0x1f, Range{0x10, 0x20}, true}, {0x20, Range{0x20, 0x30}, true},
		{0x30, Range{}, false}, {0x0f, Range{}, false}, {0x4f, Range{0x40, 0x50}, true}, {0x50, Range{}, false},
	} {
		got, ok := Containing(ranges, tc.addr)
		assert.Equal(t, tc.ok, ok, "%#x", tc.addr)
		assert.Equal(t, tc.want, got, "%#x", tc.addr)
	}
}

// ehEntry builds one .eh_frame entry from its body (after the length).
func ehEntry(body []byte) []byte {
	out := binary.LittleEndian.AppendUint32(nil, uint32(len(body)))
	return append(out, body...)
}

func TestParseEHFrameEncodings(t *testing.T) {
	cie := ehEntry([]byte{0, 0, 0, 0, 1, 'z', 'R', 0, 1, 0x78, 16, 1, 0x1b /* pcrel|sdata4 */, 0, 0, 0})
	// FDE at offset len(cie): id = distance back to the CIE.
	fdeStart := len(cie)
	body := binary.LittleEndian.AppendUint32(nil, uint32(fdeStart+4))
	// pc_begin pcrel: field at section addr + fdeStart + 8
	fieldAddr := uint64(0x1000 + fdeStart + 8)
	body = binary.LittleEndian.AppendUint32(body, uint32(int32(0x2000-int64(fieldAddr))))
	body = binary.LittleEndian.AppendUint32(body, 0x40)
	body = append(body, 0, 0, 0, 0)
	data := append(cie, ehEntry(body)...)
	data = append(data, 0, 0, 0, 0)
	got, err := parseEHFrame(data, 0x1000, binary.LittleEndian, true)
	require.NoError(t, err)
	assert.Equal(t, []Range{{0x2000, 0x2040}}, got)
}

// cieZR is a CIE without personality; ciePersonality one whose 'P'
// augmentation names a personality routine (pcrel|sdata4 at 0x100 from
// the field, as gcc writes "zPLR"), and cieOmitted one whose 'P' encoding
// is DW_EH_PE_omit: no routine.
var (
	cieZR          = ehEntry([]byte{0, 0, 0, 0, 1, 'z', 'R', 0, 1, 0x78, 16, 1, 0x1b, 0, 0, 0})
	ciePersonality = ehEntry([]byte{0, 0, 0, 0, 1, 'z', 'P', 'L', 'R', 0, 1, 0x78, 16, 7, 0x9b, 0, 1, 0, 0, 0x1b, 0x1b, 0, 0})
	cieOmitted     = ehEntry([]byte{0, 0, 0, 0, 1, 'z', 'P', 'R', 0, 1, 0x78, 16, 2, 0xff, 0x1b, 0, 0})
)

// A CIE with a personality routine is found after others; a 'P' whose
// encoding is omit names none; a CIE that cannot be read is an error
// unless a personality came before it.
func TestPersonality(t *testing.T) {
	bad := ehEntry([]byte{0, 0, 0, 0, 9, 0})
	for _, tc := range []struct {
		name    string
		data    []byte
		want    bool
		wantErr bool
	}{
		{"none", cieZR, false, false},
		{"after another", append(append([]byte{}, cieZR...), ciePersonality...), true, false},
		{"omitted", cieOmitted, false, false},
		{"before a bad CIE", append(append([]byte{}, ciePersonality...), bad...), true, false},
		{"after a bad CIE", append(append([]byte{}, bad...), ciePersonality...), false, true},
		{"empty", nil, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fr, err := readEHFrame(tc.data, 0x1000, binary.LittleEndian, true, true)
			assert.Equal(t, tc.want, fr.personality)
			assert.Equal(t, tc.wantErr, err != nil, "%v", err)
		})
	}
}

// On real files: the C++ runtime and glibc (-fexceptions for its
// callbacks) have personality routines, bash has none.
func TestHasPersonalityOfSystemFiles(t *testing.T) {
	for path, want := range map[string]bool{
		"/lib/x86_64-linux-gnu/libstdc++.so.6": true, "/lib/x86_64-linux-gnu/libc.so.6": true, "/bin/bash": false,
	} {
		f, err := elf.Open(path)
		if err != nil {
			testutil.SkipOrFail(t, "%v", err)
		}
		got, err := HasPersonality(f)
		f.Close()
		require.NoError(t, err, path)
		assert.Equal(t, want, got, path)
	}
}

func FuzzParseEHFrame(f *testing.F) {
	f.Add([]byte{4, 0, 0, 0, 0, 0, 0, 0}, uint64(0))
	f.Add(cieZR, uint64(0x1000))
	f.Add(append(append([]byte{}, cieZR...), ciePersonality...), uint64(0x1000))
	f.Add(cieOmitted, uint64(0))
	f.Fuzz(func(t *testing.T, data []byte, addr uint64) {
		ranges, _ := parseEHFrame(data, addr, binary.LittleEndian, true)
		for _, r := range ranges {
			if r.End <= r.Start {
				t.Fatalf("empty or wrapped range %+v", r)
			}
		}
		all, err := readEHFrame(data, addr, binary.LittleEndian, true, false)
		first, _ := readEHFrame(data, addr, binary.LittleEndian, true, true)
		if first.personality && !all.personality || err == nil && first.personality != all.personality {
			t.Fatalf("reading up to a personality finds %v, reading everything %v (%v)", first.personality, all.personality, err)
		}
	})
}
