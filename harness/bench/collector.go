//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	uprobereceiver "github.com/otel-uprobe/uprobereceiver/receiver"
)

// Collector is the built collector (receiver and a debug exporter at basic
// verbosity, one process) under a steady flood of spans from one probed
// thread, against the pdata floor measured in the same rounds.
type Collector struct {
	// CPU is the CPU the collector and the standalone floor were pinned
	// to, WorkloadCPU the probed program's; -1 when not pinned.
	CPU         int `json:"cpu"`
	WorkloadCPU int `json:"workload_cpu"`
	// FlushInterval is the receiver's flush_interval in the run ("" for
	// its default).
	FlushInterval string `json:"flush_interval,omitempty"`
	// Idle is the collector's cost while nothing is traced.
	IdleSeconds        float64          `json:"idle_seconds"`
	IdleCPUMsPerSecond float64          `json:"idle_cpu_ms_per_second"`
	IdleSwitchesPerSec float64          `json:"idle_context_switches_per_second"`
	Rounds             []CollectorRound `json:"rounds"`
	NsPerSpan          float64          `json:"ns_per_span"`
	FloorNsPerSpan     float64          `json:"floor_standalone_ns_per_span"`
	Ratio              float64          `json:"ratio"`
	RatioMin           float64          `json:"ratio_min"`
	RatioMax           float64          `json:"ratio_max"`
	FloorInProcess     *PdataFloor      `json:"floor_in_process,omitempty"`
	// CollectorFloorNsPerSpan is the median of the rounds' collector
	// floor: the same collector with the spanfloor receiver, which only
	// builds the same spans with pdata, at the round's rate (0 when not
	// measured). CollectorFloorRatio is its median ratio to the
	// standalone floor: what a receiver that cost nothing would reach.
	CollectorFloorNsPerSpan float64 `json:"collector_floor_ns_per_span,omitempty"`
	CollectorFloorRatio     float64 `json:"collector_floor_ratio,omitempty"`
	// VsCollectorFloor is the median of the rounds' ratios of the
	// collector to the collector floor measured next to it (the issue's
	// goal: ≤ 1.10), with their range.
	VsCollectorFloor    float64 `json:"vs_collector_floor,omitempty"`
	VsCollectorFloorMin float64 `json:"vs_collector_floor_min,omitempty"`
	VsCollectorFloorMax float64 `json:"vs_collector_floor_max,omitempty"`
	// FloorSpansPerDrain is how many spans the spanfloor receiver
	// delivers per wakeup at most: what a quarter of the receiver's ring
	// buffer holds of the benchmark's records, when the receiver drains
	// (FloorRecordBytes each, header included).
	FloorSpansPerDrain int `json:"floor_spans_per_drain,omitempty"`
	FloorRecordBytes   int `json:"floor_record_bytes,omitempty"`
	// FloorProfile is the collector floor's profile at the median round's
	// rate, beside the collector's.
	FloorProfile         *Profile `json:"floor_profile,omitempty"`
	ProcessesStartedPerS float64  `json:"machine_processes_started_per_second"`
	Profile              *Profile `json:"profile,omitempty"`
	// Commit is the source the collector was built from, when known; Date
	// when it was measured.
	Commit string `json:"commit,omitempty"`
	Date   string `json:"date,omitempty"`
}

// CollectorRound is one flood: the collector's CPU over the delivered
// spans, and the standalone floor measured just before it.
type CollectorRound struct {
	Seconds         float64     `json:"seconds"`
	Fired           int64       `json:"fired"`
	Delivered       int64       `json:"delivered"`
	SpansPerSec     float64     `json:"spans_per_second"`
	CPUSeconds      float64     `json:"collector_cpu_seconds"`
	NsPerSpan       float64     `json:"ns_per_span"`
	SwitchesPerSpan float64     `json:"context_switches_per_1000_spans"`
	Floor           *PdataFloor `json:"floor"`
	Ratio           float64     `json:"ratio"`
	// CollectorFloorNsPerSpan is the collector floor's CPU per delivered
	// span measured just after the flood, at its rate (0: not measured);
	// VsCollectorFloor the collector's ns per span over it.
	CollectorFloorNsPerSpan float64 `json:"collector_floor_ns_per_span,omitempty"`
	VsCollectorFloor        float64 `json:"vs_collector_floor,omitempty"`
}

