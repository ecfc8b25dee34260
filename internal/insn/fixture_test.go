package insn

import (
	"bufio"
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

// odInst is one instruction as objdump prints it.
type odInst struct {
	addr uint64
	text string // mnemonic and operands, e.g. "jbe    4a1dc5 <main.Small+0x45>"
}

// mnemonic returns the instruction's mnemonic, skipping prefixes objdump
// prints as words (notrack, bnd, rep, …).
func (i odInst) mnemonic() string {
	f := strings.Fields(i.text)
	for len(f) > 1 {
		switch f[0] {
		case "notrack", "bnd", "rep", "repz", "repnz", "lock", "cs", "ds", "data16", "addr32":
			f = f[1:]
			continue
		}
		break
	}
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// objdump disassembles bin and returns the instructions objdump lists
// under each symbol (up to the next symbol, so padding included).
func objdump(t *testing.T, bin string) map[string][]odInst {
	t.Helper()
	return objdumpWith(t, "objdump", bin)
}

// objdumpWith is objdump with another objdump binary, such as
// aarch64-linux-gnu-objdump, and extra options.
func objdumpWith(t *testing.T, tool, bin string, options ...string) map[string][]odInst {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		testutil.SkipOrFail(t, "%s not found (binutils)", tool)
	}
	out, err := exec.Command(tool, append([]string{"-d", "--no-show-raw-insn", "-w"}, append(options, bin)...)...).Output()
	require.NoError(t, err, "%s -d %s", tool, bin)
	funcs := map[string][]odInst{}
	var cur string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasSuffix(line, ">:") {
			if i := strings.Index(line, " <"); i > 0 {
				cur = line[i+2 : len(line)-2]
			}
			continue
		}
		if !strings.HasPrefix(line, " ") || cur == "" {
			continue
		}
		addr, text, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		a, err := strconv.ParseUint(strings.TrimSpace(addr), 16, 64)
		if err != nil {
			continue
		}
		funcs[cur] = append(funcs[cur], odInst{addr: a, text: strings.TrimSpace(text)})
	}
	require.NoError(t, sc.Err())
	return funcs
}

// elfFunc is a function symbol with its code.
type elfFunc struct {
	name       string
	addr, size uint64
	code       []byte // size bytes
	padded     []byte // up to the next symbol in the same section
}

// elfFuncs returns the function symbols of bin whose names pass keep.
func elfFuncs(t *testing.T, bin string, keep func(string) bool) map[string]elfFunc {
	t.Helper()
	f, err := elf.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	syms, err := f.Symbols()
	require.NoError(t, err)
	text := f.Section(".text")
	require.NotNil(t, text)
	data, err := text.Data()
	require.NoError(t, err)
	var starts []uint64
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC || elf.ST_TYPE(s.Info) == elf.STT_NOTYPE {
			if s.Value >= text.Addr && s.Value < text.Addr+text.Size {
				starts = append(starts, s.Value)
			}
		}
	}
	next := func(a uint64) uint64 {
		n := text.Addr + text.Size
		for _, s := range starts {
			if s > a && s < n {
				n = s
			}
		}
		return n
	}
	out := map[string]elfFunc{}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size == 0 || !keep(s.Name) {
			continue
		}
		if s.Value < text.Addr || s.Value+s.Size > text.Addr+text.Size {
			continue
		}
		lo := s.Value - text.Addr
		out[s.Name] = elfFunc{
			name: s.Name, addr: s.Value, size: s.Size,
			code:   data[lo : lo+s.Size],
			padded: data[lo : next(s.Value)-text.Addr],
		}
	}
	return out
}

// buildC compiles testdata/insn/funcs.c with flags into dir.
func buildC(t *testing.T, dir, name string, flags ...string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	args := append(append([]string{}, flags...), "-o", out, testutil.Testdata("insn", "funcs.c"))
	testutil.Gcc(t, dir, args...)
	return out
}

// buildGo builds the Go fixture testdata/gobin/goprog into dir.
func buildGo(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		testutil.SkipOrFail(t, "go tool not found")
	}
	out := filepath.Join(dir, name)
	cmd := exec.Command(goTool, append(append([]string{"build", "-o", out}, args...), ".")...)
	cmd.Dir = testutil.Testdata("gobin", "goprog")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=-buildvcs=false", "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", args, err, b)
	}
	return out
}

// sameBoundaries checks that the instruction starts of insts (relative to
// addr) are exactly the addresses objdump lists in [addr, addr+n).
func sameBoundaries(t *testing.T, name string, addr uint64, n int, insts []Inst, od []odInst) {
	t.Helper()
	var want, got []uint64
	for _, i := range od {
		if i.addr >= addr && i.addr < addr+uint64(n) {
			want = append(want, i.addr-addr)
		}
	}
	for _, i := range insts {
		got = append(got, i.Offset)
	}
	require.NotEmpty(t, want, "%s: objdump lists no instructions", name)
	require.Equal(t, want, got, "%s: instruction boundaries differ from objdump's", name)
}
