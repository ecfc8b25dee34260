//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/insn"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/planner"
	"github.com/otel-uprobe/uprobereceiver/internal/recipe"
	"github.com/otel-uprobe/uprobereceiver/internal/tracer"
	"github.com/otel-uprobe/uprobereceiver/internal/tracer/floor"
)

// The recipe rows of the feature cost matrix: each recipe (internal/recipe)
// on the real program or library it was written for, calling what the
// recipe probes. There is no identical twin of getaddrinfo or of a
// PostgreSQL statement to time a floor on in the same rounds, so each
// cycle times the workload five times: unprobed, with the recipe attached
// (`recipe: NAME`, scoped to the workload's process), unprobed, with the
// recipe's floor, and unprobed again; the recipe and the floor are each
// compared with the unprobed measures either side of them. The floor is a
// bare counting uprobe (uretprobe) at every site the recipe's plan
// attaches, one counter per site class, so that it reads how many traps
// of each class a call takes; its cost is the floor of the recipe's own
// site classes. The row's second ratio is against the machine's trap by
// site class (tracer.CalibrateMachine, same run) times those traps per
// call.
//
// The floor is scoped to the workload's process by the kernel (the
// uprobe_multi link's pid); the receiver's links of a pid: target are
// not (tracer_linux.go attaches them to the file and filters in BPF), so
// while a recipe row runs, other processes that map the same file take
// its traps too.

// recipeWorkload is one recipe's workload process and the target that
// attaches the recipe to it.
type recipeWorkload struct {
	// proc is the workload process when the benchmark drives it over
	// its stdin.
	proc *workload
	// target is the recipe's target, scoped to pid.
	target config.Target
	// pid is the process the recipe and its floor trace.
	pid int
	// measure runs calls calls per round for rounds rounds (after a
	// warm-up of calls/10+1) and returns the median time per call in ns
	// and the number of calls it made.
	measure func(calls, rounds int) (ns float64, made int, err error)
	// stop ends the workload and what it started.
	stop func()
}

// recipeRow is a row of the matrix for one recipe.
type recipeRow struct {
	recipe string
	// name is the row's configuration, what -rows matches.
	name string
	// calls are the calls per round of a full run and of -smoke; rounds,
	// when set, the rounds of a full run (more, shorter rounds make the
	// median of the noisier servers and interpreters steadier).
	calls, smokeCalls, rounds int
	dominates                 string
	start                     func(dir string) (*recipeWorkload, error)
}

// recipeCycles is the number of cycles of the recipe rows in a full run:
// each cycle starts the receiver once per recipe (1 to 4 s here), so the
// seven rows take under 2 minutes in all.
const recipeCycles = 3

