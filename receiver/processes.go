//go:build linux && (amd64 || arm64)

package receiver

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
	"github.com/otel-uprobe/uprobereceiver/internal/tracer"
)

// imageKey names one program image of one process.
type imageKey struct {
	pid   uint32
	image event.Image
}

// engineProcesses is what the chooser needs of the tracer.
type engineProcesses interface {
	SetProcess(pid uint32, startNs, mask uint64, decided bool) error
	ProcessMask(pid uint32) (mask, startNs uint64, ok bool)
	TakePending(pids map[uint32]bool) (map[uint32][]tracer.PendingCount, error)
}

// maxDecisions bounds the process images the chooser remembers; they are
// forgotten when the engine reports their exit.
const maxDecisions = 1 << 16

// chooser decides which processes the targets with pid: or process: trace.
// The engine filters every hit by a per-process mask; a process that execs
// is pending until the chooser reads its exec record (ordered before its
// spans in the ring), matches the selectors and sets its mask. What a
// pending process did is counted apart: added to the metrics when it is
// chosen, dropped otherwise. Only the drain goroutine calls its methods but
// folded, which collect reads.
type chooser struct {
	plan     *plan.Plan
	engine   engineProcesses
	fs       procfs.FS
	matchers []*procfs.Matcher // by target index; nil when no selector
	pidBits  map[uint32]uint64 // pid: targets' bits, by pid
	selBits  uint64            // bits that selectors decide

	decisions map[imageKey]uint64        // mask of each decided process image
	children  map[uint32][]event.Process // forks of pending processes, by parent
	// exes holds the executable of each process's last image the chooser
	// saw, for a process that execs itself through /proc/self/exe and is
	// gone before its exec record is read.
	exes map[uint32]string

	// toFold holds the processes decided or exited since the last
	// foldPending, with the mask their pending counters are folded by.
	toFold map[uint32]uint64
	// again holds the processes decided before the last foldPending,
	// folded once more at the next: a span that closes as its process is
	// decided may add to its pending counters just after they were taken.
	again  map[uint32]uint64
	exited map[uint32]bool // processes of toFold that exited

	mu sync.Mutex
	// folded are the pending counts of chosen processes, by probe and
	// span, made on the first fold: a receiver whose targets choose no
	// processes never folds.
	folded event.Stats

	// Undecided counts processes whose records were lost or whose mask
	// could not be set: their pending hits are dropped.
	undecided uint64
}

func newChooser(plan *plan.Plan, engine engineProcesses, fs procfs.FS) (*chooser, error) {
	c := &chooser{
		plan: plan, engine: engine, fs: fs,
		matchers:  make([]*procfs.Matcher, len(plan.Targets)),
		pidBits:   map[uint32]uint64{},
		decisions: map[imageKey]uint64{},
		children:  map[uint32][]event.Process{},
		exes:      map[uint32]string{},
		toFold:    map[uint32]uint64{},
		again:     map[uint32]uint64{},
		exited:    map[uint32]bool{},
	}
	for i, t := range plan.Targets {
		switch {
		case t.PID != 0:
			c.pidBits[uint32(t.PID)] |= 1 << t.ChosenBit
		case t.Selector != nil:
			m, err := t.Selector.Compile()
			if err != nil {
				return nil, fmt.Errorf("target %s: process: %w", t.Path, err)
			}
			c.matchers[i] = m
			c.selBits |= 1 << t.ChosenBit
		}
	}
	return c, nil
}

// active says whether any target chooses its processes.
func (c *chooser) active() bool { return len(c.pidBits) > 0 || c.selBits != 0 }

