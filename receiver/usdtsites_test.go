package receiver

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/tracer"
	"github.com/otel-uprobe/uprobereceiver/receiver/internal/metadata"
)

// buildSites builds testdata/usdtsites with extra gcc flags.
func buildSites(t *testing.T, flags ...string) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "sites")
	testutil.Gcc(t, dir, append(append([]string{"-O2"}, flags...), "-o", bin, testutil.Testdata("usdtsites", "sites.c"))...)
	return bin
}

// A USDT site's uprobe stays on the site's own nop unless a real 5-byte nop
// follows it: never on the instruction after it, whatever that is. Each case
// was probed on the next instruction before: a branch join (every call
// counted), a VEX store (skipped under the probe), a lock-prefixed
// instruction (refused by the kernel).
func TestUSDTSitesStayOnTheirNop(t *testing.T) {
	testutil.RequireRoot(t)
	if !tracer.HaveOptimizedUprobes() {
		testutil.SkipOrFail(t, "the kernel has no optimized uprobe path (arch_uprobe_optimize): sites are never moved")
	}
	bin := buildSites(t)
	p := testutil.StartProgram(t, bin, "ready")
	s := startReceiver(t, []config.Target{{Path: bin, Counters: config.CountersOf("usdt:sites:branch", "usdt:sites:vex", "usdt:sites:lock")}})

	assert.Equal(t, "branch 1000 g=0x12345678", p.Ask("branch 1000", "branch "))
	assert.Equal(t, "vex 1000 bad=0", p.Ask("vex 1000", "vex "), "the store after the site happens on every call")
	assert.Equal(t, "lock 1000 locked=1000", p.Ask("lock 1000", "lock "))

	require.NoError(t, s.rcv.Shutdown(context.Background()))
	hits := sumPoints(s.metrics.AllMetrics()[len(s.metrics.AllMetrics())-1], "uprobe.probe.hits")
	assert.Equal(t, int64(250), hits["usdt:sites:branch"], "the probe fires for the calls that reach the site, one in four")
	assert.Equal(t, int64(1000), hits["usdt:sites:vex"])
	assert.Equal(t, int64(1000), hits["usdt:sites:lock"])
}

// A %rip-relative USDT argument at a "nop; nop5" site, probed on the nop5,
// is read relative to the probed address: the value, not the value one byte
// off.
func TestRIPRelativeArgumentAtAMovedSite(t *testing.T) {
	testutil.RequireRoot(t)
	if !tracer.HaveOptimizedUprobes() {
		testutil.SkipOrFail(t, "the kernel has no optimized uprobe path (arch_uprobe_optimize): sites are never moved")
	}
	bin := buildSites(t) // -O2, PIE
	p := testutil.StartProgram(t, bin, "ready")
	s := startReceiver(t, []config.Target{{Path: bin, Spans: []config.Span{{
		Name: "rip", Entry: "usdt:sites:rip", Exit: "usdt:sites:rip_done",
		Attributes: map[string]string{"value": "arg0:x64"},
	}}}})
	require.Equal(t, "optimizable", s.rcv.plan.Attachments[0].Class.String(), "probed on the nop5")
	p.Ask("rip 100", "rip 100")
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	spans := allSpans(s.traces)
	require.Len(t, spans, 100)
	for _, sp := range spans {
		assert.Equal(t, "0x1122334455667788", attrStr(t, sp.Attributes(), "value"))
	}
}

// A note whose site is inside an instruction, or on an instruction that is
// not a nop, does not describe the code: the probe is refused, nothing is
// attached, and the program runs on untouched.
func TestCorruptUSDTNotesAreRefused(t *testing.T) {
	testutil.RequireRoot(t)
	bin := buildSites(t, "-DCORRUPT")
	p := testutil.StartProgram(t, bin, "ready")
	for probe, want := range map[string]string{
		"usdt:sites:inside": "usdt:sites:inside: site at 0x",
		"usdt:sites:notnop": `the site corrupt+0xa is "add $0x1,%rax", not the nop a USDT site is`,
	} {
		cfg := createDefaultConfig()
		cfg.Targets = []config.Target{{Path: bin, Counters: config.CountersOf("usdt:sites:lock", probe)}}
		require.NoError(t, cfg.Validate())
		r, err := NewFactory().CreateMetrics(context.Background(), receivertest.NewNopSettings(metadata.Type), cfg, consumertest.NewNop())
		require.NoError(t, err)
		err = r.Start(context.Background(), componenttest.NewNopHost())
		require.Error(t, err, probe)
		assert.Contains(t, err.Error(), want)
		if probe == "usdt:sites:inside" {
			assert.Contains(t, err.Error(), "offset 0x2 is inside the instruction at 0x0 (10 bytes: mov $-0x6f6f6f6f6f6f6f70,%rax)")
		}
		assert.Contains(t, err.Error(), "the note does not match the code")
		require.NoError(t, r.Shutdown(context.Background()))
		assert.Equal(t, "corrupt 10 rax=0x9090909090909091", p.Ask("corrupt 10", "corrupt "), "the program runs as built")
	}
}

// A function whose first instruction is a USDT probe's nop shares one
// kernel uprobe with the probe, and the kernel refuses (EINVAL) a second
// uprobe at one file offset with another semaphore, or none: the function's
// entry and return carry the probe's semaphore, so that a span on the
// function and a counter on the probe attach together (Start failed
// before), each exact, with the semaphore up while they are attached and
// down after.
func TestFunctionOnUSDTProbeWithSemaphore(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildC(t, "usdtentry", "-fcf-protection=none")
	p := testutil.StartProgram(t, bin, "ready")
	require.Equal(t, "semaphore 0", p.Ask("semaphore", "semaphore "))
	s := startReceiver(t, []config.Target{{
		Path:     bin,
		Spans:    []config.Span{{Name: "entered", Function: "entered"}, {Name: "other", Function: "other"}},
		Counters: []config.Counter{{Probe: "usdt:app:start"}},
	}})

	// The premise: the probe's nop is the function's first instruction,
	// and every attachment there has the probe's semaphore.
	byRef := map[string][]uint64{} // probe → file offset, semaphore of each attachment
	for _, a := range s.rcv.plan.Attachments {
		ref := s.rcv.plan.Probes[a.Probe].Ref
		byRef[ref] = append(byRef[ref], a.FileOffset, a.RefCtrOffset)
	}
	usdt := byRef["usdt:app:start"]
	require.Len(t, usdt, 2, "one location: %v", byRef)
	require.NotZero(t, usdt[1], "the probe has a semaphore")
	assert.Equal(t, usdt, byRef["uprobe:entered"], "the function's entry: the probe's file offset and semaphore")
	assert.Equal(t, usdt, byRef["uretprobe:entered"], "its return, attached at its entry")
	require.Len(t, byRef["uprobe:other"], 2)
	assert.Zero(t, byRef["uprobe:other"][1], "another function has no semaphore")

	require.Equal(t, "semaphore 1", p.Ask("semaphore", "semaphore "), "raised once, however many attach at the probe")
	require.Equal(t, "ran 100", p.Ask("run 100", "ran "))
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	assert.Equal(t, "semaphore 0", p.Ask("semaphore", "semaphore "), "lowered at Shutdown")

	spans := allSpans(s.traces)
	assert.Len(t, spansNamed(spans, "entered"), 100)
	assert.Len(t, spansNamed(spans, "other"), 100)
	assert.Equal(t, int64(100), sumPoints(lastMetrics(t, s), "uprobe.probe.hits")["usdt:app:start"])
}
