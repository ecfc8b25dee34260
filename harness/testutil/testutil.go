// Package testutil helps the receiver's tests: it builds the C programs in
// testdata with gcc, drives the demo program over its stdin, and makes
// privileged tests fail instead of skipping when CI=true.
package testutil

import (
	"bufio"
	"fmt"
	"github.com/otel-uprobe/uprobereceiver/harness/testutil/ci"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// InCI reports whether the tests run in CI, where nothing may be skipped.
func InCI() bool { return ci.InCI() }

// SkipOrFail skips the test, or fails it in CI.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	ci.SkipOrFail(t, format, args...)
}

// RequireRoot skips the test unless it runs as root (and fails it in CI).
func RequireRoot(t testing.TB) {
	t.Helper()
	ci.RequireRoot(t)
}

// RepoRoot returns the repository's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Testdata returns the path of a file under testdata/: in the repository,
// or in the arm64 VM among the prebuilt fixtures (the files the tests run
// there need).
func Testdata(parts ...string) string {
	if dir := Prebuilt(); dir != "" {
		return filepath.Join(append([]string{dir, PrebuiltTestdataDir}, parts...)...)
	}
	return filepath.Join(append([]string{RepoRoot(), "testdata"}, parts...)...)
}

// Gcc runs gcc with args in dir and fails the test on error; without gcc
// it skips (fails in CI).
func Gcc(t testing.TB, dir string, args ...string) {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		SkipOrFail(t, "gcc not found")
	}
	cmd := exec.Command("gcc", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// DemoBuild is a build of testdata/demo.
type DemoBuild struct {
	Dir string
	// Program is the demo executable; Library is libdemo.so, which it loads.
	Program, Library string
}

// BuildDemo builds testdata/demo into a temporary directory with the given
// optimization flag ("-O2" gives register arguments, "-O0" stack ones); in
// the arm64 VM it copies the demo harness/armvm built with that flag.
func BuildDemo(t testing.TB, opt string) DemoBuild {
	t.Helper()
	if Prebuilt() != "" {
		// arm64 VM: a copy of the demo harness/armvm built with opt.
		dir := copyPrebuilt(t, PrebuiltDemoDir(opt), "demo", "libdemo.so")
		return DemoBuild{Dir: dir, Program: filepath.Join(dir, "demo"), Library: filepath.Join(dir, "libdemo.so")}
	}
	if _, err := os.Stat("/usr/include/x86_64-linux-gnu/sys/sdt.h"); err != nil {
		if _, err2 := os.Stat("/usr/include/sys/sdt.h"); err2 != nil {
			SkipOrFail(t, "<sys/sdt.h> not found: run make deps (systemtap-sdt-dev)")
		}
	}
	dir := t.TempDir()
	src := Testdata("demo")
	b := DemoBuild{Dir: dir, Program: filepath.Join(dir, "demo"), Library: filepath.Join(dir, "libdemo.so")}
	Gcc(t, dir, opt, "-g", "-fPIC", "-shared", "-o", b.Library, filepath.Join(src, "demolib.c"))
	Gcc(t, dir, opt, "-g", "-I", src, "-o", b.Program, filepath.Join(src, "demo.c"),
		"-L", dir, "-ldemo", "-Wl,-rpath,"+dir)
	return b
}

// Demo is a running demo process driven over its stdin.
type Demo struct {
	t     testing.TB
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	PID   int
}

// StartDemo starts program and waits for it to say it is ready.
func StartDemo(t testing.TB, program string) *Demo {
	t.Helper()
	p := StartProgram(t, program, "")
	line := p.expect("ready ")
	if _, err := fmt.Sscanf(line, "ready %d", &p.PID); err != nil {
		t.Fatalf("demo said %q", line)
	}
	return &p.Demo
}

// answerTimeout bounds how long a test program may take to answer: a
// million calls under entry and return probes take about 12 s on a machine
// whose uprobe traps cost 5 µs, and longer on a loaded one.
const answerTimeout = 120 * time.Second

// expect waits for the next line, which must start with prefix.
func (d *Demo) expect(prefix string) string {
	d.t.Helper()
	select {
	case line, ok := <-d.lines:
		if !ok {
			d.t.Fatalf("demo exited while waiting for %q", prefix)
		}
		if !strings.HasPrefix(line, prefix) {
			d.t.Fatalf("demo said %q, want %q…", line, prefix)
		}
		return line
	case <-time.After(answerTimeout):
		d.t.Fatalf("demo did not say %q within %v", prefix, answerTimeout)
	}
	return ""
}

// Run runs n iterations and waits until they are done.
func (d *Demo) Run(n int) {
	d.t.Helper()
	fmt.Fprintf(d.in, "go %d\n", n)
	d.expect(fmt.Sprintf("done %d", n))
}

// Request runs one request whose context argument is ctx.
func (d *Demo) Request(ctx string) {
	d.t.Helper()
	fmt.Fprintf(d.in, "req %s\n", ctx)
	d.expect("req done")
}

// SQL runs one query whose text is sql.
func (d *Demo) SQL(sql string) {
	d.t.Helper()
	fmt.Fprintf(d.in, "sql %s\n", sql)
	d.expect("sql done")
}

// Fail runs one iteration whose query longjmps out halfway.
func (d *Demo) Fail() {
	d.t.Helper()
	fmt.Fprintln(d.in, "fail")
	d.expect("failed")
}

// Deep calls recurse(n) once: n+1 nested calls.
func (d *Demo) Deep(n int) {
	d.t.Helper()
	fmt.Fprintf(d.in, "deep %d\n", n)
	d.expect(fmt.Sprintf("deep %d", n))
}

// Semaphores returns the demo's three USDT semaphores (query__start,
// query__done, tick) as the process itself reads them.
func (d *Demo) Semaphores() [3]int {
	d.t.Helper()
	fmt.Fprintln(d.in, "sem")
	var s [3]int
	line := d.expect("sem ")
	if _, err := fmt.Sscanf(line, "sem %d %d %d", &s[0], &s[1], &s[2]); err != nil {
		d.t.Fatalf("demo said %q", line)
	}
	return s
}

// Stop ends the process.
func (d *Demo) Stop() {
	if d.cmd.ProcessState != nil {
		return
	}
	fmt.Fprintln(d.in, "exit")
	d.in.Close()
	done := make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = d.cmd.Process.Kill()
		<-done
	}
}

