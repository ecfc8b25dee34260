//go:build linux

package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The call trees are three identical sets of treeFunctions functions, each
// starting with push %rbp (an emulated site, as probed() does); a root's
// call reaches every function of its tree once.
func TestTreeAsm(t *testing.T) {
	asm := treeAsm()
	for _, prefix := range []string{"pt", "tt", "tt2"} {
		defs := regexp.MustCompile(`(?m)^`+prefix+`_(\d+):\n\tpush %rbp\n`).FindAllStringSubmatch(asm, -1)
		assert.Len(t, defs, treeFunctions, prefix)
		calls := map[string]int{}
		for _, m := range regexp.MustCompile(`call (`+prefix+`_\d+)\n`).FindAllStringSubmatch(asm, -1) {
			calls[m[1]]++
		}
		assert.Len(t, calls, treeFunctions-1, "%s: every function but the root is called", prefix)
		for name, n := range calls {
			assert.Equal(t, 1, n, name)
		}
	}
	assert.True(t, strings.HasSuffix(asm, ".note.GNU-stack,\"\",@progbits\n"))
}

// A machine kind is its name and its trap to the microsecond.
func TestMachineBlock(t *testing.T) {
	res := &Result{Machine: "AMD EPYC", Kernel: "6.18", Trap: &Trap{EmulatedNs: 663}, PerHit: []PerHit{
		{Name: "receiver: span probe", Baseline: "floor: delivered span", Ratio: 1.099},
		{Name: "a feature without a goal", Baseline: "floor", Ratio: 2, Feature: "x"},
	}}
	key, block := machineBlock(res)
	assert.Equal(t, "AMD EPYC, trap ~1 µs", key)
	assert.True(t, strings.HasPrefix(block, "### AMD EPYC, trap ~1 µs\n"))
	assert.Contains(t, block, "| receiver: span probe vs floor: delivered span | 1.10× |")
	assert.NotContains(t, block, "a feature without a goal")
	res.Trap.EmulatedNs = 5196
	key, _ = machineBlock(res)
	assert.Equal(t, "AMD EPYC, trap ~5 µs", key)
}
