package planner

import (
	"debug/elf"
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

// sectionOffset converts a virtual address of path into a file offset
// through the section that holds it, independently of the program headers
// the resolver uses.
func sectionOffset(t *testing.T, path string, vaddr uint64) uint64 {
	t.Helper()
	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_ALLOC == 0 || s.Type == elf.SHT_NOBITS {
			continue
		}
		if vaddr >= s.Addr && vaddr < s.Addr+s.Size {
			return vaddr - s.Addr + s.Offset
		}
	}
	t.Fatalf("%#x is in no section of %s", vaddr, path)
	return 0
}

func TestResolveDemoPlan(t *testing.T) {
	for _, opt := range []string{"-O2", "-O0"} {
		t.Run(opt, func(t *testing.T) {
			b := testutil.BuildDemo(t, opt)
			pl, err := Resolve(demoTargets(b))
			require.NoError(t, err)

			assert.Equal(t, []plan.PlannedTarget{
				{Path: b.Program, ServiceName: "demo", Executable: true, ThreadContext: true},
				{Path: b.Library, ServiceName: "libdemo.so", Executable: false, ThreadContext: true},
			}, pl.Targets)
			require.Len(t, pl.Files, 2)
			for i, want := range []plan.File{
				{Target: 0, Path: b.Program, SeenAs: b.Program, ID: idOf(t, b.Program), Executable: true, Arch: regs.ArchAMD64,
					Sites: plan.Range{Start: 0, End: 10}, Attachments: plan.Range{Start: 0, End: 12}},
				{Target: 1, Path: b.Library, SeenAs: b.Library, ID: idOf(t, b.Library), Arch: regs.ArchAMD64,
					Sites: plan.Range{Start: 10, End: 12}, Attachments: plan.Range{Start: 12, End: 15}},
			} {
				got := pl.Files[i]
				assert.NotEmpty(t, got.BuildID, "gcc gives a GNU build id")
				got.BuildID = ""
				assert.Equal(t, want, got)
			}

			// Probes in the order they are first named: spans, then counters.
			// uprobe:work is both the entry of the work span and a counter:
			// one probe.
			assert.Equal(t, []plan.Probe{
				{Target: 0, Ref: "usdt:demo:query__start", Kind: config.KindUSDT, Locations: 1},
				{Target: 0, Ref: "usdt:demo:query__done", Kind: config.KindUSDT, Locations: 1},
				{Target: 0, Ref: "uprobe:work", Kind: config.KindUprobe, Locations: 1},
				{Target: 0, Ref: "uretprobe:work", Kind: config.KindUretprobe, Locations: 1},
				{Target: 0, Ref: "uprobe:recurse", Kind: config.KindUprobe, Locations: 1},
				{Target: 0, Ref: "uretprobe:recurse", Kind: config.KindUretprobe, Locations: 1},
				{Target: 0, Ref: "uprobe:outer", Kind: config.KindUprobe, Locations: 1},
				{Target: 0, Ref: "uretprobe:outer", Kind: config.KindUretprobe, Locations: 1},
				{Target: 0, Ref: "uprobe:inner", Kind: config.KindUprobe, Locations: 1},
				{Target: 0, Ref: "uretprobe:inner", Kind: config.KindUretprobe, Locations: 1},
				{Target: 0, Ref: "usdt:demo:tick", Kind: config.KindUSDT, Locations: 2},
				{Target: 1, Ref: "uprobe:lib_call", Kind: config.KindUprobe, Locations: 1},
				{Target: 1, Ref: "uretprobe:lib_call", Kind: config.KindUretprobe, Locations: 1},
				{Target: 1, Ref: "usdt:demolib:call", Kind: config.KindUSDT, Locations: 1},
			}, pl.Probes)

			assert.Equal(t, []plan.SpanDef{
				{Target: 0, Name: "query", Entry: 0, Exit: 1, SampleRatio: 1, Kind: config.KindInternal},
				{Target: 0, Name: "work", Entry: 2, Exit: 3, SampleRatio: 1, Kind: config.KindInternal, Function: true},
				{Target: 0, Name: "recurse", Entry: 4, Exit: 5, SampleRatio: 1, Kind: config.KindInternal, Function: true},
				{Target: 0, Name: "outer", Entry: 6, Exit: 7, SampleRatio: 1, Kind: config.KindInternal, Function: true},
				{Target: 0, Name: "inner", Entry: 8, Exit: 9, SampleRatio: 1, Kind: config.KindInternal, Function: true},
				{Target: 1, Name: "lib_call", Entry: 11, Exit: 12, SampleRatio: 1, Kind: config.KindInternal, Function: true},
			}, pl.Spans)

			// One site per location of a probe with a span role.
			type role struct{ Probe, EntrySpan, ExitSpan int }
			var roles []role
			for _, s := range pl.Sites {
				roles = append(roles, role{s.Probe, s.EntrySpan, s.ExitSpan})
			}
			assert.Equal(t, []role{
				{0, 0, -1}, {1, -1, 0}, {2, 1, -1}, {3, -1, 1}, {4, 2, -1}, {5, -1, 2},
				{6, 3, -1}, {7, -1, 3}, {8, 4, -1}, {9, -1, 4}, {11, 5, -1}, {12, -1, 5},
			}, roles)

			// The attachments, computed independently from the ELF files.
			prog, lib := notes(t, b.Program), notes(t, b.Library)
			var want []plan.Attachment
			fileOf := func(path string) int {
				if path == b.Library {
					return 1
				}
				return 0
			}
			addUSDT := func(path, name, semaphore string, probe int, pr plan.Program, cookie uint64, loc int) {
				n := prog
				if path == b.Library {
					n = lib
				}
				p, ok := n[name]
				require.True(t, ok, name)
				l := p.Locations[loc]
				a := plan.Attachment{
					File: fileOf(path), Address: l.Address, FileOffset: sectionOffset(t, path, l.Address),
					Program: pr, Cookie: cookie, Probe: probe, Class: insn.Emulated, // sys/sdt.h's 1-byte nop
				}
				if semaphore != "" {
					a.RefCtrOffset = lookup(t, path, semaphore).FileOffset
				}
				want = append(want, a)
			}
			addFunc := func(path, fn string, ret bool, probe int, cookie uint64) {
				s := lookup(t, path, fn)
				// No CET here: the probe is on the first instruction.
				code := make([]byte, 16)
				f, err := os.Open(path)
				require.NoError(t, err)
				_, err = f.ReadAt(code, int64(s.FileOffset))
				f.Close()
				require.NoError(t, err)
				class, err := insn.Classify(code)
				require.NoError(t, err)
				want = append(want, plan.Attachment{
					File: fileOf(path), Address: s.Value, FileOffset: s.FileOffset, Return: ret,
					Program: plan.ProgramSite, Cookie: cookie, Probe: probe, Class: class,
				})
			}
			addUSDT(b.Program, "demo:query__start", "demo_query__start_semaphore", 0, plan.ProgramSite, 0, 0)
			addUSDT(b.Program, "demo:query__done", "demo_query__done_semaphore", 1, plan.ProgramSite, 1, 0)
			for i, fn := range []string{"work", "recurse", "outer", "inner"} {
				addFunc(b.Program, fn, false, 2+2*i, uint64(2+2*i))
				addFunc(b.Program, fn, true, 3+2*i, uint64(3+2*i))
			}
			addUSDT(b.Program, "demo:tick", "demo_tick_semaphore", 10, plan.ProgramCount, 10, 0)
			addUSDT(b.Program, "demo:tick", "demo_tick_semaphore", 10, plan.ProgramCount, 10, 1)
			addFunc(b.Library, "lib_call", false, 11, 10)
			addFunc(b.Library, "lib_call", true, 12, 11)
			addUSDT(b.Library, "demolib:call", "", 13, plan.ProgramCount, 13, 0)
			assert.Equal(t, want, pl.Attachments)

			// The same, in the terms of the brief.
			assert.Len(t, pl.Sites, 12)
			assert.Len(t, pl.Attachments, 15)
			ids := probeIDs(pl.Plan)
			work := attachmentsOf(pl.Plan, ids["uprobe:work"])
			require.Len(t, work, 1, "uprobe:work is one probe with one attachment")
			assert.Equal(t, plan.ProgramSite, work[0].Program, "the counter is counted by its site")
			nWorkSites := 0
			for _, s := range pl.Sites {
				if s.Probe == ids["uprobe:work"] {
					nWorkSites++
				}
			}
			assert.Equal(t, 1, nWorkSites)

			tick := attachmentsOf(pl.Plan, ids["usdt:demo:tick"])
			require.Len(t, tick, 2)
			sem := lookup(t, b.Program, "demo_tick_semaphore")
			for _, a := range tick {
				assert.Equal(t, plan.ProgramCount, a.Program)
				assert.Equal(t, uint64(ids["usdt:demo:tick"]), a.Cookie, "a count attachment's cookie is its probe id")
				assert.NotZero(t, a.RefCtrOffset)
				assert.Equal(t, sem.FileOffset, a.RefCtrOffset)
				assert.False(t, a.Return)
			}
			assert.NotEqual(t, tick[0].FileOffset, tick[1].FileOffset, "two call sites")

			for _, a := range pl.Attachments {
				p := pl.Probes[a.Probe]
				assert.Equal(t, p.Kind == config.KindUretprobe, a.Return, "%s", p.Ref)
				if p.Kind == config.KindUretprobe {
					fn := p.Ref[len("uretprobe:"):]
					s := lookup(t, pl.Files[a.File].Path, fn)
					assert.Equal(t, s.FileOffset, a.FileOffset, "%s attaches at the function's first instruction", p.Ref)
				}
				if a.Program == plan.ProgramSite {
					assert.Equal(t, a.Probe, pl.Sites[a.Cookie].Probe, "the cookie of a site attachment is its site id")
				}
			}
			for i, a := range attachmentsOf(pl.Plan, ids["usdt:demolib:call"]) {
				assert.Zero(t, a.RefCtrOffset, "demolib:call has no semaphore (%d)", i)
			}
		})
	}
}