// RequireRootOrExit ends a command that needs root, with one sentence.
func RequireRootOrExit() {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "this needs root: it loads BPF programs and attaches uprobes")
		os.Exit(1)
	}
}

// Program is a running test program driven over its stdin, line by line.
type Program struct {
	Demo
}

// StartProgram starts a test program and, unless ready is empty, waits for
// its first line, which must start with ready.
func StartProgram(t testing.TB, path, ready string) *Program {
	t.Helper()
	return StartCommand(t, ready, path)
}

// StartCommand is StartProgram for a command with arguments (a program
// started through unshare or nsenter, say).
func StartCommand(t testing.TB, ready, name string, args ...string) *Program {
	t.Helper()
	return startCmd(t, ready, exec.Command(name, args...))
}

// startCmd starts a prepared command as a Program.
func startCmd(t testing.TB, ready string, cmd *exec.Cmd) *Program {
	t.Helper()
	path := cmd.Path
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	p := &Program{Demo{t: t, cmd: cmd, in: in, lines: make(chan string, 16), PID: cmd.Process.Pid}}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	t.Cleanup(p.Stop)
	if ready != "" {
		p.expect(ready)
	}
	return p
}

// Ask sends one command and returns the program's answer, which must start
// with prefix.
func (p *Program) Ask(cmd, prefix string) string {
	p.t.Helper()
	fmt.Fprintln(p.in, cmd)
	return p.expect(prefix)
}

