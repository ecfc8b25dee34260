package receiver

import (
	"context"
	"fmt"
	"math/bits"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/receiver/internal/metadatatest"
)

// filtersCall is call i of serve() in testdata/filters.
type filtersCall struct {
	path       string
	size, code int64
}

func filtersExpect(i int) filtersCall {
	c := filtersCall{size: int64(i*37%3000 - 500)}
	c.path = []string{fmt.Sprintf("/api/users/%d", i), "/health", fmt.Sprintf("/api/orders/%d", i), "/static/app.js"}[i%4]
	switch i % 5 {
	case 0:
		c.code = -int64(i%13) - 1
	case 1:
		c.code = int64(i % 3)
	}
	return c
}

// valueBuckets is a histogram by exponential bucket index of scale 0
// (index i holds magnitudes in (2^i, 2^(i+1)]), for each sign.
type valueBuckets struct {
	count, zero        uint64
	sum                int64
	positive, negative map[int]uint64
}

func (v *valueBuckets) add(x int64) {
	v.count++
	v.sum += x
	m := uint64(x)
	side := &v.positive
	if x < 0 {
		m, side = uint64(-x), &v.negative
	}
	if x == 0 {
		v.zero++
		return
	}
	if *side == nil {
		*side = map[int]uint64{}
	}
	(*side)[bits.Len64(m-1)-1]++
}

func bucketsOf(b pmetric.ExponentialHistogramDataPointBuckets) map[int]uint64 {
	var out map[int]uint64
	for i, n := range b.BucketCounts().AsRaw() {
		if n == 0 {
			continue
		}
		if out == nil {
			out = map[int]uint64{}
		}
		out[int(b.Offset())+i] = n
	}
	return out
}

// valuePoints returns the uprobe.probe.value points by probe.name.
func valuePoints(md pmetric.Metrics) map[string]pmetric.ExponentialHistogramDataPoint {
	return histogramPoints(md, valueMetric, "probe.name")
}

// Filters in the kernel keep exactly the calls they pass (integer, signed
// and unsigned, string equality and prefix, at entry and at exit, through
// registers, $names and a USDT argument), while the probe's counter counts
// every call; value histograms hold exactly the values the program passed.
func TestFiltersAndValueHistograms(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "filters")
	testutil.Gcc(t, dir, "-O2", "-g", "-o", bin, testutil.Testdata("filters", "filters.c"))
	const n = 4000

	cfg := createDefaultConfig()
	cfg.Targets = []config.Target{{Path: bin,
		Spans: []config.Span{{
			Name: "api", Function: "serve",
			Attributes:     map[string]string{"path": "arg0:string", "size": "$size"},
			ExitAttributes: map[string]string{"code": "retval:s32"},
			Filter:         []string{`arg0:string prefix "/api/"`, "$size >= 100"},
			ExitFilter:     []string{"retval:s32 != 0"},
		}},
		Counters: []config.Counter{
			{Probe: "uprobe:serve"},
			{Probe: "uprobe:serve", Filter: []string{`$path == "/health"`}},
			{Probe: "uprobe:serve", Filter: []string{"arg1:s64 < 0"}, Histogram: "arg1:s64"},
			{Probe: "uprobe:serve", Filter: []string{"arg1:u64 > 0xffffffff00000000"}},
			{Probe: "uprobe:serve", Filter: []string{"arg1:s64 >= 0", "arg1:s64 <= 1000"}},
			{Probe: "uprobe:serve", Filter: []string{`arg0:string == "/api/users"`}}, // a prefix of some paths, equal to none
			{Probe: "uretprobe:serve", Histogram: "retval:s32"},
			{Probe: "usdt:filt:req", Filter: []string{`arg0:string prefix "/static"`}},
		},
	}}
	prog := testutil.StartProgram(t, bin, "ready")
	s := startReceiverConfig(t, cfg)
	require.True(t, strings.HasPrefix(prog.Ask(fmt.Sprintf("run %d", n), "run "), fmt.Sprintf("run %d ", n)))
	st := spanStats(t, s, "api") // every call has returned: the kernel's counters are final
	require.NoError(t, s.rcv.Shutdown(context.Background()))

	var kept []string
	counts := map[string]int64{}
	var negatives, codes valueBuckets
	for i := range n {
		c := filtersExpect(i)
		counts["uprobe:serve"]++
		if c.path == "/health" {
			counts[`uprobe:serve if $path == "/health"`]++
		}
		if c.size < 0 {
			counts["uprobe:serve if arg1:s64 < 0"]++
			counts["uprobe:serve if arg1:u64 > 0xffffffff00000000"]++
			negatives.add(c.size)
		}
		if c.size >= 0 && c.size <= 1000 {
			counts["uprobe:serve if arg1:s64 >= 0 && arg1:s64 <= 1000"]++
		}
		counts["uretprobe:serve"]++
		codes.add(c.code)
		if strings.HasPrefix(c.path, "/static") {
			counts[`usdt:filt:req if arg0:string prefix "/static"`]++
		}
		if strings.HasPrefix(c.path, "/api/") && c.size >= 100 && c.code != 0 {
			kept = append(kept, fmt.Sprintf("%s %d %d", c.path, c.size, c.code))
		}
	}
	counts[`uprobe:serve if arg0:string == "/api/users"`] = 0
	require.NotEmpty(t, kept)
	require.Less(t, len(kept), n/4, "the filters keep a small part of the calls")

	var got []string
	for _, sp := range allSpans(s.traces) {
		require.Equal(t, "api", sp.Name())
		a := sp.Attributes()
		got = append(got, fmt.Sprintf("%s %d %d", attrStr(t, a, "path"), attrInt(t, a, "size"), attrInt(t, a, "code")))
	}
	sort.Strings(kept)
	sort.Strings(got)
	require.Equal(t, kept, got, "exactly the calls the filters pass are spans")

	md := s.metrics.AllMetrics()
	require.NotEmpty(t, md)
	last := md[len(md)-1]
	assert.Equal(t, counts, sumPoints(last, "uprobe.probe.hits"), "the probe counts every call, a filtered counter what passes")
	d := durations(last)["api"]
	assert.Equal(t, uint64(len(kept)), d.Count(), "filtered calls are not in the duration histogram")
	assert.Equal(t, uint64(n-len(kept)), st.Filtered, "filtered calls are counted")

	values := valuePoints(last)
	for name, want := range map[string]valueBuckets{"uprobe:serve if arg1:s64 < 0": negatives, "uretprobe:serve": codes} {
		dp, ok := values[name]
		require.True(t, ok, "a value histogram for %s in %v", name, values)
		assert.Equal(t, want.count, dp.Count(), name)
		assert.Equal(t, float64(want.sum), dp.Sum(), name)
		assert.Equal(t, want.zero, dp.ZeroCount(), name)
		assert.Equal(t, want.positive, bucketsOf(dp.Positive()), "%s: positive buckets", name)
		assert.Equal(t, want.negative, bucketsOf(dp.Negative()), "%s: negative buckets", name)
		assert.Equal(t, int32(0), dp.Scale())
		v, _ := dp.Attributes().Get("probe.value")
		assert.NotEmpty(t, v.Str())
	}
}

