//go:build linux

package armvm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/otel-uprobe/uprobereceiver/harness/ctxfixture"
)

// CrossCC is the C cross compiler the harness builds the static arm64
// fixtures with (Debian gcc-aarch64-linux-gnu).
const CrossCC = "aarch64-linux-gnu-gcc"

// FixturesEnv is the environment variable that tells tests running in the
// VM where the prebuilt fixtures are ("/fixtures"); it is unset on the
// host, where tests build their fixtures themselves.
const FixturesEnv = "ARMVM_FIXTURES"

// fixturesDir is where the fixtures are in the VM.
const fixturesDir = "/fixtures"

// Package is a Go package whose test binary runs in the VM.
type Package struct {
	// Path is the package as the go command names it, relative to the
	// repository's root, e.g. "./internal/usdt".
	Path string
	// Skip is a regular expression of tests not to run in the VM, passed
	// as -test.skip: the tests that need tools or sources of the host
	// (gcc, objdump, readelf, testdata), which the VM does not have.
	Skip string
	// Run, when set, is a regular expression of the only tests to run in
	// the VM, passed as -test.run.
	Run string
	// Env holds NAME=VALUE pairs added to the test binary's environment.
	Env []string
	// NeedsDistro says the tests run the collector distribution, which is
	// in the VM only when the Builder has one (Builder.Distro); without
	// it, the package is left out of the run.
	NeedsDistro bool
}

// DefaultSuite is what make test-arm64 runs: the architecture-independent
// parsers and decoders; harness/armvm's own tests, among them the
// privileged uprobe smoke tests on the VM's kernel; the engine's layout
// (internal/bpfobj); internal/threadctx (otel_thread_ctx_v1 found in each
// arm64 build of the thread-context fixture); every test of
// internal/tracer, which loads the arm64 engine into the kernel and traces
// the demo program through per-location uprobes (Linux 6.1 has no uprobe_multi); the receiver's end-to-end tests
// that need no compiler in the VM (ReceiverTests); and the collector
// distribution built for arm64 against the demo (harness/e2e/distrotest, run
// only when the Builder has the distribution).
var DefaultSuite = []Package{
	{Path: "./internal/regs"},
	{Path: "./internal/usdt", Skip: "^(TestFixtureExecutables|TestFixtureSharedLibrary|TestStapsdtBaseAdjustment|" +
		"TestProbesUnsupportedArchitecture|TestProbesAddressOutsideSegments|TestRealBinaries|TestARM64Fixtures)$"},
	{Path: "./internal/insn", Skip: "^(TestCFixture|TestGoFixture|TestCFixtureARM64|TestGoFixtureARM64)$"},
	{Path: "./harness/armvm"},
	{Path: "./internal/bpfobj"},
	{Path: "./internal/threadctx"},
	{Path: "./internal/tracer"},
	{Path: "./receiver", Run: ReceiverTests},
	{Path: "./harness/e2e/distrotest", Env: []string{"OTELCOL_UPROBE_BIN=" + DistroPath}, NeedsDistro: true},
}

// ReceiverTests are the receiver's tests that run in the VM (as -test.run):
// the demo end to end at -O2 and -O0 (USDT probes with semaphores,
// register and stack arguments, two call sites, nested and recursive
// functions, a shared library), the site classes the kernel gets, recursion
// 256 deep in C and Go, refused offsets and instructions, a Go program whose
// stack grows under entry and return probes, the hardening cases (exec,
// full records, short parents, panics), and probe spans under the thread
// contexts the fixture publishes (OTEP 4947) in its six builds. The others need gcc, Python, PostgreSQL or containers,
// which the VM does not have, or start thousands of processes.
const ReceiverTests = "^(TestEndToEndDemo|TestProcessStartedAfterStart|TestSiteClassesReported|TestRefusedOffsetsLeaveTheTargetUntouched|" +
	"TestRefusedInstructionsLeaveTheTargetUntouched|TestGoStackGrowth|TestDeepRecursionC|TestDeepRecursionKernelReturnLimit|" +
	"TestDeepRecursionGo|TestGoPanicRecover|TestExecEndsOpenSpans|TestFullRecord|TestShortParentsOfRecordedChildren|" +
	"TestThreadContext|TestThreadContextAttributesAndDisabled)$"

// DistroPath is where the collector distribution is in the VM.
const DistroPath = fixturesDir + "/otelcol-uprobe"

// Builder cross-builds what the VM runs. It writes into WorkDir.
type Builder struct {
	// RepoRoot is the repository's top directory.
	RepoRoot string
	// WorkDir receives the test binaries and fixtures.
	WorkDir string
	// Log receives the tools' output.
	Log io.Writer
	// Distro is the host path of the collector distribution built for
	// arm64 (make build-arm64), put at DistroPath in the VM; "" when there
	// is none.
	Distro string
}