// recipeRows are the rows, one for each embedded recipe, and what stops
// the workload the C library rows share.
func recipeRows() (_ []recipeRow, stopShared func()) {
	var clib *recipeWorkload // the C helper, shared by dns, malloc and tls
	stopShared = func() {
		if clib != nil {
			clib.stop()
		}
	}
	startC := func(mode, recipeName string) func(dir string) (*recipeWorkload, error) {
		return func(dir string) (*recipeWorkload, error) {
			if clib == nil {
				w, err := startCRecipes(dir)
				if err != nil {
					return nil, err
				}
				clib = w
			}
			w := *clib
			w.target = config.Target{Recipe: recipeName, PID: clib.pid}
			w.measure = func(calls, rounds int) (float64, int, error) {
				return askRun(clib, mode, calls, rounds)
			}
			w.stop = func() {} // stopShared stops it
			return &w, nil
		}
	}
	return []recipeRow{
		{recipe: "dns", name: "recipe: dns, glibc getaddrinfo(\"127.0.0.1\", AI_NUMERICHOST) + freeaddrinfo, per lookup (C, thread CPU time, CPU 0)",
			calls: 5_000, smokeCalls: 500, start: startC("gai", "dns"),
			dominates: "the single-stepped `ret:` return of getaddrinfo (the recipe probes C returns with ret:, as an exception may unwind through them; x86 single-steps a ret, ~10 µs here), then the emulated entry; the BPF (the name's string read, the span) is under 1 µs of it, the lookup itself ~80 ns"},
		{recipe: "malloc", name: "recipe: malloc, glibc malloc(64) + free, per call (C, thread CPU time, CPU 0)",
			calls: 50_000, smokeCalls: 5_000, start: startC("malloc", "malloc"),
			dominates: "the emulated entry trap; the malloc.large span's filter rejects a 64-byte call at entry, so the kernel skips its return probe (a session uprobe): below the floor, whose bare uretprobe fires on every call; BPF (the size histogram) ~0.2 µs"},
		{recipe: "tls", name: "recipe: tls, libssl 64-byte SSL_write + SSL_read over a BIO pair, per write and its read (C, thread CPU time, CPU 0)",
			calls: 3_000, smokeCalls: 300, start: startC("tls", "tls"),
			dominates: "the single-stepped entries of SSL_write and SSL_read (sub $0x18,%rsp, cmpq: ~10 µs each here), then their two uretprobe returns; the BPF (two spans) ~1.5 µs, OpenSSL's own work ~1 µs"},
		{recipe: "python", name: "recipe: python, python3.11 import of a one-line module dropped from sys.modules, per import (thread CPU time, CPU 0)",
			calls: 400, smokeCalls: 100, rounds: 15, start: startPythonRecipe,
			dominates: "the import's own work (finding and loading the module, ~30 µs); of what the recipe adds, the two emulated USDT traps, then the BPF (the module name's string read, the span) ~1.2 µs"},
		{recipe: "jvm", name: "recipe: jvm, OpenJDK 17 class load (defineClass in a new class loader), per class (thread CPU time, CPU 0)",
			calls: 400, smokeCalls: 100, rounds: 15, start: startJVMRecipe,
			dominates: "the class load itself (10 to 12 µs); the recipe adds the emulated class__loaded trap and, when a collection unloads the class, class__unloaded (counters, BPF ~0.4 µs): near the noise of a class load"},
		{recipe: "postgresql", name: "recipe: postgresql, PostgreSQL 15 \"SELECT 1\" (simple protocol, Unix socket), per statement (the backend's CPU time, CPU 0)",
			calls: 700, smokeCalls: 100, rounds: 15, start: startPostgresRecipe,
			dominates: "the statement's own work (~12 µs of backend CPU); the recipe adds four emulated USDT traps (query and transaction start and end) and ~1.8 µs of BPF (two spans, the query text's string read)"},
		{recipe: "go-http", name: "recipe: go-http, Go net/http GET /hello (keep-alive), per request (the server process's CPU time, CPU 0)",
			calls: 400, smokeCalls: 100, rounds: 15, start: startGoHTTPRecipe,
			dominates: "the two single-stepped RET sites (ServeHTTP's and WriteHeader's returns, ~10 µs each here), then the two emulated entries and ~6 µs of BPF: pairing by goroutine (an outermost span copies its goroutine's state) and the request's three strings"},
	}, stopShared
}

