//go:build linux && (amd64 || arm64)

package receiver

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/receiverhelper"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/debuginfo"
	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/insn"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/planner"
	"github.com/otel-uprobe/uprobereceiver/internal/privilege"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
	"github.com/otel-uprobe/uprobereceiver/internal/recipe"
	"github.com/otel-uprobe/uprobereceiver/internal/spans"
	"github.com/otel-uprobe/uprobereceiver/internal/tracer"
	"github.com/otel-uprobe/uprobereceiver/receiver/internal/metadata"
)

// transport names how the receiver gets its data, for the collector's
// accepted/refused counts.
const transport = "ebpf"

// uprobeReceiver is one shared instance: it owns the tracer and the two
// background goroutines (drain and metrics) between Start and Shutdown.
type uprobeReceiver struct {
	cfg      *Config
	set      receiver.Settings
	onDone   func()
	obs      *receiverhelper.ObsReport
	tel      *metadata.TelemetryBuilder
	hostName string

	traces  consumer.Traces
	metrics consumer.Metrics

	startOnce, shutdownOnce sync.Once
	startErr                error
	started                 bool
	cancel                  context.CancelFunc
	wg                      sync.WaitGroup
	hosts                   statusHosts

	// Seams for tests: beforeAttach runs between resolving the targets and
	// attaching them; clockOffset measures the CLOCK_MONOTONIC to wall
	// clock offset; clockEvery is how often the drain loop measures it.
	beforeAttach func(*plan.Plan)
	clockOffset  func() (int64, error)
	clockEvery   time.Duration
	// drainGate, when set, runs before each drain that has something to
	// do, with the drain's context: a test holds the drain goroutine with
	// it.
	drainGate func(context.Context)
	// checkUretprobes finds out whether kernel return probes kill
	// processes with seccomp filters on this kernel (Start, when the
	// configuration may use them).
	checkUretprobes func() tracer.UretprobeSeccomp

	// Set in Start, then owned by the goroutines until Shutdown.
	// targets are the configuration's, recipes expanded.
	targets []config.Target
	tracer  *tracer.Tracer
	// spanMetrics aggregates span metrics (nil without any): spans are
	// built for it even without a traces pipeline.
	spanMetrics *spanMetrics
	// byContainer counts hits per container for metrics; the collecting
	// goroutine's.
	byContainer *containerCounts
	plan        *plan.Plan
	builder     *spans.Builder
	records     drainRecords
	emitter     *metricsEmitter
	unhealthy   bool
	reported    spans.Counts
	offsetNs    int64     // the wall clock offset spans are built with
	clockAt     time.Time // when it was last measured
	chooser     *chooser
	watcher     *fileWatcher
	sendExecs   bool
	waiting     map[int]bool    // targets with nothing traced now
	ids         *identities     // container.id and process.executable.path of processes
	threads     *threadContexts // the thread-context lookups (OTEP 4947)
	budget      *overheadBudget // nil without overhead_budget
	wakeups     int             // times the drain goroutine woke, for tests
	detached    bool            // Shutdown detached the probes: no file is attached any more
	// unplanned counts the files left out (at Start or found later), for
	// tests; restatus says the last status event (a file left out at
	// Start) is reported again once the collector has reported the
	// component started.
	unplanned atomic.Int64
	restatus  *componentstatus.Event

	// What self-telemetry was told of lost process records and unknown
	// identities; the collecting goroutine's.
	reportedProcessLost, reportedUnknown uint64
	// plainRefusedLogged is set once the engine's plain span program was
	// seen refusing hits (tracer.PlainRefused), which is logged once.
	plainRefusedLogged bool
}

func newReceiver(cfg *Config, set receiver.Settings, onDone func()) (*uprobeReceiver, error) {
	obs, err := receiverhelper.NewObsReport(receiverhelper.ObsReportSettings{
		ReceiverID:             set.ID,
		Transport:              transport,
		ReceiverCreateSettings: set,
	})
	if err != nil {
		return nil, fmt.Errorf("creating obsreport: %w", err)
	}
	tel, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, fmt.Errorf("creating self-telemetry: %w", err)
	}
	host, _ := os.Hostname()
	return &uprobeReceiver{
		cfg: cfg, set: set, onDone: onDone, obs: obs, tel: tel, hostName: host,
		clockOffset: tracer.WallClockOffset, clockEvery: time.Second,
		checkUretprobes: tracer.CheckUretprobeSeccomp,
	}, nil
}

func (r *uprobeReceiver) setTraces(next consumer.Traces)   { r.traces = next }
func (r *uprobeReceiver) setMetrics(next consumer.Metrics) { r.metrics = next }

// Start resolves the targets, loads the engine and attaches every probe, all
// or nothing, then starts draining spans and reading counters in the
// background. Both pipelines call it with their host; only the first call
// does the work, and the component's status reaches every host.
func (r *uprobeReceiver) Start(_ context.Context, host component.Host) error {
	r.hosts.add(host)
	r.startOnce.Do(func() {
		allocated := heapAllocated()
		r.startErr = r.start()
		returnStartGarbage(allocated)
	})
	return r.startErr
}

// maxResolves bounds how often Start reads the targets again when a file
// changed between reading and attaching it.
const maxResolves = 3

