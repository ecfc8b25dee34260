// Command soak runs the built collector (otelcol-uprobe) for minutes against
// programs that churn, as production does: a C program making spans at a
// steady rate (a USDT pair on 5-byte nops, at 100k spans/s, and a function
// span at a lower rate), a Go program whose probed function grows its
// stacks and moves between threads, short-lived Go processes started and
// exiting in loops side by side (-churners), and a C program that starts
// and ends threads. The collector exports spans, metrics and its own
// telemetry over OTLP/HTTP to a sink in this process, which counts them.
//
// Every sample interval it records the collector's RSS, goroutines (through
// the pprof extension), open file descriptors and the entries of the
// engine's goroutine-state map; at the end it reports spans completed (the
// count of the kernel's duration histograms), delivered and dropped (the
// receiver's named counters, by reason), and fails when they do not add
// up exactly or when anything kept growing after the warm-up. With -out it
// writes DIR/soak.json and the soak section of DIR/benchmarks.md. It needs
// root.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"golang.org/x/sync/errgroup"

	"github.com/otel-uprobe/uprobereceiver/harness/benchdoc"
	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

func main() {
	var s settings
	flag.StringVar(&s.distro, "distro", "", "the collector binary (make build)")
	flag.DurationVar(&s.duration, "duration", 10*time.Minute, "how long to run")
	flag.DurationVar(&s.every, "every", 10*time.Second, "sample interval")
	flag.IntVar(&s.rate, "rate", 100_000, "spans per second the USDT C program makes (steady:start to steady:done)")
	flag.IntVar(&s.functionRate, "function-rate", 5_000, "spans per second the C program with a function span (push entry, uretprobe) makes")
	flag.IntVar(&s.churners, "churners", 3, "loops starting short-lived Go processes side by side")
	flag.StringVar(&s.out, "out", "", "directory for soak.json and the soak section of benchmarks.md")
	flag.Parse()
	testutil.RequireRootOrExit()
	if s.distro == "" {
		fmt.Fprintln(os.Stderr, "soak: -distro is required")
		os.Exit(2)
	}
	res, err := run(s)
	if res != nil {
		b, _ := json.MarshalIndent(res, "", "  ")
		fmt.Println(string(b))
		if s.out != "" {
			if werr := write(s.out, res); werr != nil {
				err = errors.Join(err, werr)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

type settings struct {
	distro   string
	duration time.Duration
	every    time.Duration
	rate     int
	// functionRate is the rate of the function span (entry and kernel
	// return probe), whose traps cost 5 µs each where PTI is on.
	functionRate int
	// churners is the number of loops that start short-lived processes
	// side by side: one at a time leaves a CPU idle between them.
	churners int
	out      string
}

// Sample is the collector's state at one time.
type Sample struct {
	Seconds    float64 `json:"seconds"`
	Spans      int64   `json:"spans_delivered"`
	RSSMiB     float64 `json:"rss_mib"`
	Goroutines int     `json:"goroutines"`
	FDs        int     `json:"fds"`
	GoStates   int     `json:"go_states"`
	// Load is the machine's load average over the last minute, the soak's
	// own programs included.
	Load float64 `json:"load_average"`
}

// Result is what a soak run measured.
type Result struct {
	Machine      string   `json:"machine"`
	Seconds      float64  `json:"seconds"`
	Fired        int64    `json:"spans_fired"`
	Delivered    int64    `json:"spans_delivered"`
	Lost         int64    `json:"spans_lost"`
	RatePerSec   float64  `json:"spans_per_second"`
	Processes    int64    `json:"short_lived_processes"`
	Threads      int64    `json:"short_lived_threads"`
	Samples      []Sample `json:"samples"`
	Warm         Sample   `json:"warm"`
	End          Sample   `json:"end"`
	Growth       []string `json:"growth,omitempty"`
	RatioTooLow  bool     `json:"rate_below_target,omitempty"`
	TargetRate   int      `json:"target_rate"`
	USDTRate     int      `json:"usdt_rate"`
	FunctionRate int      `json:"function_rate"`
	Churners     int      `json:"process_churners"`
	// Dropped are the receiver's named drops of completed spans
	// (receiver_uprobe_spans_dropped, by drop.reason), ring_full among
	// them (the same spans as Lost); Malformed the records that did not
	// decode; Pipeline what the collector's exporter failed to send or
	// queue (otelcol_exporter_send_failed_spans and _enqueue_failed_spans).
	Dropped   map[string]int64 `json:"spans_dropped"`
	Malformed int64            `json:"records_malformed"`
	Pipeline  int64            `json:"pipeline_failed"`
	// Accepted is what the collector's telemetry says its pipeline took
	// from the receiver (otelcol_receiver_accepted_spans): the sink's
	// spans and the exporter's failures, when its last push arrived.
	Accepted     int64 `json:"receiver_accepted"`
	DeliveryDiff int64 `json:"fired_minus_delivered_minus_dropped"`
}

func run(s settings) (*Result, error) {
	dir, err := os.MkdirTemp("", "uprobe-soak")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	root := testutil.RepoRoot()
	steady := filepath.Join(dir, "steady")
	hardening := filepath.Join(dir, "hardening")
	goprog := filepath.Join(dir, "goprog")
	for _, c := range [][]string{
		{"gcc", "-O2", "-o", steady, filepath.Join(root, "testdata", "soak", "steady.c")},
		{"gcc", "-O2", "-pthread", "-o", hardening, filepath.Join(root, "testdata", "hardening", "hardening.c")},
	} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building %s: %w\n%s", filepath.Base(c[len(c)-2]), err, out)
		}
	}
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", goprog, ".")
	build.Dir = filepath.Join(root, "testdata", "goprog")
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building goprog: %w\n%s", err, out)
	}

	sk := &sink{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: sk}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	pprofAddr, err := freePort()
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "collector.yaml")
	if err := os.WriteFile(cfgPath, []byte(collectorConfig(steady, goprog, hardening, ln.Addr().String(), pprofAddr)), 0o644); err != nil {
		return nil, err
	}

	before, err := mapIDs()
	if err != nil {
		return nil, err
	}
	col, err := testutil.RunCollector(exec.Command(s.distro, "--config", cfgPath))
	if err != nil {
		return nil, err
	}
	defer func() { _ = col.Stop(time.Minute) }()
	goStates, err := newMapsSince(before, "go_states")
	if err != nil {
		return nil, err
	}

	res := &Result{Machine: machine(), TargetRate: s.rate + s.functionRate, USDTRate: s.rate, FunctionRate: s.functionRate, Churners: max(1, s.churners)}
	ctx, cancel := context.WithTimeout(context.Background(), s.duration)
	defer cancel()
	var g errgroup.Group
	var processes, threads atomic.Int64
	// The rate comes from USDT probes on 5-byte nops, which the kernel
	// turns into calls (Linux 6.17): one thread makes 100k spans/s with a
	// third of a CPU. A function span (push entry, kernel return probe)
	// at a lower rate keeps the uprobe path in the soak: its traps cost
	// 5 µs each where PTI is on (AMD hosts).
	g.Go(func() error { return paceC(ctx, steady, "pace", s.rate) })
	g.Go(func() error { return paceC(ctx, steady, "work", s.functionRate) })
	g.Go(func() error { return loopGo(ctx, goprog) })
	for range max(1, s.churners) {
		g.Go(func() error { return churnProcesses(ctx, goprog, &processes) })
	}
	g.Go(func() error { return churnThreads(ctx, hardening, &threads) })

	start := time.Now()
	sample := func() Sample {
		return Sample{
			Seconds:    time.Since(start).Seconds(),
			Spans:      sk.spans.Load(),
			RSSMiB:     rssMiB(col.PID()),
			Goroutines: goroutines(pprofAddr),
			FDs:        fds(col.PID()),
			GoStates:   entries(goStates),
			Load:       loadAverage(),
		}
	}
	res.Samples = append(res.Samples, sample())
	tick := time.NewTicker(s.every)
	defer tick.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
			res.Samples = append(res.Samples, sample())
			fmt.Fprintf(os.Stderr, "soak: %+v\n", res.Samples[len(res.Samples)-1])
		}
	}
	if err := g.Wait(); err != nil {
		return res, err
	}
	res.Seconds = time.Since(start).Seconds()
	res.Processes, res.Threads = processes.Load(), threads.Load()
	// Stop the collector: it drains the ring and sends its last metrics.
	_ = col.Stop(time.Minute)
	var errs []error
	res.End = res.Samples[len(res.Samples)-1]
	res.Delivered = sk.spans.Load()
	res.Fired, res.Lost = sk.completed(), sk.lost()
	res.Dropped, res.Malformed, res.Pipeline, res.Accepted = sk.drops()
	if res.Accepted != res.Delivered+res.Pipeline {
		errs = append(errs, fmt.Errorf("the collector's telemetry says its pipeline accepted %d spans, the sink got %d and the exporter failed %d: its last push is missing",
			res.Accepted, res.Delivered, res.Pipeline))
	}
	var dropped int64
	for _, n := range res.Dropped {
		dropped += n
	}
	if res.Dropped["ring_full"] != res.Lost {
		errs = append(errs, fmt.Errorf("uprobe.events.lost says %d records were lost, receiver_uprobe_spans_dropped{ring_full} %d", res.Lost, res.Dropped["ring_full"]))
	}
	res.DeliveryDiff = res.Fired - res.Delivered - dropped - res.Malformed - res.Pipeline
	res.RatePerSec = float64(res.Delivered) / res.Seconds
	res.RatioTooLow = res.RatePerSec < float64(s.rate)*0.95
	res.Warm, res.Growth = growth(res.Samples)
	if res.RatioTooLow {
		errs = append(errs, fmt.Errorf("delivered %.0f spans/s, below the %d asked for", res.RatePerSec, s.rate))
	}
	if len(res.Growth) > 0 {
		errs = append(errs, fmt.Errorf("grew after warm-up: %s", strings.Join(res.Growth, "; ")))
	}
	if res.DeliveryDiff != 0 {
		errs = append(errs, fmt.Errorf("fired %d spans, delivered %d, dropped %d (%v), %d malformed records and %d failed in the pipeline: %d unaccounted for",
			res.Fired, res.Delivered, dropped, res.Dropped, res.Malformed, res.Pipeline, res.DeliveryDiff))
	}
	return res, errors.Join(errs...)
}

