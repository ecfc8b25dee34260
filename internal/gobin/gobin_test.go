package gobin

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

// goTool returns the go command, skipping (failing in CI) without one.
func goTool(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		testutil.SkipOrFail(t, "go tool not found")
	}
	return p
}

// buildGo builds the Go fixture testdata/gobin/goprog into dir with extra
// go build arguments and environment.
func buildGo(t testing.TB, dir, name string, env []string, args ...string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	cmd := exec.Command(goTool(t), append(append([]string{"build", "-o", out}, args...), ".")...)
	cmd.Dir = testutil.Testdata("gobin", "goprog")
	cmd.Env = append(append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=-buildvcs=false", "CGO_ENABLED=0"), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", args, err, b)
	}
	return out
}

// builds are the fixture's builds, made once for all tests.
var builds struct {
	once sync.Once
	dir  string
}

// fixture returns the path of the fixture built as name: "plain",
// "stripped" (-s -w), "pie", "external" (cgo, external linker) or
// "external-stripped".
func fixture(t *testing.T, name string) string {
	t.Helper()
	builds.once.Do(func() {
		d, err := os.MkdirTemp("", "gobin-test")
		require.NoError(t, err)
		builds.dir = d
	})
	out := filepath.Join(builds.dir, name)
	if _, err := os.Stat(out); err == nil {
		return out
	}
	var env, args []string
	switch name {
	case "plain":
	case "stripped":
		args = []string{"-ldflags=-s -w"}
	case "pie":
		args = []string{"-buildmode=pie", "-ldflags=-s -w"}
	case "external", "external-stripped":
		if _, err := exec.LookPath("gcc"); err != nil {
			testutil.SkipOrFail(t, "gcc not found (needed for external linking)")
		}
		env = []string{"CGO_ENABLED=1"}
		args = []string{"-ldflags=-linkmode=external"}
		if name == "external-stripped" {
			args = []string{"-ldflags=-linkmode=external -s -w"}
		}
	default:
		t.Fatalf("unknown build %q", name)
	}
	return buildGo(t, builds.dir, name, env, args...)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
	}
	os.Exit(code)
}

// goVersion returns what `go env GOVERSION` says, e.g. "go1.26.8".
func goVersion(t *testing.T) string {
	out, err := exec.Command(goTool(t), "env", "GOVERSION").Output()
	require.NoError(t, err)
	return strings.TrimSpace(string(out))
}

// nmSym is one text symbol from go tool nm -size.
type nmSym struct{ addr, size uint64 }

// goNM lists the text symbols of bin with go tool nm -size. A name may
// have two symbols: an assembly function and its ABI wrapper.
func goNM(t *testing.T, bin string) map[string][]nmSym {
	t.Helper()
	out, err := exec.Command(goTool(t), "tool", "nm", "-size", bin).Output()
	require.NoError(t, err, "go tool nm -size %s", bin)
	syms := map[string][]nmSym{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		// "  4a1d60          8 T main.Leaf"
		f := strings.Fields(sc.Text())
		if len(f) < 4 || (f[2] != "T" && f[2] != "t") {
			continue
		}
		a, err1 := strconv.ParseUint(f[0], 16, 64)
		s, err2 := strconv.ParseUint(f[1], 10, 64)
		if err1 == nil && err2 == nil {
			name := strings.Join(f[3:], " ")
			syms[name] = append(syms[name], nmSym{a, s})
		}
	}
	return syms
}

func TestDetect(t *testing.T) {
	want := goVersion(t)
	for _, name := range []string{"plain", "stripped", "pie", "external-stripped"} {
		t.Run(name, func(t *testing.T) {
			info, isGo, err := Detect(fixture(t, name))
			require.NoError(t, err)
			require.True(t, isGo)
			assert.Equal(t, want, info.GoVersion)
			assert.Equal(t, "goprog", info.Path)
			assert.Equal(t, "go1.20", info.Pclntab)
		})
	}
}

