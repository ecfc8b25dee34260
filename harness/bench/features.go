//go:build linux

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
)

// featureSetups returns the rows of the feature cost matrix (issue 21,
// item 4), each against the floor of its own site class: the features on
// probed() itself, and those that need their own functions (a line, Go
// code, a call tree) or their own process (one in a container). The
// processes it starts are stopped by the returned setups' workloads'
// owners (res notes say which rows could not be had, and why).
func featureSetups(s settings, res *Result, plain *fnSet) ([]setup, error) {
	path := plain.path
	recv := func(t func(fn string) config.Target) attacher { return receiverAttacher(plain, t) }
	spanWith := func(attrs map[string]string, mod func(*config.Span)) func(fn string) config.Target {
		return func(fn string) config.Target {
			sp := config.Span{Name: fn, Function: fn, Attributes: attrs, ExitAttributes: map[string]string{"ret": "retval"}}
			if mod != nil {
				mod(&sp)
			}
			return config.Target{Path: path, Spans: []config.Span{sp}}
		}
	}
	ints := map[string]string{"a": "arg0"}
	ratio := 0.01
	setups := []setup{
		{name: "receiver: span with a name two pointers away (+0(+0(+8(arg0))):string)", set: plain, args: "names",
			floors: []string{floorSpan, floorPair}, attach: recv(spanWith(map[string]string{"name": "+0(+0(+8(arg0))):string"}, nil)),
			feature: "span with names", dominates: "the delivered span; then the three reads of user memory (two pointers and the string, bpf_probe_read_user each)"},
		{name: "receiver: span, integer filter rejecting 99% at entry", set: plain, args: "ints",
			floors: []string{floorCount, floorSpan}, attach: recv(spanWith(ints, func(sp *config.Span) {
				sp.Filter = []string{fmt.Sprintf("arg0 < %d", s.calls/100)} // i < calls/100: 1 call in 100 of each round passes
			})),
			feature: "integer filter rejecting 99%", dominates: "the entry trap; where the kernel has session uprobes (Linux 6.12) a rejected call skips the return trap",
			goal: "span with a 99%-rejecting entry filter vs bare counting uprobe", goalRatio: 1.10},
		{name: "receiver: span, string filter rejecting 99% at entry", set: plain, args: "yes1",
			floors: []string{floorCount, floorSpan}, attach: recv(spanWith(map[string]string{"a": "arg0:string"}, func(sp *config.Span) {
				sp.Filter = []string{`arg0:string == "yes"`}
			})),
			feature: "string filter rejecting 99%", dominates: "the entry trap, then reading the string (one bpf_probe_read_user_str); a rejected call skips the return trap where the kernel has session uprobes",
			goal: "span with a 99%-rejecting string filter vs bare counting uprobe", goalRatio: 1.10},
		{name: "receiver: span, sample_ratio 0.01", set: plain, args: "ints",
			floors: []string{floorCount, floorSpan}, attach: recv(spanWith(ints, func(sp *config.Span) { sp.SampleRatio = &ratio })),
			feature: "sample_ratio 0.01", dominates: "the entry trap, then marking the call left out so that spans nested in it follow: its task-local storage, and for a leaf function (probed() makes no call) its code's addresses; a call left out skips the return trap where the kernel has session uprobes (Linux 6.12, x86-64)",
			goal: "span with sample_ratio 0.01 vs bare counting uprobe", goalRatio: 1.10},
	}
	add := func(make func() ([]setup, error), what string) {
		more, err := make()
		if err != nil {
			res.Notes = append(res.Notes, fmt.Sprintf("The %s row is missing: %v", what, err))
			fmt.Fprintf(os.Stderr, "bench: the %s row is missing: %v\n", what, err)
			return
		}
		setups = append(setups, more...)
	}
	add(func() ([]setup, error) { return callingSetups(plain, ratio) }, "sample_ratio on a function that calls another")
	add(func() ([]setup, error) { return lineSetups(plain) }, "line probe")
	add(func() ([]setup, error) { return treeSetups(plain) }, "call-tree pattern")
	add(func() ([]setup, error) { return goSetups(s) }, "Go function span")
	add(func() ([]setup, error) { return containerSetups(plain) }, "container")
	return setups, nil
}

