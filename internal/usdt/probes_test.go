package usdt

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

const fixtureDir = "../../testdata/usdt"

// requireTool returns the path of a tool, skipping the test when it is
// missing unless CI=true.
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		testutil.SkipOrFail(t, "%s not found: %v", name, err)
	}
	return p
}

// buildFixture compiles C sources of testdata/usdt into dir/out.
func buildFixture(t *testing.T, dir, out string, flags []string, srcs ...string) string {
	t.Helper()
	gcc := requireTool(t, "gcc")
	path := filepath.Join(dir, out)
	args := append([]string{"-Wall", "-Werror", "-g0", "-o", path}, flags...)
	for _, s := range srcs {
		args = append(args, filepath.Join(fixtureDir, s))
	}
	cmd := exec.Command(gcc, args...)
	output, err := cmd.CombinedOutput()
	if err != nil {
		if strings.Contains(string(output), "sys/sdt.h") {
			testutil.SkipOrFail(t, "sys/sdt.h not installed (systemtap-sdt-dev): %s", output)
		}
		t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, output)
	}
	return path
}

func runReadelf(t *testing.T, args ...string) string {
	t.Helper()
	readelf := requireTool(t, "readelf")
	out, err := exec.Command(readelf, args...).Output()
	require.NoError(t, err, "readelf %v", args)
	return string(out)
}

// refNote is one stapsdt note as readelf prints it: addresses as stored,
// without the .stapsdt.base adjustment.
type refNote struct {
	Provider, Name            string
	Location, Base, Semaphore uint64
	Args                      string
}

var (
	reProvider = regexp.MustCompile(`^\s*stapsdt\s+0x[0-9a-f]+\s+NT_STAPSDT.*Provider: (\S+)\s*$`)
	reName     = regexp.MustCompile(`^\s+Name: (\S+)\s*$`)
	reLocation = regexp.MustCompile(`^\s+Location: 0x([0-9a-f]+), Base: 0x([0-9a-f]+), Semaphore: 0x([0-9a-f]+)\s*$`)
	reArgs     = regexp.MustCompile(`^\s+Arguments:(.*)$`)
	reSection  = regexp.MustCompile(`^\s*\[\s*(\d+)\]\s+(\S+)\s+(\S+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s`)
	reSymbol   = regexp.MustCompile(`^\s*\d+:\s+([0-9a-f]+)\s+\d+\s+\S+\s+\S+\s+\S+\s+\S+\s+(\S+)\s*$`)
)

func hex(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 16, 64)
	require.NoError(t, err)
	return v
}

// readelfNotes parses `readelf -n --wide` output for the .note.stapsdt
// section.
func readelfNotes(t *testing.T, path string) []refNote {
	t.Helper()
	var (
		notes []refNote
		in    bool
	)
	sc := bufio.NewScanner(strings.NewReader(runReadelf(t, "-n", "--wide", path)))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "Displaying notes found in: ") {
			in = strings.TrimSpace(strings.TrimPrefix(line, "Displaying notes found in: ")) == ".note.stapsdt"
			continue
		}
		if !in {
			continue
		}
		if m := reProvider.FindStringSubmatch(line); m != nil {
			notes = append(notes, refNote{Provider: m[1]})
			continue
		}
		if len(notes) == 0 {
			continue
		}
		n := &notes[len(notes)-1]
		if m := reName.FindStringSubmatch(line); m != nil {
			n.Name = m[1]
		} else if m := reLocation.FindStringSubmatch(line); m != nil {
			n.Location, n.Base, n.Semaphore = hex(t, m[1]), hex(t, m[2]), hex(t, m[3])
		} else if m := reArgs.FindStringSubmatch(line); m != nil {
			n.Args = strings.TrimSpace(m[1])
		}
	}
	return notes
}

type refSection struct {
	Name, Type      string
	Addr, Off, Size uint64
}

// readelfSections parses `readelf -S --wide` output.
func readelfSections(t *testing.T, path string) []refSection {
	t.Helper()
	var secs []refSection
	sc := bufio.NewScanner(strings.NewReader(runReadelf(t, "-S", "--wide", path)))
	for sc.Scan() {
		m := reSection.FindStringSubmatch(sc.Text())
		if m == nil || m[1] == "0" {
			continue
		}
		secs = append(secs, refSection{Name: m[2], Type: m[3], Addr: hex(t, m[4]), Off: hex(t, m[5]), Size: hex(t, m[6])})
	}
	require.NotEmpty(t, secs)
	return secs
}