func TestDetectNotGo(t *testing.T) {
	dir := t.TempDir()
	testutil.Gcc(t, dir, "-O2", "-o", "cprog", testutil.Testdata("insn", "funcs.c"))
	script := filepath.Join(dir, "script.sh")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o755))
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	goBin, err := os.ReadFile(fixture(t, "stripped"))
	require.NoError(t, err)
	truncated := filepath.Join(dir, "truncated")
	require.NoError(t, os.WriteFile(truncated, goBin[:64], 0o644))

	for _, p := range []string{filepath.Join(dir, "cprog"), script, empty, "/proc/self/status"} {
		info, isGo, err := Detect(p)
		require.NoError(t, err, p)
		assert.False(t, isGo, p)
		assert.Equal(t, Info{}, info, p)
	}
	// An ELF header whose section table is cut off: an error, no panic.
	_, isGo, err := Detect(truncated)
	assert.False(t, isGo)
	assert.Error(t, err)

	_, _, err = Detect(filepath.Join(dir, "missing"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// TestFunctions compares the functions read from the pclntab with go tool
// nm on the unstripped build, for every function both list, and checks
// that stripped and externally linked builds give the same functions.
func TestFunctions(t *testing.T) {
	plain := fixture(t, "plain")
	nm := goNM(t, plain)
	fns := functions(t, plain)
	require.Greater(t, len(fns), 1000)

	byName := map[string]Function{}
	matched := 0
	for _, fn := range fns {
		byName[fn.Name] = fn
		if s, ok := sym(nm, fn); ok && !strings.HasPrefix(fn.Name, "go:") {
			// (go:textfipsstart and go:textfipsend mark the bounds of
			// the FIPS code; they have no line table, so their End is
			// the next function's entry.)
			matched++
			assert.Equal(t, s.addr+s.size, fn.End, "%s at %#x: end (size %d)", fn.Name, fn.Entry, s.size)
		}
	}
	assert.Greater(t, matched, len(fns)*9/10, "most pclntab functions are in the symbol table")
	for _, name := range []string{"main.main", "main.Leaf", "main.Small", "main.Medium", "main.Large", "main.Fib", "main.Classify", "runtime.morestack", "runtime.main"} {
		fn, ok := byName[name]
		require.True(t, ok, name)
		_, ok = sym(nm, fn)
		assert.True(t, ok, "%s at [%#x, %#x) is not in go tool nm's output: %v", name, fn.Entry, fn.End, nm[name])
	}
	for i := 1; i < len(fns); i++ {
		assert.LessOrEqual(t, fns[i-1].End, fns[i].Entry, "%s overlaps %s", fns[i-1].Name, fns[i].Name)
	}

	// Builds without a symbol table, and one whose Go text does not start
	// at .text: the same functions with the same sizes.
	for _, name := range []string{"stripped", "pie", "external", "external-stripped"} {
		t.Run(name, func(t *testing.T) {
			bin := fixture(t, name)
			got := functions(t, bin)
			mains := func(fns []Function) map[string]uint64 {
				m := map[string]uint64{}
				for _, fn := range fns {
					if strings.HasPrefix(fn.Name, "main.") {
						m[fn.Name] = fn.End - fn.Entry
					}
				}
				return m
			}
			assert.Equal(t, mains(fns), mains(got))
			if name == "stripped" {
				assert.Equal(t, fns, got, "stripping must not move functions")
			}
			if name == "external" {
				// Check addresses against the symbol table of this build.
				nm := goNM(t, bin)
				for _, fn := range got {
					if strings.HasPrefix(fn.Name, "main.") {
						s, ok := sym(nm, fn)
						require.True(t, ok, "%s at %#x: %v", fn.Name, fn.Entry, nm[fn.Name])
						assert.Equal(t, s.addr+s.size, fn.End, fn.Name)
					}
				}
			}
			if name == "external-stripped" {
				ext := functions(t, fixture(t, "external"))
				assert.Equal(t, ext, got, "stripping must not move functions")
			}
		})
	}
}

// sym returns the symbol of fn's name at fn's entry. The symbol table
// names assembly (ABI0) functions with a ".abi0" suffix; the pclntab does
// not.
func sym(nm map[string][]nmSym, fn Function) (nmSym, bool) {
	for _, s := range append(nm[fn.Name], nm[fn.Name+".abi0"]...) {
		if s.addr == fn.Entry {
			return s, true
		}
	}
	return nmSym{}, false
}

func functions(t *testing.T, bin string) []Function {
	t.Helper()
	f, err := elf.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	fns, err := Functions(f)
	require.NoError(t, err)
	return fns
}

func TestFunctionsNotGo(t *testing.T) {
	dir := t.TempDir()
	testutil.Gcc(t, dir, "-O2", "-o", "cprog", testutil.Testdata("insn", "funcs.c"))
	f, err := elf.Open(filepath.Join(dir, "cprog"))
	require.NoError(t, err)
	defer f.Close()
	_, err = Functions(f)
	assert.ErrorContains(t, err, "no .gopclntab section")
}

// pclntabFile returns the bytes of the stripped fixture and the file range
// of its .gopclntab section and of that section's header.
func pclntabFile(t testing.TB, bin string) (data []byte, off, size, shdr int) {
	t.Helper()
	data, err := os.ReadFile(bin)
	require.NoError(t, err)
	f, err := elf.NewFile(bytes.NewReader(data))
	require.NoError(t, err)
	for i, s := range f.Sections {
		if s.Name == ".gopclntab" {
			shoff := binary.LittleEndian.Uint64(data[0x28:])
			shentsize := binary.LittleEndian.Uint16(data[0x3a:])
			return data, int(s.Offset), int(s.Size), int(shoff) + i*int(shentsize)
		}
	}
	t.Fatal("no .gopclntab")
	return nil, 0, 0, 0
}

// corrupt opens an in-memory copy of data changed by edit.
func corrupt(t testing.TB, data []byte, edit func(b []byte)) *elf.File {
	t.Helper()
	b := bytes.Clone(data)
	edit(b)
	f, err := elf.NewFile(bytes.NewReader(b))
	require.NoError(t, err)
	return f
}

// TestFunctionsCorrupt checks that a damaged pclntab gives an error, not a
// panic or garbage.
func TestFunctionsCorrupt(t *testing.T) {
	data, off, size, shdr := pclntabFile(t, fixture(t, "stripped"))
	setSize := func(n int) func(b []byte) {
		return func(b []byte) { binary.LittleEndian.PutUint64(b[shdr+0x20:], uint64(n)) }
	}
	fill := func(from, to int, v byte) func(b []byte) {
		return func(b []byte) {
			for i := off + from; i < off+to && i < off+size; i++ {
				b[i] = v
			}
		}
	}
	for name, edit := range map[string]func(b []byte){
		"empty":             setSize(0),
		"header only":       setSize(16),
		"truncated to 4KiB": setSize(4096),
		"truncated to half": setSize(size / 2),
		"unknown magic":     fill(0, 4, 0xee),
		"go1.1 magic":       fill(0, 4, 0x00),
		"bad pointer size":  fill(7, 8, 3),
		"nfunc huge":        fill(8, 16, 0xff),
		"offsets huge":      fill(16, 72, 0x7f),
		"functab zeroed":    fill(72, size/2, 0),
		"all 0xff":          fill(0, size, 0xff),
	} {
		t.Run(name, func(t *testing.T) {
			f := corrupt(t, data, edit)
			fns, err := Functions(f)
			assert.Error(t, err)
			assert.Nil(t, fns)
		})
	}
}

// FuzzFunctions overwrites part of the stripped fixture's pclntab with fuzz
// data: Functions must return an error or functions inside the text, never
// panic.
func FuzzFunctions(f *testing.F) {
	dir := f.TempDir()
	bin := buildGo(f, dir, "goprog", nil, "-ldflags=-s -w")
	data, off, size, _ := pclntabFile(f, bin)
	f.Add(uint32(0), []byte{0xf1, 0xff, 0xff, 0xff})
	f.Add(uint32(8), []byte{0xff, 0xff, 0xff, 0x0f})
	f.Add(uint32(72), bytes.Repeat([]byte{0x41}, 64))
	f.Add(uint32(size/3), []byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, at uint32, patch []byte) {
		pos := off + int(at%uint32(size))
		file := corrupt(t, data, func(b []byte) { copy(b[pos:off+size], patch) })
		fns, err := Functions(file)
		if err != nil {
			require.Nil(t, fns)
			return
		}
		for _, fn := range fns {
			require.Less(t, fn.Entry, fn.End)
			require.NotEmpty(t, fn.Name)
		}
	})
}
