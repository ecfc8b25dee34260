//go:build linux

package main

import (
	"bufio"
	"bytes"
	"debug/dwarf"
	"fmt"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/confmap"
	"golang.org/x/sys/unix"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

// The cases of issue 18's probe browser, each on a real program: every
// test fails on the browser before the fix.

// mustList runs the command and requires it to succeed.
func mustList(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := list(t, args...)
	require.Equal(t, 0, code, "uprobe-list %s: %s", strings.Join(args, " "), errOut)
	return out
}

// maxCols is the width of the widest line.
func maxCols(s string) (int, string) {
	w, widest := 0, ""
	for _, l := range strings.Split(s, "\n") {
		if c := cols(l); c > w {
			w, widest = c, l
		}
	}
	return w, widest
}

// Rows fit the width: whole-file listings of a C program and of a Go HTTP
// server (whose longest generic names run past 1,400 columns, which
// padded every row), and detail views, at 120, 80 and 40 columns; a cut
// says so and how to see it whole; -width 0 cuts nothing.
func TestWidths(t *testing.T) {
	b := testutil.BuildNames(t, "-O2")
	bin := testutil.BuildGo(t, "httpserver", false)
	for _, width := range []int{120, 80, 40} {
		for _, args := range [][]string{
			{b.Program}, {"-debug-dir", b.DebugDir, b.Program, "handle_request"}, {bin}, {bin, "main.*"},
		} {
			args = append([]string{"-width", fmt.Sprint(width)}, args...)
			out := mustList(t, args...)
			w, widest := maxCols(out)
			assert.LessOrEqual(t, w, width, "uprobe-list %s: %q", strings.Join(args, " "), widest)
		}
	}
	out := mustList(t, "-width", "80", bin)
	assert.Regexp(t, `\(\d+ cells cut to fit 80 columns, marked …: -width 0 shows them whole, or uprobe-list \S+ NAME shows one function whole\)`, strings.Join(strings.Fields(out), " "))
	// A name wider than the page is wrapped inside a double-quoted
	// string, which pastes as the name.
	assert.Contains(t, out, `\`+"\n")
	out = mustList(t, "-width", "0", bin)
	assert.NotContains(t, out, "cut to fit")
	w, _ := maxCols(out)
	assert.Greater(t, w, 200, "a generic's whole name")
}

// The width is the terminal's when stdout is one, else $COLUMNS, else
// 120; -width overrides them.
func TestOutputWidth(t *testing.T) {
	var buf bytes.Buffer
	t.Setenv("COLUMNS", "")
	assert.Equal(t, 120, outputWidth(-1, &buf))
	t.Setenv("COLUMNS", "77")
	assert.Equal(t, 77, outputWidth(-1, &buf))
	assert.Equal(t, 50, outputWidth(50, &buf))
	assert.Equal(t, 0, outputWidth(0, &buf))

	ptmx, pts := openPTY(t, 91)
	assert.Equal(t, 91, outputWidth(-1, pts), "the terminal's width, not $COLUMNS")

	// A listing written to the terminal fits it.
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(ptmx)
		for sc.Scan() {
			lines <- strings.TrimRight(sc.Text(), "\r")
		}
	}()
	b := testutil.BuildNames(t, "-O2")
	var stderr bytes.Buffer
	require.Equal(t, 0, run([]string{"-debug-dir", b.DebugDir, b.Program}, pts, &stderr), stderr.String())
	require.NoError(t, pts.Close())
	n := 0
	for l := range lines {
		assert.LessOrEqual(t, cols(l), 91, "%q", l)
		if n++; strings.Contains(l, "- function: ct_00") {
			break
		}
	}
	assert.Greater(t, n, 50)
}

// openPTY opens a pseudo-terminal whose window is width columns wide.
func openPTY(t *testing.T, width int) (ptmx, pts *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		testutil.SkipOrFail(t, "no pseudo-terminals: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	require.NoError(t, unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	require.NoError(t, err)
	pts, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { pts.Close() })
	require.NoError(t, unix.IoctlSetWinsize(int(pts.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: uint16(width)}))
	return ptmx, pts
}

// A value wider than the page is written as a double-quoted YAML string
// with escaped line breaks: the collector reads back the value itself,
// whatever it holds, and every line fits.
func TestWrappedValuesPaste(t *testing.T) {
	for _, v := range []string{
		strings.Repeat("abcdefghij", 30),
		"crypto/internal/fips140cache.(*Cache[crypto/ecdsa.PrivateKey,crypto/internal/fips140/ecdsa.PrivateKey]).Get",
		"a b  c   d" + strings.Repeat(" x", 80),
		`with "quotes" and \backslashes\ ` + strings.Repeat("é€", 40),
		strings.Repeat(`\u0041`, 30),
	} {
		for _, width := range []int{40, 57, 80} {
			var buf bytes.Buffer
			p := newPage(&buf, width)
			p.yamlLines("    ", "- function: "+yamlScalar(v))
			w, widest := maxCols(buf.String())
			assert.LessOrEqual(t, w, width, "%q", widest)
			r, err := confmap.NewRetrievedFromYAML(buf.Bytes())
			require.NoError(t, err, buf.String())
			raw, err := r.AsRaw()
			require.NoError(t, err)
			assert.Equal(t, []any{map[string]any{"function": v}}, raw, buf.String())
		}
	}
}

// A struct's fields are listed breadth first: every field of *http.Request
// before its fields' fields, so $r.Host and $r.RemoteAddr are offered
// (they were cut, without a word, at the 32nd field); a row says what was
// left out and how to list it: -all, -depth.
func TestFieldsCutSaysSo(t *testing.T) {
	bin := testutil.BuildGo(t, "httpserver", false)
	const fn = "main.(*Server).ServeHTTP"
	out := mustList(t, "-width", "0", bin, fn)
	for _, want := range []string{"r.Host: $r.Host", "r.RemoteAddr: $r.RemoteAddr", "r.URL.Path: $r.URL.Path"} {
		assert.Regexp(t, `(?m)^        `+regexp.QuoteMeta(want)+` +# `, out)
	}
	m := regexp.MustCompile(`(?m)^        # \$r: 32 of (\d+) fields listed \(2 levels deep\): -all lists every one, a -depth other than 2 changes the levels$`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	var total int
	fmt.Sscan(m[1], &total)

	all := mustList(t, "-width", "0", "-all", bin, fn)
	assert.NotContains(t, all, "# $r: 32 of")
	entry := all[:strings.Index(all, "exit_attributes:")]
	listed := len(regexp.MustCompile(`(?m)^        r\.\S+: \$r\.`).FindAllString(entry, -1))
	unreadable := len(regexp.MustCompile(`(?m)^        # \$r\.\S+: `).FindAllString(entry, -1))
	assert.Equal(t, total, listed+unreadable, "-all lists every field the note counted")
	assert.Contains(t, all, "r.URL.RawFragment: $r.URL.RawFragment")

	one := mustList(t, "-width", "0", "-depth", "1", bin, fn)
	assert.Contains(t, one, "r.Host: $r.Host")
	assert.NotContains(t, one, "r.URL.Path: $r.URL.Path")
	assert.Contains(t, one, "# $r: fields listed 1 level deep: -depth 2 lists deeper ones")
}

// fieldPaths chooses fields breadth first, lists them in declaration
// order, and counts what it leaves out.
func TestFieldPaths(t *testing.T) {
	i64 := &dwarf.IntType{BasicType: dwarf.BasicType{CommonType: dwarf.CommonType{Name: "long", ByteSize: 8}}}
	inner := &dwarf.StructType{StructName: "inner", Kind: "struct", Field: []*dwarf.StructField{{Name: "x", Type: i64}, {Name: "y", Type: i64}}}
	ptr := &dwarf.PtrType{Type: inner}
	outer := &dwarf.StructType{StructName: "outer", Kind: "struct", Field: []*dwarf.StructField{
		{Name: "a", Type: ptr}, {Name: "b", Type: i64}, {Name: "in", Type: inner}, {Name: "c", Type: i64},
	}}
	root := &dwarf.PtrType{Type: outer}
	for _, tc := range []struct {
		depth, limit int
		goStyle      bool
		want         []string
		omitted      int
		deeper       bool
	}{
		{2, 0, false, []string{"->a", "->a->x", "->a->y", "->b", "->in.x", "->in.y", "->c"}, 0, false},
		{2, 0, true, []string{".a", ".a.x", ".a.y", ".b", ".in.x", ".in.y", ".c"}, 0, false},
		// Breadth first: a, b, c (in is a struct, not one value) before
		// a->x.
		{2, 4, false, []string{"->a", "->a->x", "->b", "->c"}, 3, false},
		{2, 3, false, []string{"->a", "->b", "->c"}, 4, false},
		{1, 0, false, []string{"->a", "->b", "->c"}, 0, true},
		{0, 0, false, nil, 0, true},
	} {
		got, omitted, deeper := fieldPaths(root, tc.goStyle, tc.depth, tc.limit)
		assert.Equal(t, tc.want, got, "%+v", tc)
		assert.Equal(t, tc.omitted, omitted, "%+v", tc)
		assert.Equal(t, tc.deeper, deeper, "%+v", tc)
	}
}

// pasteRow returns the listing's row holding text, as the collector reads
// it when pasted under a span's attributes: the value the receiver gets.
func pasteRow(t *testing.T, listing, text string) (key, value string) {
	t.Helper()
	for _, l := range strings.Split(listing, "\n") {
		if strings.Contains(l, text) && !strings.HasPrefix(strings.TrimSpace(l), "#") {
			doc := "attributes:\n  " + strings.TrimSpace(l) + "\n"
			res, err := confmap.NewResolver(confmap.ResolverSettings{
				URIs: []string{"paste:row"},
				ProviderFactories: []confmap.ProviderFactory{
					confmap.NewProviderFactory(func(confmap.ProviderSettings) confmap.Provider { return yamlProvider{doc} }),
				},
			})
			require.NoError(t, err)
			conf, err := res.Resolve(t.Context())
			require.NoError(t, err, doc)
			m := conf.ToStringMap()["attributes"].(map[string]any)
			require.Len(t, m, 1, doc)
			for k, v := range m {
				return k, fmt.Sprint(v)
			}
		}
	}
	t.Fatalf("no row %q in:\n%s", text, listing)
	return "", ""
}

// The $$params row pastes: the whole row, comment included, gives the
// receiver "$$params" once the collector has turned "$$$$" into "$$". It
// was "$$params  ($$ is the collector's escape for $)", a value.
func TestParamsRowPastes(t *testing.T) {
	b := testutil.BuildNames(t, "-O2")
	out := mustList(t, "-debug-dir", b.DebugDir, b.Program, "handle_request")
	k, v := pasteRow(t, out, "params: $$")
	assert.Equal(t, "params", k)
	assert.Equal(t, "$$params", v)
	k, v = pasteRow(t, out, "req.hdr.name:")
	assert.Equal(t, "req.hdr.name", k)
	assert.Equal(t, "$req->hdr->name", v)
}

// A struct result offers only what the collector accepts: glibc's div
// returns div_t in %rax, whose rem (bytes 4 to 7) cannot be read alone:
// $return.quot is offered, $return.rem is a comment saying why, and the
// refusal of $return suggests what is accepted (x64). A Go struct result
// in two registers offers both fields.
func TestStructResult(t *testing.T) {
	requireLibcDbg(t)
	out := mustList(t, "-width", "0", libcPath, "div")
	assert.Regexp(t, `(?m)^        ret\.quot: \$return\.quot +# int +s32 %rax$`, out)
	assert.Regexp(t, `(?m)^        # \$return\.rem: not readable here: byte 4 of a value held in a register`, out)
	assert.NotRegexp(t, `(?m)^ +ret\.rem:`, out)
	assert.Contains(t, out, "# $return: not readable here: name its field quot, or read the register as x64")
	require.NoError(t, startAccepts(fmt.Sprintf(`receivers:
  uprobe:
    targets:
      - path: %s
        spans:
          - function: div
            exit_attributes:
              v: $return:x64
`, libcPath)), "the suggestion is accepted")

	bin := testutil.BuildGo(t, "httpserver", false)
	out = mustList(t, "-width", "0", bin, "main.Divide")
	assert.Regexp(t, `(?m)^        ret\.Quot: \$return\.Quot +# int +s64 %rax$`, out)
	assert.Regexp(t, `(?m)^        ret\.Rem: \$return\.Rem +# int +s64 %rbx$`, out)
}

// -source-file selects functions as a span's source_file: does, and
// Debian's relative compile units ("./libio" + "fileops.c") match both
// "libio/fileops.c" and "*/libio/fileops.c".
func TestSourceFileSelection(t *testing.T) {
	requireLibcDbg(t)
	functions := func(out string) []string {
		return regexp.MustCompile(`(?m)^    (?:- function: |# )(\S+)`).FindAllString(out, -1)
	}
	var want []string
	for _, src := range []string{"libio/fileops.c", "*/libio/fileops.c", "./libio/fileops.c"} {
		out := mustList(t, "-width", "0", "-source-file", src, libcPath)
		assert.Regexp(t, `Functions matching "\*" in source files "`+regexp.QuoteMeta(src)+`": \d+`, out)
		assert.Contains(t, out, "    - function: \"*\"\n      source_file: "+yamlScalar(src)+"\n", "the pattern as one span item")
		got := functions(out)
		if want == nil {
			want = got
			assert.GreaterOrEqual(t, len(want), 20)
			continue
		}
		assert.Equal(t, want, got, src)
	}
}

// A stripped Go binary offers its string result one way, and the
// collector accepts it: retval:gostring (pointer and length in the first
// two result registers). Before, nothing was offered and both ways the
// documentation suggested were refused.
func TestStrippedGoStringResult(t *testing.T) {
	bin := testutil.BuildGo(t, "httpserver", true)
	out := mustList(t, "-width", "0", bin, "main.Greeting")
	assert.Regexp(t, `(?m)^        ret\.string: retval:gostring +# +a string result \(%rax, %rbx\)$`, out)
	assert.Regexp(t, `(?m)^        arg0\.string: arg0:gostring +# `, out)
	require.NoError(t, startAccepts(fmt.Sprintf(`receivers:
  uprobe:
    targets:
      - path: %s
        spans:
          - function: main.Greeting
            attributes:
              %s
            exit_attributes:
              %s
`, bin, rowText(t, out, "arg0.string:"), rowText(t, out, "ret.string:"))))
}

// rowText is a listing's row holding text, trimmed.
func rowText(t *testing.T, out, text string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), text) {
			return strings.TrimSpace(l)
		}
	}
	t.Fatalf("no row %q", text)
	return ""
}

// A Go generic function is listed by its exact name, as the collector
// takes it (it was "no match"; with "[]" in it, a pattern error).
func TestGenericByExactName(t *testing.T) {
	bin := testutil.BuildGo(t, "httpserver", false)
	for _, name := range []string{
		"main.Keys[go.shape.string,go.shape.[]string]",
		"main.Keys[go.shape.string,go.shape.int]",
		"main.Sum[go.shape.int64]",
	} {
		out := mustList(t, "-width", "0", bin, name)
		assert.Contains(t, out, fmt.Sprintf("Functions matching %q: 1\n", name))
		assert.Contains(t, out, "\nfunction "+name+" (")
		assert.Contains(t, out, "  spans:\n    - function: "+name+"\n")
	}
	out := mustList(t, "-width", "0", bin, `main.Sum\[*\]`)
	assert.Contains(t, out, `Functions matching "main.Sum\\[*\\]": 3`)
	assert.Contains(t, out, "    - function: main.Sum\\[*\\]\n", "the pattern as one span item")
}
