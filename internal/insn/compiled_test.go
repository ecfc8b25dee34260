package insn

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/arch/x86/x86asm"
)

// cFuncs are the functions of testdata/insn/funcs.c.
var cFuncs = []string{"add3", "sum", "dispatch", "fib", "describe", "mix", "main"}

// TestCFixture decodes the C fixture built four ways and compares the
// result with objdump: instruction boundaries, RETs, entry probe offsets and
// the classes of common instructions.
func TestCFixture(t *testing.T) {
	dir := t.TempDir()
	builds := []struct {
		name  string
		flags []string
		cet   bool
	}{
		{"O0-cet", []string{"-O0", "-fcf-protection=full"}, true},
		{"O0-nocet", []string{"-O0", "-fcf-protection=none"}, false},
		{"O2-cet", []string{"-O2", "-fcf-protection=full"}, true},
		{"O2-nocet", []string{"-O2", "-fcf-protection=none"}, false},
	}
	for _, b := range builds {
		t.Run(b.name, func(t *testing.T) {
			bin := buildC(t, dir, b.name, b.flags...)
			od := objdump(t, bin)
			keep := map[string]bool{}
			for _, n := range cFuncs {
				keep[n] = true
			}
			fns := elfFuncs(t, bin, func(n string) bool { return keep[n] })
			require.Len(t, fns, len(cFuncs))
			cheap := 0
			for _, name := range cFuncs {
				fn := fns[name]
				insts, err := Decode(fn.code)
				require.NoError(t, err, name)
				sameBoundaries(t, name, fn.addr, len(fn.code), insts, od[name])

				// With the padding up to the next function.
				padded, err := Decode(fn.padded)
				require.NoError(t, err, "%s with padding", name)
				sameBoundaries(t, name+" with padding", fn.addr, len(fn.padded), padded, od[name])

				var rets []uint64
				var first []odInst
				for _, i := range od[name] {
					if i.addr >= fn.addr+fn.size {
						continue
					}
					if len(first) < 2 {
						first = append(first, i)
					}
					if i.mnemonic() == "ret" {
						rets = append(rets, i.addr-fn.addr)
					}
				}
				assert.Equal(t, rets, Returns(insts), "%s: RETs", name)
				assert.Equal(t, b.cet, first[0].mnemonic() == "endbr64", "%s starts with %q", name, first[0].text)

				off, class := CheapEntry(insts)
				if b.cet && first[1].mnemonic() == "push" && strings.Contains(first[1].text, "%") {
					assert.Equal(t, uint64(4), off, "%s: %s; %s", name, first[0].text, first[1].text)
					assert.Equal(t, Emulated, class, name)
					cheap++
				} else {
					assert.Equal(t, uint64(0), off, "%s: %s; %s", name, first[0].text, first[1].text)
					assert.Equal(t, insts[0].Class, class, name)
				}

				for k, in := range insts {
					checkClass(t, name, in, od[name][k])
				}
				if name == "dispatch" && strings.HasPrefix(b.name, "O2") {
					// The switch's jump table: an indirect jmp, which
					// -fcf-protection marks notrack (a ds prefix),
					// which the kernel refuses to probe.
					var jmp *Inst
					for k := range insts {
						if insts[k].Op == x86asm.JMP && !insts[k].hasTarget {
							jmp = &insts[k]
						}
					}
					require.NotNil(t, jmp, "dispatch has no indirect jmp")
					if b.cet {
						assert.Equal(t, Unsupported, jmp.Class, jmp.Text)
					} else {
						assert.Equal(t, SingleStepped, jmp.Class, jmp.Text)
					}
				}
			}
			switch {
			case !b.cet:
				assert.Zero(t, cheap)
			case b.name == "O0-cet":
				assert.Equal(t, len(cFuncs), cheap, "every function at -O0 starts with endbr64; push %%rbp")
			default:
				assert.NotZero(t, cheap)
			}
		})
	}
}

// checkClass cross-checks the class of an instruction with what objdump
// says it is.
func checkClass(t *testing.T, fn string, in Inst, od odInst) {
	t.Helper()
	m := od.mnemonic()
	want := SiteClass(255)
	indirect := strings.Contains(od.text, "*")
	switch {
	case strings.HasPrefix(od.text, "notrack"), strings.HasPrefix(od.text, "cs "), strings.HasPrefix(od.text, "ds "):
		want = Unsupported
	case m == "push" && strings.HasPrefix(strings.Fields(od.text)[1], "%r"):
		want = Emulated
	case (m == "call" || m == "jmp") && !indirect, len(m) >= 2 && m[0] == 'j' && m != "jmp" && m != "jrcxz" && m != "jecxz":
		want = Emulated
	case m == "endbr64", m == "ret", m == "mov", m == "lea", m == "sub", m == "cmp", m == "test", m == "add",
		m == "movl", m == "movq", m == "movslq", m == "imul", m == "pop", m == "leave", m == "xor",
		(m == "call" || m == "jmp") && indirect:
		want = SingleStepped
	case m == "nop" && od.text == "nop", m == "xchg" && od.text == "xchg   %ax,%ax":
		want = Emulated
	case m == "int3":
		want = Unsupported
	}
	if want != 255 {
		assert.Equal(t, want, in.Class, "%s+%#x: %s (objdump: %s)", fn, in.Offset, in.Text, od.text)
	}
}

