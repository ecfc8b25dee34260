package receiver

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/otel-uprobe/uprobereceiver/harness/ctxfixture"
	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/threadctx"
)

// published returns the ids testdata/threadctx publishes as ids(seed, i).
func published(seed, i int) (pcommon.TraceID, pcommon.SpanID) {
	var tr pcommon.TraceID
	var sp pcommon.SpanID
	for b := range 12 {
		tr[b] = byte(seed + 7*b + 1)
	}
	binary.BigEndian.PutUint32(tr[12:], uint32(i))
	for b := range 6 {
		sp[b] = byte(3*seed + 13*b + 0x55)
	}
	binary.BigEndian.PutUint16(sp[6:], uint16(i))
	return tr, sp
}

// ctxTargets traces the fixture's functions; carried's argument is a
// traceparent carrier.
func ctxTargets(app string, tc *config.ThreadContext) []config.Target {
	return []config.Target{{
		Path: app, ThreadContext: tc,
		Spans: []config.Span{
			{Name: "probed", Function: "probed"},
			{Name: "outer", Function: "outer"},
			{Name: "inner", Function: "inner"},
			{Name: "carried", Function: "carried", Attributes: map[string]string{"traceparent": "arg0:string"}, TraceContext: "traceparent"},
		},
	}}
}

// lookups follows the receiver's thread-context lookups of one process.
type lookups chan string

func watchLookups(s started, pid int) lookups {
	ch := make(lookups, 64)
	f := func(p uint32, result string, _ threadctx.Access) {
		if int(p) == pid {
			select {
			case ch <- result:
			default:
			}
		}
	}
	s.rcv.threads.looked.Store(&f)
	return ch
}

// await makes probed calls (one each time, so that the engine asks) until
// a lookup of the process gives one of results, and returns it and the
// calls made. The engine asks again at most every 100 ms.
func (l lookups) await(t *testing.T, p *testutil.Program, results ...string) (string, int) {
	t.Helper()
	calls := 0
	for range 50 {
		p.Ask("call 1", "called 1")
		calls++
		timeout := time.After(300 * time.Millisecond)
		for waiting := true; waiting; {
			select {
			case r := <-l:
				for _, want := range results {
					if r == want {
						return r, calls
					}
				}
			case <-timeout:
				waiting = false
			}
		}
	}
	t.Fatalf("no lookup gave %v", results)
	return "", calls
}

// byName groups spans by name.
func byName(spans []flatSpan) map[string][]flatSpan {
	out := map[string][]flatSpan{}
	for _, sp := range spans {
		out[sp.Name()] = append(out[sp.Name()], sp)
	}
	return out
}

// threadContextOutcomes returns the receiver's thread-context outcomes.
func threadContextOutcomes(t *testing.T, s started) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	m, err := s.telemetry.GetMetric("otelcol_receiver_uprobe_thread_contexts")
	if err != nil {
		return out
	}
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		v, _ := dp.Attributes.Value("thread_context.outcome")
		out[v.AsString()] = dp.Value
	}
	return out
}