func (b Builder) log() io.Writer {
	if b.Log == nil {
		return io.Discard
	}
	return b.Log
}

// command runs name in dir with extra environment variables.
func (b Builder) command(ctx context.Context, dir string, env []string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = b.log(), b.log()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("running %s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

// goTool returns the go command of the running toolchain.
func goTool() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

// crossGoEnv is the environment of a static arm64 Go build.
var crossGoEnv = []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64"}

// TestBinaries builds the test binary of every package with
// CGO_ENABLED=0 GOARCH=arm64 go test -c -tags e2e (the end-to-end suites
// under harness/e2e build their tests only with that tag), in one go
// command, and returns their paths in package order.
func (b Builder) TestBinaries(ctx context.Context, pkgs []Package) ([]string, error) {
	dir := filepath.Join(b.WorkDir, "tests")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	args := []string{"test", "-c", "-tags", "e2e", "-o", dir + string(filepath.Separator)}
	seen := map[string]string{}
	var bins []string
	for _, p := range pkgs {
		name := filepath.Base(p.Path)
		if other, dup := seen[name]; dup {
			return nil, fmt.Errorf("packages %s and %s would both build %s.test", other, p.Path, name)
		}
		seen[name] = p.Path
		args = append(args, p.Path)
		bins = append(bins, filepath.Join(dir, name+".test"))
	}
	if err := b.command(ctx, b.RepoRoot, crossGoEnv, goTool(), args...); err != nil {
		return nil, fmt.Errorf("building test binaries: %w", err)
	}
	for i, bin := range bins {
		if !fileExists(bin) {
			return nil, fmt.Errorf("building test binaries: %s has no tests (no %s)", pkgs[i].Path, bin)
		}
	}
	return bins, nil
}

// demoOpts are the optimization flags the demo is built with, as the
// tests' testutil.BuildDemo asks for them.
var demoOpts = []string{"-O2", "-O0"}

// cPrograms are the C programs of testutil.BuildC (testdata/NAME/NAME.c),
// with the extra flags the tests build them with.
var cPrograms = []struct {
	name  string
	flags []string
}{
	{"exactness", []string{"-pthread"}},
	{"hardening", []string{"-pthread"}},
	{"pidscope", []string{"-pthread"}},
	{"refuse", nil},
	{"usdtentry", nil},
}

// goPrograms are the Go programs of testutil.BuildGo (testdata/NAME).
var goPrograms = []string{"goprog"}

// testdataFiles are the files of testdata that tests read in the VM
// (testutil.Testdata).
var testdataFiles = []string{"distro/collector.yaml"}

// glibc is the arm64 C library the dynamically linked fixtures run with,
// from libc6-dev-arm64-cross, and where it goes in the VM (the default
// search path of the arm64 dynamic loader).
var glibc = []struct{ src, dst string }{
	{"/usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1", "/lib/ld-linux-aarch64.so.1"},
	{"/usr/aarch64-linux-gnu/lib/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6"},
}

// sdtHeaders are the directories where the host's <sys/sdt.h> may be
// (systemtap-sdt-dev); the arm64 cross compiler looks in none of them.
var sdtHeaders = []string{"/usr/include/x86_64-linux-gnu/sys", "/usr/include/aarch64-linux-gnu/sys", "/usr/include/sys"}

// sdtInclude copies the host's <sys/sdt.h> and <sys/sdt-config.h> (they
// cover arm64 too) into an include directory of the work directory and
// returns it.
func (b Builder) sdtInclude() (string, error) {
	inc := filepath.Join(b.WorkDir, "include")
	if err := os.MkdirAll(filepath.Join(inc, "sys"), 0o755); err != nil {
		return "", err
	}
	for _, dir := range sdtHeaders {
		if !fileExists(filepath.Join(dir, "sdt.h")) {
			continue
		}
		for _, h := range []string{"sdt.h", "sdt-config.h"} {
			if err := copyFile(filepath.Join(dir, h), filepath.Join(inc, "sys", h)); err != nil {
				return "", fmt.Errorf("copying <sys/%s>: %w", h, err)
			}
		}
		return inc, nil
	}
	return "", fmt.Errorf("no <sys/sdt.h> in %s: install systemtap-sdt-dev", strings.Join(sdtHeaders, ", "))
}

// Fixtures cross-builds the programs the tests in the VM trace and returns
// them as initramfs entries under /fixtures, with the arm64 C library they
// run with:
//
//   - counter and classes (static C, from testdata/arm64) and goprog
//     (testdata/gobin/goprog), for harness/armvm's own tests;
//   - for the tests that use harness/testutil (see its FixturesEnv):
//     demo-O2 and demo-O0 (testdata/demo and its shared library, run path
//     $ORIGIN), c/hardening and c/refuse, go/goprog (testdata/goprog),
//     every build of the thread-context fixture (testdata/threadctx, as
//     harness/ctxfixture says: threadctx-VARIANT), and
//     testdata/distro/collector.yaml;
//   - the collector distribution at DistroPath when Distro is set.
//
// The demo is built with -fno-section-anchors: with gcc's section anchors
// (the arm64 default at -O1 and above), an argument that reads a global
// variable names an assembler-local anchor instead of the variable
// ("[x0, #:lo12:.LANCHOR0]"), whose address the receiver cannot know and
// refuses.
func (b Builder) Fixtures(ctx context.Context) ([]File, error) {
	dir := filepath.Join(b.WorkDir, "fixtures")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	src := filepath.Join(b.RepoRoot, "testdata", "arm64")
	builds := []struct {
		name string
		srcs []string
	}{
		{"counter", []string{"counter.c"}},
		{"classes", []string{"classes.c", "classes.S"}},
	}
	var files []File
	add := func(inVM, host string) {
		files = append(files, File{Path: fixturesDir + "/" + inVM, Mode: 0o755, Source: host})
	}
	cc := func(args ...string) error { return b.command(ctx, "", nil, CrossCC, args...) }
	for _, f := range builds {
		out := filepath.Join(dir, f.name)
		args := []string{"-static", "-O1", "-g0", "-Wall", "-Werror", "-o", out}
		for _, s := range f.srcs {
			args = append(args, filepath.Join(src, s))
		}
		if err := cc(args...); err != nil {
			return nil, fmt.Errorf("building fixture %s: %w", f.name, err)
		}
		add(f.name, out)
	}
	goprog := filepath.Join(dir, "goprog")
	if err := b.goBuild(ctx, filepath.Join(b.RepoRoot, "testdata", "gobin", "goprog"), goprog); err != nil {
		return nil, fmt.Errorf("building fixture goprog: %w", err)
	}
	add("goprog", goprog)

	inc, err := b.sdtInclude()
	if err != nil {
		return nil, err
	}
	demoSrc := filepath.Join(b.RepoRoot, "testdata", "demo")
	for _, opt := range demoOpts {
		name := "demo" + opt
		out := filepath.Join(dir, name)
		if err := os.MkdirAll(out, 0o755); err != nil {
			return nil, err
		}
		lib, prog := filepath.Join(out, "libdemo.so"), filepath.Join(out, "demo")
		if err := cc(opt, "-g", "-fno-section-anchors", "-fPIC", "-shared", "-I", inc, "-o", lib, filepath.Join(demoSrc, "demolib.c")); err != nil {
			return nil, fmt.Errorf("building fixture %s: %w", name, err)
		}
		if err := cc(opt, "-g", "-fno-section-anchors", "-I", inc, "-I", demoSrc, "-o", prog, filepath.Join(demoSrc, "demo.c"),
			"-L", out, "-ldemo", "-Wl,-rpath,$ORIGIN"); err != nil {
			return nil, fmt.Errorf("building fixture %s: %w", name, err)
		}
		add(name+"/libdemo.so", lib)
		add(name+"/demo", prog)
	}
	if err := os.MkdirAll(filepath.Join(dir, "c"), 0o755); err != nil {
		return nil, err
	}
	for _, p := range cPrograms {
		out := filepath.Join(dir, "c", p.name)
		args := append(append([]string{"-O2", "-g", "-I", inc}, p.flags...), "-o", out,
			filepath.Join(b.RepoRoot, "testdata", p.name, p.name+".c"))
		if err := cc(args...); err != nil {
			return nil, fmt.Errorf("building fixture %s: %w", p.name, err)
		}
		add("c/"+p.name, out)
	}
	for _, v := range ctxfixture.Variants {
		out := filepath.Join(dir, v.PrebuiltDir())
		if err := os.MkdirAll(out, 0o755); err != nil {
			return nil, err
		}
		for _, args := range v.Commands("arm64", filepath.Join(b.RepoRoot, "testdata", "threadctx"), out) {
			if err := cc(args...); err != nil {
				return nil, fmt.Errorf("building fixture %s: %w", v.PrebuiltDir(), err)
			}
		}
		for _, f := range v.Files() {
			add(v.PrebuiltDir()+"/"+f, filepath.Join(out, f))
		}
	}
	for _, name := range goPrograms {
		out := filepath.Join(dir, "go", name)
		if err := b.goBuild(ctx, filepath.Join(b.RepoRoot, "testdata", name), out); err != nil {
			return nil, fmt.Errorf("building fixture %s: %w", name, err)
		}
		add("go/"+name, out)
	}
	for _, f := range testdataFiles {
		files = append(files, File{Path: fixturesDir + "/testdata/" + f, Mode: 0o644,
			Source: filepath.Join(b.RepoRoot, "testdata", filepath.FromSlash(f))})
	}
	for _, l := range glibc {
		if !fileExists(l.src) {
			return nil, fmt.Errorf("no %s: install libc6-dev-arm64-cross", l.src)
		}
		files = append(files, File{Path: l.dst, Mode: 0o755, Source: l.src})
	}
	if b.Distro != "" {
		if !fileExists(b.Distro) {
			return nil, fmt.Errorf("no collector distribution at %s: run make build-arm64", b.Distro)
		}
		add(strings.TrimPrefix(DistroPath, fixturesDir+"/"), b.Distro)
	}
	return files, nil
}

// goBuild builds the Go program of its own module in dir for arm64, with
// the running toolchain and without the repository's workspace.
func (b Builder) goBuild(ctx context.Context, dir, out string) error {
	env := append([]string{"GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=-buildvcs=false -mod=mod"}, crossGoEnv...)
	return b.command(ctx, dir, env, goTool(), "build", "-o", out, ".")
}

// Image is a bootable VM: a kernel and an initramfs whose /init runs the
// test binaries.
type Image struct {
	// Kernel and Initramfs are host paths.
	Kernel, Initramfs string
	// Token marks this run's console lines, so that test output cannot
	// fake them.
	Token string
	// Tests are the names of the test runs, in order.
	Tests []string
}

// MakeImage writes the initramfs of a VM that runs tests (test binaries,
// in order, with the packages' skip lists) into workDir/initramfs.cpio: busybox
// as /bin/busybox, the init script, the binaries under /tests and fixtures.
func MakeImage(workDir string, a Assets, pkgs []Package, binaries []string, fixtures []File, opt InitOptions) (Image, error) {
	if len(pkgs) != len(binaries) {
		return Image{}, fmt.Errorf("%d packages but %d test binaries", len(pkgs), len(binaries))
	}
	token, err := newToken()
	if err != nil {
		return Image{}, err
	}
	img := Image{Kernel: a.Kernel, Initramfs: filepath.Join(workDir, "initramfs.cpio"), Token: token}
	files := []File{
		{Path: "/bin/busybox", Mode: 0o755, Source: a.Busybox},
		{Path: "/bin/sh", Mode: fs.ModeSymlink | 0o777, Link: "busybox"},
		{Path: "/proc", Mode: fs.ModeDir | 0o755},
		{Path: "/sys", Mode: fs.ModeDir | 0o755},
		{Path: "/dev", Mode: fs.ModeDir | 0o755},
		{Path: "/tmp", Mode: fs.ModeDir | 0o1777},
		// The collector binds its own telemetry to localhost.
		{Path: "/etc/hosts", Mode: 0o644, Data: []byte("127.0.0.1 localhost\n::1 localhost\n")},
	}
	var runs []TestRun
	for i, p := range pkgs {
		name := strings.TrimPrefix(p.Path, "./")
		inVM := "/tests/" + filepath.Base(binaries[i])
		files = append(files, File{Path: inVM, Mode: 0o755, Source: binaries[i]})
		run := TestRun{Name: name, Command: []string{inVM, "-test.v", "-test.count=1"}}
		if len(p.Env) > 0 {
			run.Command = append(append([]string{"/bin/env"}, p.Env...), run.Command...)
		}
		if opt.TestTimeout > 0 {
			run.Command = append(run.Command, "-test.timeout="+opt.TestTimeout.String())
		}
		if p.Skip != "" {
			run.Command = append(run.Command, "-test.skip="+p.Skip)
		}
		if p.Run != "" {
			run.Command = append(run.Command, "-test.run="+p.Run)
		}
		runs = append(runs, run)
		img.Tests = append(img.Tests, name)
	}
	files = append(files, fixtures...)
	script, err := InitScript(token, runs, opt)
	if err != nil {
		return Image{}, err
	}
	files = append(files, File{Path: "/init", Mode: 0o755, Data: []byte(script)})

	f, err := os.Create(img.Initramfs)
	if err != nil {
		return Image{}, err
	}
	if err := WriteInitramfs(f, files); err != nil {
		return Image{}, fmt.Errorf("writing %s: %w", img.Initramfs, errors.Join(err, f.Close()))
	}
	if err := f.Close(); err != nil {
		return Image{}, fmt.Errorf("writing %s: %w", img.Initramfs, err)
	}
	return img, nil
}
