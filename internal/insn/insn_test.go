package insn

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/arch/x86/x86asm"
)

func hexBytes(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	require.NoError(t, err)
	return b
}

// TestClassify checks the classes against what Linux 6.18 was measured to
// do with a uprobe on each instruction (per-hit cost with a tracefs uprobe
// event: about 0.5–1 µs emulated, 6–13 µs single-stepped; error 524 when
// refused; results checked for the skipped VEX instruction).
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name, bytes string
		want        SiteClass
	}{
		// emulated: push %reg
		{"push %rbp", "55", Emulated},
		{"push %rbx", "53", Emulated},
		{"push %r12", "41 54", Emulated},
		{"push %r15", "41 57", Emulated},
		{"pushw %bp", "66 55", SingleStepped},
		{"push $0", "6a 00", SingleStepped},
		{"push (%rsp)", "ff 34 24", SingleStepped},
		{"pop %rbp", "5d", SingleStepped},
		// emulated: the canonical nops
		{"nop", "90", Emulated},
		{"xchg %ax,%ax", "66 90", Emulated},
		{"nopl (%rax)", "0f 1f 00", Emulated},
		{"nopl 0x0(%rax)", "0f 1f 40 00", Emulated},
		{"nopw 0x0(%rax,%rax,1)", "66 0f 1f 44 00 00", Emulated},
		{"nopl 0x0(%rax) 7", "0f 1f 80 00 00 00 00", Emulated},
		{"nopl 0x0(%rax,%rax,1) 8", "0f 1f 84 00 00 00 00 00", Emulated},
		{"pause", "f3 90", Emulated},
		{"nopl 0x8(%rax)", "0f 1f 40 08", SingleStepped},
		{"nopw 0x0(%rax,%rax,1) 9", "66 0f 1f 84 00 00 00 00 00", SingleStepped},
		{"rex.W nopw", "48 0f 1f 44 00 00", SingleStepped},
		// optimizable: 5-byte nops
		{"nopl 0x0(%rax,%rax,1)", "0f 1f 44 00 00", Optimizable},
		{"nopl 0x8(%rax,%rax,1)", "0f 1f 44 00 08", Optimizable},
		{"nopw 0x0(%rax)", "66 0f 1f 40 00", Optimizable},
		// emulated: direct branches
		{"jmp rel8", "eb 10", Emulated},
		{"jmp rel32", "e9 00 01 00 00", Emulated},
		{"call rel32", "e8 00 01 00 00", Emulated},
		{"je rel8", "74 00", Emulated},
		{"jbe rel8", "76 3f", Emulated},
		{"jbe rel32", "0f 86 99 00 00 00", Emulated},
		{"bnd jmp", "f2 eb 00", Emulated},
		{"jrcxz", "e3 00", SingleStepped},
		{"jmp *%rax", "ff e0", SingleStepped},
		{"call *0x10(%rax)", "ff 50 10", SingleStepped},
		// single-stepped
		{"mov %rsp,%rbp", "48 89 e5", SingleStepped},
		{"mov %rax,%rax", "48 89 c0", SingleStepped},
		{"lea 0x0(%rsi),%rsi", "48 8d 76 00", SingleStepped},
		{"lea -0x1a0(%rsp),%r12", "4c 8d a4 24 60 fe ff ff", SingleStepped},
		{"sub $0x10,%rsp", "48 83 ec 10", SingleStepped},
		{"cmp 0x10(%r14),%rsp", "49 3b 66 10", SingleStepped},
		{"endbr64", "f3 0f 1e fa", SingleStepped},
		{"ret", "c3", SingleStepped},
		{"rep ret", "f3 c3", SingleStepped},
		{"ret $8", "c2 08 00", SingleStepped},
		{"mov %fs:0x28,%rax", "64 48 8b 04 25 28 00 00 00", SingleStepped},
		{"addr32 mov", "67 48 8b 00", SingleStepped},
		{"syscall", "0f 05", SingleStepped},
		{"ud2", "0f 0b", SingleStepped},
		{"lfence", "0f ae e8", SingleStepped},
		{"rdpkru", "0f 01 ee", SingleStepped},
		{"vpmovmskb %ymm3,%edx", "c5 fd d7 d3", SingleStepped},
		// refused by the kernel
		{"cs nopw", "66 2e 0f 1f 84 00 00 00 00 00", Unsupported},
		{"notrack jmp *%rax", "3e ff e0", Unsupported},
		{"ds je", "3e 74 00", Unsupported},
		{"cs je", "2e 74 00", Unsupported},
		{"es mov", "26 48 8b 00", Unsupported},
		{"lock addq", "f0 48 83 04 24 00", Unsupported},
		{"xacquire lock add", "f2 f0 48 01 00", Unsupported},
		{"data16 jmp", "66 eb 00", Unsupported},
		{"data16 call", "66 e8 00 00 00 00", Unsupported},
		{"int3", "cc", Unsupported},
		{"int $0x80", "cd 80", Unsupported},
		{"hlt", "f4", Unsupported},
		{"in", "e4 00", Unsupported},
		{"mov %eax,%ss", "8e d0", Unsupported},
		{"vmovdqu (%rsp),%ymm0", "c5 fe 6f 04 24", Unsupported},
		{"vpxor %ymm0,%ymm0,%ymm0", "c5 fd ef c0", Unsupported},
		{"vmovdqu64 (%rsp),%zmm0", "62 f1 fe 48 6f 04 24", Unsupported},
		// accepted but run wrongly
		{"vpcmpeqb %ymm0,%ymm0,%ymm1", "c5 fd 74 c8", Unsafe},
		{"vmovd %xmm0,%ecx", "c5 f9 7e c1", Unsafe},
		{"vmovdqu %ymm0,(%rdi)", "c5 fe 7f 07", Unsafe},
		{"vzeroupper", "c5 f8 77", Unsafe},
		{"vzeroall (3-byte VEX)", "c4 e1 7c 77", Unsafe},
		{"vpsubsb", "c5 fd e8 c0", Unsafe},
		{"xchg %rax,%r8", "49 90", Unsafe},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Classify(hexBytes(t, tc.bytes))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got, "%s (%s)", tc.name, tc.bytes)
		})
	}
	_, err := Classify(nil)
	require.Error(t, err)
	_, err = Classify([]byte{0x0f, 0xff})
	require.Error(t, err)
}

