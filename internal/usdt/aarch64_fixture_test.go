package usdt

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

// crossCompiler is the gcc cross compiler for arm64 (Debian package
// gcc-aarch64-linux-gnu, with libc6-dev-arm64-cross).
const crossCompiler = "aarch64-linux-gnu-gcc"

// sdtInclude returns a directory holding sys/sdt.h and sys/sdt-config.h,
// copied from the host's systemtap-sdt-dev: the header is the same for
// every architecture, but the cross compiler does not search the host's
// multiarch include directory.
func sdtInclude(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "include")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sys"), 0o755))
	for _, name := range []string{"sdt.h", "sdt-config.h"} {
		var data []byte
		var err error
		for _, src := range []string{"/usr/include/x86_64-linux-gnu/sys/", "/usr/include/sys/", "/usr/include/aarch64-linux-gnu/sys/"} {
			if data, err = os.ReadFile(src + name); err == nil {
				break
			}
		}
		if err != nil {
			testutil.SkipOrFail(t, "<sys/%s> not found (systemtap-sdt-dev): %v", name, err)
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, "sys", name), data, 0o644))
	}
	return dir
}

// crossBuild compiles testdata/usdt sources for arm64 into dir/out with
// the given compiler driver and flags.
func crossBuild(t *testing.T, compiler, dir, out string, flags []string, srcs ...string) string {
	t.Helper()
	path := filepath.Join(dir, out)
	args := append([]string{"-Wall", "-g0", "-I", sdtInclude(t), "-o", path}, flags...)
	for _, s := range srcs {
		args = append(args, filepath.Join(fixtureDir, s))
	}
	if b, err := exec.Command(compiler, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", compiler, strings.Join(args, " "), err, b)
	}
	return path
}

// TestARM64Fixtures cross-builds the fixtures for arm64 with gcc (and
// clang, linked by the cross gcc) and checks every note against readelf:
// addresses, file offsets, the nop at each site, semaphores, and every
// argument spec, whose canonical form must be the spec exactly as the
// compiler wrote it.
func TestARM64Fixtures(t *testing.T) {
	gcc := requireTool(t, crossCompiler)
	type build struct {
		name   string
		out    string
		flags  []string
		srcs   []string
		clang  bool
		shared bool
	}
	var builds []build
	for _, opt := range []string{"-O0", "-O1", "-O2", "-O3", "-Os"} {
		builds = append(builds,
			build{name: "kinds-pie" + opt, out: "kinds", flags: []string{opt, "-fPIE", "-pie"}, srcs: []string{"kinds.c"}},
			build{name: "kinds-static" + opt, out: "kinds", flags: []string{opt, "-static", "-fno-pie", "-no-pie"}, srcs: []string{"kinds.c"}},
		)
	}
	builds = append(builds,
		build{name: "fixture-O0", out: "fixture", flags: []string{"-O0"}, srcs: []string{"sem.c", "plain.c"}},
		build{name: "fixture-O2-nopie", out: "fixture", flags: []string{"-O2", "-fno-pie", "-no-pie"}, srcs: []string{"sem.c", "plain.c"}},
		build{name: "lib-O2", out: "libfixture.so", flags: []string{"-O2", "-shared", "-fPIC"}, srcs: []string{"lib.c"}, shared: true},
		build{name: "kinds-clang-O0", out: "kinds", flags: []string{"-O0"}, srcs: []string{"kinds.c"}, clang: true},
		build{name: "kinds-clang-O2", out: "kinds", flags: []string{"-O2"}, srcs: []string{"kinds.c"}, clang: true},
	)

	// Operand shapes over all builds: each must show up somewhere.
	shapes := map[string]int{}
	for _, b := range builds {
		t.Run(b.name, func(t *testing.T) {
			dir := t.TempDir()
			var path string
			if b.clang {
				clang := requireTool(t, "clang-14")
				obj := crossBuild(t, clang, dir, "kinds.o", append([]string{"--target=aarch64-linux-gnu", "-c",
					"-isystem", "/usr/aarch64-linux-gnu/include"}, b.flags...), b.srcs...)
				path = filepath.Join(dir, b.out)
				if out, err := exec.Command(gcc, "-o", path, obj).CombinedOutput(); err != nil {
					t.Fatalf("linking %s: %v\n%s", obj, err, out)
				}
			} else {
				path = crossBuild(t, gcc, dir, b.out, b.flags, b.srcs...)
			}
			f := openELF(t, path)
			require.Equal(t, elf.EM_AARCH64, f.Machine)
			probes := compareWithReadelf(t, path)
			for _, p := range probes {
				for i, loc := range p.Locations {
					require.NoError(t, loc.ArgsErr, "%s site %d: %q", p, i, loc.ArgsText)
					fields, err := splitARM64Args(loc.ArgsText)
					require.NoError(t, err)
					require.Len(t, loc.Args, len(fields))
					for j, a := range loc.Args {
						// gcc and clang write specs canonically.
						assert.Equal(t, fields[j], canonicalARM64(a), "%s site %d arg %d", p, i, j)
						shapes[arm64Shape(a)]++
						checkARM64Arg(t, a)
					}
				}
			}
			if b.out == "kinds" {
				checkKinds(t, probes, b.clang, b.flags[0])
			}
			if b.shared {
				// A static global of a shared library: through a section
				// anchor, whose name is not in the symbol table.
				peek := probeByName(t, probes, "fixturelib:peek").Locations[0]
				require.Len(t, peek.Args, 1)
				assert.NotZero(t, peek.SemaphoreFileOffset)
				assert.True(t, peek.Args[0].Operand.SymbolLow12, peek.ArgsText)
			}
			if b.name == "fixture-O2-nopie" {
				globals := probeByName(t, probes, "fixture:globals").Locations[0]
				require.Len(t, globals.Args, 2)
				assert.Equal(t, memLo12(globals.Args[0].Operand.Base, 0, "counter"), globals.Args[0].Operand, globals.ArgsText)
				assert.NotZero(t, readelfSymbols(t, path)["counter"])
				bytes := probeByName(t, probes, "fixture:bytes").Locations[0]
				require.Len(t, bytes.Args, 2)
				assert.NotEqual(t, regs.None, bytes.Args[1].Operand.Index, "buf[a] is [base, index]: %s", bytes.ArgsText)
			}
		})
	}
	t.Logf("operand shapes: %v", shapes)
	for _, want := range []string{
		"register", "[register]", "[register, disp]", "[sp]", "[sp, disp]", "[register, index]",
		"[register, #:lo12:symbol]", "constant", "float register", "float [register, disp]",
	} {
		assert.NotZero(t, shapes[want], "no %s operand in any build", want)
	}
}

