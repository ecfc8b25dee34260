package insn

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/arch/arm64/arm64asm"

	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

// words encodes arm64 instruction words as little-endian code.
func words(ws ...uint32) []byte {
	b := make([]byte, 4*len(ws))
	for i, w := range ws {
		binary.LittleEndian.PutUint32(b[4*i:], w)
	}
	return b
}

// TestClassifyARM64 checks the classes of arm64 instructions against the
// rules of arch/arm64/kernel/probes/decode-insn.c (Linux 6.13–6.18). The
// encodings come from aarch64-linux-gnu-as (binutils 2.40,
// -march=armv8.8-a+mops), the names from aarch64-linux-gnu-objdump.
func TestClassifyARM64(t *testing.T) {
	for _, tc := range []struct {
		name string
		word uint32
		want SiteClass
	}{
		// Simulated by the kernel (INSN_GOOD_NO_SLOT).
		{"nop", 0xd503201f, Emulated},
		{"b", 0x14000000, Emulated},
		{"bl", 0x94000000, Emulated},
		{"b.ne", 0x54000001, Emulated},
		{"b.ls", 0x54000009, Emulated},
		{"cbz x0", 0xb4000000, Emulated},
		{"cbnz w1", 0x35000001, Emulated},
		{"tbz w2, #3", 0x36180002, Emulated},
		{"tbnz w3, #31", 0x37f80003, Emulated},
		{"br x16", 0xd61f0200, Emulated},
		{"blr x8", 0xd63f0100, Emulated},
		{"ret", 0xd65f03c0, Emulated},
		{"ret x1", 0xd65f0020, Emulated},
		{"adr x0", 0x10000000, Emulated},
		{"adrp x1", 0x90000001, Emulated},
		// Stepped out of line (INSN_GOOD).
		{"stp x29, x30, [sp, #-32]!", 0xa9be7bfd, SingleStepped},
		{"mov x29, sp", 0x910003fd, SingleStepped},
		{"ldp x29, x30, [sp], #32", 0xa8c27bfd, SingleStepped},
		{"str x30, [sp, #-64]!", 0xf81c0ffe, SingleStepped},
		{"add x0, x1, x2", 0x8b020020, SingleStepped},
		{"sub sp, sp, #0x10", 0xd10043ff, SingleStepped},
		{"cmp sp, x16", 0xeb3063ff, SingleStepped},
		{"ldr x16, [x28, #16]", 0xf9400b90, SingleStepped},
		{"ldr x0, [x1, x2, lsl #3]", 0xf8627820, SingleStepped},
		{"mov x0, #0x1", 0xd2800020, SingleStepped},
		{"movk x0, #0x1, lsl #16", 0xf2a00020, SingleStepped},
		{"ldar x0, [x1]", 0xc8dffc20, SingleStepped},
		{"stlr x0, [x1]", 0xc89ffc20, SingleStepped},
		{"cas x0, x1, [x2]", 0xc8a07c41, SingleStepped},
		{"ldadd x0, x1, [x2]", 0xf8200041, SingleStepped},
		{"mrs x0, tpidr_el0", 0xd53bd040, SingleStepped},
		{"mrs x0, nzcv", 0xd53b4200, SingleStepped},
		{"mrs x0, cntvct_el0", 0xd53be040, SingleStepped},
		{"dmb ish", 0xd5033bbf, SingleStepped},
		{"dsb sy", 0xd5033f9f, SingleStepped},
		{"isb", 0xd5033fdf, SingleStepped},
		{"clrex", 0xd5033f5f, SingleStepped},
		{"dc zva, x0", 0xd50b7420, SingleStepped},
		{"ic iallu", 0xd508751f, SingleStepped},
		{"paciasp", 0xd503233f, SingleStepped},
		{"pacibsp", 0xd503237f, SingleStepped},
		{"paciaz", 0xd503231f, SingleStepped},
		{"xpaclri", 0xd50320ff, SingleStepped},
		{"pacia1716", 0xd503211f, SingleStepped},
		{"bti", 0xd503241f, SingleStepped},
		{"bti c", 0xd503245f, SingleStepped},
		{"bti j", 0xd503249f, SingleStepped},
		{"bti jc", 0xd50324df, SingleStepped},
		{"fadd d0, d1, d2", 0x1e622820, SingleStepped},
		{"ld1 {v0.16b}, [x0]", 0x4c407000, SingleStepped},
		{"udf #0", 0x00000000, SingleStepped},
		// Refused by the kernel (INSN_REJECTED: EINVAL).
		{"ldr x0, literal", 0x58000000, Unsupported},
		{"ldr w1, literal", 0x18000001, Unsupported},
		{"ldrsw x2, literal", 0x98000002, Unsupported},
		{"prfm pldl1keep, literal", 0xd8000000, Unsupported},
		{"ldxr x0, [x1]", 0xc85f7c20, Unsupported},
		{"stxr w2, x3, [x4]", 0xc8027c83, Unsupported},
		{"ldaxr w0, [x1]", 0x885ffc20, Unsupported},
		{"stlxr w2, w3, [x4]", 0x8802fc83, Unsupported},
		{"ldxp x0, x1, [x2]", 0xc87f0440, Unsupported},
		{"stxp w5, x0, x1, [x2]", 0xc8250440, Unsupported},
		{"casp x0, x1, x2, x3, [x4]", 0x48207c82, Unsupported},
		{"svc #0", 0xd4000001, Unsupported},
		{"brk #1", 0xd4200020, Unsupported},
		{"hlt #0", 0xd4400000, Unsupported},
		{"hvc #0", 0xd4000002, Unsupported},
		{"mrs x0, daif", 0xd53b4220, Unsupported},
		{"msr tpidr_el0, x0", 0xd51bd040, Unsupported},
		{"msr nzcv, x0", 0xd51b4200, Unsupported},
		{"msr daifset, #2", 0xd50342df, Unsupported},
		{"msr fpcr, x1", 0xd51b4401, Unsupported},
		{"yield", 0xd503203f, Unsupported},
		{"wfe", 0xd503205f, Unsupported},
		{"wfi", 0xd503207f, Unsupported},
		{"sev", 0xd503209f, Unsupported},
		{"sevl", 0xd50320bf, Unsupported},
		{"autiasp", 0xd50323bf, Unsupported},
		{"autibsp", 0xd50323ff, Unsupported},
		{"autiaz", 0xd503239f, Unsupported},
		{"autia1716", 0xd503219f, Unsupported},
		{"csdb", 0xd503229f, Unsupported},
		{"esb", 0xd503221f, Unsupported},
		{"hint #6", 0xd50320df, Unsupported},
		{"retaa", 0xd65f0bff, Unsupported},
		{"retab", 0xd65f0fff, Unsupported},
		{"braa x0, x1", 0xd71f0801, Unsupported},
		{"blraaz x3", 0xd63f087f, Unsupported},
		{"eret", 0xd69f03e0, Unsupported},
		{"cpyfp [x0]!, [x1]!, x2!", 0x19010440, Unsupported},
		{"setp [x0]!, x1!, x2", 0x19c20420, Unsupported},
		// Stepped out of line although PC-relative: runs wrongly.
		{"ldr s0, literal", 0x1c000000, Unsafe},
		{"ldr d1, literal", 0x5c000001, Unsafe},
		{"ldr q2, literal", 0x9c000002, Unsafe},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ClassifyARM64(words(tc.word))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got, "%s (%08x)", tc.name, tc.word)
			// Trailing bytes are ignored.
			got, err = ClassifyFor(regs.ArchARM64, append(words(tc.word), 0xff, 0xff))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			// Decode agrees and names the instruction as objdump does.
			insts, err := DecodeARM64(words(tc.word))
			require.NoError(t, err)
			require.Len(t, insts, 1)
			assert.Equal(t, tc.want, insts[0].Class)
			mnemonic := strings.Fields(tc.name)[0]
			switch mnemonic {
			case "udf", "cas", "casp", "ldadd", "ic", "hvc":
				// arm64asm v0.32.0 knows neither LSE atomics nor these.
				assert.Equal(t, fmt.Sprintf(".inst %#08x", tc.word), insts[0].Text)
				assert.Zero(t, insts[0].ARM64Op)
			case "cpyfp", "setp":
				assert.Equal(t, ".inst (memory copy/set)", insts[0].Text)
			default:
				assert.True(t, strings.HasPrefix(insts[0].Text, mnemonic), "%08x: Text %q, objdump says %q", tc.word, insts[0].Text, tc.name)
				if tc.word&0xfffff01f != 0xd503201f && !strings.Contains(tc.name, "raa") && !strings.HasPrefix(tc.name, "reta") {
					assert.NotZero(t, insts[0].ARM64Op, "arm64asm knows %s", tc.name)
				}
			}
		})
	}
	_, err := ClassifyARM64([]byte{0x1f, 0x20, 0x03})
	require.Error(t, err)
	_, err = ClassifyARM64(nil)
	require.Error(t, err)
	_, err = ClassifyFor(regs.ArchUnknown, words(0xd503201f))
	require.Error(t, err)
	c, err := ClassifyFor(regs.ArchAMD64, []byte{0x90})
	require.NoError(t, err)
	assert.Equal(t, Emulated, c)
}