// BuildGo builds the Go program in testdata/NAME (its own module) into a
// temporary directory, stripped of its symbol table when stripped is set;
// in the arm64 VM it copies the (unstripped) one harness/armvm built.
func BuildGo(t testing.TB, name string, stripped bool) string {
	t.Helper()
	if Prebuilt() != "" && !stripped {
		// arm64 VM: a copy of the program harness/armvm built.
		return filepath.Join(copyPrebuilt(t, PrebuiltGoDir, name), name)
	}
	out := filepath.Join(t.TempDir(), filepath.Base(name))
	args := []string{"build", "-o", out}
	if stripped {
		args = append(args, "-ldflags=-s -w")
	}
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append(args, ".")...)
	cmd.Dir = Testdata(name)
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build testdata/%s: %v\n%s", name, err, b)
	}
	return out
}

// NamesBuild is a build of testdata/names (names.c and calltree.c) whose
// debuginfo is split off into a build-id tree, as distributions ship it.
type NamesBuild struct {
	// Program has no DWARF (strip --strip-debug; its symbol table stays)
	// and a .gnu_debuglink to DebugFile's base name.
	Program string
	// DebugDir is the root of the tree: DebugDir/.build-id/xx/rest.debug
	// is DebugFile.
	DebugDir, DebugFile string
	// BuildID is the program's GNU build id in hex.
	BuildID string
	// Source is testdata/names/names.c.
	Source string
}

// BuildNames builds testdata/names with gcc -g and opt ("-O0", "-O2") and
// splits its debuginfo with objcopy --only-keep-debug, strip --strip-debug
// and objcopy --add-gnu-debuglink into a build-id tree of its own.
func BuildNames(t testing.TB, opt string) NamesBuild {
	t.Helper()
	for _, tool := range []string{"objcopy", "strip", "readelf"} {
		if _, err := exec.LookPath(tool); err != nil {
			SkipOrFail(t, "%s not found: install binutils", tool)
		}
	}
	if _, err := os.Stat("/usr/include/x86_64-linux-gnu/sys/sdt.h"); err != nil {
		if _, err2 := os.Stat("/usr/include/sys/sdt.h"); err2 != nil {
			SkipOrFail(t, "<sys/sdt.h> not found: run make deps (systemtap-sdt-dev)")
		}
	}
	dir := t.TempDir()
	src := Testdata("names")
	b := NamesBuild{Program: filepath.Join(dir, "names"), DebugDir: filepath.Join(dir, "debug"), Source: filepath.Join(src, "names.c")}
	Gcc(t, dir, opt, "-g", "-Wl,--build-id", "-o", b.Program, filepath.Join(src, "names.c"), filepath.Join(src, "calltree.c"))
	b.BuildID = BuildID(t, b.Program)
	b.DebugFile = filepath.Join(b.DebugDir, ".build-id", b.BuildID[:2], b.BuildID[2:]+".debug")
	if err := os.MkdirAll(filepath.Dir(b.DebugFile), 0o755); err != nil {
		t.Fatal(err)
	}
	Run(t, dir, "objcopy", "--only-keep-debug", b.Program, b.DebugFile)
	Run(t, dir, "strip", "--strip-debug", b.Program)
	Run(t, dir, "objcopy", "--add-gnu-debuglink="+b.DebugFile, b.Program)
	return b
}

// BuildID returns the GNU build id of an ELF file in hex, as readelf -n
// prints it.
func BuildID(t testing.TB, path string) string {
	t.Helper()
	cmd := exec.Command("readelf", "-n", path)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("readelf -n %s: %v", path, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if id, ok := strings.CutPrefix(strings.TrimSpace(line), "Build ID: "); ok {
			return strings.TrimSpace(id)
		}
	}
	t.Fatalf("%s has no build id", path)
	return ""
}

// Run runs a command in dir and fails the test on error.
func Run(t testing.TB, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// MarkerLine returns the 1-based number of the first line of a source file
// that holds the comment "LINE:name".
func MarkerLine(t testing.TB, path, name string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "LINE:"+name+" ") || strings.HasSuffix(line, "LINE:"+name) {
			return i + 1
		}
	}
	t.Fatalf("no LINE:%s in %s", name, path)
	return 0
}