// callingSetups is the sample_ratio row of a function that is not a leaf
// (calling_probed() calls callee()): a call left out is marked by the
// return address it left on the stack, one read of user memory, against
// the bare counter on calling_twin().
func callingSetups(plain *fnSet, ratio float64) ([]setup, error) {
	set := &fnSet{name: "calling", w: plain.w, path: plain.path, floorPath: plain.path, set: "calling",
		fns: [3]string{"calling_probed", "calling_twin", "calling_twin2"}, perCall: 1, callsDiv: 1}
	if err := set.entryFloors(); err != nil {
		return nil, err
	}
	return []setup{{name: "receiver: span, sample_ratio 0.01, a function that calls another", set: set, args: "ints",
		floors: []string{floorCount, floorSpan},
		attach: receiverAttacher(set, func(fn string) config.Target {
			return config.Target{Path: plain.path, Spans: []config.Span{{Name: fn, Function: fn, SampleRatio: &ratio,
				Attributes: map[string]string{"a": "arg0"}, ExitAttributes: map[string]string{"ret": "retval"}}}}
		}),
		feature: "sample_ratio 0.01, not a leaf", dominates: "the entry trap, then marking the call left out: its task-local storage and one read of the return address at the stack pointer (bpf_probe_read_user, ~65 ns here), so that spans nested in it follow; a call left out skips the return trap where the kernel has session uprobes (Linux 6.12, x86-64)"}}, nil
}

// lineSetups is the line probe row: a counter on a marked line of
// line_probed() in workload.c (a nop, emulated), against the bare counter
// on the same line of line_twin().
func lineSetups(plain *fnSet) ([]setup, error) {
	src, err := os.ReadFile(testutil.Testdata("bench", "workload.c"))
	if err != nil {
		return nil, err
	}
	set := &fnSet{name: "line", w: plain.w, path: plain.path, floorPath: plain.path, set: "line", perCall: 1, callsDiv: 1}
	var offsets [3][]uint64
	for role, fn := range []string{"line_probed", "line_twin", "line_twin2"} {
		line := 0
		for i, l := range strings.Split(string(src), "\n") {
			if strings.Contains(l, "/* line: "+fn+" */") {
				line = i + 1
			}
		}
		if line == 0 {
			return nil, fmt.Errorf("no line marked %q in workload.c", fn)
		}
		set.fns[role] = fmt.Sprintf("line:workload.c:%d", line)
		if offsets[role], err = plannedOffsets(config.Target{Path: plain.path, Counters: config.CountersOf(set.fns[role])}); err != nil {
			return nil, err
		}
	}
	set.floors = standardFloors(plain.path, offsets, offsets)
	return []setup{{name: "receiver: count-only line probe (line:workload.c:N)", set: set, args: "ints", floors: []string{floorCount},
		attach: receiverAttacher(set, func(ref string) config.Target {
			return config.Target{Path: plain.path, Counters: config.CountersOf(ref)}
		}),
		feature: "line probe", dominates: "the trap of the line's instruction (here a nop, emulated); the program is the count-only one"}}, nil
}

// treeSetups is the call-tree row: a function pattern matching the 100
// functions of a call tree (pt_*), each its own span definition, nested
// three deep, against the delivered-span floor on the 100 functions of an
// identical tree (tt_*).
func treeSetups(plain *fnSet) ([]setup, error) {
	set := &fnSet{name: "tree", w: plain.w, path: plain.path, floorPath: plain.path, set: "tree", fns: [3]string{"pt_*", "tt_*", "tt2_*"},
		perCall: treeFunctions, callsDiv: treeFunctions}
	var offsets [3][]uint64
	for role, prefix := range []string{"pt", "tt", "tt2"} {
		var refs []string
		for i := range treeFunctions {
			refs = append(refs, fmt.Sprintf("uprobe:%s_%d", prefix, i))
		}
		off, err := plannedOffsets(config.Target{Path: plain.path, Counters: config.CountersOf(refs...)})
		if err != nil {
			return nil, err
		}
		offsets[role] = off
	}
	set.floors = standardFloors(plain.path, offsets, offsets)
	return []setup{{name: "receiver: call-tree pattern (function: \"pt_*\", 100 functions, 3 deep), per span", set: set, args: "ints",
		floors: []string{floorSpan, floorPair},
		attach: receiverAttacher(set, func(pattern string) config.Target {
			return config.Target{Path: plain.path, Spans: []config.Span{{Function: pattern, Attributes: map[string]string{"a": "arg0"}}}}
		}),
		feature: "call-tree pattern over 100 functions", dominates: "the delivered span per function; then finding each span's parent (the frame below) and a span definition per function"}}, nil
}

