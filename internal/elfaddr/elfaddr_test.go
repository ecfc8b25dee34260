package elfaddr

import (
	"debug/elf"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func load(off, vaddr, filesz, memsz uint64) *elf.Prog {
	return &elf.Prog{ProgHeader: elf.ProgHeader{
		Type: elf.PT_LOAD, Off: off, Vaddr: vaddr, Paddr: vaddr, Filesz: filesz, Memsz: memsz,
	}}
}

func TestFileOffset(t *testing.T) {
	// The program headers of a non-PIE executable (Debian's python3.11).
	exec := []*elf.Prog{
		{ProgHeader: elf.ProgHeader{Type: elf.PT_PHDR, Off: 0x40, Vaddr: 0x400040, Filesz: 0x2d8, Memsz: 0x2d8}},
		load(0x000000, 0x400000, 0x01e3e8, 0x01e3e8),
		load(0x01f000, 0x41f000, 0x2b2289, 0x2b2289),
		load(0x2d2000, 0x6d2000, 0x272968, 0x272968),
		load(0x544dc8, 0x945dc8, 0x13e4b0, 0x1832f0),
		{ProgHeader: elf.ProgHeader{Type: elf.PT_GNU_STACK}},
	}
	// The program headers of a PIE executable: text at file offset ==
	// virtual address, data one page higher in memory than in the file.
	pie := []*elf.Prog{
		nil,
		load(0x0000, 0x0000, 0x0628, 0x0628),
		load(0x1000, 0x1000, 0x01f5, 0x01f5),
		load(0x2000, 0x2000, 0x0134, 0x0134),
		load(0x2df0, 0x3df0, 0x0232, 0x0240),
	}
	tests := []struct {
		name    string
		progs   []*elf.Prog
		vaddr   uint64
		want    uint64
		wantErr string
	}{
		{name: "exec text", progs: exec, vaddr: 0x42512a, want: 0x2512a},
		{name: "exec first byte of segment", progs: exec, vaddr: 0x41f000, want: 0x1f000},
		{name: "exec last file byte of segment", progs: exec, vaddr: 0x41f000 + 0x2b2288, want: 0x1f000 + 0x2b2288},
		{name: "exec data semaphore", progs: exec, vaddr: 0xa84276, want: 0x683276},
		{name: "exec bss tail within memsz", progs: exec, vaddr: 0x945dc8 + 0x13e4b0, want: 0x544dc8 + 0x13e4b0},
		{name: "exec last byte of memsz", progs: exec, vaddr: 0x945dc8 + 0x1832ef, want: 0x544dc8 + 0x1832ef},
		{name: "exec past memsz", progs: exec, vaddr: 0x945dc8 + 0x1832f0, wantErr: "virtual address 0xac90b8 is in no PT_LOAD segment"},
		{name: "exec gap between segments", progs: exec, vaddr: 0x41e3e8, wantErr: "virtual address 0x41e3e8 is in no PT_LOAD segment"},
		{name: "exec below first segment", progs: exec, vaddr: 0x1000, wantErr: "0x1000"},
		{name: "pie text", progs: pie, vaddr: 0x1139, want: 0x1139},
		{name: "pie data", progs: pie, vaddr: 0x4010, want: 0x3010},
		{name: "pie bss", progs: pie, vaddr: 0x4025, want: 0x3025},
		{name: "pie zero address", progs: pie, vaddr: 0, want: 0},
		{name: "pie huge", progs: pie, vaddr: ^uint64(0), wantErr: "virtual address 0xffffffffffffffff"},
		{name: "no segments", progs: nil, vaddr: 0x1000, wantErr: "in no PT_LOAD segment"},
		{
			name:  "file-backed bytes win over another segment's bss tail",
			progs: []*elf.Prog{load(0x1000, 0x1000, 0x10, 0x2000), load(0x2000, 0x2000, 0x100, 0x100)},
			vaddr: 0x2010, want: 0x2010,
		},
		{
			name:  "overflow of vaddr - p_vaddr is not possible below p_vaddr",
			progs: []*elf.Prog{load(0, 0xffffffffffff0000, 0x1000, 0x1000)},
			vaddr: 0x10, wantErr: "virtual address 0x10",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := FileOffset(tt.progs, tt.vaddr)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got, "file offset %#x, want %#x", got, tt.want)
		})
	}
}
