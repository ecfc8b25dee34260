package gobin

import (
	"debug/dwarf"
	"debug/elf"
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
// in the Go binary f built by Go version (as Info.GoVersion says, e.g.
// "go1.26.8"): from the binary's DWARF when it has the runtime.g type,
// otherwise from the offsets of known releases. It returns false when
// neither knows.
func GoIDOffset(f *elf.File, version string) (uint16, bool) {
	if off, ok := dwarfGoIDOffset(f); ok {
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
func dwarfGoIDOffset(f *elf.File) (off uint16, ok bool) {
	defer func() {
		if recover() != nil {
			off, ok = 0, false
		}
	}()
	if f.Section(".debug_info") == nil && f.Section(".zdebug_info") == nil {
		return 0, false
	}
	d, err := f.DWARF()
	if err != nil {
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
			if e.Tag != dwarf.TagCompileUnit && e.Children {
				r.SkipChildren()
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
