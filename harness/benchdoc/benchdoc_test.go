package benchdoc

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSoakSection(t *testing.T) {
	doc := ReplaceSoak("# Benchmarks\n\nnumbers\n", "## Soak\nflat\n")
	assert.Equal(t, "# Benchmarks\n\nnumbers\n\n"+SoakStart+"\n## Soak\nflat\n"+SoakEnd+"\n", doc)
	doc = ReplaceSoak(doc, "## Soak\nstill flat")
	assert.Equal(t, "# Benchmarks\n\nnumbers\n\n"+SoakStart+"\n## Soak\nstill flat\n"+SoakEnd+"\n", doc)
	assert.Equal(t, "# New\n\n"+SoakStart+"\n## Soak\nstill flat\n"+SoakEnd+"\n", KeepSoak(doc, "# New\n"))
	assert.Equal(t, "# New\n", KeepSoak("# Old\n", "# New\n"))
}

func TestSections(t *testing.T) {
	doc := Budget.Replace("# Benchmarks\n\nnumbers\n", "## Budget\nflat")
	doc = ReplaceSoak(doc, "## Soak\nflat")
	doc = Budget.Replace(doc, "## Budget\nsteady")
	want := "# Benchmarks\n\nnumbers\n\n" + Budget.Start + "\n## Budget\nsteady\n" + Budget.End + "\n\n" + SoakStart + "\n## Soak\nflat\n" + SoakEnd + "\n"
	assert.Equal(t, want, doc, "each section is replaced in place")
	assert.Equal(t, "# New\n\n"+Budget.Start+"\n## Budget\nsteady\n"+Budget.End+"\n\n"+SoakStart+"\n## Soak\nflat\n"+SoakEnd+"\n",
		KeepSections(doc, "# New\n"), "a new benchmark document keeps both")
	assert.Equal(t, "# New\n", KeepSections("# Old\n", "# New\n"))
}

// A benchmark run replaces its own machine kind's block and keeps the
// others, in their order.
func TestUpsertBlock(t *testing.T) {
	body := UpsertBlock("", "AMD EPYC, trap ~5 µs", "### AMD EPYC, trap ~5 µs\n| a | 1 |\n")
	assert.Equal(t, "### AMD EPYC, trap ~5 µs\n| a | 1 |\n", body)
	body = UpsertBlock(body, "AMD EPYC, trap ~1 µs", "### AMD EPYC, trap ~1 µs\n| a | 2 |")
	assert.Equal(t, "### AMD EPYC, trap ~5 µs\n| a | 1 |\n\n### AMD EPYC, trap ~1 µs\n| a | 2 |\n", body)
	body = UpsertBlock(body, "AMD EPYC, trap ~5 µs", "### AMD EPYC, trap ~5 µs\n| a | 3 |\n")
	assert.Equal(t, "### AMD EPYC, trap ~5 µs\n| a | 3 |\n\n### AMD EPYC, trap ~1 µs\n| a | 2 |\n", body)

	doc := Machines.Replace("# Benchmarks\n", body)
	assert.Equal(t, strings.TrimRight(body, "\n"), Machines.Body(doc))
	assert.Contains(t, KeepSections(doc, "# New\n"), body, "a new benchmark document keeps the machine kinds")
}
