package planner

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/insn"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

func symbolOf(t *testing.T, path, name string) elf.Symbol { return lookup(t, path, name).Symbol }

// Offsets are checked against the function's decoded instructions.
func TestUprobeOffsetsAreInstructionBoundaries(t *testing.T) {
	b := testutil.BuildDemo(t, "-O0")
	// At -O0, work starts: push %rbp (1 byte); mov %rsp,%rbp (3 bytes); …
	_, err := Resolve([]config.Target{{Path: b.Program, Counters: config.CountersOf("uprobe:work+0x2")}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "uprobe:work+0x2: work: offset 0x2 is inside the instruction at 0x1 (3 bytes: mov %rsp,%rbp); nearest instruction boundaries: 0x1, 0x4")

	pl, err := Resolve([]config.Target{{Path: b.Program, Counters: config.CountersOf("uprobe:work+0x4")}})
	require.NoError(t, err)
	w := symbolOf(t, b.Program, "work")
	assert.Equal(t, w.Value+4, pl.Attachments[0].Address)

	_, err = Resolve([]config.Target{{Path: b.Program, Counters: config.CountersOf(fmt.Sprintf("uprobe:work+%#x", w.Size))}})
	assert.ErrorContains(t, err, fmt.Sprintf("offset %#x is beyond the end of work (%d bytes)", w.Size, w.Size))
}

func TestRawAddresses(t *testing.T) {
	b := testutil.BuildDemo(t, "-O0")
	w := symbolOf(t, b.Program, "work")
	pl, err := Resolve([]config.Target{{Path: b.Program, Counters: config.CountersOf(fmt.Sprintf("uprobe:%#x", w.Value+1))}})
	require.NoError(t, err)
	assert.Equal(t, w.Value+1, pl.Attachments[0].Address)
	assert.Equal(t, insn.SingleStepped, pl.Attachments[0].Class, "mov %rsp,%rbp is single-stepped")

	_, err = Resolve([]config.Target{{Path: b.Program, Counters: config.CountersOf(fmt.Sprintf("uprobe:%#x", w.Value+2))}})
	assert.ErrorContains(t, err, "inside the instruction at 0x1")
	_, err = Resolve([]config.Target{{Path: b.Program, Counters: config.CountersOf("uprobe:0x10")}})
	assert.ErrorContains(t, err, "virtual address 0x10 is in no function of the file; a uprobe must be inside a known function")
}

// With CET (gcc -fcf-protection), functions start with endbr64, which the
// kernel single-steps: the probe goes 4 bytes in, on an emulated push.
func TestCETEntryMovesPastEndbr64(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "workload")
	testutil.Gcc(t, dir, "-O2", "-o", prog, testutil.Testdata("bench", "workload.c"))
	pl, err := Resolve([]config.Target{{
		Path:     prog,
		Spans:    []config.Span{{Name: "cet", Function: "probed_cet"}},
		Counters: config.CountersOf("uprobe:probed"),
	}})
	require.NoError(t, err)
	cet, push := symbolOf(t, prog, "probed_cet"), symbolOf(t, prog, "probed")
	for _, a := range pl.Attachments {
		switch pl.Probes[a.Probe].Ref {
		case "uprobe:probed_cet", "uretprobe:probed_cet":
			assert.Equal(t, cet.Value+4, a.Address, "%s after endbr64", pl.Probes[a.Probe].Ref)
			assert.Equal(t, insn.Emulated, a.Class)
		case "uprobe:probed":
			assert.Equal(t, push.Value, a.Address)
			assert.Equal(t, insn.Emulated, a.Class)
		}
	}
	// A probe explicitly at +0 is still allowed, and single-stepped.
	pl, err = Resolve([]config.Target{{Path: prog, Counters: config.CountersOf(fmt.Sprintf("uprobe:%#x", cet.Value))}})
	require.NoError(t, err)
	assert.Equal(t, insn.SingleStepped, pl.Attachments[0].Class)
}