func TestSiteClassString(t *testing.T) {
	assert.Equal(t, "emulated", Emulated.String())
	assert.Equal(t, "optimizable", Optimizable.String())
	assert.Equal(t, "single-stepped", SingleStepped.String())
	assert.Equal(t, "unsupported", Unsupported.String())
	assert.Equal(t, "unsafe", Unsafe.String())
	assert.Equal(t, "SiteClass(9)", SiteClass(9).String())
	assert.True(t, Optimizable.Probeable())
	assert.True(t, SingleStepped.Probeable())
	assert.False(t, Unsupported.Probeable())
	assert.False(t, Unsafe.Probeable())
}

// TestDecode checks instruction sequences that x86asm alone gets wrong or
// that exercise Decode's handling of padding and errors.
func TestDecode(t *testing.T) {
	type inst struct {
		off  uint64
		n    int
		text string
	}
	for _, tc := range []struct {
		name, code string
		want       []inst
		err        string
	}{
		{
			name: "cet prologue",
			code: "f3 0f 1e fa 55 48 89 e5 c3",
			want: []inst{{0, 4, "endbr64"}, {4, 1, "push %rbp"}, {5, 3, "mov %rsp,%rbp"}, {8, 1, "retq"}},
		},
		{
			// x86asm v0.32.0 swallows the ret into vzeroupper.
			name: "vzeroupper then ret",
			code: "c5 f8 77 c3",
			want: []inst{{0, 3, "vzeroupper"}, {3, 1, "retq"}},
		},
		{
			name: "vzeroupper then shl",
			code: "c5 f8 77 48 c1 e1 20 c3",
			want: []inst{{0, 3, "vzeroupper"}, {3, 4, "shl $0x20,%rcx"}, {7, 1, "retq"}},
		},
		{
			name: "instructions x86asm does not know",
			code: "0f 01 ee f3 48 0f 1e c8 66 0f 38 f6 c1 f3 0f c7 f8 f3 0f 1e fb c3",
			want: []inst{{0, 3, "rdpkru"}, {3, 5, ".byte 0xf3 0x48 0x0f 0x1e 0xc8"}, {8, 5, ".byte 0x66 0x0f 0x38 0xf6 0xc1"},
				{13, 4, ".byte 0xf3 0x0f 0xc7 0xf8"}, {17, 4, "endbr32"}, {21, 1, "retq"}},
		},
		{
			name: "more instructions x86asm does not know",
			code: "3e c4 e2 f3 f6 ea c4 e3 f9 6b c2 10 8f e8 78 c2 ec 0e 67 c4 61 f9 7e e8 f3 0f a7 c8 8f e9 78 81 c1 8f ea 78 10 c0 01 02 03 04 c3",
			want: []inst{
				{0, 6, ".byte 0x3e 0xc4 0xe2 0xf3 0xf6 0xea"},                 // ds mulx %rdx,%rcx,%rbp
				{6, 6, ".byte 0xc4 0xe3 0xf9 0x6b 0xc2 0x10"},                 // vfmaddsd (FMA4)
				{12, 6, ".byte 0x8f 0xe8 0x78 0xc2 0xec 0x0e"},                // vprotd $0xe,%xmm4,%xmm5 (XOP)
				{18, 6, "(prefix 67) vmovq %xmm13,%rax"},                      // addr32 vmovq
				{24, 4, ".byte 0xf3 0x0f 0xa7 0xc8"},                          // repz xcrypt-ecb
				{28, 5, ".byte 0x8f 0xe9 0x78 0x81 0xc1"},                     // vfrczpd (XOP map 9)
				{33, 9, ".byte 0x8f 0xea 0x78 0x10 0xc0 0x01 0x02 0x03 0x04"}, // bextr $imm32 (XOP map 0a)
				{42, 1, "retq"},
			},
		},
		{
			// glibc skips the lock prefix when single-threaded.
			name: "jump over a lock prefix",
			code: "74 01 f0 0f b1 17 c3",
			want: []inst{{0, 2, "je .+0x1"}, {2, 4, "lock cmpxchg %edx,(%rdi)"}, {6, 1, "retq"}},
		},
		{
			name: "go padding",
			code: "48 ff c0 c3 cc cc cc cc",
			want: []inst{{0, 3, "inc %rax"}, {3, 1, "retq"}, {4, 1, "int3"}, {5, 1, "int3"}, {6, 1, "int3"}, {7, 1, "int3"}},
		},
		{
			name: "nop padding cut short after ret",
			code: "31 c0 c3 66 2e 0f 1f 84 00",
			want: []inst{{0, 2, "xor %eax,%eax"}, {2, 1, "retq"}},
		},
		{
			name: "nop padding cut short after jmp",
			code: "eb fe 0f 1f",
			want: []inst{{0, 2, "jmp .-0x2"}},
		},
		{
			name: "instruction cut short, no terminator",
			code: "48 89 e5 48 8b",
			want: []inst{{0, 3, "mov %rsp,%rbp"}},
			err:  "decode instruction at offset 0x3 (bytes 48 8b): truncated instruction",
		},
		{
			name: "data after ret",
			code: "c3 43 52 59 50 54 4f 47 41 4d 53", // ret; "CRYPTOGAMS"
			err:  "decode instruction at offset 0x6 (bytes 4f 47 41 4d 53): unrecognized instruction",
		},
		{
			name: "unknown opcode",
			code: "55 0f ff",
			want: []inst{{0, 1, "push %rbp"}},
			err:  "decode instruction at offset 0x1 (bytes 0f ff): truncated instruction",
		},
		{
			name: "branch into an instruction",
			code: "eb 01 48 89 e5 c3",
			err:  "check branch at offset 0x0 (jmp .+0x1): its target 0x3 is inside the instruction at 0x2, so the code is not a plain instruction stream",
		},
		{
			name: "empty",
			code: "",
			err:  "decode: no code",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			insts, err := Decode(hexBytes(t, tc.code))
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
			} else {
				require.NoError(t, err)
			}
			if tc.want == nil {
				return
			}
			var got []inst
			for _, in := range insts {
				got = append(got, inst{in.Offset, in.Len, in.Text})
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestBoundary checks Boundary's verdicts and the text of its errors.
func TestBoundary(t *testing.T) {
	// endbr64; sub $0x10,%rsp; mov %rdi,(%rsp); add $0x10,%rsp; ret
	insts, err := Decode(hexBytes(t, "f3 0f 1e fa 48 83 ec 10 48 89 3c 24 48 83 c4 10 c3"))
	require.NoError(t, err)
	for _, off := range []uint64{0, 4, 8, 12, 16} {
		assert.NoError(t, Boundary(insts, off), "%#x", off)
	}
	for off, want := range map[uint64]string{
		5:  "offset 0x5 is inside the instruction at 0x4 (4 bytes: sub $0x10,%rsp); nearest instruction boundaries: 0x4, 0x8",
		1:  "offset 0x1 is inside the instruction at 0x0 (4 bytes: endbr64); nearest instruction boundaries: 0x0, 0x4",
		11: "offset 0xb is inside the instruction at 0x8 (4 bytes: mov %rdi,(%rsp)); nearest instruction boundaries: 0x8, 0xc",
		17: "offset 0x11 is past the decoded code, which ends at 0x11; last instruction boundary: 0x10",
		99: "offset 0x63 is past the decoded code, which ends at 0x11; last instruction boundary: 0x10",
	} {
		err := Boundary(insts, off)
		require.Error(t, err, "%#x", off)
		assert.Equal(t, want, err.Error())
	}
	assert.EqualError(t, Boundary(nil, 0), "offset 0x0: no decoded instructions")

	// A jump over a lock prefix lands on an offset that is no boundary:
	// a uprobe there would make the atomic instruction lock int3.
	insts, err = Decode(hexBytes(t, "74 01 f0 0f b1 17 c3"))
	require.NoError(t, err)
	assert.NoError(t, Boundary(insts, 2))
	assert.EqualError(t, Boundary(insts, 3), "offset 0x3 is inside the instruction at 0x2 (4 bytes: lock cmpxchg %edx,(%rdi)); nearest instruction boundaries: 0x2, 0x6")
}

// TestEntries checks CheapEntry, GoEntry and Returns on hand-made code.
func TestEntries(t *testing.T) {
	decode := func(code string) []Inst {
		insts, err := Decode(hexBytes(t, code))
		require.NoError(t, err)
		return insts
	}

	// CheapEntry
	off, class := CheapEntry(decode("f3 0f 1e fa 55 48 89 e5 5d c3")) // endbr64; push %rbp
	assert.Equal(t, uint64(4), off)
	assert.Equal(t, Emulated, class)
	off, class = CheapEntry(decode("f3 0f 1e fa 41 57 c3")) // endbr64; push %r15
	assert.Equal(t, uint64(4), off)
	assert.Equal(t, Emulated, class)
	off, class = CheapEntry(decode("f3 0f 1e fa 48 83 ec 08 c3")) // endbr64; sub
	assert.Equal(t, uint64(0), off)
	assert.Equal(t, SingleStepped, class)
	off, class = CheapEntry(decode("55 48 89 e5 5d c3")) // push %rbp
	assert.Equal(t, uint64(0), off)
	assert.Equal(t, Emulated, class)
	off, class = CheapEntry(decode("0f 1f 44 00 00 55 c3")) // patchable entry nop
	assert.Equal(t, uint64(0), off)
	assert.Equal(t, Optimizable, class)
	off, class = CheapEntry(nil)
	assert.Equal(t, uint64(0), off)
	assert.Equal(t, SingleStepped, class)

	// GoEntry: cmp 0x10(%r14),%rsp; jbe L; push %rbp; mov %rsp,%rbp; pop %rbp; ret;
	// L: mov %rax,0x8(%rsp); call morestack; mov 0x8(%rsp),%rax; jmp 0
	goSmall := "49 3b 66 10 76 07 55 48 89 e5 5d c3 cc" +
		"48 89 44 24 08 e8 00 00 00 00 48 8b 44 24 08 eb e2"
	insts := decode(goSmall)
	off, class = GoEntry(insts)
	assert.Equal(t, uint64(6), off)
	assert.Equal(t, Emulated, class)
	assert.Equal(t, []uint64{11}, Returns(insts))

	// The same with the morestack block jumping elsewhere: not a stack check.
	insts = decode("49 3b 66 10 76 07 55 48 89 e5 5d c3 cc" +
		"48 89 44 24 08 e8 00 00 00 00 48 8b 44 24 08 eb e8")
	off, _ = GoEntry(insts)
	assert.Equal(t, uint64(0), off)

	// ABI0 assembly: mov %fs:-8,%rcx; cmp 0x10(%rcx),%rsp; jbe L; ...
	insts = decode("64 48 8b 0c 25 f8 ff ff ff 48 3b 61 10 76 02 c3 cc" +
		"e8 00 00 00 00 eb e8")
	off, class = GoEntry(insts)
	assert.Equal(t, uint64(15), off)
	assert.Equal(t, SingleStepped, class) // ret

	// A leaf: no check.
	insts = decode("48 0f af c3 48 ff c0 c3")
	off, class = GoEntry(insts)
	assert.Equal(t, uint64(0), off)
	assert.Equal(t, SingleStepped, class)
	assert.Equal(t, []uint64{7}, Returns(insts))

	off, class = GoEntry(nil)
	assert.Equal(t, uint64(0), off)
	assert.Equal(t, SingleStepped, class)
	assert.Empty(t, Returns(nil))
}

// TestInstFields checks the fields Decode fills for common instructions.
func TestInstFields(t *testing.T) {
	insts, err := Decode(hexBytes(t, "55 e8 00 00 00 00 f3 c3"))
	require.NoError(t, err)
	require.Len(t, insts, 3)
	assert.Equal(t, Inst{Offset: 0, Len: 1, Op: x86asm.PUSH, Class: Emulated, Text: "push %rbp"}, insts[0])
	assert.Equal(t, x86asm.CALL, insts[1].Op)
	assert.Equal(t, uint64(6), insts[1].End())
	assert.True(t, insts[2].Ret)
	assert.Equal(t, "rep retq", insts[2].Text)
}

// FuzzDecode checks that Decode never panics and that what it returns is
// consistent: contiguous instructions from offset 0, each 1 to 15 bytes,
// every start a boundary and no other offset one.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		"f3 0f 1e fa 55 48 89 e5 c3",
		"49 3b 66 10 76 07 55 48 89 e5 5d c3 cc 48 89 44 24 08 e8 00 00 00 00 48 8b 44 24 08 eb e3",
		"c5 f8 77 c3",
		"c4 e1 7c 77 c3",
		"62 f1 fe 48 6f 04 24 c3",
		"0f 01 ee 66 0f 38 f6 c1 0f 3a 0f c1 00 c3",
		"66 2e 0f 1f 84 00 00 00 00 00",
		"eb 01 48 89 e5 c3",
		"f0",
		"0f",
		"c4",
		"62",
	} {
		f.Add(hexBytes(f, s))
	}
	f.Fuzz(func(t *testing.T, code []byte) {
		insts, err := Decode(code)
		if len(code) == 0 {
			if err == nil {
				t.Fatal("no error for no code")
			}
			return
		}
		if err == nil && len(insts) == 0 {
			t.Fatal("no instructions and no error")
		}
		var next uint64
		for k, in := range insts {
			if in.Offset != next || in.Len < 1 || in.Len > 15 || in.End() > uint64(len(code)) {
				t.Fatalf("instruction %d: offset %#x, length %d after %#x in %d bytes", k, in.Offset, in.Len, next, len(code))
			}
			if err := Boundary(insts, in.Offset); err != nil {
				t.Fatalf("instruction %d: %v", k, err)
			}
			for o := in.Offset + 1; o < in.End(); o++ {
				if Boundary(insts, o) == nil {
					t.Fatalf("offset %#x inside the instruction at %#x passes Boundary", o, in.Offset)
				}
			}
			if c, err := Classify(code[in.Offset:in.End()]); err != nil || c != in.Class {
				t.Fatalf("instruction %d: Classify says %v, %v; Decode said %v", k, c, err, in.Class)
			}
			next = in.End()
		}
		if off, _ := CheapEntry(insts); off != 0 && Boundary(insts, off) != nil {
			t.Fatalf("CheapEntry %#x is no boundary", off)
		}
		if off, _ := GoEntry(insts); off != 0 && Boundary(insts, off) != nil {
			t.Fatalf("GoEntry %#x is no boundary", off)
		}
		for _, off := range Returns(insts) {
			if Boundary(insts, off) != nil {
				t.Fatalf("return %#x is no boundary", off)
			}
		}
		if _, calls := FirstCall(insts); calls && Leaf(insts) {
			t.Fatal("a leaf with a call")
		}
	})
}

// TestFirstCall finds what runs other code while the function's frame is
// live, or hands the frame over: calls, jumps out of the function, indirect
// jumps; nothing else (branches inside, a syscall).
func TestFirstCall(t *testing.T) {
	for _, c := range []struct {
		name string
		code []byte
		want int64 // offset of the instruction found, -1 for none
	}{
		{"leaf: lea; ret", []byte{0x48, 0x8d, 0x44, 0x7f, 0x01, 0xc3}, -1},
		{"a loop inside", []byte{0x31, 0xc0, 0xff, 0xc0, 0x75, 0xfc, 0xc3}, -1},
		{"a jmp to the next instruction", []byte{0xeb, 0x00, 0xc3}, -1},
		{"syscall", []byte{0x0f, 0x05, 0xc3}, -1},
		{"a direct call", []byte{0x48, 0x83, 0xec, 0x08, 0xe8, 0xf0, 0xff, 0xff, 0xff, 0x48, 0x83, 0xc4, 0x08, 0xc3}, 4},
		{"an indirect call", []byte{0x90, 0xff, 0xd0, 0xc3}, 1},
		{"a tail call", []byte{0x48, 0x83, 0xc7, 0x01, 0xe9, 0x10, 0x00, 0x00, 0x00}, 4},
		{"a jcc out", []byte{0x48, 0x85, 0xff, 0x0f, 0x84, 0x00, 0x01, 0x00, 0x00, 0xc3}, 3},
		{"an indirect jmp", []byte{0x48, 0x85, 0xff, 0xff, 0xe0}, 3},
		{"a notrack jmp (jump table)", []byte{0x3e, 0xff, 0xe0}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			insts, err := Decode(c.code)
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
	_, ok := FirstCall(nil)
	assert.False(t, ok)
}

// TestLeaf takes a function for a leaf when nothing leaves its code but a
// return (FirstCall finds nothing) and its code cannot run on past its
// end: its last instruction before padding stops the flow.
func TestLeaf(t *testing.T) {
	for _, c := range []struct {
		name string
		code []byte
		want bool
	}{
		{"lea; ret", []byte{0x48, 0x8d, 0x44, 0x7f, 0x01, 0xc3}, true},
		{"a loop inside, then ret", []byte{0x31, 0xc0, 0xff, 0xc0, 0x75, 0xfc, 0xc3}, true},
		{"ret, then padding", []byte{0x31, 0xc0, 0xc3, 0xcc, 0xcc, 0x90, 0x0f, 0x1f, 0x00}, true},
		{"syscall; ret", []byte{0x0f, 0x05, 0xc3}, true},
		{"an endless loop", []byte{0x90, 0xeb, 0xfd}, true},
		{"ud2 at the end", []byte{0x31, 0xc0, 0x0f, 0x0b}, true},
		{"a direct call", []byte{0x48, 0x83, 0xec, 0x08, 0xe8, 0xf0, 0xff, 0xff, 0xff, 0x48, 0x83, 0xc4, 0x08, 0xc3}, false},
		{"an indirect call", []byte{0x90, 0xff, 0xd0, 0xc3}, false},
		{"a tail call", []byte{0x48, 0x83, 0xc7, 0x01, 0xe9, 0x10, 0x00, 0x00, 0x00}, false},
		{"a jcc to a cold part", []byte{0x48, 0x85, 0xff, 0x0f, 0x84, 0x00, 0x01, 0x00, 0x00, 0xc3}, false},
		{"a jump table", []byte{0x3e, 0xff, 0xe0}, false},
		{"runs on past its end", []byte{0x31, 0xc0, 0xff, 0xc0}, false},
		{"runs on past its end, padding after", []byte{0x31, 0xc0, 0x90, 0x90}, false},
		{"padding only", []byte{0x90, 0x90}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			insts, err := Decode(c.code)
			require.NoError(t, err)
			assert.Equal(t, c.want, Leaf(insts))
		})
	}
	assert.False(t, Leaf(nil))
}