// chooseRunning sets the masks of the processes running now: the pids of
// pid: targets, and every process the selectors match.
func (c *chooser) chooseRunning() error {
	var errs []error
	for pid := range c.pidBits {
		start, err := c.fs.StartTime(int(pid))
		if err != nil {
			errs = append(errs, fmt.Errorf("process %d: %w", pid, err))
			continue
		}
		bits := c.pidBitsOf(pid, start)
		if bits == 0 {
			errs = append(errs, fmt.Errorf("process %d exited while its files were read: the pid is another process's now, which is not traced", pid))
			continue
		}
		if err := c.engine.SetProcess(pid, start, bits, false); err != nil {
			errs = append(errs, err)
		}
	}
	if c.selBits == 0 {
		return errors.Join(errs...)
	}
	pids, err := c.fs.PIDs()
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("listing processes: %w", err))...)
	}
	for _, pid := range pids {
		exe, _, err := c.fs.Executable(pid)
		if err != nil {
			continue // gone, or a kernel thread
		}
		cmd, _ := c.fs.CommandLine(pid)
		mask := c.match(exe, cmd)
		if mask == 0 && c.pidBits[uint32(pid)] == 0 {
			continue
		}
		c.remember(uint32(pid), exe)
		start, err := c.fs.StartTime(pid)
		if err != nil {
			continue
		}
		if mask |= c.pidBitsOf(uint32(pid), start); mask == 0 {
			continue
		}
		_ = c.engine.SetProcess(uint32(pid), start, mask, false)
	}
	return errors.Join(errs...)
}

// pidBitsOf returns the bits of the pid: targets whose process is pid,
// started at start (clock ticks since boot, procfs.StartTime): a target
// names the process its files were located in (plan.PlannedTarget
// ProcessStart), not whichever process has its pid later.
func (c *chooser) pidBitsOf(pid uint32, start uint64) uint64 {
	if c.pidBits[pid] == 0 {
		return 0
	}
	var mask uint64
	for _, t := range c.plan.Targets {
		if t.PID > 0 && uint32(t.PID) == pid && (t.ProcessStart == 0 || t.ProcessStart == start) {
			mask |= 1 << t.ChosenBit
		}
	}
	return mask
}

// match returns the selector bits of a process running exe with cmd.
func (c *chooser) match(exe, cmd string) uint64 {
	var mask uint64
	for i, m := range c.matchers {
		if m != nil && m.Match(exe, cmd) {
			mask |= 1 << c.plan.Targets[i].ChosenBit
		}
	}
	return mask
}

// exec decides a process that execed: its executable as it sees it (the
// running process's, or the name it was execed by when it is already
// gone) and its command line then.
func (c *chooser) exec(p event.Process) {
	if c.selBits == 0 {
		return
	}
	exe := p.Filename
	if pid, ok := procExe(p.Filename, p.PID); ok && c.exes[pid] != "" {
		exe = c.exes[pid] // what /proc/self/exe named when it execed
	}
	// The pid: bits the engine kept across the exec (on_exec keeps them
	// for the process it chose): a process that took a target's pid after
	// the target exited has none.
	var kept uint64
	if mask, start, ok := c.engine.ProcessMask(p.PID); ok && start == p.Image.StartNs {
		kept = mask & c.pidBits[p.PID]
		if path, _, err := c.fs.Executable(int(p.PID)); err == nil {
			exe = path
		}
	}
	c.remember(p.PID, exe)
	cmd := strings.TrimRight(strings.ReplaceAll(p.Args, "\x00", " "), " ")
	c.decide(p.PID, p.Image, c.match(exe, cmd)|kept)
}

// remember keeps the executable of a process's image, bounded like the
// decisions.
func (c *chooser) remember(pid uint32, exe string) {
	if len(c.exes) >= maxDecisions {
		clear(c.exes)
	}
	c.exes[pid] = exe
}

// procExe says whether an exec's file name is a process's executable link
// (/proc/self/exe, /proc/PID/exe), and whose: such an exec runs the
// executable that process had then.
func procExe(filename string, self uint32) (uint32, bool) {
	rest, ok := strings.CutPrefix(filename, "/proc/")
	if !ok {
		return 0, false
	}
	who, ok := strings.CutSuffix(rest, "/exe")
	if !ok {
		return 0, false
	}
	if who == "self" {
		return self, true
	}
	pid, err := strconv.ParseUint(who, 10, 32)
	if err != nil {
		return 0, false
	}
	return uint32(pid), true
}

