package config

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
)

// TestValidateEngineLimits: the limits of the engine that the
// configuration alone decides are said by Validate, with the resolver's
// sentence, before any file is read (the 64th selector was refused at
// Start after every target's file was read: 5.3 s and 589 MB).
func TestValidateEngineLimits(t *testing.T) {
	chosen := func(n int, pid bool) []Target {
		out := make([]Target, n)
		for i := range out {
			out[i] = Target{Path: fmt.Sprintf("/opt/app%d", i), Counters: CountersOf("usdt:a:b")}
			if pid {
				out[i].PID = 100 + i
			} else {
				out[i].Process = &procfs.Selector{Executable: fmt.Sprintf("/opt/app%d", i)}
			}
		}
		return out
	}
	histograms := func(perTarget, targets int) []Target {
		out := make([]Target, targets)
		for i := range out {
			out[i] = Target{Path: fmt.Sprintf("/opt/app%d", i)}
			for j := range perTarget {
				out[i].Counters = append(out[i].Counters, Counter{Probe: "uprobe:f", Filter: []string{fmt.Sprintf("arg0 > %d", j)}, Histogram: "arg0"})
			}
		}
		return out
	}
	conds := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("arg%d > 0", i))
		}
		return out
	}
	shared := func(entryConds, exitConds int) []Target {
		// uprobe:g closes span a and opens span b: one location
		// evaluates a's exit_filter and b's filter.
		return []Target{{Path: "/opt/app", Spans: []Span{
			{Name: "a", Entry: "uprobe:f", Exit: "uprobe:g", ExitFilter: conds(exitConds)},
			{Name: "b", Entry: "uprobe:g", Exit: "uretprobe:g", Filter: conds(entryConds)},
		}}}
	}
	for _, c := range []struct {
		name    string
		targets []Target
		want    []string // nil: valid
	}{
		{"63 selectors", chosen(bpfobj.MaxChosenTargets, false), nil},
		{"64 selectors", chosen(bpfobj.MaxChosenTargets+1, false),
			[]string{"targets[63]: more than 63 targets choose their processes (pid: or process:)"}},
		{"100 selectors and pids, said once", append(chosen(60, true), chosen(40, false)...),
			[]string{"targets[63]: more than 63 targets choose their processes (pid: or process:)"}},
		{"63 pids beside targets of every process", append(chosen(63, true), Target{Path: "/opt/all", Counters: CountersOf("usdt:a:b")}), nil},
		{"65,535 histograms", histograms(5, MaxHistograms/5), nil},
		{"65,536 histograms", append(histograms(5, MaxHistograms/5), histograms(1, 1)...),
			[]string{"targets[13107].counters[0]: more than 65535 counters have a histogram"}},
		{"conditions of two spans at one location, 2 + 2", shared(2, 2), nil},
		{"conditions of two spans at one location, 3 + 2", shared(3, 2),
			[]string{"targets[0].spans[1]: probe uprobe:g: 5 conditions at one location (its spans' filter and exit_filter, or its counter's), at most 4"}},
		{"conditions of two spans at one location, closed after it opens", []Target{{Path: "/opt/app", Spans: []Span{
			{Name: "b", Entry: "uprobe:g", Exit: "uretprobe:g", Filter: conds(1)},
			{Name: "a", Entry: "uprobe:f", Exit: "uprobe:g", ExitFilter: conds(4)},
		}}}, []string{"targets[0].spans[1]: probe uprobe:g: 5 conditions at one location (its spans' filter and exit_filter, or its counter's), at most 4"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Validate(c.targets)
			if c.want == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Equal(t, c.want, errLines(err))
		})
	}
	assert.Equal(t, "5 conditions at one location (its spans' filter and exit_filter, or its counter's), at most 4", ConditionsAtOneLocation(5),
		"the resolver's sentence (internal/planner)")
}