// goWorkloadSource is the Go workload: probed, twin and twin2 are
// identical functions that call a leaf (so that each has a frame and a
// stack check, as most Go functions do), timed as workload.c's measure3
// does, by the thread's CPU time.
const goWorkloadSource = `package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"sort"
	"syscall"
	"unsafe"
)

//go:noinline
func leaf(a, b int) int { return a ^ b }

//go:noinline
func probed(a, b int) int { return leaf(a, b) + 1 }

//go:noinline
func twin(a, b int) int { return leaf(a, b) + 1 }

//go:noinline
func twin2(a, b int) int { return leaf(a, b) + 1 }

var sink int

func threadNs() int64 {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 3 /* CLOCK_THREAD_CPUTIME_ID */, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Nano()
}

func median(v []float64) float64 {
	sort.Float64s(v)
	return v[len(v)/2]
}

func main() {
	runtime.LockOSThread()
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var args string
		var n, rounds int
		if _, err := fmt.Sscanf(sc.Text(), "measure3 %s %d %d", &args, &n, &rounds); err != nil {
			if sc.Text() == "exit" {
				return
			}
			continue
		}
		var p, t, t2 []float64
		for r := 0; r < rounds; r++ {
			t0 := threadNs()
			for i := 0; i < n; i++ {
				sink = probed(i, r)
			}
			t1 := threadNs()
			for i := 0; i < n; i++ {
				sink = twin(i, r)
			}
			t2_ := threadNs()
			for i := 0; i < n; i++ {
				sink = twin2(i, r)
			}
			t3 := threadNs()
			p = append(p, float64(t1-t0)/float64(n))
			t = append(t, float64(t2_-t1)/float64(n))
			t2 = append(t2, float64(t3-t2_)/float64(n))
		}
		fmt.Printf("ns %.1f %.1f %.1f\n", median(p), median(t), median(t2))
	}
}
`

// goSetups is the Go function span row: a span on a Go function (entry
// after its stack check, exit at every RET, paired by goroutine), against
// bare counting uprobes at the same sites of an identical function.
func goSetups(s settings) ([]setup, error) {
	dir, err := os.MkdirTemp("", "uprobe-bench-go-")
	if err != nil {
		return nil, err
	}
	files := map[string]string{"main.go": goWorkloadSource, "go.mod": "module gowork\n\ngo 1.21\n"}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return nil, err
		}
	}
	bin := filepath.Join(dir, "gowork")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(runtimeDefaults(), "GOTOOLCHAIN=local", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building the Go workload: %w\n%s", err, out)
	}
	cpu := -1
	if runtime.NumCPU() >= 2 {
		cpu = 0
	}
	w, err := startWorkloadOn(bin, cpu)
	if err != nil {
		return nil, err
	}
	goWorkloads = append(goWorkloads, w)
	set := &fnSet{name: "go", w: w, path: bin, floorPath: bin, fns: [3]string{"main.probed", "main.twin", "main.twin2"}, perCall: 1,
		// Go returns are single-stepped RET sites: ~10 µs a call.
		callsDiv: 20}
	span := func(fn string) config.Target {
		return config.Target{Path: bin, Spans: []config.Span{{Name: fn, Function: fn, Attributes: map[string]string{"a": "$a"}}}}
	}
	var offsets [3][]uint64
	for role, fn := range set.fns {
		if offsets[role], err = plannedOffsets(span(fn)); err != nil {
			return nil, err
		}
	}
	set.floors = standardFloors(bin, offsets, offsets)
	return []setup{{name: "receiver: Go function span (entry after the stack check, exit at each RET), 1 attribute", set: set, args: "ints",
		floors: []string{floorCount}, attach: receiverAttacher(set, span),
		feature: "Go function span (entry + RET sites)", dominates: "the single-stepped sites (the RET, where a Go return is probed); then pairing by goroutine: an outermost span makes its goroutine's state in a hash (a copy of 27 KB) and deletes it when it closes (BPF: ~2 µs a call)"}}, nil
}