// debuginfodStartBound bounds the time Start waits for debuginfod, all
// downloads together; debuginfodFileBound the time the file watcher
// waits for the downloads of one file. A build id whose download failed
// (or was cut short by these bounds) is not asked for again for 10
// minutes, even across restarts (debuginfo.Debuginfod.NegativeTTL).
const (
	debuginfodStartBound = 30 * time.Second
	debuginfodFileBound  = 30 * time.Second
)

func (r *uprobeReceiver) start() error {
	log := r.set.Logger
	var (
		pl  *planner.Planner
		tr  *tracer.Tracer
		err error
	)
	// The receiver's privilege check is the one the Kubernetes manifest
	// is tested against (internal/privilege): without the attach
	// capabilities nothing works; without the others, processes of other
	// users and containers are out of reach.
	k := privilege.Kernel{UprobeMulti: tracer.HaveUprobeMulti(), MemcgAccounting: true}
	if err := privilege.Check(privilege.Attach(k)); err != nil {
		return err
	}
	if err := privilege.Check(privilege.Processes()); err != nil {
		log.Warn("Containers and other users' processes are out of reach", zap.Error(err))
	}
	debuginfod, err := debuginfo.NewDebuginfodFromEnv()
	if err != nil {
		return err
	}
	if debuginfod != nil {
		debuginfod.MaxBytes = r.cfg.MaxDebuginfoBytes
	}
	// Downloads from debuginfod hold Start at most this long in all: past
	// it, the files still waiting for one are read without (their names
	// fail, and they are left out or fail Start with that reason).
	downloads, cancelDownloads := context.WithTimeout(context.Background(), debuginfodStartBound)
	defer cancelDownloads()
	locator := planner.HostLocator{}
	// Recipe targets become the recipes' spans and counters (Validate
	// expanded them once already).
	targets, err := recipe.Expand(r.cfg.Targets)
	if err != nil {
		return err
	}
	r.targets = targets
	// Every exec is looked at for targets' files (containers of new images,
	// optional targets), unless every target is one process.
	for _, t := range r.targets {
		r.sendExecs = r.sendExecs || t.PID == 0
	}
	// Processes' identities are taken from the engine's process records:
	// cgroup ids in the unified hierarchy and, on hosts with cgroup v1
	// hierarchies (v1 or hybrid), in one of them.
	mounts, err := procfs.FS{}.CgroupMounts()
	if err != nil {
		log.Warn("Reading the cgroup mounts: spans carry no container.id", zap.Error(err))
	}
	v1Controller, _ := mounts.PreferredV1()
	// What does not depend on the plan runs while the targets are read:
	// the engine's kernel checks and spec (tracer.Prepare, ~35 ms), and
	// the seccomp canary (~45 ms, mostly waiting for its child). The
	// targets are read as if kernel return probes were safe, and read
	// again, refusing them, when the canary finds they are not: nothing
	// is attached before its answer.
	prepared := tracer.Prepare()
	hazard := make(chan string, 1)
	go func() { hazard <- r.kernelReturnHazard() }()
	refuseReturns := ""
	for attempt := 1; ; attempt++ {
		pl, err = planner.Resolve(r.targets, planner.Options{
			OptimizedUprobes: tracer.HaveOptimizedUprobes(), ARM64StepsNop: tracer.ARM64StepsNop(),
			KernelReturnsRefused:  refuseReturns,
			AcceptUretprobeUnwind: slices.Contains(r.cfg.AcceptKernelHazards, hazardUretprobeUnwind),
			Arch:                  tracer.Arch(), Locator: locator,
			DebugDirs:         r.cfg.DebugDirectories,
			Debuginfod:        debuginfod,
			MaxDebuginfoBytes: r.cfg.MaxDebuginfoBytes,
			MaxSitesPerProbe:  r.cfg.MaxSitesPerProbe,
			MaxSitesPerFile:   r.cfg.MaxSitesPerFile,
			Context:           downloads,
		})
		if hazard != nil {
			refuse := <-hazard
			hazard = nil
			if refuse != "" {
				if err == nil {
					pl.Close()
				}
				refuseReturns, attempt = refuse, attempt-1 // this reading does not count
				continue
			}
		}
		if err != nil {
			return fmt.Errorf("resolving targets: %w", err)
		}
		if r.beforeAttach != nil {
			r.beforeAttach(pl.Plan)
		}
		if err := pl.Replaced(); err != nil && attempt < maxResolves {
			log.Info("A traced file was replaced while it was being read; reading it again", zap.Error(err))
			pl.Close()
			continue
		}
		tr, err = tracer.Open(pl.Plan, tracer.Options{
			RingBufferSize: r.cfg.RingBufferSize, NoRecords: r.traces == nil && newSpanMetrics(pl.Plan) == nil, MaxGoroutines: r.cfg.MaxGoroutines,
			MaxSites:  r.cfg.MaxSitesLater,
			SendExecs: r.sendExecs, ProcessFacts: true, Cgroup1Controller: v1Controller,
			// A budget switches probes one by one and measures programs.
			ProbeControl: r.cfg.OverheadBudget > 0, ProgramStats: r.cfg.OverheadBudget > 0,
			Prepared: prepared,
		})
		if err != nil {
			pl.Close() // the files the tracer did not take
		}
		if errors.Is(err, tracer.ErrFileChanged) && attempt < maxResolves {
			log.Info("A traced file changed while it was being read; reading it again", zap.Error(err))
			continue
		}
		break
	}
	if err != nil {
		var ae *tracer.AttachError
		if errors.As(err, &ae) {
			for _, f := range ae.Failures {
				log.Error("Probe not attached; nothing stays attached",
					zap.String("probe", f.Probe), zap.String("path", f.Path),
					zap.String("file_offset", fmt.Sprintf("%#x", f.Attachment.FileOffset)), zap.Error(f.Err))
				r.tel.ReceiverUprobeAttachFailures.Add(context.Background(), 1,
					metric.WithAttributes(attribute.String("probe.name", f.Probe)))
			}
		}
		return err
	}
	offset, err := r.clockOffset()
	if err != nil {
		return errors.Join(fmt.Errorf("reading clocks: %w", err), tr.Close())
	}
	if r.cfg.OverheadBudget > 0 {
		if r.budget, err = newOverheadBudget(log, tr, pl.Plan, r.cfg.OverheadBudget); err != nil {
			return errors.Join(err, tr.Close())
		}
		if err := r.budget.register(r.tel, pl.Plan); err != nil {
			return errors.Join(fmt.Errorf("registering budget telemetry: %w", err), tr.Close())
		}
	}
	r.offsetNs, r.clockAt = offset, time.Now()
	var salt [16]byte
	_, _ = rand.Read(salt[:])

	r.tracer, r.plan = tr, pl.Plan
	if r.chooser, err = newChooser(pl.Plan, tr, procfs.FS{}); err != nil {
		return errors.Join(err, tr.Close())
	}
	if err := r.chooser.chooseRunning(); err != nil {
		log.Warn("Choosing the running processes of pid:/process: targets", zap.Error(err))
	}
	// process.executable.path is looked up for shared-library targets:
	// an executable target's is the target's file.
	needExe := false
	for _, t := range pl.Targets {
		needExe = needExe || !t.Executable
	}
	r.ids = newIdentities(procfs.FS{}, mounts, v1Controller, needExe)
	// The processes that ran before the engine could see them start.
	if err := tr.RunningProcesses(r.ids.process); err != nil {
		log.Warn("Listing the running processes: their spans carry no container.id", zap.Error(err))
	}
	r.byContainer = newContainerCounts(r.ids.identity)
	attributes := false
	for _, t := range pl.Targets {
		attributes = attributes || t.ThreadAttributes
	}
	r.threads = newThreadContexts(log, r.tel, tr, procfs.FS{}, attributes)
	// Span metrics are built from the spans, also without a traces pipeline.
	r.spanMetrics = newSpanMetrics(pl.Plan)
	var observe func(uint32, uint32, event.Image, ptrace.Span)
	if r.spanMetrics != nil {
		r.spanMetrics.containerOf = r.ids.ContainerID
		observe = r.spanMetrics.observe
	}
	settings := spans.Settings{
		Observe:      observe,
		Plan:         pl.Plan,
		WallOffsetNs: offset,
		Salt:         [2]uint64{binary.LittleEndian.Uint64(salt[:8]), binary.LittleEndian.Uint64(salt[8:])},
		HostName:     r.hostName,
		ScopeName:    metadata.ScopeName,
		ScopeVersion: r.set.BuildInfo.Version,
		Executable:   r.ids.Executable,
		ContainerID:  r.ids.ContainerID,
	}
	if attributes {
		settings.ThreadKeys, settings.ThreadKeysStale = r.threads.keysOf, r.threads.stale
	}
	r.builder = spans.NewBuilder(settings)
	r.emitter = newMetricsEmitter(r.cfg.MetricsBuilderConfig, r.set, pl.Plan, r.hostName, pcommon.NewTimestampFromTime(time.Now()))
	r.emitter.spans = r.spanMetrics
	if r.budget != nil {
		r.emitter.missed = r.budget.missed
	}
	r.started = true

	for _, f := range pl.Files {
		if f.DebugInfo != "" {
			log.Info("Debuginfo read", zap.String("path", f.Path), zap.String("from", f.DebugInfo))
		}
	}
	for _, t := range pl.Targets {
		for _, n := range t.Notes {
			log.Warn("Left out of the plan", zap.String("path", t.Path), zap.String("note", n))
		}
	}
	r.reportLocations(pl.Plan, 1)
	r.reportFiles(pl)
	for _, u := range pl.Unplanned {
		r.leftOut(context.Background(), pl.Targets[u.Target].Path, u.Candidate, u.Err)
	}
	if len(pl.Unplanned) > 0 {
		// The collector reports the component OK once Start returns: a
		// file left out at Start is said again at the first collection.
		r.restatus = r.hosts.lastEvent()
	}
	log.Info("Probes attached", zap.Int("targets", len(pl.Targets)), zap.Int("files", len(pl.Files)),
		zap.Int("probes", len(pl.Probes)), zap.Int("spans", len(pl.Spans)), zap.Int("locations", len(pl.Attachments)))
	r.watcher = newFileWatcher(log, pl, r.targets, locator)
	r.watcher.notify = tr.Interrupt // the drain goroutine may be asleep
	r.watcher.leftOut = func(ti int, c planner.Candidate, err error) {
		r.leftOut(context.Background(), r.targets[ti].Path, c, err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Add(4)
	go func() { defer r.wg.Done(); r.watcher.run(ctx) }()
	go func() { defer r.wg.Done(); r.threads.run(ctx) }()
	go r.drainLoop(ctx)                                  // hand completed spans to the pipeline
	go r.every(ctx, r.cfg.CollectionInterval, r.collect) // emit the kernel's counters
	r.wg.Add(1)
	go r.every(ctx, containerFoldInterval, r.foldContainers) // container.id of processes that may not live long
	if r.budget != nil {
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.budget.run(ctx) }()
	}
	return nil
}

// kernelReturnHazard finds out, when the configuration may use kernel
// return probes, whether they kill processes whose seccomp filter denies
// the uretprobe system call (see tracer.CheckUretprobeSeccomp), and returns
// the sentence that refuses them, or "" when they are safe or the hazard is
// accepted (accept_kernel_hazards), which it logs.
func (r *uprobeReceiver) kernelReturnHazard() string {
	if !mayUseKernelReturns(r.targets) {
		return ""
	}
	start := time.Now()
	res := r.checkUretprobes()
	log := r.set.Logger.With(zap.String("found", res.Reason), zap.Duration("took", time.Since(start)))
	if !res.Hazard {
		log.Debug("Kernel return probes are safe in processes with seccomp filters")
		return ""
	}
	sentence := "this kernel kills a process whose seccomp filter denies the uretprobe system call (as container runtimes' default profiles may) when a kernel return probe fires in it " +
		"(Linux 6.11 without the seccomp passthrough of 6.12.14, 6.13.3 and 6.14; " + res.Reason + "), " +
		"so kernel return probes are refused: probe returns with ret: (returns: ret) instead, " +
		"or accept the hazard with accept_kernel_hazards: [" + hazardUretprobeSeccomp + "] if no traced process filters system calls"
	if slices.Contains(r.cfg.AcceptKernelHazards, hazardUretprobeSeccomp) {
		log.Warn("Kernel return probes are attached although this kernel kills processes whose seccomp filter denies the uretprobe system call when one fires, as accept_kernel_hazards says",
			zap.String("hazard", hazardUretprobeSeccomp))
		return ""
	}
	return sentence
}

// mayUseKernelReturns says whether targets may need kernel return probes:
// a uretprobe: reference, or a function span whose returns are not ret:.
func mayUseKernelReturns(targets []config.Target) bool {
	isReturn := func(ref string) bool {
		p, err := config.ParseProbe(ref)
		return err == nil && p.Kind == config.KindUretprobe
	}
	for _, t := range targets {
		for _, s := range t.Spans {
			entry, exit := s.Probes()
			if isReturn(entry) || isReturn(exit) {
				return true
			}
		}
		for _, c := range t.Counters {
			if isReturn(c.Probe) {
				return true
			}
		}
	}
	return false
}

// containerFoldInterval is how often the hits per process are read and
// turned into hits per container: a process must live that long for its
// hits to carry its container.id (they count in the target's own
// resource otherwise).
const containerFoldInterval = 500 * time.Millisecond

// foldContainers reads the engine's hits per process and folds them into
// the hits per container. It runs on its own ticker and at each collection.
func (r *uprobeReceiver) foldContainers(context.Context) {
	hits, err := r.tracer.ProcessHits(tracer.DefaultMaxProcessHits)
	if err != nil {
		r.set.Logger.Warn("Reading hits per process", zap.Error(err))
		return
	}
	for _, h := range r.byContainer.fold(hits) {
		_ = r.tracer.ForgetProcessHits(h) // folded; gone already if it fails
	}
}

// every runs fn every interval until ctx is done.
func (r *uprobeReceiver) every(ctx context.Context, interval time.Duration, fn func(context.Context)) {
	defer r.wg.Done()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			fn(ctx)
		}
	}
}

