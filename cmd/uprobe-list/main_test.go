package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/planner"
)

var update = flag.Bool("update", false, "rewrite testdata/names/golden/uprobe-list.golden")

// TestMain lists at the default width, whatever the shell running the
// tests says in $COLUMNS (tests that mean a width give -width).
func TestMain(m *testing.M) {
	os.Unsetenv("COLUMNS")
	os.Exit(m.Run())
}

// list runs the command in this process and returns its output.
func list(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(args, &out, &errOut)
	return out.String(), errOut.String(), code
}

// addrRE matches addresses; offsets into functions (+0x4) stay.
var addrRE = regexp.MustCompile(`0x[0-9a-f]{3,}`)

// mask hides what changes from build to build: addresses, the build
// directory, the build id and the checkout's path.
func mask(s string, b testutil.NamesBuild) string {
	s = strings.ReplaceAll(s, b.DebugFile, "$DEBUGFILE")
	s = strings.ReplaceAll(s, filepath.Dir(b.Program), "$DIR")
	s = strings.ReplaceAll(s, b.BuildID, "$BUILDID")
	s = strings.ReplaceAll(s, filepath.Clean(testutil.RepoRoot()), "$REPO")
	s = addrRE.ReplaceAllString(s, "0x…")
	return s
}

// The listing of the -O2 build of testdata/names, with its debuginfo in a
// build-id tree, is the golden file: USDT probes, functions with their site
// classes, one function's parameters, a line's variables, a USDT site's
// variables, and a pattern. It depends on the compiler (gcc 12 here):
// after a deliberate change, rewrite it with
// go test ./cmd/uprobe-list -run TestGolden -update and review the diff.
func TestGolden(t *testing.T) {
	b := testutil.BuildNames(t, "-O2")
	line := testutil.MarkerLine(t, b.Source, "total")
	var all strings.Builder
	for _, pattern := range []string{"", "handle_request", fmt.Sprintf("names.c:%d", line), "usdt:names:request", "ct_0[0-2]"} {
		args := []string{"-width", "120", "-debug-dir", b.DebugDir, b.Program}
		if pattern != "" {
			args = append(args, pattern)
		}
		out, errOut, code := list(t, args...)
		require.Equal(t, 0, code, "uprobe-list %s: %s", pattern, errOut)
		require.Empty(t, errOut)
		fmt.Fprintf(&all, "$ uprobe-list %s\n%s\n", strings.Join(args, " "), out)
	}
	got := mask(all.String(), b)
	golden := testutil.Testdata("names", "golden", "uprobe-list.golden")
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(golden), 0o755))
		require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, string(want), got)

	// What every listing must hold, whatever the compiler.
	for _, s := range []string{
		"debuginfo: build-id $DEBUGFILE",
		"usdt:names:request  (1 site)",
		"function: handle_request",
		"req.hdr.name: $req->hdr->name",
		"flags: $flags",
		"ret: $return",
		fmt.Sprintf("entry: line:names.c:%d", line),
		"total: $total",
		"params: $$$$params",
	} {
		assert.Contains(t, got, s)
	}
}

// readelfSite is one USDT site as readelf -n prints it.
type readelfSite struct {
	probe, args         string
	location, semaphore string
	listedByUprobeList  bool
}

// The USDT listing agrees with readelf -n: every site's probe, address,
// semaphore and argument specs.
func TestUSDTAgreesWithReadelf(t *testing.T) {
	b := testutil.BuildNames(t, "-O0")
	demo := testutil.BuildDemo(t, "-O2")
	for _, path := range []string{b.Program, demo.Program, demo.Library} {
		t.Run(filepath.Base(path), func(t *testing.T) {
			out, err := exec.Command("readelf", "-n", path).Output()
			require.NoError(t, err)
			var want []string
			var provider, name string
			for _, line := range strings.Split(string(out), "\n") {
				line = strings.TrimSpace(line)
				switch {
				case strings.HasPrefix(line, "Provider: "):
					provider = strings.TrimPrefix(line, "Provider: ")
				case strings.HasPrefix(line, "Name: "):
					name = strings.TrimPrefix(line, "Name: ")
				case strings.HasPrefix(line, "Location: "):
					var loc, base, sem uint64
					_, err := fmt.Sscanf(line, "Location: %v, Base: %v, Semaphore: %v", &loc, &base, &sem)
					require.NoError(t, err, line)
					want = append(want, fmt.Sprintf("usdt:%s:%s %#x %#x", provider, name, loc, sem))
				case strings.HasPrefix(line, "Arguments: "):
					want[len(want)-1] += fmt.Sprintf(" %q", strings.TrimPrefix(line, "Arguments: "))
				}
			}
			require.NotEmpty(t, want, "readelf lists USDT sites")

			listing, errOut, code := list(t, "-debug-dir", t.TempDir(), path)
			require.Equal(t, 0, code, errOut)
			var got []string
			var probe string
			for _, line := range strings.Split(listing, "\n") {
				line = strings.TrimSpace(line)
				if strings.HasPrefix(line, "usdt:") && strings.Contains(line, " site") {
					probe = strings.Fields(line)[0]
				}
				var addr, sem uint64
				var args string
				if strings.HasPrefix(line, "site ") {
					_, err := fmt.Sscanf(line, "site %v semaphore %v args", &addr, &sem)
					require.NoError(t, err, line)
					args = line[strings.Index(line, "args ")+len("args "):]
					got = append(got, fmt.Sprintf("%s %#x %#x %s", probe, addr, sem, args))
				}
			}
			sort.Strings(want)
			sort.Strings(got)
			assert.Equal(t, want, got)
		})
	}
}

