//go:build linux && (amd64 || arm64)

package receiver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/otel-uprobe/uprobereceiver/internal/budget"
	"github.com/otel-uprobe/uprobereceiver/internal/insn"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/tracer"
	"github.com/otel-uprobe/uprobereceiver/receiver/internal/metadata"
)

// minProgramRuns is the number of runs over which the engine's programs'
// run time is measured at least; fewer keep the previous measurement.
const minProgramRuns = 1000

// overheadBudget runs the budget controller of one receiver: it calibrates
// what a hit costs at Start, then every period re-measures the engine's
// programs (BPF run-time statistics), steps the controller and attaches or
// detaches throttle groups through the tracer. It owns the controller
// between Start and Shutdown.
type overheadBudget struct {
	log    *zap.Logger
	tr     *tracer.Tracer
	cal    tracer.Calibration
	groups []budget.Group
	ctl    *budget.Controller

	mu        sync.Mutex // guards legs (set by the drain goroutine)
	legs      [][]budget.Leg
	programNs map[plan.Program]float64
	lastRuns  map[plan.Program]tracer.ProgramRun
	statsOn   bool

	// switching holds each group while it is being switched: a detach
	// runs in the background (the kernel waits for an RCU grace period)
	// and the group's next attach waits for it.
	switching []sync.Mutex
	pending   sync.WaitGroup
}

// newOverheadBudget calibrates the cost of a hit and makes the controller
// for the probes of plan, all attached now.
func newOverheadBudget(log *zap.Logger, tr *tracer.Tracer, pl *plan.Plan, fraction float64) (*overheadBudget, error) {
	cal, err := tr.Calibrate()
	if err != nil {
		return nil, fmt.Errorf("overhead_budget: calibrating what a probe hit costs: %w", err)
	}
	log.Info("Probe hit costs calibrated",
		zap.Float64("optimizable_ns", cal.HitNs[insn.Optimizable]), zap.Float64("emulated_ns", cal.HitNs[insn.Emulated]),
		zap.Float64("single_stepped_ns", cal.HitNs[insn.SingleStepped]), zap.Float64("return_ns", cal.ReturnNs),
		zap.Float64("counter_program_ns", cal.CounterNs), zap.Bool("bpf_stats", cal.Stats), zap.Duration("took", cal.Took))
	if !cal.Stats {
		log.Warn("BPF run-time statistics are off (the kernel refused BPF_ENABLE_STATS: no CAP_SYS_ADMIN?): probe costs include the trap and a minimal program, not what the engine's programs do beyond it")
	}
	b := &overheadBudget{
		log:       log,
		tr:        tr,
		cal:       cal,
		groups:    budget.Groups(pl),
		programNs: map[plan.Program]float64{},
	}
	b.legs = budget.Legs(pl, b.groups)
	b.switching = make([]sync.Mutex, len(b.groups))
	b.lastRuns, b.statsOn, _ = tr.ProgramRuns()
	b.ctl, err = budget.New(budget.Settings{
		Budget:      fraction,
		Groups:      b.groups,
		ProbeCostNs: b.costs().ProbeCosts(b.legs),
		Now:         time.Now,
		Hits:        b.readHits,
		Attach:      b.attach,
		Log:         b.logChange,
	})
	if err != nil {
		return nil, fmt.Errorf("overhead_budget: %w", err)
	}
	return b, nil
}

// costs returns what hits cost now: the calibration and the programs'
// measured run time beyond the calibration's counter.
func (b *overheadBudget) costs() budget.Costs {
	return budget.Costs{HitNs: b.cal.HitNs, ReturnNs: b.cal.ReturnNs, ProgramNs: b.programNs}
}

func (b *overheadBudget) readHits(probes []int) ([]uint64, error) {
	return b.tr.ProbeHits(probes, nil)
}

// attach switches group gi: attaching waits for the group's last detach;
// detaching happens in the background (the probes stop firing as it
// starts).
func (b *overheadBudget) attach(gi int, on bool) error {
	probes := b.groups[gi].Probes
	b.switching[gi].Lock()
	if on {
		defer b.switching[gi].Unlock()
		reversed := slices.Clone(probes)
		slices.Reverse(reversed)
		err := b.tr.SetProbesAttached(reversed, true)
		if err != nil {
			// All of the group or none: the probes that came back go again.
			err = errors.Join(err, b.tr.SetProbesAttached(probes, false))
		}
		return err
	}
	b.pending.Add(1)
	go func() {
		defer b.pending.Done()
		defer b.switching[gi].Unlock()
		if err := b.tr.SetProbesAttached(probes, false); err != nil {
			b.log.Warn("Overhead budget: detaching probes", zap.String("probes", b.groups[gi].Name), zap.Error(err))
		}
	}()
	return nil
}

