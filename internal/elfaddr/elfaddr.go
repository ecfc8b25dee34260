// Package elfaddr converts the virtual addresses of an ELF file into file
// offsets. A virtual address is where a byte lives once the loader has mapped
// the file (for a PIE executable or a shared library, before the load bias is
// added); a file offset is where the same byte lives in the file on disk.
// Uprobes are attached by inode and file offset, so every virtual address read
// from a symbol table or a note must go through the PT_LOAD segment that maps
// it before the kernel can use it.
package elfaddr

import (
	"debug/elf"
	"fmt"
)

// FileOffset converts the virtual address vaddr of an ELF file into a file
// offset through the PT_LOAD segment that contains it:
// file offset = vaddr - p_vaddr + p_offset. It works for ET_EXEC files
// (non-PIE executables, linked at a fixed base such as 0x400000) and ET_DYN
// files (PIE executables and shared libraries, linked at 0) alike.
//
// A segment whose file-backed bytes (p_filesz) hold vaddr is preferred. A
// virtual address in the zero-filled tail of a segment (between p_filesz and
// p_memsz, where .bss lives) is accepted too, since a semaphore may sit there
// and the kernel computes a uprobe's reference-counter file offset the same
// way. The error names the virtual address when no PT_LOAD segment contains
// it.
func FileOffset(progs []*elf.Prog, vaddr uint64) (uint64, error) {
	var tail *elf.Prog
	for _, p := range progs {
		if p == nil || p.Type != elf.PT_LOAD || vaddr < p.Vaddr {
			continue
		}
		rel := vaddr - p.Vaddr
		if rel < p.Filesz {
			return p.Off + rel, nil
		}
		if rel < p.Memsz && tail == nil {
			tail = p
		}
	}
	if tail != nil {
		return tail.Off + (vaddr - tail.Vaddr), nil
	}
	return 0, fmt.Errorf("virtual address %#x is in no PT_LOAD segment", vaddr)
}
