package planner

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/elfaddr"
)

// unwindC is a C file: leaf calls nothing, mid calls leaf2, pick calls
// through a pointer.
const unwindC = `
__attribute__((noipa)) long leaf(long x) { return x * 3 + 1; }
__attribute__((noipa)) long leaf2(long x) { return x * 5 + 1; }
__attribute__((noipa)) long mid(long x) { return leaf2(x) * 2; }
__attribute__((noipa)) long pick(long (*f)(long), long x) { return f(x) + 1; }
int main(int argc, char **argv) { (void)argv; return (int)(mid(argc) + pick(leaf, argc) + leaf(argc)); }
`

// unwindCXX is the same in C++ with a throw: thrower throws, mid calls
// it, tail jumps to it (a tail call, its only exit), main catches.
const unwindCXX = `
#include <stdexcept>
extern "C" {
__attribute__((noipa)) long leaf(long x) { return x * 3 + 1; }
__attribute__((noipa)) long thrower(long x) { if (x < 0) throw std::runtime_error("neg"); return x * 5 + 1; }
__attribute__((noipa)) long mid(long x) { return thrower(x) * 2; }
__attribute__((noipa)) long tail(long x) { return thrower(x + 1); }
__attribute__((noipa)) long pick(long (*f)(long), long x) { return f(x) + 1; }
}
int main(int argc, char **) {
	try { return (int)(mid(argc) + tail(argc) + pick(leaf, argc) + leaf(argc)); } catch (const std::exception &) { return 1; }
}
`

// unwindPlainCXX is C++ with nothing of exceptions in its code, built with
// -fno-exceptions: exceptions of other C++ code may still unwind through
// it.
const unwindPlainCXX = `
__attribute__((noipa)) long leaf(long x) { return x * 3 + 1; }
__attribute__((noipa)) long mid(long x) { return leaf(x) * 2; }
int main(int argc, char **) { return (int)mid(argc); }
`

// buildSource writes source to a file named name in dir and compiles it with
// the command and flags given, into dir/prog.
func buildSource(t *testing.T, dir, name, source string, command ...string) string {
	t.Helper()
	if _, err := exec.LookPath(command[0]); err != nil {
		testutil.SkipOrFail(t, "%s not found: run make deps", command[0])
	}
	src := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(src, []byte(source), 0o644))
	bin := filepath.Join(dir, "prog")
	cmd := exec.Command(command[0], append(append(command[1:], "-o", bin), src)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s\n%s", strings.Join(cmd.Args, " "), out)
	return bin
}

// exceptionsOf opens a file as Resolve does and says whether exceptions
// may unwind through its code, and why.
func exceptionsOf(t *testing.T, path string) (bool, string) {
	t.Helper()
	in, err := Inspect(path, noDebug)
	require.NoError(t, err)
	defer in.Close()
	return in.fl.exceptions()
}

// returnsOf resolves a function span of each function of fns with returns:
// auto and returns its exit reference, or the error that refused it.
func returnsOf(t *testing.T, bin string, fns ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, fn := range fns {
		pl, err := Resolve([]config.Target{{Path: bin, Spans: []config.Span{{Function: fn}}}}, noDebug)
		if err != nil {
			var hazard *UnwindHazardError
			require.ErrorAs(t, err, &hazard, fn)
			out[fn] = "refused"
			if hazard.Instead == "" {
				out[fn] = "refused, no RET"
			}
			continue
		}
		out[fn] = pl.Probes[pl.Spans[0].Exit].Ref
	}
	return out
}