// reportLocations logs, per probe, where its locations are and how the
// kernel runs them, and adds sign times their number to self-telemetry.
func (r *uprobeReceiver) reportLocations(plan *plan.Plan, sign int64) {
	type key struct {
		probe int
		class insn.SiteClass
	}
	counts := map[key]int64{}
	for _, a := range plan.Attachments {
		counts[key{a.Probe, a.Class}]++
	}
	// A single-stepped probe's locations, to warn once per place: only
	// those probes' (20,000 locations took 20,000 strings).
	sites := map[int][]string{}
	if sign > 0 {
		for _, a := range plan.Attachments {
			if counts[key{a.Probe, insn.SingleStepped}] > 0 {
				sites[a.Probe] = append(sites[a.Probe], fmt.Sprintf("%d:%#x:%v", a.File, a.FileOffset, a.Return))
			}
		}
	}
	warned := map[string]bool{}
	for i, p := range plan.Probes {
		var classes []string
		for c := insn.Optimizable; c <= insn.SingleStepped; c++ {
			n := counts[key{i, c}]
			if n == 0 {
				continue
			}
			classes = append(classes, fmt.Sprintf("%d %s", n, c))
			r.tel.ReceiverUprobeLocations.Add(context.Background(), sign*n, metric.WithAttributes(
				attribute.String("probe.name", p.Ref), attribute.String("site.class", c.String())))
		}
		if sign > 0 {
			level := zap.InfoLevel
			if counts[key{i, insn.SingleStepped}] > 0 {
				// About 11 µs per hit: said once for the probes of one
				// place (a probe and its filtered counters).
				place := strings.Join(sites[i], ",")
				if !warned[place] {
					level = zap.WarnLevel
				}
				warned[place] = true
			}
			fields := []zap.Field{zap.String("probe", p.Ref), zap.String("path", plan.Targets[p.Target].Path), zap.String("sites", strings.Join(classes, ", "))}
			if p.Why != "" {
				fields = append(fields, zap.String("why", p.Why))
			}
			r.set.Logger.Log(level, "Probe sites", fields...)
		}
	}
}

