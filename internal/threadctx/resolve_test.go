package threadctx

import (
	"bytes"
	"debug/elf"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lib is a library that defines the variable at offset 8 of its block,
// mapped with bias 0x7000_0000_0000.
func lib(relocs ...Reloc) Loaded {
	return Loaded{Module: &Module{Machine: elf.EM_X86_64, Type: elf.ET_DYN, Defines: true, References: true, Value: 8,
		TLS: Segment{MemSize: 16, Align: 8}, Relocs: relocs}, Path: "/lib/libsdk.so", Bias: 0x7000_0000_0000}
}

const got = 0x3fc0 // where the relocations' words are, before the bias

// code pads a function's first bytes to the 16 bytes Resolve reads.
func code(b ...byte) []byte { return append(b, make([]byte, 16)...)[:max(16, len(b))] }

var (
	resolverStatic  = code(append(append([]byte{}, x86ReturnArg...), 0xc3)...)
	resolverDynamic = code(0x55, 0x48, 0x89, 0xe5, 0x90, 0x90)
)

// The words a process's dynamic loader wrote are checked: what is out of
// bounds or not the variable's is refused, what is not written yet says
// so, and a descriptor whose resolver returns its argument is static TLS.
func TestResolveHostileWords(t *testing.T) {
	const at = 0x7000_0000_0000 + got
	tpoff := Reloc{Kind: RelocTPOff, VAddr: got, BySymbol: true}
	desc := Reloc{Kind: RelocDesc, VAddr: got, BySymbol: true}
	mod := Reloc{Kind: RelocModule, VAddr: got, BySymbol: true}
	for _, tc := range []struct {
		name  string
		mod   Loaded
		mem   fakeMemory
		want  Access
		err   error
		match string
	}{
		{"initial-exec", lib(tpoff), fakeMemory{at: words(neg(-0x48))}, Access{Mode: ModeStatic, Offset: -0x48}, nil, ""},
		{"initial-exec not yet written", lib(tpoff), fakeMemory{at: words(0)}, Access{}, ErrNotReady, ""},
		{"initial-exec above the thread pointer", lib(tpoff), fakeMemory{at: words(0x10)}, Access{}, nil, "no offset into static TLS"},
		{"initial-exec far below", lib(tpoff), fakeMemory{at: words(neg(-1 << 40))}, Access{}, nil, "no offset into static TLS"},
		{"unreadable GOT", lib(tpoff), fakeMemory{}, Access{}, nil, "nothing mapped"},
		{"TLSDESC static", lib(desc), fakeMemory{at: words(0x1000, neg(-0x30)), 0x1000: resolverStatic},
			Access{Mode: ModeStatic, Offset: -0x30}, nil, ""},
		{"TLSDESC static with endbr64", lib(desc), fakeMemory{at: words(0x1000, neg(-0x30)), 0x1000: code(append(append([]byte{}, x86Endbr64...), resolverStatic...)...)},
			Access{Mode: ModeStatic, Offset: -0x30}, nil, ""},
		{"TLSDESC dynamic", lib(desc), fakeMemory{at: words(0x1000, 0x2000), 0x1000: resolverDynamic, 0x2000: words(3, 8, 1)},
			Access{Mode: ModeDTV, ModuleID: 3, Offset: 8}, nil, ""},
		{"TLSDESC dynamic, another offset", lib(desc), fakeMemory{at: words(0x1000, 0x2000), 0x1000: resolverDynamic, 0x2000: words(3, 16, 1)},
			Access{}, nil, "not the variable's"},
		{"TLSDESC dynamic, module id out of bounds", lib(desc), fakeMemory{at: words(0x1000, 0x2000), 0x1000: resolverDynamic, 0x2000: words(1<<20, 8, 1)},
			Access{}, nil, "out of bounds"},
		{"TLSDESC lazy", lib(desc), fakeMemory{at: words(0x1000, 0x9999), 0x1000: resolverDynamic}, Access{}, ErrNotReady, ""},
		{"TLSDESC not written", lib(desc), fakeMemory{at: words(0, 0)}, Access{}, ErrNotReady, ""},
		{"TLSDESC resolver unreadable", lib(desc), fakeMemory{at: words(0x1000, 0)}, Access{}, nil, "reading the resolver"},
		{"general dynamic", lib(mod), fakeMemory{at: words(2, 8)}, Access{Mode: ModeDTV, ModuleID: 2, Offset: 8}, nil, ""},
		{"general dynamic not written", lib(mod), fakeMemory{at: words(0, 0)}, Access{}, ErrNotReady, ""},
		{"general dynamic, another offset", lib(mod), fakeMemory{at: words(2, 0)}, Access{}, nil, "not the variable's"},
		{"local dynamic (the module's own id)", lib(Reloc{Kind: RelocModule, VAddr: got}), fakeMemory{at: words(4, 0)},
			Access{Mode: ModeDTV, ModuleID: 4, Offset: 8}, nil, ""},
		{"another variable's addend", lib(Reloc{Kind: RelocTPOff, VAddr: got, Addend: 16}), fakeMemory{at: words(neg(-8))}, Access{}, nil, "not the variable"},
		{"its own addend", lib(Reloc{Kind: RelocTPOff, VAddr: got, Addend: 8}), fakeMemory{at: words(neg(-8))}, Access{Mode: ModeStatic, Offset: -8}, nil, ""},
		{"static first", lib(mod, tpoff), fakeMemory{at: words(neg(-0x48), 8)}, Access{Mode: ModeStatic, Offset: -0x48}, nil, ""},
		{"no relocation", lib(), fakeMemory{}, Access{}, nil, "no module has a TLS relocation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Resolve([]Loaded{tc.mod}, tc.mem)
			switch {
			case tc.err != nil:
				require.ErrorIs(t, err, tc.err)
			case tc.match != "":
				require.ErrorContains(t, err, tc.match)
			default:
				require.NoError(t, err)
				a.How, a.Module = "", ""
				assert.Equal(t, tc.want, a)
			}
		})
	}
}

