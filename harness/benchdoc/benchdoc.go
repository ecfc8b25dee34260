// Package benchdoc keeps docs/benchmarks.md whole when the programs that
// write it (harness/bench, harness/scalebench, harness/soak,
// harness/budgetbench) each rewrite their own part: the scale, soak and
// budget sections live between markers and survive a new benchmark run.
package benchdoc

import "strings"

// Section is a part of docs/benchmarks.md between two markers, written by
// its own program.
type Section struct{ Start, End string }

// The sections other programs than harness/bench write, and the one of
// machine kinds, which each benchmark run updates for its own machine.
var (
	Soak   = Section{SoakStart, SoakEnd}
	Budget = Section{"<!-- budget: written by make bench-budget -->", "<!-- /budget -->"}
	// Scale is harness/scalebench's section (make bench runs it after
	// harness/bench).
	Scale = Section{"<!-- scale: written by make bench (harness/scalebench) -->", "<!-- /scale -->"}
	// Machines holds one block per machine kind measured (see
	// UpsertBlock): a run replaces its own machine kind's and keeps the
	// others.
	Machines = Section{"<!-- machines: one block per machine kind, updated by make bench -->", "<!-- /machines -->"}
	// Kept are the sections a new benchmark document keeps, in order.
	Kept = []Section{Machines, Scale, Budget, Soak}
)

// The markers around the soak section of docs/benchmarks.md.
const (
	SoakStart = "<!-- soak: written by make soak -->"
	SoakEnd   = "<!-- /soak -->"
)

// Replace returns doc with text between the section's markers, appended
// with its markers when doc has none.
func (s Section) Replace(doc, text string) string {
	block := s.Start + "\n" + strings.TrimRight(text, "\n") + "\n" + s.End + "\n"
	i, j := strings.Index(doc, s.Start), strings.Index(doc, s.End)
	if i < 0 || j < i {
		return strings.TrimRight(doc, "\n") + "\n\n" + block
	}
	rest := strings.TrimLeft(doc[j+len(s.End):], "\n")
	if rest != "" {
		rest = "\n" + rest
	}
	return doc[:i] + block + rest
}

// Keep returns fresh with the section of old, markers included, appended
// when old has one.
func (s Section) Keep(old, fresh string) string {
	i, j := strings.Index(old, s.Start), strings.Index(old, s.End)
	if i < 0 || j < i {
		return fresh
	}
	return strings.TrimRight(fresh, "\n") + "\n\n" + old[i:j+len(s.End)] + "\n"
}

// ReplaceSoak returns doc with section between the soak markers, appended
// with its markers when doc has none.
func ReplaceSoak(doc, section string) string { return Soak.Replace(doc, section) }

// KeepSoak returns fresh (a new benchmark document) with the soak section
// of old, markers included, appended when old has one.
func KeepSoak(old, fresh string) string { return Soak.Keep(old, fresh) }

// KeepSections returns fresh (a new benchmark document) with every Kept
// section of old, in the order of Kept.
func KeepSections(old, fresh string) string {
	for _, s := range Kept {
		fresh = s.Keep(old, fresh)
	}
	return fresh
}

// Body returns the text between the section's markers in doc, "" when
// doc has none.
func (s Section) Body(doc string) string {
	i, j := strings.Index(doc, s.Start), strings.Index(doc, s.End)
	if i < 0 || j < i {
		return ""
	}
	return strings.Trim(doc[i+len(s.Start):j], "\n")
}

// blockPrefix starts each block of a section of blocks: "### " and the
// block's key on one line.
const blockPrefix = "### "

// UpsertBlock returns body, a section's text made of blocks that each
// start with a "### KEY" line, with the block of key replaced by block (a
// text that starts with that line), or block appended when body has none.
// The other blocks keep their text and order.
func UpsertBlock(body, key, block string) string {
	var blocks []string
	replaced := false
	for _, b := range splitBlocks(body) {
		if strings.TrimSpace(strings.SplitN(b, "\n", 2)[0]) == blockPrefix+key {
			b, replaced = block, true
		}
		blocks = append(blocks, strings.Trim(b, "\n"))
	}
	if !replaced {
		blocks = append(blocks, strings.Trim(block, "\n"))
	}
	return strings.Join(blocks, "\n\n") + "\n"
}

// splitBlocks cuts body before each line that starts a block; text before
// the first block is a block of its own.
func splitBlocks(body string) []string {
	var out []string
	lines := strings.Split(strings.Trim(body, "\n"), "\n")
	var cur []string
	for _, l := range lines {
		if strings.HasPrefix(l, blockPrefix) && len(cur) > 0 {
			out = append(out, strings.Join(cur, "\n"))
			cur = nil
		}
		cur = append(cur, l)
	}
	if len(cur) > 0 && strings.TrimSpace(strings.Join(cur, "")) != "" {
		out = append(out, strings.Join(cur, "\n"))
	}
	return out
}
