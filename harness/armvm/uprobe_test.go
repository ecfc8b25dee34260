package armvm

import (
	"bufio"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/elfaddr"
	"github.com/otel-uprobe/uprobereceiver/internal/insn"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

// tracefs is a mounted tracefs, where the tests define uprobe events
// (uprobe_events), enable them and read their hit counts (uprobe_profile).
type tracefs struct {
	dir   string
	group string
}

// openTracefs finds tracefs in /proc/self/mounts or mounts it on a
// temporary directory for the test. Its events go to a group of the
// test's own ("armvm_<pid>_<n>"), removed at cleanup.
func openTracefs(t *testing.T) *tracefs {
	t.Helper()
	testutil.RequireRoot(t)
	tr := &tracefs{group: fmt.Sprintf("armvm_%d_%d", os.Getpid(), nextGroup())}
	if mounts, err := os.ReadFile("/proc/self/mounts"); err == nil {
		for _, line := range strings.Split(string(mounts), "\n") {
			f := strings.Fields(line)
			if len(f) >= 3 && f[2] == "tracefs" {
				if _, err := os.Stat(filepath.Join(f[1], "uprobe_events")); err == nil {
					tr.dir = f[1]
					break
				}
			}
		}
	}
	if tr.dir == "" {
		dir := t.TempDir()
		if err := unix.Mount("nodev", dir, "tracefs", 0, ""); err != nil {
			testutil.SkipOrFail(t, "mounting tracefs: %v", err)
		}
		t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
		tr.dir = dir
	}
	if _, err := os.Stat(filepath.Join(tr.dir, "uprobe_events")); err != nil {
		testutil.SkipOrFail(t, "the kernel has no uprobe events (CONFIG_UPROBE_EVENTS): %v", err)
	}
	t.Cleanup(func() { tr.removeAll(t) })
	return tr
}

var groups int

func nextGroup() int { groups++; return groups }

// write writes s to a tracefs file. uprobe_events is opened for
// appending: opening it for writing alone would delete every uprobe event
// of the system.
func (tr *tracefs) write(name, s string) error {
	f, err := os.OpenFile(filepath.Join(tr.dir, name), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s + "\n")
	return errors.Join(err, f.Close())
}

// add defines the uprobe event group/event at a file offset of path.
func (tr *tracefs) add(t *testing.T, event, path string, fileOffset uint64) {
	t.Helper()
	require.NoError(t, tr.write("uprobe_events", fmt.Sprintf("p:%s/%s %s:%#x", tr.group, event, path, fileOffset)),
		"defining uprobe %s at %s:%#x", event, path, fileOffset)
}

// enable turns one event, or with event "" the whole group, on or off.
// Turning a uprobe on is when the kernel decodes the probed instruction in
// every process that maps the file, and refuses it.
func (tr *tracefs) enable(event string, on bool) error {
	p := filepath.Join("events", tr.group, event, "enable")
	v := "0"
	if on {
		v = "1"
	}
	return tr.write(p, v)
}

// removeAll disables the group and deletes its events.
func (tr *tracefs) removeAll(t *testing.T) {
	entries, err := os.ReadDir(filepath.Join(tr.dir, "events", tr.group))
	if err != nil {
		return
	}
	_ = tr.enable("", false)
	for _, e := range entries {
		if e.IsDir() {
			if err := tr.write("uprobe_events", "-:"+tr.group+"/"+e.Name()); err != nil {
				t.Errorf("removing uprobe event %s/%s: %v", tr.group, e.Name(), err)
			}
		}
	}
}

// hits returns the hit counts of the uprobe events on path from
// uprobe_profile ("PATH EVENT HITS" lines, the event without its group),
// by event name. The tests' files are their own, so no other group's
// events are counted.
func (tr *tracefs) hits(t *testing.T, path string) map[string]uint64 {
	t.Helper()
	f, err := os.Open(filepath.Join(tr.dir, "uprobe_profile"))
	require.NoError(t, err)
	defer f.Close()
	out := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || fields[0] != path {
			continue
		}
		n, err := strconv.ParseUint(fields[len(fields)-1], 10, 64)
		require.NoError(t, err, sc.Text())
		out[fields[1]] += n
	}
	require.NoError(t, sc.Err())
	return out
}

