//go:build linux

// Package jaegertest runs a Jaeger v2 binary (built by make jaeger) for the
// end-to-end tests: Start gives it in-memory storage and free 127.0.0.1
// ports, Trace and WaitTrace read traces back through its query API, and
// BuildTraceapp and RunTraceapp build and run the instrumented application
// of harness/traceapp against it.
package jaegertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/template"
	"time"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

const (
	// startTimeout bounds Start's wait for the query API and the receivers.
	startTimeout = 60 * time.Second
	// stopTimeout is how long the cleanup waits after SIGTERM before it
	// kills Jaeger.
	stopTimeout = 10 * time.Second
	// startAttempts is how often Start tries fresh ports when one it chose
	// was taken meanwhile.
	startAttempts = 3
)

// Jaeger is a running Jaeger v2 with in-memory storage; every listener is on
// 127.0.0.1.
type Jaeger struct {
	// OTLPGRPC and OTLPHTTP are the OTLP receivers' addresses,
	// "127.0.0.1:port".
	OTLPGRPC, OTLPHTTP string
	// QueryURL is the query service's HTTP base URL, "http://127.0.0.1:port";
	// QueryGRPC its gRPC address.
	QueryURL, QueryGRPC string
	// ConfigPath is the configuration Jaeger runs with.
	ConfigPath string

	cmd    *exec.Cmd
	log    *syncBuffer
	exited chan struct{}
	client *http.Client
}

// ports fills the placeholders of testdata/jaeger/config.yaml.tmpl.
type ports struct {
	OTLPGRPC, OTLPHTTP, QueryHTTP, QueryGRPC string
}

// Start starts bin (a Jaeger v2 binary, e.g. $JAEGER_BIN) with the
// configuration of testdata/jaeger/config.yaml.tmpl, written with free ports
// into a temporary directory, and waits until its query API answers and its
// OTLP receivers accept connections. Jaeger is stopped when the test ends;
// if the test failed, its log is printed.
func Start(t testing.TB, bin string) *Jaeger {
	t.Helper()
	tmpl, err := template.ParseFiles(testutil.Testdata("jaeger", "config.yaml.tmpl"))
	if err != nil {
		t.Fatalf("jaegertest: %v", err)
	}
	tmpl.Option("missingkey=error")
	dir := t.TempDir()
	var lastErr error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		j, err := start(t, bin, tmpl, filepath.Join(dir, fmt.Sprintf("jaeger-%d.yaml", attempt)))
		if err == nil {
			return j
		}
		lastErr = err
		// Another process may have taken a port between our choosing it
		// and Jaeger binding it: try again with new ones.
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	t.Fatalf("jaegertest: %v", lastErr)
	return nil
}

func start(t testing.TB, bin string, tmpl *template.Template, configPath string) (*Jaeger, error) {
	addrs, err := freeAddrs(4)
	if err != nil {
		return nil, err
	}
	p := ports{OTLPGRPC: addrs[0], OTLPHTTP: addrs[1], QueryHTTP: addrs[2], QueryGRPC: addrs[3]}
	var cfg bytes.Buffer
	if err := tmpl.Execute(&cfg, p); err != nil {
		return nil, err
	}
	if err := os.WriteFile(configPath, cfg.Bytes(), 0o644); err != nil {
		return nil, err
	}

	j := &Jaeger{
		OTLPGRPC:   p.OTLPGRPC,
		OTLPHTTP:   p.OTLPHTTP,
		QueryURL:   "http://" + p.QueryHTTP,
		QueryGRPC:  p.QueryGRPC,
		ConfigPath: configPath,
		log:        &syncBuffer{},
		exited:     make(chan struct{}),
		client:     &http.Client{Timeout: 5 * time.Second},
	}
	j.cmd = exec.Command(bin, "--config", configPath)
	j.cmd.Stdout = j.log
	j.cmd.Stderr = j.log
	// Jaeger must not outlive the test binary (e.g. after a test timeout,
	// when no cleanup runs).
	j.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := j.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting jaeger: %w", err)
	}
	go func() {
		_ = j.cmd.Wait()
		close(j.exited)
	}()

	if err := j.waitReady(); err != nil {
		j.stop()
		return nil, fmt.Errorf("%w\nJaeger's log:\n%s", err, j.Log())
	}
	t.Cleanup(func() {
		if err := j.stop(); err != nil {
			t.Errorf("jaegertest: %v", err)
		}
		if t.Failed() {
			t.Logf("Jaeger's log:\n%s", j.Log())
		}
	})
	return j, nil
}

// waitReady polls the query API, then checks that the OTLP receivers listen:
// Jaeger starts its extensions (the query service) before its receivers.
func (j *Jaeger) waitReady() error {
	deadline := time.Now().Add(startTimeout)
	delay := 10 * time.Millisecond
	for {
		select {
		case <-j.exited:
			return fmt.Errorf("jaeger exited at start: %s", j.cmd.ProcessState)
		default:
		}
		_, err := j.Services()
		if err == nil {
			err = dialAll(j.OTLPGRPC, j.OTLPHTTP)
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("jaeger not ready within %s: %w", startTimeout, err)
		}
		select {
		case <-j.exited:
		case <-time.After(delay):
		}
		delay = min(2*delay, 200*time.Millisecond)
	}
}

// stop sends SIGTERM, then kills Jaeger after stopTimeout.
func (j *Jaeger) stop() error {
	select {
	case <-j.exited:
		return nil
	default:
	}
	_ = j.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-j.exited:
		return nil
	case <-time.After(stopTimeout):
		_ = j.cmd.Process.Kill()
		<-j.exited
		return fmt.Errorf("jaeger did not stop within %s of SIGTERM: killed", stopTimeout)
	}
}

// Log returns what Jaeger has logged so far.
func (j *Jaeger) Log() string { return j.log.String() }

// freeAddrs returns n distinct free TCP addresses on 127.0.0.1.
func freeAddrs(n int) ([]string, error) {
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		// Listeners stay open until all ports are chosen, so that they
		// differ.
		defer ln.Close()
		addrs = append(addrs, ln.Addr().String())
	}
	return addrs, nil
}

func dialAll(addrs ...string) error {
	var errs []error
	for _, a := range addrs {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", a)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.Close()
	}
	return errors.Join(errs...)
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
