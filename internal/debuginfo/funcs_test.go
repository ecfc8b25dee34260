package debuginfo

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/glob"
)

// declLine returns the line of src whose text starts with prefix.
func declLine(t *testing.T, src, prefix string) int {
	t.Helper()
	fh, err := os.Open(testutil.Testdata("debuginfo", src))
	require.NoError(t, err)
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for n := 1; sc.Scan(); n++ {
		if strings.HasPrefix(strings.TrimSpace(sc.Text()), prefix) {
			return n
		}
	}
	t.Fatalf("no %q in %s", prefix, src)
	return 0
}

func TestFunctions(t *testing.T) {
	for _, c := range []struct {
		fixture, src string
		funcs        map[string]string // name -> prefix of its declaration line
	}{
		{"c-O0", "prog.c", map[string]string{"handle_request": "NOIPA int handle_request(", "compute": "NOIPA long compute(", "main": "int main("}},
		{"c-O2", "prog.c", map[string]string{"handle_request": "NOIPA int handle_request(", "sum_text": "NOIPA int sum_text("}},
		{"go-opt", "goprog/main.go", map[string]string{"main.(*Server).Handle": "func (s *Server) Handle(", "main.Sum": "func Sum(", "main.main": "func main()"}},
	} {
		f := open(t, fixture(t, c.fixture))
		syms, err := f.exe.Symbols()
		require.NoError(t, err)
		symAddr := map[string]uint64{}
		for _, s := range syms {
			symAddr[s.Name] = s.Value
		}
		fns, err := f.Functions()
		require.NoError(t, err)
		require.NotEmpty(t, fns)
		for i := 1; i < len(fns); i++ {
			require.LessOrEqual(t, fns[i-1].Entry, fns[i].Entry, "sorted by entry")
		}
		for name, prefix := range c.funcs {
			fn, err := f.Function(name)
			require.NoError(t, err, "%s %s", c.fixture, name)
			assert.Equal(t, name, fn.Name)
			assert.Equal(t, symAddr[name], fn.Entry, "%s: entry is the symbol's address", name)
			assert.Equal(t, declLine(t, c.src, prefix), fn.DeclLine, name)
			assert.True(t, strings.HasSuffix(fn.DeclFile, "/testdata/debuginfo/"+c.src), "%s: %s", name, fn.DeclFile)
			assert.True(t, fn.Contains(fn.Entry))
			at, err := f.FunctionAt(fn.Ranges[0][1] - 1)
			require.NoError(t, err)
			assert.Equal(t, fn, at)
			if fn.Language == LangGo {
				assert.Equal(t, "main", fn.CU, "Go names its units by package")
			} else {
				assert.True(t, strings.HasSuffix(fn.CU, "/testdata/debuginfo/prog.c"), fn.CU)
				assert.Equal(t, LangC, fn.Language)
			}
		}
		_, err = f.Function("no_such_function")
		assert.ErrorIs(t, err, ErrNotFound)
	}
}

func TestSelect(t *testing.T) {
	names := func(fns []*Function) []string {
		var out []string
		for _, fn := range fns {
			n := fn.Name
			if fn.Demangled != "" {
				n = fn.Demangled
			}
			out = append(out, n)
		}
		return out
	}
	for _, c := range []struct {
		fixture, selector string
		want              []string
	}{
		{"c-O2", "handle_request", []string{"handle_request"}},
		{"c-O2", "source_file:*/debuginfo/prog.c *_*", []string{"handle_request", "sum_text", "by_value", "many_args", "use_flags", "call_twice"}},
		{"c-O2", "source_file:prog.c", []string{"main", "handle_request", "compute", "sum_text", "by_value", "many_args", "use_flags", "call_twice"}},
		{"c-O2", "source_file:other.c", nil},
		{"go-opt", "main.(*Server).*", []string{"main.(*Server).Handle"}},
		{"go-opt", `main.(\*Server).Handle`, []string{"main.(*Server).Handle"}},
		{"go-opt", "source_file:*/goprog/main.go", []string{"main.(*Server).Handle", "main.Sum", "main.Lookup", "main.main"}},
		{"cpp", "srv::Server::handle", []string{"srv::Server::handle(srv::Request*)", "srv::Server::handle(int)"}},
		{"cpp", "srv::Server::handle(int)", []string{"srv::Server::handle(int)"}},
		{"cpp", "srv::twice<*>", []string{"long srv::twice<long>(long)", "int srv::twice<int>(int)"}},
		{"cpp", "_ZN3srv6Server6handleEi", []string{"srv::Server::handle(int)"}},
	} {
		f := open(t, fixture(t, c.fixture))
		sel, err := ParseSelector(c.selector)
		require.NoError(t, err)
		fns, err := f.Select(sel)
		require.NoError(t, err)
		assert.ElementsMatch(t, c.want, names(fns), "%s %q", c.fixture, c.selector)
	}
}

