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

// spanRecord returns a span record with values bytes of values and the
// thread bytes before its trailer, 8-byte aligned as the ring's are.
func spanRecord(values int, thread []byte, edit func(*SpanRecord)) []byte {
	n := values + len(thread)
	buf := make([]uint64, (n+RecordTrailerSize+7)/8)
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), n+RecordTrailerSize)
	copy(raw[values:], thread)
	h := (*SpanRecord)(unsafe.Pointer(&raw[n]))
	h.Kind, h.EntryLen, h.ExitLen = RecordKindSpan, uint16(values/2), uint16(values-values/2)
	if thread != nil {
		h.Flags = RecordThreadContext
	}
	if edit != nil {
		edit(h)
	}
	return raw
}

// threadBlock returns the head of a ThreadContext with attrs, padded to 8.
func threadBlock(attrs []byte, attrsLen int) []byte {
	b := make([]byte, align8(threadContextHeadLen+len(attrs)))
	for i := range 24 {
		b[i] = byte(i + 1)
	}
	b[24], b[25] = 1, 1
	b[26], b[28] = byte(len(attrs)), byte(attrsLen)
	copy(b[threadContextHeadLen:], attrs)
	return b
}

// A span record with RecordThreadContext carries the thread context between
// its values and its trailer, 32 bytes and its attrs rounded up to 8; a
// record whose flag and bytes disagree is not a span record.
func TestDecodeRecordThreadContext(t *testing.T) {
	attrs := []byte{0, 3, 'G', 'E', 'T', 1, 2, '/', 'x'}
	for _, tc := range []struct {
		name   string
		rec    []byte
		ok     bool
		attrs  []byte
		thread bool
	}{
		{"no context", spanRecord(16, nil, nil), true, nil, false},
		{"ids only", spanRecord(16, threadBlock(nil, 0), nil), true, []byte{}, true},
		{"with attrs", spanRecord(8, threadBlock(attrs, len(attrs)), nil), true, attrs, true},
		{"no values", spanRecord(0, threadBlock(attrs, len(attrs)), nil), true, attrs, true},
		{"flag without context", spanRecord(16, nil, func(h *SpanRecord) { h.Flags = RecordThreadContext }), false, nil, false},
		{"context without flag", spanRecord(16, threadBlock(nil, 0), func(h *SpanRecord) { h.Flags = 0 }), false, nil, false},
		{"attrs longer than carried", spanRecord(16, threadBlock(attrs, 40), nil), false, nil, false},
		{"attrs beyond the bound", spanRecord(16, threadBlock(make([]byte, ThreadAttrsMax+8), ThreadAttrsMax+8), nil), false, nil, false},
		{"values beyond the record", spanRecord(16, nil, func(h *SpanRecord) { h.ExitLen = 100 }), false, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ok := DecodeRecord(tc.rec)
			require.Equal(t, tc.ok, ok)
			if !ok {
				return
			}
			require.Equal(t, tc.thread, r.Thread != nil)
			if !tc.thread {
				return
			}
			trace, span, flags, got := ThreadContextOf(r.Thread)
			assert.Equal(t, [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, trace)
			assert.Equal(t, [8]byte{17, 18, 19, 20, 21, 22, 23, 24}, span)
			assert.Equal(t, uint8(1), flags)
			assert.Equal(t, tc.attrs, got)
		})
	}
}

// PlainSpanRecord, the reader's inline path, takes exactly the span
// records without a thread context that DecodeRecord decodes, and
// decodes them the same way; every other record (thread contexts, process
// records, malformed ones) is left to DecodeRecord.
func TestPlainSpanRecordAgreesWithDecodeRecord(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rec   []byte
		plain bool
	}{
		{"no context", spanRecord(16, nil, nil), true},
		{"no values", spanRecord(0, nil, nil), true},
		{"entry only", spanRecord(16, nil, func(h *SpanRecord) { h.EntryLen, h.ExitLen = 16, 0 }), true},
		{"values at the bound", spanRecord(DataCap, nil, nil), true},
		{"values past the bound", spanRecord(DataCap+8, nil, nil), false},
		{"thread context", spanRecord(16, threadBlock(nil, 0), nil), false},
		{"flag without context", spanRecord(16, nil, func(h *SpanRecord) { h.Flags = RecordThreadContext }), false},
		{"values beyond the record", spanRecord(16, nil, func(h *SpanRecord) { h.ExitLen = 100 }), false},
		{"values short of the record", spanRecord(16, nil, func(h *SpanRecord) { h.ExitLen = 0 }), false},
		{"not a span", spanRecord(16, nil, func(h *SpanRecord) { h.Kind = RecordKindProcess }), false},
		{"process record", processRecord(ProcessExec, ExecFilenameMax+ExecArgsMax, nil), false},
		{"shorter than a trailer", make([]byte, RecordTrailerSize-8), false},
		{"empty", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := PlainSpanRecord(tc.rec)
			require.Equal(t, tc.plain, h != nil)
			if h == nil {
				return
			}
			r, ok := DecodeRecord(tc.rec)
			require.True(t, ok, "DecodeRecord takes what PlainSpanRecord takes")
			assert.Same(t, r.SpanRecord, h)
			assert.Nil(t, r.Thread)
			assert.Len(t, r.Entry, int(h.EntryLen))
			assert.Len(t, r.Exit, int(h.ExitLen))
		})
	}
}