// Whether exceptions may unwind through a file's code, on small compiled
// files: C is not, C linked against libstdc++ is not, static C is not
// (although glibc's code in it has personality routines), C++ is (by the
// exception ABI symbols it imports; static, by those it defines; by its
// C++ symbols alone with -fno-exceptions; by its personality routines
// alone when static and stripped); and per function, only one that calls
// or jumps out (leaf keeps its kernel return probe).
func TestExceptionCapableFiles(t *testing.T) {
	for _, tc := range []struct {
		name, file, source string
		command            []string
		capable            bool
		why                string
		personality        bool // its .eh_frame has a CIE with a personality routine
		returns            map[string]string
	}{
		{name: "C", file: "p.c", source: unwindC, command: []string{"gcc", "-O2"},
			returns: map[string]string{"leaf": "uretprobe:leaf", "mid": "uretprobe:mid", "pick": "uretprobe:pick"}},
		{name: "C linked against libstdc++", file: "p.c", source: unwindC, command: []string{"gcc", "-O2", "-Wl,--no-as-needed", "-lstdc++"},
			returns: map[string]string{"leaf": "uretprobe:leaf", "mid": "uretprobe:mid"}},
		{name: "C++ with a throw", file: "p.cc", source: unwindCXX, command: []string{"g++", "-O2"},
			capable: true, why: "it imports __", personality: true,
			returns: map[string]string{"leaf": "uretprobe:leaf", "mid": "ret:mid", "pick": "ret:pick", "thrower": "ret:thrower", "tail": "refused, no RET"}},
		{name: "C++ without exceptions", file: "p.cc", source: unwindPlainCXX, command: []string{"g++", "-O2", "-fno-exceptions"},
			capable: true, why: "it has C++ symbols such as _Z",
			returns: map[string]string{"_Z4leafl": "uretprobe:_Z4leafl", "_Z3midl": "ret:_Z3midl"}},
		{name: "C static", file: "p.c", source: unwindC, command: []string{"gcc", "-O2", "-static", "-pthread"},
			personality: true, returns: map[string]string{"leaf": "uretprobe:leaf", "mid": "uretprobe:mid", "main": "uretprobe:main"}},
		{name: "C static-pie", file: "p.c", source: unwindC, command: []string{"gcc", "-O2", "-static-pie", "-pthread"},
			personality: true, returns: map[string]string{"mid": "uretprobe:mid"}},
		{name: "C++ static", file: "p.cc", source: unwindCXX, command: []string{"g++", "-O2", "-static"},
			capable: true, why: "it defines __", personality: true,
			returns: map[string]string{"leaf": "uretprobe:leaf", "mid": "ret:mid"}},
		{name: "C++ static, stripped", file: "p.cc", source: unwindCXX, command: []string{"g++", "-O2", "-static", "-s"},
			capable: true, why: "its call-frame information names a personality routine", personality: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := buildSource(t, t.TempDir(), tc.file, tc.source, tc.command...)
			capable, why := exceptionsOf(t, bin)
			assert.Equal(t, tc.capable, capable, why)
			assert.Contains(t, why, tc.why)
			f, err := elf.Open(bin)
			require.NoError(t, err)
			personality, err := elfaddr.HasPersonality(f)
			f.Close()
			require.NoError(t, err)
			assert.Equal(t, tc.personality, personality, "the fixture's call-frame information")
			if tc.returns != nil {
				fns := make([]string, 0, len(tc.returns))
				for fn := range tc.returns {
					fns = append(fns, fn)
				}
				assert.Equal(t, tc.returns, returnsOf(t, bin, fns...))
			}
			if strings.Contains(tc.name, "libstdc++") {
				f, err := elf.Open(bin)
				require.NoError(t, err)
				libs, err := f.ImportedLibraries()
				f.Close()
				require.NoError(t, err)
				assert.Contains(t, strings.Join(libs, " "), "libstdc++", "the fixture links libstdc++")
			}
		})
	}
}

// A file whose .eh_frame cannot be read counts as one exceptions may unwind
// through: a wrong yes costs its own RET probes, a wrong no an abort.
func TestUnreadableCallFrameInformation(t *testing.T) {
	bin := buildSource(t, t.TempDir(), "p.c", unwindC, "gcc", "-O2")
	f, err := elf.Open(bin)
	require.NoError(t, err)
	sec := f.Section(".eh_frame")
	require.NotNil(t, sec)
	off := sec.Offset
	f.Close()
	raw, err := os.ReadFile(bin)
	require.NoError(t, err)
	raw[off+8] = 9 // the first CIE's version
	require.NoError(t, os.WriteFile(bin, raw, 0o755))
	capable, why := exceptionsOf(t, bin)
	assert.True(t, capable)
	assert.Contains(t, why, "its call-frame information cannot be read to prove otherwise (reading .eh_frame: CIE at 0x0: version 9)")
	assert.Equal(t, map[string]string{"leaf": "uretprobe:leaf", "mid": "ret:mid"}, returnsOf(t, bin, "leaf", "mid"))
}