// recipeCosts measures the recipe rows -rows selects and appends them to
// res.PerHit.
func recipeCosts(s settings, res *Result) error {
	rows, stopShared := recipeRows()
	defer stopShared()
	if s.rows != "" {
		re, err := regexp.Compile(s.rows)
		if err != nil {
			return fmt.Errorf("-rows: %w", err)
		}
		var kept []recipeRow
		for _, r := range rows {
			if re.MatchString(r.name) {
				kept = append(kept, r)
			}
		}
		rows = kept
	}
	if len(rows) == 0 {
		return nil
	}
	dir, err := os.MkdirTemp("", "uprobe-bench-recipes-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cycles := min(s.cycles, recipeCycles)
	for _, r := range rows {
		calls, rounds := r.calls, s.rounds
		if s.smoke {
			calls = r.smokeCalls
		} else if r.rounds > 0 {
			rounds = r.rounds
		}
		row, err := measureRecipe(res, r, dir, calls, rounds, cycles, s.programStats)
		if err != nil && testutil.InCI() {
			// CI installed every program (make deps-bench): a row
			// that cannot be had there has rotted.
			return fmt.Errorf("the recipe %s row: %w", r.recipe, err)
		}
		if err != nil {
			res.Notes = append(res.Notes, fmt.Sprintf("The recipe %s row is missing: %v", r.recipe, err))
			fmt.Fprintf(os.Stderr, "bench: the recipe %s row is missing: %v\n", r.recipe, err)
			continue
		}
		res.PerHit = append(res.PerHit, row)
	}
	return nil
}

// measureRecipe starts a recipe's workload and times it for cycles cycles
// of five measures: unprobed, recipe, unprobed, floor, unprobed.
func measureRecipe(res *Result, r recipeRow, dir string, calls, rounds, cycles int, programStats bool) (PerHit, error) {
	began := time.Now()
	w, err := r.start(dir)
	if err != nil {
		return PerHit{}, fmt.Errorf("starting its workload: %w", err)
	}
	defer w.stop()
	expanded, err := recipe.Expand([]config.Target{w.target})
	if err != nil {
		return PerHit{}, err
	}
	// Planned as the receiver plans it on this kernel (the returns'
	// hazard aside: Linux 6.11 alone has it).
	pl, err := planner.Resolve(expanded, planner.Options{
		OptimizedUprobes: tracer.HaveOptimizedUprobes(), ARM64StepsNop: tracer.ARM64StepsNop(),
		Arch: tracer.Arch(), Locator: planner.HostLocator{},
	})
	if err != nil {
		return PerHit{}, fmt.Errorf("planning the recipe: %w", err)
	}
	sites := append([]plan.Attachment(nil), pl.Attachments...)
	var listed []string
	for _, a := range sites {
		leg := "entry"
		if a.Return {
			leg = "uretprobe"
		}
		listed = append(listed, fmt.Sprintf("%s %s %s", pl.Probes[a.Probe].Ref, leg, siteClassOf(a)))
	}
	fmt.Fprintf(os.Stderr, "recipe %s: %d sites: %s\n", r.recipe, len(sites), strings.Join(listed, "; "))
	files := append([]plan.File(nil), pl.Files...)
	pl.Close()

	// A first, discarded measure warms the workload up (a JIT, caches,
	// a server's first statements).
	if _, _, err := w.measure(calls, rounds); err != nil {
		return PerHit{}, err
	}
	row := PerHit{Name: r.name, Feature: "recipe " + r.recipe, Dominates: r.dominates, Recipe: r.recipe}
	var floorRatios, trapRatios, unprobed []float64
	var perClass map[string]float64
	fmt.Fprintf(os.Stderr, "recipe %s: started and planned in %.1f s\n", r.recipe, time.Since(began).Seconds())
	for c := 0; c < cycles; c++ {
		cycleStart := time.Now()
		base0, _, err := w.measure(calls, rounds)
		if err != nil {
			return row, err
		}
		attachStart := time.Now()
		rcv, counts, err := startReceiver(w.target, 8<<20)
		attachTook := time.Since(attachStart)
		if err != nil {
			return row, fmt.Errorf("starting the receiver with recipe %s: %w", r.recipe, err)
		}
		var before map[ebpf.ProgramID]progRun
		if programStats {
			before, _ = programRuns([]string{""})
		}
		traced, tracedCalls, err := w.measure(calls, rounds)
		bpf := ""
		if programStats && err == nil {
			after, _ := programRuns([]string{""})
			rt, runs := programDelta(before, after)
			bpf = fmt.Sprintf(" [BPF %.1f ns in %.2f runs per call]", float64(rt.Nanoseconds())/float64(tracedCalls), float64(runs)/float64(tracedCalls))
		}
		err = errors.Join(err, rcv.Shutdown(context.Background()))
		if err != nil {
			return row, err
		}
		base1, _, err := w.measure(calls, rounds)
		if err != nil {
			return row, err
		}
		f, err := openSiteFloor(files, sites, w.pid)
		if err != nil {
			return row, fmt.Errorf("attaching the floor: %w", err)
		}
		floored, made, err := w.measure(calls, rounds)
		if err == nil {
			perClass, err = f.hitsPerCall(made)
		}
		err = errors.Join(err, f.Close())
		if err != nil {
			return row, err
		}
		base2, _, err := w.measure(calls, rounds)
		if err != nil {
			return row, err
		}
		// Each is compared with the unprobed measures either side of it.
		added, floorAdded := traced-(base0+base1)/2, floored-(base1+base2)/2
		row.Cycles = append(row.Cycles, added)
		unprobed = append(unprobed, base1)
		floorRatios = append(floorRatios, added/floorAdded)
		line := fmt.Sprintf("cycle %d: %-60s %8.1f ns added%s (unprobed %.1f, traced %.1f, unprobed %.1f, floor %.1f, unprobed %.1f), %.2f × bare counting at its sites (%.1f ns: %s), spans %d",
			c+1, "recipe "+r.recipe, added, bpf, base0, traced, base1, floored, base2, added/floorAdded, floorAdded, classText(perClass), counts.spans.Load())
		if trap := trapFloor(res.Trap, perClass); trap > 0 {
			trapRatios = append(trapRatios, added/trap)
			line += fmt.Sprintf(", %.2f × the trap by class (%.0f ns)", added/trap, trap)
		}
		fmt.Fprintf(os.Stderr, "%s; cycle %.1f s (receiver Start %.1f s)\n", line, time.Since(cycleStart).Seconds(), attachTook.Seconds())
	}
	row.AddedNs = median(row.Cycles)
	row.UnprobedNs, row.Traps = median(unprobed), classText(perClass)
	row.Baseline = "bare counting uprobes at its sites"
	row.Ratio, row.Ratios = median(floorRatios), floorRatios
	if len(trapRatios) > 0 {
		row.Also = &Against{Floor: "this machine's trap by site class × traps per call", Ratio: median(trapRatios), Ratios: trapRatios}
	}
	return row, nil
}

// returnClass is the site class name of a uretprobe's return leg.
const returnClass = "return"

// siteClassOf is the floor group of a site: its class, or returnClass.
func siteClassOf(a plan.Attachment) string {
	if a.Return {
		return returnClass
	}
	return a.Class.String()
}

// classText says how many traps of each class a call takes: "1.00
// emulated + 1.00 return per call".
func classText(perClass map[string]float64) string {
	var keys []string
	for k, v := range perClass {
		if v >= 0.005 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if len(keys) == 0 {
		return "no traps per call"
	}
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%.2f %s", perClass[k], k))
	}
	return strings.Join(parts, " + ") + " per call"
}

// trapFloor is what the machine's trap by site class makes of traps per
// call: the sum of each class's hits per call times its cost; 0 without a
// measured trap.
func trapFloor(t *Trap, perClass map[string]float64) float64 {
	if t == nil {
		return 0
	}
	ns := map[string]float64{
		insn.Emulated.String():      t.EmulatedNs,
		insn.Optimizable.String():   t.OptimizableNs,
		insn.SingleStepped.String(): t.SingleSteppedNs,
		returnClass:                 t.ReturnNs,
	}
	var sum float64
	for k, v := range perClass {
		sum += v * ns[k]
	}
	return sum
}

// siteFloor is bare counters at a plan's sites in one process, one counter
// per site class, so that its hits say how many traps of each class a call
// takes. It owns its counters.
type siteFloor struct {
	counters map[string][]*Counter
}

// openSiteFloor attaches the floor's counter at every distinct site of
// sites (uretprobes for returns, with the sites' USDT semaphores) in
// process pid.
func openSiteFloor(files []plan.File, sites []plan.Attachment, pid int) (_ *siteFloor, err error) {
	type key struct {
		file  int
		class string
	}
	groups := map[key][]plan.Attachment{}
	seen := map[[2]uint64]bool{}
	for _, a := range sites {
		ret := uint64(0)
		if a.Return {
			ret = 1
		}
		k := [2]uint64{uint64(a.File)<<32 | ret, a.FileOffset}
		if seen[k] {
			continue
		}
		seen[k] = true
		g := key{a.File, siteClassOf(a)}
		groups[g] = append(groups[g], a)
	}
	f := &siteFloor{counters: map[string][]*Counter{}}
	defer func() {
		if err != nil {
			err = errors.Join(err, f.Close())
		}
	}()
	for g, atts := range groups {
		c, err := openClassCounter(files[g.file].Path, atts, pid)
		if err != nil {
			return nil, err
		}
		f.counters[g.class] = append(f.counters[g.class], c)
	}
	return f, nil
}

// openClassCounter loads the floor's counter and attaches it at atts, all
// uprobes or all uretprobes, of the file at path in process pid.
func openClassCounter(path string, atts []plan.Attachment, pid int) (_ *Counter, err error) {
	spec, err := floor.Spec()
	if err != nil {
		return nil, fmt.Errorf("reading the floor program: %w", err)
	}
	if floorMulti {
		spec.Programs[floor.Program].AttachType = ebpf.AttachTraceUprobeMulti
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, fmt.Errorf("loading the counter: %w", err)
	}
	c := &Counter{coll: coll, hits: coll.Maps[floor.Map]}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Close())
		}
	}()
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	p := coll.Programs[floor.Program]
	var offsets, refs []uint64
	semaphores := false
	for _, a := range atts {
		offsets = append(offsets, a.FileOffset)
		refs = append(refs, a.RefCtrOffset)
		semaphores = semaphores || a.RefCtrOffset != 0
	}
	if !semaphores {
		refs = nil
	}
	ret := atts[0].Return
	if floorMulti {
		opts := &link.UprobeMultiOptions{Addresses: offsets, RefCtrOffsets: refs, PID: uint32(pid)}
		var l link.Link
		if ret {
			l, err = ex.UretprobeMulti(nil, p, opts)
		} else {
			l, err = ex.UprobeMulti(nil, p, opts)
		}
		if err != nil {
			return nil, fmt.Errorf("attaching the floor at %s:%#x: %w", path, offsets, err)
		}
		c.links = append(c.links, l)
		return c, nil
	}
	for i, off := range offsets {
		opts := &link.UprobeOptions{Address: off, PID: pid, TraceFSPrefix: "otelcol_uprobe"}
		if refs != nil {
			opts.RefCtrOffset = refs[i]
		}
		var l link.Link
		if ret {
			l, err = ex.Uretprobe("floor", p, opts)
		} else {
			l, err = ex.Uprobe("floor", p, opts)
		}
		if err != nil {
			return nil, fmt.Errorf("attaching the floor at %s:%#x: %w", path, off, err)
		}
		c.links = append(c.links, l)
	}
	return c, nil
}