// sectionOffset converts a virtual address into a file offset through the
// section headers, independently of the PT_LOAD segments.
func sectionOffset(t *testing.T, secs []refSection, vaddr uint64) (uint64, refSection) {
	t.Helper()
	for _, s := range secs {
		if s.Addr != 0 && s.Type != "NOBITS" && vaddr >= s.Addr && vaddr < s.Addr+s.Size {
			return vaddr - s.Addr + s.Off, s
		}
	}
	t.Fatalf("virtual address %#x is in no section", vaddr)
	return 0, refSection{}
}

// readelfSymbols parses `readelf -s --wide` output into name → value.
func readelfSymbols(t *testing.T, path string) map[string]uint64 {
	t.Helper()
	syms := map[string]uint64{}
	sc := bufio.NewScanner(strings.NewReader(runReadelf(t, "-s", "--wide", path)))
	for sc.Scan() {
		if m := reSymbol.FindStringSubmatch(sc.Text()); m != nil {
			syms[m[2]] = hex(t, m[1])
		}
	}
	return syms
}

func openELF(t *testing.T, path string) *elf.File {
	t.Helper()
	f, err := elf.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

// compareWithReadelf checks Notes and Probes of path against readelf, note
// by note, and checks every file offset against the section headers and the
// bytes of the file. It returns the probes.
func compareWithReadelf(t *testing.T, path string) []Probe {
	t.Helper()
	f := openELF(t, path)
	ref := readelfNotes(t, path)
	require.NotEmpty(t, ref, "readelf finds no stapsdt notes")
	secs := readelfSections(t, path)
	var base *refSection
	for i := range secs {
		if secs[i].Name == ".stapsdt.base" {
			base = &secs[i]
		}
	}
	adjust := func(n refNote, addr uint64) uint64 {
		if base == nil || addr == 0 {
			return addr
		}
		return addr + base.Addr - n.Base
	}

	notes, err := Notes(f)
	require.NoError(t, err)
	require.Len(t, notes, len(ref))
	for i, r := range ref {
		assert.Equal(t, Note{
			Provider: r.Provider, Name: r.Name,
			Address: adjust(r, r.Location), SemaphoreAddress: adjust(r, r.Semaphore),
			Args: r.Args, Base: r.Base,
		}, Note{
			Provider: notes[i].Provider, Name: notes[i].Name,
			Address: notes[i].Address, SemaphoreAddress: notes[i].SemaphoreAddress,
			Args: strings.TrimSpace(notes[i].Args), Base: notes[i].Base,
		}, "note %d", i)
	}

	probes, err := Probes(f)
	require.NoError(t, err)
	want := map[string][]refNote{}
	for _, r := range ref {
		k := r.Provider + ":" + r.Name
		want[k] = append(want[k], r)
	}
	require.Len(t, probes, len(want))
	assert.True(t, slices.IsSortedFunc(probes, func(a, b Probe) int {
		if a.Provider != b.Provider {
			return strings.Compare(a.Provider, b.Provider)
		}
		return strings.Compare(a.Name, b.Name)
	}), "probes are sorted by provider then name")

	data, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, p := range probes {
		refs := want[p.String()]
		require.Len(t, p.Locations, len(refs), "sites of %s", p)
		for i, loc := range p.Locations {
			r := refs[i]
			assert.Equal(t, adjust(r, r.Location), loc.Address, "%s site %d", p, i)
			assert.Equal(t, adjust(r, r.Semaphore), loc.SemaphoreAddress, "%s site %d", p, i)
			assert.Equal(t, r.Args, strings.TrimSpace(loc.ArgsText), "%s site %d", p, i)

			// The file offset agrees with the section headers, and the
			// byte there is the nop <sys/sdt.h> placed.
			off, sec := sectionOffset(t, secs, loc.Address)
			assert.Equal(t, off, loc.FileOffset, "%s site %d: file offset", p, i)
			assert.Contains(t, []string{".text", ".text.startup", ".text.hot", ".text.unlikely"}, sec.Name)
			require.Less(t, loc.FileOffset, uint64(len(data)))
			if f.Machine == elf.EM_AARCH64 {
				// nop is d503201f, little-endian.
				require.LessOrEqual(t, loc.FileOffset+4, uint64(len(data)))
				assert.Equal(t, []byte{0x1f, 0x20, 0x03, 0xd5}, data[loc.FileOffset:loc.FileOffset+4], "%s site %d: bytes at file offset %#x", p, i, loc.FileOffset)
			} else {
				assert.Equal(t, byte(0x90), data[loc.FileOffset], "%s site %d: byte at file offset %#x", p, i, loc.FileOffset)
			}

			if loc.SemaphoreAddress == 0 {
				assert.Zero(t, loc.SemaphoreFileOffset)
			} else {
				off, sec := sectionOffset(t, secs, loc.SemaphoreAddress)
				assert.Equal(t, off, loc.SemaphoreFileOffset, "%s site %d: semaphore file offset", p, i)
				assert.Equal(t, ".probes", sec.Name, "%s site %d: semaphore section", p, i)
				assert.Equal(t, []byte{0, 0}, data[off:off+2], "%s: semaphore starts at 0", p)
			}

			if loc.ArgsErr == nil {
				fields := strings.Fields(loc.ArgsText)
				if f.Machine == elf.EM_AARCH64 {
					var err error
					fields, err = splitARM64Args(loc.ArgsText)
					require.NoError(t, err)
				}
				require.Len(t, loc.Args, len(fields), "%s site %d", p, i)
				for j, a := range loc.Args {
					assert.Equal(t, fields[j], a.Text)
				}
			} else {
				assert.Nil(t, loc.Args)
			}
		}
	}
	return probes
}

func probeByName(t *testing.T, probes []Probe, name string) Probe {
	t.Helper()
	for _, p := range probes {
		if p.String() == name {
			return p
		}
	}
	t.Fatalf("no probe %s", name)
	return Probe{}
}

func TestFixtureExecutables(t *testing.T) {
	variants := []struct {
		name     string
		flags    []string
		optimize bool
		elfType  elf.Type
	}{
		{"pie-O0", []string{"-O0", "-fPIE", "-pie"}, false, elf.ET_DYN},
		{"pie-O2", []string{"-O2", "-fPIE", "-pie"}, true, elf.ET_DYN},
		{"nopie-O0", []string{"-O0", "-fno-pie", "-no-pie"}, false, elf.ET_EXEC},
		{"nopie-O2", []string{"-O2", "-fno-pie", "-no-pie"}, true, elf.ET_EXEC},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			path := buildFixture(t, t.TempDir(), "fixture", v.flags, "sem.c", "plain.c")
			f := openELF(t, path)
			require.Equal(t, v.elfType, f.Type)
			probes := compareWithReadelf(t, path)

			var names []string
			for _, p := range probes {
				names = append(names, p.String())
				for _, loc := range p.Locations {
					require.NoError(t, loc.ArgsErr, "%s: %q", p, loc.ArgsText)
				}
			}
			assert.Equal(t, []string{
				"fixture:bytes", "fixture:constant", "fixture:constants", "fixture:dbl",
				"fixture:globals", "fixture:mixed", "fixture:multi", "fixture:noargs",
				"fixture:request__done", "fixture:request__start", "fixture:twice",
			}, names)

			// Semaphores: only the probes of sem.c, at their symbols.
			syms := readelfSymbols(t, path)
			for _, p := range probes {
				semSym, hasSem := syms[p.Provider+"_"+p.Name+"_semaphore"]
				for _, loc := range p.Locations {
					if hasSem {
						assert.Equal(t, semSym, loc.SemaphoreAddress, "%s semaphore", p)
						assert.NotZero(t, loc.SemaphoreFileOffset)
						if v.elfType == elf.ET_EXEC {
							assert.NotEqual(t, loc.SemaphoreAddress, loc.SemaphoreFileOffset, "a non-PIE file offset is not its virtual address")
						}
					} else {
						assert.Zero(t, loc.SemaphoreAddress, "%s semaphore", p)
					}
				}
			}
			assert.Contains(t, syms, "fixture_request__start_semaphore")
			assert.Contains(t, syms, "fixture_request__done_semaphore")

			// Several sites, each with its own args.
			for _, name := range []string{"fixture:multi", "fixture:twice"} {
				p := probeByName(t, probes, name)
				require.Len(t, p.Locations, 2, name)
				assert.NotEqual(t, p.Locations[0].Address, p.Locations[1].Address)
				assert.NotEqual(t, p.Locations[0].ArgsText, p.Locations[1].ArgsText)
			}

			noargs := probeByName(t, probes, "fixture:noargs").Locations[0]
			assert.Empty(t, noargs.ArgsText)
			assert.Empty(t, noargs.Args)

			constant := probeByName(t, probes, "fixture:constant").Locations[0]
			assert.Equal(t, []Arg{{Size: 4, Signed: true, Operand: imm(5), Text: "-4@$5"}}, constant.Args)
			constants := probeByName(t, probes, "fixture:constants").Locations[0]
			require.Len(t, constants.Args, 2)
			assert.Equal(t, imm(-1), constants.Args[0].Operand)
			assert.Equal(t, imm(16), constants.Args[1].Operand)

			dbl := probeByName(t, probes, "fixture:dbl").Locations[0]
			require.Len(t, dbl.Args, 1)
			assert.True(t, dbl.Args[0].Float)
			assert.Equal(t, uint8(8), dbl.Args[0].Size)

			mixed := probeByName(t, probes, "fixture:mixed").Locations[0]
			require.Len(t, mixed.Args, 4)
			assert.Equal(t, []uint8{4, 8, 1, 2}, []uint8{mixed.Args[0].Size, mixed.Args[1].Size, mixed.Args[2].Size, mixed.Args[3].Size})
			for _, a := range mixed.Args {
				assert.True(t, a.Signed, a.Text)
				if v.optimize {
					assert.Equal(t, OperandRegister, a.Operand.Kind, "-O2 keeps arguments in registers: %s", a.Text)
				} else {
					assert.Equal(t, OperandMemory, a.Operand.Kind, "-O0 keeps arguments on the stack: %s", a.Text)
					assert.Equal(t, regs.RBP, a.Operand.Base, a.Text)
					assert.Negative(t, a.Operand.Disp, a.Text)
				}
			}

			if v.optimize {
				globals := probeByName(t, probes, "fixture:globals").Locations[0]
				require.Len(t, globals.Args, 2)
				assert.Equal(t, mem(regs.RIP, regs.None, 0, 0, "counter"), globals.Args[0].Operand)
				assert.Equal(t, mem(regs.RIP, regs.None, 0, 8, "state"), globals.Args[1].Operand)
				assert.NotZero(t, syms["counter"])

				done := probeByName(t, probes, "fixture:request__done").Locations[0]
				require.Len(t, done.Args, 4)
				idx := done.Args[2].Operand
				assert.Equal(t, OperandMemory, idx.Kind, done.ArgsText)
				assert.Equal(t, regs.RDI, idx.Index, done.ArgsText)
				assert.Equal(t, uint8(4), idx.Scale, done.ArgsText)
				if v.elfType == elf.ET_EXEC {
					assert.Equal(t, "table", idx.Symbol, "a non-PIE array is indexed from its symbol")
					assert.Equal(t, regs.None, idx.Base)
				}
			}
		})
	}
}

