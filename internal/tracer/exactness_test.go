package tracer

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/planner"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
)

// The exactness tests of the engine's fast paths (issue 21): the plain
// span program (site_hit_plain_multi), the session program
// (site_hit_session) and the marks that make the spans nested in a call
// left out follow it. Each runs testdata/exactness, in both attach modes
// where the mode changes which program runs, and asserts exact counts,
// nesting and values.

// exactness is one run of testdata/exactness under a tracer.
type exactness struct {
	prog *testutil.Program
	tr   *Tracer
	pl   *plan.Plan
}

// openExactness builds and starts testdata/exactness and traces it with
// spans and counters, a ring of ring bytes (testRing when 0).
func openExactness(t *testing.T, spans []config.Span, counters []config.Counter, perLocation bool, ring int, cflags ...string) *exactness {
	t.Helper()
	testutil.RequireRoot(t)
	bin := testutil.BuildC(t, "exactness", append([]string{"-pthread"}, cflags...)...)
	prog := testutil.StartProgram(t, bin, "ready")
	targets := []config.Target{{Path: bin, Spans: spans, Counters: counters}}
	require.NoError(t, config.Validate(targets))
	pl, err := planner.Resolve(targets)
	require.NoError(t, err)
	if ring == 0 {
		ring = testRing
	}
	tr, err := Open(pl.Plan, Options{RingBufferSize: ring, PerLocation: perLocation, ProgramStats: true})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, tr.Close()) })
	require.True(t, tr.statsOn(), "BPF run-time statistics are on (root)")
	return &exactness{prog: prog, tr: tr, pl: pl.Plan}
}

// ask sends one command and waits for its one-line answer.
func (e *exactness) ask(format string, args ...any) {
	cmd := fmt.Sprintf(format, args...)
	e.prog.Ask(cmd, "")
}

// runs returns how many times program p ran (0 for none).
func runs(t *testing.T, p *ebpf.Program) uint64 {
	t.Helper()
	if p == nil {
		return 0
	}
	st, err := p.Stats()
	require.NoError(t, err)
	return st.RunCount
}

// entryInt returns the i-th integer entry value of a span record, as
// the int32 its attribute is.
func entryInt(t *testing.T, s event.SpanRecord, i int) int64 {
	t.Helper()
	require.GreaterOrEqual(t, len(s.Entry), 8*(i+1), "entry values of span %d", s.Def)
	return int64(int32(binary.LittleEndian.Uint64(s.Entry[8*i:])))
}

// exitInt is entryInt for the exit values, as an int64.
func exitInt(t *testing.T, s event.SpanRecord, i int) int64 {
	t.Helper()
	require.GreaterOrEqual(t, len(s.Exit), 8*(i+1), "exit values of span %d", s.Def)
	return int64(binary.LittleEndian.Uint64(s.Exit[8*i:]))
}

// threadStart names a span record by its thread and start.
type threadStart struct {
	tid   uint32
	start uint64
}

// indexSpans indexes span records by thread and start, so that a record's
// parent (ParentStartNs) is found on its own thread.
func indexSpans(spans []event.SpanRecord) map[threadStart]event.SpanRecord {
	out := make(map[threadStart]event.SpanRecord, len(spans))
	for _, s := range spans {
		out[threadStart{s.TID, s.StartNs}] = s
	}
	return out
}

// assertPlain says whether every attachment of span def's entry and exit
// probes runs the plain span program.
func assertPlain(t *testing.T, tr *Tracer, pl *plan.Plan, span int, want bool) {
	t.Helper()
	def := pl.Spans[span]
	n := 0
	for _, a := range pl.Attachments {
		if a.Program == plan.ProgramSite && (a.Probe == def.Entry || a.Probe == def.Exit) {
			assert.Equal(t, want, tr.plainAttachment(a), "%s at %#x runs the plain span program", pl.Probes[a.Probe].Ref, a.FileOffset)
			n++
		}
	}
	assert.NotZero(t, n, "span %s has site attachments", def.Name)
}