// collectorConfig traces the three programs and exports to the sink.
func collectorConfig(steady, goprog, hardening, sink, pprof string) string {
	return fmt.Sprintf(`receivers:
  uprobe:
    collection_interval: 1s
    targets:
      - path: %s
        spans:
          - name: steady
            entry: usdt:steady:start
            exit: usdt:steady:done
            attributes: {i: arg0}
            exit_attributes: {r: arg0}
          - name: work
            function: work
            attributes: {a: arg0}
            exit_attributes: {ret: retval}
      - path: %s
        spans:
          - name: go.probed
            function: main.Probed
            attributes: {n: arg0, s: "arg1:gostring"}
            exit_attributes: {ret: retval}
      - path: %s
        spans:
          - name: four
            function: four
            attributes: {a: "+0(arg0):bytes[16]"}
extensions:
  pprof:
    endpoint: %s
processors:
  batch:
    send_batch_size: 8192
    timeout: 200ms
exporters:
  otlphttp:
    endpoint: http://%s
    compression: none
    retry_on_failure: {enabled: false}
    sending_queue: {enabled: true, queue_size: 1000}
service:
  extensions: [pprof]
  telemetry:
    # The collector's own counters (the receiver's named drops, the
    # exporter's failures) go to the sink too; the last push is at
    # shutdown, after the receiver's last drain.
    metrics:
      level: normal
      readers:
        - periodic:
            interval: 1000
            exporter:
              otlp:
                protocol: http/protobuf
                endpoint: http://%s/v1/metrics
  pipelines:
    traces: {receivers: [uprobe], processors: [batch], exporters: [otlphttp]}
    metrics: {receivers: [uprobe], exporters: [otlphttp]}
`, steady, goprog, hardening, pprof, sink, sink)
}

