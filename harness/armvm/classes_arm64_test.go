//go:build arm64

package armvm

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/elfaddr"
	"github.com/otel-uprobe/uprobereceiver/internal/insn"
)

// site is a labelled instruction of testdata/arm64/classes.S.
type site struct {
	name       string
	fileOffset uint64
	class      insn.SiteClass
	text       string
	runs       bool // in run_sites, which executes it once
}

// classesFixture returns the classes fixture and its sites.
func classesFixture(t *testing.T) (string, []site) {
	t.Helper()
	bin := fixture(t, "classes", func(dir, out string) {
		testutil.Gcc(t, dir, "-static", "-O1", "-g0", "-Wall", "-Werror", "-o", out,
			testutil.Testdata("arm64", "classes.c"), testutil.Testdata("arm64", "classes.S"))
	})
	f, err := elf.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	syms, err := f.Symbols()
	require.NoError(t, err)
	text := f.Section(".text")
	require.NotNil(t, text)
	data, err := text.Data()
	require.NoError(t, err)
	addr := map[string]uint64{}
	for _, s := range syms {
		addr[s.Name] = s.Value
	}
	require.Contains(t, addr, "run_sites")
	require.Contains(t, addr, "never_run")
	var sites []site
	for _, s := range syms {
		name, ok := strings.CutPrefix(s.Name, "site_")
		if !ok {
			continue
		}
		code := data[s.Value-text.Addr : s.Value-text.Addr+4]
		class, err := insn.ClassifyARM64(code)
		require.NoError(t, err)
		insts, err := insn.DecodeARM64(code)
		require.NoError(t, err)
		fo, err := elfaddr.FileOffset(f.Progs, s.Value)
		require.NoError(t, err)
		sites = append(sites, site{
			name: name, fileOffset: fo, class: class, text: insts[0].Text,
			runs: s.Value >= addr["run_sites"] && s.Value < addr["never_run"],
		})
	}
	require.Greater(t, len(sites), 30)
	return bin, sites
}

// kernelRelease returns the running kernel's release, e.g. "6.1.0-56-cloud-arm64".
func kernelRelease(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	require.NoError(t, err)
	return strings.TrimSpace(string(b))
}

// TestKernelClassesARM64 checks internal/insn's arm64 classes against the
// running kernel's uprobe decoder: the kernel must refuse (EINVAL) exactly
// the instructions ClassifyARM64 calls Unsupported, and run the accepted
// ones correctly, each hit once per execution.
func TestKernelClassesARM64(t *testing.T) {
	tr := openTracefs(t)
	bin, sites := classesFixture(t)
	t.Logf("kernel %s", kernelRelease(t))

	// The kernel decodes a uprobe's instruction when it installs the
	// breakpoint in a process that maps the file: keep one running.
	p := testutil.StartProgram(t, bin, "ready")
	for _, s := range sites {
		tr.add(t, s.name, bin, s.fileOffset)
		err := tr.enable(s.name, true)
		t.Logf("site_%-14s %-22s %-15v kernel: %v", s.name, s.text, s.class, err)
		if s.class == insn.Unsupported {
			assert.Error(t, err, "site_%s (%s): ClassifyARM64 says %v, the kernel accepted it", s.name, s.text, s.class)
		} else {
			assert.NoError(t, err, "site_%s (%s): ClassifyARM64 says %v, the kernel refused it", s.name, s.text, s.class)
		}
		_ = tr.enable(s.name, false)
	}

	// Every accepted site of run_sites but the unsafe one, at once: each
	// fires once and the program computes what it computes unprobed.
	enabled := 0
	for _, s := range sites {
		if s.runs && s.class.Probeable() {
			require.NoError(t, tr.enable(s.name, true), s.name)
			enabled++
		}
	}
	require.Greater(t, enabled, 15)
	assert.Equal(t, "result 4045000000000000 0 1 7", p.Ask("go", "result "))
	p.Stop()
	hits := tr.hits(t, bin)
	for _, s := range sites {
		if s.runs && s.class.Probeable() {
			assert.Equal(t, uint64(1), hits[s.name], "site_%s (%s, %v)", s.name, s.text, s.class)
		} else {
			assert.Zero(t, hits[s.name], "site_%s", s.name)
		}
	}
}