// TestDecodeARM64 checks the fields DecodeARM64 fills and its errors.
func TestDecodeARM64(t *testing.T) {
	// stp; mov; b.ne +8; bl -12; nop; udf #0 (padding); ret; retaa
	code := words(0xa9be7bfd, 0x910003fd, 0x54000041, 0x97fffffd, 0xd503201f, 0x00000000, 0xd65f03c0, 0xd65f0bff)
	insts, err := DecodeARM64(code)
	require.NoError(t, err)
	require.Len(t, insts, 8)
	for i, in := range insts {
		assert.Equal(t, uint64(4*i), in.Offset)
		assert.Equal(t, 4, in.Len)
		assert.Equal(t, uint64(4*i+4), in.End())
		assert.Zero(t, in.Op, "no x86asm opcode for arm64")
	}
	assert.Equal(t, arm64asm.STP, insts[0].ARM64Op)
	assert.Equal(t, "stp x29, x30, [sp,#-32]!", insts[0].Text)
	assert.Equal(t, "b.ne 0x10", insts[2].Text, "branch targets are function offsets")
	assert.True(t, insts[2].hasTarget)
	assert.Equal(t, int64(0x10), insts[2].target)
	assert.Equal(t, "bl 0x0", insts[3].Text)
	lit, err := DecodeARM64(words(0xd503201f, 0x58ffffe0, 0x5c000041, 0x10000020, 0x90000001))
	require.NoError(t, err)
	assert.Equal(t, "ldr x0, 0x0", lit[1].Text, "literal loads name a function offset")
	assert.Equal(t, "ldr d1, 0x10", lit[2].Text)
	assert.Equal(t, "adr x0, 0x10", lit[3].Text)
	assert.Equal(t, "adrp x1, .+0x0", lit[4].Text, "adrp is relative to the page")
	assert.Equal(t, int64(0), insts[3].target)
	assert.True(t, insts[4].Nop)
	assert.Equal(t, "nop", insts[4].Text)
	assert.False(t, insts[0].Nop)
	assert.Equal(t, ".inst 0x00000000", insts[5].Text)
	assert.Zero(t, insts[5].ARM64Op)
	assert.Equal(t, "ret", insts[6].Text)
	assert.Equal(t, "retaa", insts[7].Text)
	assert.Equal(t, []uint64{0x18, 0x1c}, Returns(insts))
	assert.Equal(t, Emulated, insts[6].Class)
	assert.Equal(t, Unsupported, insts[7].Class)

	// Every multiple of 4 is a boundary; nothing else is.
	require.NoError(t, Boundary(insts, 0))
	require.NoError(t, Boundary(insts, 0x1c))
	err = Boundary(insts, 6)
	require.EqualError(t, err, "offset 0x6 is not a multiple of 4 (arm64 instructions are 4 bytes and aligned): it is inside the instruction at 0x4 (mov x29, sp); nearest instruction boundaries: 0x4, 0x8")
	err = Boundary(insts, 0x20)
	require.EqualError(t, err, "offset 0x20 is past the decoded code, which ends at 0x20; last instruction boundary: 0x1c")

	// Trailing bytes: the whole instructions and an error.
	insts, err = DecodeARM64(append(words(0xd503201f, 0xd65f03c0), 0x1f, 0x20))
	require.EqualError(t, err, "decode instruction at offset 0x8: 2 trailing bytes, not a whole 4-byte instruction")
	require.Len(t, insts, 2)
	_, err = DecodeARM64(nil)
	require.Error(t, err)
	insts, err = DecodeARM64([]byte{1, 2})
	require.Error(t, err)
	assert.Empty(t, insts)

	// DecodeFor dispatches on the architecture.
	insts, err = DecodeFor(regs.ArchARM64, words(0xd65f03c0))
	require.NoError(t, err)
	assert.Equal(t, arm64asm.RET, insts[0].ARM64Op)
	insts, err = DecodeFor(regs.ArchAMD64, []byte{0xc3})
	require.NoError(t, err)
	assert.True(t, insts[0].Ret)
	assert.Zero(t, insts[0].ARM64Op)
	_, err = DecodeFor(regs.ArchUnknown, []byte{0xc3})
	require.Error(t, err)
}