// fixture returns the path of a fixture program: the prebuilt one in the
// VM ($ARMVM_FIXTURES/name), or one built by build on the host.
func fixture(t *testing.T, name string, build func(dir, out string)) string {
	t.Helper()
	if dir := os.Getenv(FixturesEnv); dir != "" {
		p := filepath.Join(dir, name)
		_, err := os.Stat(p)
		require.NoError(t, err, "fixture %s", name)
		return p
	}
	dir := t.TempDir()
	out := filepath.Join(dir, name)
	build(dir, out)
	return out
}

// function is a function of an ELF file with its decoded instructions.
type function struct {
	name  string
	vaddr uint64
	insts []insn.Inst
}

// openFunctions decodes the named functions of path in the syntax of the
// file's machine.
func openFunctions(t *testing.T, path string, names ...string) (regs.Arch, map[string]function, *elf.File) {
	t.Helper()
	f, err := elf.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	arch, err := regs.ArchOf(f.Machine)
	require.NoError(t, err)
	syms, err := f.Symbols()
	require.NoError(t, err)
	out := map[string]function{}
	for _, name := range names {
		for _, s := range syms {
			if s.Name != name || elf.ST_TYPE(s.Info) != elf.STT_FUNC {
				continue
			}
			sec := f.Sections[s.Section]
			data, err := sec.Data()
			require.NoError(t, err)
			code := data[s.Value-sec.Addr : s.Value-sec.Addr+s.Size]
			insts, err := insn.DecodeFor(arch, code)
			require.NoError(t, err, name)
			out[name] = function{name: name, vaddr: s.Value, insts: insts}
		}
		require.Contains(t, out, name, "no function %s in %s", name, path)
	}
	return arch, out, f
}

// fileOffset converts a function offset into the file offset of a uprobe.
func fileOffset(t *testing.T, f *elf.File, fn function, off uint64) uint64 {
	t.Helper()
	require.NoError(t, insn.Boundary(fn.insts, off))
	fo, err := elfaddr.FileOffset(f.Progs, fn.vaddr+off)
	require.NoError(t, err)
	return fo
}

// classAt returns the class of the instruction at a function offset.
func classAt(fn function, off uint64) insn.SiteClass {
	for _, in := range fn.insts {
		if in.Offset == off {
			return in.Class
		}
	}
	return insn.Unsupported
}

// TestUprobeCounter attaches uprobes to the entry CheapEntry chooses and
// to every return of work() in testdata/arm64/counter.c and checks that
// each call hits the entry once and one return once, and that the probed
// program still computes the right sum.
func TestUprobeCounter(t *testing.T) {
	tr := openTracefs(t)
	bin := fixture(t, "counter", func(dir, out string) {
		testutil.Gcc(t, dir, "-O1", "-g0", "-Wall", "-Werror", "-o", out, testutil.Testdata("arm64", "counter.c"))
	})
	arch, fns, f := openFunctions(t, bin, "work")
	work := fns["work"]
	entry, class := insn.CheapEntry(work.insts)
	require.True(t, class.Probeable(), "%s entry at %#x: %v", arch, entry, class)
	tr.add(t, "entry", bin, fileOffset(t, f, work, entry))
	rets := insn.Returns(work.insts)
	require.NotEmpty(t, rets)
	for i, off := range rets {
		require.True(t, classAt(work, off).Probeable())
		tr.add(t, fmt.Sprintf("ret%d", i), bin, fileOffset(t, f, work, off))
	}
	require.NoError(t, tr.enable("", true))

	const calls = 3000
	out, err := exec.Command(bin, strconv.Itoa(calls)).Output()
	require.NoError(t, err)
	var want int64
	for i := int64(0); i < calls; i++ {
		if i%3 == 0 {
			want += i * 2
		} else {
			want += i + 1
		}
	}
	assert.Equal(t, fmt.Sprintf("sum %d\n", want), string(out), "the probed program computes what it should")

	hits := tr.hits(t, bin)
	assert.Equal(t, uint64(calls), hits["entry"], "entry at %#x (%v, %s)", entry, class, work.insts[0].Text)
	var retHits uint64
	for i := range rets {
		retHits += hits[fmt.Sprintf("ret%d", i)]
	}
	assert.Equal(t, uint64(calls), retHits, "returns at %v", rets)
	t.Logf("%s %s: entry +%#x (%v), %d returns, %v", arch, runtime.GOARCH, entry, class, len(rets), hits)
}