// An explicit kernel return probe on a function exceptions may unwind
// through is refused with one sentence naming ret: (or, for a function
// without RET, its callers) and accept_kernel_hazards; AcceptUretprobeUnwind
// attaches it, and a counter's uretprobe: is refused as a span's is.
func TestUretprobeUnwindRefusal(t *testing.T) {
	bin := buildSource(t, t.TempDir(), "p.cc", unwindCXX, "g++", "-O2")
	_, err := Resolve([]config.Target{{Path: bin, Spans: []config.Span{{Function: "mid", Returns: config.ReturnsUretprobe}}}}, noDebug)
	var hazard *UnwindHazardError
	require.ErrorAs(t, err, &hazard)
	assert.Equal(t, "mid", hazard.Function)
	assert.Regexp(t, `^target \S+: uretprobe:mid: a kernel return probe on mid would abort the program when an exception unwinds through it, `+
		`since the unwinder cannot step through the kernel's return trampoline and calls std::terminate `+
		`\(mid runs other code \(\+0x[0-9a-f]+: callq? thrower\) and its file unwinds exceptions \(it imports __\w+\)\); `+
		`probe its returns with ret:mid instead \(returns: ret or auto; the kernel single-steps RET: about 9 µs per return instead of 0.4 µs\), `+
		`or accept the hazard with accept_kernel_hazards: \[uretprobe_unwind\]$`, err.Error())

	_, err = Resolve([]config.Target{{Path: bin, Counters: config.CountersOf("uretprobe:tail")}}, noDebug)
	require.ErrorAs(t, err, &hazard)
	assert.Contains(t, err.Error(), "(tail runs other code (+0x")
	assert.Contains(t, err.Error(), "jmp")
	assert.Contains(t, err.Error(), "; it has no RET instruction to probe instead (it leaves by tail calls), so probe its callers, or accept the hazard")

	_, err = Resolve([]config.Target{{Path: bin, Counters: config.CountersOf("uretprobe:leaf")}}, noDebug)
	assert.NoError(t, err, "nothing unwinds through a function that calls nothing")

	accept := noDebug
	accept.AcceptUretprobeUnwind = true
	pl, err := Resolve([]config.Target{{Path: bin, Spans: []config.Span{
		{Function: "mid", Returns: config.ReturnsUretprobe}, {Function: "thrower"},
	}}}, accept)
	require.NoError(t, err)
	assert.Equal(t, "uretprobe:mid", pl.Probes[pl.Spans[0].Exit].Ref)
	require.Len(t, attachmentsOf(pl.Plan, pl.Spans[0].Exit), 1)
	assert.True(t, attachmentsOf(pl.Plan, pl.Spans[0].Exit)[0].Return)
	assert.Equal(t, "ret:thrower", pl.Probes[pl.Spans[1].Exit].Ref, "returns: auto stays safe")
}

// Files of this system: glibc builds its functions that call back into the
// program (qsort, bsearch, …) with -fexceptions, and its call-frame
// information names a personality routine, so exceptions may unwind
// through libc; bash and python are C.
func TestExceptionCapableSystemFiles(t *testing.T) {
	for _, tc := range []struct {
		path    string
		capable bool
		why     string
	}{
		{"/lib/x86_64-linux-gnu/libc.so.6", true, "its call-frame information names a personality routine"},
		{"/lib/x86_64-linux-gnu/libstdc++.so.6", true, "it imports _"},
		{"/bin/bash", false, ""},
		{"/usr/bin/python3.11", false, ""},
	} {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			if _, err := os.Stat(tc.path); err != nil {
				testutil.SkipOrFail(t, "%v", err)
			}
			capable, why := exceptionsOf(t, tc.path)
			assert.Equal(t, tc.capable, capable, why)
			assert.Contains(t, why, tc.why)
		})
	}
}