// Go: a Go string compared in the kernel, and an integer argument in the Go
// register ABI; spans pair by goroutine as ever.
func TestFiltersGo(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildGo(t, "goprog", false)
	prog := testutil.StartProgram(t, bin, "ready")
	s := startReceiver(t, []config.Target{{
		Path: bin,
		Spans: []config.Span{{
			Name: "probed", Function: "main.Probed",
			Attributes: map[string]string{"n": "arg0"},
			Filter:     []string{`arg1:gostring == "hello go"`},
		}},
		Counters: []config.Counter{
			{Probe: "uprobe:main.Probed", Filter: []string{"arg0:s64 < 100"}},
			{Probe: "uprobe:main.Probed", Filter: []string{`arg1:gostring prefix "hello"`}, Histogram: "arg0:s64"},
		},
	}})
	require.Equal(t, "args 92", prog.Ask("args", "args "))
	const calls = 20000
	require.Equal(t, fmt.Sprintf("done %d", calls), prog.Ask(fmt.Sprintf("run %d 10", calls), "done "))
	require.NoError(t, s.rcv.Shutdown(context.Background()))

	spans := allSpans(s.traces)
	require.Len(t, spans, 1, "only the call with \"hello go\"")
	assert.Equal(t, int64(42), attrInt(t, spans[0].Attributes(), "n"))
	last := s.metrics.AllMetrics()[len(s.metrics.AllMetrics())-1]
	assert.Equal(t, map[string]int64{
		"uprobe:main.Probed":                                 calls + 1,
		"uretprobe:main.Probed":                              calls + 1,
		"uprobe:main.Probed if arg0:s64 < 100":               100 + 1, // n = 0..99 and the args call's 42
		`uprobe:main.Probed if arg1:gostring prefix "hello"`: 1,
	}, sumPoints(last, "uprobe.probe.hits"))
	dp := valuePoints(last)[`uprobe:main.Probed if arg1:gostring prefix "hello"`]
	assert.Equal(t, uint64(1), dp.Count())
	assert.Equal(t, float64(42), dp.Sum())
	assert.Equal(t, map[int]uint64{5: 1}, bucketsOf(dp.Positive()), "42 is in (32, 64]")
	assert.Equal(t, uint64(1), durations(last)["probed"].Count())
}

