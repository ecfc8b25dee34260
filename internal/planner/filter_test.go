package planner

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
)

// buildFilters builds testdata/filters with debuginfo.
func buildFilters(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "filters")
	testutil.Gcc(t, dir, "-O2", "-g", "-o", bin, testutil.Testdata("filters", "filters.c"))
	return bin
}

// Conditions are compiled per location into the sites of the spans and
// counters they belong to; a filtered counter is a probe of its own.
func TestFilterPlan(t *testing.T) {
	bin := buildFilters(t)
	pl, err := Resolve([]config.Target{{Path: bin,
		Spans: []config.Span{{Name: "api", Function: "serve",
			Filter: []string{`$path == "/health"`, "arg1:s64 >= -5"}, ExitFilter: []string{"retval:s32 != 0"}}},
		Counters: []config.Counter{
			{Probe: "uprobe:serve"},
			{Probe: "uprobe:serve", Filter: []string{"arg1:u64 > 7"}, Histogram: "arg1:s64"},
			{Probe: "usdt:filt:req", Histogram: "arg1"},
		},
	}})
	require.NoError(t, err)
	refs := map[string]int{}
	for i, p := range pl.Probes {
		refs[p.Ref] = i
	}
	require.Contains(t, refs, "uprobe:serve if arg1:u64 > 7")
	assert.True(t, pl.Probes[refs["uprobe:serve if arg1:u64 > 7"]].Filtered)
	assert.False(t, pl.Probes[refs["uprobe:serve"]].Filtered)
	require.Len(t, pl.Histograms, 2)

	byProbe := map[int]plan.Site{}
	for _, s := range pl.Sites {
		byProbe[s.Probe] = s
	}
	entry := byProbe[refs["uprobe:serve"]]
	require.Len(t, entry.Filters, 2)
	assert.Equal(t, `$path == "/health"`, entry.Filters[0].Cond.String())
	assert.Equal(t, plan.StoreString, entry.Filters[0].Value.Store, "$path is a char *: a string")
	assert.False(t, entry.Filters[0].AtExit)
	assert.False(t, entry.FilteredHits, "the span's probe counts every hit")
	exit := byProbe[refs["uretprobe:serve"]]
	require.Len(t, exit.Filters, 1)
	assert.True(t, exit.Filters[0].AtExit)
	assert.Equal(t, uint8(4), exit.Filters[0].FilterSize())

	counted := byProbe[refs["uprobe:serve if arg1:u64 > 7"]]
	assert.True(t, counted.FilteredHits)
	require.Len(t, counted.Filters, 1)
	assert.Equal(t, 1, counted.ValueHist)
	assert.Equal(t, plan.StoreInt, counted.HistValue.Store)

	usdtSite := byProbe[refs["usdt:filt:req"]]
	assert.Equal(t, 2, usdtSite.ValueHist, "a counter with a histogram runs the site program")
	assert.True(t, usdtSite.HistValue.Value.FromArg)
	assert.Equal(t, uint8(8), usdtSite.HistValue.Value.ArgSize, "the note says -8@…: a long")
}

// What only the traced file can tell is checked when it is read: the type a
// $name has against the condition's constant.
func TestFilterPlanErrors(t *testing.T) {
	bin := buildFilters(t)
	for _, tc := range []struct {
		name string
		tg   config.Target
		err  string
	}{
		{"string compared with an integer", config.Target{Path: bin, Spans: []config.Span{{Function: "serve", Filter: []string{"$path > 3"}}}},
			"the value is string, not an integer"},
		{"integer compared with a string", config.Target{Path: bin, Spans: []config.Span{{Function: "serve", Filter: []string{`$size == "x"`}}}},
			"the value is s64, not a string"},
		{"constant out of range", config.Target{Path: bin, Spans: []config.Span{{Function: "serve", ExitFilter: []string{"retval:s32 < 3000000000"}}}},
			"out of the range of s32"},
		{"no such name", config.Target{Path: bin, Counters: []config.Counter{{Probe: "uprobe:serve", Filter: []string{"$nope == 1"}}}},
			"nope"},
		{"histogram of a string", config.Target{Path: bin, Counters: []config.Counter{{Probe: "uprobe:serve", Histogram: "$path"}}},
			"not an integer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Resolve([]config.Target{tc.tg})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.err)
		})
	}
}