func TestFixtureSharedLibrary(t *testing.T) {
	path := buildFixture(t, t.TempDir(), "libfixture.so", []string{"-O2", "-shared", "-fPIC"}, "lib.c")
	f := openELF(t, path)
	require.Equal(t, elf.ET_DYN, f.Type)
	probes := compareWithReadelf(t, path)

	var names []string
	for _, p := range probes {
		names = append(names, p.String())
		for _, loc := range p.Locations {
			require.NoError(t, loc.ArgsErr)
			assert.NotZero(t, loc.SemaphoreAddress)
			assert.NotZero(t, loc.SemaphoreFileOffset)
		}
	}
	assert.Equal(t, []string{"fixturelib:call", "fixturelib:peek", "fixturelib:ret"}, names)
	ret := probeByName(t, probes, "fixturelib:ret")
	require.Len(t, ret.Locations, 2)
	assert.Equal(t, ret.Locations[0].SemaphoreAddress, ret.Locations[1].SemaphoreAddress, "the sites of a probe share its semaphore")

	syms := readelfSymbols(t, path)
	assert.Equal(t, syms["fixturelib_ret_semaphore"], ret.Locations[0].SemaphoreAddress)

	peek := probeByName(t, probes, "fixturelib:peek").Locations[0]
	require.Len(t, peek.Args, 1)
	assert.Equal(t, mem(regs.RIP, regs.None, 0, 0, "calls"), peek.Args[0].Operand)
	assert.True(t, peek.Args[0].Operand.RIPRelativeSymbol())
}