// goWorkloads and containerWorkloads are the extra processes the feature
// rows started; stopFeatureWorkloads stops them.
var goWorkloads, containerWorkloads []*workload

// stopFeatureWorkloads stops the processes featureSetups started.
func stopFeatureWorkloads() {
	for _, w := range append(goWorkloads, containerWorkloads...) {
		w.stop()
	}
}

// containerSetups is the container row: the workload run from a file that
// exists only in a private mount namespace (a tmpfs mounted over an empty
// directory), as a container's files do: the receiver finds it through the
// process's root and counts its hits per process (count_hit_proc), for
// container.id. The floors attach to the same file through
// /proc/PID/root.
func containerSetups(plain *fnSet) ([]setup, error) {
	if _, err := exec.LookPath("unshare"); err != nil {
		return nil, errors.New("unshare not found")
	}
	mnt, err := os.MkdirTemp("", "uprobe-bench-mnt-")
	if err != nil {
		return nil, err
	}
	app := filepath.Join(mnt, "workload")
	args := []string{"unshare", "-m", "--propagation", "private", "sh", "-c",
		fmt.Sprintf("mount -t tmpfs none %s && cp %s %s && exec %s", mnt, plain.path, app, app)}
	if runtime.NumCPU() >= 2 {
		args = append([]string{"taskset", "-c", "0"}, args...)
	}
	w, err := startWorkloadCmd(exec.Command(args[0], args[1:]...))
	if err != nil {
		return nil, err
	}
	containerWorkloads = append(containerWorkloads, w)
	pid, err := execedChild(w.cmd.Process.Pid, app)
	if err != nil {
		return nil, err
	}
	inRoot := fmt.Sprintf("/proc/%d/root%s", pid, app)
	set := &fnSet{name: "container", w: w, path: app, floorPath: inRoot, fns: plain.fns, perCall: 1, callsDiv: 1}
	// The file is a copy of the plain set's: the same offsets.
	var offsets [3][]uint64
	for role, fn := range set.fns {
		if offsets[role], err = plannedOffsets(config.Target{Path: plain.path, Counters: config.CountersOf("uprobe:" + fn)}); err != nil {
			return nil, err
		}
	}
	set.floors = standardFloors(inRoot, offsets, offsets)
	attach := func(role int) (func() error, error) {
		t := config.Target{Path: app, Optional: true, Counters: config.CountersOf("uprobe:" + set.fns[role])}
		r, c, err := startReceiverEvery(t, 1<<20, 100*time.Millisecond)
		if err != nil {
			return nil, err
		}
		stop := func() error { return r.Shutdown(context.Background()) }
		// The file is found through the process's root, maybe after
		// Start: wait until its hits count.
		deadline := time.Now().Add(30 * time.Second)
		for c.sum("uprobe.probe.hits", "uprobe:"+set.fns[role]) == 0 {
			if time.Now().After(deadline) {
				return nil, errors.Join(errors.New("the receiver did not attach to the file in the private mount namespace within 30 s"), stop())
			}
			if _, _, _, err := w.measure3("ints", 100, 1, ""); err != nil {
				return nil, errors.Join(err, stop())
			}
			time.Sleep(100 * time.Millisecond)
		}
		return stop, nil
	}
	return []setup{{name: "receiver: count-only probe in a container (file found through the process's root, hits per process)", set: set, args: "ints",
		floors: []string{floorCount}, attach: attach,
		feature: "probe in a container (container.id)", dominates: "the trap; then a per-process hash (pid and start time) for container.id, and the task's group leader read"}}, nil
}

// execedChild returns the pid of the process that runs path among pid and
// its descendants (a wrapper such as unshare or sh execs or forks it).
func execedChild(pid int, path string) (int, error) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if found := findExec(pid, path, 4); found > 0 {
			return found, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, fmt.Errorf("no process runs %s under pid %d", path, pid)
}

func findExec(pid int, path string, depth int) int {
	if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); exe == path {
		return pid
	}
	if depth == 0 {
		return 0
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	sc.Split(bufio.ScanWords)
	for sc.Scan() {
		var child int
		if _, err := fmt.Sscan(sc.Text(), &child); err == nil {
			if found := findExec(child, path, depth-1); found > 0 {
				return found
			}
		}
	}
	return 0
}
