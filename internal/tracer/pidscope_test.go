package tracer

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/planner"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
)

// A pid: target's probes are attached in its process only: another
// process running the same file takes none of their traps (no breakpoint
// is written into its code, the engine's programs never run for it) and
// its USDT semaphore stays 0, while every call of the chosen process, from
// any of its threads, counts exactly; its forked child's calls do not.
// Both attach modes: uprobe_multi and session links (Linux 6.11) and
// perf-event uprobes.
func TestPIDTargetTrapsInItsProcessOnly(t *testing.T) {
	testutil.RequireRoot(t)
	const (
		n       = 100_000 // calls in the main thread
		threads = 4
		perThr  = 25_000 // calls in each other thread
		calls   = n + threads*perThr
	)
	for _, mode := range pidModes {
		t.Run(mode.name, func(t *testing.T) {
			mode.set(t)
			prog := testutil.BuildC(t, "pidscope", "-pthread")
			chosen := testutil.StartProgram(t, prog, "ready")
			other := testutil.StartProgram(t, prog, "ready")
			targets := []config.Target{{
				Path: prog, PID: chosen.PID,
				Counters: config.CountersOf("usdt:pidscope:tick", "uprobe:work"),
				Spans:    []config.Span{{Name: "work", Function: "work"}},
			}}
			require.NoError(t, config.Validate(targets))
			pl, err := planner.Resolve(targets)
			require.NoError(t, err)
			unprobed := runCalls(t, other, n, 0)

			tr, err := Open(pl.Plan, Options{RingBufferSize: testRing, PerLocation: mode.perLocation, NoRecords: true, ProgramStats: true})
			require.NoError(t, err)
			defer func() { assert.NoError(t, tr.Close()) }()
			require.True(t, tr.statsOn(), "BPF run-time statistics are on (root)")
			choose(t, tr, pl.Plan, chosen.PID)
			if tr.multi && !multiLinksFilterPID() {
				assertWholeFileFallback(t, tr, pl.Plan, prog, chosen, other, n, "usdt:pidscope:tick", "uprobe:work")
				return
			}

			assert.Equal(t, "sem 1", chosen.Ask("sem", "sem "), "the chosen process's semaphore is raised")
			assert.Equal(t, "sem 0", other.Ask("sem", "sem "), "the other process's semaphore stays 0")
			locations := pl.Plan.Attachments[pl.Plan.Files[0].Attachments.Start:pl.Plan.Files[0].Attachments.End]
			require.NotEmpty(t, locations)
			for _, a := range locations {
				assert.True(t, codeChanged(t, chosen.PID, prog, a), "a breakpoint at %#x in the chosen process", a.FileOffset)
				assert.False(t, codeChanged(t, other.PID, prog, a), "no breakpoint at %#x in the other process", a.FileOffset)
			}

			runsBefore := engineRuns(t, tr)
			probed := runCalls(t, other, n, 0)
			runCalls(t, other, perThr, threads)
			assert.Equal(t, runsBefore, engineRuns(t, tr), "the other process's calls run no engine program")
			runCalls(t, chosen, n, 0)
			runCalls(t, chosen, perThr, threads)
			t.Logf("the other process's work(): %.1f ns a call unprobed, %.1f ns with the chosen process traced",
				float64(unprobed)/n, float64(probed)/n)

			st, err := tr.Stats()
			require.NoError(t, err)
			assert.Equal(t, uint64(calls), st.Probes[probeIndex(t, pl.Plan, "usdt:pidscope:tick")].Hits)
			assert.Equal(t, uint64(calls), st.Probes[probeIndex(t, pl.Plan, "uprobe:work")].Hits)
			work := spanIndex(t, pl.Plan, "work")
			assert.Equal(t, uint64(calls), st.Spans[work].Count, "every call of every thread of the chosen process")
			var hits uint64
			for _, p := range st.Probes {
				hits += p.Hits
			}
			// The tick, work's entry (the counter's and the span's: one
			// probe) and its return.
			assert.Equal(t, uint64(3*calls), hits)
			// Each trap runs one program, which counts one hit: no run
			// is left over for another process.
			assert.Equal(t, runsBefore+hits, engineRuns(t, tr), "engine programs ran for the chosen process's traps only")

			// A child the chosen process forks is another process: its
			// calls do not count. It has its parent's breakpoints in its
			// copy of the code: perf-event uprobes remove them at its
			// first hit, uprobe_multi links (Linux 6.18) leave them, so
			// it takes every trap (logged, not asserted).
			forked := chosen.Ask(fmt.Sprintf("fork %d", n), "forked ")
			t.Logf("a child of the chosen process: %s ns a call", strings.TrimPrefix(forked, "forked "))
			after, err := tr.Stats()
			require.NoError(t, err)
			assert.Equal(t, st.Probes, after.Probes, "the forked child's calls do not count")

			require.NoError(t, tr.Detach())
			assert.Equal(t, "sem 0", chosen.Ask("sem", "sem "), "Detach lowers the chosen process's semaphore")
		})
	}
}

