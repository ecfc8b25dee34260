//go:build linux

// Command traceapp is the instrumented application of the end-to-end tests:
// a stand-in for a server that handles one request with the OpenTelemetry Go
// SDK and hands the request's trace context to the program it drives, the
// demo program (testdata/demo), which the uprobe receiver traces.
//
// It starts the demo as a child, then under one SERVER span "GET /checkout":
//
//   - sends "req <traceparent>" (the span's W3C traceparent, the argument of
//     the demo's request__start/request__done probes) and waits for "req done";
//   - sends "sql SELECT * FROM orders WHERE id = 42 /*traceparent='<traceparent>'*/"
//     (a sqlcommenter-style query text) and waits for "sql done".
//
// It then ends the span, flushes it over OTLP/gRPC (insecure) to -otlp, stops
// the demo and prints one line of JSON on stdout:
//
//	{"trace_id":"…","span_id":"…","start_unix_nano":N,"end_unix_nano":N,"demo_pid":N}
//
// demo_pid is the demo's process ID. Any error ends traceapp with exit status
// 1 and a message on stderr; -timeout (default 1m) bounds the whole run.
// With -wait-probes it waits, before the request, until a tracer has attached
// to the demo it started (raised one of its semaphores).
//
// Build it from the main module: go build -o traceapp ./harness/traceapp
// (harness/e2e/jaegertest.BuildTraceapp does).
//
//	traceapp -otlp 127.0.0.1:4317 -demo _build/demo/demo [-service traceapp]
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// query is the query text sent to the demo, before its sqlcommenter comment.
const query = "SELECT * FROM orders WHERE id = 42"

// result is the line printed on stdout.
type result struct {
	TraceID       string `json:"trace_id"`
	SpanID        string `json:"span_id"`
	StartUnixNano int64  `json:"start_unix_nano"`
	EndUnixNano   int64  `json:"end_unix_nano"`
	DemoPID       int    `json:"demo_pid"`
}

type options struct {
	otlp, demo, service string
	timeout             time.Duration
	waitProbes          bool
}

func main() {
	var o options
	flag.StringVar(&o.otlp, "otlp", "", "OTLP/gRPC endpoint, host:port (plaintext), e.g. 127.0.0.1:4317")
	flag.StringVar(&o.demo, "demo", "", "path of the demo program (testdata/demo built with gcc)")
	flag.StringVar(&o.service, "service", "traceapp", "service.name of the exported spans")
	flag.DurationVar(&o.timeout, "timeout", 60*time.Second, "bound on the whole run")
	flag.BoolVar(&o.waitProbes, "wait-probes", false,
		"before the request, wait until a tracer has raised one of the semaphores the demo's sem command\n"+
			"prints (query__start, query__done, tick), i.e. has attached to the new demo process")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "traceapp:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.otlp == "" || o.demo == "" {
		return errors.New("-otlp and -demo are required")
	}
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()

	// Export errors of the batch span processor only reach the global
	// error handler: keep them so that a lost span fails the run.
	var exportErrs errorList
	otel.SetErrorHandler(otel.ErrorHandlerFunc(exportErrs.add))

	exp, err := otlptracegrpc.New(ctx,
		otlptracegrpc.WithEndpoint(o.otlp),
		otlptracegrpc.WithInsecure(),
		// Retry briefly, so that an unreachable endpoint is reported with
		// its cause rather than as the end of -timeout.
		otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{
			Enabled:         true,
			InitialInterval: 100 * time.Millisecond,
			MaxInterval:     time.Second,
			MaxElapsedTime:  5 * time.Second,
		}))
	if err != nil {
		return fmt.Errorf("OTLP exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", o.service))),
	)
	// shutdown flushes the span and reports the first error; it is bounded
	// by -timeout too.
	shutdown := func() error {
		err := tp.ForceFlush(ctx)
		if err == nil {
			err = exportErrs.err()
		}
		if serr := tp.Shutdown(ctx); err == nil {
			err = serr
		}
		return err
	}

	d, err := startDemo(ctx, o.demo)
	if err != nil {
		_ = shutdown()
		return err
	}
	defer d.kill()
	if o.waitProbes {
		if err := d.waitProbes(ctx); err != nil {
			_ = shutdown()
			return err
		}
	}

	res, err := handle(ctx, tp.Tracer("traceapp"), d)
	if err != nil {
		_ = shutdown()
		return err
	}
	if err := shutdown(); err != nil {
		return fmt.Errorf("exporting the span to %s: %w", o.otlp, err)
	}
	if err := d.exit(); err != nil {
		return err
	}
	res.DemoPID = d.pid
	line, err := json.Marshal(res)
	if err != nil {
		return err
	}
	_, err = fmt.Printf("%s\n", line)
	return err
}