// idleWait bounds how long the drain goroutine sleeps with nothing in the
// ring buffer. The engine wakes it at the first record; the bound catches a
// record written just as it went to sleep (tracer.WaitRecords).
const idleWait = time.Second

// drainLoop hands spans to the pipeline until ctx ends. While records flow,
// it drains flush_interval after the previous drain began, or sooner when
// the engine says the ring buffer is a quarter full. With nothing in the
// ring it sleeps until the engine writes a record, and drains
// flush_interval after it; it also wakes when a span waiting for a trace
// context is due and when the file watcher has a file for it. A record to
// act on at once (an exec, a pending process's fork, a thread-context
// question) is drained at once, at most every urgentGap. No timer wakes it
// while nothing happens.
func (r *uprobeReceiver) drainLoop(ctx context.Context) {
	defer r.wg.Done()
	begun := time.Now()
	var lastDrain time.Time
	for ctx.Err() == nil {
		r.wakeups++
		if r.tracer.Buffered() == 0 && len(r.watcher.changes) == 0 {
			deadline := time.Now().Add(idleWait)
			if due := r.builder.NextExpiry(); !due.IsZero() && due.Before(deadline) {
				deadline = due
			}
			r.wait(deadline, true)
			if ctx.Err() != nil {
				return
			}
			if r.tracer.Buffered() == 0 {
				// A waiting span is due, or a file is to be attached
				// (or an urgent record was read before it was flagged:
				// the flag is dropped, lest the next wait end at once).
				r.tracer.TakeUrgent()
				r.drain(ctx)
				continue
			}
			begun = time.Now() // the first record: others may join it
		}
		r.wait(begun.Add(r.cfg.FlushInterval), false)
		if ctx.Err() != nil {
			return
		}
		if r.tracer.TakeUrgent() {
			// An exec or a pending process's fork: decided and its
			// files looked for now, not at the flush timer (a pending
			// process's hits are counted apart until then), but at
			// most one drain per urgentGap in an exec storm.
			if d := time.Until(lastDrain.Add(urgentGap)); d > 0 {
				time.Sleep(d)
			}
		}
		begun = time.Now()
		lastDrain = begun
		r.drain(ctx)
	}
}