// A file traced both for one process (pid:) and for every process (a
// target without pid:) keeps its whole-file links for the second: the
// other process takes the traps of the unrestricted target's probes, and
// only those.
func TestPIDTargetBesideAnUnrestrictedOne(t *testing.T) {
	testutil.RequireRoot(t)
	const n = 100_000
	for _, mode := range pidModes {
		t.Run(mode.name, func(t *testing.T) {
			mode.set(t)
			prog := testutil.BuildC(t, "pidscope", "-pthread")
			chosen := testutil.StartProgram(t, prog, "ready")
			other := testutil.StartProgram(t, prog, "ready")
			targets := []config.Target{
				{Path: prog, PID: chosen.PID, Counters: config.CountersOf("usdt:pidscope:tick")},
				{Path: prog, Counters: config.CountersOf("uprobe:work")},
			}
			require.NoError(t, config.Validate(targets))
			pl, err := planner.Resolve(targets)
			require.NoError(t, err)
			tr, err := Open(pl.Plan, Options{RingBufferSize: testRing, PerLocation: mode.perLocation, NoRecords: true, ProgramStats: true})
			require.NoError(t, err)
			defer func() { assert.NoError(t, tr.Close()) }()
			require.True(t, tr.statsOn(), "BPF run-time statistics are on (root)")
			choose(t, tr, pl.Plan, chosen.PID)
			if tr.multi && !multiLinksFilterPID() {
				assertWholeFileFallback(t, tr, pl.Plan, prog, chosen, other, n, "usdt:pidscope:tick")
				return
			}
			assert.Equal(t, "sem 1", chosen.Ask("sem", "sem "))
			assert.Equal(t, "sem 0", other.Ask("sem", "sem "), "the pid: target's semaphore is the chosen process's only")

			runsBefore := engineRuns(t, tr)
			runCalls(t, other, n, 0)
			assert.Equal(t, runsBefore+n, engineRuns(t, tr), "the other process runs the unrestricted probe only")
			runCalls(t, chosen, n, 0)
			st, err := tr.Stats()
			require.NoError(t, err)
			assert.Equal(t, uint64(n), st.Probes[probeIndex(t, pl.Plan, "usdt:pidscope:tick")].Hits)
			assert.Equal(t, uint64(2*n), st.Probes[probeIndex(t, pl.Plan, "uprobe:work")].Hits)
			assert.Equal(t, runsBefore+3*n, engineRuns(t, tr))
		})
	}
}

// pidModes are attachModes and, so that the fallback of Linux 6.6 to 6.10
// runs on every kernel with uprobe_multi, uprobe_multi links taken as not
// filtering by process.
var pidModes = func() []pidMode {
	modes := []pidMode{{name: "multi-whole-file", wholeFile: true}}
	for _, m := range attachModes {
		modes = append(modes, pidMode{name: m.name, perLocation: m.perLocation})
	}
	return modes
}()

