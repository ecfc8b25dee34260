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
