package tracer

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/otel-uprobe/uprobereceiver/internal/insn"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
	"github.com/otel-uprobe/uprobereceiver/internal/tracer/floor"
)

// Calibration is what one probe hit costs a traced thread on this machine,
// measured by Calibrate with the cheapest useful program (a per-CPU
// counter, the benchmark's floor) on functions of the receiver's own
// executable: the trap by site class and the return leg of a uretprobe.
// What the engine's own programs cost beyond that counter comes from BPF
// run-time statistics (ProgramRuns), when they are on.
type Calibration struct {
	// HitNs is the time in nanoseconds one hit adds to the traced thread,
	// indexed by site class: insn.Optimizable, insn.Emulated and
	// insn.SingleStepped. Optimizable is measured on a 5-byte nop: on a
	// kernel without optimized uprobes it costs what Emulated does.
	HitNs [3]float64
	// ReturnNs is what a uretprobe adds, in nanoseconds, to an entry
	// uprobe at the same function: the return leg.
	ReturnNs float64
	// CounterNs is the counter program's own run time per run in
	// nanoseconds, from BPF run-time statistics; 0 when they are off.
	CounterNs float64
	// Stats says BPF run-time statistics were on: ProgramRuns can tell
	// what the engine's programs cost beyond the counter.
	Stats bool
	// Rounds is the number of interleaved rounds, Calls the calls of each
	// probed function per round (by leg: emulated, optimizable,
	// single-stepped, emulated with a uretprobe).
	Rounds int
	Calls  [4]int
	// Took is the calibration's wall time: attaching, timing, detaching.
	Took time.Duration
}

// HitCost returns the nanoseconds a hit at a site of class c costs the
// traced thread, with a uretprobe's return leg when ret is set.
func (c Calibration) HitCost(class insn.SiteClass, ret bool) float64 {
	ns := c.HitNs[min(int(class), len(c.HitNs)-1)]
	if ret {
		ns += c.ReturnNs
	}
	return ns
}

// The legs Calibrate measures, one probed function each.
const (
	legEmulated = iota
	legOptimizable
	legSingleStepped
	legPair // an entry uprobe and a uretprobe on one emulated function
	legs
)

// calibFunction is one function Calibrate probes, with its twin.
type calibFunction struct {
	leg          int
	class        insn.SiteClass
	probed, twin uintptr // virtual addresses in this process
	code         []byte  // the bytes both start with
	withReturn   bool
	fileOffset   uint64 // of probed in /proc/self/exe
}

// Bounds of a calibration.
const (
	calibRounds = 9
	// calibBatch is the time one batch of calls to a probed function
	// should take; calibMinCalls and calibMaxCalls bound its calls.
	calibBatch    = 4 * time.Millisecond
	calibMinCalls = 16
	calibMaxCalls = 20000
	// calibProbeCalls is the number of calls that size the batches.
	calibProbeCalls = 32
)