// Recursion of a plain function span: every activation below
// ABI_MAX_DEPTH nests exactly under its caller's with its own argument and
// return value, the entries past it count as overflow and their exits
// close nothing; a function span closed by kernel return probes records
// the outermost ABI_KERNEL_RETURN_DEPTH activations and counts the rest
// as return_limit. With a sample_ratio of 0.5 whole recursions are kept
// or left out, the same counts hold for the kept ones, and the left-out
// ones are counted as unsampled: by the session entry at every call
// (its return skipped, counted as a hit all the same) or, without
// sessions, at each return that comes.
func TestPlainRecursionIsExact(t *testing.T) {
	const (
		shallow, shallowRuns = 255, 24 // rec(255): 256 nested calls, within ABI_MAX_DEPTH
		deep, deepRuns       = 600, 4  // rec(600): 601 nested calls, 89 past ABI_MAX_DEPTH
		kernelRuns           = 24      // rec_u(255): 256 nested calls under kernel return probes
		over                 = deep + 1 - bpfobj.MaxDepth
		maxDepth             = uint64(bpfobj.MaxDepth)
		kernelDepth          = uint64(bpfobj.KernelReturnDepth)
	)
	for _, mode := range attachModes {
		for _, ratio := range []float64{1, 0.5} {
			t.Run(fmt.Sprintf("%s/ratio=%v", mode.name, ratio), func(t *testing.T) {
				r := ratio
				e := openExactness(t, []config.Span{
					{Name: "rec", Function: "rec", SampleRatio: &r,
						Attributes: map[string]string{"depth": "arg0:s32"}, ExitAttributes: map[string]string{"r": "retval:s64"}},
					{Name: "rec_u", Function: "rec_u", Returns: config.ReturnsUretprobe, SampleRatio: &r,
						Attributes: map[string]string{"depth": "arg0:s32"}, ExitAttributes: map[string]string{"r": "retval:s64"}},
				}, nil, mode.perLocation, 1<<22)
				rec, recU := spanIndex(t, e.pl, "rec"), spanIndex(t, e.pl, "rec_u")
				sessions := e.tr.session && ratio < 1
				assertPlain(t, e.tr, e.pl, rec, e.tr.plain)
				if !sessions {
					assertPlain(t, e.tr, e.pl, recU, e.tr.plain)
				}
				for range shallowRuns {
					e.ask("deep %d", shallow)
				}
				for range deepRuns {
					e.ask("deep %d", deep)
				}
				for range kernelRuns {
					e.ask("deepu %d", shallow)
				}
				st, err := e.tr.Stats()
				require.NoError(t, err)
				spans := drainAll(t, e.tr)

				// The whole recursions kept, by their root's start.
				roots := map[uint64]int{}
				byStart := indexSpans(spans)
				for _, s := range spans {
					roots[s.RootStartNs]++
					depth := entryInt(t, s, 0)
					assert.Equal(t, depth, exitInt(t, s, 0), "rec(d) returns d")
					if s.Depth == 0 {
						assert.Zero(t, s.ParentStartNs)
						assert.Equal(t, s.StartNs, s.RootStartNs)
						continue
					}
					p, ok := byStart[threadStart{s.TID, s.ParentStartNs}]
					if !assert.True(t, ok, "the parent of a span at depth %d is recorded", s.Depth) {
						continue
					}
					assert.Equal(t, s.Def, p.Def)
					assert.Equal(t, s.Depth-1, p.Depth)
					assert.Equal(t, depth+1, entryInt(t, p, 0), "the parent is the caller")
					assert.Equal(t, p.RootStartNs, s.RootStartNs)
					assert.Less(t, p.StartNs, s.StartNs)
					assert.Greater(t, p.EndNs, s.EndNs)
				}
				var keptShallow, keptDeep, keptKernel uint64
				for root, n := range roots {
					s, ok := byStart[threadStart{spans[0].TID, root}] // one thread: roots exist only with spans
					require.True(t, ok, "the root of every recursion is recorded")
					switch {
					case int(s.Def) == recU:
						assert.Equal(t, int(kernelDepth), n, "rec_u records the outermost calls the kernel reports the return of")
						assert.Equal(t, int64(shallow), entryInt(t, s, 0))
						keptKernel++
					case entryInt(t, s, 0) == shallow:
						assert.Equal(t, shallow+1, n, "rec(%d) records every call", shallow)
						keptShallow++
					default:
						assert.Equal(t, int64(deep), entryInt(t, s, 0))
						assert.Equal(t, bpfobj.MaxDepth, n, "rec(%d) records the outermost ABI_MAX_DEPTH calls", deep)
						keptDeep++
					}
				}
				if ratio == 1 {
					assert.Equal(t, uint64(shallowRuns), keptShallow)
					assert.Equal(t, uint64(deepRuns), keptDeep)
					assert.Equal(t, uint64(kernelRuns), keptKernel)
				}
				t.Logf("recursions kept: %d of %d rec(%d), %d of %d rec(%d), %d of %d rec_u(%d)",
					keptShallow, shallowRuns, shallow, keptDeep, deepRuns, deep, keptKernel, kernelRuns, shallow)

				calls := uint64(shallowRuns*(shallow+1) + deepRuns*(deep+1))
				def := e.pl.Spans[rec]
				assert.Equal(t, calls, st.Probes[def.Entry].Hits, "rec entries")
				assert.Equal(t, calls, st.Probes[def.Exit].Hits, "rec returns")
				sc := st.Spans[rec]
				assert.Equal(t, keptShallow*(shallow+1)+keptDeep*maxDepth, sc.Count)
				assert.Equal(t, uint64(shallowRuns-int(keptShallow))*(shallow+1)+uint64(deepRuns-int(keptDeep))*maxDepth, sc.Unsampled)
				assert.Equal(t, uint64(deepRuns*over), sc.Overflow, "entries past ABI_MAX_DEPTH, kept or not")
				for _, v := range []uint64{sc.Unmatched, sc.Abandoned, sc.Lost, sc.ReturnLimit} {
					assert.Zero(t, v)
				}

				kept, left := keptKernel, uint64(kernelRuns)-keptKernel
				def = e.pl.Spans[recU]
				su := st.Spans[recU]
				assert.Equal(t, uint64(kernelRuns*(shallow+1)), st.Probes[def.Entry].Hits, "rec_u entries")
				assert.Equal(t, kept*kernelDepth, su.Count)
				if sessions {
					// A call left out skips its return, at any depth: the
					// return hit and the unsampled span are counted at its
					// entry.
					assert.Equal(t, kept*kernelDepth+left*(shallow+1), st.Probes[def.Exit].Hits, "rec_u returns")
					assert.Equal(t, left*(shallow+1), su.Unsampled)
					assert.Equal(t, kept*(shallow+1-kernelDepth), su.ReturnLimit)
				} else {
					assert.Equal(t, kernelRuns*kernelDepth, st.Probes[def.Exit].Hits, "rec_u returns the kernel reports")
					assert.Equal(t, left*kernelDepth, su.Unsampled)
					assert.Equal(t, kernelRuns*(shallow+1-kernelDepth), su.ReturnLimit)
				}
				for _, v := range []uint64{su.Unmatched, su.Abandoned, su.Lost, su.Overflow} {
					assert.Zero(t, v)
				}
				if e.tr.plain {
					want := 2 * calls
					if !sessions {
						want += st.Probes[def.Entry].Hits + st.Probes[def.Exit].Hits
					}
					assert.Equal(t, want, runs(t, e.tr.plainProg.Load()), "the plain span program ran at every trap of plain spans")
				}
			})
		}
	}
}

