package gobin

import (
	"debug/dwarf"
	"strconv"
	"strings"
)

// goidOffsets are the byte offsets of goid in the runtime's g structure on
// 64-bit platforms, by Go minor version, as the runtime's DWARF of each
// release says (checked with go1.18 through go1.26 on amd64 and arm64: Go
// 1.23 added g.syscallbp, Go 1.25 removed gobuf.ret).
var goidOffsets = map[int]uint16{
	17: 152, 18: 152, 19: 152, 20: 152, 21: 152, 22: 152,
	23: 160, 24: 160,
	25: 152, 26: 152,
}

// GoIDOffset returns the byte offset of the goroutine id (runtime.g.goid)
// in a Go binary built by Go version (as Info.GoVersion says, e.g.
// "go1.26.8"): from the binary's DWARF d (nil when it has none, or it was
// not read) when it has the runtime.g type, otherwise from the offsets of
// known releases. It returns false when neither knows. The caller reads
// d, within its bounds (debuginfo.Open): ELF's own DWARF() would
// decompress every debug section of a hostile file without bound.
func GoIDOffset(d *dwarf.Data, version string) (uint16, bool) {
	if off, ok := dwarfGoIDOffset(d); ok {
		return off, true
	}
	minor, ok := goMinor(version)
	if !ok {
		return 0, false
	}
	off, ok := goidOffsets[minor]
	return off, ok
}

// goMinor returns 26 for "go1.26.8", "go1.26" or "go1.26rc1".
func goMinor(version string) (int, bool) {
	rest, ok := strings.CutPrefix(version, "go1.")
	if !ok {
		return 0, false
	}
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	n, err := strconv.Atoi(rest[:end])
	return n, err == nil
}

// dwarfGoIDOffset reads the offset of goid from the DWARF type runtime.g,
// which the Go linker writes in the first compilation units it emits
// types for; at most maxEntries entries are read.
func dwarfGoIDOffset(d *dwarf.Data) (off uint16, ok bool) {
	defer func() {
		if recover() != nil {
			off, ok = 0, false
		}
	}()
	if d == nil {
		return 0, false
	}
	const maxEntries = 1 << 22
	r := d.Reader()
	for range maxEntries {
		e, err := r.Next()
		if err != nil || e == nil {
			return 0, false
		}
		if e.Tag != dwarf.TagStructType || e.Val(dwarf.AttrName) != "runtime.g" {
			if e.Tag != dwarf.TagCompileUnit && e.Children && !skipChildren(r, e, maxEntries) {
				return 0, false
			}
			continue
		}
		for {
			c, err := r.Next()
			if err != nil || c == nil || c.Tag == 0 {
				return 0, false
			}
			if c.Tag == dwarf.TagMember && c.Val(dwarf.AttrName) == "goid" {
				v, ok := c.Val(dwarf.AttrDataMemberLoc).(int64)
				if !ok || v < 0 || v > 0xffff {
					return 0, false
				}
				return uint16(v), true
			}
		}
	}
	return 0, false
}

// skipChildren moves r past the children of e, which it has just read,
// reading at most max entries: without recursion, which dwarf.Reader's
// SkipChildren does as deep as the DIEs nest (a stack overflow, fatal,
// for a hostile file). It reports whether it got there.
func skipChildren(r *dwarf.Reader, e *dwarf.Entry, max int) bool {
	if sib, ok := e.Val(dwarf.AttrSibling).(dwarf.Offset); ok && sib > e.Offset {
		r.Seek(sib)
		return true
	}
	for depth := 1; depth > 0; max-- {
		kid, err := r.Next()
		if err != nil || kid == nil || max <= 0 {
			return false
		}
		if kid.Tag == 0 {
			depth--
		} else if kid.Children {
			depth++
		}
	}
	return true
}
