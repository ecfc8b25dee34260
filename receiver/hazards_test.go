package receiver

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/tracer"
	"github.com/otel-uprobe/uprobereceiver/receiver/internal/metadatatest"
)

// createdWith creates a receiver with cfg, without starting it, and
// returns the logs it writes.
func createdWith(t *testing.T, cfg *Config) (started, *observer.ObservedLogs) {
	t.Helper()
	require.NoError(t, cfg.Validate())
	s := started{traces: new(consumertest.TracesSink), metrics: new(consumertest.MetricsSink), telemetry: componenttest.NewTelemetry()}
	t.Cleanup(func() { require.NoError(t, s.telemetry.Shutdown(context.Background())) })
	set := metadatatest.NewSettings(s.telemetry)
	core, logs := observer.New(zapcore.DebugLevel)
	set.Logger = zap.New(core)
	tr, err := NewFactory().CreateTraces(context.Background(), set, cfg, s.traces)
	require.NoError(t, err)
	_, err = NewFactory().CreateMetrics(context.Background(), set, cfg, s.metrics)
	require.NoError(t, err)
	s.rcv = tr.(*uprobeReceiver)
	t.Cleanup(func() { _ = s.rcv.Shutdown(context.Background()) })
	return s, logs
}

// On a kernel where a kernel return probe kills a process whose seccomp
// filter denies the uretprobe system call (injected here: this machine's
// kernel lets it pass), Start refuses kernel return probes with one
// sentence saying why and what to do; returns on RET instructions are
// attached; accept_kernel_hazards attaches them all the same, with a
// warning. A configuration without kernel return probes does not look.
func TestKernelReturnHazardAtStart(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O0")
	demo := testutil.StartDemo(t, b.Program)
	hazard := tracer.UretprobeSeccomp{Hazard: true, Measured: true,
		Reason: "a canary process whose seccomp filter denies the uretprobe system call died of SIGSEGV at its probed function's return"}
	const n = 25
	run := func(returns string, accept []string) (started, error, int, *observer.ObservedLogs) {
		cfg := createDefaultConfig()
		cfg.Targets = []config.Target{{Path: b.Program, Spans: []config.Span{{Name: "work", Function: "work", Returns: returns}}}}
		cfg.AcceptKernelHazards = accept
		s, logs := createdWith(t, cfg)
		checks := 0
		s.rcv.checkUretprobes = func() tracer.UretprobeSeccomp { checks++; return hazard }
		err := s.rcv.Start(context.Background(), componenttest.NewNopHost())
		return s, err, checks, logs
	}

	_, err, checks, _ := run("", nil)
	require.Error(t, err)
	assert.Equal(t, 1, checks)
	assert.Contains(t, err.Error(), "uretprobe:work: this kernel kills a process whose seccomp filter denies the uretprobe system call (as container runtimes' default profiles may) "+
		"when a kernel return probe fires in it (Linux 6.11 without the seccomp passthrough of 6.12.14, 6.13.3 and 6.14; "+hazard.Reason+"), "+
		"so kernel return probes are refused: probe returns with ret: (returns: ret) instead, "+
		"or accept the hazard with accept_kernel_hazards: [uretprobe_seccomp] if no traced process filters system calls")

	s, err, checks, _ := run(config.ReturnsRet, nil)
	require.NoError(t, err, "RET instructions are no kernel return probes")
	assert.Zero(t, checks, "nothing to find out")
	demo.Run(n)
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	assert.Len(t, allSpans(s.traces), n)

	s, err, checks, logs := run("", []string{hazardUretprobeSeccomp})
	require.NoError(t, err)
	assert.Equal(t, 1, checks)
	demo.Run(n)
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	assert.Len(t, allSpans(s.traces), n)
	warned := logs.FilterMessageSnippet("as accept_kernel_hazards says").All()
	require.Len(t, warned, 1)
	assert.Equal(t, zapcore.WarnLevel, warned[0].Level)
}

// Start finds out with a canary process on the real kernel, which lets the
// uretprobe system call pass seccomp filters: the canary runs right under
// its return probe, and the function span is attached.
func TestKernelReturnCanaryAtStart(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O0")
	demo := testutil.StartDemo(t, b.Program)
	cfg := createDefaultConfig()
	cfg.Targets = []config.Target{{Path: b.Program, Spans: []config.Span{{Name: "work", Function: "work"}}}}
	s, logs := createdWith(t, cfg)
	var took time.Duration
	var got tracer.UretprobeSeccomp
	s.rcv.checkUretprobes = func() tracer.UretprobeSeccomp {
		start := time.Now()
		got = tracer.CheckUretprobeSeccomp()
		took = time.Since(start)
		return got
	}
	require.NoError(t, s.rcv.Start(context.Background(), componenttest.NewNopHost()))
	t.Logf("%+v in %v", got, took)
	assert.False(t, got.Hazard, got.Reason)
	assert.True(t, got.Measured, "the canary ran: %s", got.Reason)
	assert.Len(t, logs.FilterMessageSnippet("Kernel return probes are safe").All(), 1)
	demo.Run(10)
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	assert.Len(t, allSpans(s.traces), 10)
}

func TestAcceptKernelHazardsIsValidated(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.Targets = []config.Target{{Path: "/bin/true", Counters: config.CountersOf("uprobe:main")}}
	cfg.AcceptKernelHazards = []string{hazardUretprobeSeccomp, "red_zone"}
	err := cfg.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `accept_kernel_hazards[1] "red_zone": not a kernel hazard the receiver knows (uretprobe_seccomp, uretprobe_unwind)`)
	cfg.AcceptKernelHazards = []string{hazardUretprobeSeccomp}
	assert.NoError(t, cfg.Validate())
	cfg.AcceptKernelHazards = []string{"uretprobe_unwind"}
	assert.NoError(t, cfg.Validate())
}

// The targets are read while the canary runs, but nothing is attached
// before its answer: Start waits for it after reading them, and reads
// them again refusing kernel return probes when it finds the hazard.
func TestKernelReturnCanaryAnswersBeforeAttach(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O0")
	for _, hazard := range []bool{false, true} {
		cfg := createDefaultConfig()
		cfg.Targets = []config.Target{{Path: b.Program, Spans: []config.Span{{Name: "work", Function: "work"}}}}
		s, _ := createdWith(t, cfg)
		answered := make(chan struct{})
		s.rcv.checkUretprobes = func() tracer.UretprobeSeccomp {
			close(answered)
			return tracer.UretprobeSeccomp{Hazard: hazard, Reason: "injected"}
		}
		attaches := 0
		s.rcv.beforeAttach = func(*plan.Plan) {
			attaches++
			select {
			case <-answered:
			default:
				t.Error("a plan reached the attach before the canary answered")
			}
		}
		err := s.rcv.Start(context.Background(), componenttest.NewNopHost())
		if hazard {
			require.Error(t, err)
			assert.Contains(t, err.Error(), "so kernel return probes are refused")
			assert.Zero(t, attaches, "the refusing reading fails: nothing to attach")
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, 1, attaches)
		require.NoError(t, s.rcv.Shutdown(context.Background()))
	}
}