// The executable's definition wins over a library's (the dynamic loader
// binds references to it), and a relocation in another module that names
// the variable leads to it.
func TestResolveWhichDefinition(t *testing.T) {
	exe := Loaded{Module: &Module{Machine: elf.EM_X86_64, Type: elf.ET_DYN, Defines: true, References: true, Value: 0,
		TLS: Segment{MemSize: 8, Align: 8}}, Path: "/app", Main: true}
	a, err := Resolve([]Loaded{lib(), exe}, fakeMemory{})
	require.NoError(t, err)
	assert.Equal(t, "/app", a.Module)
	assert.Equal(t, int64(-8), a.Offset, "the executable's own, local-exec")
	// The library's own reference binds to the executable's variable.
	a, err = Resolve([]Loaded{lib(Reloc{Kind: RelocTPOff, VAddr: got, BySymbol: true, Addend: 0}), exe}, fakeMemory{0x7000_0000_0000 + got: words(neg(-8))})
	require.NoError(t, err)
	assert.Equal(t, Access{Mode: ModeStatic, Offset: -8, Module: "/app", How: "initial-exec GOT entry in /lib/libsdk.so"}, a)

	user := Loaded{Module: &Module{Machine: elf.EM_X86_64, References: true, Relocs: []Reloc{{Kind: RelocTPOff, VAddr: 0x10, BySymbol: true}}},
		Path: "/app", Main: true, Bias: 0x5000}
	def := lib()
	a, err = Resolve([]Loaded{user, def}, fakeMemory{0x5010: words(neg(-0x20))})
	require.NoError(t, err)
	assert.Equal(t, Access{Mode: ModeStatic, Offset: -0x20, Module: "/lib/libsdk.so", How: "initial-exec GOT entry in /app"}, a)

	_, err = Resolve([]Loaded{user}, fakeMemory{})
	require.ErrorIs(t, err, ErrNoVariable)
}

