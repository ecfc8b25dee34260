package planner

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

// counting is a target that only counts refs.
func counting(path string, refs ...string) config.Target {
	return config.Target{Path: path, Counters: config.CountersOf(refs...)}
}

// resolveErr resolves targets, which must fail, and returns the error lines.
func resolveErr(t *testing.T, targets ...config.Target) []string {
	t.Helper()
	pl, err := Resolve(targets)
	require.Error(t, err)
	require.Nil(t, pl, "no plan with an error")
	return strings.Split(err.Error(), "\n")
}

// machineCopy copies path with e_machine patched to machine.
func machineCopy(t *testing.T, path string, machine byte) string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, []byte{0x3e, 0x00}, data[18:20], "EM_X86_64, little-endian")
	data[18], data[19] = machine, 0x00
	out := filepath.Join(t.TempDir(), fmt.Sprintf("demo-machine-%d", machine))
	require.NoError(t, os.WriteFile(out, data, 0o755))
	return out
}

func TestResolveFileErrors(t *testing.T) {
	b := testutil.BuildDemo(t, "-O2")
	dir := t.TempDir()

	text := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(text, []byte("this is not an ELF file\n"), 0o644))
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	missing := filepath.Join(dir, "missing")
	ppc := machineCopy(t, b.Program, 0x15) // EM_PPC64

	// A relocatable object is an ELF file, but nothing runs it.
	src := filepath.Join(dir, "obj.c")
	require.NoError(t, os.WriteFile(src, []byte("int f(int x) { return x + 1; }\n"), 0o644))
	testutil.Gcc(t, dir, "-c", "-o", "obj.o", "obj.c")
	obj := filepath.Join(dir, "obj.o")

	for _, c := range []struct {
		name string
		path string
		want string
	}{
		{"missing file", missing, fmt.Sprintf("target %s: no such file", missing)},
		{"text file", text, fmt.Sprintf("target %s: not an ELF file (", text)},
		{"empty file", empty, fmt.Sprintf("target %s: not an ELF file (", empty)},
		{"ppc64 file", ppc, fmt.Sprintf("target %s: ELFCLASS64 ELFDATA2LSB EM_PPC64 file; only x86-64 and little-endian arm64 files (ELFCLASS64, ELFDATA2LSB, EM_X86_64 or EM_AARCH64) can be traced", ppc)},
		{"relocatable object", obj, fmt.Sprintf("target %s: ET_REL is neither an executable nor a shared library", obj)},
	} {
		t.Run(c.name, func(t *testing.T) {
			lines := resolveErr(t, counting(c.path, "uprobe:f"))
			require.Len(t, lines, 1, "one clear sentence")
			assert.True(t, strings.HasPrefix(lines[0], c.want), "got %q, want it to start with %q", lines[0], c.want)
		})
	}
}

// A file of another architecture than the collector's is refused with one
// sentence when the plan is for the host (Options.Arch), and read
// otherwise.
func TestResolveOtherArchitecture(t *testing.T) {
	b := testutil.BuildDemo(t, "-O2")
	arm := machineCopy(t, b.Program, 0xb7) // EM_AARCH64
	_, err := Resolve([]config.Target{counting(arm, "uprobe:f")}, Options{Arch: regs.ArchAMD64})
	require.Error(t, err)
	assert.Equal(t, fmt.Sprintf("target %s: an arm64 file (EM_AARCH64); this collector runs on amd64 and attaches uprobes only to amd64 files: run the arm64 build of the collector for it", arm), err.Error())

	pl, err := Resolve([]config.Target{counting(b.Program, "uprobe:work")}, Options{Arch: regs.ArchAMD64})
	require.NoError(t, err)
	assert.Equal(t, regs.ArchAMD64, pl.Files[0].Arch)
	_, err = Resolve([]config.Target{counting(b.Program, "uprobe:work")}, Options{Arch: regs.ArchARM64})
	require.ErrorContains(t, err, "an amd64 file (EM_X86_64); this collector runs on arm64 and attaches uprobes only to arm64 files")
}