// hitsPerCall returns each class's hits divided by calls.
func (f *siteFloor) hitsPerCall(calls int) (map[string]float64, error) {
	out := map[string]float64{}
	for class, cs := range f.counters {
		for _, c := range cs {
			n, err := c.Hits()
			if err != nil {
				return nil, err
			}
			out[class] += float64(n) / float64(calls)
		}
	}
	return out, nil
}

// Close detaches and unloads every counter.
func (f *siteFloor) Close() error {
	var errs []error
	for _, cs := range f.counters {
		for _, c := range cs {
			errs = append(errs, c.Close())
		}
	}
	f.counters = nil
	return errors.Join(errs...)
}

// askRun runs "run MODE N ROUNDS" on a workload that answers "ns MEDIAN"
// (testdata/bench/recipes.c, and the Python and Java workloads below).
func askRun(w *recipeWorkload, mode string, calls, rounds int) (float64, int, error) {
	return askWorkload(w.proc, mode, calls, rounds)
}

func askWorkload(p *workload, mode string, calls, rounds int) (float64, int, error) {
	fmt.Fprintf(p.in, "run %s %d %d\n", mode, calls, rounds)
	line, err := p.expect("ns ")
	if err != nil {
		return 0, 0, err
	}
	var ns float64
	if _, err := fmt.Sscanf(line, "ns %f", &ns); err != nil {
		return 0, 0, err
	}
	return ns, calls/10 + 1 + calls*rounds, nil
}