// A longjmp out of nested plain function spans leaves their frames open
// with no exit to come: the next span to open, at a stack position above
// theirs or at the same one (a new call there, not a tail call: its return
// address is not the kernel's return probe trampoline), drops them and
// counts them abandoned, and opens as a root; the spans nested in it have
// it as their parent. A span opened in between that is not a function's
// (a USDT pair whose end never comes) goes with the function span it
// opened in: it was opened inside that activation, which is gone; so does
// one opened last, right before the longjmp (ju). For function spans
// closed at their RET instructions (functions-ret) the engine keeps the
// return address each call found: a new call at the same position has
// another.
func TestLongjmpOutOfPlainSpans(t *testing.T) {
	const n = 5
	for _, mode := range attachModes {
		for _, variant := range []string{"functions", "functions-ret", "usdt-between", "usdt-last"} {
			t.Run(mode.name+"/"+variant, func(t *testing.T) {
				spans := []config.Span{
					{Name: "after", Function: "after", Attributes: map[string]string{"i": "arg0:s32"}},
					{Name: "leaf", Function: "leaf", Attributes: map[string]string{"i": "arg0:s32"}},
				}
				unwound := []string{"ja", "jb", "jc"}
				command, answer := "jump", "jumped"
				switch variant {
				case "usdt-between":
					unwound = append(unwound, "jop")
					spans = append(spans, config.Span{Name: "jop", Entry: "usdt:exactness:jop__start", Exit: "usdt:exactness:jop__done"})
				case "usdt-last":
					unwound = []string{"ju", "juo"}
					command, answer = "jumpu", "jumpedu"
					spans = append(spans, config.Span{Name: "juo", Entry: "usdt:exactness:ju__start", Exit: "usdt:exactness:ju__done"})
				}
				for _, f := range unwound {
					if f == "ja" || f == "jb" || f == "jc" || f == "ju" {
						sp := config.Span{Name: f, Function: f}
						if variant == "functions-ret" {
							sp.Returns = config.ReturnsRet // closed at its RET instructions: no trampoline
						}
						spans = append(spans, sp)
					}
				}
				e := openExactness(t, spans, nil, mode.perLocation, 0)
				for _, s := range spans {
					assertPlain(t, e.tr, e.pl, spanIndex(t, e.pl, s.Name), e.tr.plain)
				}
				e.prog.Ask(fmt.Sprintf("%s %d", command, n), answer)
				st, err := e.tr.Stats()
				require.NoError(t, err)
				for _, name := range unwound {
					sc := st.Spans[spanIndex(t, e.pl, name)]
					assert.Equal(t, uint64(n), sc.Abandoned, "%s: every activation longjmped out of", name)
					assert.Zero(t, sc.Count, name)
				}
				after, leaf := spanIndex(t, e.pl, "after"), spanIndex(t, e.pl, "leaf")
				assert.Equal(t, uint64(n), st.Spans[after].Count)
				assert.Equal(t, uint64(n), st.Spans[leaf].Count)
				for i, sc := range st.Spans {
					assert.Zero(t, sc.Unmatched, e.pl.Spans[i].Name)
					assert.Zero(t, sc.Lost, e.pl.Spans[i].Name)
				}
				recs := drainAll(t, e.tr)
				require.Equal(t, 2*n, len(recs), "after and leaf spans")
				byStart := indexSpans(recs)
				for _, s := range recs {
					switch int(s.Def) {
					case after:
						assert.Zero(t, s.Depth, "after is a root: what was longjmped out of is gone")
						assert.Zero(t, s.ParentStartNs)
						assert.Equal(t, s.StartNs, s.RootStartNs)
					case leaf:
						assert.Equal(t, uint16(1), s.Depth)
						p, ok := byStart[threadStart{s.TID, s.ParentStartNs}]
						if assert.True(t, ok, "leaf's parent is recorded") {
							assert.Equal(t, after, int(p.Def))
							assert.Equal(t, entryInt(t, p, 0), entryInt(t, s, 0))
							assert.Equal(t, p.StartNs, s.RootStartNs)
						}
					default:
						t.Errorf("a %s span was recorded", e.pl.Spans[s.Def].Name)
					}
				}
			})
		}
	}
}