// TestExclusiveSequenceARM64 checks that the instructions between an
// exclusive load and its store are unsafe to probe: an atomic increment
// loop as gcc -O2 -mno-outline-atomics writes it for
// __atomic_fetch_add, and a compare-and-swap loop.
func TestExclusiveSequenceARM64(t *testing.T) {
	// 0: ldaxr w1, [x0]; 4: add w1, w1, #1; 8: stlxr w2, w1, [x0];
	// c: cbnz w2, 0; 10: ret
	insts, err := DecodeARM64(words(0x885ffc01, 0x11000421, 0x8802fc01, 0x35ffffa2, 0xd65f03c0))
	require.NoError(t, err)
	assert.Equal(t, []SiteClass{Unsupported, Unsafe, Unsupported, Emulated, Emulated},
		[]SiteClass{insts[0].Class, insts[1].Class, insts[2].Class, insts[3].Class, insts[4].Class})
	c, err := ClassifyARM64(words(0x11000421))
	require.NoError(t, err)
	assert.Equal(t, SingleStepped, c, "alone, add is stepped")

	// 0: ldaxr x3, [x0]; 4: cmp x3, x1; 8: b.ne 0x14; c: stlxr w4, x2, [x0];
	// 10: cbnz w4, 0; 14: ret
	insts, err = DecodeARM64(words(0xc85ffc03, 0xeb01007f, 0x54000061, 0xc804fc02, 0x35ffff84, 0xd65f03c0))
	require.NoError(t, err)
	assert.Equal(t, []SiteClass{Unsupported, Unsafe, Unsafe, Unsupported, Emulated, Emulated},
		[]SiteClass{insts[0].Class, insts[1].Class, insts[2].Class, insts[3].Class, insts[4].Class, insts[5].Class})

	// An exclusive load without a store within 16 instructions, ldar
	// (ordered, not exclusive) and casp start no sequence.
	code := []uint32{0xc85f7c20}
	for range 16 {
		code = append(code, 0x8b020020)
	}
	code = append(code, 0xc8027c83)
	insts, err = DecodeARM64(words(code...))
	require.NoError(t, err)
	for _, in := range insts[1:17] {
		assert.Equal(t, SingleStepped, in.Class, "%#x", in.Offset)
	}
	for _, first := range []uint32{0xc8dffc20, 0x48207c82, 0x48607c82} { // ldar, casp, caspa
		insts, err = DecodeARM64(words(first, 0x8b020020, 0xc8027c83))
		require.NoError(t, err)
		assert.Equal(t, SingleStepped, insts[1].Class, "after %08x", first)
	}
}