// arm64Shape names the form of an arm64 operand.
func arm64Shape(a Arg) string {
	o := a.Operand
	s := ""
	if a.Float {
		s = "float "
	}
	switch o.Kind {
	case OperandRegister:
		return s + "register"
	case OperandConstant:
		return s + "constant"
	}
	base := "register"
	if o.Base == regs.SP {
		base = "sp"
	}
	switch {
	case o.SymbolLow12:
		return s + "[" + base + ", #:lo12:symbol]"
	case o.Index != regs.None:
		return s + "[" + base + ", index]"
	case o.Disp != 0:
		return s + "[" + base + ", disp]"
	}
	return s + "[" + base + "]"
}

// checkARM64Arg checks what holds for every operand of the compilers'
// notes: whole x registers; memory at a base plus an offset, an unscaled
// index or the low 12 bits of a symbol.
func checkARM64Arg(t *testing.T, a Arg) {
	t.Helper()
	o := a.Operand
	switch o.Kind {
	case OperandRegister:
		assert.Equal(t, uint8(8), o.Register.Size, "gcc and clang name x registers: %s", a.Text)
		assert.Equal(t, regs.ArchARM64, o.Register.Reg.Arch())
	case OperandMemory:
		assert.Equal(t, regs.ArchARM64, o.Base.Arch(), a.Text)
		if o.Index != regs.None {
			assert.Equal(t, uint8(1), o.Scale, a.Text)
		}
		assert.Equal(t, o.Symbol != "", o.SymbolLow12, a.Text)
	}
}

// checkKinds checks the probes of kinds.c whose operands do not depend on
// register allocation.
func checkKinds(t *testing.T, probes []Probe, clang bool, opt string) {
	t.Helper()
	consts := probeByName(t, probes, "kinds:consts").Locations[0]
	require.Len(t, consts.Args, 6)
	var values []int64
	for _, a := range consts.Args {
		require.Equal(t, OperandConstant, a.Operand.Kind, a.Text)
		values = append(values, a.Operand.Value)
	}
	assert.Equal(t, []int64{5, -1, 0, 4096, 0x123456789abc, -3}, values)
	assert.Equal(t, []uint8{4, 4, 4, 4, 8, 1}, []uint8{consts.Args[0].Size, consts.Args[1].Size, consts.Args[2].Size,
		consts.Args[3].Size, consts.Args[4].Size, consts.Args[5].Size})
	consts2 := probeByName(t, probes, "kinds:consts2").Locations[0]
	require.Len(t, consts2.Args, 3)
	assert.Equal(t, imm(1<<40), consts2.Args[2].Operand)

	many := probeByName(t, probes, "kinds:many").Locations[0]
	require.Len(t, many.Args, 12)
	for _, a := range many.Args {
		assert.True(t, a.Signed, a.Text)
		assert.Equal(t, uint8(8), a.Size, a.Text)
	}
	if !clang && opt != "-O0" {
		// The first eight arguments are still in x0…x7, the rest in the
		// caller's outgoing argument area at [sp], [sp, 8], … (AAPCS64).
		for i, a := range many.Args[:8] {
			assert.Equal(t, reg(regs.AAPCS64IntArgs[i], 8, 0), a.Operand, "arg %d: %s", i, a.Text)
		}
		for i, a := range many.Args[8:] {
			assert.Equal(t, mem(regs.SP, regs.None, 0, int64(8*i), ""), a.Operand, "arg %d: %s", 8+i, a.Text)
		}
	}
	floats := probeByName(t, probes, "kinds:floats").Locations[0]
	require.Len(t, floats.Args, 3)
	assert.True(t, floats.Args[0].Float)
	assert.Equal(t, uint8(4), floats.Args[0].Size)
	assert.True(t, floats.Args[1].Float)
	assert.Equal(t, uint8(8), floats.Args[1].Size)
	assert.False(t, floats.Args[2].Float)
}