// One function, both(), is the place of a plain span and of what is not
// plain: a counter with a value histogram on its entry (the same probe as
// the span's entry: one site, which then runs the general program while
// the span's return runs the plain one) and a filtered counter at the same
// address (a probe and site of its own). Inside it a chain of USDT probes
// shares a site between two spans: ph__b closes ab and opens bc (not
// plain), while ph__a and ph__c are plain. Everything counts exactly, and
// every span nests where it ran.
func TestPlainAndNotPlainOnOneFunction(t *testing.T) {
	const n = 2000
	for _, mode := range attachModes {
		t.Run(mode.name, func(t *testing.T) {
			i := map[string]string{"i": "arg0:s32"}
			e := openExactness(t, []config.Span{
				{Name: "both", Function: "both", Attributes: i},
				{Name: "ab", Entry: "usdt:exactness:ph__a", Exit: "usdt:exactness:ph__b", Attributes: map[string]string{"i": "arg0"}},
				{Name: "bc", Entry: "usdt:exactness:ph__b", Exit: "usdt:exactness:ph__c", Attributes: map[string]string{"i": "arg0"}},
				{Name: "leaf", Function: "leaf", Attributes: i},
			}, []config.Counter{
				{Probe: "uprobe:both", Histogram: "arg0:s32"},
				{Probe: "uprobe:both", Filter: []string{"arg0:s32 < 10"}},
			}, mode.perLocation, 1<<23)
			both, ab, bc, leaf := spanIndex(t, e.pl, "both"), spanIndex(t, e.pl, "ab"), spanIndex(t, e.pl, "bc"), spanIndex(t, e.pl, "leaf")
			if e.tr.plain {
				def := e.pl.Spans[both]
				for _, a := range e.pl.Attachments {
					switch {
					case a.Probe == def.Entry:
						assert.False(t, e.tr.plainAttachment(a), "both's entry feeds a histogram: not plain")
					case a.Probe == def.Exit:
						assert.True(t, e.tr.plainAttachment(a), "both's return is plain")
					case a.Probe == e.pl.Spans[ab].Exit:
						assert.False(t, e.tr.plainAttachment(a), "ph__b closes ab and opens bc: not plain")
					case a.Probe == e.pl.Spans[ab].Entry || a.Probe == e.pl.Spans[bc].Exit:
						assert.True(t, e.tr.plainAttachment(a), "%s is plain", e.pl.Probes[a.Probe].Ref)
					}
				}
				assertPlain(t, e.tr, e.pl, leaf, true)
			}
			plainBefore, siteBefore := runs(t, e.tr.plainProg.Load()), runs(t, e.tr.siteProg.Load())
			e.ask("mixed %d", n)
			st, err := e.tr.Stats()
			require.NoError(t, err)

			filtered := -1
			for p, pr := range e.pl.Probes {
				if pr.Filtered {
					filtered = p
				}
			}
			require.NotEqual(t, -1, filtered)
			def := e.pl.Spans[both]
			assert.Equal(t, uint64(n), st.Probes[def.Entry].Hits, "uprobe:both: the span's entry and the counter's")
			assert.Equal(t, uint64(n), st.Probes[def.Exit].Hits)
			assert.Equal(t, uint64(10), st.Probes[filtered].Hits, "the filtered counter counts the calls with i < 10")
			for _, s := range []int{ab, bc} {
				assert.Equal(t, uint64(n), st.Probes[e.pl.Spans[s].Entry].Hits)
				assert.Equal(t, uint64(n), st.Probes[e.pl.Spans[s].Exit].Hits)
			}
			require.Len(t, st.Values, 1)
			assert.Equal(t, uint64(n), st.Values[0].Count, "the histogram has every call's value")
			assert.Equal(t, float64(n*(n-1)/2), st.Values[0].Sum())
			assert.Equal(t, uint64(1), st.Values[0].Zero)
			assert.Zero(t, st.Values[0].Unread)
			for s, want := range map[int]uint64{both: n, ab: n, bc: n, leaf: 2 * n} {
				sc := st.Spans[s]
				assert.Equal(t, want, sc.Count, e.pl.Spans[s].Name)
				for _, v := range []uint64{sc.Unmatched, sc.Abandoned, sc.Lost, sc.Filtered, sc.Unsampled} {
					assert.Zero(t, v, e.pl.Spans[s].Name)
				}
			}
			if e.tr.plain {
				// The plain program: both's return, ph__a, ph__c, leaf's
				// entry and return; the general one: both's entry (with
				// the histogram), the filtered counter, ph__b.
				assert.Equal(t, uint64(7*n), runs(t, e.tr.plainProg.Load())-plainBefore)
				assert.Equal(t, uint64(3*n), runs(t, e.tr.siteProg.Load())-siteBefore)
			}

			recs := drainAll(t, e.tr)
			require.Equal(t, 5*n, len(recs), "records")
			byStart := indexSpans(recs)
			seen := map[int]map[int64]int{both: {}, ab: {}, bc: {}, leaf: {}}
			for _, s := range recs {
				v := entryInt(t, s, 0)
				seen[int(s.Def)][v]++
				if int(s.Def) == both {
					assert.Zero(t, s.Depth)
					assert.Zero(t, s.ParentStartNs)
					continue
				}
				p, ok := byStart[threadStart{s.TID, s.ParentStartNs}]
				if !assert.True(t, ok, "%s's parent is recorded", e.pl.Spans[s.Def].Name) {
					continue
				}
				switch int(s.Def) {
				case ab, bc:
					assert.Equal(t, both, int(p.Def))
					assert.Equal(t, uint16(1), s.Depth)
					assert.Equal(t, entryInt(t, p, 0), v)
				case leaf:
					assert.Equal(t, uint16(2), s.Depth)
					if int(p.Def) == ab {
						assert.Equal(t, entryInt(t, p, 0), v, "leaf(i) in ab")
					} else {
						assert.Equal(t, bc, int(p.Def))
						assert.Equal(t, entryInt(t, p, 0)+1, v, "leaf(i+1) in bc")
					}
				}
				assert.Less(t, p.StartNs, s.StartNs)
				assert.GreaterOrEqual(t, p.EndNs, s.EndNs)
			}
			for x := range int64(n) {
				for _, s := range []int{both, ab, bc} {
					assert.Equal(t, 1, seen[s][x], "%s(%d)", e.pl.Spans[s].Name, x)
				}
			}
			// ab closes and bc opens at ph__b: bc starts after ab ends.
			ends := map[int64]uint64{}
			for _, s := range recs {
				if int(s.Def) == ab {
					ends[entryInt(t, s, 0)] = s.EndNs
				}
			}
			for _, s := range recs {
				if int(s.Def) == bc {
					assert.GreaterOrEqual(t, s.StartNs, ends[entryInt(t, s, 0)])
				}
			}
		})
	}
}

