package insn

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// transferFunc is an x86-64 function at 0x1000 with one instruction of
// each kind Transfers tells apart (assembled with GNU as).
const transferFunc = "" +
	"e8 00 01 00 00" + //             0x00 call .+0x105
	"ff 15 00 02 00 00" + //          0x05 call *0x200(%rip)
	"48 8b 05 00 03 00 00" + //       0x0b mov 0x300(%rip),%rax
	"ff d0" + //                      0x12 call *%rax
	"48 83 ff 06" + //                0x14 cmp $0x6,%rdi
	"77 10" + //                      0x18 ja 0x2a
	"48 8d 15 00 04 00 00" + //       0x1a lea 0x400(%rip),%rdx
	"48 63 04 ba" + //                0x21 movslq (%rdx,%rdi,4),%rax
	"48 01 d0" + //                   0x25 add %rdx,%rax
	"ff e0" + //                      0x28 jmp *%rax
	"ff e0" + //                      0x2a jmp *%rax
	"4c 8d 0d f0 ff ff ff" + //       0x2c lea -0x10(%rip),%r9
	"4c 01 c9" + //                   0x33 add %r9,%rcx
	"ff e1" + //                      0x36 jmp *%rcx
	"48 8b 05 00 05 00 00" + //       0x38 mov 0x500(%rip),%rax
	"48 8b 80 e0 02 00 00" + //       0x3f mov 0x2e0(%rax),%rax
	"ff d0" + //                      0x46 call *%rax
	"ff d3" + //                      0x48 call *%rbx
	"48 8d 35 80 ff ff ff" + //       0x4a lea -0x80(%rip),%rsi
	"ff 25 00 06 00 00" + //          0x51 jmp *0x600(%rip)
	"e9 fb 0f 00 00" + //             0x57 jmp .+0x1000
	"c3" //                           0x5c ret

// Transfers tells each way of leaving a function apart and finds where it
// goes: direct targets, the slots of calls and jumps through fixed
// pointers (in the instruction, or loaded just before it), a jump table
// with its bound check, a jump computed from a label of the function, a
// call through a field of a structure a slot points to, and unknown
// pointers; CodeAddresses finds the rip-relative lea targets, backwards
// too.
func TestTransfers(t *testing.T) {
	const addr = 0x1000
	code := hexBytes(t, transferFunc)
	insts, err := Decode(code)
	require.NoError(t, err)
	type want struct {
		off  uint64
		kind TransferKind
		to   uint64 // Target, Slot or Table
		n    int    // TableEntries; Field for FieldCall
	}
	var got []want
	for _, tr := range Transfers(addr, code, insts) {
		w := want{off: tr.Inst.Offset, kind: tr.Kind}
		switch tr.Kind {
		case DirectCall, DirectJump:
			w.to = tr.Target
		case SlotCall, SlotJump:
			w.to = tr.Slot
		case FieldCall:
			w.to, w.n = tr.Slot, int(tr.Field)
		case JumpTable, ComputedJump:
			w.to, w.n = tr.Table, tr.TableEntries
			if tr.Kind == JumpTable {
				assert.Equal(t, 4, tr.TableEntry)
				assert.True(t, tr.TableRelative)
			}
		}
		got = append(got, w)
	}
	assert.Equal(t, []want{
		{0x00, DirectCall, addr + 0x105, 0},
		{0x05, SlotCall, addr + 0x0b + 0x200, 0},
		{0x12, SlotCall, addr + 0x12 + 0x300, 0},
		{0x28, JumpTable, addr + 0x21 + 0x400, 7},
		{0x2a, IndirectJump, 0, 0},
		{0x36, ComputedJump, addr + 0x33 - 0x10, 0},
		{0x46, FieldCall, addr + 0x3f + 0x500, 0x2e0},
		{0x48, IndirectCall, 0, 0},
		{0x51, SlotJump, addr + 0x57 + 0x600, 0},
		{0x57, DirectJump, addr + 0x57 + 0x1000, 0},
	}, got)
	assert.Equal(t, []uint64{addr + 0x21 + 0x400, addr + 0x33 - 0x10, addr + 0x51 - 0x80}, CodeAddresses(addr, code, insts))

	// A jump table without a bound check before it: entries unknown.
	code = hexBytes(t, "48 8d 15 00 04 00 00 48 63 04 ba 48 01 d0 ff e0")
	insts, err = Decode(code)
	require.NoError(t, err)
	ts := Transfers(addr, code, insts)
	require.Len(t, ts, 1)
	assert.Equal(t, JumpTable, ts[0].Kind)
	assert.Zero(t, ts[0].TableEntries)
	// The bound check on the memory the index was loaded from
	// (cmpl $0xb,0x8(%rbx); ja; mov 0x8(%rbx),%eax).
	code = hexBytes(t, "83 7b 08 0b 77 11 8b 43 08 48 8d 15 00 04 00 00 48 63 04 82 48 01 d0 ff e0")
	insts, err = Decode(code)
	require.NoError(t, err)
	ts = Transfers(addr, code, insts)
	require.Len(t, ts, 1)
	assert.Equal(t, JumpTable, ts[0].Kind)
	assert.Equal(t, 12, ts[0].TableEntries)
}

