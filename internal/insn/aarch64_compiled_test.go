package insn

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

// The cross tools for arm64 (Debian packages gcc-aarch64-linux-gnu,
// libc6-dev-arm64-cross and binutils-aarch64-linux-gnu).
const (
	crossGCC     = "aarch64-linux-gnu-gcc"
	crossObjdump = "aarch64-linux-gnu-objdump"
)

// buildCARM64 cross-compiles testdata/insn/funcs.c for arm64 into dir.
func buildCARM64(t *testing.T, dir, name string, flags ...string) string {
	t.Helper()
	if _, err := exec.LookPath(crossGCC); err != nil {
		testutil.SkipOrFail(t, "%s not found (gcc-aarch64-linux-gnu)", crossGCC)
	}
	out := filepath.Join(dir, name)
	args := append(append([]string{}, flags...), "-o", out, testutil.Testdata("insn", "funcs.c"))
	if b, err := exec.Command(crossGCC, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", crossGCC, strings.Join(args, " "), err, b)
	}
	return out
}

// buildGoARM64 builds the Go fixture testdata/gobin/goprog for
// GOARCH=arm64 into dir.
func buildGoARM64(t *testing.T, dir, name string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", out, ".")
	cmd.Dir = testutil.Testdata("gobin", "goprog")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=-buildvcs=false", "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("GOARCH=arm64 go build: %v\n%s", err, b)
	}
	return out
}

// classFromObjdump returns the class the kernel gives an arm64 instruction
// as objdump prints it, for the mnemonics compilers emit, or 255 when the
// mnemonic is not in the table.
func classFromObjdump(od odInst) SiteClass {
	f := strings.Fields(od.text)
	if len(f) == 0 {
		return 255
	}
	m := f[0]
	switch {
	case m == "nop", m == "b", m == "bl", strings.HasPrefix(m, "b."), m == "cbz", m == "cbnz", m == "tbz", m == "tbnz",
		m == "br", m == "blr", m == "ret", m == "adr", m == "adrp":
		return Emulated
	case m == "ldr" && !strings.Contains(od.text, "["), m == "ldrsw" && !strings.Contains(od.text, "["):
		// ldr (literal): general-purpose registers are refused, SIMD&FP
		// ones stepped at the wrong address.
		if r := f[1]; r[0] == 'x' || r[0] == 'w' {
			return Unsupported
		}
		return Unsafe
	case m == "ldxr", m == "stxr", m == "ldaxr", m == "stlxr", m == "ldxp", m == "stxp", m == "ldaxp", m == "stlxp",
		m == "ldxrb", m == "ldaxrb", m == "stxrb", m == "stlxrb", m == "svc", m == "brk", m == "autiasp", m == "autibsp",
		m == "retaa", m == "retab", m == "msr", m == "yield", m == "wfe", m == "wfi", m == "hlt":
		return Unsupported
	case m == "stp", m == "ldp", m == "str", m == "strb", m == "strh", m == "ldrb", m == "ldrh", m == "ldrsb", m == "ldrsh",
		m == "ldr", m == "ldrsw", m == "ldur", m == "stur", m == "mov", m == "movk", m == "movz", m == "add", m == "sub",
		m == "adds", m == "subs", m == "cmp", m == "cmn", m == "mul", m == "madd", m == "msub", m == "sdiv", m == "udiv",
		m == "and", m == "orr", m == "eor", m == "lsl", m == "lsr", m == "asr", m == "csel", m == "cset", m == "csinc",
		m == "sxtw", m == "uxtw", m == "sbfiz", m == "ubfiz", m == "ubfx", m == "sbfx", m == "neg", m == "mvn", m == "tst",
		m == "paciasp", m == "pacibsp", m == "bti", m == "dmb", m == "isb", m == "mrs", m == "fmov", m == "scvtf",
		m == "ldar", m == "stlr", m == "udf":
		return SingleStepped
	}
	return 255
}

// exclusiveSequences marks, by objdump's mnemonics, the instructions
// between an exclusive load and the exclusive store that follows it within
// 16 instructions.
func exclusiveSequences(od []odInst) []bool {
	is := func(m string, prefixes ...string) bool {
		for _, p := range prefixes {
			if m == p || m == p+"b" || m == p+"h" {
				return true
			}
		}
		return false
	}
	loadEx := func(m string) bool { return is(m, "ldxr", "ldaxr") || m == "ldxp" || m == "ldaxp" }
	storeEx := func(m string) bool { return is(m, "stxr", "stlxr") || m == "stxp" || m == "stlxp" }
	out := make([]bool, len(od))
	for i := range od {
		if !loadEx(od[i].mnemonic()) {
			continue
		}
		for j := i + 1; j < len(od) && j <= i+16; j++ {
			if m := od[j].mnemonic(); storeEx(m) {
				for k := i + 1; k < j; k++ {
					out[k] = true
				}
				break
			} else if loadEx(m) {
				break
			}
		}
	}
	return out
}