// collectorConfig is the measured pipeline: the receiver with its defaults
// and the debug exporter at basic verbosity, as a new user would write it;
// the pprof extension and the collector's own metrics (Prometheus, on
// 127.0.0.1) are how the benchmark looks inside.
func collectorConfig(workload, flushInterval, pprofAddr string, promPort int) string {
	flush := ""
	if flushInterval != "" {
		flush = "\n    flush_interval: " + flushInterval
	}
	return fmt.Sprintf(`receivers:
  uprobe:%s
    targets:
      - path: %s
        spans:
          - name: probed
            function: probed
            attributes: {a: arg0}
            exit_attributes: {ret: retval}
`, flush, workload) + serviceConfig(pprofAddr, promPort, "uprobe", "traces", "metrics")
}

// serviceConfig is what both measured collectors share: the debug exporter
// at basic verbosity, the pprof extension, the self-metrics for Prometheus
// on 127.0.0.1, and a pipeline of each signal from receiver to the exporter.
func serviceConfig(pprofAddr string, promPort int, receiver string, signals ...string) string {
	var pipelines strings.Builder
	for _, sig := range signals {
		fmt.Fprintf(&pipelines, "    %s: {receivers: [%s], exporters: [debug]}\n", sig, receiver)
	}
	return fmt.Sprintf(`exporters:
  debug:
    verbosity: basic
extensions:
  pprof:
    endpoint: %s
service:
  extensions: [pprof]
  telemetry:
    metrics:
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: %d
  pipelines:
`, pprofAddr, promPort) + pipelines.String()
}

// floorConfig is the collector floor's pipeline: the spanfloor receiver
// delivering rate spans per second, every flush interval as the uprobe
// receiver does, into the same debug exporter, with the same extension and
// self-metrics.
func floorConfig(rate int, flushInterval string, perDrain int, pprofAddr string, promPort int) string {
	return fmt.Sprintf(`receivers:
  spanfloor:
    rate: %d
    interval: %s
    max_spans_per_drain: %d
`, rate, flushInterval, perDrain) + serviceConfig(pprofAddr, promPort, "spanfloor", "traces")
}

// benchRecordBytes is the size in the receiver's ring buffer of one span
// record of the benchmark's span (an 8-byte entry value, an 8-byte exit
// value, the trailer), with the ring's 8-byte header and alignment.
const benchRecordBytes = (8 + 8 + 8 + bpfobj.RecordTrailerSize + 7) &^ 7

// floorSpansPerDrain returns how many of the benchmark's records a
// quarter of the receiver's default ring buffer holds: the receiver drains
// when the ring is that full (tracer.WaitRecords), before its
// flush_interval at the benchmark's rates, and the collector floor
// delivers as many spans per wakeup.
func floorSpansPerDrain() int {
	size := uprobereceiver.NewFactory().CreateDefaultConfig().(*uprobereceiver.Config).RingBufferSize
	return size / 4 / benchRecordBytes
}

// collectorProc is a running distro.
type collectorProc struct {
	receiver string // whose accepted spans count
	col      *testutil.Collector
	pid      int
	pprof    string // host:port of the pprof extension
	promPort int
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// pinned returns the command line that runs args on cpu (all CPUs when cpu < 0).
func pinned(cpu int, args ...string) []string {
	if cpu < 0 {
		return args
	}
	return append([]string{"taskset", "-c", strconv.Itoa(cpu)}, args...)
}

// startCollector runs the distro with cfg on cpu and waits until it is ready.
func startCollector(distro, dir, cfgName, receiver string, cpu int, cfg func(pprofAddr string, promPort int) string) (*collectorProc, error) {
	pp, err := freePort()
	if err != nil {
		return nil, err
	}
	prom, err := freePort()
	if err != nil {
		return nil, err
	}
	c := &collectorProc{receiver: receiver, pprof: fmt.Sprintf("127.0.0.1:%d", pp), promPort: prom}
	path := filepath.Join(dir, cfgName)
	if err := os.WriteFile(path, []byte(cfg(c.pprof, prom)), 0o644); err != nil {
		return nil, err
	}
	args := pinned(cpu, distro, "--config", path)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = runtimeDefaults()
	if c.col, err = testutil.RunCollector(cmd); err != nil {
		return nil, err
	}
	c.pid = c.col.PID()
	return c, nil
}

func (c *collectorProc) stop() {
	_ = c.col.Stop(time.Minute)
}

// usage is a process's CPU time (every thread, from its scheduler
// statistics) and context switches at one moment.
type usage struct {
	at       time.Time
	cpuNs    int64
	switches int64
}

// processUsage sums the scheduler statistics of every thread of pid. A
// thread that exits takes its time with it: the Go runtime keeps its threads.
func processUsage(pid int) (usage, error) {
	u := usage{at: time.Now()}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return u, err
	}
	for _, t := range tasks {
		base := fmt.Sprintf("/proc/%d/task/%s/", pid, t.Name())
		b, err := os.ReadFile(base + "schedstat")
		if err != nil {
			continue // the thread exited
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			u.cpuNs += ns
		}
		st, err := os.ReadFile(base + "status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				u.switches += n
			} else if v, ok := strings.CutPrefix(line, "nonvoluntary_ctxt_switches:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				u.switches += n
			}
		}
	}
	return u, nil
}