// The executable's block comes first in static TLS, laid out as glibc
// lays it out: right below the thread pointer on x86-64, after the 16-byte
// thread control block on aarch64, both at the block's alignment.
func TestExecutableOffset(t *testing.T) {
	for _, tc := range []struct {
		name    string
		machine elf.Machine
		tls     Segment
		value   uint64
		want    int64
		err     string
	}{
		{"x86-64, one pointer", elf.EM_X86_64, Segment{VAddr: 0x3dd0, MemSize: 8, Align: 8}, 0, -8, ""},
		{"x86-64, second of three", elf.EM_X86_64, Segment{VAddr: 0x3dd0, MemSize: 20, Align: 8}, 8, -16, ""},
		{"x86-64, 64-byte aligned", elf.EM_X86_64, Segment{VAddr: 0x3dc0, MemSize: 8, Align: 64}, 0, -64, ""},
		{"x86-64, first byte not aligned", elf.EM_X86_64, Segment{VAddr: 0x3dd4, MemSize: 12, Align: 8}, 4, -8, ""},
		{"aarch64, one pointer", elf.EM_AARCH64, Segment{VAddr: 0x1fdd0, MemSize: 8, Align: 8}, 0, 16, ""},
		{"aarch64, 64-byte aligned", elf.EM_AARCH64, Segment{VAddr: 0x1fdc0, MemSize: 16, Align: 64}, 8, 72, ""},
		{"no PT_TLS", elf.EM_X86_64, Segment{}, 0, 0, "does not hold"},
		{"value past the block", elf.EM_X86_64, Segment{MemSize: 8, Align: 8}, 8, 0, "does not hold"},
		{"alignment not a power of two", elf.EM_X86_64, Segment{MemSize: 8, Align: 12}, 0, 0, "not a power of two"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := executableOffset(&Module{Machine: tc.machine, TLS: tc.tls, Value: tc.value, Defines: true})
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// A static-TLS resolver is recognized in either architecture's code, with
// or without its landing pad; anything else is not.
func TestReturnsArgument(t *testing.T) {
	assert.True(t, returnsArgument(elf.EM_X86_64, []byte{0x48, 0x8b, 0x40, 0x08, 0xc3}))
	assert.True(t, returnsArgument(elf.EM_X86_64, []byte{0x48, 0x8b, 0x40, 0x08, 0xf3, 0xc3}))
	assert.False(t, returnsArgument(elf.EM_X86_64, []byte{0x48, 0x8b, 0x40, 0x08, 0x90}))
	assert.False(t, returnsArgument(elf.EM_X86_64, resolverDynamic))
	arm := append(append([]byte{}, arm64LoadArg...), arm64Ret...)
	assert.True(t, returnsArgument(elf.EM_AARCH64, arm))
	assert.True(t, returnsArgument(elf.EM_AARCH64, append(append([]byte{}, arm64BTIC...), arm...)))
	// Debian's aarch64 glibc 2.36 (no BTI): nop; ldr x0, [x0, #8]; ret.
	assert.True(t, returnsArgument(elf.EM_AARCH64, append(append([]byte{}, arm64Nop...), arm...)))
	assert.False(t, returnsArgument(elf.EM_AARCH64, append(append([]byte{}, arm64Nop...), append(arm64Nop, arm...)...)))
	assert.False(t, returnsArgument(elf.EM_AARCH64, arm64LoadArg))
	assert.False(t, returnsArgument(elf.EM_RISCV, arm))
}

// The load bias follows from the mapping of a PT_LOAD segment's first page.
func TestLoadBias(t *testing.T) {
	m := &Module{Loads: []Segment{{VAddr: 0, Off: 0}, {VAddr: 0x11000, Off: 0x1000}, {VAddr: 0x21de8, Off: 0x1de8}}}
	bias, ok := LoadBias(m, 0x7f00_0001_1000, 0x1000, 4096)
	assert.True(t, ok)
	assert.Equal(t, uint64(0x7f00_0000_0000), bias)
	bias, ok = LoadBias(m, 0x7f00_0002_1000, 0x1000, 4096)
	assert.True(t, ok, "the first segment of that page")
	assert.Equal(t, uint64(0x7f00_0001_0000), bias)
	_, ok = LoadBias(m, 0x7f00_0000_5000, 0x5000, 4096)
	assert.False(t, ok)
}

// Files ReadModule does not read are refused with ErrNotELF; an ELF file
// without .dynsym is a module with nothing to say.
func TestReadModuleRefuses(t *testing.T) {
	_, err := ReadModule(bytes.NewReader([]byte("#!/bin/sh\n")))
	require.True(t, errors.Is(err, ErrNotELF))
}

func FuzzResolve(f *testing.F) {
	f.Add(uint8(RelocDesc), uint64(0x1000), uint64(0x2000), uint64(3), uint64(8), false)
	f.Add(uint8(RelocTPOff), neg(-8), uint64(0), uint64(0), uint64(0), true)
	f.Add(uint8(RelocModule), uint64(1), uint64(8), uint64(0), uint64(0), true)
	f.Fuzz(func(t *testing.T, kind uint8, w0, w1, w2, w3 uint64, bySymbol bool) {
		m := lib(Reloc{Kind: RelocKind(kind % 4), VAddr: got, BySymbol: bySymbol, Addend: int64(w3 % 16)})
		mem := fakeMemory{0x7000_0000_0000 + got: words(w0, w1), 0x1000: resolverStatic, 0x2000: words(w2, w3)}
		a, err := Resolve([]Loaded{m}, mem)
		if err != nil {
			return
		}
		switch a.Mode {
		case ModeStatic:
			require.True(t, a.Offset < 0 && a.Offset >= -maxStaticTLS, "static offset %d", a.Offset)
		case ModeDTV:
			require.True(t, a.ModuleID > 0 && a.ModuleID <= maxModuleID)
			require.Equal(t, int64(8), a.Offset)
		default:
			t.Fatalf("mode %d", a.Mode)
		}
	})
}