// pinnedCommand runs args pinned to CPU 0 on a machine of two CPUs or
// more, as the other rows' workloads are.
func pinnedCommand(args ...string) *exec.Cmd {
	if runtime.NumCPU() >= 2 {
		args = append([]string{"taskset", "-c", "0"}, args...)
	}
	return exec.Command(args[0], args[1:]...)
}

// startCRecipes builds and starts testdata/bench/recipes.c.
func startCRecipes(dir string) (*recipeWorkload, error) {
	bin := filepath.Join(dir, "recipes")
	if err := gcc("-O2", "-o", bin, testutil.Testdata("bench", "recipes.c"), "-lssl", "-lcrypto"); err != nil {
		return nil, err
	}
	p, err := startWorkloadCmd(pinnedCommand(bin))
	if err != nil {
		return nil, err
	}
	return &recipeWorkload{proc: p, pid: p.cmd.Process.Pid, stop: p.stop}, nil
}

// pythonRecipeScript imports benchmod afresh N times a round: each import
// finds and loads it (import__find__load__start and __done).
const pythonRecipeScript = `import sys, time
sys.path.insert(0, sys.argv[1])
sys.stdout.write("ready\n"); sys.stdout.flush()
def once(n):
    mods = sys.modules
    for _ in range(n):
        mods.pop("benchmod", None)
        __import__("benchmod")
for line in sys.stdin:
    w = line.split()
    if w and w[0] == "exit":
        break
    if len(w) != 4 or w[0] != "run":
        continue
    n, rounds = int(w[2]), int(w[3])
    once(n // 10 + 1)
    per = []
    for _ in range(rounds):
        t0 = time.thread_time_ns()
        once(n)
        per.append((time.thread_time_ns() - t0) / n)
    per.sort()
    sys.stdout.write("ns %.1f\n" % per[len(per) // 2]); sys.stdout.flush()
`