// Go: parameters through pointers by Go's names, and a stripped Go binary
// says what is missing.
func TestGoListing(t *testing.T) {
	bin := testutil.BuildGo(t, "names/goapp", false)
	out, errOut, code := list(t, "-width", "0", "-debug-dir", t.TempDir(), bin, "main.(*Server).*")
	require.Equal(t, 0, code, errOut)
	for _, s := range []string{
		"function: main.(*Server).Handle",
		"r.URL.Path: $r.URL.Path",
		"tag: $tag",
		"s.Handled: $s.Handled",
		"ret: $return",
		"debuginfo: in the file",
	} {
		assert.Contains(t, out, s)
	}
	stripped := testutil.BuildGo(t, "names/goapp", true)
	out, errOut, code = list(t, "-width", "0", "-debug-dir", t.TempDir(), stripped, "main.(*Server).*")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "a Go binary linked with -ldflags=-w (or -s -w) carries no DWARF; build it without -w")
	assert.Contains(t, out, "- function: main.(*Server).Handle", "functions come from Go's own table")
	assert.Contains(t, out, "ret.string: retval:gostring", "Go's result registers without DWARF")
}

func TestErrors(t *testing.T) {
	_, errOut, code := list(t)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "usage: uprobe-list")
	_, errOut, code = list(t, "/nonexistent/file")
	assert.Equal(t, 1, code)
	assert.Equal(t, "uprobe-list: target /nonexistent/file: no such file\n", errOut)
	_, errOut, code = list(t, "/bin/true", "[x")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `pattern "[x" at column 1`)
	_, errOut, code = list(t, "/bin/true", "line:x.c:0")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `line "0" is not a line number`)
}

// The command needs no privileges: built and run as nobody (or as the
// unprivileged user running the tests), it lists a file anyone may read.
func TestRunsUnprivileged(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	bin := filepath.Join(dir, "uprobe-list")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	b := testutil.BuildNames(t, "-O2")
	args := []string{bin, "-debug-dir", b.DebugDir, b.Program, "handle_request"}
	if os.Geteuid() == 0 {
		setpriv, err := exec.LookPath("setpriv")
		if err != nil {
			testutil.SkipOrFail(t, "setpriv not found (util-linux)")
		}
		for _, f := range []string{b.Program, b.DebugFile} {
			for p := f; p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
				require.NoError(t, os.Chmod(p, 0o755|(mode(t, p)&0o644)))
			}
		}
		args = append([]string{setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"}
	out, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "function: handle_request")
	assert.Contains(t, string(out), "req.hdr.name: $req->hdr->name", "names from the build-id tree")
}

func mode(t *testing.T, p string) os.FileMode {
	st, err := os.Stat(p)
	require.NoError(t, err)
	return st.Mode().Perm()
}

func FuzzParsePattern(f *testing.F) {
	for _, s := range []string{"", "usdt:a:b", "usdt:a", "line:x.c:10", "x.c:10", "a/b.c:1", "handle_*",
		"main.(*Server).*", "ns::f", "ns::f:3", "x.c:0", "x.c:01", "[x", "line:", ":1", "x:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		sel, err := parsePattern(p)
		if err != nil {
			return
		}
		switch sel.kind {
		case selectAll:
			if p != "" {
				t.Fatalf("%q selects everything", p)
			}
		case selectUSDT, selectLine:
			if sel.ref == "" {
				t.Fatalf("%q: no reference", p)
			}
			again, err := parsePattern(sel.ref)
			if err != nil || again.kind != sel.kind || again.ref != sel.ref {
				t.Fatalf("%q gives %q, which parses as %+v (%v)", p, sel.ref, again, err)
			}
		case selectFunctions:
			if sel.glob == nil || sel.glob.String() != p {
				t.Fatalf("%q: glob %v", p, sel.glob)
			}
		}
	})
}

// A bare name is resolved as a target's path is (PATH, then libraries).
func TestBareName(t *testing.T) {
	out, errOut, code := list(t, "true")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, `^uprobe-list: true is /\S*/true\n$`, errOut)
	assert.Contains(t, out, "/true (executable)")
	_, errOut, code = list(t, "no-such-program-anywhere")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, `executable "no-such-program-anywhere" not found in PATH`)
}

