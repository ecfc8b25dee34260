package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadmeQuotesBenchmarks fails when the README's performance section
// is not what the committed benchmark documents say: run
// `go run ./harness/benchreadme` (make bench does) after measuring.
func TestReadmeQuotesBenchmarks(t *testing.T) {
	root := filepath.Join("..", "..")
	want, err := renderFrom(root)
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	got := Section.Body(string(readme))
	require.NotEmpty(t, got, "README.md has no performance section between %s and %s", Section.Start, Section.End)
	assert.Equal(t, strings.Trim(want, "\n"), got, "README.md's performance section is stale: run go run ./harness/benchreadme")
}

func TestFeatures(t *testing.T) {
	md := "# B\n\n## What each feature costs\n\ntext\n\n| feature | configuration | ns added per call | ratio | also | what dominates |\n|---|---|---:|---|---|---|\n" +
		"| line probe | receiver: line | 602 | 1.00 × floor | | the trap |\n| a | b | 1 | 2 × x | y | z |\n\n### Each recipe\n\ntext\n\n" +
		"| recipe | workload, per call | unprobed ns per call | ns added per call (cycles' range) | traps per call | × floor at its sites | × trap by class | what dominates |\n|---|---|---:|---:|---|---:|---:|---|\n" +
		"| dns | numeric getaddrinfo | 83 | 10800 (10700–10800) | 1 emulated | 1.08 | 1.07 | the ret |\n\n| other | x | y | z |\n| q | r | s | t |\n" +
		"\n## Next\n\n| feature | c | ns added per call | ratio |\n| n | 9 | 9 | 9 |\n"
	assert.Equal(t, [][3]string{
		{"line probe", "602", "1.00 × floor"},
		{"a", "1", "2 × x"},
		{"recipe: dns (numeric getaddrinfo)", "10800 (10700–10800)", "1.08 × floor at its sites"},
	}, features(md))
	assert.Nil(t, features("# none\n"))
}

func TestRenderMarksUnmetGoalsAndSmokeRuns(t *testing.T) {
	bench := benchResult{Machine: "M", CPUs: 2, Kernel: "6.18", Date: "2026-11-26T04:52:08Z", Commit: "abc", Smoke: true,
		Goals: []goal{{Name: "span", Target: "≤ 1.00×", Measured: "1.2×"}}}
	scale := scaleResult{Date: "2026-11-26T05:00:00Z", Goals: []goal{{Name: "start", Target: "≤ 1 s", Measured: "0.9 s", Met: true}}}
	s := render(bench, scale, "")
	assert.Contains(t, s, "| span | ≤ 1.00× | 1.2× | **no** |\n| start | ≤ 1 s | 0.9 s | yes |\n")
	assert.Contains(t, s, "smoke-run numbers")
	assert.Contains(t, s, "2026-11-26, commit `abc`")
	assert.NotContains(t, s, "What each feature adds")
}
