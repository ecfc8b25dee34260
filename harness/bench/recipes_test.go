//go:build linux

package main

import (
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/internal/insn"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/recipe"
)

// Every embedded recipe has exactly one row in the feature cost matrix,
// named so that -rows recipe selects them all and nothing else.
func TestRecipeRowsCoverEveryRecipe(t *testing.T) {
	rows, stop := recipeRows()
	defer stop()
	var names []string
	for _, r := range rows {
		names = append(names, r.recipe)
		assert.True(t, strings.HasPrefix(r.name, "recipe: "+r.recipe+", "), r.name)
		assert.Positive(t, r.smokeCalls)
		// -smoke's 3 rounds do at most half the calls of a full run's
		// rounds (5 unless the row says).
		assert.LessOrEqual(t, 3*r.smokeCalls, max(r.rounds, 5)*r.calls/2, "-smoke runs a recipe row for seconds")
		assert.NotEmpty(t, r.dominates)
	}
	sort.Strings(names)
	assert.Equal(t, recipe.Names(), names)
}

// A recipe's floor is grouped by site class, a uretprobe's return leg
// apart; the trap floor weighs each class's traps per call by its cost.
func TestRecipeFloorClasses(t *testing.T) {
	assert.Equal(t, returnClass, siteClassOf(plan.Attachment{Return: true, Class: insn.Emulated}))
	assert.Equal(t, insn.SingleStepped.String(), siteClassOf(plan.Attachment{Class: insn.SingleStepped}))

	perClass := map[string]float64{insn.Emulated.String(): 1, insn.SingleStepped.String(): 1, returnClass: 2, insn.Optimizable.String(): 0.001}
	assert.Equal(t, "1.00 emulated + 2.00 return + 1.00 single-stepped per call", classText(perClass))
	assert.Equal(t, "no traps per call", classText(nil))

	trap := &Trap{EmulatedNs: 600, OptimizableNs: 400, SingleSteppedNs: 9000, ReturnNs: 500}
	assert.InDelta(t, 600+9000+2*500+0.4, trapFloor(trap, perClass), 1e-9)
	assert.Zero(t, trapFloor(nil, perClass))
}

// The recipe rows are a table of their own, out of the features' table.
func TestRecipeMarkdown(t *testing.T) {
	res := &Result{PerHit: []PerHit{
		{Name: "receiver: span, sample_ratio 0.01", Feature: "sample_ratio 0.01", AddedNs: 700, Baseline: floorCount, Ratio: 1.05, Dominates: "the return trap"},
		{Name: "recipe: dns, getaddrinfo, per lookup", Feature: "recipe dns", Recipe: "dns", AddedNs: 10795, UnprobedNs: 84, Cycles: []float64{10795, 10700, 11000},
			Traps: "1.00 emulated + 1.00 single-stepped per call", Baseline: "bare counting uprobes at its sites", Ratio: 1.10,
			Also: &Against{Floor: "trap", Ratio: 1.07}, Dominates: "the ret: return"},
	}}
	var b strings.Builder
	perHitMarkdown(&b, res)
	md := b.String()
	features, recipes, ok := strings.Cut(md, "### Each recipe")
	require.True(t, ok, md)
	assert.Contains(t, features, "| sample_ratio 0.01 |")
	assert.NotContains(t, features, "getaddrinfo")
	assert.Contains(t, recipes, "| dns | getaddrinfo, per lookup | 84 | 10795 (10700 to 11000) | 1.00 emulated + 1.00 single-stepped per call | 1.10 | 1.07 | the ret: return |\n")
}