// Calibrate measures what a probe hit costs on this machine (see
// Calibration): it attaches a per-CPU counter, the way the engine attaches
// (uprobe_multi links or perf events), to small functions of this very
// executable found through /proc/self/maps (it works in a stripped
// binary), and times batches of calls to each against an identical twin
// that is not probed, in interleaved rounds on one thread, by the thread's
// CPU time (traps included, other processes' time not); it reports the
// median of the per-round differences. About 9 × 4 batches of 4 ms each,
// plus attaching and detaching: well under a second where a trap costs
// 5 µs. x86-64 only.
func (t *Tracer) Calibrate() (_ Calibration, err error) {
	start := time.Now()
	fns, err := calibrationFunctions()
	if err != nil {
		return Calibration{}, err
	}
	if err := locateSelf(fns); err != nil {
		return Calibration{}, fmt.Errorf("finding the calibration functions in /proc/self/exe: %w", err)
	}
	spec, err := floor.Spec()
	if err != nil {
		return Calibration{}, fmt.Errorf("reading the counter program: %w", err)
	}
	if t.multi {
		spec.Programs[floor.Program].AttachType = ebpf.AttachTraceUprobeMulti
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		if errors.Is(err, os.ErrPermission) {
			return Calibration{}, ErrPermission
		}
		return Calibration{}, fmt.Errorf("loading the counter program: %w", err)
	}
	defer coll.Close()
	prog, hits := coll.Programs[floor.Program], coll.Maps[floor.Map]

	// One thread times everything; the probed functions and their twins
	// are paged in before anything is attached.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, f := range fns {
		callN(f.probed, calibProbeCalls)
		callN(f.twin, calibProbeCalls)
	}

	links, err := t.attachCalibration(prog, fns)
	if err != nil {
		return Calibration{}, errors.Join(err, closeAll(links))
	}
	defer func() {
		err = errors.Join(err, closeAll(links))
	}()

	stats := t.statsOn()
	before, _ := prog.Stats()
	// Size the batches from a few probed calls each (the first hit of a
	// 5-byte nop is the one the kernel optimizes).
	var c Calibration
	c.Rounds = calibRounds
	fired := uint64(0)
	for _, f := range fns {
		callN(f.probed, 1)
		per := timeCalls(f.probed, calibProbeCalls) / calibProbeCalls
		c.Calls[f.leg] = int(min(calibMaxCalls, max(calibMinCalls, int64(calibBatch/max(per, 1)))))
		fired += 1 + calibProbeCalls
	}
	added := make([][]float64, legs)
	var returns []float64 // per round: the pair less the entry alone
	for r := range calibRounds {
		var round [legs]float64
		for _, f := range fns {
			n := c.Calls[f.leg]
			var probed, twin time.Duration
			if r%2 == 0 {
				probed, twin = timeCalls(f.probed, n), timeCalls(f.twin, n)
			} else {
				twin, probed = timeCalls(f.twin, n), timeCalls(f.probed, n)
			}
			round[f.leg] = float64(probed-twin) / float64(n)
			added[f.leg] = append(added[f.leg], round[f.leg])
			fired += uint64(n)
		}
		returns = append(returns, round[legPair]-round[legEmulated])
	}
	after, _ := prog.Stats()

	// Every call of a probed function ran the counter (twice with a
	// uretprobe), or the functions were not the ones probed.
	want := fired
	for _, f := range fns {
		if f.withReturn {
			want += 1 + calibProbeCalls + uint64(calibRounds*c.Calls[f.leg])
		}
	}
	got, err := sumPerCPU(hits)
	if err != nil {
		return Calibration{}, err
	}
	if got != want {
		return Calibration{}, fmt.Errorf("the calibration probes ran %d times, not %d: they are not where the functions are", got, want)
	}
	for _, f := range fns {
		if f.leg != legPair {
			c.HitNs[f.class] = max(0, median(added[f.leg]))
		}
	}
	c.ReturnNs = max(0, median(returns))
	if stats && before != nil && after != nil && after.RunCount > before.RunCount {
		c.Stats = true
		c.CounterNs = float64(after.Runtime-before.Runtime) / float64(after.RunCount-before.RunCount)
	}
	err = closeAll(links)
	links = nil
	c.Took = time.Since(start)
	return c, err
}

// CalibrateMachine is Calibrate without an engine: the counter attaches
// as an engine on this kernel would (through uprobe_multi links where the
// kernel has them, Linux 6.6). The benchmark prints it first, so that its
// ratios from different machines can be read side by side.
func CalibrateMachine() (Calibration, error) {
	t := &Tracer{multi: HaveUprobeMulti()}
	return t.Calibrate()
}

// attachCalibration attaches prog at every calibration function's entry,
// and at the return of those withReturn, through uprobe_multi links when
// the engine uses them.
func (t *Tracer) attachCalibration(prog *ebpf.Program, fns []calibFunction) ([]link.Link, error) {
	ex, err := link.OpenExecutable("/proc/self/exe")
	if err != nil {
		return nil, fmt.Errorf("opening /proc/self/exe: %w", err)
	}
	var links []link.Link
	if t.multi {
		entries, returns := &link.UprobeMultiOptions{}, &link.UprobeMultiOptions{}
		for _, f := range fns {
			entries.Addresses = append(entries.Addresses, f.fileOffset)
			if f.withReturn {
				returns.Addresses = append(returns.Addresses, f.fileOffset)
			}
		}
		l, err := ex.UprobeMulti(nil, prog, entries)
		if err != nil {
			return nil, fmt.Errorf("attaching the calibration uprobes: %w", err)
		}
		links = append(links, l)
		if len(returns.Addresses) > 0 {
			l, err := ex.UretprobeMulti(nil, prog, returns)
			if err != nil {
				return links, fmt.Errorf("attaching the calibration uretprobe: %w", err)
			}
			links = append(links, l)
		}
		return links, nil
	}
	for _, f := range fns {
		opts := &link.UprobeOptions{Address: f.fileOffset, TraceFSPrefix: "otelcol_uprobe"}
		l, err := ex.Uprobe("calibrate", prog, opts)
		if err != nil {
			return links, fmt.Errorf("attaching a calibration uprobe: %w", err)
		}
		links = append(links, l)
		if f.withReturn {
			l, err := ex.Uretprobe("calibrate", prog, opts)
			if err != nil {
				return links, fmt.Errorf("attaching the calibration uretprobe: %w", err)
			}
			links = append(links, l)
		}
	}
	return links, nil
}