func (b *overheadBudget) logChange(c budget.Change) {
	fields := []zap.Field{zap.String("change", c.String())}
	switch c.Kind {
	case budget.Exceeded:
		b.log.Warn("Overhead budget exceeded", append(fields, zap.Float64("estimated_cpu", c.Demand))...)
	case budget.Calm:
		b.log.Info("Overhead budget: load fell", append(fields, zap.Float64("estimated_cpu", c.Demand))...)
	case budget.Duty:
		b.log.Info("Overhead budget: duty cycle", append(fields, zap.String("probes", c.Name),
			zap.Float64("from", c.From), zap.Float64("to", c.To), zap.Float64("probes_cpu", c.GroupCost),
			zap.Float64("estimated_cpu", c.Cost))...)
	case budget.Failed:
		b.log.Warn("Overhead budget: switching probes", append(fields, zap.String("probes", c.Name), zap.Error(c.Err))...)
	}
}

// run steps the controller until ctx is done.
func (b *overheadBudget) run(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	measured := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		if time.Since(measured) >= budget.DefaultPeriod {
			measured = time.Now()
			b.measurePrograms()
		}
		timer.Reset(time.Until(b.ctl.Step()))
	}
}

// measurePrograms measures what the engine's programs cost per run beyond
// the calibration's counter, from BPF run-time statistics, and updates the
// probes' costs.
func (b *overheadBudget) measurePrograms() {
	if b.statsOn {
		runs, on, err := b.tr.ProgramRuns()
		if err == nil && on {
			for p, r := range runs {
				last := b.lastRuns[p]
				if n := r.Count - last.Count; n >= minProgramRuns {
					perRun := float64(r.Runtime-last.Runtime) / float64(n)
					b.programNs[p] = max(0, perRun-b.cal.CounterNs)
					b.lastRuns[p] = r
				}
			}
		}
	}
	b.mu.Lock()
	legs := b.legs
	b.mu.Unlock()
	b.ctl.SetProbeCosts(b.costs().ProbeCosts(legs))
}

// setPlan takes the legs of a plan that gained files; the plan's owner
// calls it.
func (b *overheadBudget) setPlan(plan *plan.Plan) {
	legs := budget.Legs(plan, b.groups)
	b.mu.Lock()
	b.legs = legs
	b.mu.Unlock()
}

// stop waits for detaches under way and accounts the hits missed up to
// now; the run loop must be over.
func (b *overheadBudget) stop() {
	b.pending.Wait()
	b.ctl.Flush()
}

// missed returns the hits estimated for the time probe p was detached.
func (b *overheadBudget) missed(p int) float64 { return b.ctl.Missed(p) }

// register reports the budget's state through self-telemetry.
func (b *overheadBudget) register(tel *metadata.TelemetryBuilder, plan *plan.Plan) error {
	refs := make([]metric.ObserveOption, len(plan.Probes))
	for i, p := range plan.Probes {
		refs[i] = metric.WithAttributes(attribute.String("probe.name", p.Ref))
	}
	f64 := func(get func(budget.Snapshot) float64) metric.Float64Callback {
		return func(_ context.Context, o metric.Float64Observer) error {
			o.Observe(get(b.ctl.Snapshot()))
			return nil
		}
	}
	perProbe := func(get func(budget.ProbeState) float64) metric.Float64Callback {
		return func(_ context.Context, o metric.Float64Observer) error {
			for i, p := range b.ctl.Snapshot().Probes {
				o.Observe(get(p), refs[i])
			}
			return nil
		}
	}
	return errors.Join(
		tel.RegisterReceiverUprobeBudgetCallback(f64(func(s budget.Snapshot) float64 { return s.Budget })),
		tel.RegisterReceiverUprobeBudgetCostCallback(f64(func(s budget.Snapshot) float64 { return s.Cost })),
		tel.RegisterReceiverUprobeBudgetDemandCallback(f64(func(s budget.Snapshot) float64 { return s.Demand })),
		tel.RegisterReceiverUprobeBudgetThrottledCallback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(int64(b.ctl.Snapshot().Throttled))
			return nil
		}),
		tel.RegisterReceiverUprobeProbeCostCallback(perProbe(func(p budget.ProbeState) float64 { return p.Cost })),
		tel.RegisterReceiverUprobeProbeDutyCycleCallback(perProbe(func(p budget.ProbeState) float64 { return p.Duty })),
		tel.RegisterReceiverUprobeCalibratedHitCostCallback(func(_ context.Context, o metric.Float64Observer) error {
			for c := insn.Optimizable; c <= insn.SingleStepped; c++ {
				o.Observe(b.cal.HitNs[c], metric.WithAttributes(attribute.String("site.class", c.String())))
			}
			return nil
		}),
		tel.RegisterReceiverUprobeCalibratedReturnCostCallback(func(_ context.Context, o metric.Float64Observer) error {
			o.Observe(b.cal.ReturnNs)
			return nil
		}),
	)
}