// TestKernelUnsafeARM64 shows why ClassifyARM64 calls the SIMD&FP ldr
// (literal) unsafe: the kernel accepts a uprobe on it, steps it out of line
// and so loads from an address relative to the wrong page; the program
// reads a wrong value or dies.
func TestKernelUnsafeARM64(t *testing.T) {
	tr := openTracefs(t)
	bin, sites := classesFixture(t)
	var unsafe *site
	for i := range sites {
		if sites[i].name == "ldr_d_lit" {
			unsafe = &sites[i]
		}
	}
	require.NotNil(t, unsafe)
	require.Equal(t, insn.Unsafe, unsafe.class)
	tr.add(t, unsafe.name, bin, unsafe.fileOffset)
	require.NoError(t, tr.enable(unsafe.name, true), "the kernel accepts ldr d0, literal")

	cmd := exec.Command(bin)
	cmd.Stdin = strings.NewReader("go\n")
	out, err := cmd.Output()
	t.Logf("probed: %q, %v", out, err)
	good := "ready\nresult 4045000000000000 0 1 7\n"
	assert.False(t, err == nil && string(out) == good, "with a uprobe on ldr d0, literal the program still computed %q", good)
	hits := tr.hits(t, bin)
	assert.Equal(t, uint64(1), hits[unsafe.name], fmt.Sprint(hits))
}

// TestKernelExclusiveARM64 shows why DecodeARM64 calls an instruction
// between an exclusive load and its store unsafe although the kernel
// accepts a uprobe there: every hit returns to user space through an
// exception return, which clears the exclusive monitor, so the store fails
// and the loop retries forever (a livelock the kernel checks for kprobes
// only).
func TestKernelExclusiveARM64(t *testing.T) {
	tr := openTracefs(t)
	bin, _ := classesFixture(t)
	_, fns, f := openFunctions(t, bin, "excl_inc")
	fn := fns["excl_inc"]
	syms, err := f.Symbols()
	require.NoError(t, err)
	var mid uint64
	for _, s := range syms {
		if s.Name == "excl_mid" {
			mid = s.Value - fn.vaddr
		}
	}
	require.NotZero(t, mid)
	require.Equal(t, insn.Unsafe, classAt(fn, mid), "DecodeARM64 sees the sequence")

	run := func() *exec.Cmd {
		cmd := exec.Command(bin)
		cmd.Stdin = strings.NewReader("excl\n")
		return cmd
	}
	out, err := run().Output()
	require.NoError(t, err)
	require.Equal(t, "ready\nexcl 42\n", string(out), "unprobed, the loop runs once")

	tr.add(t, "excl_mid", bin, fileOffset(t, f, fn, mid))
	require.NoError(t, tr.enable("excl_mid", true), "the kernel accepts add between ldaxr and stlxr")
	cmd := run()
	var stdout strings.Builder
	cmd.Stdout = &stdout
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Follow the hit count until it shows the loop spinning (one call
	// would hit once), or the program ends, or a minute passes.
	const spins = 1000
	deadline := time.Now().Add(time.Minute)
	var hits uint64
	for done := false; !done; {
		select {
		case err := <-exited:
			t.Fatalf("the loop finished with a probe inside it: %q, %v, %d hits", stdout.String(), err, tr.hits(t, bin)["excl_mid"])
		case <-time.After(20 * time.Millisecond):
			hits = tr.hits(t, bin)["excl_mid"]
			done = hits >= spins || time.Now().After(deadline)
		}
	}
	require.NoError(t, cmd.Process.Kill())
	<-exited
	assert.GreaterOrEqual(t, hits, uint64(spins), "the store-exclusive keeps failing")
	assert.NotContains(t, stdout.String(), "excl ", "the increment never completed")
	t.Logf("%d hits on excl_mid for one increment", hits)
}
