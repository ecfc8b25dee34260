package usdt

import (
	"debug/elf"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

func fuzzClassOrder(is64, bigEndian bool) (elf.Class, byteOrder) {
	class := elf.ELFCLASS32
	if is64 {
		class = elf.ELFCLASS64
	}
	var order byteOrder = binary.LittleEndian
	if bigEndian {
		order = binary.BigEndian
	}
	return class, order
}

func FuzzParseNote(f *testing.F) {
	for _, is64 := range []bool{false, true} {
		for _, big := range []bool{false, true} {
			class, order := fuzzClassOrder(is64, big)
			f.Add(makeDesc(class, order, 0x42512a, 0x8cc5a0, 0xa84276, "python", "function__entry", "8@%rbp 8@%r12 -4@%eax"), is64, big)
			f.Add(makeDesc(class, order, 0x1139, 0x2004, 0, "p", "n", ""), is64, big)
		}
	}
	f.Add([]byte{}, true, false)
	f.Add(make([]byte, 24), true, false)
	f.Add([]byte("\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00p\x00n"), false, true)
	f.Fuzz(func(t *testing.T, desc []byte, is64, bigEndian bool) {
		class, order := fuzzClassOrder(is64, bigEndian)
		n, err := ParseNote(desc, class, order)
		if err != nil {
			return
		}
		if n.Provider == "" || n.Name == "" {
			t.Fatalf("empty provider or name without an error: %+v", n)
		}
		if strings.ContainsRune(n.Provider+n.Name+n.Args, 0) {
			t.Fatalf("NUL inside a string: %+v", n)
		}
		if !is64 && (n.Address > 0xffffffff || n.Base > 0xffffffff || n.SemaphoreAddress > 0xffffffff) {
			t.Fatalf("32-bit note with a 64-bit address: %+v", n)
		}
	})
}

func FuzzParseArgs(f *testing.F) {
	for _, s := range []string{
		"", "8@%rax", "-4@%eax 8@%rsi", "1@%ah", "1@%r8b", "-4@-140(%rbp)", "8@(%rsp)",
		"1@-96(%rbp,%rax,8)", "4@(%rax,%rdx)", "4@(,%rax,4)", "8@0x10(%rax)", "8@-0x10(%rax)",
		"8@1234(%rip)", "8@counter(%rip)", "-4@counter+8(%rip)", "4@counter-4(%rip)",
		"-4@40+CheckpointStats(%rip)", "-4@table(,%rdi,4)", "1@$5", "-4@$-1", "8@$0x10",
		"-8f@-16(%rbp)", "8f@%xmm0", "3@%rax", "8@(%rax,%rbx,3)", "8@%xyz",
		"-4@$1 1@-57(%rbp) -4@%edx -4@%r12d -4@%r9d -4@%eax",
		"8@9223372036854775807+1(%rax)", "8@$18446744073709551615",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		args, err := ParseArgs(text)
		if err != nil {
			if args != nil {
				t.Fatalf("args %v with error %v", args, err)
			}
			return
		}
		fields := strings.Fields(text)
		if len(args) != len(fields) {
			t.Fatalf("%d args for %d fields", len(args), len(fields))
		}
		for i, a := range args {
			if a.Text != fields[i] {
				t.Fatalf("text %q, want %q", a.Text, fields[i])
			}
			switch a.Size {
			case 1, 2, 4, 8:
			default:
				t.Fatalf("%q: size %d", a.Text, a.Size)
			}
			o := a.Operand
			switch o.Kind {
			case OperandRegister:
				if o.Register.Reg == 0 {
					t.Fatalf("%q: no register", a.Text)
				}
			case OperandMemory:
				if o.Base == 0 && o.Index == 0 {
					t.Fatalf("%q: no base or index", a.Text)
				}
				if (o.Index == 0) != (o.Scale == 0) {
					t.Fatalf("%q: index %v with scale %d", a.Text, o.Index, o.Scale)
				}
			case OperandConstant:
			default:
				t.Fatalf("%q: kind %d", a.Text, o.Kind)
			}
			// The canonical form parses back to the same operand.
			back, err := ParseArg("8@" + o.String())
			if err != nil {
				t.Fatalf("%q: canonical form %q: %v", a.Text, o.String(), err)
			}
			if back.Operand != o {
				t.Fatalf("%q: canonical form %q gives %+v, want %+v", a.Text, o.String(), back.Operand, o)
			}
		}
	})
}