const python311 = "/usr/bin/python3.11"

// startPythonRecipe starts Debian's python3.11 on the import loop.
func startPythonRecipe(dir string) (*recipeWorkload, error) {
	mods := filepath.Join(dir, "pymods")
	if err := os.MkdirAll(mods, 0o755); err != nil {
		return nil, err
	}
	script := filepath.Join(dir, "recipe_bench.py")
	if err := os.WriteFile(script, []byte(pythonRecipeScript), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(mods, "benchmod.py"), []byte("X = 1\n"), 0o644); err != nil {
		return nil, err
	}
	p, err := startWorkloadCmd(pinnedCommand(python311, "-I", "-S", script, mods))
	if err != nil {
		return nil, err
	}
	w := &recipeWorkload{proc: p, stop: p.stop}
	if w.pid, err = execedChild(p.cmd.Process.Pid, python311); err != nil {
		p.stop()
		return nil, err
	}
	w.target = config.Target{Recipe: "python", Path: python311, PID: w.pid}
	w.measure = func(calls, rounds int) (float64, int, error) { return askWorkload(p, "import", calls, rounds) }
	return w, nil
}

// javaRecipeSource defines Payload in a new class loader N times a round,
// timed by the thread's CPU time: each definition fires class__loaded.
const javaRecipeSource = `import java.io.*;
import java.lang.management.*;
import java.util.Arrays;

public class RecipeBench {
    static class Loader extends ClassLoader {
        Class<?> define(byte[] b) { return defineClass(null, b, 0, b.length); }
    }
    public static volatile Object sink;
    static void once(byte[] bytes, int n) {
        for (int i = 0; i < n; i++) sink = new Loader().define(bytes);
    }
    public static void main(String[] args) throws Exception {
        byte[] bytes;
        try (InputStream in = RecipeBench.class.getResourceAsStream("Payload.class")) { bytes = in.readAllBytes(); }
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        BufferedReader r = new BufferedReader(new InputStreamReader(System.in));
        System.out.println("ready");
        System.out.flush();
        String line;
        while ((line = r.readLine()) != null) {
            String[] w = line.split(" ");
            if (w[0].equals("exit")) return;
            if (w.length != 4 || !w[0].equals("run")) continue;
            int n = Integer.parseInt(w[2]), rounds = Integer.parseInt(w[3]);
            once(bytes, n / 10 + 1);
            double[] per = new double[rounds];
            for (int k = 0; k < rounds; k++) {
                // A full collection unloads the classes of the rounds
                // before (class__unloaded, in the GC's threads), so that
                // every round starts from the same heap and metaspace.
                System.gc();
                long t0 = mx.getCurrentThreadCpuTime();
                once(bytes, n);
                per[k] = (double) (mx.getCurrentThreadCpuTime() - t0) / n;
            }
            Arrays.sort(per);
            System.out.println(String.format("ns %.1f", per[rounds / 2]));
            System.out.flush();
        }
    }
}

class Payload { int x; }
`

const jdk17 = "/usr/lib/jvm/java-17-openjdk-amd64"

// startJVMRecipe compiles and starts the class-loading loop on OpenJDK 17.
func startJVMRecipe(dir string) (*recipeWorkload, error) {
	src := filepath.Join(dir, "java")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return nil, err
	}
	file := filepath.Join(src, "RecipeBench.java")
	if err := os.WriteFile(file, []byte(javaRecipeSource), 0o644); err != nil {
		return nil, err
	}
	if out, err := exec.Command(jdk17+"/bin/javac", "-d", src, file).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("javac: %w\n%s", err, out)
	}
	java := jdk17 + "/bin/java"
	p, err := startWorkloadCmd(pinnedCommand(java, "-Xms256m", "-Xmx256m", "-XX:+UseG1GC", "-cp", src, "RecipeBench"))
	if err != nil {
		return nil, err
	}
	w := &recipeWorkload{proc: p, stop: p.stop}
	if w.pid, err = execedChild(p.cmd.Process.Pid, java); err != nil {
		p.stop()
		return nil, err
	}
	w.target = config.Target{Recipe: "jvm", Path: jdk17 + "/lib/server/libjvm.so", PID: w.pid}
	w.measure = func(calls, rounds int) (float64, int, error) { return askWorkload(p, "define", calls, rounds) }
	return w, nil
}

