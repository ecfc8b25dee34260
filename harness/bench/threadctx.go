//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
)

// ThreadContext is what reading a thread's published context (OTEP 4947)
// costs at a span's entry: the same span probe on probed() of
// workload-ctx (built with -DTHREAD_CTX), called with a context published,
// with none, in a build that does not export the variable (a program
// without an SDK), and with thread_context disabled, in the same run. Wall is
// the time per call as the workload measures it (the trap included, so
// noisy); BPF the engine's own run time per call (entry and exit), from
// the kernel's BPF run-time statistics, which is where the difference is.
type ThreadContext struct {
	Calls int `json:"calls"`
	// Medians over cycles, ns per call.
	WallPublished  float64 `json:"wall_published_ns"`
	WallNone       float64 `json:"wall_none_ns"`
	WallNoVariable float64 `json:"wall_no_variable_ns"`
	WallDisabled   float64 `json:"wall_disabled_ns"`
	BPFPublished   float64 `json:"bpf_published_ns"`
	BPFNone        float64 `json:"bpf_none_ns"`
	BPFNoVariable  float64 `json:"bpf_no_variable_ns"`
	BPFDisabled    float64 `json:"bpf_disabled_ns"`
	// Added is the median over cycles of BPF published − none in the same
	// cycle (paired: the VM's drift between cycles cancels): the cost of
	// taking a context. AddedWall is the same of the wall times.
	Added     float64 `json:"added_ns"`
	AddedWall float64 `json:"added_wall_ns"`
	Cycles    int     `json:"cycles"`
}

// siteHitStats sums the run time and runs of the engine's site_hit
// programs among ids.
func siteHitStats(ids map[ebpf.ProgramID]bool) (time.Duration, uint64, error) {
	var rt time.Duration
	var n uint64
	for id := range ids {
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // unloaded
		}
		st, err := p.Stats()
		p.Close()
		if err != nil {
			return 0, 0, err
		}
		rt += st.Runtime
		n += st.RunCount
	}
	return rt, n, nil
}

// programIDs returns the ids of the BPF programs named site_hit* that
// this process holds (its descriptors' /proc/self/fdinfo), so that an
// engine another process loads meanwhile (a test, another benchmark) is
// never taken for the receiver's.
func programIDs() (map[ebpf.ProgramID]bool, error) {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	out := map[ebpf.ProgramID]bool{}
	for _, fd := range fds {
		if target, err := os.Readlink("/proc/self/fd/" + fd.Name()); err != nil || target != "anon_inode:bpf-prog" {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + fd.Name())
		if err != nil {
			continue
		}
		var id ebpf.ProgramID
		for _, line := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "prog_id:"); ok {
				fmt.Sscanf(strings.TrimSpace(v), "%d", &id)
			}
		}
		if id == 0 || out[id] {
			continue
		}
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue
		}
		pi, err := p.Info()
		p.Close()
		if err == nil && strings.HasPrefix(pi.Name, "site_hit") {
			out[id] = true
		}
	}
	return out, nil
}

// engineMaps are the thread-context maps of the engine a receiver loaded.
type engineMaps struct {
	procs, counts *ebpf.Map
}

// openEngineMaps opens the maps thread_ctx_procs and thread_ctx_counts of
// the programs ids (one engine's).
func openEngineMaps(ids map[ebpf.ProgramID]bool) (*engineMaps, error) {
	m := &engineMaps{}
	for id := range ids {
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			return nil, err
		}
		info, err := p.Info()
		p.Close()
		if err != nil {
			return nil, err
		}
		mapIDs, _ := info.MapIDs()
		for _, mid := range mapIDs {
			mp, err := ebpf.NewMapFromID(mid)
			if err != nil {
				continue
			}
			mi, err := mp.Info()
			switch {
			case err == nil && kernelName(bpfobj.MapThreadCtxProcs) == mi.Name && m.procs == nil:
				m.procs = mp
			case err == nil && kernelName(bpfobj.MapThreadCtxCounts) == mi.Name && m.counts == nil:
				m.counts = mp
			default:
				mp.Close()
			}
		}
		if m.procs != nil && m.counts != nil {
			return m, nil
		}
	}
	m.close()
	return nil, errors.New("no thread_ctx_procs and thread_ctx_counts among the engine's maps")
}

