package budgetrun

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Config returns a collector configuration that counts every call of the
// hot program's hot_fn with overhead_budget set to budget (none when 0),
// exports the pipeline's metrics every second to the sink at addr, and
// its own telemetry there too.
func Config(hot string, budget float64, addr string) string {
	b := ""
	if budget > 0 {
		b = fmt.Sprintf("\n    overhead_budget: %g", budget)
	}
	return fmt.Sprintf(`receivers:
  uprobe:
    collection_interval: 1s%s
    targets:
      - path: %s
        counters: [uprobe:hot_fn]
exporters:
  otlp_http:
    endpoint: http://%s
    compression: none
service:
  telemetry:
    logs:
      level: info
    metrics:
      level: normal
      readers:
        - periodic:
            interval: 500
            exporter:
              otlp:
                protocol: http/protobuf
                endpoint: http://%s/v1/metrics
  pipelines:
    metrics:
      receivers: [uprobe]
      exporters: [otlp_http]
`, b, hot, addr, addr)
}

// Collector is a running collector distribution.
type Collector struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	log    strings.Builder
	exited chan error
	err    error
	done   bool
}

// StartCollector writes config into dir and runs bin on it, returning once
// the collector logs that everything is ready (within a minute).
func StartCollector(bin, dir, config string) (*Collector, error) {
	path := filepath.Join(dir, "collector.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		return nil, err
	}
	c := &Collector{cmd: exec.Command(bin, "--config", path), exited: make(chan error, 1)}
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	ready := make(chan struct{})
	go func() {
		var once sync.Once
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
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
	select {
	case <-ready:
		return c, nil
	case err := <-c.exited:
		c.done, c.err = true, err
		return nil, fmt.Errorf("the collector exited before it was ready: %v\n%s", err, c.Log())
	case <-time.After(time.Minute):
		_ = c.Stop()
		return nil, fmt.Errorf("the collector was not ready within a minute\n%s", c.Log())
	}
}

// Log returns what the collector logged so far.
func (c *Collector) Log() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.log.String()
}

// Stop shuts the collector down (SIGTERM, then SIGKILL after 30 s) and
// returns how it exited.
func (c *Collector) Stop() error {
	if c.done {
		return c.err
	}
	c.done = true
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case c.err = <-c.exited:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		c.err = errors.Join(errors.New("the collector did not stop within 30s"), <-c.exited)
	}
	return c.err
}