// processCPUNs returns the CPU time of every thread of process pid so far
// (its process CPU clock, clock_getcpuclockid).
func processCPUNs(pid int) (int64, error) {
	clock := int32(^uint32(pid)<<3) | 2 // MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)
	var ts unix.Timespec
	if err := unix.ClockGettime(clock, &ts); err != nil {
		return 0, fmt.Errorf("reading the CPU clock of process %d: %w", pid, err)
	}
	return ts.Nano(), nil
}

// timeServer runs one request calls/10+1 times, then calls times a round
// for rounds rounds, and returns the median CPU time of process pid per
// request.
func timeServer(pid, calls, rounds int, request func() error) (_ float64, _ int, err error) {
	// The requests are sent from a thread on the server's CPU: the two
	// take turns on it, as the other rows' workloads run alone on it.
	if runtime.NumCPU() >= 2 {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var all, one unix.CPUSet
		if err := unix.SchedGetaffinity(0, &all); err != nil {
			return 0, 0, err
		}
		one.Set(0)
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			return 0, 0, err
		}
		defer func() { err = errors.Join(err, unix.SchedSetaffinity(0, &all)) }()
	}
	for range calls/10 + 1 {
		if err := request(); err != nil {
			return 0, 0, err
		}
	}
	var per []float64
	for range rounds {
		t0, err := processCPUNs(pid)
		if err != nil {
			return 0, 0, err
		}
		for range calls {
			if err := request(); err != nil {
				return 0, 0, err
			}
		}
		t1, err := processCPUNs(pid)
		if err != nil {
			return 0, 0, err
		}
		per = append(per, float64(t1-t0)/float64(calls))
	}
	return median(per), calls/10 + 1 + calls*rounds, nil
}

const (
	pgBin    = "/usr/lib/postgresql/15/bin"
	postgres = pgBin + "/postgres"
)

// startPostgresRecipe initialises a cluster in dir, starts PostgreSQL 15
// on it pinned to CPU 0 (its backends inherit the CPU), opens one
// connection and runs "SELECT 1" on it, timed by its backend's CPU clock.
func startPostgresRecipe(dir string) (*recipeWorkload, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("no postgres user: %w", err)
	}
	top := filepath.Join(dir, "pg")
	if err := os.MkdirAll(top, 0o755); err != nil {
		return nil, err
	}
	var uid, gid int
	fmt.Sscan(u.Uid, &uid)
	fmt.Sscan(u.Gid, &gid)
	if err := errors.Join(os.Chown(dir, uid, gid), os.Chown(top, uid, gid)); err != nil {
		return nil, err
	}
	asPostgres := func(args ...string) *exec.Cmd {
		cmd := pinnedCommand(append([]string{"setpriv", "--reuid=" + u.Uid, "--regid=" + u.Gid, "--init-groups"}, args...)...)
		cmd.Env = append(os.Environ(), "LC_ALL=C")
		return cmd
	}
	data := filepath.Join(top, "data")
	if out, err := asPostgres(pgBin+"/initdb", "-D", data, "--auth=trust", "--no-sync", "-U", "postgres").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	server := asPostgres(postgres, "-D", data, "-k", top, "-c", "listen_addresses=", "-c", "fsync=off")
	logFile, err := os.Create(filepath.Join(top, "postgres.log"))
	if err != nil {
		return nil, err
	}
	server.Stdout, server.Stderr = logFile, logFile
	if err := server.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	stopServer := func() {
		_ = server.Process.Signal(os.Interrupt) // fast shutdown (the first child is setpriv's exec: postgres itself)
		_ = server.Wait()
		logFile.Close()
	}
	var conn *pgConn
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err = pgConnect(filepath.Join(top, ".s.PGSQL.5432"))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			stopServer()
			log, _ := os.ReadFile(logFile.Name())
			return nil, fmt.Errorf("postgres not ready within 30 s: %w\n%s", err, log)
		}
		time.Sleep(100 * time.Millisecond) // the server says nothing when it is ready but accepting
	}
	w := &recipeWorkload{pid: conn.backendPID, stop: func() { conn.Close(); stopServer() }}
	w.target = config.Target{Recipe: "postgresql", Path: postgres, PID: conn.backendPID}
	w.measure = func(calls, rounds int) (float64, int, error) {
		return timeServer(conn.backendPID, calls, rounds, func() error { return conn.query("SELECT 1") })
	}
	return w, nil
}

