//go:build linux

// Package budgetrun runs testdata/budget/hot.c under the collector
// distribution, for the overhead budget's privileged test
// (harness/e2e/budgettest) and its benchmark (harness/budgetbench): it
// builds and drives the hot program on one CPU, starts the collector on
// the other with a budget or none, and keeps the metrics the collector
// exports over OTLP/HTTP — the pipeline's and its own telemetry — with
// the time they arrived.
package budgetrun

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Tick is one of the hot program's reports, cumulative since it started.
type Tick struct {
	// Wall is the time since the program started, CPU its main thread's
	// CPU time.
	Wall, CPU time.Duration
	// Calls are the calls of hot_fn made (not of hot_twin), Work the
	// units of work done.
	Calls, Work int64
	// At is when the report arrived.
	At time.Time
}

// Speed returns the work done per second of the main thread's CPU time
// between two ticks.
func Speed(from, to Tick) float64 {
	if to.CPU <= from.CPU {
		return 0
	}
	return float64(to.Work-from.Work) / (to.CPU - from.CPU).Seconds()
}

// Hot is a running hot program.
type Hot struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	mu     sync.Mutex
	ticks  []Tick
	totals chan int64
	exited chan struct{}
}

// BuildHot compiles testdata/budget/hot.c from the repository at root into
// dir and returns the program's path.
func BuildHot(root, dir string) (string, error) {
	out := filepath.Join(dir, "hot")
	src := filepath.Join(root, "testdata", "budget", "hot.c")
	if b, err := exec.Command("gcc", "-O2", "-pthread", "-o", out, src).CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", src, err, b)
	}
	return out, nil
}

// StartHot runs the hot program pinned to one CPU at the highest nice
// priority (-20), in a session of its own whose autogroup has that
// priority too (with sched_autogroup_enabled, nice only orders the tasks
// of one session): other processes on a shared machine then take next to
// none of that CPU. Its calls are paced by the wall clock and its speed
// counted per second of its own CPU time, which agree only while it has
// the CPU to itself. It returns once the program is ready; it makes no
// calls until SetRate.
func StartHot(path string, cpu int) (*Hot, error) {
	cmd := exec.Command("nice", "-n", "-20", "taskset", "-c", strconv.Itoa(cpu), path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", path, err)
	}
	h := &Hot{cmd: cmd, in: in, totals: make(chan int64, 1), exited: make(chan struct{})}
	ready := make(chan struct{})
	go func() {
		defer close(h.exited)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "ready":
				close(ready)
			case strings.HasPrefix(line, "total "):
				n, _ := strconv.ParseInt(strings.TrimPrefix(line, "total "), 10, 64)
				h.totals <- n
			case strings.HasPrefix(line, "tick "):
				var wall, cpu, calls, work int64
				if _, err := fmt.Sscanf(line, "tick %d %d %d %d", &wall, &cpu, &calls, &work); err == nil {
					h.mu.Lock()
					h.ticks = append(h.ticks, Tick{Wall: time.Duration(wall), CPU: time.Duration(cpu), Calls: calls, Work: work, At: time.Now()})
					h.mu.Unlock()
				}
			}
		}
	}()
	if err := raiseAutogroup(cmd.Process.Pid, -20); err != nil {
		_ = cmd.Process.Kill()
		return nil, err
	}
	select {
	case <-ready:
		return h, nil
	case <-h.exited:
		return nil, errors.Join(fmt.Errorf("%s exited before it was ready", path), cmd.Wait())
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("%s not ready within 30s", path)
	}
}

// SetRate makes the program call hot_fn perSecond times a second from now.
func (h *Hot) SetRate(perSecond int64) error {
	_, err := fmt.Fprintf(h.in, "rate %d\n", perSecond)
	return err
}

// SetTwinRate makes the program call hot_twin, an identical function that
// is never probed, perSecond times a second from now (and hot_fn no more):
// its unprobed speed at that rate.
func (h *Hot) SetTwinRate(perSecond int64) error {
	_, err := fmt.Fprintf(h.in, "twin %d\n", perSecond)
	return err
}

// Stop makes the program stop calling and returns the calls it made.
func (h *Hot) Stop() (int64, error) {
	if _, err := fmt.Fprintln(h.in, "stop"); err != nil {
		return 0, err
	}
	select {
	case n := <-h.totals:
		return n, nil
	case <-time.After(30 * time.Second):
		return 0, errors.New("the hot program did not report its calls within 30s")
	}
}

// Close ends the program.
func (h *Hot) Close() error {
	_, _ = fmt.Fprintln(h.in, "exit")
	_ = h.in.Close()
	select {
	case <-h.exited:
	case <-time.After(10 * time.Second):
		_ = h.cmd.Process.Kill()
	}
	return h.cmd.Wait()
}

// Ticks returns the program's reports so far.
func (h *Hot) Ticks() []Tick {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Tick(nil), h.ticks...)
}

// Last returns the program's latest report.
func (h *Hot) Last() Tick {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.ticks) == 0 {
		return Tick{}
	}
	return h.ticks[len(h.ticks)-1]
}

// Run lets the program run for d and returns its reports from then on,
// one per 100 ms: the last before the phase and every one during it.
func (h *Hot) Run(d time.Duration) []Tick {
	start := h.Last()
	time.Sleep(d) // a phase of the measurement, not a synchronisation
	var out []Tick
	for _, t := range h.Ticks() {
		if t.Wall >= start.Wall {
			out = append(out, t)
		}
	}
	return out
}

// PerSecond returns the speed (Speed) over each whole second of a run's
// reports, in order.
func PerSecond(ticks []Tick) []float64 {
	var out []float64
	for i := 0; i+10 < len(ticks); i += 10 {
		out = append(out, Speed(ticks[i], ticks[i+10]))
	}
	return out
}

// raiseAutogroup sets the nice priority of the autogroup of process pid,
// where the kernel has autogroups. A process in the kernel's default
// autogroup (autogroups off: sched_autogroup_enabled 0 or noautogroup, or
// a session that has none of its own) is left as it is: the kernel refuses
// that group a priority with EINVAL, and there nice alone orders the tasks.
func raiseAutogroup(pid, nice int) error {
	path := fmt.Sprintf("/proc/%d/autogroup", pid)
	if _, err := os.Stat(path); err != nil {
		return nil // no CONFIG_SCHED_AUTOGROUP
	}
	err := os.WriteFile(path, []byte(strconv.Itoa(nice)), 0)
	if err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("raising the priority of the autogroup of process %d: %w", pid, err)
	}
	return nil
}

// PinSelf pins every thread of this process (and so every thread and
// process it starts later, the collector among them) to one CPU, at nice
// priority -10 (its autogroup's too): on a shared machine, the
// collector's timers then fire on time.
func PinSelf(cpu int) error {
	if err := raiseAutogroup(os.Getpid(), -10); err != nil {
		return err
	}
	var set unix.CPUSet
	set.Set(cpu)
	// Twice: a thread started meanwhile by one not yet pinned is not
	// pinned by the first pass.
	for range 2 {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("pinning thread %d to CPU %d: %w", tid, cpu, err)
			}
			if err := unix.Setpriority(unix.PRIO_PROCESS, tid, -10); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("raising the priority of thread %d: %w", tid, err)
			}
		}
	}
	return nil
}
