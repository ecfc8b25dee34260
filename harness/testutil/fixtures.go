package testutil

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/otel-uprobe/uprobereceiver/harness/ctxfixture"
)

// FixturesEnv names the environment variable that holds, in the arm64 test
// VM of harness/armvm, the directory of the fixtures built for it on the
// host (the VM has no compiler). It is unset on the host, where tests
// build their fixtures themselves. harness/armvm sets it (its FixturesEnv
// has the same value; a test there checks).
const FixturesEnv = "ARMVM_FIXTURES"

// The layout of the prebuilt fixtures under $ARMVM_FIXTURES, which
// harness/armvm's Builder writes:
//
//	demo-O2/demo, demo-O2/libdemo.so   testdata/demo, as BuildDemo(t, "-O2") builds it
//	demo-O0/demo, demo-O0/libdemo.so   the same at -O0
//	c/NAME                             testdata/NAME/NAME.c, as BuildC builds it
//	go/NAME                            the Go program testdata/NAME, as BuildGo builds it
//	threadctx-VARIANT/...              testdata/threadctx, as BuildThreadCtx builds it (ctxfixture)
//	testdata/...                       the files of testdata the tests read there
const (
	// PrebuiltCDir is where the C programs of BuildC are.
	PrebuiltCDir = "c"
	// PrebuiltGoDir is where the Go programs of BuildGo are.
	PrebuiltGoDir = "go"
	// PrebuiltTestdataDir is where Testdata's files are.
	PrebuiltTestdataDir = "testdata"
)

// PrebuiltDemoDir returns the directory of the prebuilt demo of an
// optimization flag ("-O2" gives "demo-O2").
func PrebuiltDemoDir(opt string) string { return "demo" + opt }

// Prebuilt returns the directory of prebuilt fixtures, or "" when the
// tests build their own (everywhere but the arm64 VM).
func Prebuilt() string { return os.Getenv(FixturesEnv) }

// Emulated reports whether the tests run in the emulated arm64 VM, where
// every instruction costs tens of times what it costs on hardware: tests
// that make a million probed calls to show that nothing is lost make fewer
// there (Scaled).
func Emulated() bool { return Prebuilt() != "" }

// Scaled returns n, or inVM when the tests run in the emulated VM.
func Scaled(n, inVM int) int {
	if Emulated() {
		return inVM
	}
	return n
}

// copyPrebuilt copies the prebuilt files names of directory dir of the
// fixtures into a fresh temporary directory, so that a test may change or
// replace them, and returns that directory. Prebuilt programs find their
// libraries next to themselves (their run path is $ORIGIN).
func copyPrebuilt(t testing.TB, dir string, names ...string) string {
	t.Helper()
	out := t.TempDir()
	for _, n := range names {
		src := filepath.Join(Prebuilt(), dir, n)
		if err := copyFile(src, filepath.Join(out, n)); err != nil {
			t.Fatalf("prebuilt fixture %s: %v", src, err)
		}
	}
	return out
}

func copyFile(src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, st.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copying %s: %w", src, err)
	}
	return out.Close()
}

// BuildC builds the C program testdata/NAME/NAME.c with gcc -O2 -g (and
// extra flags) into a temporary directory and returns its path; in the
// arm64 VM it is a copy of the prebuilt one (built by harness/armvm with
// the same flags).
func BuildC(t testing.TB, name string, extra ...string) string {
	t.Helper()
	if Prebuilt() != "" {
		return filepath.Join(copyPrebuilt(t, PrebuiltCDir, name), name)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, name)
	Gcc(t, dir, append(append([]string{"-O2", "-g"}, extra...), "-o", bin, Testdata(name, name+".c"))...)
	return bin
}