// patchCopy copies path into dir and lets patch edit the bytes.
func patchCopy(t *testing.T, path string, patch func(f *elf.File, data []byte)) string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	f := openELF(t, path)
	patch(f, data)
	out := filepath.Join(t.TempDir(), "patched")
	require.NoError(t, os.WriteFile(out, data, 0o644))
	return out
}

func sectionHeaderOffset(t *testing.T, f *elf.File, data []byte, name string) uint64 {
	t.Helper()
	require.Equal(t, elf.ELFCLASS64, f.Class)
	shoff := binary.LittleEndian.Uint64(data[0x28:])
	shentsize := uint64(binary.LittleEndian.Uint16(data[0x3a:]))
	for i, s := range f.Sections {
		if s.Name == name {
			return shoff + uint64(i)*shentsize
		}
	}
	t.Fatalf("no section %s", name)
	return 0
}

func TestStapsdtBaseAdjustment(t *testing.T) {
	path := buildFixture(t, t.TempDir(), "fixture", []string{"-O2", "-fPIE", "-pie"}, "sem.c", "plain.c")
	orig, err := Notes(openELF(t, path))
	require.NoError(t, err)
	require.NotEmpty(t, orig)

	for _, delta := range []int64{0x40, -0x40} {
		// Move .stapsdt.base as prelink would, without touching the notes.
		moved := patchCopy(t, path, func(f *elf.File, data []byte) {
			sh := sectionHeaderOffset(t, f, data, ".stapsdt.base")
			addr := binary.LittleEndian.Uint64(data[sh+16:])
			binary.LittleEndian.PutUint64(data[sh+16:], addr+uint64(delta))
		})
		notes, err := Notes(openELF(t, moved))
		require.NoError(t, err)
		require.Len(t, notes, len(orig))
		ref := readelfNotes(t, moved)
		require.Len(t, ref, len(orig))
		for i, n := range notes {
			assert.Equal(t, orig[i].Address+uint64(delta), n.Address)
			assert.Equal(t, ref[i].Location+uint64(delta), n.Address, "readelf prints the stored address")
			if orig[i].SemaphoreAddress == 0 {
				assert.Zero(t, n.SemaphoreAddress, "a zero semaphore stays zero")
			} else {
				assert.Equal(t, orig[i].SemaphoreAddress+uint64(delta), n.SemaphoreAddress)
			}
			assert.Equal(t, orig[i].Base, n.Base)
		}
	}
}