// sameARM64Boundaries checks that insts start exactly where objdump lists
// instructions in [addr, addr+n), and cross-checks the classes and the
// direct branch targets with objdump's.
func sameARM64Boundaries(t *testing.T, name string, addr uint64, n int, insts []Inst, od []odInst) int {
	t.Helper()
	sameBoundaries(t, name, addr, n, insts, od)
	inSequence := exclusiveSequences(od)
	checked := 0
	for k, o := range od {
		if o.addr >= addr+uint64(n) {
			break
		}
		in := insts[k]
		if want := classFromObjdump(o); want != 255 {
			if inSequence[k] && want.Probeable() {
				want = Unsafe
			}
			assert.Equal(t, want, in.Class, "%s+%#x: %s (objdump: %s)", name, in.Offset, in.Text, o.text)
			checked++
		}
		if in.hasTarget {
			// objdump prints the absolute target address first:
			// "b.ls 4a1dc5 <main.Small+0x44>", "tbz w0, #3, 4005d0 <f+0x10>".
			text, _, _ := strings.Cut(o.text, " <")
			f := strings.Fields(strings.ReplaceAll(text, ",", " "))
			target, err := strconv.ParseUint(f[len(f)-1], 16, 64)
			if assert.NoError(t, err, "%s+%#x: %s", name, in.Offset, o.text) {
				assert.Equal(t, int64(target-addr), in.target, "%s+%#x: %s (objdump: %s)", name, in.Offset, in.Text, o.text)
			}
		}
	}
	return checked
}

// TestCFixtureARM64 cross-builds the C fixture for arm64 three ways and
// compares the result with aarch64-linux-gnu-objdump: instruction
// boundaries, classes, branch targets, RETs and entry offsets.
func TestCFixtureARM64(t *testing.T) {
	dir := t.TempDir()
	for _, b := range []struct {
		name  string
		flags []string
		pac   bool
	}{
		{"O0", []string{"-O0"}, false},
		{"O2", []string{"-O2"}, false},
		{"O2-branch-protection", []string{"-O2", "-mbranch-protection=standard"}, true},
	} {
		t.Run(b.name, func(t *testing.T) {
			bin := buildCARM64(t, dir, b.name, b.flags...)
			od := objdumpWith(t, crossObjdump, bin, "--disassemble-zeroes")
			keep := map[string]bool{}
			for _, n := range cFuncs {
				keep[n] = true
			}
			fns := elfFuncs(t, bin, func(n string) bool { return keep[n] })
			require.Len(t, fns, len(cFuncs))
			checked, autiasp := 0, 0
			for _, name := range cFuncs {
				fn := fns[name]
				insts, err := DecodeARM64(fn.code)
				require.NoError(t, err, name)
				checked += sameARM64Boundaries(t, name, fn.addr, len(fn.code), insts, od[name])
				padded, err := DecodeARM64(fn.padded)
				require.NoError(t, err, "%s with padding", name)
				sameBoundaries(t, name+" with padding", fn.addr, len(fn.padded), padded, od[name])

				var rets []uint64
				for _, i := range od[name] {
					if i.addr < fn.addr+fn.size && i.mnemonic() == "ret" {
						rets = append(rets, i.addr-fn.addr)
					}
					if i.mnemonic() == "autiasp" {
						autiasp++
					}
				}
				assert.Equal(t, rets, Returns(insts), "%s: RETs", name)
				off, class := CheapEntry(insts)
				assert.Zero(t, off, name)
				assert.Equal(t, insts[0].Class, class, name)
				if b.pac {
					// bti c or paciasp first: stepped, like any prologue.
					assert.Contains(t, []string{"bti c", "paciasp"}, insts[0].Text, name)
					assert.Equal(t, SingleStepped, class, name)
				}
			}
			assert.Greater(t, checked, 100, "instructions whose class objdump's mnemonic fixes")
			if b.pac {
				assert.NotZero(t, autiasp, "-mbranch-protection=standard authenticates x30 before returning")
			}
		})
	}
}