// Head sampling at 0.5 over 100,000 root calls, each with two nested
// calls: sroot's entry attaches as a session uprobe (where the kernel has
// them) and skips the return of a call left out; leaf, a plain span, runs
// inside it and follows its decision through the thread's mark of the
// call left out, and free_leaf, called next from the same loop at the same
// stack position, decides afresh (its ratio is 1). Exactly 2 children per
// recorded root, each with its root's argument; the hits of sroot's return
// count every call, skipped or not. Per location (no sessions: every
// return runs) 20,000 roots, to keep the test within seconds. Built with
// -fcf-protection (x86-64 IBT: functions start with endbr64, and the
// entry probe goes after it), a call left out still skips its return.
func TestHalfSampledRootsAreExact(t *testing.T) {
	const ratio = 0.5
	modes := []struct {
		name        string
		perLocation bool
		cflags      []string
	}{{"multi", false, nil}, {"per-location", true, nil}}
	if runtime.GOARCH == "amd64" && testutil.Prebuilt() == "" {
		modes = append(modes, struct {
			name        string
			perLocation bool
			cflags      []string
		}{"multi-ibt", false, []string{"-fcf-protection=full", "-fno-omit-frame-pointer"}})
	}
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			n := testutil.Scaled(100_000, 5_000)
			if mode.perLocation || mode.cflags != nil {
				n = testutil.Scaled(20_000, 5_000)
			}
			r := ratio
			i := map[string]string{"i": "arg0:s32"}
			e := openExactness(t, []config.Span{
				{Name: "sroot", Function: "sroot", SampleRatio: &r, Attributes: i},
				{Name: "leaf", Function: "leaf", Attributes: i},
				{Name: "free_leaf", Function: "free_leaf", Attributes: i},
			}, nil, mode.perLocation, 1<<26, mode.cflags...)
			if mode.cflags != nil {
				a := e.pl.Attachments[0]
				for _, x := range e.pl.Attachments {
					if x.Probe == e.pl.Spans[spanIndex(t, e.pl, "sroot")].Entry {
						a = x
					}
				}
				require.Equal(t, uint64(4), a.Address%16, "sroot's entry probe is after its endbr64")
			}
			sroot, leaf, free := spanIndex(t, e.pl, "sroot"), spanIndex(t, e.pl, "leaf"), spanIndex(t, e.pl, "free_leaf")
			assert.Equal(t, !mode.perLocation && HaveUprobeMulti() && HaveUprobeSession(), e.tr.session)
			assertPlain(t, e.tr, e.pl, leaf, e.tr.plain)
			assertPlain(t, e.tr, e.pl, free, e.tr.plain)
			plainBefore, sessionBefore := runs(t, e.tr.plainProg.Load()), runs(t, e.tr.sessionProg.Load())
			e.ask("roots %d", n)
			st, err := e.tr.Stats()
			require.NoError(t, err)

			kept := st.Spans[sroot].Count
			// Binomial(n, 0.5): standard deviation sqrt(n)/2 (158 for
			// 100,000); 6 of them.
			assert.InDelta(t, float64(n)*ratio, float64(kept), 6*0.5*math.Sqrt(float64(n)))
			def := e.pl.Spans[sroot]
			assert.Equal(t, uint64(n), st.Probes[def.Entry].Hits, "sroot's entries")
			assert.Equal(t, uint64(n), st.Probes[def.Exit].Hits, "sroot's returns, skipped ones included")
			assert.Equal(t, uint64(n)-kept, st.Spans[sroot].Unsampled)
			assert.Equal(t, 2*kept, st.Spans[leaf].Count, "children: exactly 2 per recorded root")
			assert.Equal(t, 2*(uint64(n)-kept), st.Spans[leaf].Unsampled, "the children of the roots left out")
			assert.Equal(t, uint64(2*n), st.Probes[e.pl.Spans[leaf].Entry].Hits)
			assert.Equal(t, uint64(2*n), st.Probes[e.pl.Spans[leaf].Exit].Hits)
			assert.Equal(t, uint64(n), st.Spans[free].Count, "free_leaf decides afresh, at ratio 1")
			assert.Zero(t, st.Spans[free].Unsampled)
			for s, sc := range st.Spans {
				for _, v := range []uint64{sc.Unmatched, sc.Abandoned, sc.Lost, sc.Overflow, sc.ReturnLimit} {
					assert.Zero(t, v, e.pl.Spans[s].Name)
				}
			}
			if e.tr.plain {
				assert.Equal(t, uint64(6*n), runs(t, e.tr.plainProg.Load())-plainBefore, "leaf and free_leaf run the plain program")
			}
			if e.tr.session {
				assert.Equal(t, uint64(n)+kept, runs(t, e.tr.sessionProg.Load())-sessionBefore,
					"the session program runs at every entry of sroot and at the returns of the calls recorded")
			}

			recs := drainAll(t, e.tr)
			require.Equal(t, int(3*kept)+n, len(recs), "records")
			roots := map[uint64]int64{}
			for _, s := range recs {
				if int(s.Def) == sroot {
					assert.Zero(t, s.Depth)
					roots[s.StartNs] = entryInt(t, s, 0)
				}
			}
			require.Equal(t, int(kept), len(roots))
			children := map[uint64][]int64{}
			frees := 0
			for _, s := range recs {
				switch int(s.Def) {
				case leaf:
					ri, ok := roots[s.ParentStartNs]
					if assert.True(t, ok, "a leaf's parent is a recorded sroot") {
						assert.Equal(t, uint16(1), s.Depth)
						assert.Equal(t, s.ParentStartNs, s.RootStartNs)
						children[s.ParentStartNs] = append(children[s.ParentStartNs], entryInt(t, s, 0)-ri)
					}
				case free:
					assert.Zero(t, s.Depth, "free_leaf is a root")
					assert.Zero(t, s.ParentStartNs)
					frees++
				}
			}
			assert.Equal(t, n, frees)
			for start := range roots {
				assert.ElementsMatch(t, []int64{0, 1}, children[start], "sroot(i) has leaf(i) and leaf(i+1)")
			}
		})
	}
}

