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
}

// DefaultSuite is what make test-arm64 runs: the architecture-independent
// parsers and decoders, and internal/armvm's own tests, among them the
// privileged uprobe smoke tests on the VM's kernel.
var DefaultSuite = []Package{
	{Path: "./internal/regs"},
	{Path: "./internal/usdt", Skip: "^(TestFixtureExecutables|TestFixtureSharedLibrary|TestStapsdtBaseAdjustment|" +
		"TestProbesUnsupportedArchitecture|TestProbesAddressOutsideSegments|TestRealBinaries|TestARM64Fixtures)$"},
	{Path: "./internal/insn", Skip: "^(TestCFixture|TestGoFixture|TestCFixtureARM64|TestGoFixtureARM64)$"},
	{Path: "./internal/armvm"},
}

// Builder cross-builds what the VM runs. It writes into WorkDir.
type Builder struct {
	// RepoRoot is the repository's top directory.
	RepoRoot string
	// WorkDir receives the test binaries and fixtures.
	WorkDir string
	// Log receives the tools' output.
	Log io.Writer
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
// CGO_ENABLED=0 GOARCH=arm64 go test -c, in one go command, and returns
// their paths in package order.
func (b Builder) TestBinaries(ctx context.Context, pkgs []Package) ([]string, error) {
	dir := filepath.Join(b.WorkDir, "tests")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	args := []string{"test", "-c", "-o", dir + string(filepath.Separator)}
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

// Fixtures cross-builds the programs the tests in the VM trace and returns
// them as initramfs entries under /fixtures: counter and classes (static C,
// from testdata/arm64) and goprog (testdata/gobin/goprog).
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
	for _, f := range builds {
		out := filepath.Join(dir, f.name)
		args := []string{"-static", "-O1", "-g0", "-Wall", "-Werror", "-o", out}
		for _, s := range f.srcs {
			args = append(args, filepath.Join(src, s))
		}
		if err := b.command(ctx, "", nil, CrossCC, args...); err != nil {
			return nil, fmt.Errorf("building fixture %s: %w", f.name, err)
		}
		files = append(files, File{Path: fixturesDir + "/" + f.name, Mode: 0o755, Source: out})
	}
	goprog := filepath.Join(dir, "goprog")
	env := append([]string{"GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=-buildvcs=false"}, crossGoEnv...)
	if err := b.command(ctx, filepath.Join(b.RepoRoot, "testdata", "gobin", "goprog"), env, goTool(), "build", "-o", goprog, "."); err != nil {
		return nil, fmt.Errorf("building fixture goprog: %w", err)
	}
	files = append(files, File{Path: fixturesDir + "/goprog", Mode: 0o755, Source: goprog})
	return files, nil
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
	}
	var runs []TestRun
	for i, p := range pkgs {
		name := strings.TrimPrefix(p.Path, "./")
		inVM := "/tests/" + filepath.Base(binaries[i])
		files = append(files, File{Path: inVM, Mode: 0o755, Source: binaries[i]})
		run := TestRun{Name: name, Command: []string{inVM, "-test.v", "-test.count=1"}}
		if opt.TestTimeout > 0 {
			run.Command = append(run.Command, "-test.timeout="+opt.TestTimeout.String())
		}
		if p.Skip != "" {
			run.Command = append(run.Command, "-test.skip="+p.Skip)
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