// TestEntriesARM64 checks CheapEntry, GoEntry and Returns on hand-made
// arm64 code with the prologues of GOARCH=arm64 go1.26 (see
// TestGoFixtureARM64 for the real thing).
func TestEntriesARM64(t *testing.T) {
	decode := func(ws ...uint32) []Inst {
		insts, err := DecodeARM64(words(ws...))
		require.NoError(t, err)
		return insts
	}
	// The morestack block at 0x18: stp x0, x1, [sp, #8]; mov x3, x30;
	// bl morestack; ldp x0, x1, [sp, #8]; b to the start.
	morestack := func(bAt uint32) []uint32 {
		return []uint32{0xa90087e0, 0xaa1e03e3, 0x94000000, 0xa94087e0, 0x14000000 | (-(bAt / 4) & 0x3ffffff)}
	}

	// Small frame: ldr x16, [x28, #16]; cmp sp, x16; b.ls 0x18;
	// str x30, [sp, #-64]!; ldr x30, [sp], #64; ret.
	small := append([]uint32{0xf9400b90, 0xeb3063ff, 0x54000089, 0xf81c0ffe, 0xf84407fe, 0xd65f03c0}, morestack(0x28)...)
	insts := decode(small...)
	off, class := GoEntry(insts)
	assert.Equal(t, uint64(0xc), off)
	assert.Equal(t, SingleStepped, class)
	assert.Equal(t, []uint64{0x14}, Returns(insts))
	off, class = CheapEntry(insts)
	assert.Equal(t, uint64(0), off)
	assert.Equal(t, SingleStepped, class)

	// Medium frame: ldr; sub x17, sp, #432; cmp x17, x16; b.ls 0x1c; stp …; ret.
	medium := append([]uint32{0xf9400b90, 0xd106c3f1, 0xeb10023f, 0x54000089, 0xa93ffa9d, 0xd65f03c0, 0x00000000}, morestack(0x2c)...)
	insts = decode(medium...)
	off, class = GoEntry(insts)
	assert.Equal(t, uint64(0x10), off)
	assert.Equal(t, SingleStepped, class)

	// Large frame: ldr; mov x27, #16304; subs x17, sp, x27; b.lo L; cmp x17, x16;
	// b.ls L; mov x27, …; ret; L: the block.
	large := append([]uint32{0xf9400b90, 0xd287f61b, 0xeb3b63f1, 0x540000a3, 0xeb10023f, 0x54000069, 0xd288061b, 0xd65f03c0}, morestack(0x30)...)
	insts = decode(large...)
	off, class = GoEntry(insts)
	assert.Equal(t, uint64(0x18), off)
	assert.Equal(t, SingleStepped, class)

	// The block branching elsewhere: not a stack check.
	other := append([]uint32{}, small...)
	other[len(other)-1] = 0x14000001 // b +4
	off, class = GoEntry(decode(other...))
	assert.Equal(t, uint64(0), off)
	assert.Equal(t, SingleStepped, class)

	// A block without a call: not a stack check.
	nocall := append([]uint32{}, small...)
	nocall[8] = 0xd503201f
	off, _ = GoEntry(decode(nocall...))
	assert.Equal(t, uint64(0), off)

	// The guard from another register than g (x28): not a stack check.
	notg := append([]uint32{}, small...)
	notg[0] = 0xf9400a70 // ldr x16, [x19, #16]
	off, _ = GoEntry(decode(notg...))
	assert.Equal(t, uint64(0), off)

	// A leaf: mul x1, x0, x1; add x0, x1, #1; ret.
	insts = decode(0x9b017c01, 0x91000420, 0xd65f03c0)
	off, class = GoEntry(insts)
	assert.Equal(t, uint64(0), off)
	assert.Equal(t, SingleStepped, class)
	assert.Equal(t, []uint64{8}, Returns(insts))

	// C entries are always at 0: bti c; paciasp; stp; …
	insts = decode(0xd503245f, 0xd503233f, 0xa9be7bfd, 0x910003fd, 0xa8c27bfd, 0xd50323bf, 0xd65f03c0)
	off, class = CheapEntry(insts)
	assert.Equal(t, uint64(0), off)
	assert.Equal(t, SingleStepped, class)
	assert.Equal(t, Unsupported, insts[5].Class, "autiasp")
	// …and a patchable entry nop, which newer kernels simulate.
	off, class = CheapEntry(decode(0xd503201f, 0xd503201f, 0xd65f03c0))
	assert.Equal(t, uint64(0), off)
	assert.Equal(t, Emulated, class)
}

