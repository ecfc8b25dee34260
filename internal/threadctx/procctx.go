package threadctx

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// The OTEP 4719 process context: a mapping named OTEL_CTX holds a 32-byte
// header (signature "OTEL_CTX", version u32, payload_size u32,
// monotonic_published_at_ns u64, payload pointer u64) and points at a
// protobuf ProcessContext{resource = 1, attributes = 2 (repeated
// KeyValue)}. OTEP 4947 keeps its process-wide data there, in attributes:
// threadlocal.schema_version and threadlocal.attribute_key_map (an array
// of strings: the attribute name of each key index of attrs-data).

// Bounds of the process context.
const (
	// MaxPayload bounds the payload read (the OTEP expects kilobytes).
	MaxPayload = 256 << 10
	// MaxKeys bounds the key map: key indexes are one byte.
	MaxKeys = 256
	// MaxKeyBytes bounds one attribute name of the key map; a longer one
	// is cut.
	MaxKeyBytes = 256
	// contextHeaderSize is the size of the header.
	contextHeaderSize = 32
	// readAttempts bounds the reads of a context that changes meanwhile.
	readAttempts = 3
)

// The process context's keys of OTEP 4947.
const (
	KeySchemaVersion = "threadlocal.schema_version"
	KeyAttributeMap  = "threadlocal.attribute_key_map"
)

// ProcessContext is what a process's OTEP 4719 context says of its thread
// contexts.
type ProcessContext struct {
	// SchemaVersion is threadlocal.schema_version, "" when absent.
	SchemaVersion string
	// Keys is threadlocal.attribute_key_map: the attribute name of each
	// key index.
	Keys []string
	// PublishedNs is the header's monotonic_published_at_ns: another value
	// is another context.
	PublishedNs uint64
}

// IsProcessContext says whether a mapping's name (its path in
// /proc/PID/maps) is that of a process context: [anon_shmem:OTEL_CTX],
// [anon:OTEL_CTX] or /memfd:OTEL_CTX, each possibly followed by more.
func IsProcessContext(name string) bool {
	for _, p := range []string{"[anon_shmem:OTEL_CTX]", "[anon:OTEL_CTX]", "/memfd:OTEL_CTX"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// ErrNoProcessContext says a mapping holds no process context (another
// signature or version).
var ErrNoProcessContext = errors.New("no OTEL_CTX process context")

// ReadProcessContext reads the process context whose header is at addr, as
// OTEP 4719's reading protocol says: the signature and version, a
// published time that is not zero, the payload, then the published time
// again, which must not have changed (else it reads again, at most three
// times).
func ReadProcessContext(mem Memory, addr uint64) (ProcessContext, error) {
	hdr := make([]byte, contextHeaderSize)
	for range readAttempts {
		if err := mem.ReadAt(hdr, addr); err != nil {
			return ProcessContext{}, fmt.Errorf("reading the process context's header: %w", err)
		}
		if !bytes.Equal(hdr[:8], []byte("OTEL_CTX")) {
			return ProcessContext{}, ErrNoProcessContext
		}
		if v := binary.LittleEndian.Uint32(hdr[8:]); v != 1 && v != 2 {
			return ProcessContext{}, fmt.Errorf("%w: version %d", ErrNoProcessContext, v)
		}
		size := binary.LittleEndian.Uint32(hdr[12:])
		published := binary.LittleEndian.Uint64(hdr[16:])
		payload := binary.LittleEndian.Uint64(hdr[24:])
		if published == 0 {
			continue // being written
		}
		if size > MaxPayload {
			return ProcessContext{}, fmt.Errorf("process context payload of %d bytes, more than %d", size, MaxPayload)
		}
		data := make([]byte, size)
		if err := mem.ReadAt(data, payload); err != nil {
			return ProcessContext{}, fmt.Errorf("reading the process context's payload: %w", err)
		}
		again := make([]byte, 8)
		if err := mem.ReadAt(again, addr+16); err != nil {
			return ProcessContext{}, fmt.Errorf("reading the process context's header: %w", err)
		}
		if binary.LittleEndian.Uint64(again) != published {
			continue // changed meanwhile
		}
		pc, err := DecodeProcessContext(data)
		pc.PublishedNs = published
		return pc, err
	}
	return ProcessContext{}, fmt.Errorf("the process context changed during %d reads", readAttempts)
}

// DecodeProcessContext decodes a ProcessContext payload and keeps the
// thread-local keys of its attributes.
func DecodeProcessContext(b []byte) (ProcessContext, error) {
	var pc ProcessContext
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		if num != 2 || typ != protowire.BytesType {
			return nil // the resource, or something newer
		}
		return decodeAttribute(v, &pc)
	})
	return pc, err
}