// urgentGap is the shortest time between two drains that records to act
// on at once (execs) start: at most 500 a second in an exec storm.
const urgentGap = 2 * time.Millisecond

// wait sleeps until the engine has records (see tracer.WaitRecords).
func (r *uprobeReceiver) wait(deadline time.Time, first bool) {
	if err := r.tracer.WaitRecords(deadline, first); err != nil {
		// Not expected: poll on the flush interval instead.
		r.set.Logger.Warn("Waiting for the ring buffer", zap.Error(err))
		time.Sleep(time.Until(deadline))
	}
}

// drain moves every span now in the ring buffer into the pipeline, in
// batches of at most MaxBatchSpans, building each span as it is read from
// the ring. With nothing in the ring, no span waiting for a trace context
// and no file to attach, it does nothing. When ctx ends it stops after the
// batch in hand, which it still delivers.
func (r *uprobeReceiver) drain(ctx context.Context) {
	if r.tracer.Buffered() == 0 && r.builder.Waiting() == 0 && len(r.watcher.changes) == 0 {
		return
	}
	if r.drainGate != nil {
		r.drainGate(ctx)
	}
	r.followClock()
	r.applyFileChanges(ctx)
	r.records.r, r.records.ctx = r, ctx
	defer func() { r.records.ctx = nil }()
	// A batch read from the ring is delivered whole, whatever happens to
	// ctx meanwhile: its records are gone from the ring, and a pipeline
	// would refuse them for a context ended by Shutdown (which drains what
	// is left itself). Between batches, an ended ctx stops the drain.
	deliverCtx := context.WithoutCancel(ctx)
	for {
		if r.buildsSpans() {
			r.builder.Begin(min(r.cfg.MaxBatchSpans, r.tracer.Buffered()))
		}
		r.records.read = 0
		_, malformed := r.tracer.Read(r.cfg.MaxBatchSpans, &r.records)
		r.chooser.foldPending() // the batch's decided and exited processes, in one pass
		if malformed > 0 {
			r.tel.ReceiverUprobeRecordsMalformed.Add(deliverCtx, int64(malformed))
		}
		if r.traces != nil {
			r.deliver(deliverCtx, r.builder.End())
		} else if r.buildsSpans() {
			r.builder.End() // built for the span metrics only
		}
		r.reportCounts(deliverCtx)
		// The batch was full when it took as many records as it could,
		// spans and process records alike: counting only its spans would
		// end the drain at the first batch holding a process record (an
		// exec anywhere on the host) with records still in the ring.
		if r.records.read+malformed < r.cfg.MaxBatchSpans || ctx.Err() != nil {
			return
		}
	}
}

