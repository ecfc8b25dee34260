package benchdoc

import (
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