// kernelName returns a map's name as the kernel keeps it: at most 15
// bytes (BPF_OBJ_NAME_LEN).
func kernelName(name string) string { return name[:min(len(name), 15)] }

func (m *engineMaps) close() {
	if m.procs != nil {
		m.procs.Close()
	}
	if m.counts != nil {
		m.counts.Close()
	}
}

// outcomes returns the engine's thread-context outcomes summed over CPUs.
func (m *engineMaps) outcomes() ([bpfobj.ThreadCtxOutcomes]uint64, error) {
	var out [bpfobj.ThreadCtxOutcomes]uint64
	var perCPU []bpfobj.ThreadCtxStats
	if err := m.counts.Lookup(uint32(0), &perCPU); err != nil {
		return out, err
	}
	for _, st := range perCPU {
		for i := range out {
			out[i] += st.Outcomes[i]
		}
	}
	return out, nil
}

// access returns what the engine knows of how process pid reaches its
// otel_thread_ctx_v1 (bpfobj.ThreadCtxAsked when it has no entry).
func (m *engineMaps) access(pid int) uint8 {
	var p bpfobj.ThreadCtxProc
	if err := m.procs.Lookup(uint32(pid), &p); err != nil {
		return bpfobj.ThreadCtxAsked
	}
	return p.Access
}

// ctxrun runs n calls of probed() with or without a published context and
// returns the workload's wall ns per call and the engine's BPF ns per call.
func (w *workload) ctxrun(n int, with bool, ids map[ebpf.ProgramID]bool) (wall, bpf float64, err error) {
	rt0, c0, err := siteHitStats(ids)
	if err != nil {
		return 0, 0, err
	}
	fmt.Fprintf(w.in, "ctxrun %d %d\n", n, map[bool]int{true: 1}[with])
	line, err := w.expect("ns ")
	if err != nil {
		return 0, 0, err
	}
	if _, err := fmt.Sscanf(line, "ns %f", &wall); err != nil {
		return 0, 0, err
	}
	rt1, c1, err := siteHitStats(ids)
	if err != nil {
		return 0, 0, err
	}
	// Entry and return programs run 2n times; under load the kernel has
	// been seen to miss some return probes (35,415 runs for 20,000 calls
	// once), which this check tolerates: it is only there to prove that
	// the programs measured are the receiver's.
	if c1-c0 < uint64(n) {
		return 0, 0, fmt.Errorf("site_hit ran %d times for %d calls: not the receiver's probe", c1-c0, n)
	}
	return wall, float64(rt1-rt0) / float64(n), nil
}

// session is one receiver run of the thread-context measurement.
type session struct {
	path    string
	enabled bool
	// access is what the engine must know of the workload before the
	// measurement (bpfobj.ThreadCtxStatic, ThreadCtxNone; unused when
	// disabled).
	access uint8
	with   []bool // ctxrun's WITH of each cycle's runs
	// wall and bpf are the times of each run, by WITH.
	wall, bpf map[bool][]float64
}

// want returns the engine's outcome counts a run of n calls must add:
// each call under a context read, or each without one found, in a process
// whose variable the engine reaches; nothing otherwise.
func (ss *session) want(n int, with bool) (out [bpfobj.ThreadCtxOutcomes]uint64) {
	if !ss.enabled || ss.access == bpfobj.ThreadCtxNone {
		return out
	}
	if with {
		out[bpfobj.ThreadCtxRead] = uint64(n)
	} else {
		out[bpfobj.ThreadCtxNoContext] = uint64(n)
	}
	return out
}