// Eight threads run nested plain spans at once through a ring too small
// for all of their records, read while they run: every completed span is
// delivered or counted lost (for each span and in the probes' counters),
// and every delivered span nests under its own thread's parent, with its
// argument.
func TestThreadsOfPlainSpansDeliveredOrLost(t *testing.T) {
	const threads = 8
	n := testutil.Scaled(5_000, 500)
	for _, mode := range attachModes {
		t.Run(mode.name, func(t *testing.T) {
			i := map[string]string{"i": "arg0:s32"}
			e := openExactness(t, []config.Span{
				{Name: "tw", Function: "tw", Attributes: i},
				{Name: "leaf", Function: "leaf", Attributes: i},
			}, nil, mode.perLocation, 1<<16)
			tw, leaf := spanIndex(t, e.pl, "tw"), spanIndex(t, e.pl, "leaf")
			assertPlain(t, e.tr, e.pl, tw, e.tr.plain)
			assertPlain(t, e.tr, e.pl, leaf, e.tr.plain)

			var recs []event.SpanRecord // the reader's until it is done
			done := make(chan struct{})
			read := make(chan struct{})
			go func() {
				defer close(read)
				var b testutil.Batch
				for {
					select {
					case <-done:
						return
					default:
					}
					b.Reset()
					got, malformed := e.tr.Read(1000, &b)
					for _, s := range b.Spans {
						s.Entry = append([]byte(nil), s.Entry...)
						s.Exit = nil
						recs = append(recs, s)
					}
					if malformed != 0 {
						t.Errorf("%d malformed records", malformed)
					}
					if got == 0 {
						// Until a quarter of the ring is full, as the receiver's reader does.
						_ = e.tr.WaitRecords(time.Now().Add(10*time.Millisecond), false)
					}
				}
			}()
			e.ask("threads %d %d", threads, n)
			close(done)
			e.tr.Interrupt()
			<-read
			recs = append(recs, drainAll(t, e.tr)...)
			st, err := e.tr.Stats()
			require.NoError(t, err)

			delivered := map[int]uint64{}
			for _, s := range recs {
				delivered[int(s.Def)]++
			}
			var lost uint64
			for s, want := range map[int]uint64{tw: uint64(threads * n), leaf: uint64(2 * threads * n)} {
				sc := st.Spans[s]
				assert.Equal(t, want, sc.Count, "%s: every call completed a span", e.pl.Spans[s].Name)
				assert.Equal(t, sc.Count, delivered[s]+sc.Lost, "%s: delivered + lost = completed", e.pl.Spans[s].Name)
				for _, v := range []uint64{sc.Unmatched, sc.Abandoned, sc.Overflow, sc.Unsampled} {
					assert.Zero(t, v, e.pl.Spans[s].Name)
				}
				lost += sc.Lost
				def := e.pl.Spans[s]
				assert.Equal(t, want, st.Probes[def.Entry].Hits)
				assert.Equal(t, want, st.Probes[def.Exit].Hits)
			}
			var probeLost uint64
			for _, p := range st.Probes {
				probeLost += p.Lost
			}
			assert.Equal(t, lost, probeLost, "the exit probes count the records lost")
			t.Logf("%d spans delivered, %d lost", len(recs), lost)

			byStart := indexSpans(recs)
			tids := map[uint32]bool{}
			orphans := uint64(0)
			for _, s := range recs {
				switch int(s.Def) {
				case tw:
					assert.Zero(t, s.Depth)
					assert.Zero(t, s.ParentStartNs)
					assert.Equal(t, uint64(s.TID), s.Owner)
					tids[s.TID] = true
				case leaf:
					assert.Equal(t, uint16(1), s.Depth)
					p, ok := byStart[threadStart{s.TID, s.ParentStartNs}]
					if !ok {
						orphans++ // its parent's record was lost
						continue
					}
					assert.Equal(t, tw, int(p.Def), "a leaf's parent is its own thread's tw")
					assert.Contains(t, []int64{0, 1}, entryInt(t, s, 0)-entryInt(t, p, 0))
					assert.Less(t, p.StartNs, s.StartNs)
					assert.Greater(t, p.EndNs, s.EndNs)
				}
			}
			assert.LessOrEqual(t, orphans, 2*st.Spans[tw].Lost, "a leaf without its parent is one whose parent was lost")
			assert.Equal(t, threads, len(tids), "every thread delivered spans")
		})
	}
}

// A span between two USDT probes whose arguments are registers runs the
// plain span program at both ends (semaphores raised through the
// uprobe_multi link's reference counters): every pair is one span with
// its entry and exit arguments, and the function span nested in it has it
// as its parent.
func TestUSDTPairOnThePlainProgram(t *testing.T) {
	n := testutil.Scaled(10_000, 1_000)
	for _, mode := range attachModes {
		t.Run(mode.name, func(t *testing.T) {
			e := openExactness(t, []config.Span{
				{Name: "op", Entry: "usdt:exactness:op__start", Exit: "usdt:exactness:op__done",
					Attributes: map[string]string{"i": "arg0", "k": "arg1"}, ExitAttributes: map[string]string{"k1": "arg1"}},
				{Name: "leaf", Function: "leaf", Attributes: map[string]string{"i": "arg0:s32"}},
			}, nil, mode.perLocation, 1<<23)
			op, leaf := spanIndex(t, e.pl, "op"), spanIndex(t, e.pl, "leaf")
			assertPlain(t, e.tr, e.pl, op, e.tr.plain)
			plainBefore := runs(t, e.tr.plainProg.Load())
			e.ask("ops %d", n)
			st, err := e.tr.Stats()
			require.NoError(t, err)
			def := e.pl.Spans[op]
			assert.Equal(t, uint64(n), st.Probes[def.Entry].Hits)
			assert.Equal(t, uint64(n), st.Probes[def.Exit].Hits)
			for s, want := range map[int]uint64{op: uint64(n), leaf: uint64(n)} {
				sc := st.Spans[s]
				assert.Equal(t, want, sc.Count, e.pl.Spans[s].Name)
				for _, v := range []uint64{sc.Unmatched, sc.Abandoned, sc.Lost} {
					assert.Zero(t, v, e.pl.Spans[s].Name)
				}
			}
			if e.tr.plain {
				assert.Equal(t, uint64(4*n), runs(t, e.tr.plainProg.Load())-plainBefore, "both USDT probes and leaf's entry and return")
			}
			recs := drainAll(t, e.tr)
			require.Equal(t, 2*n, len(recs), "records")
			byStart := indexSpans(recs)
			seen := map[int64]bool{}
			for _, s := range recs {
				switch int(s.Def) {
				case op:
					i := entryInt(t, s, 0)
					assert.Equal(t, 3*i, int64(binary.LittleEndian.Uint64(s.Entry[8:])), "k = 3i")
					assert.Equal(t, 3*i+1, exitInt(t, s, 0), "k1 = 3i+1")
					assert.Zero(t, s.Depth)
					assert.False(t, seen[i])
					seen[i] = true
				case leaf:
					p, ok := byStart[threadStart{s.TID, s.ParentStartNs}]
					if assert.True(t, ok, "leaf's parent is recorded") {
						assert.Equal(t, op, int(p.Def))
						assert.Equal(t, entryInt(t, p, 0), entryInt(t, s, 0))
						assert.Equal(t, uint16(1), s.Depth)
					}
				}
			}
			assert.Equal(t, n, len(seen))
		})
	}
}

