package receiver

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/receiver/internal/metadata"
	"github.com/otel-uprobe/uprobereceiver/receiver/internal/metadatatest"
)

func TestShutdownBeforeStartAndTwice(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.Targets = []config.Target{{Path: "/bin/true", Counters: config.CountersOf("uprobe:main")}}
	f := NewFactory()
	r, err := f.CreateTraces(context.Background(), receivertest.NewNopSettings(metadata.Type), cfg, consumertest.NewNop())
	require.NoError(t, err)
	require.NoError(t, r.Shutdown(context.Background()))
	require.NoError(t, r.Shutdown(context.Background()))
}

func TestSharedInstance(t *testing.T) {
	cfg := createDefaultConfig()
	set := receivertest.NewNopSettings(metadata.Type)
	f := NewFactory()
	tr, err := f.CreateTraces(context.Background(), set, cfg, consumertest.NewNop())
	require.NoError(t, err)
	mr, err := f.CreateMetrics(context.Background(), set, cfg, consumertest.NewNop())
	require.NoError(t, err)
	require.Same(t, tr, mr, "one instance per configuration")
	require.NoError(t, tr.Shutdown(context.Background()))
	again, err := f.CreateTraces(context.Background(), set, cfg, consumertest.NewNop())
	require.NoError(t, err)
	require.NotSame(t, tr, again, "a shut-down instance leaves the map")
	require.NoError(t, again.Shutdown(context.Background()))
	other, err := f.CreateTraces(context.Background(), set, createDefaultConfig(), consumertest.NewNop())
	require.NoError(t, err)
	require.NotSame(t, again, other, "another configuration gets another instance")
	require.NoError(t, other.Shutdown(context.Background()))
}

func TestStartFailsWithOneSentence(t *testing.T) {
	cfg := createDefaultConfig()
	missing := filepath.Join(t.TempDir(), "nope")
	cfg.Targets = []config.Target{{Path: missing, Counters: config.CountersOf("uprobe:main")}}
	require.NoError(t, cfg.Validate(), "the file is only looked for at Start")
	r, err := NewFactory().CreateTraces(context.Background(), receivertest.NewNopSettings(metadata.Type), cfg, consumertest.NewNop())
	require.NoError(t, err)
	err = r.Start(context.Background(), componenttest.NewNopHost())
	require.EqualError(t, err, "resolving targets: target "+missing+": no such file on this host or in any process's root (optional: true waits for it)")
	require.NoError(t, r.Shutdown(context.Background()))
}

func TestConfigFromYAML(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	require.NoError(t, err)

	sub, err := cm.Sub("uprobe")
	require.NoError(t, err)
	cfg := createDefaultConfig()
	require.NoError(t, sub.Unmarshal(cfg))
	require.NoError(t, confmap.Validate(cfg))
	assert.Equal(t, 5*time.Millisecond, cfg.FlushInterval)
	assert.Equal(t, 10*time.Second, cfg.CollectionInterval, "default kept")
	assert.Equal(t, 1<<22, cfg.RingBufferSize)
	require.Len(t, cfg.Targets, 1)
	assert.Equal(t, "postgres", cfg.Targets[0].ServiceName)
	assert.Len(t, cfg.Targets[0].Spans, 4)
	assert.Equal(t, []string{"/usr/lib/debug", "/opt/debug"}, cfg.DebugDirectories)
	assert.Equal(t, 0.02, cfg.OverheadBudget)
	assert.Zero(t, createDefaultConfig().OverheadBudget, "no budget unless one is set")
	assert.Equal(t, config.Span{
		Function: "exec_*", SourceFile: "*/executor/*.c", MaxFunctions: 200,
		Attributes: map[string]string{"args": "$$params"}, ExitAttributes: map[string]string{"ret": "$return"},
	}, cfg.Targets[0].Spans[2])
	assert.Equal(t, "line:lock.c:120", cfg.Targets[0].Spans[3].Entry)
	assert.False(t, cfg.Metrics.UprobeEventsLost.Enabled)

	sub, err = cm.Sub("uprobe/invalid")
	require.NoError(t, err)
	cfg = createDefaultConfig()
	require.NoError(t, sub.Unmarshal(cfg))
	err = confmap.Validate(cfg)
	require.Error(t, err)
	for _, want := range []string{
		`flush_interval 0s: want 1ms to 1s`,
		`ring_buffer_size 3000: want a power of two`,
		`max_batch_spans 0: want 1 to 1048576`,
		`debug_directories[0] "debug" must be absolute`,
		`overhead_budget -0.1: want 0 (none) or a fraction of a CPU from 0.001 to 1024`,
		`max_sites_later -1: want 0 (automatic) to 1048576`,
		`targets[0]: path "relative/path" must be absolute`,
		`targets[0].spans[0]: exit without entry`,
		`targets[0].spans[1].attributes["x"]: "retval": retval is only known at exit`,
		`targets[0].counters[0]: probe "kprobe:foo": unknown probe kind "kprobe"`,
	} {
		assert.ErrorContains(t, err, want)
	}
}

// An attach the kernel refuses is logged, counted per probe and fails Start
// with nothing attached.
func TestAttachFailureTelemetry(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	s := created(t, []config.Target{{Path: b.Program, Counters: config.CountersOf("usdt:demo:tick", "uprobe:work")}})
	st, err := os.Stat(b.Program)
	require.NoError(t, err)
	s.rcv.beforeAttach = func(plan *plan.Plan) {
		for i := range plan.Attachments {
			plan.Attachments[i].FileOffset = uint64(st.Size()) + 4096 // the kernel refuses offsets past the file
			plan.Attachments[i].RefCtrOffset = 0
		}
	}
	err = s.rcv.Start(context.Background(), componenttest.NewNopHost())
	require.ErrorContains(t, err, "attaching usdt:demo:tick in "+b.Program)
	require.ErrorContains(t, err, "(and 2 more attachments failed)")
	metadatatest.AssertEqualReceiverUprobeAttachFailures(t, s.telemetry, []metricdata.DataPoint[int64]{
		{Value: 2, Attributes: attribute.NewSet(attribute.String("probe.name", "usdt:demo:tick"))},
		{Value: 1, Attributes: attribute.NewSet(attribute.String("probe.name", "uprobe:work"))},
	}, metricdatatest.IgnoreTimestamp(), metricdatatest.IgnoreValue())
	require.NoError(t, s.rcv.Shutdown(context.Background()))
}

// A pid: target whose process does not exist fails Start with one sentence.
func TestMissingProcess(t *testing.T) {
	cfg := createDefaultConfig()
	cfg.Targets = []config.Target{{Path: "/bin/true", PID: 1 << 30, Counters: config.CountersOf("uprobe:main")}}
	r, err := NewFactory().CreateMetrics(context.Background(), receivertest.NewNopSettings(metadata.Type), cfg, consumertest.NewNop())
	require.NoError(t, err)
	err = r.Start(context.Background(), componenttest.NewNopHost())
	require.EqualError(t, err, "resolving targets: target /bin/true: process 1073741824 does not exist")
	require.NoError(t, r.Shutdown(context.Background()))
}