// uprobe-list reports the class and place the receiver uses: with the
// kernel's optimized uprobe path, a USDT site moves onto its nop5 only in a
// function that keeps nothing below %rsp (testdata/redzone: leaf keeps a
// value there, safe does not); without it, nothing moves.
func TestRedZoneSites(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "redzone")
	testutil.Gcc(t, dir, "-O2", "-o", prog, testutil.Testdata("redzone", "redzone.c"))
	placed := func(optimized, probe string) string {
		out, errOut, code := list(t, "-optimized-uprobes", optimized, prog, probe)
		require.Equal(t, 0, code, errOut)
		for _, l := range strings.Split(out, "\n") {
			if s, ok := strings.CutPrefix(strings.TrimSpace(l), "placed at "); ok {
				addr, rest, _ := strings.Cut(s, " in ")
				_, class, _ := strings.Cut(rest, ", ")
				return addr + ", " + class
			}
		}
		t.Fatalf("no placement in:\n%s", out)
		return ""
	}
	site := func(probe string) uint64 {
		out, _, _ := list(t, prog, probe)
		var addr uint64
		for _, l := range strings.Split(out, "\n") {
			if _, err := fmt.Sscanf(strings.TrimSpace(l), "site %v", &addr); err == nil {
				return addr
			}
		}
		t.Fatalf("no site in:\n%s", out)
		return 0
	}
	leaf, safe := site("usdt:redzone:leaf"), site("usdt:redzone:safe")
	assert.Equal(t, fmt.Sprintf("%#x, emulated (nop)", leaf), placed("yes", "usdt:redzone:leaf"))
	assert.Equal(t, fmt.Sprintf("%#x, optimizable (nopl (%%rax,%%rax))", safe+1), placed("yes", "usdt:redzone:safe"))
	assert.Equal(t, fmt.Sprintf("%#x, emulated (nop)", safe), placed("no", "usdt:redzone:safe"))

	_, errOut, code := list(t, "-optimized-uprobes", "maybe", prog)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, `-optimized-uprobes "maybe": want auto, yes or no`)
}

// uprobe-list makes the receiver's choice for function spans in a C++ file
// (testdata/unwind) and says why: middle calls thrower, so an exception
// may unwind through it and its returns are probed on its RET; leaf calls
// nothing and keeps its kernel return probe; a C file never says so.
// Each function's exit is the one Resolve plans for a span on it.
func TestExceptionReturns(t *testing.T) {
	bin := testutil.BuildCXX(t, "unwind")
	out, errOut, code := list(t, "-width", "0", "-debug-dir", t.TempDir(), bin, "_ZN3app*")
	require.Equal(t, 0, code, errOut)
	masked := addrRE.ReplaceAllString(out, "0x…")
	for _, re := range []string{
		`(?m)^    - function: _ZN3app6middleEl +# \+0x0 [^\n]+ {2}RET \+0x[0-9a-f]+ single-stepped \(exceptions may unwind through it\)$`,
		`(?m)^    - function: _ZN3app7attemptElPl +# \+0x0 emulated \(push %rbx\) +RET \+0x[0-9a-f]+ single-stepped \(exceptions may unwind through it\)$`,
		`(?m)^    - function: _ZN3app4leafEl +# \+0x0 emulated \(push %rbx\) +uretprobe \(\+0x0 emulated\)$`,
		`(?m)^    # _ZN3app7throwerEl\.cold +# .* not probeable: exceptions may unwind through it, and it has no RET$`,
		`(?m)^  exit ret:_ZN3app6middleEl at 0x… \(\+0x[0-9a-f]+\), single-stepped \(retq?\)\n` +
			`  returns: auto probes the RET instructions: an exception may unwind through _ZN3app6middleEl, which a kernel return probe would make abort the program: ` +
			`_ZN3app6middleEl runs other code \(\+0x[0-9a-f]+: callq? _ZN3app7throwerEl\) and its file unwinds exceptions \(it imports __cxa_\w+\)$`,
		`(?m)^  exit uretprobe:_ZN3app4leafEl at 0x… \(\+0x0\), emulated \(push %rbx\)\n  spans:$`,
	} {
		assert.Regexp(t, re, masked)
	}

	pl, err := planner.Resolve([]config.Target{{Path: bin, Spans: []config.Span{{Function: "_ZN3app*"}}}}, planner.Options{DebugDirs: []string{}})
	require.NoError(t, err)
	require.NotEmpty(t, pl.Spans)
	for _, sp := range pl.Spans {
		exit := pl.Probes[sp.Exit]
		assert.Regexp(t, `(?m)^  exit `+regexp.QuoteMeta(exit.Ref)+` at `, out, "%s: the listing shows the exit Resolve plans", sp.Name)
		if strings.HasPrefix(exit.Ref, "ret:") {
			assert.Contains(t, out, "  "+exit.Why+"\n", sp.Name)
		}
	}

	b := testutil.BuildNames(t, "-O2")
	out, errOut, code = list(t, "-debug-dir", b.DebugDir, b.Program)
	require.Equal(t, 0, code, errOut)
	assert.NotContains(t, out, "exceptions may unwind", "a C file")
	assert.Contains(t, out, "uretprobe (+0x0")
}