func TestResolvePID(t *testing.T) {
	b := testutil.BuildDemo(t, "-O2")
	pl, err := Resolve([]config.Target{{Path: b.Program, PID: 4242, Counters: config.CountersOf("usdt:demo:tick", "uprobe:main")}})
	require.NoError(t, err)
	assert.Equal(t, []plan.PlannedTarget{{Path: b.Program, PID: 4242, Chosen: true, ServiceName: "demo", Executable: true, ThreadContext: true}}, pl.Targets)
	require.Len(t, pl.Attachments, 3)
	for _, a := range pl.Attachments {
		// The process is chosen in the kernel, by the site's target:
		// counting goes through a site, not the bare counter.
		assert.Equal(t, plan.ProgramSite, a.Program)
	}
	require.Len(t, pl.Sites, 3)
	for _, s := range pl.Sites {
		assert.Equal(t, -1, s.EntrySpan)
		assert.Equal(t, -1, s.ExitSpan)
	}
	assert.Empty(t, pl.Spans)
}

// TestResolveSameProbeSpelledTwice checks that references naming the same
// probe share it: the counter uprobe:work+0x0 is the span's uprobe:work.
func TestResolveSameProbeSpelledTwice(t *testing.T) {
	b := testutil.BuildDemo(t, "-O2")
	pl, err := Resolve([]config.Target{{
		Path:     b.Program,
		Spans:    []config.Span{{Name: "work", Function: "work"}},
		Counters: config.CountersOf("uprobe:work+0x0", "uprobe:work+0"),
	}})
	require.NoError(t, err)
	require.Len(t, pl.Probes, 2)
	assert.Equal(t, "uprobe:work", pl.Probes[0].Ref)
	assert.Equal(t, "uretprobe:work", pl.Probes[1].Ref)
	assert.Len(t, pl.Attachments, 2)
	assert.Len(t, pl.Sites, 2)
}