func FuzzNotes(f *testing.F) {
	for _, is64 := range []bool{false, true} {
		for _, big := range []bool{false, true} {
			class, order := fuzzClassOrder(is64, big)
			var sec []byte
			sec = append(sec, makeNote(order, "stapsdt", 3, makeDesc(class, order, 0x1000, 0x2000, 0x4000, "prov", "a", "8@%rax"), 4)...)
			sec = append(sec, makeNote(order, "GNU", 3, []byte("xxxx"), 4)...)
			sec = append(sec, makeNote(order, "stapsdt", 3, makeDesc(class, order, 0x1010, 0x2000, 0, "prov", "b", ""), 4)...)
			f.Add(sec, is64, big, false)
			f.Add(makeNote(order, "stapsdt", 3, makeDesc(class, order, 1, 2, 3, "p", "n", "1@$1"), 8), is64, big, true)
		}
	}
	f.Add([]byte{}, true, false, false)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 3, 0, 0, 0}, true, false, false)
	f.Fuzz(func(t *testing.T, data []byte, is64, bigEndian, align8 bool) {
		class, order := fuzzClassOrder(is64, bigEndian)
		align := uint64(4)
		if align8 {
			align = 8
		}
		notes, err := walkNotes(data, order, class, align)
		if err != nil {
			if notes != nil {
				t.Fatalf("notes %v with error %v", notes, err)
			}
			return
		}
		for _, n := range notes {
			// Every note's args go through the parsers too.
			_, _ = ParseArgs(n.Args)
			_, _ = ParseArgsFor(regs.ArchARM64, n.Args)
		}
	})
}

func FuzzParseARM64Args(f *testing.F) {
	for _, s := range []string{
		"", "8@x0", "-4@w1", "8@[sp, 16]", "-4@[x1, -8]", "8@[x2]", "-8@[x29, -16]", "-4@5", "-4@-1",
		"-8@x0 -8@x1 -8@[sp] -8@[sp, 8] -8@[sp, 16]", "8f@[x1, 32] 4f@x1", "-8@20015998343868",
		"-8@[x1, x2, lsl 3]", "-8@[x2, w0, sxtw 3]", "8@[x2, #-0x10]", "8@xzr", "8@[x0, 8]!",
		"8@[x0, #:lo12:counter]", "1@[x4, x3]", "-8@[x0, #:lo12:.LANCHOR0+8]", "8@[x0, #:got_lo12:c]", "8@d0", "8@[sp, 8", "8@x0] 8@x1", "8@#0x7fffffffffffffff",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		args, err := ParseArgsFor(regs.ArchARM64, text)
		if err != nil {
			if args != nil {
				t.Fatalf("args %v with error %v", args, err)
			}
			return
		}
		fields, err := splitARM64Args(text)
		if err != nil {
			t.Fatalf("ParseArgsFor accepted %q, which does not split: %v", text, err)
		}
		if len(args) != len(fields) {
			t.Fatalf("%d args for %d fields", len(args), len(fields))
		}
		for i, a := range args {
			if a.Text != fields[i] {
				t.Fatalf("text %q, want %q", a.Text, fields[i])
			}
			switch a.Size {
			case 1, 2, 4, 8:
			default:
				t.Fatalf("%q: size %d", a.Text, a.Size)
			}
			o := a.Operand
			switch o.Kind {
			case OperandRegister:
				if o.Register.Reg.Arch() != regs.ArchARM64 || o.Register.Reg == regs.PC || o.Register.Reg == regs.PSTATE {
					t.Fatalf("%q: register %v", a.Text, o.Register.Reg)
				}
				if o.Register.Size != 4 && o.Register.Size != 8 || o.Register.Shift != 0 {
					t.Fatalf("%q: register part %+v", a.Text, o.Register)
				}
			case OperandMemory:
				if o.Base.Arch() != regs.ArchARM64 {
					t.Fatalf("%q: base %v", a.Text, o.Base)
				}
				if (o.Index == regs.None) != (o.Scale == 0) || o.Index != regs.None && o.Disp != 0 {
					t.Fatalf("%q: index %v, scale %d, disp %d", a.Text, o.Index, o.Scale, o.Disp)
				}
				if (o.Symbol != "") != o.SymbolLow12 || o.SymbolLow12 && o.Index != regs.None {
					t.Fatalf("%q: symbol %q, low 12 bits %v, index %v", a.Text, o.Symbol, o.SymbolLow12, o.Index)
				}
			case OperandConstant:
			default:
				t.Fatalf("%q: kind %d", a.Text, o.Kind)
			}
			// The canonical form parses back to the same operand.
			canon := o.Format(regs.ArchARM64)
			back, err := ParseArgFor(regs.ArchARM64, "8@"+canon)
			if err != nil {
				t.Fatalf("%q: canonical form %q: %v", a.Text, canon, err)
			}
			if back.Operand != o {
				t.Fatalf("%q: canonical form %q gives %+v, want %+v", a.Text, canon, back.Operand, o)
			}
			// And it is one field: no space outside brackets.
			if f, err := splitARM64Args("8@" + canon); err != nil || len(f) != 1 {
				t.Fatalf("%q: canonical form %q splits into %q (%v)", a.Text, canon, f, err)
			}
		}
	})
}