// callbacksC is a C library built with -fexceptions (so that its
// call-frame information names a personality routine, as glibc's does)
// and -static-libgcc (so that, as glibc, it imports nothing of the
// exception ABI): each function reaches one kind of exit, or none.
const callbacksC = `
#include <unistd.h>

__attribute__((noipa, visibility("hidden"))) long leaf(long x) { return x * 3 + 1; }
__attribute__((noipa, visibility("hidden"))) long leaf2(long x) { return x * 5 + 2; }

/* An ifunc resolved inside the file: an IRELATIVE PLT slot. */
static long fast_impl(long x) { return x + 1; }
static long slow_impl(long x) { return x + 2; }
static volatile int use_slow;
static void *resolve_twice(void) { return use_slow ? (void *)slow_impl : (void *)fast_impl; }
__attribute__((visibility("hidden"), ifunc("resolve_twice"))) long twice(long);

/* Same-file direct calls and the ifunc: no exit. */
__attribute__((noipa)) long direct(long x) { return leaf(x) + leaf2(x) + twice(x); }
/* A callback. */
__attribute__((noipa)) long pick(long (*f)(long), long x) { return f(x) + 1; }
/* Another library's function, through the PLT. */
__attribute__((noipa)) long ext(long x) { return (long)getpid() + x; }
/* Its own exported function, through the PLT: another file may interpose it. */
__attribute__((noipa)) long exported(long x) { return x - 1; }
__attribute__((noipa)) long viaplt(long x) { return exported(x) * 2; }
/* A switch: a jump table inside the function (x86-64). */
__attribute__((noipa)) long sw(long x) {
	switch (x) {
	case 0: return leaf(1);
	case 1: return leaf2(2) + 3;
	case 2: return leaf(3) * 7;
	case 3: return leaf2(4) - 1;
	case 4: return leaf(5) ^ 9;
	case 5: return leaf2(6) << 2;
	case 6: return leaf(7) | 64;
	}
	return 0;
}
/* A callback only on the way to a trap: the process ends there. */
static void (*volatile handler)(void);
__attribute__((noipa, noreturn)) static void fatal(void) { handler(); __builtin_trap(); }
__attribute__((noipa)) long checked(long x) { if (x < 0) fatal(); return leaf(x) + 1; }
/* A cleanup: its landing pad resumes through the unwinder, which calls
   personality routines through pointers. */
static volatile long sink;
static void release(long *p) { sink = *p; }
__attribute__((noipa)) long guarded(long x) { long v __attribute__((cleanup(release))) = x; return leaf(v); }
`

