package debuginfo

import (
	"encoding/binary"
	"testing"

	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/arch/arm64/arm64asm"
)

// arm64Rets returns the addresses of a function's RET instructions.
func arm64Rets(t *testing.T, f *File, fn *Function) []uint64 {
	t.Helper()
	text := f.exe.Section(".text")
	require.NotNil(t, text)
	data, err := text.Data()
	require.NoError(t, err)
	var out []uint64
	for _, r := range fn.Ranges {
		for pc := r[0]; pc+4 <= r[1]; pc += 4 {
			inst, err := arm64asm.Decode(data[pc-text.Addr:])
			if err == nil && inst.Op == arm64asm.RET {
				out = append(out, pc)
			}
		}
	}
	return out
}

// TestARM64Go reads a Go program built for arm64 on this host: DWARF
// register numbers map to x0..x30 and sp, the CFA at entry is sp+0, and
// results come from Go's arm64 result registers.
func TestARM64Go(t *testing.T) {
	f := open(t, fixture(t, "go-arm64"))
	require.Equal(t, archARM64, f.Arch)
	require.Equal(t, binary.LittleEndian, f.order)
	fn, err := f.Function("main.(*Server).Handle")
	require.NoError(t, err)
	c, err := f.CFAAt(fn.Entry)
	require.NoError(t, err)
	assert.Equal(t, "sp+0", cfaText(f.Arch, c))

	s, err := f.Scope(fn, 0, SiteEntry)
	require.NoError(t, err)
	for path, want := range map[string]string{
		"$s":          "%x0:x64",
		"$r.URL.Path": "+32(+16(%x1))&:gostring",
		"$r.ID":       "+72(%x1):s64",
		"$tag":        "%x2,len=%x3:gostring",
	} {
		p, err := fetch.ParsePath(path)
		require.NoError(t, err)
		a, err := s.Compile(p)
		if assert.NoError(t, err, path) {
			assert.Equal(t, want, a.String(), path)
		}
	}
	rets := arm64Rets(t, f, fn)
	require.NotEmpty(t, rets)
	for _, pc := range rets {
		s, err := f.Scope(fn, pc, SiteReturn)
		require.NoError(t, err)
		for path, want := range map[string]string{"$return": "%x0:s64", "$err": "%x1:x64"} {
			p, _ := fetch.ParsePath(path)
			a, err := s.Compile(p)
			if assert.NoError(t, err, path) {
				assert.Equal(t, want, a.String(), path)
			}
		}
	}
}
