package gobin

import (
	"debug/dwarf"
	"debug/elf"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

func TestGoMinor(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"go1.26.8", 26, true}, {"go1.23", 23, true}, {"go1.25rc1", 25, true},
		{"devel go1.27-abc", 0, false}, {"", 0, false}, {"go1.", 0, false},
	} {
		got, ok := goMinor(tc.in)
		assert.Equal(t, tc.ok, ok, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}

// TestGoIDOffset reads runtime.g.goid of this Go's binaries, with DWARF and
// stripped; both must agree with the release table.
func TestGoIDOffset(t *testing.T) {
	for _, stripped := range []bool{false, true} {
		bin := testutil.BuildGo(t, "goprog", stripped)
		f, err := elf.Open(bin)
		require.NoError(t, err)
		info, isGo, err := Detect(bin)
		require.NoError(t, err)
		require.True(t, isGo)
		var d *dwarf.Data
		if !stripped {
			d, err = f.DWARF()
			require.NoError(t, err)
		}
		off, ok := GoIDOffset(d, info.GoVersion)
		require.True(t, ok, "stripped=%v", stripped)
		fromDWARF, dwarfOK := dwarfGoIDOffset(d)
		assert.Equal(t, !stripped, dwarfOK)
		minor, _ := goMinor(info.GoVersion)
		assert.Equal(t, goidOffsets[minor], off, "table and binary agree for %s", info.GoVersion)
		if dwarfOK {
			assert.Equal(t, fromDWARF, off)
		}
		f.Close()
	}
}