// handle serves the one request: the server span and the demo's two steps.
func handle(ctx context.Context, tracer trace.Tracer, d *demo) (result, error) {
	start := time.Now()
	ctx, span := tracer.Start(ctx, "GET /checkout",
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(start),
		trace.WithAttributes(
			attribute.String("http.request.method", "GET"),
			attribute.String("url.path", "/checkout"),
			attribute.String("http.route", "/checkout"),
		))
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	tp := carrier.Get("traceparent")
	if tp == "" {
		span.End()
		return result{}, errors.New("the propagator produced no traceparent")
	}

	err := d.do(ctx, "req "+tp, "req done")
	if err == nil {
		err = d.do(ctx, fmt.Sprintf("sql %s /*traceparent='%s'*/", query, tp), "sql done")
	}
	end := time.Now()
	span.End(trace.WithTimestamp(end))
	if err != nil {
		return result{}, err
	}
	sc := span.SpanContext()
	return result{
		TraceID:       sc.TraceID().String(),
		SpanID:        sc.SpanID().String(),
		StartUnixNano: start.UnixNano(),
		EndUnixNano:   end.UnixNano(),
	}, nil
}

// demo is the running demo program, driven over its stdin.
type demo struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan string
	exited chan struct{}
	pid    int
}

func startDemo(ctx context.Context, path string) (*demo, error) {
	cmd := exec.Command(path)
	cmd.Stderr = os.Stderr
	// The demo must not outlive traceapp.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the demo: %w", err)
	}
	d := &demo{cmd: cmd, in: in, lines: make(chan string, 16), exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			d.lines <- sc.Text()
		}
		close(d.lines)
		// Wait closes the stdout pipe: call it once everything is read.
		_ = cmd.Wait()
		close(d.exited)
	}()
	line, err := d.expect(ctx, "ready ")
	if err != nil {
		d.kill()
		return nil, err
	}
	if _, err := fmt.Sscanf(line, "ready %d", &d.pid); err != nil {
		d.kill()
		return nil, fmt.Errorf("the demo said %q, want \"ready PID\"", line)
	}
	return d, nil
}

// expect waits for the demo's next line, which must start with prefix.
func (d *demo) expect(ctx context.Context, prefix string) (string, error) {
	select {
	case line, ok := <-d.lines:
		if !ok {
			return "", fmt.Errorf("the demo exited while traceapp waited for %q", prefix)
		}
		if !strings.HasPrefix(line, prefix) {
			return "", fmt.Errorf("the demo said %q, want %q", line, prefix)
		}
		return line, nil
	case <-ctx.Done():
		return "", fmt.Errorf("waiting for the demo to say %q: %w", prefix, ctx.Err())
	}
}

// do sends one command and waits for its answer.
func (d *demo) do(ctx context.Context, command, answer string) error {
	if _, err := fmt.Fprintln(d.in, command); err != nil {
		return fmt.Errorf("writing to the demo: %w", err)
	}
	_, err := d.expect(ctx, answer)
	return err
}

// waitProbes polls the demo's semaphores until one is raised.
func (d *demo) waitProbes(ctx context.Context) error {
	for {
		if _, err := fmt.Fprintln(d.in, "sem"); err != nil {
			return fmt.Errorf("writing to the demo: %w", err)
		}
		line, err := d.expect(ctx, "sem ")
		if err != nil {
			return fmt.Errorf("waiting for a tracer to attach: %w", err)
		}
		for _, f := range strings.Fields(line)[1:] {
			if f != "0" {
				return nil
			}
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("no tracer raised the demo's semaphores (%s): %w", line, ctx.Err())
		}
	}
}

// exit tells the demo to exit and waits for it.
func (d *demo) exit() error {
	_, _ = fmt.Fprintln(d.in, "exit")
	_ = d.in.Close()
	select {
	case <-d.exited:
		if !d.cmd.ProcessState.Success() {
			return fmt.Errorf("the demo: %s", d.cmd.ProcessState)
		}
		return nil
	case <-time.After(10 * time.Second):
		d.kill()
		return errors.New("the demo did not exit within 10s")
	}
}

// kill ends the demo if it still runs.
func (d *demo) kill() {
	select {
	case <-d.exited:
	default:
		_ = d.cmd.Process.Kill()
		for range d.lines { // unblock the reader
		}
		<-d.exited
	}
}

// errorList collects errors reported from other goroutines.
type errorList struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorList) add(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *errorList) err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return errors.Join(l.errs...)
}