func TestDemangledMatchesCxxfilt(t *testing.T) {
	cxxfilt := requireTool(t, "c++filt")
	f := open(t, fixture(t, "cpp"))
	fns, err := f.Functions()
	require.NoError(t, err)
	n := 0
	for _, fn := range fns {
		if fn.LinkageName == "" {
			continue
		}
		out, err := exec.Command(cxxfilt, fn.LinkageName).Output()
		require.NoError(t, err)
		assert.Equal(t, strings.TrimSpace(string(out)), fn.Demangled, fn.LinkageName)
		n++
	}
	assert.GreaterOrEqual(t, n, 4)
}

var reGDBLoc = regexp.MustCompile(`(?m)^(?:1|1\.\d+)\s+(?:breakpoint\s+keep\s+)?y\s+0x([0-9a-f]+)`)

// gdbBreakAddrs returns the addresses gdb sets a breakpoint at for a line.
func gdbBreakAddrs(t *testing.T, bin, spec string) []uint64 {
	t.Helper()
	requireTool(t, "gdb")
	out, err := exec.Command("gdb", "-nx", "-batch", "-ex", "break "+spec, "-ex", "info breakpoints", bin).CombinedOutput()
	require.NoError(t, err, "%s", out)
	var addrs []uint64
	for _, m := range reGDBLoc.FindAllStringSubmatch(string(out), -1) {
		a, _ := strconv.ParseUint(m[1], 16, 64)
		addrs = append(addrs, a)
	}
	require.NotEmpty(t, addrs, "gdb output:\n%s", out)
	return addrs
}

// TestLinesAgainstGDB compares the sites of a line with gdb's breakpoint
// locations for it.
func TestLinesAgainstGDB(t *testing.T) {
	for _, c := range []struct {
		fixture, src, marker string
		sites                int
	}{
		{"c-O0", "prog.c", "total", 1},
		{"c-O2", "prog.c", "total", 1},
		{"c-O0", "prog.c", "twice", 1},
		{"c-O2", "prog.c", "twice", 2},
		{"c-O2-dwarf4", "prog.c", "twice", 2},
		{"go-opt", "goprog/main.go", "total", 1},
		{"go-noopt", "goprog/main.go", "total", 1},
	} {
		bin := fixture(t, c.fixture)
		f := open(t, bin)
		line := markerLine(t, c.src, c.marker)
		sites, err := f.Lines(c.src, line)
		require.NoError(t, err)
		var got []uint64
		for _, s := range sites {
			got = append(got, s.Address)
			assert.Equal(t, line, s.Line)
			assert.True(t, strings.HasSuffix(s.File, c.src))
			assert.True(t, s.Function.Contains(s.Address))
		}
		assert.Len(t, got, c.sites, "%s %s", c.fixture, c.marker)
		want := gdbBreakAddrs(t, bin, c.src+":"+strconv.Itoa(line))
		assert.ElementsMatch(t, want, got, "%s %s:%d", c.fixture, c.src, line)
	}
}