// accepted returns the spans the receiver (c.receiver) has handed to the
// pipeline, from the collector's own metrics.
func (c *collectorProc) accepted() (int64, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", c.promPort))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var n int64
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "otelcol_receiver_accepted_spans") || !strings.Contains(line, `receiver="`+c.receiver+`"`) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("reading %q: %w", line, err)
		}
		n += int64(v)
	}
	return n, sc.Err()
}

// waitDelivered waits until the pipeline took want spans more than from, or
// the count stopped moving for a second; it returns the count and the
// collector's usage just before the last look.
func (c *collectorProc) waitDelivered(from, want int64) (int64, usage, error) {
	var last int64 = -1
	still := time.Now()
	for {
		u, err := processUsage(c.pid)
		if err != nil {
			return 0, u, err
		}
		n, err := c.accepted()
		if err != nil {
			return 0, u, err
		}
		if n-from >= want {
			return n - from, u, nil
		}
		if n != last {
			last, still = n, time.Now()
		} else if time.Since(still) > time.Second {
			return n - from, u, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// processesStarted is the machine's count of processes started since boot.
func processesStarted() int64 {
	b, _ := os.ReadFile("/proc/stat")
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "processes "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// startWorkloadOn runs the workload pinned to cpu.
func startWorkloadOn(path string, cpu int) (*workload, error) {
	args := pinned(cpu, path)
	return startWorkloadCmd(exec.Command(args[0], args[1:]...))
}

// collectorCPU measures the distro under a flood at the full rate of one
// probed thread: rounds of (standalone floor, flood), then one flood under
// the CPU and allocation profilers.
func collectorCPU(s settings, res *Result, workloadPath, dir string) error {
	cpu, wcpu := -1, -1
	if runtime.NumCPU() >= 2 {
		cpu, wcpu = 1, 0
	}
	c := &Collector{CPU: cpu, WorkloadCPU: wcpu, FlushInterval: s.flushInterval, Commit: s.commit, Date: res.Date}
	res.Collector = c
	c.FloorInProcess = measureFloor("in-process", time.Duration(s.floorSeconds*float64(time.Second)))
	fmt.Fprintf(os.Stderr, "pdata floor in-process (GOMAXPROCS %d): %.0f ns/span, %.2f allocs/span\n",
		c.FloorInProcess.GOMAXPROCS, c.FloorInProcess.NsPerSpan, c.FloorInProcess.AllocsPerSpn)

	col, err := startCollector(s.distro, dir, "collector-cpu.yaml", "uprobe", cpu, func(pprofAddr string, prom int) string {
		return collectorConfig(workloadPath, s.flushInterval, pprofAddr, prom)
	})
	if err != nil {
		return err
	}
	defer col.stop()
	w, err := startWorkloadOn(workloadPath, wcpu)
	if err != nil {
		return err
	}
	defer w.stop()
	// One short flood first: the first spans pay for the process's
	// one-time work (resources, caches, heap growth).
	if _, _, err := w.pace(0, 0.5); err != nil {
		return err
	}
	if _, _, err := col.waitDelivered(0, 1<<62); err != nil {
		return err
	}

	u0, err := processUsage(col.pid)
	if err != nil {
		return err
	}
	time.Sleep(time.Duration(s.idleSeconds * float64(time.Second)))
	u1, err := processUsage(col.pid)
	if err != nil {
		return err
	}
	secs := u1.at.Sub(u0.at).Seconds()
	c.IdleSeconds = secs
	c.IdleCPUMsPerSecond = float64(u1.cpuNs-u0.cpuNs) / 1e6 / secs
	c.IdleSwitchesPerSec = float64(u1.switches-u0.switches) / secs
	fmt.Fprintf(os.Stderr, "collector idle: %.2f ms CPU/s, %.0f context switches/s\n", c.IdleCPUMsPerSecond, c.IdleSwitchesPerSec)

	procs0, t0 := processesStarted(), time.Now()
	c.FloorSpansPerDrain, c.FloorRecordBytes = floorSpansPerDrain(), benchRecordBytes
	var ratios, costs, floors, floorCosts, floorRatios, vsFloor []float64
	for r := 0; r < s.collectorRounds; r++ {
		floor, err := standaloneFloor(cpu, s.floorSeconds)
		if err != nil {
			return err
		}
		from, err := col.accepted()
		if err != nil {
			return err
		}
		u0, err := processUsage(col.pid)
		if err != nil {
			return err
		}
		fired, took, err := w.pace(0, s.floodSeconds)
		if err != nil {
			return err
		}
		delivered, u1, err := col.waitDelivered(from, fired)
		if err != nil {
			return err
		}
		row := CollectorRound{
			Seconds: took.Seconds(), Fired: fired, Delivered: delivered,
			SpansPerSec: float64(fired) / took.Seconds(),
			CPUSeconds:  float64(u1.cpuNs-u0.cpuNs) / 1e9,
			Floor:       floor,
		}
		if delivered > 0 {
			row.NsPerSpan = float64(u1.cpuNs-u0.cpuNs) / float64(delivered)
			row.SwitchesPerSpan = 1000 * float64(u1.switches-u0.switches) / float64(delivered)
			row.Ratio = row.NsPerSpan / floor.NsPerSpan
		}
		fmt.Fprintf(os.Stderr, "collector round %d: fired %d (%.0f/s) delivered %d, %.0f ns/span; standalone pdata floor %.0f ns/span (%.2f allocs); ratio %.2f\n",
			r+1, fired, row.SpansPerSec, delivered, row.NsPerSpan, floor.NsPerSpan, floor.AllocsPerSpn, row.Ratio)
		if delivered != fired {
			time.Sleep(5 * time.Second)
			later, _ := col.accepted()
			return fmt.Errorf("round %d: fired %d spans, the pipeline took %d (%d five seconds later)", r+1, fired, delivered, later-from)
		}
		if s.floorDistro != "" {
			ns, _, err := collectorFloor(s, c, dir, row.SpansPerSec, 0)
			if err != nil {
				return fmt.Errorf("round %d: collector floor: %w", r+1, err)
			}
			row.CollectorFloorNsPerSpan = ns
			row.VsCollectorFloor = row.NsPerSpan / ns
			floorCosts = append(floorCosts, ns)
			floorRatios = append(floorRatios, ns/floor.NsPerSpan)
			vsFloor = append(vsFloor, row.VsCollectorFloor)
			fmt.Fprintf(os.Stderr, "collector floor round %d: %.0f spans/s, %.0f ns/span, %.2f x the standalone floor; collector / collector floor %.2f\n", r+1, row.SpansPerSec, ns, ns/floor.NsPerSpan, row.VsCollectorFloor)
		}
		c.Rounds = append(c.Rounds, row)
		ratios = append(ratios, row.Ratio)
		costs = append(costs, row.NsPerSpan)
		floors = append(floors, floor.NsPerSpan)
	}
	c.ProcessesStartedPerS = float64(processesStarted()-procs0) / time.Since(t0).Seconds()
	c.NsPerSpan, c.FloorNsPerSpan, c.Ratio = median(costs), median(floors), median(ratios)
	c.RatioMin, c.RatioMax = minOf(ratios), maxOf(ratios)
	if len(floorCosts) > 0 {
		c.CollectorFloorNsPerSpan, c.CollectorFloorRatio = median(floorCosts), median(floorRatios)
		c.VsCollectorFloor, c.VsCollectorFloorMin, c.VsCollectorFloorMax = median(vsFloor), minOf(vsFloor), maxOf(vsFloor)
	}

	p, err := profileFlood(s, col, w)
	if err != nil {
		return fmt.Errorf("profiling: %w", err)
	}
	c.Profile = p
	if s.floorDistro != "" {
		// The floor at the median round's rate, profiled as long: where
		// the collector's CPU goes beside where the floor's does.
		if _, c.FloorProfile, err = collectorFloor(s, c, dir, medianRate(c), s.profileSeconds); err != nil {
			return fmt.Errorf("profiling the collector floor: %w", err)
		}
	}
	return nil
}

// collectorFloor runs the floor distro (the same collector, built with the
// spanfloor receiver) on cpu at rate spans per second, at most
// c.FloorSpansPerDrain at a time as the receiver drains, and returns its
// CPU time per delivered span over s.floodSeconds, after a second of
// warm-up (heap growth, first batches). It runs while the measured
// collector is idle, on the same CPU. With profileSecs > 0 it then
// profiles as many seconds of it (Profile, as for the collector).
func collectorFloor(s settings, c *Collector, dir string, rate float64, profileSecs int) (float64, *Profile, error) {
	flush := s.flushInterval
	if flush == "" {
		flush = defaultFlushInterval().String()
	}
	col, err := startCollector(s.floorDistro, dir, "collector-floor.yaml", "spanfloor", c.CPU, func(pprofAddr string, prom int) string {
		return floorConfig(int(rate), flush, c.FloorSpansPerDrain, pprofAddr, prom)
	})
	if err != nil {
		return 0, nil, err
	}
	defer col.stop()
	time.Sleep(time.Second)
	from, err := col.accepted()
	if err != nil {
		return 0, nil, err
	}
	u0, err := processUsage(col.pid)
	if err != nil {
		return 0, nil, err
	}
	time.Sleep(time.Duration(s.floodSeconds * float64(time.Second)))
	u1, err := processUsage(col.pid)
	if err != nil {
		return 0, nil, err
	}
	to, err := col.accepted()
	if err != nil {
		return 0, nil, err
	}
	if to <= from {
		return 0, nil, fmt.Errorf("the spanfloor receiver delivered no spans in %.1f s", s.floodSeconds)
	}
	ns := float64(u1.cpuNs-u0.cpuNs) / float64(to-from)
	if profileSecs <= 0 {
		return ns, nil, nil
	}
	cpuProf, allocProf, spans, cpuNs, took, err := captureProfiles(col, profileSecs)
	if err != nil {
		return 0, nil, fmt.Errorf("profiling the collector floor: %w", err)
	}
	if s.profileDir != "" {
		_ = os.WriteFile(filepath.Join(s.profileDir, "collector-floor-cpu.pprof"), cpuProf, 0o644)
		_ = os.WriteFile(filepath.Join(s.profileDir, "collector-floor-allocs.pprof"), allocProf, 0o644)
	}
	p, err := summarize(cpuProf, allocProf, spans, cpuNs, took)
	return ns, p, err
}

// captureProfiles takes a CPU profile and an allocation profile of the
// same secs seconds of a running collector through its pprof extension,
// and returns them with the spans its receiver delivered and the CPU time
// its threads used meanwhile.
func captureProfiles(col *collectorProc, secs int) (cpuProf, allocProf []byte, spans, cpuNs int64, took time.Duration, err error) {
	from, err := col.accepted()
	if err != nil {
		return nil, nil, 0, 0, 0, err
	}
	u0, err := processUsage(col.pid)
	if err != nil {
		return nil, nil, 0, 0, 0, err
	}
	var cpuErr, allocErr error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		cpuProf, cpuErr = fetch(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", col.pprof, secs))
	}()
	go func() {
		defer wg.Done()
		allocProf, allocErr = fetch(fmt.Sprintf("http://%s/debug/pprof/allocs?seconds=%d", col.pprof, secs))
	}()
	wg.Wait()
	u1, err := processUsage(col.pid)
	if err != nil {
		return nil, nil, 0, 0, 0, err
	}
	to, err := col.accepted()
	if err != nil {
		return nil, nil, 0, 0, 0, err
	}
	if err := errors.Join(cpuErr, allocErr); err != nil {
		return nil, nil, 0, 0, 0, err
	}
	return cpuProf, allocProf, to - from, u1.cpuNs - u0.cpuNs, u1.at.Sub(u0.at), nil
}

// defaultFlushInterval is the receiver's default flush_interval.
func defaultFlushInterval() time.Duration {
	return uprobereceiver.NewFactory().CreateDefaultConfig().(*uprobereceiver.Config).FlushInterval
}

func minOf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

func maxOf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// profileFlood floods the collector while its pprof extension takes a CPU
// profile and an allocation profile of the same seconds.
func profileFlood(s settings, col *collectorProc, w *workload) (*Profile, error) {
	secs := s.profileSeconds
	type paced struct {
		fired int64
		err   error
	}
	done := make(chan paced, 1)
	go func() {
		fired, _, err := w.pace(0, float64(secs)+1.5)
		done <- paced{fired, err}
	}()
	time.Sleep(500 * time.Millisecond)
	cpuProf, allocProf, spans, cpuNs, took, err := captureProfiles(col, secs)
	p := <-done
	if err := errors.Join(err, p.err); err != nil {
		return nil, err
	}
	if _, _, err := col.waitDelivered(0, 1<<62); err != nil {
		return nil, err
	}
	if s.profileDir != "" {
		_ = os.WriteFile(filepath.Join(s.profileDir, "collector-cpu.pprof"), cpuProf, 0o644)
		_ = os.WriteFile(filepath.Join(s.profileDir, "collector-allocs.pprof"), allocProf, 0o644)
	}
	return summarize(cpuProf, allocProf, spans, cpuNs, took)
}

func fetch(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return io.ReadAll(resp.Body)
}
