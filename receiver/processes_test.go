package receiver

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestProcExe(t *testing.T) {
	for _, tt := range []struct {
		filename string
		pid      uint32
		ok       bool
	}{
		{"/proc/self/exe", 42, true},
		{"/proc/17/exe", 17, true},
		{"/proc/self/exe/", 0, false},
		{"/proc/self/fd/3", 0, false},
		{"/proc/x17/exe", 0, false},
		{"/proc/99999999999/exe", 0, false},
		{"/usr/bin/prog", 0, false},
		{"./proc/self/exe", 0, false},
		{"/dev/fd/3", 0, false},
	} {
		pid, ok := procExe(tt.filename, 42)
		assert.Equal(t, tt.ok, ok, tt.filename)
		assert.Equal(t, tt.pid, pid, tt.filename)
	}
}