// paceC makes the C program run command ("pace": the USDT span, "work":
// the function span) at rate per second, one second at a time, until ctx
// ends.
func paceC(ctx context.Context, path, command string, rate int) error {
	p, err := start(path)
	if err != nil {
		return err
	}
	defer p.stop()
	for ctx.Err() == nil {
		fmt.Fprintf(p.in, "%s %d 1\n", command, rate)
		if _, err := p.expect("paced "); err != nil {
			return err
		}
	}
	return nil
}

// everySecond runs fn once a second until ctx ends.
func everySecond(ctx context.Context, fn func() error) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if err := fn(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// loopGo makes the Go program run its probed function 2,000 times a second
// on fresh goroutines (its returns are single-stepped: about 11 µs each).
func loopGo(ctx context.Context, path string) error {
	p, err := start(path)
	if err != nil {
		return err
	}
	defer p.stop()
	return everySecond(ctx, func() error {
		fmt.Fprintln(p.in, "run 2000 50")
		_, err := p.expect("done ")
		return err
	})
}

// churnProcesses starts short-lived Go processes, each making one span.
func churnProcesses(ctx context.Context, path string, n *atomic.Int64) error {
	for ctx.Err() == nil {
		cmd := exec.Command(path, "once")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("short-lived process: %w: %s", err, out)
		}
		n.Add(1)
	}
	return nil
}