// Strings at the limits compare as span attributes show them: a 64-byte
// constant is equal only to a string of exactly 64 bytes; a full char[16]
// with no NUL is its 16 bytes and nothing past it; string[N] is at most N-1
// bytes. A span whose exit_filter fails is kept when spans nested in it were
// recorded. Value histograms hold u64 values above 2^63 and exact 128-bit
// sums, and count the values they could not read.
func TestFilterLimits(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "filters")
	testutil.Gcc(t, dir, "-O2", "-g", "-o", bin, testutil.Testdata("filters", "filters.c"))
	a64 := strings.Repeat("a", 64)
	cfg := createDefaultConfig()
	cfg.Targets = []config.Target{{Path: bin,
		Spans: []config.Span{
			{Function: "label", Attributes: map[string]string{"tag": "$r->tag", "s": "$s"}},
			{Function: "outer", Attributes: map[string]string{"x": "$x"}, ExitFilter: []string{"$return < 0"}},
			{Function: "inner", Attributes: map[string]string{"x": "$x"}, Filter: []string{"$x >= 2"}},
		},
		Counters: []config.Counter{
			{Probe: "uprobe:label", Filter: []string{`$s == "` + a64 + `"`}},
			{Probe: "uprobe:label", Filter: []string{`$s != "` + a64 + `"`}},
			{Probe: "uprobe:label", Filter: []string{`$s prefix "` + a64 + `"`}},
			{Probe: "uprobe:label", Filter: []string{`$r->tag == "0123456789abcdef"`}},
			{Probe: "uprobe:label", Filter: []string{`$r->tag prefix "0123456789abcde"`}},
			{Probe: "uprobe:label", Filter: []string{`+0(arg0):string[3] == "aa"`}},
			{Probe: "uprobe:label", Filter: []string{`+0(arg0):string[3] == "abc"`}},
			{Probe: "uprobe:hu", Histogram: "$v"},
			{Probe: "uprobe:hs", Histogram: "$v"},
			{Probe: "uprobe:deref", Histogram: "+0(arg0):s64"},
		},
	}}
	prog := testutil.StartProgram(t, bin, "ready")
	s := startReceiverConfig(t, cfg)
	for _, cmd := range []string{"labels", "nest", "big"} {
		require.Equal(t, cmd, prog.Ask(cmd, cmd))
	}
	require.NoError(t, s.rcv.Shutdown(context.Background()))

	last := s.metrics.AllMetrics()[len(s.metrics.AllMetrics())-1]
	hits := sumPoints(last, "uprobe.probe.hits")
	for cond, want := range map[string]int64{
		`$s == "` + a64 + `"`:              1,
		`$s != "` + a64 + `"`:              3,
		`$s prefix "` + a64 + `"`:          2,
		`$r->tag == "0123456789abcdef"`:    2,
		`$r->tag prefix "0123456789abcde"`: 3,
		`+0(arg0):string[3] == "aa"`:       3,
		`+0(arg0):string[3] == "abc"`:      0,
	} {
		assert.Equal(t, want, hits["uprobe:label if "+cond], cond)
	}

	byName := map[string][]flatSpan{}
	ids := map[pcommon.SpanID]bool{}
	for _, sp := range allSpans(s.traces) {
		byName[sp.Name()] = append(byName[sp.Name()], sp)
		ids[sp.SpanID()] = true
	}
	var tags []string
	for _, sp := range byName["label"] {
		tags = append(tags, attrStr(t, sp.Attributes(), "tag"))
	}
	sort.Strings(tags)
	assert.Equal(t, []string{"0123456789abcde", "0123456789abcdef", "0123456789abcdef", "short"}, tags, "a full char[16] shows whole, and nothing past it")
	var outers, inners []int64
	for _, sp := range byName["outer"] {
		outers = append(outers, attrInt(t, sp.Attributes(), "x"))
	}
	for _, sp := range byName["inner"] {
		inners = append(inners, attrInt(t, sp.Attributes(), "x"))
		assert.True(t, ids[sp.ParentSpanID()], "inner(%d)'s parent was recorded", attrInt(t, sp.Attributes(), "x"))
	}
	sort.Slice(outers, func(i, j int) bool { return outers[i] < outers[j] })
	sort.Slice(inners, func(i, j int) bool { return inners[i] < inners[j] })
	assert.Equal(t, []int64{2, 3}, inners)
	assert.Equal(t, []int64{1, 2, 3}, outers, "outer(2) fails its exit_filter but has a recorded child: kept; outer(0) is dropped")

	values := valuePoints(last)
	hu := values["uprobe:hu"]
	assert.Equal(t, uint64(3), hu.Count())
	assert.Equal(t, map[int]uint64{62: 1, 63: 2}, bucketsOf(hu.Positive()), "2^63 is in (2^62, 2^63]; 2^63+1 and 2^64-1 in (2^63, 2^64]")
	assert.InEpsilon(t, float64(1<<63)+float64(1<<63)+1+float64(^uint64(0)), hu.Sum(), 1e-12, "the sum does not wrap")
	hs := values["uprobe:hs"]
	assert.Equal(t, map[int]uint64{62: 2}, bucketsOf(hs.Negative()))
	assert.InEpsilon(t, -2*float64(1<<63)+1, hs.Sum(), 1e-12)
	d := values["uprobe:deref"]
	assert.Equal(t, uint64(1), d.Count(), "the null pointer's value could not be read")
	assert.Equal(t, float64(7), d.Sum())
	assert.Equal(t, int64(2), hits["uprobe:deref"], "the counter counts both hits")
	metadatatest.AssertEqualReceiverUprobeFetchErrors(t, s.telemetry, []metricdata.DataPoint[int64]{{Value: 1}}, metricdatatest.IgnoreTimestamp())
}