func TestGoTargets(t *testing.T) {
	for _, stripped := range []bool{false, true} {
		t.Run(fmt.Sprintf("stripped=%v", stripped), func(t *testing.T) {
			prog := testutil.BuildGo(t, "goprog", stripped)
			pl, err := Resolve([]config.Target{{
				Path: prog,
				Spans: []config.Span{{
					Name: "probed", Function: "main.Probed",
					Attributes:     map[string]string{"n": "arg0", "s": "arg1:gostring"},
					ExitAttributes: map[string]string{"ret": "retval"},
				}},
			}})
			require.NoError(t, err)
			require.True(t, pl.Files[0].Go)
			assert.Regexp(t, `^go1\.\d+`, pl.Files[0].GoVersion)
			var entries, rets []plan.Attachment
			for _, a := range pl.Attachments {
				assert.False(t, a.Return, "no kernel return probes on Go code")
				if pl.Probes[a.Probe].Ref == "uprobe:main.Probed" {
					entries = append(entries, a)
				} else {
					rets = append(rets, a)
				}
			}
			require.Len(t, entries, 1)
			assert.Equal(t, insn.Emulated, entries[0].Class, "after the stack check, on push %%rbp")
			require.NotEmpty(t, rets, "one probe per RET")
			for _, r := range rets {
				assert.Equal(t, insn.SingleStepped, r.Class)
			}
			site := pl.Sites[entries[0].Cookie]
			require.Len(t, site.Entry, 2)
			n, s := site.Entry[0], site.Entry[1]
			assert.Equal(t, regs.RAX, n.Register, "Go ABI: first integer argument")
			assert.Equal(t, plan.StoreGoString, s.Store)
			assert.Equal(t, regs.RBX, s.Register, "string pointer")
			assert.Equal(t, regs.RCX, s.LenRegister, "string length")
		})
	}
}

func TestUSDTSiteClasses(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "nop5")
	testutil.Gcc(t, dir, "-O2", "-no-pie", "-o", prog, testutil.Testdata("nop5", "nop5.c"))
	site := symbolOf(t, prog, "nop5_site").Value
	targets := []config.Target{{Path: prog, Counters: config.CountersOf("usdt:nop5:hit")}}

	pl, err := Resolve(targets, Options{OptimizedUprobes: true})
	require.NoError(t, err)
	assert.Equal(t, site+1, pl.Attachments[0].Address, "on the nop5")
	assert.Equal(t, insn.Optimizable, pl.Attachments[0].Class)

	pl, err = Resolve(targets, Options{OptimizedUprobes: false})
	require.NoError(t, err)
	assert.Equal(t, site, pl.Attachments[0].Address, "on the 1-byte nop, as the note says")
	assert.Equal(t, insn.Emulated, pl.Attachments[0].Class)
}

// buildRedZone builds testdata/redzone: leaf keeps a value below %rsp
// across a "nop; nop5" USDT site (its nop5 at leaf+0x6), safe keeps none
// (its nop5 at safe+0x5).
func buildRedZone(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	prog := filepath.Join(dir, "redzone")
	testutil.Gcc(t, dir, "-O2", "-o", prog, testutil.Testdata("redzone", "redzone.c"))
	return prog
}