func TestResolveNotFound(t *testing.T) {
	b := testutil.BuildDemo(t, "-O2")
	prog := b.Program

	t.Run("usdt probe", func(t *testing.T) {
		lines := resolveErr(t, counting(prog, "usdt:demo:query_start"))
		assert.Equal(t, []string{fmt.Sprintf(
			"target %s: usdt:demo:query_start: no such USDT probe in the file; closest: usdt:demo:query__start, usdt:demo:query__done, usdt:demo:request__start, usdt:demo:request__done, usdt:demo:tick", prog)}, lines)
	})
	t.Run("usdt provider", func(t *testing.T) {
		lines := resolveErr(t, counting(prog, "usdt:postgresql:query__start"))
		require.Len(t, lines, 1)
		assert.Contains(t, lines[0], "target "+prog+": usdt:postgresql:query__start: no such USDT probe in the file; closest: usdt:demo:query__start")
	})
	t.Run("usdt probe of the other file", func(t *testing.T) {
		lines := resolveErr(t, counting(b.Library, "usdt:demo:tick"))
		assert.Equal(t, []string{fmt.Sprintf("target %s: usdt:demo:tick: no such USDT probe in the file; closest: usdt:demolib:call", b.Library)}, lines)
	})
	t.Run("function", func(t *testing.T) {
		lines := resolveErr(t, counting(prog, "uprobe:wrok"))
		require.Len(t, lines, 1)
		assert.True(t, strings.HasPrefix(lines[0], fmt.Sprintf("target %s: uprobe:wrok: no such function in the file; closest: uprobe:work, ", prog)), lines[0])
		assert.Len(t, strings.Split(lines[0][strings.Index(lines[0], "closest: "):], ", "), 5, "five suggestions")
	})
	t.Run("return probe of a function", func(t *testing.T) {
		lines := resolveErr(t, counting(prog, "uretprobe:count_iterations"))
		require.Len(t, lines, 1)
		assert.True(t, strings.HasPrefix(lines[0], fmt.Sprintf("target %s: uretprobe:count_iterations: no such function in the file; closest: uretprobe:count_iteration, ", prog)), lines[0])
	})
	t.Run("an imported function is not in the file", func(t *testing.T) {
		lines := resolveErr(t, counting(prog, "uprobe:lib_call"))
		require.Len(t, lines, 1)
		assert.Contains(t, lines[0], "uprobe:lib_call: no such function in the file")
	})
	t.Run("a data symbol is not a function", func(t *testing.T) {
		lines := resolveErr(t, counting(prog, "uprobe:iterations"))
		require.Len(t, lines, 1)
		assert.Contains(t, lines[0], "uprobe:iterations: no such function in the file; closest: uprobe:iteration, uprobe:count_iteration")
	})
	t.Run("a file without USDT probes", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "p.c"), []byte("int main(void) { return 0; }\n"), 0o644))
		testutil.Gcc(t, dir, "-o", "p", "p.c")
		p := filepath.Join(dir, "p")
		lines := resolveErr(t, counting(p, "usdt:a:b"))
		assert.Equal(t, []string{fmt.Sprintf("target %s: usdt:a:b: the file has no USDT probes", p)}, lines)
		pl, err := Resolve([]config.Target{counting(p, "uprobe:main")})
		require.NoError(t, err, "its functions can still be probed")
		assert.Len(t, pl.Attachments, 1)
	})
	t.Run("offset beyond the function", func(t *testing.T) {
		w := lookup(t, prog, "work")
		require.NotZero(t, w.Size)
		lines := resolveErr(t, counting(prog, "uprobe:work+0x1000"))
		assert.Equal(t, []string{fmt.Sprintf("target %s: uprobe:work+0x1000: offset 0x1000 is beyond the end of work (%d bytes)", prog, w.Size)}, lines)
		lines = resolveErr(t, counting(prog, fmt.Sprintf("uprobe:work+%d", w.Size)))
		assert.Equal(t, []string{fmt.Sprintf("target %s: uprobe:work+%#x: offset %#x is beyond the end of work (%d bytes)", prog, w.Size, w.Size, w.Size)}, lines,
			"the offset of the byte after the last one")
		pl, err := Resolve([]config.Target{counting(prog, fmt.Sprintf("uprobe:work+%d", w.Size-1))})
		require.NoError(t, err, "the last byte is inside")
		assert.Equal(t, w.Value+w.Size-1, pl.Attachments[0].Address)
	})
	t.Run("a bad reference", func(t *testing.T) {
		lines := resolveErr(t, counting(prog, "kprobe:work"))
		assert.Equal(t, []string{fmt.Sprintf(`target %s: probe "kprobe:work": unknown probe kind "kprobe" (want usdt, uprobe, uretprobe, ret or line)`, prog)}, lines)
	})
}