// TestGoFixture decodes every function of the Go fixture and compares the
// result with objdump: instruction boundaries, RETs and the entry probe
// offset after the stack check.
func TestGoFixture(t *testing.T) {
	bin := buildGo(t, t.TempDir(), "goprog")
	od := objdump(t, bin)
	fns := elfFuncs(t, bin, func(string) bool { return true })
	require.Greater(t, len(fns), 1000)

	withCheck := 0
	for name, fn := range fns {
		insts, err := Decode(fn.code)
		require.NoError(t, err, name)
		sameBoundaries(t, name, fn.addr, len(fn.code), insts, od[name])
		padded, err := Decode(fn.padded)
		require.NoError(t, err, "%s with padding", name)
		sameBoundaries(t, name+" with padding", fn.addr, len(fn.padded), padded, od[name])

		var rets []uint64
		for _, i := range od[name] {
			if i.addr < fn.addr+fn.size && i.mnemonic() == "ret" {
				rets = append(rets, i.addr-fn.addr)
			}
		}
		assert.Equal(t, rets, Returns(insts), "%s: RETs", name)

		want := goEntryFromObjdump(od[name], fn.addr, fn.size)
		got, class := GoEntry(insts)
		assert.Equal(t, want, got, "%s: GoEntry", name)
		if want > 0 {
			withCheck++
			i := find(insts, got)
			require.GreaterOrEqual(t, i, 1)
			assert.Equal(t, insts[i].Class, class)
		} else {
			assert.Equal(t, insts[0].Class, class)
		}
	}
	assert.Greater(t, withCheck, len(fns)/2, "most Go functions have a stack check")

	// The fixture's own functions, one per prologue shape.
	for name, shape := range map[string]struct {
		checkLen int // instructions before the entry probe; 0: no check
	}{
		"main.Leaf":     {0},
		"main.Small":    {2}, // cmp; jbe
		"main.Fib":      {2},
		"main.Classify": {2},
		"main.Medium":   {3}, // lea; cmp; jbe
		"main.Large":    {5}, // mov; sub; jb; cmp; jbe
	} {
		fn := fns[name]
		insts, err := Decode(fn.code)
		require.NoError(t, err, name)
		off, class := GoEntry(insts)
		if shape.checkLen == 0 {
			assert.Zero(t, off, name)
			continue
		}
		assert.Equal(t, insts[shape.checkLen].Offset, off, name)
		assert.Equal(t, Emulated, class, "%s: %s", name, insts[shape.checkLen].Text)
		assert.Equal(t, "push %rbp", insts[shape.checkLen].Text, name)
		assert.Equal(t, SingleStepped, insts[0].Class, "%s: the first instruction (%s)", name, insts[0].Text)
	}
	fib, err := Decode(fns["main.Fib"].code)
	require.NoError(t, err)
	assert.Len(t, Returns(fib), 2, "main.Fib returns from two places")
}

// goEntryFromObjdump finds the stack check in objdump's listing of a Go
// function: a cmp against the stack guard, then jbe to a block that calls
// runtime.morestack. It returns the offset of the instruction after the
// jbe, or 0.
func goEntryFromObjdump(od []odInst, addr, size uint64) uint64 {
	for k := 0; k+2 < len(od) && k < 8; k++ {
		cmp, jbe := od[k], od[k+1]
		if cmp.mnemonic() != "cmp" || !(strings.Contains(cmp.text, "(%r14),") || strings.Contains(cmp.text, "(%rcx),")) {
			continue
		}
		if m := jbe.mnemonic(); m != "jbe" && m != "jna" {
			continue
		}
		f := strings.Fields(jbe.text)
		target, err := strconv.ParseUint(f[1], 16, 64)
		if err != nil {
			return 0
		}
		for j, i := range od {
			if i.addr != target {
				continue
			}
			for _, b := range od[j:min(len(od), j+64)] {
				if b.addr >= addr+size {
					break
				}
				if b.mnemonic() == "call" && strings.Contains(b.text, "<runtime.morestack") {
					return od[k+2].addr - addr
				}
			}
		}
		return 0
	}
	return 0
}