func TestLinesErrors(t *testing.T) {
	f := open(t, fixture(t, "c-O2"))
	_, err := f.Lines("nope.c", 3)
	assert.ErrorIs(t, err, ErrNotFound)
	assert.ErrorContains(t, err, `names a file "nope.c"`)
	// A comment line has no code; the error names the nearest lines.
	_, err = f.Lines("prog.c", 2)
	assert.ErrorIs(t, err, ErrNotFound)
	assert.ErrorContains(t, err, "nearest line with code")

	file, line, err := ParseLineSpec("dir/prog.c:42")
	require.NoError(t, err)
	assert.Equal(t, "dir/prog.c", file)
	assert.Equal(t, 42, line)
	for _, bad := range []string{"prog.c", "prog.c:", ":3", "prog.c:x", "prog.c:0"} {
		_, _, err := ParseLineSpec(bad)
		assert.Error(t, err, bad)
	}
	assert.True(t, pathSuffix("/a/b/prog.c", "prog.c"))
	assert.True(t, pathSuffix("/a/b/prog.c", "b/prog.c"))
	assert.True(t, pathSuffix("/a/b/prog.c", "./b/prog.c"))
	assert.False(t, pathSuffix("/a/b/xprog.c", "prog.c"))
	assert.False(t, pathSuffix("/a/b/prog.c", "/b/prog.c"))
	assert.True(t, pathSuffix("/a/b/prog.c", "/a/b/prog.c"))
}

func TestFormatEnum(t *testing.T) {
	table := []fetch.Enumerator{{Name: "FLAG_NONE", Value: 0}, {Name: "FLAG_READ", Value: 1}, {Name: "FLAG_WRITE", Value: 2}, {Name: "FLAG_SYNC", Value: 4}}
	assert.Equal(t, "FLAG_NONE", fetch.FormatEnum(table, 0))
	assert.Equal(t, "FLAG_WRITE", fetch.FormatEnum(table, 2))
	assert.Equal(t, "FLAG_READ|FLAG_WRITE", fetch.FormatEnum(table, 3))
	assert.Equal(t, "9", fetch.FormatEnum(table, 9))
	assert.Equal(t, "-1", fetch.FormatEnum(table, -1))

	// The table of a compiled enum parameter.
	f := open(t, fixture(t, "c-O2"))
	fn, err := f.Function("use_flags")
	require.NoError(t, err)
	s, err := f.Scope(fn, 0, SiteEntry)
	require.NoError(t, err)
	p, _ := fetch.ParsePath("$fl")
	a, err := s.Compile(p)
	require.NoError(t, err)
	assert.Equal(t, table, a.Enum)
	assert.Equal(t, "enum flags", a.TypeName)
}

// A compile unit of a reproducible build names its file relative to a
// relative directory, as Debian's glibc does (DW_AT_comp_dir "./libio",
// DW_AT_name "fileops.c"): source globs match it as a path suffix, with
// or without a leading "*/", and as the DWARF spells it. Before, only
// "sub/prog.c" matched; "*/sub/prog.c" matched nothing.
func TestSelectRelativeCompDir(t *testing.T) {
	gcc := requireTool(t, "gcc")
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	require.NoError(t, os.MkdirAll(sub, 0o755))
	src, err := os.ReadFile(testutil.Testdata("debuginfo", "prog.c"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(sub, "prog.c"), src, 0o644))
	out := filepath.Join(dir, "prog")
	run(t, sub, nil, gcc, "-O2", "-g", "-fdebug-prefix-map="+dir+"=.", "-o", out, "prog.c")
	f := open(t, out)
	fns, err := f.Select(Selector{Name: mustGlob(t, "handle_request")})
	require.NoError(t, err)
	require.Len(t, fns, 1)
	require.Equal(t, "sub/prog.c", fns[0].CU, "DW_AT_comp_dir ./sub joined to DW_AT_name prog.c")
	for _, c := range []struct {
		source string
		want   bool
	}{
		{"sub/prog.c", true},
		{"*/sub/prog.c", true},
		{"./sub/prog.c", true},
		{"prog.c", true},
		{"*/prog.c", true},
		{"*.c", true},
		{"/sub/prog.c", false},
		{"ub/prog.c", false},
		{"*/other/prog.c", false},
	} {
		fns, err := f.Select(Selector{Name: mustGlob(t, "handle_request"), Source: mustGlob(t, c.source)})
		require.NoError(t, err)
		assert.Equal(t, c.want, len(fns) == 1, "source_file %q", c.source)
	}
}

func mustGlob(t *testing.T, p string) *glob.Glob {
	t.Helper()
	g, err := glob.Compile(p)
	require.NoError(t, err)
	return g
}