// fibCalls is the number of calls Fib(n) makes, itself included.
func fibCalls(n int) uint64 {
	if n < 2 {
		return 1
	}
	return 1 + fibCalls(n-1) + fibCalls(n-2)
}

// TestUprobeGoEntry attaches uprobes to the entries GoEntry chooses (after
// the stack check) and the RETs of the Go fixture's functions and checks
// the hit counts: the recursive Fib hits each once per call, and Large,
// whose 16 KiB frame makes the stack grow, hits its entry once per call
// while its first instruction may run twice.
func TestUprobeGoEntry(t *testing.T) {
	tr := openTracefs(t)
	bin := fixture(t, "goprog", func(dir, out string) {
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", out, ".")
		cmd.Dir = testutil.Testdata("gobin", "goprog")
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=-buildvcs=false", "CGO_ENABLED=0")
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, "go build: %s", b)
	})
	// Unprobed first, to compare the output.
	args := []string{"a", "b", "c"}
	plain, err := exec.Command(bin, args...).Output()
	require.NoError(t, err)

	arch, fns, f := openFunctions(t, bin, "main.Fib", "main.Large")
	fib, large := fns["main.Fib"], fns["main.Large"]
	fibEntry, class := insn.GoEntry(fib.insts)
	require.NotZero(t, fibEntry, "main.Fib has a stack check")
	require.True(t, class.Probeable())
	tr.add(t, "fib_entry", bin, fileOffset(t, f, fib, fibEntry))
	rets := insn.Returns(fib.insts)
	require.Len(t, rets, 2)
	for i, off := range rets {
		tr.add(t, fmt.Sprintf("fib_ret%d", i), bin, fileOffset(t, f, fib, off))
	}
	largeEntry, class := insn.GoEntry(large.insts)
	require.NotZero(t, largeEntry)
	require.True(t, class.Probeable())
	tr.add(t, "large_entry", bin, fileOffset(t, f, large, largeEntry))
	tr.add(t, "large_start", bin, fileOffset(t, f, large, 0))
	require.NoError(t, tr.enable("", true))

	out, err := exec.Command(bin, args...).Output()
	require.NoError(t, err)
	assert.Equal(t, string(plain), string(out), "the probed program prints what it prints unprobed")

	hits := tr.hits(t, bin)
	calls := fibCalls(len(args) + 1 + 10) // main calls Fib(len(os.Args)+10)
	assert.Equal(t, calls, hits["fib_entry"], "main.Fib+%#x", fibEntry)
	assert.Equal(t, calls, hits["fib_ret0"]+hits["fib_ret1"], "main.Fib returns at %v", rets)
	assert.Equal(t, uint64(1), hits["large_entry"], "main.Large+%#x, after the stack check", largeEntry)
	assert.GreaterOrEqual(t, hits["large_start"], uint64(1))
	t.Logf("%s: main.Fib entry +%#x, main.Large entry +%#x; main.Large's first instruction ran %d times for 1 call; hits %v",
		arch, fibEntry, largeEntry, hits["large_start"], hits)
}
