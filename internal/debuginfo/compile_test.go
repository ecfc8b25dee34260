package debuginfo

import (
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/debuginfo/golden")

// goldenCase is a function, a site and the paths to compile there.
type goldenCase struct {
	function string
	site     Site
	marker   string // SiteLine: the LINE: marker
	paths    []string
}

var cGolden = []goldenCase{
	{"handle_request", SiteEntry, "", []string{
		"$req", "$req->id", "$req->path", "$req->hdr", "$req->hdr->name", "$req->hdr->len", "$req.hdr.len",
		"$req->port", "$req->prio", "$req->inline_hdr.name", "$req->inline_hdr.len", "$req->codes[2]", "$req->path[1]",
		"$fl", "$count", "$$params",
		// Errors.
		"$nope", "$req->nope", "$req->id->x", "$fl.x", "$req->inline_hdr", "$req->codes", "$req->codes[4]",
		"$req->inline_hdr->len", "$return", "$n",
	}},
	{"handle_request", SiteReturn, "", []string{"$return", "$req", "$$params"}},
	{"compute", SiteEntry, "", []string{"$a", "$b", "$r", "$$params"}},
	{"compute", SiteReturn, "", []string{"$return"}},
	{"sum_text", SiteEntry, "", []string{"$text", "$text[1]", "$total"}},
	{"sum_text", SiteLine, "total", []string{"$total", "$c", "$p", "$text", "$$params"}},
	{"by_value", SiteEntry, "", []string{"$p", "$p.x", "$p.y", "$tag", "$tag[0]", "$$params"}},
	{"many_args", SiteEntry, "", []string{"$a", "$f", "$g", "$h"}},
	{"use_flags", SiteEntry, "", []string{"$fl"}},
	{"use_flags", SiteReturn, "", []string{"$return"}},
	{"call_twice", SiteLine, "twice", []string{"$v", "$x", "$a", "$$params"}},
}

var goGolden = []goldenCase{
	{"main.(*Server).Handle", SiteEntry, "", []string{
		"$s", "$s.Name", "$s.Handled", "$r", "$r.URL", "$r.URL.Path", "$r->URL->Path", "$r.Method", "$r.Body",
		"$r.Body[1]", "$r.Header", "$r.ID", "$r.Flags", "$tag", "$$params",
		"$status", "$err", "$return", "$r.Nope", "$r.URL.Path.x",
	}},
	{"main.(*Server).Handle", SiteReturn, "", []string{"$return", "$status", "$err", "$tag", "$r.URL.Path"}},
	{"main.Sum", SiteEntry, "", []string{"$a", "$b", "$c", "$name", "$$params"}},
	{"main.Sum", SiteReturn, "", []string{"$return", "$~r0", "$~r1"}},
	{"main.Sum", SiteLine, "total", []string{"$total", "$name", "$a", "$b", "$c", "$~r0"}},
	{"main.Lookup", SiteEntry, "", []string{"$keys", "$keys[1]", "$i"}},
	{"main.Lookup", SiteReturn, "", []string{"$return"}},
}

var cppGolden = []goldenCase{
	{"srv::Server::handle(srv::Request*)", SiteEntry, "", []string{"$this", "$this->port_", "$this->handled_", "$req->id", "$req->path", "$$params"}},
	{"srv::Server::handle(int)", SiteEntry, "", []string{"$id", "$this->port_"}},
	{"long srv::twice<long>(long)", SiteEntry, "", []string{"$v"}},
}

// addrRE hides addresses, which move with any change of the fixtures.
var addrRE = regexp.MustCompile(`0x[0-9a-f]+`)

// goldenScopes returns the scopes of a case: the entry, every RET for a
// return of a Go function (or the uretprobe for C), every site of a line.
func goldenScopes(t *testing.T, f *File, fn *Function, c goldenCase, src string) []*Scope {
	t.Helper()
	var out []*Scope
	switch c.site {
	case SiteEntry:
		s, err := f.Scope(fn, 0, SiteEntry)
		require.NoError(t, err)
		out = append(out, s)
	case SiteReturn:
		if fn.Language == LangGo {
			for _, pc := range findRets(t, f, fn) {
				s, err := f.Scope(fn, pc, SiteReturn)
				require.NoError(t, err)
				out = append(out, s)
			}
		} else {
			s, err := f.Scope(fn, 0, SiteReturn)
			require.NoError(t, err)
			out = append(out, s)
		}
	case SiteLine:
		sites, err := f.Lines(src, markerLine(t, src, c.marker))
		require.NoError(t, err)
		for _, site := range sites {
			s, err := f.Scope(site.Function, site.Address, SiteLine)
			require.NoError(t, err)
			out = append(out, s)
		}
	}
	return out
}

// describe formats one compiled path for a golden file.
func describe(a Access) string {
	s := a.String() + "  [" + a.TypeName + "]"
	if a.Note != "" {
		s += " (" + a.Note + ")"
	}
	if a.Via != "" {
		s += " via " + a.Via
	}
	return s
}

func TestCompileGolden(t *testing.T) {
	for _, c := range []struct {
		fixture string
		cases   []goldenCase
		src     string
	}{
		{"c-O0", cGolden, "prog.c"}, {"c-O2", cGolden, "prog.c"},
		{"c-O0-dwarf4", cGolden, "prog.c"}, {"c-O2-dwarf4", cGolden, "prog.c"},
		{"clang-O0", cGolden, "prog.c"}, {"clang-O2", cGolden, "prog.c"},
		{"go-opt", goGolden, "goprog/main.go"}, {"go-noopt", goGolden, "goprog/main.go"},
		{"cpp", cppGolden, "prog.cc"},
		{"tu-gcc-O0-dwarf5", tuGolden, "typeunits.c"}, {"tu-gcc-O2-dwarf4", tuGolden, "typeunits.c"},
		{"tu-clang++-O2-dwarf5", tuGolden, "typeunits.c"},
	} {
		t.Run(c.fixture, func(t *testing.T) {
			got := goldenText(t, fixture(t, c.fixture), c.cases, c.src)
			golden := testutil.Testdata("debuginfo", "golden", c.fixture+".golden")
			if *update {
				require.NoError(t, os.MkdirAll(filepath.Dir(golden), 0o755))
				require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err, "run go test -run TestCompileGolden -update")
			assert.Equal(t, string(want), got)
		})
	}
}

// goldenText compiles the paths of cases in the file at bin, as the
// golden files show them: addresses hidden, the build directory as $TMP.
func goldenText(t *testing.T, bin string, cases []goldenCase, src string) string {
	t.Helper()
	f := open(t, bin)
	var b strings.Builder
	for _, gc := range cases {
		fn, err := f.Function(gc.function)
		require.NoError(t, err)
		for _, s := range goldenScopes(t, f, fn, gc, src) {
			fmt.Fprintf(&b, "# %s at %s", gc.function, gc.site)
			if gc.site == SiteLine {
				fmt.Fprintf(&b, " %s:LINE:%s", src, gc.marker)
			}
			if len(s.Inlined) > 0 {
				fmt.Fprintf(&b, " (inlined %s)", strings.Join(s.Inlined, " > "))
			}
			if s.PC == 0 {
				b.WriteString(" (uretprobe)")
			} else if gc.site != SiteEntry {
				fmt.Fprintf(&b, " (pc entry%+d)", int64(s.PC-fn.Entry))
			}
			b.WriteString("\n")
			for _, p := range gc.paths {
				pp, err := fetch.ParsePath(p)
				require.NoError(t, err, p)
				if pp.Kind == fetch.PathParams {
					as, err := s.CompileParams()
					for _, a := range as {
						fmt.Fprintf(&b, "%s: %s = %s\n", p, a.Path, describe(a))
					}
					if err != nil {
						for _, e := range splitJoined(err) {
							fmt.Fprintf(&b, "%s: error: %s\n", p, e)
						}
					}
					continue
				}
				a, err := s.Compile(pp)
				if err != nil {
					fmt.Fprintf(&b, "%s: error: %s\n", p, err)
					continue
				}
				fmt.Fprintf(&b, "%s = %s\n", p, describe(a))
			}
			b.WriteString("\n")
		}
	}
	got := addrRE.ReplaceAllString(b.String(), "0x…")
	return strings.ReplaceAll(got, filepath.Dir(bin), "$TMP")
}

// splitJoined returns the errors of an errors.Join.
func splitJoined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// TestCompileErrors checks the kinds and wording of refusals.
func TestCompileErrors(t *testing.T) {
	f := open(t, fixture(t, "c-O2"))
	fn, err := f.Function("handle_request")
	require.NoError(t, err)
	entry, err := f.Scope(fn, 0, SiteEntry)
	require.NoError(t, err)
	ret, err := f.Scope(fn, 0, SiteReturn)
	require.NoError(t, err)
	for _, c := range []struct {
		scope  *Scope
		path   string
		is     error
		substr []string
	}{
		{entry, "$nope", ErrNotFound, []string{"function handle_request at entry", `no variable "nope"`, "in scope: count, fl, req"}},
		{entry, "$req->nope", ErrNotFound, []string{"struct request has no field \"nope\"", "fields: id, path, hdr, port, prio, inline_hdr, codes"}},
		{entry, "$req->inline_hdr", ErrNotFetchable, []string{"$req->inline_hdr", "struct header", "fields: len, name", "bytes[20]"}},
		{entry, "$req->codes", ErrNotFetchable, []string{"index it"}},
		{entry, "$return", ErrNotFound, []string{"only known at a return"}},
		{ret, "$req", ErrOptimizedOut, []string{"uretprobe", "read them at its entry"}},
		{ret, "$global_counter", ErrTooComplex, []string{"position-independent", "load address"}},
	} {
		p, err := fetch.ParsePath(c.path)
		require.NoError(t, err)
		_, err = c.scope.Compile(p)
		require.Error(t, err, c.path)
		assert.ErrorIs(t, err, c.is, c.path)
		for _, s := range c.substr {
			assert.Contains(t, err.Error(), s, c.path)
		}
	}
	p, _ := fetch.ParsePath("$$params")
	_, err = entry.Compile(p)
	assert.ErrorContains(t, err, "CompileParams")
}

// TestCompileAs checks requested types: integers read from memory or
// registers, strings and bytes at pointers or addresses, gostring.
func TestCompileAs(t *testing.T) {
	f := open(t, fixture(t, "c-O2"))
	fn, err := f.Function("handle_request")
	require.NoError(t, err)
	s, err := f.Scope(fn, 0, SiteEntry)
	require.NoError(t, err)
	for _, c := range []struct {
		path, typ, want string
		err             error
	}{
		{"$req->id", "x16", "+0(%rdi):x16", nil},
		{"$req->path", "x64", "+8(%rdi):x64", nil},
		{"$req->path", "bytes[4]", "+8(%rdi):bytes[4]", nil},
		{"$req->inline_hdr", "bytes[20]", "%rdi+28:bytes[20]", nil},
		{"$req->inline_hdr.name", "string[8]", "%rdi+32:string[8]", nil},
		{"$req->hdr->name", "bytes[16]", "+4(+16(%rdi))&:bytes[16]", nil},
		{"$req", "string", "%rdi:string", nil},
		{"$count", "u8", "%rdx:u8", nil},
		{"$count", "string", "%rdx:string", nil},
		{"$fl", "string", "", ErrNotFetchable},
		{"$req->path", "gostring", "", ErrNotFetchable},
	} {
		p, err := fetch.ParsePath(c.path)
		require.NoError(t, err)
		typ, err := fetch.Parse("%ax:" + c.typ)
		require.NoError(t, err)
		a, err := s.CompileAs(p, typ.Type)
		if c.err != nil {
			assert.ErrorIs(t, err, c.err, "%s:%s", c.path, c.typ)
			continue
		}
		if assert.NoError(t, err, "%s:%s", c.path, c.typ) {
			assert.Equal(t, c.want, a.String(), "%s:%s", c.path, c.typ)
		}
	}
}

// TestGlobals checks how link-time addresses are rebased: absolute in a
// non-PIE file, rip-relative at a known pc in a PIE, refused after a
// return in a PIE; the addresses agree with the symbol table.
func TestGlobals(t *testing.T) {
	for _, name := range []string{"c-O2", "c-O2-nopie", "go-opt"} {
		f := open(t, fixture(t, name))
		syms, err := f.exe.Symbols()
		require.NoError(t, err)
		symAddr := map[string]uint64{}
		for _, s := range syms {
			symAddr[s.Name] = s.Value
		}
		fnName, global := "handle_request", "global_counter"
		if name == "go-opt" {
			fnName, global = "main.(*Server).Handle", "main.globalCount"
		}
		fn, err := f.Function(fnName)
		require.NoError(t, err)
		s, err := f.Scope(fn, 0, SiteEntry)
		require.NoError(t, err)
		p, err := fetch.ParsePath("$" + global)
		require.NoError(t, err)
		a, err := s.Compile(p)
		require.NoError(t, err, name)
		require.Len(t, a.Derefs, 1)
		want := symAddr[global]
		require.NotZero(t, want)
		switch f.Type {
		case elf.ET_EXEC:
			assert.Equal(t, regs.None, a.Register, name)
			assert.Equal(t, int64(want), a.Disp+a.Derefs[0], name)
		default:
			assert.Equal(t, regs.RIP, a.Register, name)
			assert.Equal(t, int64(want), int64(fn.Entry)+a.Disp+a.Derefs[0], "%s: rip-relative to the probed pc", name)
		}
	}
}

// TestParamsSources checks where parameter locations come from: location
// lists at -O2, the SysV convention at -O0's entry (whose DWARF names
// stack slots the prologue writes later), stack slots above the stack
// pointer for stack arguments.
func TestParamsSources(t *testing.T) {
	for _, c := range []struct {
		fixture, function, param, how string
	}{
		{"c-O2", "handle_request", "req", "location list"},
		{"c-O0", "handle_request", "req", "SysV calling convention at entry"},
		{"c-O0", "many_args", "g", "location expression"},
		{"c-O0", "by_value", "p", "SysV calling convention at entry"},
		{"go-noopt", "main.Sum", "name", "location list"},
	} {
		f := open(t, fixture(t, c.fixture))
		fn, err := f.Function(c.function)
		require.NoError(t, err)
		s, err := f.Scope(fn, 0, SiteEntry)
		require.NoError(t, err)
		v, err := s.Lookup(c.param)
		require.NoError(t, err)
		require.NoError(t, v.Err)
		assert.Equal(t, c.how, v.How, "%s %s %s", c.fixture, c.function, c.param)
	}
	// At -O0 the DWARF location of a parameter is a stack slot below the
	// stack pointer at the entry: refused there, used after the prologue.
	f := open(t, fixture(t, "c-O0"))
	fn, err := f.Function("compute")
	require.NoError(t, err)
	r := f.data.Reader()
	r.Seek(fn.Offset)
	_, err = r.Next()
	require.NoError(t, err)
	e, err := r.Next()
	require.NoError(t, err)
	_, _, err = f.locate(e, newNameResolver(f.data), fn, fn.Entry, SiteEntry, func() (Addr, error) { return Addr{Reg: 7, Off: 8}, nil })
	assert.True(t, errors.Is(err, errPrologueSlot), "%v", err)
}

// A struct refused as one value names only what compiles instead: a
// div_t-like result held whole in %rax offers its field at offset 0 and
// x64, never its field in the upper half (which was offered before, and
// refused as "byte 4 of a value held in a register"); one in memory
// offers every field and bytes[N]. Every suggestion compiles.
func TestStructRefusalSuggestsWhatCompiles(t *testing.T) {
	gcc := requireTool(t, "gcc")
	dir := t.TempDir()
	src := filepath.Join(dir, "pair.c")
	require.NoError(t, os.WriteFile(src, []byte(`typedef struct { int quot; int rem; } pair_t;
struct big { long a, b, c; };
__attribute__((noinline)) pair_t divide(int n, int d) { pair_t p = { n / d, n % d }; return p; }
__attribute__((noinline)) long sum(struct big *b) { return b->a + b->b + b->c; }
int main(int argc, char **argv) { struct big b = { argc, 2, 3 }; return divide(argc, 2).rem + (int)sum(&b); }
`), 0o644))
	bin := filepath.Join(dir, "pair")
	run(t, dir, nil, gcc, "-O2", "-g", "-o", bin, src)
	f := open(t, bin)

	compile := func(s *Scope, text string) (Access, error) {
		e, err := fetch.Parse(text)
		require.NoError(t, err)
		p, err := fetch.ParsePath(e.Path)
		require.NoError(t, err)
		if e.Typed {
			return s.CompileAs(p, e.Type)
		}
		return s.Compile(p)
	}
	fn, err := f.Function("divide")
	require.NoError(t, err)
	ret, err := f.Scope(fn, 0, SiteReturn)
	require.NoError(t, err)
	_, err = compile(ret, "$return")
	require.ErrorIs(t, err, ErrNotFetchable)
	assert.Contains(t, err.Error(), "a struct held in a register: name its field quot, or read the register as x64")
	for _, ok := range []string{"$return.quot", "$return:x64"} {
		_, err := compile(ret, ok)
		assert.NoError(t, err, ok)
	}
	_, err = compile(ret, "$return.rem")
	assert.ErrorIs(t, err, ErrTooComplex, "the upper half of %rax")

	fn, err = f.Function("sum")
	require.NoError(t, err)
	entry, err := f.Scope(fn, 0, SiteEntry)
	require.NoError(t, err)
	_, err = compile(entry, "$b[0]")
	require.ErrorIs(t, err, ErrNotFetchable)
	assert.Contains(t, err.Error(), "a struct: name one of its fields (a, b, c), or read it as bytes[24]")
	for _, ok := range []string{"$b[0].a", "$b[0].c", "$b[0]:bytes[24]"} {
		_, err := compile(entry, ok)
		assert.NoError(t, err, ok)
	}
}