// drainRecords takes the records of one drain as they are read, in the
// ring's order: a process's exec or fork comes before its spans (decide
// first) and its exit after them (forget last).
type drainRecords struct {
	r   *uprobeReceiver
	ctx context.Context
	// read counts the records of the batch in hand, spans and process
	// records alike.
	read int
}

// Span builds a span that counts: one of a pending process counts only if
// the process was chosen for its target. One whose choice is no longer
// known is dropped and counted.
// buildsSpans says whether span records are built: for the traces
// pipeline, or for span metrics.
func (r *uprobeReceiver) buildsSpans() bool { return r.traces != nil || r.spanMetrics != nil }

func (d *drainRecords) Span(ev *event.SpanRecord) {
	d.read++
	if !d.r.buildsSpans() {
		return
	}
	keep, known := d.r.chooser.keep(ev)
	switch {
	case keep:
		d.r.builder.Add(ev)
	case !known && int(ev.Def) < len(d.r.plan.Spans):
		// Its counts go with the process's pending counters, which
		// no choice folds: neither counted nor delivered.
		d.r.tel.ReceiverUprobeSpansOverflow.Add(d.ctx, 1, metric.WithAttributes(
			attribute.String("span.name", d.r.plan.Spans[ev.Def].Name), attribute.String("overflow.reason", "undecided")))
	}
}

// dropped counts n completed spans of definition def that are not
// delivered, for a reason.
func (r *uprobeReceiver) dropped(ctx context.Context, def uint32, reason metadata.AttributeDropReason, n int64) {
	if n <= 0 || int(def) >= len(r.plan.Spans) {
		return
	}
	r.tel.ReceiverUprobeSpansDropped.Add(ctx, n, metric.WithAttributes(
		attribute.String("span.name", r.plan.Spans[def].Name), attribute.String("drop.reason", reason.String())))
}

// countingRecords counts the spans of the records read, by definition,
// without building them.
type countingRecords struct{ spans map[uint32]int64 }

func (c *countingRecords) Span(ev *event.SpanRecord) { c.spans[ev.Def]++ }
func (c *countingRecords) Process(*event.Process)    {}

// Process follows process events for the chooser, the file watcher and
// the caches of process facts.
func (d *drainRecords) Process(p *event.Process) {
	d.read++
	r := d.r
	r.ids.process(p)
	if (p.Event == event.ProcessExec || p.Event == event.ProcessExit) && r.buildsSpans() {
		r.builder.ProcessEnded(p.PID) // its carrier spans will not come
	}
	switch p.Event {
	case event.ProcessThreadContext:
		r.threads.ask(d.ctx, p.PID, p.Image)
	case event.ProcessExec:
		r.threads.forget(p.PID)
		r.chooser.exec(*p)
		if r.sendExecs && !r.watcher.execed(int(p.PID)) {
			r.tel.ReceiverUprobeFileChanges.Add(d.ctx, 1, metric.WithAttributes(attribute.String("change", "dropped")))
		}
	case event.ProcessFork:
		r.chooser.fork(*p)
	case event.ProcessExit:
		r.threads.forget(p.PID)
		r.chooser.exit(*p)
	}
}

// applyFileChanges attaches the files the watcher found and detaches the
// replaced ones no process maps any more; after Shutdown detached the
// probes, it leaves them. The drain goroutine owns the plan.
func (r *uprobeReceiver) applyFileChanges(ctx context.Context) {
	for !r.detached {
		var ch fileChange
		select {
		case ch = <-r.watcher.changes:
		default:
			return
		}
		change := func(what string) {
			r.tel.ReceiverUprobeFileChanges.Add(ctx, 1, metric.WithAttributes(attribute.String("change", what)))
		}
		switch {
		case ch.spec != nil:
			fi := r.plan.Append(ch.spec)
			f := r.plan.Files[fi]
			if err := r.tracer.AttachFile(fi); err != nil {
				r.set.Logger.Warn("File found, not attached", zap.String("path", describe(f)), zap.Error(err))
				change("failed")
				continue
			}
			r.set.Logger.Info("File attached", zap.String("target", r.plan.Targets[f.Target].Path),
				zap.String("path", describe(f)), zap.String("found", ch.how), zap.String("build_id", f.BuildID))
			if r.budget != nil {
				r.budget.setPlan(r.plan) // its sites may be of other classes
			}
			change("attached")
			r.tel.ReceiverUprobeFiles.Add(ctx, 1)
			if r.waiting[f.Target] {
				delete(r.waiting, f.Target)
				r.tel.ReceiverUprobeTargetsWaiting.Add(ctx, -1)
			}
		case ch.detach != (procfs.FileID{}):
			for fi, f := range r.plan.Files {
				if f.ID.FileID == ch.detach {
					if err := r.tracer.DetachFile(fi); err == nil {
						r.set.Logger.Info("File detached", zap.String("path", describe(f)), zap.String("why", ch.how))
						change("detached")
						r.tel.ReceiverUprobeFiles.Add(ctx, -1)
					}
				}
			}
		default:
			change(ch.how)
		}
	}
}

