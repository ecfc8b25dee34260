package bpfobj

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// processRecord returns a process record of event with n bytes before its
// trailer, 8-byte aligned as the ring's are.
func processRecord(event uint8, n int, edit func(*ProcessRecord)) []byte {
	buf := make([]uint64, (n+ProcessTrailerSize)/8)
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), n+ProcessTrailerSize)
	h := (*ProcessRecord)(unsafe.Pointer(&raw[n]))
	h.Kind, h.Event, h.Pid, h.CgroupId, h.Cgroup1Id = RecordKindProcess, event, 42, 7, 9
	if edit != nil {
		edit(h)
	}
	return raw
}

// Exec records carry the file name and command line before their trailer;
// fork, exit, seen and cgroup records are a trailer alone. Any other size,
// or an event in the other form, is not a process record.
func TestDecodeProcess(t *testing.T) {
	execSize := ExecFilenameMax + ExecArgsMax
	for _, tc := range []struct {
		name string
		rec  []byte
		ok   bool
	}{
		{"exec", processRecord(ProcessExec, execSize, func(h *ProcessRecord) { h.FilenameLen, h.ArgsLen = 3, 5 }), true},
		{"fork", processRecord(ProcessFork, 0, nil), true},
		{"exit", processRecord(ProcessExit, 0, nil), true},
		{"seen", processRecord(ProcessSeen, 0, nil), true},
		{"cgroup", processRecord(ProcessCgroup, 0, nil), true},
		{"exec without its text", processRecord(ProcessExec, 0, nil), false},
		{"fork with text", processRecord(ProcessFork, execSize, nil), false},
		{"short trailer with lengths", processRecord(ProcessExit, 0, func(h *ProcessRecord) { h.FilenameLen = 1 }), false},
		{"file name too long", processRecord(ProcessExec, execSize, func(h *ProcessRecord) { h.FilenameLen = uint16(ExecFilenameMax + 1) }), false},
		{"a span's kind", processRecord(ProcessFork, 0, func(h *ProcessRecord) { h.Kind = RecordKindSpan }), false},
		{"another size", processRecord(ProcessFork, 8, nil), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := DecodeProcess(tc.rec)
			require.Equal(t, tc.ok, ok)
			if !ok {
				return
			}
			assert.Equal(t, uint32(42), p.Pid)
			assert.Equal(t, uint64(7), p.CgroupId)
			assert.Equal(t, uint64(9), p.Cgroup1Id)
			assert.Len(t, p.Filename, int(p.FilenameLen))
			assert.Len(t, p.Args, int(p.ArgsLen))
		})
	}
}