// A call that head sampling leaves out through an indirect call (a
// dispatcher calling handlers through one function pointer) cannot skip
// its return: a call the same instruction makes next, to another function,
// finds the same return address at the same stack position, and a mark of
// the call left out would take it, and what it calls, to be inside it.
// free_leaf, called by via() through that call right after sroot(), has a
// sample_ratio of 1: every one of its spans is recorded. (Before, about
// half were left out with sroot's calls.)
func TestIndirectCallAfterAnUnsampledCall(t *testing.T) {
	const n = 20_000
	for _, mode := range attachModes {
		t.Run(mode.name, func(t *testing.T) {
			r := 0.5
			e := openExactness(t, []config.Span{
				{Name: "sroot", Function: "sroot", SampleRatio: &r},
				{Name: "free_leaf", Function: "free_leaf"},
			}, nil, mode.perLocation, 1<<23)
			e.prog.Ask(fmt.Sprintf("disp %d", n), "disp")
			st, err := e.tr.Stats()
			require.NoError(t, err)
			sroot, free := spanIndex(t, e.pl, "sroot"), spanIndex(t, e.pl, "free_leaf")
			assert.Equal(t, uint64(n/2), st.Spans[sroot].Count+st.Spans[sroot].Unsampled)
			def := e.pl.Spans[sroot]
			assert.Equal(t, uint64(n/2), st.Probes[def.Entry].Hits)
			assert.Equal(t, uint64(n/2), st.Probes[def.Exit].Hits)
			if e.tr.session {
				assert.Equal(t, uint64(n), runs(t, e.tr.sessionProg.Load()), "every call of sroot runs its return: none is skipped")
			}
			assert.Equal(t, uint64(n/2), st.Spans[free].Count, "free_leaf is recorded at every call")
			assert.Zero(t, st.Spans[free].Unsampled)
			recs := drainAll(t, e.tr)
			frees := 0
			for _, s := range recs {
				if int(s.Def) == free {
					assert.Zero(t, s.Depth)
					frees++
				}
			}
			assert.Equal(t, n/2, frees)
		})
	}
}

// Head sampling in a pid: target (kernel-scoped where uprobe_multi links
// take a pid, Linux 6.11): another process running the same file counts
// nothing, and the chosen one's roots at sample_ratio 0.5 have exactly two
// children each when recorded and none when left out (the session entry
// skips the return of a call left out or of a process not chosen).
func TestPIDScopedSampledRootsAreExact(t *testing.T) {
	testutil.RequireRoot(t)
	n := testutil.Scaled(20_000, 2_000)
	for _, mode := range attachModes {
		t.Run(mode.name, func(t *testing.T) {
			bin := testutil.BuildC(t, "exactness", "-pthread")
			chosen := testutil.StartProgram(t, bin, "ready")
			other := testutil.StartProgram(t, bin, "ready")
			r := 0.5
			i := map[string]string{"i": "arg0:s32"}
			targets := []config.Target{{Path: bin, PID: chosen.PID, Spans: []config.Span{
				{Name: "sroot", Function: "sroot", SampleRatio: &r, Attributes: i},
				{Name: "leaf", Function: "leaf", Attributes: i},
			}}}
			require.NoError(t, config.Validate(targets))
			res, err := planner.Resolve(targets)
			require.NoError(t, err)
			pl := res.Plan
			tr, err := Open(pl, Options{RingBufferSize: 1 << 24, PerLocation: mode.perLocation})
			require.NoError(t, err)
			defer func() { assert.NoError(t, tr.Close()) }()
			choose(t, tr, pl, chosen.PID)

			other.Ask(fmt.Sprintf("roots %d", n), "roots")
			chosen.Ask(fmt.Sprintf("roots %d", n), "roots")
			st, err := tr.Stats()
			require.NoError(t, err)
			sroot, leaf := spanIndex(t, pl, "sroot"), spanIndex(t, pl, "leaf")
			def := pl.Spans[sroot]
			kept, left := st.Spans[sroot].Count, st.Spans[sroot].Unsampled
			assert.Equal(t, uint64(n), kept+left, "the chosen process's calls only")
			assert.InDelta(t, float64(n)/2, float64(kept), 3*math.Sqrt(float64(n)))
			assert.Equal(t, uint64(n), st.Probes[def.Entry].Hits)
			assert.Equal(t, uint64(n), st.Probes[def.Exit].Hits, "returns: every call of the chosen process, skipped ones included")
			assert.Equal(t, 2*kept, st.Spans[leaf].Count)
			assert.Equal(t, 2*left, st.Spans[leaf].Unsampled)
			assert.Equal(t, uint64(2*n), st.Probes[pl.Spans[leaf].Entry].Hits)
			for s, sc := range st.Spans {
				for _, v := range []uint64{sc.Unmatched, sc.Abandoned, sc.Lost} {
					assert.Zero(t, v, pl.Spans[s].Name)
				}
			}
			recs := drainAll(t, tr)
			require.Equal(t, int(3*kept), len(recs), "records")
			roots := map[uint64]int64{}
			for _, s := range recs {
				assert.Equal(t, uint32(chosen.PID), s.PID)
				if int(s.Def) == sroot {
					roots[s.StartNs] = entryInt(t, s, 0)
				}
			}
			children := map[uint64][]int64{}
			for _, s := range recs {
				if int(s.Def) == leaf {
					ri, ok := roots[s.ParentStartNs]
					if assert.True(t, ok, "a leaf's parent is a recorded sroot") {
						children[s.ParentStartNs] = append(children[s.ParentStartNs], entryInt(t, s, 0)-ri)
					}
				}
			}
			for start := range roots {
				assert.ElementsMatch(t, []int64{0, 1}, children[start])
			}
		})
	}
}

