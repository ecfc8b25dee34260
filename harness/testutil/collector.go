package testutil

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Collector is a running collector binary (the distro built by make build).
type Collector struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	log    strings.Builder
	exited chan error
	err    error
	done   bool
}

// StartCollector runs bin --config config with env added to the
// environment, and returns once it logs that everything is ready. The test
// fails if it exits first or is not ready within a minute; its log is
// printed when the test fails.
func StartCollector(t testing.TB, bin, config string, env ...string) *Collector {
	t.Helper()
	c := &Collector{cmd: exec.Command(bin, "--config", config), exited: make(chan error, 1)}
	c.cmd.Env = append(os.Environ(), env...)
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	ready := make(chan struct{})
	go func() {
		var once sync.Once
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			c.mu.Lock()
			c.log.WriteString(sc.Text() + "\n")
			c.mu.Unlock()
			if strings.Contains(sc.Text(), "Everything is ready") {
				once.Do(func() { close(ready) })
			}
		}
		c.exited <- c.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = c.Stop(30 * time.Second)
		if t.Failed() {
			t.Logf("collector log:\n%s", c.Log())
		}
	})
	select {
	case <-ready:
	case err := <-c.exited:
		c.done, c.err = true, err
		t.Fatalf("collector exited before it was ready: %v\n%s", err, c.Log())
	case <-time.After(time.Minute):
		t.Fatalf("collector not ready within a minute\n%s", c.Log())
	}
	return c
}

// Log returns what the collector has logged so far.
func (c *Collector) Log() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.log.String()
}

// Stop asks the collector to shut down (SIGTERM) and waits for it to exit,
// killing it after timeout; it returns how it exited.
func (c *Collector) Stop(timeout time.Duration) error {
	if c.done {
		return c.err
	}
	c.done = true
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case c.err = <-c.exited:
	case <-time.After(timeout):
		_ = c.cmd.Process.Kill()
		c.err = <-c.exited
	}
	return c.err
}