// BuildCXX builds the C++ program testdata/NAME/NAME.cc with g++ -O2 -g
// (and extra flags) into a temporary directory and returns its path.
// Without g++ it skips (fails in CI); the arm64 VM has no C++ fixtures.
func BuildCXX(t testing.TB, name string, extra ...string) string {
	t.Helper()
	if Prebuilt() != "" {
		SkipOrFail(t, "no C++ fixtures are built for the arm64 VM")
	}
	if _, err := exec.LookPath("g++"); err != nil {
		SkipOrFail(t, "g++ not found: run make deps")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, name)
	args := append(append([]string{"-O2", "-g"}, extra...), "-o", bin, Testdata(name, name+".cc"))
	cmd := exec.Command("g++", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("g++ %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return bin
}

// CrossCC is the arm64 C cross compiler (Debian gcc-aarch64-linux-gnu,
// with libc6-dev-arm64-cross), which make deps installs.
const CrossCC = "aarch64-linux-gnu-gcc"

// SDTInclude returns a directory holding sys/sdt.h and sys/sdt-config.h,
// copied from the host's systemtap-sdt-dev: the header serves every
// architecture, but the cross compiler does not search the host's
// multiarch include directory.
func SDTInclude(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "include")
	if err := os.MkdirAll(filepath.Join(dir, "sys"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sdt.h", "sdt-config.h"} {
		var err error
		for _, src := range []string{"/usr/include/x86_64-linux-gnu/sys/", "/usr/include/sys/", "/usr/include/aarch64-linux-gnu/sys/"} {
			if err = copyFile(src+name, filepath.Join(dir, "sys", name)); err == nil {
				break
			}
		}
		if err != nil {
			SkipOrFail(t, "<sys/%s> not found (systemtap-sdt-dev): %v", name, err)
		}
	}
	return dir
}

// CrossGcc runs the arm64 cross compiler with args in dir and fails the
// test on error; without the compiler it skips (fails in CI).
func CrossGcc(t testing.TB, dir string, args ...string) {
	t.Helper()
	if _, err := exec.LookPath(CrossCC); err != nil {
		SkipOrFail(t, "%s not found: run make deps (gcc-aarch64-linux-gnu)", CrossCC)
	}
	cmd := exec.Command(CrossCC, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", CrossCC, strings.Join(args, " "), err, out)
	}
}

// BuildDemoARM64 cross-builds testdata/demo for arm64 with an optimization
// flag and extra flags, as harness/armvm builds it for the arm64 VM
// (there with -fno-section-anchors), for tests that read arm64 files on
// any host.
func BuildDemoARM64(t testing.TB, opt string, extra ...string) DemoBuild {
	t.Helper()
	inc := SDTInclude(t)
	dir := t.TempDir()
	src := Testdata("demo")
	b := DemoBuild{Dir: dir, Program: filepath.Join(dir, "demo"), Library: filepath.Join(dir, "libdemo.so")}
	flags := append([]string{opt, "-g", "-I", inc}, extra...)
	CrossGcc(t, dir, append(flags, "-fPIC", "-shared", "-o", b.Library, filepath.Join(src, "demolib.c"))...)
	CrossGcc(t, dir, append(flags, "-I", src, "-o", b.Program, filepath.Join(src, "demo.c"),
		"-L", dir, "-ldemo", "-Wl,-rpath,$ORIGIN")...)
	return b
}

// BuildCARM64 cross-builds the C program testdata/NAME/NAME.c for arm64
// with -O2 -g and extra flags.
func BuildCARM64(t testing.TB, name string, extra ...string) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, name)
	CrossGcc(t, dir, append(append([]string{"-O2", "-g", "-I", SDTInclude(t)}, extra...), "-o", bin, Testdata(name, name+".c"))...)
	return bin
}

// BuildGoARM64 builds the Go program in testdata/NAME for linux/arm64.
func BuildGoARM64(t testing.TB, name string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", out, ".")
	cmd.Dir = Testdata(name)
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("GOARCH=arm64 go build testdata/%s: %v\n%s", name, err, b)
	}
	return out
}

// BuildThreadCtx builds variant of testdata/threadctx (harness/ctxfixture:
// the application whose SDK publishes each thread's context, and the SDK's
// library unless the writer is linked into the application) into a
// temporary directory with gcc and returns the application's path; in the
// arm64 VM it copies the prebuilt build.
func BuildThreadCtx(t testing.TB, variant string) string {
	t.Helper()
	v, ok := ctxfixture.ByName(variant)
	if !ok {
		t.Fatalf("no thread-context fixture variant %q", variant)
	}
	if Prebuilt() != "" {
		return filepath.Join(copyPrebuilt(t, v.PrebuiltDir(), v.Files()...), ctxfixture.App)
	}
	dir := t.TempDir()
	for _, args := range v.Commands(runtime.GOARCH, Testdata("threadctx"), dir) {
		Gcc(t, dir, args...)
	}
	return filepath.Join(dir, ctxfixture.App)
}