// timeCalls returns the CPU time the calling thread spends in n calls of
// the function at fn (its traps included: the kernel handles them on the
// thread's time), which other processes on the same CPU do not inflate.
func timeCalls(fn uintptr, n int) time.Duration {
	t0 := threadTime()
	callN(fn, n)
	return threadTime() - t0
}

// threadTime returns the calling thread's CPU time.
func threadTime() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

// closeAll closes links side by side (see closeEach): each may wait for
// an RCU grace period.
func closeAll(links []link.Link) error {
	return errors.Join(closeEach(len(links), func(i int) error { return links[i].Close() })...)
}

// maxClosers bounds the goroutines that close links at once. A link's
// close blocks its thread in the kernel until an RCU Tasks Trace grace
// period ends (synchronize_rcu_tasks_trace: 50 to 150 ms here, longer with
// more threads and load); every close waiting then ends with it, so n
// links take about n/maxClosers grace periods. Each waiting goroutine
// holds an OS thread, fewer where the pids limit asks (closerSlots): 1,024
// detach 6,000 links (2,000 files) in 0.5 to 0.65 s on this 2-CPU machine
// (512: 0.86 to 1.02 s; 2,048: no faster; 256: 1.8 to 2.4 s).
const maxClosers = 1024

// closers holds a token per close in progress, shared by every caller of
// closeEach (Detach, DetachFile, SetProbesAttached, Calibrate), so that
// together they never block more than closerSlots threads.
var closers = sync.OnceValue(func() chan struct{} { return make(chan struct{}, closerSlots()) })

// closeEach runs closeOne(i) for i in [0, n), at most closerSlots at once
// (each takes its turn in order of i), and returns each one's error.
func closeEach(n int, closeOne func(i int) error) []error {
	errs := make([]error, n)
	next := make(chan int)
	var wg sync.WaitGroup
	tokens := closers()
	for range min(n, cap(tokens)) {
		wg.Go(func() {
			for i := range next {
				errs[i] = closeOne(i)
				<-tokens
			}
		})
	}
	for i := range n {
		tokens <- struct{}{} // taken in order of i, given back by the worker
		next <- i
	}
	close(next)
	wg.Wait()
	return errs
}

// locateSelf sets the file offset in /proc/self/exe of every function's
// probed address, through the executable mapping of this process that
// holds it, and checks that the file has the function's bytes there.
func locateSelf(fns []calibFunction) error {
	exe, err := os.Open("/proc/self/exe")
	if err != nil {
		return err
	}
	defer exe.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(exe.Fd()), &st); err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	maps, err := procfs.FS{}.Maps(os.Getpid())
	if err != nil {
		return err
	}
	for i := range fns {
		f := &fns[i]
		for _, addr := range []uintptr{f.probed, f.twin} {
			j := slices.IndexFunc(maps, func(m procfs.Mapping) bool {
				return uint64(addr) >= m.Start && uint64(addr) < m.End
			})
			if j < 0 {
				return fmt.Errorf("no mapping holds %#x", addr)
			}
			m := maps[j]
			if !m.Executable() || m.Inode != st.Ino || m.Dev != uint64(st.Dev) {
				return fmt.Errorf("%#x is in %s (%s), not in this executable", addr, m.Path, m.Perms)
			}
			off := uint64(addr) - m.Start + m.FileOffset
			code := make([]byte, len(f.code))
			if _, err := exe.ReadAt(code, int64(off)); err != nil {
				return fmt.Errorf("reading file offset %#x: %w", off, err)
			}
			if !bytes.Equal(code, f.code) {
				return fmt.Errorf("file offset %#x holds % x, not % x", off, code, f.code)
			}
			if addr == f.probed {
				f.fileOffset = off
			}
		}
	}
	return nil
}

// statsOn says whether the kernel keeps BPF run-time statistics now:
// enabled by the tracer (Options.ProgramStats) or by the administrator
// (sysctl kernel.bpf_stats_enabled=1).
func (t *Tracer) statsOn() bool {
	if t.stats != nil {
		return true
	}
	b, err := os.ReadFile("/proc/sys/kernel/bpf_stats_enabled")
	return err == nil && len(b) > 0 && b[0] == '1'
}

func sumPerCPU(m *ebpf.Map) (uint64, error) {
	var per []uint64
	if err := m.Lookup(uint32(0), &per); err != nil {
		return 0, fmt.Errorf("reading the calibration counter: %w", err)
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n, nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