// TestValidateNames: what becomes telemetry (service.name, span names,
// attribute keys, probe.name, probe.value) is bounded and printable UTF-8,
// and the sentence about a long value stays short.
func TestValidateNames(t *testing.T) {
	const (
		t0 = "targets[0]"
		s0 = "targets[0].spans[0]"
		c0 = "targets[0].counters[0]"
	)
	mb := strings.Repeat("x", 1<<20)
	ok := func(mod func(*Target)) []Target {
		tg := Target{Path: bin, ServiceName: "postgres", Spans: []Span{{Name: "pg.query", Entry: "usdt:postgresql:query__start", Exit: "usdt:postgresql:query__done"}},
			Counters: CountersOf("usdt:postgresql:transaction__start")}
		mod(&tg)
		return []Target{tg}
	}
	for _, c := range []struct {
		name    string
		targets []Target
		want    []string // nil: valid
	}{
		{"printable unicode", ok(func(t *Target) { t.ServiceName = "café-服务 (prod)"; t.Spans[0].Name = "requête" }), nil},
		{"256 bytes", ok(func(t *Target) { t.ServiceName = strings.Repeat("s", MaxNameBytes) }), nil},
		{"257 bytes", ok(func(t *Target) { t.ServiceName = strings.Repeat("s", MaxNameBytes+1) }),
			[]string{t0 + ": service_name is 257 bytes, at most 256: names that become telemetry are bounded"}},
		{"a megabyte", ok(func(t *Target) { t.ServiceName = mb }),
			[]string{t0 + ": service_name is 1048576 bytes, at most 256: names that become telemetry are bounded"}},
		{"newline", ok(func(t *Target) { t.ServiceName = "pg\nadmin" }),
			[]string{t0 + `: service_name "pg\nadmin" has the control character U+000A at byte 2: names that become telemetry are printable UTF-8`}},
		{"terminal escape", ok(func(t *Target) { t.ServiceName = "\x1b[31mred" }),
			[]string{t0 + `: service_name "\x1b[31mred" has the control character U+001B at byte 0: names that become telemetry are printable UTF-8`}},
		{"DEL", ok(func(t *Target) { t.ServiceName = "a\x7f" }),
			[]string{t0 + `: service_name "a\x7f" has the control character U+007F at byte 1: names that become telemetry are printable UTF-8`}},
		{"C1 control", ok(func(t *Target) { t.ServiceName = "a\u0085b" }),
			[]string{t0 + `: service_name "a\u0085b" has the control character U+0085 at byte 1: names that become telemetry are printable UTF-8`}},
		{"not UTF-8", ok(func(t *Target) { t.ServiceName = "a\xffb" }),
			[]string{t0 + `: service_name "a\xffb" is not UTF-8 at byte 1: names that become telemetry are printable UTF-8`}},
		{"U+FFFD itself is fine", ok(func(t *Target) { t.ServiceName = "a\uFFFDb" }), nil},
		{"the default from the path", ok(func(t *Target) { t.ServiceName = ""; t.Path = "/opt/\x1bapp" }),
			[]string{t0 + `: service_name (the base name of path by default) "\x1bapp" has the control character U+001B at byte 0: names that become telemetry are printable UTF-8`}},
		{"a long control-laden value is quoted short", ok(func(t *Target) { t.ServiceName = "\t" + strings.Repeat("y", 200) }),
			[]string{t0 + `: service_name "\t` + strings.Repeat("y", 63) + `"… has the control character U+0009 at byte 0: names that become telemetry are printable UTF-8`}},
		{"path of a megabyte", ok(func(t *Target) { t.Path = "/" + mb }),
			[]string{t0 + ": path is 1048577 bytes, at most 4096 (PATH_MAX)"}},
		{"span name", ok(func(t *Target) { t.Spans[0].Name = "q\ruery" }),
			[]string{s0 + `: name "q\ruery" has the control character U+000D at byte 1: names that become telemetry are printable UTF-8`}},
		{"span name of a megabyte", ok(func(t *Target) { t.Spans[0].Name = mb }),
			[]string{s0 + ": name is 1048576 bytes, at most 256: names that become telemetry are bounded"}},
		{"attribute key", ok(func(t *Target) { t.Spans[0].Attributes = map[string]string{"db\x00text": "arg0:string"} }),
			[]string{s0 + `.attributes["db\x00text"]: the key "db\x00text" has the control character U+0000 at byte 2: names that become telemetry are printable UTF-8`}},
		{"attribute key of a megabyte", ok(func(t *Target) { t.Spans[0].ExitAttributes = map[string]string{mb: "arg0"} }),
			[]string{s0 + `.exit_attributes["` + strings.Repeat("x", 64) + `"…]: the key is 1048576 bytes, at most 256: names that become telemetry are bounded`}},
		{"probe reference of a megabyte", ok(func(t *Target) { t.Counters = CountersOf("uprobe:" + mb) }),
			[]string{c0 + ": probe reference is 1048583 bytes, at most 4096"}},
		{"function of a megabyte", ok(func(t *Target) { t.Spans[0] = Span{Function: mb} }),
			[]string{s0 + ": function is 1048576 bytes, at most 4096"}},
		{"a counter's filter text", ok(func(t *Target) {
			t.Counters = []Counter{{Probe: "uprobe:f", Filter: []string{"arg1:string == \"\x1b\""}}}
		}), []string{c0 + `: probe.name (the probe and its filter) "uprobe:f if arg1:string == \"\x1b\"" has the control character U+001B at byte 28: names that become telemetry are printable UTF-8`}},
		{"an escaped control character in a filter is fine", ok(func(t *Target) {
			t.Counters = []Counter{{Probe: "uprobe:f", Filter: []string{`arg1:string == "\x1b"`}}}
		}), nil},
		{"a histogram of a megabyte", ok(func(t *Target) { t.Counters = []Counter{{Probe: "uprobe:f", Histogram: mb}} }),
			[]string{c0 + ": histogram (probe.value) is 1048576 bytes, at most 4096: names that become telemetry are bounded"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := Validate(c.targets)
			if c.want == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Equal(t, c.want, errLines(err))
			assert.Less(t, len(err.Error()), 512, "a sentence, not the value")
		})
	}
}