func TestProbesUnsupportedArchitecture(t *testing.T) {
	path := buildFixture(t, t.TempDir(), "fixture", []string{"-O2"}, "sem.c", "plain.c")
	riscv := patchCopy(t, path, func(_ *elf.File, data []byte) {
		binary.LittleEndian.PutUint16(data[0x12:], uint16(elf.EM_RISCV))
	})
	probes, err := Probes(openELF(t, riscv))
	require.NoError(t, err)
	require.NotEmpty(t, probes)
	for _, p := range probes {
		for _, loc := range p.Locations {
			assert.Nil(t, loc.Args)
			require.Error(t, loc.ArgsErr)
			assert.True(t, errors.Is(loc.ArgsErr, ErrUnsupportedArch), loc.ArgsErr.Error())
			assert.Contains(t, loc.ArgsErr.Error(), "EM_RISCV")
			assert.NotZero(t, loc.FileOffset)
		}
	}

	// The specs are parsed in the syntax of the file's machine, not the
	// host's: x86-64 specs in a file marked arm64 do not parse.
	arm := patchCopy(t, path, func(_ *elf.File, data []byte) {
		binary.LittleEndian.PutUint16(data[0x12:], uint16(elf.EM_AARCH64))
	})
	probes, err = Probes(openELF(t, arm))
	require.NoError(t, err)
	failed := 0
	for _, p := range probes {
		for _, loc := range p.Locations {
			if loc.ArgsText == "" {
				assert.NoError(t, loc.ArgsErr)
				continue
			}
			require.Error(t, loc.ArgsErr, "%s: %q", p, loc.ArgsText)
			assert.False(t, errors.Is(loc.ArgsErr, ErrUnsupportedArch), loc.ArgsErr.Error())
			failed++
		}
	}
	assert.NotZero(t, failed)
}

