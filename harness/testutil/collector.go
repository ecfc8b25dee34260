package testutil

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ReadyTimeout bounds how long a collector may take from its start to
// "Everything is ready".
const ReadyTimeout = time.Minute

// Collector is a running collector binary (the distro make build builds),
// started by RunCollector or StartCollector: the one way every harness
// tool and end-to-end test starts a collector and waits until it is ready.
type Collector struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	log    boundedLog
	exited chan error
	err    error
	done   bool
}

// RunCollector starts cmd, a collector with its arguments and environment
// (bin --config PATH, perhaps pinned to a CPU by taskset), and returns once
// the collector logs that everything is ready. It fails when the collector
// exits first or is not ready within ReadyTimeout (it is then stopped).
// Its log (stderr) is kept for Log: the first and the last logKeepBytes.
func RunCollector(cmd *exec.Cmd) (*Collector, error) {
	c := &Collector{cmd: cmd, exited: make(chan error, 1)}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	ready := make(chan struct{})
	go func() {
		var once sync.Once
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() { // to the end: a blocked pipe would stop the collector
			c.mu.Lock()
			c.log.write(sc.Text() + "\n")
			c.mu.Unlock()
			if strings.Contains(sc.Text(), "Everything is ready") {
				once.Do(func() { close(ready) })
			}
		}
		c.exited <- cmd.Wait()
	}()
	timer := time.NewTimer(ReadyTimeout)
	defer timer.Stop()
	select {
	case <-ready:
		return c, nil
	case err := <-c.exited:
		c.done, c.err = true, err
		return nil, fmt.Errorf("the collector exited before it was ready: %v\n%s", err, c.Log())
	case <-timer.C:
		_ = c.Stop(30 * time.Second)
		return nil, fmt.Errorf("the collector was not ready within %s\n%s", ReadyTimeout, c.Log())
	}
}

// StartCollector runs bin --config config with env added to the
// environment (RunCollector) for a test, which fails when the collector
// does not become ready. It is stopped when the test ends, and its log is
// printed when the test failed.
func StartCollector(t testing.TB, bin, config string, env ...string) *Collector {
	t.Helper()
	cmd := exec.Command(bin, "--config", config)
	cmd.Env = append(os.Environ(), env...)
	c, err := RunCollector(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Stop(30 * time.Second)
		if t.Failed() {
			t.Logf("collector log:\n%s", c.Log())
		}
	})
	return c
}

// PID returns the collector's process id (that of the command RunCollector
// started).
func (c *Collector) PID() int { return c.cmd.Process.Pid }

// Log returns what the collector has logged so far (its first and last
// logKeepBytes, with a line saying how much was left out between).
func (c *Collector) Log() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.log.String()
}

// Stop asks the collector to shut down (SIGTERM) and waits for it to exit,
// killing it after timeout; it returns how it exited. Later calls return
// the same.
func (c *Collector) Stop(timeout time.Duration) error {
	if c.done {
		return c.err
	}
	c.done = true
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case c.err = <-c.exited:
	case <-timer.C:
		_ = c.cmd.Process.Kill()
		c.err = errors.Join(fmt.Errorf("the collector did not stop within %s", timeout), <-c.exited)
	}
	return c.err
}

// logKeepBytes is how much of the start and of the end of a collector's
// log Collector keeps: a collector with the debug exporter logs a line per
// batch for as long as it runs.
const logKeepBytes = 1 << 20

// boundedLog keeps the first and the last logKeepBytes written to it.
type boundedLog struct {
	head    strings.Builder
	tail    []string // lines after head filled, at most logKeepBytes in all
	tailLen int
	dropped int64
}

func (l *boundedLog) write(line string) {
	if l.head.Len()+len(line) <= logKeepBytes {
		l.head.WriteString(line)
		return
	}
	l.tail = append(l.tail, line)
	l.tailLen += len(line)
	for l.tailLen > logKeepBytes && len(l.tail) > 1 {
		l.tailLen -= len(l.tail[0])
		l.dropped += int64(len(l.tail[0]))
		l.tail = l.tail[1:]
	}
}

func (l *boundedLog) String() string {
	if l.dropped == 0 {
		return l.head.String() + strings.Join(l.tail, "")
	}
	return fmt.Sprintf("%s[… %d bytes of log left out …]\n%s", l.head.String(), l.dropped, strings.Join(l.tail, ""))
}