// FuzzValidateNames: whatever service_name, span name, attribute key and
// counter filter a configuration has, Validate accepts only names that are
// bounded and printable UTF-8 (what reaches telemetry).
func FuzzValidateNames(f *testing.F) {
	f.Add("postgres", "pg.query", "db.query.text", `arg1:string == "x"`)
	f.Add("pg\nadmin", "q\x1buery", "k\x00", "arg1:string == \"\x1b\"")
	f.Add("a\xffb", "\u0085", strings.Repeat("k", MaxNameBytes+1), `arg1:string prefix "\x1b"`)
	f.Add("", "", "", "")
	f.Fuzz(func(t *testing.T, service, span, key, filter string) {
		tg := Target{Path: "/opt/app", ServiceName: service,
			Spans:    []Span{{Name: span, Entry: "uprobe:f", Exit: "uretprobe:f", Attributes: map[string]string{key: "arg0"}}},
			Counters: []Counter{{Probe: "uprobe:g", Filter: []string{filter}}}}
		if Validate([]Target{tg}) != nil {
			return
		}
		for _, n := range []string{tg.ServiceNameOrDefault(), span, key} {
			if len(n) > MaxNameBytes || checkTelemetryName("name", n, MaxNameBytes) != nil {
				t.Fatalf("accepted %q", n)
			}
		}
		ref := tg.Counters[0].Ref()
		if len(ref) > MaxProbeRefBytes || checkTelemetryName("probe.name", ref, MaxProbeRefBytes) != nil {
			t.Fatalf("accepted the counter %q", ref)
		}
	})
}