func TestProbesAddressOutsideSegments(t *testing.T) {
	path := buildFixture(t, t.TempDir(), "fixture", []string{"-O2"}, "sem.c", "plain.c")
	for _, tt := range []struct {
		word int
		want string
	}{
		{0, "locate site of fixture:request__start: virtual address 0x7fff00000000 is in no PT_LOAD segment"},
		{2, "locate semaphore of fixture:request__start: virtual address 0x7fff00000000 is in no PT_LOAD segment"},
	} {
		bad := patchCopy(t, path, func(f *elf.File, data []byte) {
			sec := f.Section(NoteSection)
			require.NotNil(t, sec)
			// The first note is request__start: header, "stapsdt\0", desc.
			desc := sec.Offset + 12 + 8
			require.Equal(t, "request__start", string(data[desc+24+8:desc+24+8+14]))
			// Keep .stapsdt.base's adjustment out of the expected address.
			base := binary.LittleEndian.Uint64(data[desc+8:])
			binary.LittleEndian.PutUint64(data[desc+uint64(8*tt.word):], 0x7fff00000000-(f.Section(BaseSection).Addr-base))
		})
		_, err := Probes(openELF(t, bad))
		require.EqualError(t, err, tt.want)
	}

	trunc := patchCopy(t, path, func(f *elf.File, data []byte) {
		sec := f.Section(NoteSection)
		binary.LittleEndian.PutUint32(data[sec.Offset+4:], 0xffff)
	})
	_, err := Probes(openELF(t, trunc))
	require.ErrorContains(t, err, "read .note.stapsdt: walk notes: note at section offset 0x0: descriptor of 65535 bytes runs past the section end")
}

func TestNoNotes(t *testing.T) {
	exe, err := os.Executable()
	require.NoError(t, err)
	f := openELF(t, exe)
	notes, err := Notes(f)
	require.NoError(t, err)
	assert.Nil(t, notes)
	probes, err := Probes(f)
	require.NoError(t, err)
	assert.Nil(t, probes)
}

func TestProbeString(t *testing.T) {
	assert.Equal(t, "python:function__entry", Probe{Provider: "python", Name: "function__entry"}.String())
}

// operandShape describes an operand's form, e.g. "disp(base,index,scale)".
func operandShape(a Arg) string {
	o := a.Operand
	var b bytes.Buffer
	if a.Float {
		b.WriteString("float ")
	}
	switch o.Kind {
	case OperandRegister:
		b.WriteString("register")
		if o.Register.Size != 8 {
			b.WriteString(" part")
		}
	case OperandConstant:
		b.WriteString("$constant")
	case OperandMemory:
		if o.Symbol != "" {
			b.WriteString("sym")
			if o.Disp != 0 {
				b.WriteString("+disp")
			}
		} else if o.Disp != 0 {
			b.WriteString("disp")
		}
		b.WriteString("(")
		if o.Base != regs.None {
			b.WriteString("%" + o.Base.String())
		}
		if o.Index != regs.None {
			b.WriteString(",index,scale")
		}
		b.WriteString(")")
	}
	return b.String()
}

func TestRealBinaries(t *testing.T) {
	for _, tt := range []struct {
		path      string
		elfType   elf.Type
		probe     string
		semaphore bool
	}{
		{"/usr/bin/python3.11", elf.ET_EXEC, "python:function__entry", true},
		{"/usr/lib/postgresql/15/bin/postgres", elf.ET_DYN, "postgresql:transaction__start", true},
	} {
		t.Run(filepath.Base(tt.path), func(t *testing.T) {
			if _, err := os.Stat(tt.path); err != nil {
				testutil.SkipOrFail(t, "%s not present: %v", tt.path, err)
			}
			f := openELF(t, tt.path)
			assert.Equal(t, tt.elfType, f.Type)
			probes := compareWithReadelf(t, tt.path)
			shapes := map[string]int{}
			sites := 0
			for _, p := range probes {
				for _, loc := range p.Locations {
					sites++
					require.NoError(t, loc.ArgsErr, "%s: %q", p, loc.ArgsText)
					for _, a := range loc.Args {
						shapes[operandShape(a)]++
					}
				}
			}
			p := probeByName(t, probes, tt.probe)
			assert.Equal(t, tt.semaphore, p.Locations[0].SemaphoreAddress != 0)
			t.Logf("%s: %d probes, %d sites, operand forms %v", tt.path, len(probes), sites, shapes)
		})
	}
}