type pidMode struct {
	name        string
	perLocation bool
	wholeFile   bool
}

// set makes uprobe_multi links not filter by process for the test when
// the mode says so (where the kernel has no uprobe_multi, the tracer's
// perf-event links are scoped and the mode is the usual one).
func (m pidMode) set(t *testing.T) {
	if !m.wholeFile {
		return
	}
	saved := multiLinksFilterPID
	multiLinksFilterPID = func() bool { return false }
	t.Cleanup(func() { multiLinksFilterPID = saved })
}

// assertWholeFileFallback checks what a pid: target does where
// uprobe_multi links cannot be scoped to a process (Linux 6.6 to 6.10,
// see kernelPID): its links are the whole file's, so every process that
// maps the file has the breakpoints and its USDT semaphores raised, and
// the engine, which checks the process at every hit, counts the chosen
// process's calls only at the pid: target's probes, not its children's
// (docs/targeting-and-containers.md).
func assertWholeFileFallback(t *testing.T, tr *Tracer, pl *plan.Plan, prog string, chosen, other *testutil.Program, n int, probes ...string) {
	t.Helper()
	assert.Equal(t, "sem 1", chosen.Ask("sem", "sem "), "the chosen process's semaphore is raised")
	assert.Equal(t, "sem 1", other.Ask("sem", "sem "), "whole-file links raise every process's semaphore")
	for _, a := range pl.Attachments[pl.Files[0].Attachments.Start:pl.Files[0].Attachments.End] {
		assert.True(t, codeChanged(t, other.PID, prog, a), "a whole-file breakpoint at %#x in the other process", a.FileOffset)
	}
	before, err := tr.Stats()
	require.NoError(t, err)
	runsBefore := engineRuns(t, tr)
	runCalls(t, other, n, 0)
	assert.Greater(t, engineRuns(t, tr), runsBefore, "the other process takes the traps")
	after, err := tr.Stats()
	require.NoError(t, err)
	runCalls(t, chosen, n, 0)
	final, err := tr.Stats()
	require.NoError(t, err)
	for _, ref := range probes {
		p := probeIndex(t, pl, ref)
		assert.Equal(t, before.Probes[p].Hits, after.Probes[p].Hits, "%s counts none of the other process's calls", ref)
		assert.Equal(t, before.Probes[p].Hits+uint64(n), final.Probes[p].Hits, "%s counts every call of the chosen process", ref)
	}
	// A child of the chosen process takes the whole file's breakpoints
	// too, and its calls count for none of the pid: target's probes: the
	// engine's fork handler does not hand it its parent's pid: bit.
	chosen.Ask(fmt.Sprintf("fork %d", n), "forked ")
	forked, err := tr.Stats()
	require.NoError(t, err)
	for _, ref := range probes {
		p := probeIndex(t, pl, ref)
		assert.Equal(t, final.Probes[p].Hits, forked.Probes[p].Hits, "%s counts none of the chosen process's child's calls", ref)
	}
}

// choose tells the engine that process pid belongs to the plan's targets
// of that pid, as the receiver's chooser does at Start.
func choose(t *testing.T, tr *Tracer, pl *plan.Plan, pid int) {
	t.Helper()
	var mask uint64
	for _, tg := range pl.Targets {
		if tg.PID == pid {
			mask |= 1 << tg.ChosenBit
		}
	}
	start, err := procfs.FS{}.StartTime(pid)
	require.NoError(t, err)
	require.NoError(t, tr.SetProcess(uint32(pid), start, mask, false))
}

// runCalls makes p call work n times in each of threads new threads (0:
// in its main thread) and returns how long that took.
func runCalls(t *testing.T, p *testutil.Program, n, threads int) time.Duration {
	t.Helper()
	start := time.Now()
	p.Ask(fmt.Sprintf("go %d %d", n, threads), "done")
	return time.Since(start)
}