// Probe spans join the trace the traced thread published (OTEP 4947), in
// every place the SDK's variable may live: the executable (static TLS),
// a library with TLSDESC, with the legacy dialect, with initial-exec, and
// a library loaded with dlopen after the process started (both dialects).
// In each: N calls under distinct contexts give N spans with exactly those
// trace and parent ids; N calls with none, or while the record is being
// rewritten (valid = 0), give spans parented on nothing published; two
// threads at once each get their own thread's contexts; nested probe
// spans stay under their probe parent; a carrier's traceparent wins for
// the spans it covers; a context whose trace is not sampled records
// nothing.
func TestThreadContext(t *testing.T) {
	testutil.RequireRoot(t)
	n := testutil.Scaled(50, 10)
	for _, v := range ctxfixture.Variants {
		t.Run(v.Name, func(t *testing.T) {
			app := testutil.BuildThreadCtx(t, v.Name)
			p := testutil.StartProgram(t, app, "ready")
			s := startReceiver(t, ctxTargets(app, nil))
			l := watchLookups(s, p.PID)
			warmup := 0
			if v.DLOpen {
				_, calls := l.await(t, p, "none")
				warmup += calls
				p.Ask("open", "opened")
			}
			found, calls := l.await(t, p, "static", "dtv")
			warmup += calls
			assert.Equal(t, map[bool]string{true: "dtv", false: "static"}[v.Model == "gnu"], found)

			p.Ask(fmt.Sprintf("ctx %d 10 1", n), "ctx ")
			p.Ask(fmt.Sprintf("call %d", n), "called ")
			p.Ask(fmt.Sprintf("threads %d 20", n), "threads ")
			p.Ask(fmt.Sprintf("torn %d 30", n), "torn ")
			p.Ask(fmt.Sprintf("nest %d 40", n), "nest ")
			p.Ask(fmt.Sprintf("carrier %d 50", n), "carrier ")
			p.Ask(fmt.Sprintf("ctx %d 60 0", n), "ctx ")
			require.NoError(t, s.rcv.Shutdown(context.Background()))

			spans := byName(allSpans(s.traces))
			type ids struct {
				trace  pcommon.TraceID
				parent pcommon.SpanID
			}
			seeds := map[ids][2]int{} // published ids → seed, call
			for _, seed := range []int{10, 20, 21, 30, 40, 50, 51, 60} {
				for i := range n + 1 {
					tr, sp := published(seed, i)
					seeds[ids{tr, sp}] = [2]int{seed, i}
				}
			}
			traces := map[pcommon.TraceID]bool{}
			for k := range seeds {
				traces[k.trace] = true
			}
			got := map[int]map[int]bool{} // seed → calls seen
			tidSeed := map[int64]int{}
			var unparented int
			for _, sp := range spans["probed"] {
				k := ids{sp.TraceID(), sp.ParentSpanID()}
				if si, ok := seeds[k]; ok {
					if got[si[0]] == nil {
						got[si[0]] = map[int]bool{}
					}
					assert.False(t, got[si[0]][si[1]], "one span for context %v", si)
					got[si[0]][si[1]] = true
					assert.Equal(t, uint32(0x301), sp.Flags(), "sampled, remote parent")
					if si[0] == 20 || si[0] == 21 {
						tid := attrInt(t, sp.Attributes(), "thread.id")
						if prev, ok := tidSeed[tid]; ok {
							assert.Equal(t, prev, si[0], "thread %d's spans are under its own contexts", tid)
						}
						tidSeed[tid] = si[0]
					}
					continue
				}
				if sp.ParentSpanID().IsEmpty() {
					assert.False(t, traces[sp.TraceID()], "a span without context is in no published trace")
					unparented++
				}
			}
			for _, seed := range []int{10, 20, 21} {
				assert.Len(t, got[seed], n, "spans under the contexts of seed %d", seed)
			}
			assert.Len(t, tidSeed, 2, "two threads")
			assert.Empty(t, got[30], "no context is taken while the record is being rewritten")
			assert.Empty(t, got[60], "an unsampled context's trace is not recorded")
			assert.Equal(t, warmup+2*n, unparented, "the calls without context (and those made while the record was rewritten)")

			// Nested probe spans stay under their probe parent.
			require.Len(t, spans["outer"], n)
			require.Len(t, spans["inner"], 2*n)
			outers := map[pcommon.SpanID]flatSpan{}
			for _, o := range spans["outer"] {
				si, ok := seeds[ids{o.TraceID(), o.ParentSpanID()}]
				require.True(t, ok && si[0] == 40, "outer under its thread context")
				outers[o.SpanID()] = o
			}
			for _, in := range spans["inner"] {
				o, ok := outers[in.ParentSpanID()]
				require.True(t, ok, "inner under an outer span")
				assert.Equal(t, o.TraceID(), in.TraceID())
			}

			// The carrier's traceparent wins for the spans it covers.
			require.Len(t, spans["carried"], n)
			carried := map[pcommon.SpanID]bool{}
			for _, c := range spans["carried"] {
				si, ok := seeds[ids{c.TraceID(), c.ParentSpanID()}]
				require.True(t, ok && si[0] == 51, "carried under its traceparent, not the thread's context")
				carried[c.SpanID()] = true
			}
			assert.Len(t, got[51], 0)
			nestedInCarrier := 0
			for _, sp := range spans["probed"] {
				if carried[sp.ParentSpanID()] {
					_, tr := seeds[ids{sp.TraceID(), pcommon.SpanID{}}]
					assert.False(t, tr)
					nestedInCarrier++
				}
			}
			assert.Equal(t, n, nestedInCarrier)

			outcomes := threadContextOutcomes(t, s)
			assert.Equal(t, int64(6*n), outcomes["read"], "ctx, two threads, nest, carrier, unsampled ctx")
			assert.Zero(t, outcomes["invalid"])
			assert.Zero(t, outcomes["unreadable"])
			assert.GreaterOrEqual(t, outcomes["no_context"], int64(2*n))
		})
	}
}

// With thread_context.attributes, the context's attributes, named through
// the process context's key map (OTEP 4719), go on the span that is the
// application span's child; thread_context.enabled: false leaves the
// thread's context alone.
func TestThreadContextAttributesAndDisabled(t *testing.T) {
	testutil.RequireRoot(t)
	n := testutil.Scaled(20, 5)
	app := testutil.BuildThreadCtx(t, "gnu2")
	p := testutil.StartProgram(t, app, "ready")
	s := startReceiver(t, ctxTargets(app, &config.ThreadContext{Attributes: true}))
	l := watchLookups(s, p.PID)
	p.Ask("attrs 1 5", "attrs ") // publishes the process context before its first span
	l.await(t, p, "static")
	p.Ask(fmt.Sprintf("attrs %d 70", n), "attrs ")
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	seen := 0
	for _, sp := range byName(allSpans(s.traces))["probed"] {
		for i := range n {
			tr, ps := published(70, i)
			if sp.TraceID() != tr {
				continue
			}
			seen++
			assert.Equal(t, ps, sp.ParentSpanID())
			assert.Equal(t, "GET", attrStr(t, sp.Attributes(), "http.request.method"))
			assert.Equal(t, fmt.Sprintf("/r/%d", i), attrStr(t, sp.Attributes(), "http.route"))
		}
	}
	assert.Equal(t, n, seen)

	off := false
	p2 := testutil.StartProgram(t, app, "ready")
	s2 := startReceiver(t, ctxTargets(app, &config.ThreadContext{Enabled: &off}))
	p2.Ask(fmt.Sprintf("ctx %d 80 1", n), "ctx ")
	require.NoError(t, s2.rcv.Shutdown(context.Background()))
	probed := byName(allSpans(s2.traces))["probed"]
	require.Len(t, probed, n)
	for _, sp := range probed {
		assert.True(t, sp.ParentSpanID().IsEmpty(), "thread_context.enabled: false")
	}
	assert.Empty(t, threadContextOutcomes(t, s2))
}