// A call left out through a PLT stub (the demo calls libdemo.so's
// lib_call through its PLT) is a direct call: every call made there
// enters lib_call, so its return is skipped (the session program runs at
// every entry and at the returns of the calls recorded only) and the
// counts stay exact.
func TestPLTCallLeftOutSkipsItsReturn(t *testing.T) {
	testutil.RequireRoot(t)
	const n = 20_000
	b := testutil.BuildDemo(t, "-O2")
	demo := testutil.StartDemo(t, b.Program)
	r := 0.5
	targets := []config.Target{{Path: b.Library, Spans: []config.Span{{Name: "lib_call", Function: "lib_call", SampleRatio: &r}}}}
	require.NoError(t, config.Validate(targets))
	res, err := planner.Resolve(targets)
	require.NoError(t, err)
	tr, err := Open(res.Plan, Options{RingBufferSize: 1 << 22, ProgramStats: true})
	require.NoError(t, err)
	defer func() { assert.NoError(t, tr.Close()) }()
	demo.Run(n)
	st, err := tr.Stats()
	require.NoError(t, err)
	def := res.Plan.Spans[0]
	sc := st.Spans[0]
	assert.Equal(t, uint64(n), sc.Count+sc.Unsampled)
	assert.InDelta(t, n/2, float64(sc.Count), 3*math.Sqrt(n))
	assert.Equal(t, uint64(n), st.Probes[def.Entry].Hits)
	assert.Equal(t, uint64(n), st.Probes[def.Exit].Hits)
	assert.Len(t, drainAll(t, tr), int(sc.Count))
	if tr.session {
		assert.Equal(t, uint64(n)+sc.Count, runs(t, tr.sessionProg.Load()), "the returns of the calls left out are skipped")
	}
}

// A call of a leaf function (lu: no call, no jump out of it) that head
// sampling leaves out is marked by the function's code addresses
// (SITE_LEAF, x86-64), not by a read of the return address it left on the
// stack: the spans the USDT pair inside it opens follow its decision
// exactly, and after(), which its caller calls next at the same stack
// position at ratio 1, is not taken to be inside it.
func TestLeafCallLeftOut(t *testing.T) {
	n := testutil.Scaled(20_000, 2_000)
	for _, mode := range attachModes {
		t.Run(mode.name, func(t *testing.T) {
			r := 0.5
			e := openExactness(t, []config.Span{
				{Name: "lu", Function: "lu", SampleRatio: &r, Attributes: map[string]string{"i": "arg0:s32"}},
				{Name: "inner", Entry: "usdt:exactness:lu__start", Exit: "usdt:exactness:lu__done",
					Attributes: map[string]string{"i": "arg0:s32"}},
				{Name: "after", Function: "after", Attributes: map[string]string{"i": "arg0:s32"}},
			}, nil, mode.perLocation, 1<<23)
			lu, inner, after := spanIndex(t, e.pl, "lu"), spanIndex(t, e.pl, "inner"), spanIndex(t, e.pl, "after")
			leafBytes := map[int]uint32{}
			for _, s := range e.pl.Sites {
				if s.EntrySpan >= 0 {
					leafBytes[s.EntrySpan] = s.LeafBytes
				}
			}
			if bpfobj.Arch() == regs.ArchAMD64 {
				assert.NotZero(t, leafBytes[lu], "lu is a leaf")
			} else {
				assert.Zero(t, leafBytes[lu], "leaves are found in x86-64 code only")
			}
			assert.Zero(t, leafBytes[after], "after calls leaf()")
			assert.Zero(t, leafBytes[inner], "a USDT probe's site is no function's entry")
			sessionBefore := runs(t, e.tr.sessionProg.Load())
			e.ask("lus %d", n)
			st, err := e.tr.Stats()
			require.NoError(t, err)

			kept, left := st.Spans[lu].Count, st.Spans[lu].Unsampled
			assert.Equal(t, uint64(n), kept+left)
			assert.InDelta(t, float64(n)/2, float64(kept), 6*0.5*math.Sqrt(float64(n)))
			def := e.pl.Spans[lu]
			assert.Equal(t, uint64(n), st.Probes[def.Entry].Hits, "lu's entries")
			assert.Equal(t, uint64(n), st.Probes[def.Exit].Hits, "lu's returns, skipped ones included")
			assert.Equal(t, kept, st.Spans[inner].Count, "the USDT pair inside lu is recorded with it")
			assert.Equal(t, left, st.Spans[inner].Unsampled, "and left out with it")
			assert.Equal(t, uint64(n), st.Spans[after].Count, "after decides afresh, at ratio 1")
			assert.Zero(t, st.Spans[after].Unsampled)
			for s, sc := range st.Spans {
				for _, v := range []uint64{sc.Unmatched, sc.Abandoned, sc.Lost, sc.Overflow, sc.ReturnLimit} {
					assert.Zero(t, v, e.pl.Spans[s].Name)
				}
			}
			if e.tr.session {
				assert.Equal(t, uint64(n)+kept, runs(t, e.tr.sessionProg.Load())-sessionBefore,
					"the session program runs at every entry of lu and at the returns of the calls recorded")
			}

			recs := drainAll(t, e.tr)
			require.Equal(t, int(2*kept)+n, len(recs), "records")
			byStart := indexSpans(recs)
			afters := 0
			for _, s := range recs {
				switch int(s.Def) {
				case lu:
					assert.Zero(t, s.Depth)
				case inner:
					p, ok := byStart[threadStart{s.TID, s.ParentStartNs}]
					if assert.True(t, ok, "inner's parent is recorded") {
						assert.Equal(t, lu, int(p.Def))
						assert.Equal(t, entryInt(t, p, 0), entryInt(t, s, 0))
						assert.Equal(t, uint16(1), s.Depth)
					}
				case after:
					assert.Zero(t, s.Depth, "after is a root: lu's call had returned")
					afters++
				}
			}
			assert.Equal(t, n, afters)
		})
	}
}