// In a file that takes part in exception unwinding only through its
// call-frame information, returns: auto closes at the RETs only the
// functions that reach, through direct calls and jumps inside the file, a
// call through a pointer (pick), a call of another file's function or of
// one another file may interpose (ext, viaplt), or the unwinder (guarded);
// direct calls, an ifunc resolved inside the file (direct), a jump table
// (sw) and a callback on the way to a trap (checked) keep their kernel
// return probes. An explicit uretprobe: is refused where an exception may
// arrive and attached elsewhere. arm64 alike (gcc makes sw a tree of
// compares there).
func TestCallbackExits(t *testing.T) {
	for _, tc := range []struct {
		name    string
		command []string
		returns map[string]string
	}{
		{"x86-64", []string{"gcc"}, map[string]string{"sw": "uretprobe:sw"}},
		{"arm64", []string{testutil.CrossCC}, map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			command := append(tc.command, "-O2", "-fexceptions", "-fPIC", "-shared", "-static-libgcc")
			lib := buildSource(t, t.TempDir(), "callbacks.c", callbacksC, command...)
			capable, why := exceptionsOf(t, lib)
			require.True(t, capable)
			require.Equal(t, "its call-frame information names a personality routine", why, "only the call-frame information")
			want := map[string]string{
				"leaf": "uretprobe:leaf", "direct": "uretprobe:direct", "checked": "uretprobe:checked",
				"pick": "ret:pick", "ext": "ret:ext", "viaplt": "ret:viaplt", "guarded": "ret:guarded",
			}
			for fn, ref := range tc.returns {
				want[fn] = ref
			}
			fns := make([]string, 0, len(want))
			for fn := range want {
				fns = append(fns, fn)
			}
			assert.Equal(t, want, returnsOf(t, lib, fns...))

			_, err := Resolve([]config.Target{{Path: lib, Counters: config.CountersOf("uretprobe:pick")}}, noDebug)
			var hazard *UnwindHazardError
			require.ErrorAs(t, err, &hazard)
			assert.Regexp(t, `\(pick reaches a call through a pointer \(pick\+0x[0-9a-f]+: (call \*%r..|blr x\d+)\), where an exception of other code may come in, and its file unwinds exceptions \(its call-frame information names a personality routine\)\)`, err.Error())
			_, err = Resolve([]config.Target{{Path: lib, Counters: config.CountersOf("uretprobe:ext")}}, noDebug)
			require.ErrorAs(t, err, &hazard)
			assert.Regexp(t, `ext reaches a call of getpid, which another file defines \(ext\+0x[0-9a-f]+: (callq?|bl) 0x[0-9a-f]+, a PLT entry\)`, err.Error())
			_, err = Resolve([]config.Target{{Path: lib, Counters: config.CountersOf("uretprobe:direct")}}, noDebug)
			assert.NoError(t, err)
		})
	}
}

// On this machine's glibc (built with -fexceptions: its call-frame
// information names a personality routine, its symbols nothing of C++):
// malloc, free, read, write and memcpy reach no exit and keep their kernel
// return probes, while qsort_r (the comparator), bsearch, printf (a FILE's
// functions) and getaddrinfo (NSS modules) close at their RETs; qsort,
// which jumps to qsort_r and has no RET, cannot have its return probed;
// with and without libc's debug symbols (libc6-dbg names its internal
// functions).
func TestCallbackExitsLibc(t *testing.T) {
	const libc = "/lib/x86_64-linux-gnu/libc.so.6"
	if _, err := os.Stat(libc); err != nil {
		testutil.SkipOrFail(t, "%v", err)
	}
	for _, tc := range []struct {
		name string
		opts Options
	}{{"dynamic symbols", noDebug}, {"debug symbols", Options{}}} {
		t.Run(tc.name, func(t *testing.T) {
			var spans []config.Span
			want := map[string]string{}
			for _, fn := range []string{"malloc", "free", "read", "write", "memcpy"} {
				spans = append(spans, config.Span{Function: fn})
				want[fn] = "uretprobe:" + fn
			}
			for _, fn := range []string{"qsort_r", "bsearch", "printf", "getaddrinfo"} {
				spans = append(spans, config.Span{Function: fn})
				want[fn] = "ret:" + fn
			}
			start := time.Now()
			plan, err := Resolve([]config.Target{{Path: libc, Spans: spans}}, tc.opts)
			require.NoError(t, err)
			t.Logf("planned %d spans on libc in %v", len(spans), time.Since(start))
			got := map[string]string{}
			for i, sp := range plan.Spans {
				got[spans[i].Function] = plan.Probes[sp.Exit].Ref
			}
			assert.Equal(t, want, got)
			for _, sp := range plan.Spans {
				if p := plan.Probes[sp.Exit]; p.Ref == "ret:qsort_r" {
					assert.Regexp(t, `qsort_r reaches a call through a pointer \(.*call \*%r`, p.Why)
				}
			}
			_, err = Resolve([]config.Target{{Path: libc, Counters: config.CountersOf("uretprobe:malloc", "uretprobe:read")}}, tc.opts)
			assert.NoError(t, err)
			_, err = Resolve([]config.Target{{Path: libc, Spans: []config.Span{{Function: "qsort"}}}}, tc.opts)
			var hazard *UnwindHazardError
			require.ErrorAs(t, err, &hazard)
			assert.Empty(t, hazard.Instead, "qsort has no RET")
		})
	}
}