// TestGoFixtureARM64 decodes every function of the Go fixture built for
// GOARCH=arm64 and compares the result with aarch64-linux-gnu-objdump:
// instruction boundaries, classes, branch targets, RETs and the entry
// probe offset after the stack check.
func TestGoFixtureARM64(t *testing.T) {
	bin := buildGoARM64(t, t.TempDir(), "goprog")
	od := objdumpWith(t, crossObjdump, bin, "--disassemble-zeroes")
	fns := elfFuncs(t, bin, func(string) bool { return true })
	require.Greater(t, len(fns), 1000)

	withCheck, checked, exclusive := 0, 0, 0
	for name, fn := range fns {
		if fn.size%4 != 0 {
			// Markers such as go:textfipsstart, of size 1.
			_, err := DecodeARM64(fn.code)
			require.Error(t, err, name)
			continue
		}
		insts, err := DecodeARM64(fn.code)
		require.NoError(t, err, name)
		checked += sameARM64Boundaries(t, name, fn.addr, len(fn.code), insts, od[name])
		for _, in := range insts {
			if in.Class == Unsafe {
				exclusive++
			}
		}

		var rets []uint64
		for _, i := range od[name] {
			if i.addr < fn.addr+fn.size && i.mnemonic() == "ret" {
				rets = append(rets, i.addr-fn.addr)
			}
		}
		assert.Equal(t, rets, Returns(insts), "%s: RETs", name)

		want := goEntryFromObjdumpARM64(od[name], fn.addr, fn.size)
		got, class := GoEntry(insts)
		assert.Equal(t, want, got, "%s: GoEntry", name)
		if want > 0 {
			withCheck++
			i := find(insts, got)
			require.GreaterOrEqual(t, i, 3)
			assert.Equal(t, insts[i].Class, class)
			assert.NotEqual(t, Unsupported, class, "%s: %s", name, insts[i].Text)
		} else {
			assert.Equal(t, insts[0].Class, class)
		}
	}
	t.Logf("%d functions, %d with a stack check, %d instructions classified by objdump's mnemonic, %d unsafe (in exclusive load/store sequences)",
		len(fns), withCheck, checked, exclusive)
	assert.NotZero(t, exclusive, "the runtime's atomics without LSE are exclusive load/store loops")
	assert.Greater(t, withCheck, len(fns)/2, "most Go functions have a stack check")
	assert.Greater(t, checked, 50000, "instructions whose class objdump's mnemonic fixes")

	// The fixture's own functions, one per prologue shape.
	for name, checkLen := range map[string]int{
		"main.Leaf":     0,
		"main.Small":    3, // ldr; cmp; b.ls
		"main.Fib":      3,
		"main.Classify": 3,
		"main.Medium":   4, // ldr; sub; cmp; b.ls
		"main.Large":    6, // ldr; mov; subs; b.lo; cmp; b.ls
	} {
		fn, ok := fns[name]
		require.True(t, ok, name)
		insts, err := DecodeARM64(fn.code)
		require.NoError(t, err, name)
		off, class := GoEntry(insts)
		if checkLen == 0 {
			assert.Zero(t, off, name)
			continue
		}
		assert.Equal(t, insts[checkLen].Offset, off, name)
		assert.Equal(t, SingleStepped, class, "%s: %s", name, insts[checkLen].Text)
		assert.Equal(t, "ldr x16, [x28,#16]", insts[0].Text, name)
		assert.Equal(t, "b.ls", strings.Fields(insts[checkLen-1].Text)[0], name)
	}
	fib, err := DecodeARM64(fns["main.Fib"].code)
	require.NoError(t, err)
	assert.Len(t, Returns(fib), 2, "main.Fib returns from two places")
	for _, off := range Returns(fib) {
		assert.Equal(t, Emulated, fib[find(fib, off)].Class, "Go's RET is a plain ret, which the kernel simulates")
	}
}

// goEntryFromObjdumpARM64 finds the stack check in objdump's listing of a
// Go arm64 function: the load of the stack guard from x28, then the b.ls to
// a block that calls runtime.morestack. It returns the offset of the
// instruction after the b.ls, or 0.
func goEntryFromObjdumpARM64(od []odInst, addr, size uint64) uint64 {
	for g := 0; g < len(od) && g < 8; g++ {
		if !strings.HasPrefix(od[g].text, "ldr") || !strings.Contains(od[g].text, "[x28, #16]") && !strings.Contains(od[g].text, "[x28, #24]") {
			continue
		}
		for k := g + 1; k+1 < len(od) && k <= g+8; k++ {
			if od[k].mnemonic() != "b.ls" {
				continue
			}
			f := strings.Fields(od[k].text)
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
					if b.mnemonic() == "bl" && strings.Contains(b.text, "<runtime.morestack") {
						return od[k+1].addr - addr
					}
				}
			}
			return 0
		}
		return 0
	}
	return 0
}