// churnThreads makes the C program start and end threads, each making a span.
func churnThreads(ctx context.Context, path string, n *atomic.Int64) error {
	p, err := start(path)
	if err != nil {
		return err
	}
	defer p.stop()
	return everySecond(ctx, func() error {
		fmt.Fprintln(p.in, "threads 100")
		if _, err := p.expect("threads "); err != nil {
			return err
		}
		n.Add(100)
		return nil
	})
}

// program is a traced program driven over its stdin.
type program struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
}

func start(path string) (*program, error) {
	cmd := exec.Command(path)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &program{cmd: cmd, in: in, lines: make(chan string, 4)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	if _, err := p.expect("ready"); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *program) expect(prefix string) (string, error) {
	select {
	case line, ok := <-p.lines:
		if !ok {
			return "", fmt.Errorf("%s exited", p.cmd.Path)
		}
		if !strings.HasPrefix(line, prefix) {
			return "", fmt.Errorf("%s said %q, want %q", p.cmd.Path, line, prefix)
		}
		return line, nil
	case <-time.After(time.Minute):
		return "", fmt.Errorf("%s did not say %q within a minute", p.cmd.Path, prefix)
	}
}

func (p *program) stop() {
	fmt.Fprintln(p.in, "exit")
	p.in.Close()
	_ = p.cmd.Wait()
}

// sink counts what the collector exports over OTLP/HTTP.
type sink struct {
	spans atomic.Int64
	mu    sync.Mutex
	done  map[string]int64 // uprobe.span.duration counts, by span.name
	lostN map[string]int64 // uprobe.events.lost, by probe.name
	// The collector's own counters, by metric name and attributes.
	self map[string]int64
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 256<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	switch r.URL.Path {
	case "/v1/traces":
		req := ptraceotlp.NewExportRequest()
		if err := req.UnmarshalProto(body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.spans.Add(int64(req.Traces().SpanCount()))
		resp, _ := ptraceotlp.NewExportResponse().MarshalProto()
		_, _ = w.Write(resp)
	case "/v1/metrics":
		req := pmetricotlp.NewExportRequest()
		if err := req.UnmarshalProto(body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.keep(req)
		resp, _ := pmetricotlp.NewExportResponse().MarshalProto()
		_, _ = w.Write(resp)
	default:
		http.NotFound(w, r)
	}
}

// keep remembers the latest cumulative count of completed spans and of
// lost records.
func (s *sink) keep(req pmetricotlp.ExportRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		s.done, s.lostN, s.self = map[string]int64{}, map[string]int64{}, map[string]int64{}
	}
	rms := req.Metrics().ResourceMetrics()
	for i := range rms.Len() {
		sms := rms.At(i).ScopeMetrics()
		for j := range sms.Len() {
			ms := sms.At(j).Metrics()
			for k := range ms.Len() {
				m := ms.At(k)
				if m.Name() == "uprobe.span.duration" {
					dps := m.ExponentialHistogram().DataPoints()
					for d := range dps.Len() {
						name, _ := dps.At(d).Attributes().Get("span.name")
						s.done[name.Str()] = int64(dps.At(d).Count())
					}
					continue
				}
				if strings.HasPrefix(m.Name(), "otelcol") && m.Type() == pmetric.MetricTypeSum {
					dps := m.Sum().DataPoints()
					for d := range dps.Len() {
						s.self[m.Name()+" "+attrKey(dps.At(d).Attributes())] = dps.At(d).IntValue()
					}
					continue
				}
				if m.Name() != "uprobe.events.lost" {
					continue
				}
				into := s.lostN
				dps := m.Sum().DataPoints()
				for d := range dps.Len() {
					name, _ := dps.At(d).Attributes().Get("probe.name")
					into[name.Str()] = dps.At(d).IntValue()
				}
			}
		}
	}
}

// completed is the number of spans fired: the spans the kernel completed
// (the count of their duration histograms), recorded or not.
func (s *sink) completed() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, v := range s.done {
		n += v
	}
	return n
}

// attrKey writes attributes as "k=v,k=v" in key order.
func attrKey(m pcommon.Map) string {
	var kv []string
	for k, v := range m.All() {
		kv = append(kv, k+"="+v.AsString())
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}

// drops returns the receiver's named drops by reason, its malformed
// records, the spans the exporter failed to send or to queue and those the
// pipeline accepted from the receiver, from the collector's last
// self-telemetry push.
func (s *sink) drops() (byReason map[string]int64, malformed, pipeline, accepted int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	byReason = map[string]int64{}
	for k, v := range s.self {
		name, attrs, _ := strings.Cut(k, " ")
		switch name {
		case "otelcol_receiver_uprobe_spans_dropped":
			for _, a := range strings.Split(attrs, ",") {
				if r, ok := strings.CutPrefix(a, "drop.reason="); ok {
					byReason[r] += v
				}
			}
		case "otelcol_receiver_uprobe_records_malformed":
			malformed += v
		case "otelcol_exporter_send_failed_spans", "otelcol_exporter_enqueue_failed_spans":
			pipeline += v
		case "otelcol_receiver_accepted_spans":
			accepted += v
		}
	}
	return byReason, malformed, pipeline, accepted
}

func (s *sink) lost() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, v := range s.lostN {
		n += v
	}
	return n
}

// growth compares the samples after the warm-up (the second fifth of the
// run) with the last fifth, by their medians, which in-flight exports and
// open spans make noisy; it returns the sample that ends the warm-up and
// what grew: RSS by more than 20% and 16 MiB, goroutines by more than 10,
// descriptors by more than 5, goroutine states by more than 64.
func growth(samples []Sample) (Sample, []string) {
	n := len(samples)
	warmStart, warmEnd := n/5, max(n/5+1, 2*n/5)
	warm := samples[warmStart]
	a, b := samples[warmStart:warmEnd], samples[max(0, n-max(1, n/5)):]
	median := func(ss []Sample, f func(Sample) float64) float64 {
		v := make([]float64, len(ss))
		for i, s := range ss {
			v[i] = f(s)
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	var out []string
	check := func(what string, f func(Sample) float64, grew func(before, after float64) bool) {
		before, after := median(a, f), median(b, f)
		if grew(before, after) {
			out = append(out, fmt.Sprintf("%s %.1f → %.1f", what, before, after))
		}
	}
	check("RSS (MiB)", func(s Sample) float64 { return s.RSSMiB }, func(x, y float64) bool { return y > x*1.2 && y > x+16 })
	check("goroutines", func(s Sample) float64 { return float64(s.Goroutines) }, func(x, y float64) bool { return y > x+10 })
	check("file descriptors", func(s Sample) float64 { return float64(s.FDs) }, func(x, y float64) bool { return y > x+5 })
	check("goroutine states", func(s Sample) float64 { return float64(s.GoStates) }, func(x, y float64) bool { return y > x+64 })
	return warm, out
}

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// mapIDs returns the ids of every BPF map now loaded.
func mapIDs() (map[ebpf.MapID]bool, error) {
	ids := map[ebpf.MapID]bool{}
	for id := ebpf.MapID(0); ; {
		next, err := ebpf.MapGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			return ids, nil
		}
		if err != nil {
			return nil, fmt.Errorf("listing BPF maps: %w", err)
		}
		ids[next], id = true, next
	}
}

// newMapsSince opens the maps called name loaded since before: the ones of
// the collector just started.
func newMapsSince(before map[ebpf.MapID]bool, name string) ([]*ebpf.Map, error) {
	now, err := mapIDs()
	if err != nil {
		return nil, err
	}
	var out []*ebpf.Map
	for id := range now {
		if before[id] {
			continue
		}
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue
		}
		if info, err := m.Info(); err == nil && info.Name == name {
			out = append(out, m)
			continue
		}
		m.Close()
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the collector's %s map was not found", name)
	}
	return out, nil
}

// entries counts the keys of maps, without reading their values.
func entries(maps []*ebpf.Map) int {
	n := 0
	for _, m := range maps {
		key, next := make([]byte, m.KeySize()), make([]byte, m.KeySize())
		for err := m.NextKey(nil, next); err == nil; err = m.NextKey(key, next) {
			n++
			key, next = next, key
		}
	}
	return n
}

func goroutines(addr string) int {
	resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "goroutine profile: total ")))
	if err != nil {
		return -1
	}
	return n
}