// run starts a receiver with the span probe on probed() of the workload
// at s.path, makes calls until the receiver answered the engine's request
// about the process, then makes cycles of runs, each checked against the
// engine's outcome counts (so that a run measures what it says).
func (ss *session) run(w *workload, n, cycles int) (err error) {
	before, err := programIDs()
	if err != nil {
		return err
	}
	on := ss.enabled
	r, _, err := startReceiver(config.Target{Path: ss.path, ThreadContext: &config.ThreadContext{Enabled: &on},
		Spans: []config.Span{{Name: "probed", Function: "probed",
			Attributes: map[string]string{"a": "arg0"}, ExitAttributes: map[string]string{"ret": "retval"}}}}, 8<<20)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, r.Shutdown(context.Background())) }()
	after, err := programIDs()
	if err != nil {
		return err
	}
	ids := map[ebpf.ProgramID]bool{}
	for id := range after {
		if !before[id] {
			ids[id] = true
		}
	}
	maps, err := openEngineMaps(ids)
	if err != nil {
		return err
	}
	defer maps.close()
	// The first span asks the receiver about the process; the engine asks
	// again at most every 100 ms until it has the answer.
	pid := w.cmd.Process.Pid
	for try := 0; ss.enabled && maps.access(pid) != ss.access; try++ {
		if try == 100 {
			return fmt.Errorf("the engine does not know %s (access %d, want %d)", filepath.Base(ss.path), maps.access(pid), ss.access)
		}
		if _, _, err := w.ctxrun(100, true, ids); err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
	ss.wall, ss.bpf = map[bool][]float64{}, map[bool][]float64{}
	for c := 0; c < cycles; c++ {
		for _, with := range ss.with {
			o0, err := maps.outcomes()
			if err != nil {
				return err
			}
			wall, bpf, err := w.ctxrun(n, with, ids)
			if err != nil {
				return err
			}
			o1, err := maps.outcomes()
			if err != nil {
				return err
			}
			var got [bpfobj.ThreadCtxOutcomes]uint64
			for i := range got {
				got[i] = o1[i] - o0[i]
			}
			if want := ss.want(n, with); got != want {
				return fmt.Errorf("%s, published=%v: thread-context outcomes %v, want %v", filepath.Base(ss.path), with, got, want)
			}
			ss.wall[with] = append(ss.wall[with], wall)
			ss.bpf[with] = append(ss.bpf[with], bpf)
			fmt.Fprintf(os.Stderr, "cycle %d: %s thread_context enabled=%v published=%v: %.1f ns per call, BPF %.1f ns\n",
				c+1, filepath.Base(ss.path), ss.enabled, with, wall, bpf)
		}
	}
	return nil
}

// threadContextCost measures ThreadContext: the workload built with the
// variable exported (a context published, or none), the same without it
// in .dynsym (a program without an SDK), and thread_context disabled.
func threadContextCost(s settings, res *Result, dir string) error {
	exported, hidden := filepath.Join(dir, "workload-ctx"), filepath.Join(dir, "workload-nosdk")
	if err := gcc("-O2", "-DTHREAD_CTX", "-o", exported, testutil.Testdata("bench", "workload.c"),
		"-Wl,--export-dynamic-symbol=otel_thread_ctx_v1"); err != nil {
		return err
	}
	if err := gcc("-O2", "-DTHREAD_CTX", "-o", hidden, testutil.Testdata("bench", "workload.c")); err != nil {
		return err
	}
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return fmt.Errorf("turning BPF run-time statistics on: %w", err)
	}
	defer stats.Close()
	n, cycles := s.calls, 3*s.cycles
	sessions := []*session{
		{path: exported, enabled: true, access: bpfobj.ThreadCtxStatic, with: []bool{true, false}},
		{path: hidden, enabled: true, access: bpfobj.ThreadCtxNone, with: []bool{true}},
		{path: exported, enabled: false, with: []bool{true}},
	}
	for _, ss := range sessions {
		w, err := startWorkload(ss.path)
		if err != nil {
			return err
		}
		err = ss.run(w, n, cycles)
		w.stop()
		if err != nil {
			return err
		}
	}
	pub := sessions[0]
	var added, addedWall []float64
	for i := range pub.bpf[true] {
		added = append(added, pub.bpf[true][i]-pub.bpf[false][i])
		addedWall = append(addedWall, pub.wall[true][i]-pub.wall[false][i])
	}
	res.ThreadContext = &ThreadContext{
		Calls: n, Cycles: cycles,
		WallPublished: median(pub.wall[true]), WallNone: median(pub.wall[false]),
		WallNoVariable: median(sessions[1].wall[true]), WallDisabled: median(sessions[2].wall[true]),
		BPFPublished: median(pub.bpf[true]), BPFNone: median(pub.bpf[false]),
		BPFNoVariable: median(sessions[1].bpf[true]), BPFDisabled: median(sessions[2].bpf[true]),
		Added: median(added), AddedWall: median(addedWall),
	}
	return nil
}