// TestResolveChainedSpans checks a probe that closes one span and opens the
// next: one site with both roles and both fetch lists.
func TestResolveChainedSpans(t *testing.T) {
	b := testutil.BuildDemo(t, "-O2")
	pl, err := Resolve([]config.Target{{
		Path: b.Program,
		Spans: []config.Span{
			{Name: "a", Entry: "usdt:demo:query__start", Exit: "uprobe:work", ExitAttributes: map[string]string{"n": "arg0"}},
			{Name: "b", Entry: "uprobe:work", Exit: "usdt:demo:query__done", Attributes: map[string]string{"label": "arg1:string"}},
		},
	}})
	require.NoError(t, err)
	require.Len(t, pl.Probes, 3)
	require.Len(t, pl.Sites, 3)
	mid := pl.Sites[1]
	assert.Equal(t, 1, mid.Probe)
	assert.Equal(t, 1, mid.EntrySpan)
	assert.Equal(t, 0, mid.ExitSpan)
	require.Len(t, mid.Entry, 1)
	require.Len(t, mid.Exit, 1)
	assert.Equal(t, "label", mid.Entry[0].Key)
	assert.Equal(t, plan.StoreString, mid.Entry[0].Store)
	assert.Equal(t, "n", mid.Exit[0].Key)
}