// decodeAttribute decodes one KeyValue{key = 1, value = 2} and keeps it
// when it is one of OTEP 4947's.
func decodeAttribute(b []byte, pc *ProcessContext) error {
	var key string
	var value []byte
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			key = string(v)
		case num == 2 && typ == protowire.BytesType:
			value = v
		}
		return nil
	})
	if err != nil {
		return err
	}
	switch key {
	case KeySchemaVersion:
		return fields(value, func(num protowire.Number, typ protowire.Type, v []byte) error {
			if num == 1 && typ == protowire.BytesType { // AnyValue.string_value
				pc.SchemaVersion = cut(v)
			}
			return nil
		})
	case KeyAttributeMap:
		pc.Keys = pc.Keys[:0]
		return fields(value, func(num protowire.Number, typ protowire.Type, v []byte) error {
			if num != 5 || typ != protowire.BytesType { // AnyValue.array_value
				return nil
			}
			return fields(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
				if num != 1 || typ != protowire.BytesType || len(pc.Keys) >= MaxKeys { // ArrayValue.values
					return nil
				}
				name := ""
				err := fields(v, func(num protowire.Number, typ protowire.Type, v []byte) error {
					if num == 1 && typ == protowire.BytesType {
						name = cut(v)
					}
					return nil
				})
				pc.Keys = append(pc.Keys, name) // a value of another type keeps its index
				return err
			})
		})
	}
	return nil
}

// cut returns at most MaxKeyBytes of b as valid UTF-8.
func cut(b []byte) string {
	if len(b) > MaxKeyBytes {
		b = b[:MaxKeyBytes]
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// fields calls fn for each field of a protobuf message, with the bytes of
// a length-delimited field's value (nil for the others).
func fields(b []byte, fn func(protowire.Number, protowire.Type, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("decoding the process context: %w", protowire.ParseError(n))
		}
		b = b[n:]
		var v []byte
		if typ == protowire.BytesType {
			v, n = protowire.ConsumeBytes(b)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("decoding the process context: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if err := fn(num, typ, v); err != nil {
			return err
		}
	}
	return nil
}

// MaxAttributes bounds the attributes taken from one record's attrs-data.
const MaxAttributes = 16

// DecodeAttributes decodes a record's attrs-data (entries of a key index
// byte, a length byte and that many bytes of UTF-8) against the key map
// keys and passes each attribute to put, in key index order, at most
// MaxAttributes of them: an entry that does not fit in what is left ends
// the parse; a key index given twice takes its last value; an index outside
// keys is skipped, and reported (unknown), so that the caller reads the key
// map again, as the OTEP asks.
func DecodeAttributes(data []byte, keys []string, put func(key, value string)) (unknown bool) {
	var seen [MaxKeys]bool
	var values [MaxKeys][]byte
	n := 0
	for len(data) >= 2 {
		k, l := int(data[0]), int(data[1])
		if len(data) < 2+l {
			break
		}
		v := data[2 : 2+l]
		data = data[2+l:]
		if k >= len(keys) || keys[k] == "" {
			unknown = true
			continue
		}
		if !seen[k] {
			if n >= MaxAttributes {
				continue
			}
			seen[k] = true
			n++
		}
		values[k] = v
	}
	for k := range seen {
		if !seen[k] {
			continue
		}
		v := values[k]
		if utf8.Valid(v) {
			put(keys[k], string(v))
		} else {
			put(keys[k], strings.ToValidUTF8(string(v), "\uFFFD"))
		}
	}
	return unknown
}