// loadAverage returns the machine's load average over the last minute.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	var l float64
	fmt.Sscan(string(b), &l)
	return l
}

func fds(pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return -1
	}
	return len(ents)
}

func rssMiB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kib float64
			fmt.Sscanf(strings.TrimSpace(v), "%f", &kib)
			return kib / 1024
		}
	}
	return 0
}

func machine() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "model name"); ok {
			return fmt.Sprintf("%s, %d CPUs", strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":")), runtime.NumCPU())
		}
	}
	return fmt.Sprintf("%d CPUs", runtime.NumCPU())
}

// write writes DIR/soak.json and replaces the soak section of
// DIR/benchmarks.md (between its soak markers, appended when missing).
func write(dir string, res *Result) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "soak.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	mdPath := filepath.Join(dir, "benchmarks.md")
	old, _ := os.ReadFile(mdPath)
	return os.WriteFile(mdPath, []byte(benchdoc.ReplaceSoak(string(old), Markdown(res))), 0o644)
}

// Markdown is the soak section of docs/benchmarks.md.
func Markdown(r *Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Soak (`make soak`)\n\n")
	fmt.Fprintf(&b, "%s, %.0f s: a C program making %d spans/s from a USDT pair on 5-byte nops (the kernel's optimized uprobe path) and %d spans/s from a function span (push entry, kernel return probe), a Go program on fresh goroutines with growing stacks (2,000 spans/s), %d short-lived Go processes (%d loops side by side) and %d short-lived threads, all traced by the distro exporting over OTLP/HTTP. Every span the kernel completed (the count of uprobe.span.duration) is delivered or counted dropped by the receiver (receiver_uprobe_spans_dropped, by reason).\n\n",
		r.Machine, r.Seconds, r.USDTRate, r.FunctionRate, r.Processes, r.Churners, r.Threads)
	var reasons []string
	var dropped int64
	for k, v := range r.Dropped {
		reasons = append(reasons, fmt.Sprintf("%s %d", k, v))
		dropped += v
	}
	sort.Strings(reasons)
	fmt.Fprintf(&b, "| spans fired | delivered | dropped (by reason) | fired − delivered − dropped | delivered per second |\n|---|---|---|---|---|\n")
	byReason := ""
	if len(reasons) > 0 {
		byReason = " (" + strings.Join(reasons, ", ") + ")"
	}
	fmt.Fprintf(&b, "| %d | %d | %d%s | %d | %.0f |\n\n", r.Fired, r.Delivered, dropped, byReason, r.DeliveryDiff, r.RatePerSec)
	fmt.Fprintf(&b, "| | start | after warm-up (%.0f s) | end |\n|---|---|---|---|\n", r.Warm.Seconds)
	first := r.Samples[0]
	fmt.Fprintf(&b, "| collector RSS (MiB) | %.1f | %.1f | %.1f |\n", first.RSSMiB, r.Warm.RSSMiB, r.End.RSSMiB)
	fmt.Fprintf(&b, "| goroutines | %d | %d | %d |\n", first.Goroutines, r.Warm.Goroutines, r.End.Goroutines)
	fmt.Fprintf(&b, "| file descriptors | %d | %d | %d |\n", first.FDs, r.Warm.FDs, r.End.FDs)
	fmt.Fprintf(&b, "| goroutine states (BPF map entries) | %d | %d | %d |\n", first.GoStates, r.Warm.GoStates, r.End.GoStates)
	fmt.Fprintf(&b, "| machine load average, 1 min (the soak's own programs included) | %.1f | %.1f | %.1f |\n\n", first.Load, r.Warm.Load, r.End.Load)
	if len(r.Growth) == 0 {
		fmt.Fprintf(&b, "Nothing grew after the warm-up.\n")
	} else {
		fmt.Fprintf(&b, "Grew after the warm-up: %s.\n", strings.Join(r.Growth, "; "))
	}
	return b.String()
}