// fork decides a child of a pending process once its parent is decided.
// Forks of other processes (every fork comes with process facts) change
// nothing.
func (c *chooser) fork(p event.Process) {
	if c.selBits == 0 {
		return
	}
	if exe, ok := c.exes[p.Parent]; ok {
		c.remember(p.PID, exe) // forked, not execed: the same program
	}
	for k, mask := range c.decisions {
		if k.pid == p.Parent {
			c.decide(p.PID, p.Image, mask&c.selBits)
			return
		}
	}
	if mask, _, ok := c.engine.ProcessMask(p.Parent); ok && mask&(1<<bpfobj.ProcPendingBit) == 0 {
		return // forked by an undecided process that is not pending: neither is its child
	}
	if len(c.children[p.Parent]) < 64 {
		c.children[p.Parent] = append(c.children[p.Parent], p)
	}
}

// decide sets a process's mask in the engine, ending its pending state,
// and adds what it did while pending to the metrics if it is chosen.
func (c *chooser) decide(pid uint32, image event.Image, mask uint64) {
	if len(c.decisions) >= maxDecisions {
		c.forgetGone()
	}
	c.decisions[imageKey{pid, image}] = mask
	if _, start, ok := c.engine.ProcessMask(pid); !ok || start != image.StartNs || c.engine.SetProcess(pid, image.StartNs, mask, true) != nil {
		c.undecided++ // it exited meanwhile: its exit record folds what it did
	}
	c.toFold[pid] = mask
	// A child has its parent's process: choices, not its pid: ones.
	for _, child := range c.children[pid] {
		c.decide(child.PID, child.Image, mask&c.selBits)
	}
	delete(c.children, pid)
}

// forgetGone drops the decisions of processes the engine no longer has
// (their exit records were lost: a decided process's are deleted when its
// exit is read), or all of them when none is gone: the bound of
// maxDecisions. A pending span of a process whose decision is dropped is
// not delivered (counted as undecided).
func (c *chooser) forgetGone() {
	n := len(c.decisions)
	for k := range c.decisions {
		if _, start, ok := c.engine.ProcessMask(k.pid); !ok || start != k.image.StartNs {
			delete(c.decisions, k)
		}
	}
	if len(c.decisions) == n {
		clear(c.decisions)
	}
}

// exit forgets a process, adding what it did while pending after its
// decision was read.
func (c *chooser) exit(p event.Process) {
	if c.selBits == 0 {
		return // nothing is ever pending
	}
	mask, ok := c.decisions[imageKey{p.PID, p.Image}]
	if !ok {
		mask = 0
	}
	c.toFold[p.PID] = mask
	c.exited[p.PID] = true // its pid may be another process's by the next fold
	delete(c.again, p.PID)
	for k := range c.decisions {
		if k.pid == p.PID {
			delete(c.decisions, k)
		}
	}
	delete(c.children, p.PID)
	delete(c.exes, p.PID)
}

// foldPending takes the pending counters of the processes decided or
// exited since the last call, and once more those decided before it, in
// one pass over the engine's map, and adds those of the targets each one's
// mask chooses to the folded stats. The drain goroutine calls it after
// each batch of records.
func (c *chooser) foldPending() {
	if len(c.toFold) == 0 && len(c.again) == 0 {
		return
	}
	masks := c.again
	c.again = map[uint32]uint64{}
	for pid, mask := range c.toFold {
		masks[pid] = mask
		if _, exited := c.exited[pid]; !exited {
			c.again[pid] = mask
		}
	}
	clear(c.exited)
	pids := make(map[uint32]bool, len(masks))
	for pid := range masks {
		pids[pid] = true
	}
	taken, _ := c.engine.TakePending(pids) // what could not be read is dropped, as an undecided process's
	c.mu.Lock()
	defer c.mu.Unlock()
	for pid, counts := range taken {
		c.fold(counts, masks[pid])
	}
	clear(c.toFold)
}