// engineRuns returns how many times the programs uprobes run (every
// variant, and the count programs of single probes) have run, from BPF
// run-time statistics: one run per trap that reached the engine.
func engineRuns(t *testing.T, tr *Tracer) uint64 {
	t.Helper()
	var progs []*ebpf.Program
	for _, name := range []string{bpfobj.ProgramSiteHit, bpfobj.ProgramCountHit, bpfobj.ProgramCountHitProc,
		bpfobj.ProgramSiteHitMulti, bpfobj.ProgramCountHitMulti, bpfobj.ProgramCountHitProcMulti, bpfobj.ProgramSiteHitSession} {
		if p := tr.coll.Programs[name]; p != nil {
			progs = append(progs, p)
		}
	}
	// The span programs are loaded apart from the collection.
	for _, p := range []*ebpf.Program{tr.siteProg.Load(), tr.sessionProg.Load(), tr.plainProg.Load()} {
		if p != nil && !slices.Contains(progs, p) {
			progs = append(progs, p)
		}
	}
	tr.mu.Lock()
	for _, p := range tr.countProgs {
		if p != nil {
			progs = append(progs, p)
		}
	}
	tr.mu.Unlock()
	var runs uint64
	for _, p := range progs {
		st, err := p.Stats()
		require.NoError(t, err)
		runs += st.RunCount
	}
	return runs
}

// codeChanged says whether the code of process pid at attachment a's
// location differs from the file's (path): the kernel wrote a breakpoint
// (or, on x86-64 from Linux 6.17, a call into its trampoline) there, in a
// private copy of the page that only this process sees.
func codeChanged(t *testing.T, pid int, path string, a plan.Attachment) bool {
	t.Helper()
	want := make([]byte, 1)
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.ReadAt(want, int64(a.FileOffset))
	require.NoError(t, err)

	addr := mappedAt(t, pid, path, a.FileOffset)
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	require.NoError(t, err)
	defer mem.Close()
	got := make([]byte, 1)
	_, err = mem.ReadAt(got, int64(addr))
	require.NoError(t, err)
	return got[0] != want[0]
}

// mappedAt returns the virtual address of file offset off of the file at
// path in process pid's executable mapping of it.
func mappedAt(t *testing.T, pid int, path string, off uint64) uint64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[5] != path || !strings.Contains(fields[1], "x") {
			continue
		}
		var start, end, fileOff uint64
		if _, err := fmt.Sscanf(fields[0], "%x-%x", &start, &end); err != nil {
			continue
		}
		if _, err := fmt.Sscanf(fields[2], "%x", &fileOff); err != nil {
			continue
		}
		if off >= fileOff && off < fileOff+(end-start) {
			return start + off - fileOff
		}
	}
	require.NoError(t, sc.Err())
	t.Fatalf("file offset %#x of %s is not mapped executable in process %d", off, path, pid)
	return 0
}

// Attachments of targets of different processes never share a link: the
// groups of one uprobe_multi link have one file, direction, program and
// kernel pid, in order of first appearance.
func TestGroupAttachmentsByPID(t *testing.T) {
	pids := map[int]uint32{0: 0, 1: 4242, 2: 4242, 3: 77}
	pidOf := func(a plan.Attachment) uint32 { return pids[a.Probe] }
	site := func(probe int, ret bool) plan.Attachment {
		return plan.Attachment{Probe: probe, Return: ret, Program: plan.ProgramSite, Cookie: uint64(probe)}
	}
	all := []plan.Attachment{site(0, false), site(1, false), site(3, false), site(2, false), site(1, true), site(0, false)}
	groups := groupAttachments(all, false, func(plan.Attachment) bool { return false }, func(plan.Attachment) bool { return false }, pidOf)
	var got [][]int
	for _, g := range groups {
		var probes []int
		for _, a := range g {
			probes = append(probes, a.Probe)
			assert.Equal(t, pidOf(g[0]), pidOf(a))
			assert.Equal(t, g[0].Return, a.Return)
		}
		got = append(got, probes)
	}
	assert.Equal(t, [][]int{{0, 0}, {1, 2}, {3}, {1}}, got)
}