// TestResolveUSDTSitesCompiledPerLocation checks that each location of a
// USDT probe gets its own argument specs: tick's two sites pass (i, scaled)
// and (scaled+1, i).
func TestResolveUSDTSitesCompiledPerLocation(t *testing.T) {
	for _, opt := range []string{"-O2", "-O0"} {
		t.Run(opt, func(t *testing.T) {
			b := testutil.BuildDemo(t, opt)
			pl, err := Resolve([]config.Target{{
				Path: b.Program,
				Spans: []config.Span{{
					Name: "tick", Entry: "usdt:demo:tick", Exit: "uretprobe:tick",
					Attributes: map[string]string{"a0": "arg0", "a1": "arg1"},
				}},
			}})
			require.NoError(t, err)
			require.Len(t, pl.Sites, 3, "two tick locations and the return probe")
			tick := notes(t, b.Program)["demo:tick"]
			require.Len(t, tick.Locations, 2)
			for i := range 2 {
				site := pl.Sites[i]
				require.Len(t, site.Entry, 2)
				for n, f := range site.Entry {
					arg := tick.Locations[i].Args[n]
					assert.True(t, f.Value.FromArg)
					assert.Equal(t, arg.Size, f.Value.ArgSize, "site %d arg%d %s", i, n, arg.Text)
					assert.Equal(t, arg.Signed, f.Value.ArgSigned, "site %d arg%d %s", i, n, arg.Text)
				}
				assert.Equal(t, uint64(i), pl.Attachments[i].Cookie)
			}
			// arg0 is an int at the first site and a long at the second.
			assert.Equal(t, uint8(4), pl.Sites[0].Entry[0].Value.ArgSize)
			assert.Equal(t, uint8(8), pl.Sites[1].Entry[0].Value.ArgSize)
			assert.Equal(t, uint8(8), pl.Sites[0].Entry[1].Value.ArgSize)
			assert.Equal(t, uint8(4), pl.Sites[1].Entry[1].Value.ArgSize)
		})
	}
}

// TestResolveNonPIE resolves a non-PIE (ET_EXEC) build of the demo, linked
// at a fixed address: file offsets are not virtual addresses there.
func TestResolveNonPIE(t *testing.T) {
	b := testutil.BuildDemo(t, "-O2")
	src := testutil.Testdata("demo")
	b.Program = filepath.Join(b.Dir, "demo-nopie")
	testutil.Gcc(t, b.Dir, "-O2", "-g", "-fno-pie", "-no-pie", "-I", src, "-o", b.Program,
		filepath.Join(src, "demo.c"), "-L", b.Dir, "-ldemo", "-Wl,-rpath,"+b.Dir)
	f, err := elf.Open(b.Program)
	require.NoError(t, err)
	typ := f.Type
	f.Close()
	require.Equal(t, elf.ET_EXEC, typ)

	pl, err := Resolve(demoTargets(b))
	require.NoError(t, err)
	assert.True(t, pl.Targets[0].Executable, "ET_EXEC")
	assert.Equal(t, "demo", pl.Targets[0].ServiceName)
	require.Len(t, pl.Attachments, 15)
	for _, a := range pl.Attachments {
		path := pl.Files[a.File].Path
		assert.Equal(t, sectionOffset(t, path, a.Address), a.FileOffset, "%s at %#x", pl.Probes[a.Probe].Ref, a.Address)
		if path == b.Program {
			assert.NotEqual(t, a.Address, a.FileOffset, "linked at a fixed base")
		}
	}
	ids := probeIDs(pl.Plan)
	sem := lookup(t, b.Program, "demo_tick_semaphore")
	for _, a := range attachmentsOf(pl.Plan, ids["usdt:demo:tick"]) {
		assert.Equal(t, sem.FileOffset, a.RefCtrOffset)
	}
	done := notes(t, b.Program)["demo:query__done"].Locations[0]
	if done.ArgsText == "8@%r12 -8@%rbp -8@iterations(%rip)" {
		it := fetchByKey(t, pl.Sites[1].Exit, "iterations")
		assert.Equal(t, regs.RIP, it.Register)
		assert.Equal(t, []int64{int64(lookup(t, b.Program, "iterations").Value - done.Address)}, it.Derefs)
	}
}

// A file is an executable when processes run it: ET_EXEC, a PIE (DF_1_PIE),
// or an older PIE (an interpreter and no DT_SONAME); a library that can also
// be run (glibc's libc.so.6 has a PT_INTERP) names itself and is a library.
func TestExecutableOrLibrary(t *testing.T) {
	for _, tt := range []struct {
		path string
		want bool
	}{
		{"/usr/bin/python3.11", true},                    // ET_EXEC
		{"/usr/bin/bash", true},                          // PIE, DF_1_PIE
		{"/usr/lib/x86_64-linux-gnu/libc.so.6", false},   // PT_INTERP and a DT_SONAME
		{"/usr/lib/x86_64-linux-gnu/libssl.so.3", false}, // neither
	} {
		in, err := Inspect(tt.path, noDebug)
		require.NoError(t, err, tt.path)
		assert.Equal(t, tt.want, in.Executable(), tt.path)
		in.Close()
	}
}