// TestResolveAllErrors checks that the problems of every target are
// reported at once.
func TestResolveAllErrors(t *testing.T) {
	b := testutil.BuildDemo(t, "-O2")
	dir := t.TempDir()
	text := filepath.Join(dir, "text")
	require.NoError(t, os.WriteFile(text, []byte("hello"), 0o644))
	missing := filepath.Join(dir, "missing")
	prog := b.Program

	lines := resolveErr(t,
		counting(missing, "usdt:a:b"),
		config.Target{
			Path: prog,
			Spans: []config.Span{
				{Name: "q", Entry: "usdt:demo:query_start", Exit: "usdt:demo:query__done"},
				{Name: "w", Function: "wrok"},
				{Name: "ok", Function: "work", Attributes: map[string]string{"x": "arg0"}},
			},
			Counters: config.CountersOf("usdt:demo:tock", "uprobe:inner+0x1000"),
		},
		counting(text, "uprobe:f"),
		config.Target{
			Path:  prog,
			Spans: []config.Span{{Name: "q", Entry: "usdt:demo:query__start", Exit: "usdt:demo:query__done", Attributes: map[string]string{"x": "arg9"}, ExitAttributes: map[string]string{"y": "arg7"}}},
		},
		counting(b.Library, "usdt:demolib:cal"),
	)
	prefixes := []string{
		"target " + missing + ": no such file",
		"target " + prog + ": usdt:demo:query_start: no such USDT probe in the file; closest: usdt:demo:query__start",
		"target " + prog + ": uprobe:wrok: no such function in the file; closest: uprobe:work",
		"target " + prog + ": uretprobe:wrok: no such function in the file; closest: uretprobe:work",
		"target " + prog + ": usdt:demo:tock: no such USDT probe in the file; closest: usdt:demo:tick",
		"target " + prog + ": uprobe:inner+0x1000: offset 0x1000 is beyond the end of inner",
		"target " + text + ": not an ELF file",
		"target " + prog + `: span "q": usdt:demo:query__start: attribute "x": "arg9": site at`,
		"target " + prog + `: span "q": usdt:demo:query__done: attribute "y": "arg7": site at`,
		"target " + b.Library + ": usdt:demolib:cal: no such USDT probe in the file; closest: usdt:demolib:call",
	}
	require.Len(t, lines, len(prefixes), "%s", strings.Join(lines, "\n"))
	for i, p := range prefixes {
		assert.True(t, strings.HasPrefix(lines[i], p), "line %d:\n got %q\nwant %q…", i, lines[i], p)
	}
}

// Anything but a regular file is refused before it is opened: a FIFO would
// block the open forever, a device or directory is no program.
func TestResolveRefusesSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	for path, kind := range map[string]string{fifo: "a FIFO", dir: "a directory", "/dev/null": "a character device"} {
		_, err := Resolve([]config.Target{{Path: path, Counters: config.CountersOf("uprobe:main")}})
		assert.EqualError(t, err, "target "+path+": not a regular file ("+kind+")")
	}
}

// A C++ function written demangled is not a symbol: the error gives the
// mangled names it stands for.
func TestDemangledNameSuggestsMangled(t *testing.T) {
	if _, err := exec.LookPath("g++"); err != nil {
		testutil.SkipOrFail(t, "g++ not found: run make deps")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "app")
	out, err := exec.Command("g++", "-O1", "-o", bin, testutil.Testdata("cpp", "app.cc")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	for ref, want := range map[string]string{
		"uprobe:app::handle":           "use the mangled name: uprobe:_ZN3app6handleEPKc (app::handle(char const*)), uprobe:_ZN3app6handleEi (app::handle(int))",
		"uprobe:app::handle(int)":      "use the mangled name: uprobe:_ZN3app6handleEi (app::handle(int))",
		"uretprobe:app::Server::serve": "use the mangled name: uretprobe:_ZN3app6Server5serveEi (app::Server::serve(int))",
	} {
		_, err := Resolve([]config.Target{{Path: bin, Counters: config.CountersOf(ref)}})
		require.Error(t, err, ref)
		assert.Contains(t, err.Error(), want, ref)
	}
}