// The same on arm64: bl, a PLT entry's adrp, ldr, add, br (a SlotJump
// through the slot adrp and ldr name), blr and br through unknown
// registers, b.eq out; CodeAddresses finds adrp+add and adr.
func TestTransfersARM64(t *testing.T) {
	const addr = 0x1000
	words := []uint32{
		0x94000040, // 0x00 bl .+0x100
		0x90000090, // 0x04 adrp x16, .+0x10000
		0xf9400611, // 0x08 ldr x17, [x16, #8]
		0x91002210, // 0x0c add x16, x16, #0x8
		0xd61f0220, // 0x10 br x17
		0xd63f0040, // 0x14 blr x2
		0xd0000000, // 0x18 adrp x0, .+0x2000
		0x9100c000, // 0x1c add x0, x0, #0x30
		0x10000201, // 0x20 adr x1, .+0x40
		0x54008000, // 0x24 b.eq .+0x1000
		0xd61f0000, // 0x28 br x0
		0xd65f03c0, // 0x2c ret
	}
	code := make([]byte, 4*len(words))
	for i, w := range words {
		binary.LittleEndian.PutUint32(code[4*i:], w)
	}
	insts, err := DecodeARM64(code)
	require.NoError(t, err)
	type want struct {
		off  uint64
		kind TransferKind
		to   uint64
	}
	var got []want
	for _, tr := range Transfers(addr, code, insts) {
		got = append(got, want{tr.Inst.Offset, tr.Kind, tr.Target + tr.Slot})
	}
	assert.Equal(t, []want{
		{0x00, DirectCall, addr + 0x100},
		{0x10, SlotJump, addr + 0x10000 + 8},
		{0x14, IndirectCall, 0},
		{0x24, DirectJump, addr + 0x24 + 0x1000},
		{0x28, IndirectJump, 0},
	}, got)
	assert.Equal(t, []uint64{addr + 0x10000 + 8, addr + 0x2000 + 0x30, addr + 0x20 + 0x40}, CodeAddresses(addr, code, insts))
	assert.True(t, StopsFlow(insts[len(insts)-1]))
	brk, err := DecodeARM64([]byte{0x00, 0x7d, 0x20, 0xd4}) // brk #0x3e8
	require.NoError(t, err)
	assert.True(t, StopsFlow(brk[0]), "a trap")
	assert.False(t, StopsFlow(insts[0]), "bl returns")
}

// FuzzTransfers checks that Transfers, CodeAddresses and DecodeFlow never
// panic on any code (x86-64, or arm64 when the first byte is odd), that
// DecodeFlow finds the instructions Decode finds, and that every transfer
// is one of the function's instructions, of a known kind.
func FuzzTransfers(f *testing.F) {
	f.Add(hexBytes(f, "01"+transferFunc))
	f.Add(hexBytes(f, "00"+transferFunc))
	f.Add(hexBytes(f, "01 40 00 00 94 90 00 00 90 11 06 40 f9 20 02 1f d6"))
	f.Add(hexBytes(f, "00 48 8b 05 00 05 00 00 48 8b 80 e0 02 00 00 ff d0"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		arm, code := data[0]&1 == 1, data[1:]
		var insts, flow []Inst
		var err, flowErr error
		if arm {
			insts, err = DecodeARM64(code)
			flow, flowErr = decodeARM64(code, false)
		} else {
			insts, err = Decode(code)
			flow, flowErr = decode(code, false)
		}
		if (err == nil) != (flowErr == nil) || len(insts) != len(flow) {
			t.Fatalf("Decode: %d instructions, %v; without text: %d, %v", len(insts), err, len(flow), flowErr)
		}
		at := map[uint64]bool{}
		for i, in := range insts {
			if flow[i].Offset != in.Offset || flow[i].Len != in.Len || flow[i].Op != in.Op || flow[i].Ret != in.Ret {
				t.Fatalf("instruction %d differs without text: %+v, %+v", i, in, flow[i])
			}
			at[in.Offset] = true
		}
		for _, tr := range Transfers(0x400000, code, insts) {
			if !at[tr.Inst.Offset] || tr.Kind < DirectCall || tr.Kind > IndirectJump {
				t.Fatalf("transfer %+v", tr)
			}
		}
		CodeAddresses(0x400000, code, insts)
	})
}
