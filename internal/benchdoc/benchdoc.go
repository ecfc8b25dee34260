// Package benchdoc keeps docs/benchmarks.md whole when the programs that
// write it (internal/bench, internal/soak) each rewrite their own part: the
// soak section lives between two markers and survives a new benchmark run.
package benchdoc

import "strings"

// The markers around the soak section of docs/benchmarks.md.
const (
	SoakStart = "<!-- soak: written by make soak -->"
	SoakEnd   = "<!-- /soak -->"
)

// ReplaceSoak returns doc with section between the soak markers, appended
// with its markers when doc has none.
func ReplaceSoak(doc, section string) string {
	block := SoakStart + "\n" + strings.TrimRight(section, "\n") + "\n" + SoakEnd + "\n"
	i, j := strings.Index(doc, SoakStart), strings.Index(doc, SoakEnd)
	if i < 0 || j < i {
		return strings.TrimRight(doc, "\n") + "\n\n" + block
	}
	return doc[:i] + block + strings.TrimLeft(doc[j+len(SoakEnd):], "\n")
}

// KeepSoak returns fresh (a new benchmark document) with the soak section
// of old, markers included, appended when old has one.
func KeepSoak(old, fresh string) string {
	i, j := strings.Index(old, SoakStart), strings.Index(old, SoakEnd)
	if i < 0 || j < i {
		return fresh
	}
	return strings.TrimRight(fresh, "\n") + "\n\n" + old[i:j+len(SoakEnd)] + "\n"
}
