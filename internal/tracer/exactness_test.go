package tracer

import (
	"encoding/binary"
	"fmt"

	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/planner"
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
func openExactness(t *testing.T, spans []config.Span, counters []config.Counter, perLocation bool, ring int) *exactness {
	t.Helper()
	testutil.RequireRoot(t)
	bin := testutil.BuildC(t, "exactness", "-pthread")
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

// ask sends one command and waits for its answer.
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

// byThreadStart indexes span records by thread and start.
type threadStart struct {
	tid   uint32
	start uint64
}

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
					s, ok := byStart[threadStart{spans[0].TID, root}]
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
// theirs, drops them and counts them abandoned, and opens as a root; the
// spans nested in it have it as their parent. A span opened in between
// that is not a function's (a USDT pair whose end never comes) goes with
// the function span it opened in: it was opened inside that activation,
// which is gone.
func TestLongjmpOutOfPlainSpans(t *testing.T) {
	const n = 5
	for _, mode := range attachModes {
		for _, usdt := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/usdt=%v", mode.name, usdt), func(t *testing.T) {
				spans := []config.Span{
					{Name: "ja", Function: "ja"}, {Name: "jb", Function: "jb"}, {Name: "jc", Function: "jc"},
					{Name: "after", Function: "after", Attributes: map[string]string{"i": "arg0:s32"}},
					{Name: "leaf", Function: "leaf", Attributes: map[string]string{"i": "arg0:s32"}},
				}
				if usdt {
					spans = append(spans, config.Span{Name: "jop", Entry: "usdt:exactness:jop__start", Exit: "usdt:exactness:jop__done"})
				}
				e := openExactness(t, spans, nil, mode.perLocation, 0)
				for _, s := range spans {
					assertPlain(t, e.tr, e.pl, spanIndex(t, e.pl, s.Name), e.tr.plain)
				}
				e.ask("jump %d", n)
				st, err := e.tr.Stats()
				require.NoError(t, err)
				unwound := []string{"ja", "jb", "jc"}
				if usdt {
					unwound = append(unwound, "jop")
				}
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
				require.Len(t, recs, 2*n, "after and leaf spans")
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