// On a kernel that rewrites uprobes on 5-byte nops into calls, which write
// below %rsp, a USDT site moves onto its nop5 only where its function keeps
// nothing there, and a uprobe on such a nop5 is refused with a sentence
// naming the places that are safe. Without the optimized path, the nop5 is
// an emulated nop like any other.
func TestNop5OnlyWhereTheRedZoneIsFree(t *testing.T) {
	prog := buildRedZone(t)
	leaf, safe := symbolOf(t, prog, "leaf").Value, symbolOf(t, prog, "safe").Value
	resolve := func(optimized bool, probes ...string) (*Planner, error) {
		return Resolve([]config.Target{{Path: prog, Counters: config.CountersOf(probes...)}}, Options{OptimizedUprobes: optimized})
	}

	pl, err := resolve(true, "usdt:redzone:leaf", "usdt:redzone:slots", "usdt:redzone:safe")
	require.NoError(t, err)
	at := map[string]plan.Attachment{}
	for _, a := range pl.Attachments {
		at[pl.Probes[a.Probe].Ref] = a
	}
	assert.Equal(t, leaf+5, at["usdt:redzone:leaf"].Address, "leaf's site stays on its 1-byte nop")
	assert.Equal(t, insn.Emulated, at["usdt:redzone:leaf"].Class)
	assert.Equal(t, insn.Emulated, at["usdt:redzone:slots"].Class)
	assert.Equal(t, safe+5, at["usdt:redzone:safe"].Address, "safe's site moves onto its nop5")
	assert.Equal(t, insn.Optimizable, at["usdt:redzone:safe"].Class)

	_, err = resolve(true, "uprobe:leaf+0x6")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "uprobe:leaf+0x6: leaf+0x6 is a 5-byte nop, which this kernel rewrites after the first hit into a call that writes below %rsp, "+
		"where leaf may keep live data (mov %rdi,-0x8(%rsp) at +0x0 accesses memory 0x8 bytes below %rsp), so a probe there would change what it computes; "+
		"probe uprobe:leaf (its entry) or uprobe:leaf+0xb (the next instruction, mov -0x8(%rsp),%rax) instead")

	pl, err = resolve(true, "uprobe:safe+0x5", "uprobe:leaf+0x5", "uprobe:leaf")
	require.NoError(t, err)
	classes := map[uint64]insn.SiteClass{}
	for _, a := range pl.Attachments {
		classes[a.Address] = a.Class
	}
	assert.Equal(t, map[uint64]insn.SiteClass{safe + 5: insn.Optimizable, leaf + 5: insn.Emulated, leaf: insn.SingleStepped}, classes)

	pl, err = resolve(false, "uprobe:leaf+0x6", "usdt:redzone:safe")
	require.NoError(t, err, "without the optimized path, the kernel only emulates the nop5")
	for _, a := range pl.Attachments {
		assert.Equal(t, insn.Emulated, a.Class, "%#x", a.Address)
	}
}

// A USDT site that is itself a 5-byte nop in a function that keeps data
// below %rsp has no safe place: it is refused.
func TestNop5SiteInTheRedZoneIsRefused(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "lone.c")
	require.NoError(t, os.WriteFile(src, []byte(`
__asm__(".text\n.globl lone\n.type lone,@function\nlone:\n"
	"mov %rdi,-8(%rsp)\n.Lsite: .byte 0x0f,0x1f,0x44,0x00,0x00\nmov -8(%rsp),%rax\nret\n.size lone,.-lone\n"
	".pushsection .note.stapsdt,\"?\",\"note\"\n.balign 4\n.4byte 992f-991f,994f-993f,3\n991: .asciz \"stapsdt\"\n"
	"992: .balign 4\n993: .8byte .Lsite\n.8byte 0\n.8byte 0\n.asciz \"lone\"\n.asciz \"hit\"\n.asciz \"\"\n994: .balign 4\n.popsection\n");
long lone(long);
int main(int argc, char **argv) { return (int)lone(argc); }
`), 0o644))
	prog := filepath.Join(dir, "lone")
	testutil.Gcc(t, dir, "-O2", "-o", prog, src)
	targets := []config.Target{{Path: prog, Counters: config.CountersOf("usdt:lone:hit")}}
	_, err := Resolve(targets, Options{OptimizedUprobes: true})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the site lone+0x5 is a 5-byte nop, which this kernel rewrites after the first hit into a call that writes below %rsp, where lone may keep live data")
	pl, err := Resolve(targets, Options{OptimizedUprobes: false})
	require.NoError(t, err)
	assert.Equal(t, insn.Emulated, pl.Attachments[0].Class)
}