// reportFiles logs every target's files and says which targets have nothing
// to trace yet: an optional target without a file, a pid: target whose
// process maps none of its files.
func (r *uprobeReceiver) reportFiles(pl *planner.Planner) {
	r.waiting = map[int]bool{}
	files := map[int][]plan.File{}
	for _, f := range pl.Files {
		files[f.Target] = append(files[f.Target], f)
		r.set.Logger.Info("Target file", zap.String("target", pl.Targets[f.Target].Path), zap.String("path", describe(f)),
			zap.String("build_id", f.BuildID))
	}
	r.tel.ReceiverUprobeFiles.Add(context.Background(), int64(len(pl.Files)))
	for _, err := range pl.Refused {
		r.set.Logger.Warn("File not attached", zap.Error(err))
		r.tel.ReceiverUprobeFileChanges.Add(context.Background(), 1, metric.WithAttributes(attribute.String("change", "refused")))
	}
	fs := procfs.FS{}
	for ti, t := range pl.Targets {
		switch {
		case len(files[ti]) == 0:
			r.set.Logger.Warn("Target waiting for its file", zap.String("target", t.Path))
			r.waiting[ti] = true
		case t.PID != 0:
			mapped, err := fs.MappedFiles(t.PID)
			maps := false
			for _, m := range mapped {
				for _, f := range files[ti] {
					maps = maps || m.ID == f.ID.FileID
				}
			}
			if !maps {
				r.set.Logger.Warn("The target's process does not map its file: nothing is traced until it does",
					zap.String("target", t.Path), zap.Int("pid", t.PID), zap.NamedError("reading its mappings", err))
				r.waiting[ti] = true
			}
		}
	}
	r.tel.ReceiverUprobeTargetsWaiting.Add(context.Background(), int64(len(r.waiting)))
}

// followClock measures the offset of the wall clock from CLOCK_MONOTONIC
// (what the engine's times are) every clockEvery, and builds spans with the
// new offset when it moved by more than a microsecond: after an NTP step or
// a VM resume, spans are not shifted until a restart.
func (r *uprobeReceiver) followClock() {
	now := time.Now()
	if now.Sub(r.clockAt) < r.clockEvery {
		return
	}
	r.clockAt = now
	off, err := r.clockOffset()
	if err != nil {
		return
	}
	if d := off - r.offsetNs; d > 1000 || d < -1000 {
		if d > int64(time.Millisecond) || d < -int64(time.Millisecond) {
			r.set.Logger.Info("The wall clock moved against the monotonic clock; spans follow it",
				zap.Duration("by", time.Duration(d)))
		}
		r.offsetNs = off
		r.builder.SetWallOffset(off)
	}
}

// deliver hands spans to the traces pipeline, counting them as accepted or
// refused (and refused ones as dropped, by span name).
func (r *uprobeReceiver) deliver(ctx context.Context, td ptrace.Traces) {
	n := td.SpanCount()
	if n == 0 {
		return
	}
	obsCtx := r.obs.StartTracesOp(ctx)
	err := r.traces.ConsumeTraces(obsCtx, td)
	r.obs.EndTracesOp(obsCtx, metadata.Type.String(), n, err)
	r.health(err)
	if err == nil {
		return
	}
	names := map[string]int64{}
	for _, rs := range td.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			for _, sp := range ss.Spans().All() {
				names[sp.Name()]++
			}
		}
	}
	for name, k := range names {
		r.tel.ReceiverUprobeSpansDropped.Add(ctx, k, metric.WithAttributes(
			attribute.String("span.name", name), attribute.String("drop.reason", metadata.AttributeDropReasonRefused.String())))
	}
}

// reportCounts adds the builder's new per-event problem counts to the self-telemetry.
func (r *uprobeReceiver) reportCounts(ctx context.Context) {
	c := r.builder.Counts()
	if d := c.FetchErrors - r.reported.FetchErrors; d > 0 {
		r.tel.ReceiverUprobeFetchErrors.Add(ctx, int64(d))
	}
	if d := c.Truncated - r.reported.Truncated; d > 0 {
		r.tel.ReceiverUprobeSpansTruncated.Add(ctx, int64(d))
	}
	if d := c.Malformed - r.reported.Malformed; d > 0 {
		r.tel.ReceiverUprobeRecordsMalformed.Add(ctx, int64(d))
	}
	for o := range c.Context {
		if d := c.Context[o] - r.reported.Context[o]; d > 0 {
			r.tel.ReceiverUprobeTraceContexts.Add(ctx, int64(d),
				metric.WithAttributes(attribute.String("outcome", spans.Outcome(o).String())))
		}
	}
	for def, n := range c.TraceUnsampled {
		var prev uint64
		if def < len(r.reported.TraceUnsampled) {
			prev = r.reported.TraceUnsampled[def]
		}
		r.dropped(ctx, uint32(def), metadata.AttributeDropReasonTraceUnsampled, int64(n-prev))
	}
	r.reported = c
}