// FuzzDecodeARM64 checks that DecodeARM64 never panics and that what it
// returns is consistent: 4-byte instructions at every multiple of 4, the
// same class as ClassifyARM64, and entries and returns on boundaries.
func FuzzDecodeARM64(f *testing.F) {
	for _, ws := range [][]uint32{
		{0xf9400b90, 0xeb3063ff, 0x54000089, 0xf81c0ffe, 0xf84407fe, 0xd65f03c0, 0xa90087e0, 0xaa1e03e3, 0x94000000, 0xa94087e0, 0x17fffff6},
		{0xd503245f, 0xd503233f, 0xa9be7bfd, 0x910003fd, 0xa8c27bfd, 0xd50323bf, 0xd65f03c0},
		{0x00000000, 0xffffffff, 0xd65f0bff, 0x19010440, 0x5c000001, 0xc85f7c20},
	} {
		f.Add(words(ws...))
	}
	f.Add([]byte{0x1f, 0x20, 0x03})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, code []byte) {
		insts, err := DecodeARM64(code)
		if len(code) == 0 {
			if err == nil {
				t.Fatal("no error for no code")
			}
			return
		}
		if (err != nil) != (len(code)%4 != 0) {
			t.Fatalf("%d bytes: error %v", len(code), err)
		}
		if len(insts) != len(code)/4 {
			t.Fatalf("%d instructions for %d bytes", len(insts), len(code))
		}
		for k, in := range insts {
			if in.Offset != uint64(4*k) || in.Len != 4 || !in.arm64 {
				t.Fatalf("instruction %d: offset %#x, length %d", k, in.Offset, in.Len)
			}
			if Boundary(insts, in.Offset) != nil {
				t.Fatalf("instruction %d is no boundary", k)
			}
			for o := in.Offset + 1; o < in.End(); o++ {
				if Boundary(insts, o) == nil {
					t.Fatalf("offset %#x inside the instruction at %#x passes Boundary", o, in.Offset)
				}
			}
			c, err := ClassifyARM64(code[in.Offset:in.End()])
			if err == nil && in.Class == Unsafe && c.Probeable() {
				c = Unsafe // inside an exclusive load/store sequence
			}
			if err != nil || c != in.Class {
				t.Fatalf("instruction %d: Classify says %v, %v; Decode said %v", k, c, err, in.Class)
			}
			if in.Class > Unsafe || in.Class == Optimizable {
				t.Fatalf("instruction %d: class %v", k, in.Class)
			}
			if in.Text == "" {
				t.Fatalf("instruction %d: no text", k)
			}
			if in.hasTarget && (in.target-int64(in.Offset))%4 != 0 {
				t.Fatalf("instruction %d: target %#x", k, in.target)
			}
		}
		if len(insts) == 0 {
			return
		}
		if off, _ := CheapEntry(insts); off != 0 {
			t.Fatalf("CheapEntry %#x", off)
		}
		if off, class := GoEntry(insts); Boundary(insts, off) != nil || class != insts[find(insts, off)].Class {
			t.Fatalf("GoEntry %#x (%v) is no boundary or has another class", off, class)
		}
		for _, off := range Returns(insts) {
			if Boundary(insts, off) != nil {
				t.Fatalf("return %#x is no boundary", off)
			}
		}
	})
}

