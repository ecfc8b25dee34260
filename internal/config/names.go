package config

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Bounds of what users write that becomes telemetry: resource and span
// attributes, span names, metric attribute values. Every span and data
// point carries them, to every backend: a megabyte, a terminal escape or
// a byte that is not UTF-8 (which OTLP's protobuf strings refuse) must not
// get that far.
const (
	// MaxNameBytes bounds service_name (service.name), a span's name
	// (span.name) and an attribute key.
	MaxNameBytes = 256
	// MaxProbeRefBytes bounds a probe reference and a counter's reference
	// with its filter (probe.name), a function: name and a histogram's
	// expression (probe.value): C++ symbols run long.
	MaxProbeRefBytes = 4096
	// MaxPathBytes bounds a target's path, as the kernel does (PATH_MAX).
	MaxPathBytes = 4096
)

// checkTelemetryName checks a name that becomes telemetry: at most max
// bytes of printable UTF-8 (no control character). what names it in the
// sentence ("service_name").
func checkTelemetryName(what, s string, max int) error {
	if len(s) > max {
		return fmt.Errorf("%s is %d bytes, at most %d: names that become telemetry are bounded", what, len(s), max)
	}
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return fmt.Errorf("%s %s is not UTF-8 at byte %d: names that become telemetry are printable UTF-8", what, quoteShort(s), i)
			}
		}
		if unicode.IsControl(r) {
			return fmt.Errorf("%s %s has the control character %U at byte %d: names that become telemetry are printable UTF-8", what, quoteShort(s), r, i)
		}
	}
	return nil
}

// CheckTelemetryText checks a text of at most MaxNameBytes that becomes
// telemetry (a recipe's text option, which ends up in value names): the
// sentence of checkTelemetryName, what naming it ("the value").
func CheckTelemetryText(what, s string) error {
	return checkTelemetryName(what, s, MaxNameBytes)
}

// QuoteShort quotes, escaped, at most the first 64 bytes of s, so that a
// sentence about a long or hostile value stays short and printable.
func QuoteShort(s string) string { return quoteShort(s) }

// quoteShort quotes at most the first 64 bytes of s, so that a sentence
// about a long value stays short.
func quoteShort(s string) string {
	const max = 64
	if len(s) <= max {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q…", s[:max])
}