// health reports a pipeline refusal (of spans or metrics) as an error, and
// recovery, once per change: recoverable, or permanent when the pipeline
// said the data can never be taken. Refused data is dropped: a probe has
// nobody to push back on.
func (r *uprobeReceiver) health(err error) {
	switch {
	case err != nil && !r.unhealthy:
		r.unhealthy = true
		if consumererror.IsPermanent(err) {
			r.hosts.report(componentstatus.NewPermanentErrorEvent(err))
		} else {
			r.hosts.report(componentstatus.NewRecoverableErrorEvent(err))
		}
	case err == nil && r.unhealthy:
		r.unhealthy = false
		r.hosts.report(componentstatus.NewEvent(componentstatus.StatusOK))
	}
}

// statusHosts passes the component's status to the host of every pipeline
// that started the shared instance, as the collector's sharedcomponent
// does: a host that starts it later first gets the last status.
type statusHosts struct {
	mu    sync.Mutex
	hosts []component.Host
	last  *componentstatus.Event
}

func (s *statusHosts) add(h component.Host) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hosts = append(s.hosts, h)
	if s.last != nil {
		componentstatus.ReportStatus(h, s.last)
	}
}

// lastEvent returns the last status reported, nil for none.
func (s *statusHosts) lastEvent() *componentstatus.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

func (s *statusHosts) report(ev *componentstatus.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = ev
	for _, h := range s.hosts {
		componentstatus.ReportStatus(h, ev)
	}
}

// reportIdentity adds the new counts of lost process records and of
// unknown identities to the self-telemetry.
func (r *uprobeReceiver) reportIdentity(ctx context.Context) {
	lost, unknown := r.tracer.ProcessRecordsLost(), r.ids.unknownLookups()
	if d := lost - r.reportedProcessLost; lost > r.reportedProcessLost {
		r.tel.ReceiverUprobeProcessRecordsLost.Add(ctx, int64(d))
	}
	if d := unknown - r.reportedUnknown; unknown > r.reportedUnknown {
		r.tel.ReceiverUprobeIdentitiesUnknown.Add(ctx, int64(d))
	}
	r.reportedProcessLost, r.reportedUnknown = lost, unknown
	if n := r.tracer.PlainRefused(); n > 0 && !r.plainRefusedLogged {
		r.plainRefusedLogged = true
		r.set.Logger.Error("The engine's plain span program refused hits of sites it does not take, which the receiver should never attach to it: their spans and hits are counted nowhere; please report this",
			zap.Uint64("hits", n))
	}
}

// collect reads the kernel's counters once and emits them.
func (r *uprobeReceiver) collect(ctx context.Context) {
	if ev := r.restatus; ev != nil {
		r.restatus = nil
		r.hosts.report(ev)
	}
	st, err := r.tracer.Stats()
	if err != nil {
		r.set.Logger.Warn("Reading probe counters", zap.Error(err))
		return
	}
	r.chooser.addFolded(&st)
	r.reportIdentity(ctx)
	r.foldContainers(ctx)
	r.byContainer.stats(&st)
	r.emitter.selfTelemetry(ctx, r.tel, st)
	if r.metrics == nil {
		return
	}
	md := r.emitter.emit(st, pcommon.NewTimestampFromTime(time.Now()))
	n := md.DataPointCount()
	obsCtx := r.obs.StartMetricsOp(ctx)
	err = r.metrics.ConsumeMetrics(obsCtx, md)
	r.obs.EndMetricsOp(obsCtx, metadata.Type.String(), n, err)
	r.health(err)
}

// Shutdown detaches every probe (lowering USDT semaphores), hands the
// pipeline every span still in the ring buffer and a final metrics snapshot,
// and unloads the engine. It is safe before Start and when called twice.
func (r *uprobeReceiver) Shutdown(ctx context.Context) error {
	var err error
	r.shutdownOnce.Do(func() {
		defer r.onDone()
		defer r.tel.Shutdown()
		if !r.started {
			return
		}
		r.cancel()
		r.tracer.Interrupt()
		r.wg.Wait()
		if r.budget != nil {
			r.budget.stop()
		}
		// Every link closes side by side (about a second for thousands
		// of files); then no probe fires, and the drain below takes
		// every span completed before.
		err = r.tracer.Detach()
		r.detached = true
		r.drain(ctx)
		r.dropLeft(ctx)
		if r.traces != nil {
			r.deliver(ctx, r.builder.Flush()) // spans still waiting for a trace context
			r.reportCounts(ctx)
		} else if r.buildsSpans() {
			r.builder.Flush()
		}
		r.collect(ctx)
		err = errors.Join(err, r.tracer.Close())
		r.watcher.closePending()
		err = errors.Join(err, r.plan.Close())
		r.reportLocations(r.plan, -1)
	})
	return err
}

// dropLeft counts the spans still in the ring buffer after Shutdown's last
// drain (its context ended first) as dropped, reading them without
// building them.
func (r *uprobeReceiver) dropLeft(ctx context.Context) {
	if r.tracer.Buffered() == 0 {
		return
	}
	left := countingRecords{spans: map[uint32]int64{}}
	for {
		n, malformed := r.tracer.Read(1<<16, &left)
		if malformed > 0 {
			r.tel.ReceiverUprobeRecordsMalformed.Add(context.WithoutCancel(ctx), int64(malformed))
		}
		if n < 1<<16 {
			break
		}
	}
	for def, n := range left.spans {
		r.dropped(context.WithoutCancel(ctx), def, metadata.AttributeDropReasonShutdown, n)
	}
}
