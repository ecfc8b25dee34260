package debuginfo

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseSelector(t *testing.T) {
	s, err := ParseSelector("source_file:*/debuginfo/*.c handle_*")
	require.NoError(t, err)
	require.NotNil(t, s.Source)
	require.NotNil(t, s.Name)
	assert.Equal(t, "*/debuginfo/*.c", s.Source.String())
	assert.Equal(t, "handle_*", s.Name.String())
	s, err = ParseSelector("source_file:prog.c")
	require.NoError(t, err)
	assert.Nil(t, s.Name)
	_, err = ParseSelector("  ")
	assert.Error(t, err)
	_, err = ParseSelector("source_file:[x")
	assert.Error(t, err)
}
