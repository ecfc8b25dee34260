package debuginfo

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/arch/x86/x86asm"
)

// findRets returns the addresses of a function's RET instructions.
func findRets(t testing.TB, f *File, fn *Function) []uint64 {
	t.Helper()
	text := f.exe.Section(".text")
	require.NotNil(t, text)
	data, err := text.Data()
	require.NoError(t, err)
	var out []uint64
	for _, r := range fn.Ranges {
		for pc := r[0]; pc < r[1]; {
			off := pc - text.Addr
			inst, err := x86asm.Decode(data[off:], 64)
			if err != nil {
				pc++
				continue
			}
			if inst.Op == x86asm.RET {
				out = append(out, pc)
			}
			pc += uint64(inst.Len)
		}
	}
	return out
}
