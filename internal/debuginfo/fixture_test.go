package debuginfo

import (
	"bufio"
	"context"
	"debug/dwarf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

// builds are the fixtures, built once per test binary into one directory.
var builds struct {
	mu   sync.Mutex
	dir  string
	done map[string]string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builds.dir != "" {
		os.RemoveAll(builds.dir)
	}
	os.Exit(code)
}

// buildDir returns the shared build directory.
func buildDir(t testing.TB) string {
	t.Helper()
	if builds.dir == "" {
		d, err := os.MkdirTemp("", "debuginfo-test")
		require.NoError(t, err)
		builds.dir = d
		builds.done = map[string]string{}
	}
	return builds.dir
}

// requireTool returns the path of the first of the named tools found,
// skipping the test (failing it in CI) when there is none.
func requireTool(t testing.TB, names ...string) string {
	t.Helper()
	for _, name := range names {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testutil.SkipOrFail(t, "%s not found", strings.Join(names, " or "))
	return ""
}

func run(t testing.TB, dir string, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %s\n%s", name, strings.Join(args, " "), out)
}

// cFlags are the gcc flags of each C build.
var cFlags = map[string][]string{
	"c-O0":         {"-O0", "-g"},
	"c-O2":         {"-O2", "-g"},
	"c-O0-dwarf4":  {"-O0", "-gdwarf-4"},
	"c-O2-dwarf4":  {"-O2", "-gdwarf-4"},
	"c-O2-nopie":   {"-O2", "-g", "-no-pie", "-fno-pie"},
	"c-O0-nopie":   {"-O0", "-g", "-no-pie", "-fno-pie"},
	"c-O2-nodebug": {"-O2"},
	// clang 14 emits DWARF 5 with DW_FORM_loclistx, DW_AT_loclists_base,
	// DW_OP_addrx and, at -O0, a frame base of DW_OP_reg6 (rbp).
	"clang-O0": {"-O0", "-g"},
	"clang-O2": {"-O2", "-g"},
}

// srcBuild is a fixture built from one source of testdata/debuginfo by
// the first of cc found, with flags.
type srcBuild struct {
	cc    []string
	src   string
	flags []string
}

// fixture builds (once) and returns the path of a fixture: one of
// srcBuilds, a C build of testdata/debuginfo/prog.c named in cFlags,
// "cpp" (prog.cc with g++),
// "go-opt", "go-noopt" (-gcflags=all=-N -l), "go-stripped" (-s -w) or
// "go-arm64" (GOARCH=arm64).
func fixture(t testing.TB, name string) string {
	t.Helper()
	builds.mu.Lock()
	defer builds.mu.Unlock()
	dir := buildDir(t)
	if p, ok := builds.done[name]; ok {
		return p
	}
	out := filepath.Join(dir, name)
	src := testutil.Testdata("debuginfo")
	switch {
	case len(srcBuilds[name].cc) > 0:
		b := srcBuilds[name]
		cc := requireTool(t, b.cc...)
		args := append(append([]string{}, b.flags...), "-Wl,--build-id", "-o", out, filepath.Join(src, b.src))
		run(t, dir, nil, cc, args...)
	case cFlags[name] != nil:
		cc := "gcc"
		if strings.HasPrefix(name, "clang-") {
			cc = requireTool(t, "clang-14", "clang")
		}
		requireTool(t, cc)
		args := append(append([]string{}, cFlags[name]...), "-Wl,--build-id", "-o", out, filepath.Join(src, "prog.c"))
		run(t, dir, nil, cc, args...)
	case name == "cpp":
		requireTool(t, "g++")
		run(t, dir, nil, "g++", "-O1", "-g", "-o", out, filepath.Join(src, "prog.cc"))
	case strings.HasPrefix(name, "go-"):
		args := []string{"build", "-o", out}
		env := []string{"GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=-buildvcs=false", "CGO_ENABLED=0"}
		switch name {
		case "go-arm64":
			env = append(env, "GOARCH=arm64")
		case "go-noopt":
			args = append(args, "-gcflags=all=-N -l")
		case "go-stripped":
			args = append(args, "-ldflags=-s -w")
		}
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append(args, ".")...)
		cmd.Dir = filepath.Join(src, "goprog")
		cmd.Env = append(os.Environ(), env...)
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, "go build %v\n%s", args, b)
	default:
		t.Fatalf("unknown fixture %q", name)
	}
	builds.done[name] = out
	return out
}

// open opens a fixture with no separate debug directories.
func open(t testing.TB, path string) *File {
	t.Helper()
	f, err := Open(context.Background(), path, Options{DebugDirs: []string{}})
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

// markerLine returns the line of prog.c (or goprog/main.go) holding the
// comment "LINE:name".
func markerLine(t testing.TB, file, name string) int {
	t.Helper()
	fh, err := os.Open(testutil.Testdata("debuginfo", file))
	require.NoError(t, err)
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for n := 1; sc.Scan(); n++ {
		if strings.Contains(sc.Text(), "LINE:"+name+" ") || strings.HasSuffix(sc.Text(), "LINE:"+name) {
			return n
		}
	}
	t.Fatalf("no LINE:%s in %s", name, file)
	return 0
}

// errorAs is errors.As for fuzz targets that avoid testify.
func errorAs(err error, target any) bool { return errors.As(err, target) }

// dwarfOffset converts for tests.
func dwarfOffset(n int) dwarf.Offset { return dwarf.Offset(n) }