// fold adds the pending counters of one process that the mask chooses to
// the folded stats; c.mu is held.
func (c *chooser) fold(counts []tracer.PendingCount, mask uint64) {
	if c.folded.Probes == nil {
		c.folded.Probes = make([]event.ProbeCounts, len(c.plan.Probes))
		c.folded.Spans = make([]event.SpanCounts, len(c.plan.Spans))
	}
	for _, pc := range counts {
		switch pc.Kind {
		case bpfobj.PendingHits:
			if int(pc.ID) < len(c.plan.Probes) && c.chosen(c.plan.Probes[pc.ID].Target, mask) {
				c.folded.Probes[pc.ID].Hits += pc.Value
			}
		case bpfobj.PendingSpanBucket, bpfobj.PendingSpanSum, bpfobj.PendingSpanLost, bpfobj.PendingSpanUnsampled, bpfobj.PendingSpanShort:
			if int(pc.ID) >= len(c.plan.Spans) || !c.chosen(c.plan.Spans[pc.ID].Target, mask) {
				continue
			}
			sc := &c.folded.Spans[pc.ID]
			switch pc.Kind {
			case bpfobj.PendingSpanSum:
				sc.SumNs += pc.Value
			case bpfobj.PendingSpanBucket:
				if int(pc.Bucket) < bpfobj.HistBuckets {
					if sc.Buckets == nil {
						sc.Buckets = make([]uint64, bpfobj.HistBuckets) // on first use: see event.SpanCounts
					}
					sc.Buckets[pc.Bucket] += pc.Value
					sc.Count += pc.Value
				}
			case bpfobj.PendingSpanLost:
				sc.Lost += pc.Value
				if exit := c.plan.Spans[pc.ID].Exit; exit >= 0 && exit < len(c.folded.Probes) {
					c.folded.Probes[exit].Lost += pc.Value
				}
			case bpfobj.PendingSpanUnsampled:
				sc.Unsampled += pc.Value
			case bpfobj.PendingSpanShort:
				sc.Short += pc.Value
			}
		}
	}
}

// chosen says whether mask chooses target ti.
func (c *chooser) chosen(ti int, mask uint64) bool {
	t := c.plan.Targets[ti]
	return !t.Chosen || mask&(1<<t.ChosenBit) != 0
}

// keep says whether a span recorded for a pending process counts: its
// process was decided and chose the span's target. known is false when the
// process's decision is not known (its exec record was lost, or the
// decisions were dropped for their bound).
func (c *chooser) keep(ev *event.SpanRecord) (keep, known bool) {
	if !ev.Pending {
		return true, true
	}
	mask, ok := c.decisions[imageKey{ev.PID, ev.Image}]
	return ok && c.chosen(c.plan.Spans[ev.Def].Target, mask), ok
}

// addFolded adds the folded pending counts to a snapshot of the engine's.
func (c *chooser) addFolded(st *event.Stats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.folded.Probes == nil {
		return // nothing folded yet
	}
	for i := range st.Probes {
		st.Probes[i].Hits += c.folded.Probes[i].Hits
		st.Probes[i].Lost += c.folded.Probes[i].Lost
	}
	for i := range st.Spans {
		f := &c.folded.Spans[i]
		st.Spans[i].Count += f.Count
		st.Spans[i].SumNs += f.SumNs
		st.Spans[i].Lost += f.Lost
		st.Spans[i].Unsampled += f.Unsampled
		st.Spans[i].Short += f.Short
		if f.Buckets == nil {
			continue
		}
		if st.Spans[i].Buckets == nil {
			st.Spans[i].Buckets = make([]uint64, len(f.Buckets))
		}
		for b, n := range f.Buckets {
			st.Spans[i].Buckets[b] += n
		}
	}
}