// pgConn is a connection speaking PostgreSQL's simple query protocol
// (version 3.0) under trust authentication: enough for "SELECT 1".
type pgConn struct {
	c          net.Conn
	r          *bufio.Reader
	backendPID int
}

func pgConnect(socket string) (*pgConn, error) {
	c, err := net.Dial("unix", socket)
	if err != nil {
		return nil, err
	}
	p := &pgConn{c: c, r: bufio.NewReader(c)}
	body := []byte{0, 3, 0, 0}
	for _, s := range []string{"user", "postgres", "database", "postgres", ""} {
		body = append(append(body, s...), 0)
	}
	msg := binary.BigEndian.AppendUint32(nil, uint32(4+len(body)))
	if _, err := c.Write(append(msg, body...)); err != nil {
		c.Close()
		return nil, err
	}
	if err := p.untilReady(); err != nil {
		c.Close()
		return nil, err
	}
	if p.backendPID == 0 {
		c.Close()
		return nil, errors.New("postgres sent no BackendKeyData")
	}
	return p, nil
}

// untilReady reads messages until ReadyForQuery.
func (p *pgConn) untilReady() error {
	var failure error
	for {
		var head [5]byte
		if _, err := io.ReadFull(p.r, head[:]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint32(head[1:])) - 4
		if n < 0 || n > 1<<20 {
			return fmt.Errorf("postgres message %q of %d bytes", head[0], n)
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(p.r, body); err != nil {
			return err
		}
		switch head[0] {
		case 'R':
			if n < 4 || binary.BigEndian.Uint32(body) != 0 {
				return errors.New("postgres asks for authentication (want trust)")
			}
		case 'K':
			if n >= 4 {
				p.backendPID = int(binary.BigEndian.Uint32(body))
			}
		case 'E':
			failure = fmt.Errorf("postgres: %q", body)
		case 'Z':
			return failure
		}
	}
}

func (p *pgConn) query(sql string) error {
	msg := binary.BigEndian.AppendUint32([]byte{'Q'}, uint32(4+len(sql)+1))
	msg = append(append(msg, sql...), 0)
	if _, err := p.c.Write(msg); err != nil {
		return err
	}
	return p.untilReady()
}

func (p *pgConn) Close() error {
	_, _ = p.c.Write([]byte{'X', 0, 0, 0, 4})
	return p.c.Close()
}

// startGoHTTPRecipe builds testdata/recipegohttp and starts it pinned to
// CPU 0; requests come from this process over keep-alive connections, and
// are timed by the server process's CPU clock.
func startGoHTTPRecipe(dir string) (*recipeWorkload, error) {
	bin := filepath.Join(dir, "recipegohttp")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = testutil.Testdata("recipegohttp")
	build.Env = append(runtimeDefaults(), "GOTOOLCHAIN=local", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building the Go HTTP server: %w\n%s", err, out)
	}
	p, err := startWorkloadCmd(pinnedCommand(bin))
	if err != nil {
		return nil, err
	}
	var port int
	if _, err := fmt.Sscanf(p.readyLine, "ready %d", &port); err != nil {
		p.stop()
		return nil, fmt.Errorf("the Go HTTP server said %q: %w", p.readyLine, err)
	}
	w := &recipeWorkload{proc: p}
	if w.pid, err = execedChild(p.cmd.Process.Pid, bin); err != nil {
		p.stop()
		return nil, err
	}
	// One keep-alive connection, read and written by the timing goroutine
	// itself (on the server's CPU), not by a transport's goroutines.
	conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		p.stop()
		return nil, err
	}
	w.stop = func() { conn.Close(); p.stop() }
	reader := bufio.NewReader(conn)
	get := []byte("GET /hello HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	w.target = config.Target{Recipe: "go-http", Path: bin, PID: w.pid}
	w.measure = func(calls, rounds int) (float64, int, error) {
		return timeServer(w.pid, calls, rounds, func() error {
			if _, err := conn.Write(get); err != nil {
				return err
			}
			resp, err := http.ReadResponse(reader, nil)
			if err != nil {
				return err
			}
			_, err = io.Copy(io.Discard, resp.Body)
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("GET /hello: %s", resp.Status)
			}
			return errors.Join(err, resp.Body.Close())
		})
	}
	return w, nil
}