// With kernel return probes refused (a kernel on which they kill processes
// with seccomp filters), every location that needs one is refused with the
// sentence, and returns on RET instructions are not.
func TestKernelReturnsRefused(t *testing.T) {
	b := testutil.BuildDemo(t, "-O0")
	const why = "kernel return probes are refused on this kernel"
	opts := Options{KernelReturnsRefused: why}
	for _, tc := range []struct {
		target config.Target
		err    string
	}{
		{config.Target{Path: b.Program, Spans: []config.Span{{Name: "work", Function: "work"}}}, "uretprobe:work: " + why},
		{config.Target{Path: b.Program, Counters: config.CountersOf("uretprobe:work")}, "uretprobe:work: " + why},
		{config.Target{Path: b.Program, Spans: []config.Span{{Name: "work", Function: "work", Returns: config.ReturnsRet}}}, ""},
		{config.Target{Path: b.Program, Counters: config.CountersOf("uprobe:work", "ret:work")}, ""},
	} {
		_, err := Resolve([]config.Target{tc.target}, opts)
		if tc.err == "" {
			assert.NoError(t, err)
			continue
		}
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.err)
	}
	goProg := testutil.BuildGo(t, "goprog", false)
	_, err := Resolve([]config.Target{{Path: goProg, Spans: []config.Span{{Name: "probed", Function: "main.Probed"}}}}, opts)
	assert.NoError(t, err, "Go returns are probed on RET instructions")
}

// A function's tail call to another function leaves it (its nop5 is
// probed optimized), and its cold part (gcc's name.cold) is analysed with
// it: coldy itself never touches memory below %rsp, but its cold part
// writes there, jumps back over the nop5 and, entered again, reads it.
func TestNop5TailCallsAndColdParts(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "cold.c")
	note := func(name, site string) string {
		return `".pushsection .note.stapsdt,\"?\",\"note\"\n.balign 4\n.4byte 992f-991f,994f-993f,3\n991: .asciz \"stapsdt\"\n"
	"992: .balign 4\n993: .8byte ` + site + `\n.8byte 0\n.8byte 0\n.asciz \"t\"\n.asciz \"` + name + `\"\n.asciz \"\"\n994: .balign 4\n.popsection\n"`
	}
	require.NoError(t, os.WriteFile(src, []byte(`
__asm__(".text\n"
	".globl other\n.type other,@function\nother: ret\n.size other,.-other\n"
	".globl tailer\n.type tailer,@function\ntailer: lea 1(%rdi),%rax\n.Ltail: nop\n.byte 0x0f,0x1f,0x44,0x00,0x00\njmp other\n.size tailer,.-tailer\n"
	`+note("tail", ".Ltail")+`
	".globl coldy\n.type coldy,@function\ncoldy: test %edi,%edi\njne coldy.cold\n.Lcold: nop\n.Lback: .byte 0x0f,0x1f,0x44,0x00,0x00\ntest %esi,%esi\njne coldy.cold\nret\n.size coldy,.-coldy\n"
	`+note("cold", ".Lcold")+`
	".type coldy.cold,@function\ncoldy.cold: test %esi,%esi\njne 1f\nmov %edi,-4(%rsp)\njmp .Lback\n1: mov -4(%rsp),%eax\nret\n.size coldy.cold,.-coldy.cold\n");
long tailer(long); int coldy(int);
int main(int argc, char **argv) { return (int)tailer(argc) + coldy(argc); }
`), 0o644))
	prog := filepath.Join(dir, "cold")
	testutil.Gcc(t, dir, "-O2", "-o", prog, src)
	pl, err := Resolve([]config.Target{{Path: prog, Counters: config.CountersOf("usdt:t:tail", "usdt:t:cold")}}, Options{OptimizedUprobes: true})
	require.NoError(t, err)
	classes := map[string]insn.SiteClass{}
	for _, a := range pl.Attachments {
		classes[pl.Probes[a.Probe].Ref] = a.Class
	}
	assert.Equal(t, map[string]insn.SiteClass{"usdt:t:tail": insn.Optimizable, "usdt:t:cold": insn.Emulated}, classes)
}
