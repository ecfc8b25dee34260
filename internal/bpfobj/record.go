package bpfobj

import (
	"encoding/binary"
	"unsafe"
)

// This file is the one Go home of the ring-buffer record formats that
// bpf/engine.bpf.c writes. The last byte of every record is its kind
// (RecordKindSpan or RecordKindProcess). A span record is entry values, exit
// values, with RecordThreadContext the head of a ThreadContext (32 bytes
// and its attrs, rounded up to 8), then a SpanRecord trailer; an exec record is ExecFilenameMax
// bytes of the executed file's name, ExecArgsMax bytes of its command line,
// then a ProcessRecord trailer; the other process records are a
// ProcessRecord alone. Span values are stored in fetch order, each
// padded to 8 bytes:
//   - FetchKindInt: 8 bytes, little endian;
//   - FetchKindString and FetchKindGoString: a little-endian u16 length n
//     (without the NUL), n bytes, a NUL, padding;
//   - FetchKindBytes: exactly max_len bytes, padding.

// RecordTrailerSize is the size in bytes of the SpanRecord that ends every record.
const RecordTrailerSize = int(unsafe.Sizeof(SpanRecord{}))

// Record is one decoded ring-buffer record. Its slices alias the bytes it
// was decoded from.
type Record struct {
	*SpanRecord
	Entry, Exit []byte
	// Thread is the thread context the span's trace joined (the head of a
	// ThreadContext: ids, valid, flags, attrs-data-size, attrs_len, then
	// AttrsLen bytes of attrs-data), nil for none.
	Thread []byte
}

// ThreadContextOf returns the ids, trace flags and attrs-data a record's
// Thread holds.
func ThreadContextOf(b []byte) (trace [16]byte, span [8]byte, flags uint8, attrs []byte) {
	copy(trace[:], b[:16])
	copy(span[:], b[16:24])
	n := int(binary.NativeEndian.Uint16(b[28:30]))
	return trace, span, b[25], b[threadContextHeadLen : threadContextHeadLen+n : threadContextHeadLen+n]
}

// RecordKind returns the kind of a ring-buffer record (its last byte), or
// false for an empty record.
func RecordKind(rec []byte) (uint8, bool) {
	if len(rec) == 0 {
		return 0, false
	}
	return rec[len(rec)-1], true
}

// Process is one decoded process record. Its slices alias the bytes it was
// decoded from.
type Process struct {
	*ProcessRecord
	// Filename is the executed file's name as given to execve.
	Filename []byte
	// Args is the command line, its arguments separated by NUL bytes.
	Args []byte
}

// ProcessTrailerSize is the size of a ProcessRecord: a process record
// other than an exec record is one alone.
const ProcessTrailerSize = int(unsafe.Sizeof(ProcessRecord{}))

// execRecordSize is the size of an exec record.
var execRecordSize = ExecFilenameMax + ExecArgsMax + ProcessTrailerSize

// DecodeProcess splits a process record into its trailer, file name and
// command line (an exec record's; empty for the others); false when the
// record is not one.
func DecodeProcess(rec []byte) (Process, bool) {
	switch len(rec) {
	case ProcessTrailerSize:
		h := (*ProcessRecord)(unsafe.Pointer(&rec[0]))
		if h.Kind != RecordKindProcess || h.Event == ProcessExec || h.FilenameLen != 0 || h.ArgsLen != 0 {
			return Process{}, false
		}
		return Process{ProcessRecord: h}, true
	case execRecordSize:
	default:
		return Process{}, false
	}
	h := (*ProcessRecord)(unsafe.Pointer(&rec[ExecFilenameMax+ExecArgsMax]))
	if h.Kind != RecordKindProcess || h.Event != ProcessExec || int(h.FilenameLen) > ExecFilenameMax || int(h.ArgsLen) > ExecArgsMax {
		return Process{}, false
	}
	return Process{
		ProcessRecord: h,
		Filename:      rec[:h.FilenameLen:h.FilenameLen],
		Args:          rec[ExecFilenameMax : ExecFilenameMax+int(h.ArgsLen) : ExecFilenameMax+int(h.ArgsLen)],
	}, true
}

// PlainSpanRecord returns the trailer of a span record without a thread
// context whose values fill its body, the common record, and nil for any
// other record: DecodeRecord decodes those, and decodes a record this
// accepts the same way (Thread nil). It is small enough to inline into a
// reader's loop. rec must be 8-byte aligned (ring buffer records are).
func PlainSpanRecord(rec []byte) *SpanRecord {
	bodyLen := len(rec) - RecordTrailerSize
	if bodyLen < 0 {
		return nil
	}
	h := (*SpanRecord)(unsafe.Pointer(&rec[bodyLen]))
	if h.Kind != RecordKindSpan || h.Flags&RecordThreadContext != 0 || int(h.EntryLen)+int(h.ExitLen) != bodyLen || bodyLen > DataCap {
		return nil
	}
	return h
}

// DecodeRecord splits a ring-buffer record into its trailer and its values.
// It returns false when the record's length does not match what its
// trailer says. The trailer aliases rec, which must be 8-byte aligned (ring
// buffer records are).
func DecodeRecord(rec []byte) (Record, bool) {
	if len(rec) < RecordTrailerSize {
		return Record{}, false
	}
	bodyLen := len(rec) - RecordTrailerSize
	h := (*SpanRecord)(unsafe.Pointer(&rec[bodyLen]))
	valuesLen := int(h.EntryLen) + int(h.ExitLen)
	if h.Kind != RecordKindSpan || valuesLen > DataCap || valuesLen > bodyLen {
		return Record{}, false
	}
	out := Record{
		SpanRecord: h,
		Entry:      rec[:h.EntryLen:h.EntryLen],
		Exit:       rec[h.EntryLen:valuesLen:valuesLen],
	}
	thread := rec[valuesLen:bodyLen:bodyLen]
	switch {
	case h.Flags&RecordThreadContext == 0 && len(thread) == 0:
	case h.Flags&RecordThreadContext != 0 && len(thread) >= threadContextHeadLen:
		n := int(binary.NativeEndian.Uint16(thread[28:30]))
		if n > ThreadAttrsMax || len(thread) != align8(threadContextHeadLen+n) {
			return Record{}, false
		}
		out.Thread = thread
	default:
		return Record{}, false
	}
	return out, true
}

// ValueSize returns how many bytes the stored value of a fetch of the given
// kind (FetchKind*) and max_len takes at the start of data, and false when
// data does not hold such a value.
func ValueSize(kind uint8, maxLen uint16, data []byte) (int, bool) {
	var size int
	switch kind {
	case FetchKindInt:
		size = 8
	case FetchKindString, FetchKindGoString:
		if len(data) < 2 {
			return 0, false
		}
		n := int(binary.LittleEndian.Uint16(data))
		if n >= int(maxLen) {
			return 0, false
		}
		size = align8(2 + n + 1)
	case FetchKindBytes:
		size = align8(int(maxLen))
	default:
		return 0, false
	}
	return size, size <= len(data)
}

// IntValue returns the integer stored at the start of data, which
// ValueSize has checked.
func IntValue(data []byte) uint64 { return binary.LittleEndian.Uint64(data) }

// StringValue returns the bytes of the string stored at the start of data,
// which ValueSize has checked.
func StringValue(data []byte) []byte {
	return data[2 : 2+int(binary.LittleEndian.Uint16(data))]
}

func align8(n int) int { return (n + 7) &^ 7 }