// TestCallsSelfARM64 finds a bl to the function's own first instruction,
// and nothing else: a bl elsewhere, a b back to the start (a loop) and an
// x86-64 call's bytes are not recursion.
func TestCallsSelfARM64(t *testing.T) {
	for _, c := range []struct {
		name  string
		words []uint32
		want  bool
	}{
		// stp x29, x30, [sp, #-16]!; nop; bl 0 (imm26 = -2); ret
		{"bl to the start", []uint32{0xa9bf7bfd, 0xd503201f, 0x97fffffe, 0xd65f03c0}, true},
		// the same bl one instruction later targets +0x4
		{"bl elsewhere", []uint32{0xa9bf7bfd, 0xd503201f, 0xd503201f, 0x97fffffe, 0xd65f03c0}, false},
		// b 0: a loop, not a call
		{"b to the start", []uint32{0xa9bf7bfd, 0xd503201f, 0x17fffffe, 0xd65f03c0}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			insts, err := DecodeARM64(words(c.words...))
			require.NoError(t, err)
			assert.Equal(t, c.want, CallsSelf(insts))
		})
	}
}

// TestFirstCallARM64 finds bl, blr, br and branches out of the function;
// not branches inside it.
func TestFirstCallARM64(t *testing.T) {
	const add, ret = 0x91000400, 0xd65f03c0 // add x0, x0, #1; ret
	for _, c := range []struct {
		name  string
		words []uint32
		want  int64
	}{
		{"leaf", []uint32{add, ret}, -1},
		{"b inside", []uint32{add, 0x14000001, ret}, -1},
		{"bl", []uint32{add, 0x94000010, ret}, 4},
		{"blr x1", []uint32{add, 0xd63f0020, ret}, 4},
		{"br x1", []uint32{add, 0xd61f0020}, 4},
		{"b out (a tail call)", []uint32{add, 0x14000010}, 4},
		{"cbz out", []uint32{0xb4000800, add, ret}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			insts, err := DecodeARM64(words(c.words...))
			require.NoError(t, err)
			in, ok := FirstCall(insts)
			if c.want < 0 {
				assert.False(t, ok, "found %s at %#x", in.Text, in.Offset)
				return
			}
			require.True(t, ok)
			assert.Equal(t, uint64(c.want), in.Offset, in.Text)
		})
	}
}
