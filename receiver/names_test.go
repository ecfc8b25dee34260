package receiver

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
)

// namesCall is what handle_request(i) of testdata/names sees and returns.
type namesCall struct {
	id, count, total, ret int64
	path, name, flags     string
}

// namesExpect computes call i of "req N" as names.c makes it.
func namesExpect(i int) namesCall {
	flags := []int64{3, 4, 2}[i%3]
	c := namesCall{
		id: int64(100 + i), count: int64(i + 7), path: fmt.Sprintf("/item/%d", i), name: fmt.Sprintf("hdr-%d", i),
		flags: []string{"FLAG_READ|FLAG_WRITE", "FLAG_SYNC", "FLAG_WRITE"}[i%3],
	}
	c.total = int64(3*i)*2 + c.count + flags
	sum := c.total
	for _, b := range []byte(c.path) {
		sum += int64(b)
	}
	c.ret = c.total + sum%1000
	return c
}

// namesTargets reads handle_request by name, at its entry and return, and
// the local total at a line of it.
func namesTargets(b testutil.NamesBuild, t *testing.T) []config.Target {
	line := testutil.MarkerLine(t, b.Source, "total")
	return []config.Target{{Path: b.Program, Spans: []config.Span{
		{Function: "handle_request", Attributes: map[string]string{
			"id": "$req->id", "path": "$req->path", "len": "$req->hdr->len", "name": "$req->hdr->name",
			"flags": "$flags", "count": "$count", "hex": "$req->hdr->len:x16",
		}, ExitAttributes: map[string]string{"ret": "$return"}},
		{Name: "total", Entry: fmt.Sprintf("line:names.c:%d", line), Exit: "uretprobe:checksum",
			Attributes: map[string]string{"total": "$total", "params": "$$params"}, ExitAttributes: map[string]string{"sum": "$return"}},
	}}}
}

// checkNames checks the spans of "req n" against namesExpect.
func checkNames(t *testing.T, spans []flatSpan, n int) {
	t.Helper()
	byName := map[string][]flatSpan{}
	byID := map[pcommon.SpanID]flatSpan{}
	for _, sp := range spans {
		byName[sp.Name()] = append(byName[sp.Name()], sp)
		byID[sp.SpanID()] = sp
	}
	require.Len(t, byName["handle_request"], n, "a span per call, named after the function")
	require.Len(t, byName["total"], n, "a span per call from the line probe")
	seen := map[int64]bool{}
	for _, sp := range byName["handle_request"] {
		a := sp.Attributes()
		i := int(attrInt(t, a, "id") - 100)
		require.True(t, i >= 0 && i < n && !seen[int64(i)], "id %d", i+100)
		seen[int64(i)] = true
		want := namesExpect(i)
		assert.Equal(t, want.path, attrStr(t, a, "path"), "$req->path")
		assert.Equal(t, int64(3*i), attrInt(t, a, "len"), "$req->hdr->len")
		assert.Equal(t, fmt.Sprintf("0x%x", 3*i), attrStr(t, a, "hex"), "$req->hdr->len:x16")
		assert.Equal(t, want.name, attrStr(t, a, "name"), "$req->hdr->name")
		assert.Equal(t, want.flags, attrStr(t, a, "flags"), "$flags by enumerator names")
		assert.Equal(t, want.count, attrInt(t, a, "count"), "$count")
		assert.Equal(t, want.ret, attrInt(t, a, "ret"), "$return")
	}
	for _, sp := range byName["total"] {
		parent, ok := byID[sp.ParentSpanID()]
		require.True(t, ok, "the line's span nests in handle_request's")
		require.Equal(t, "handle_request", parent.Name())
		i := int(attrInt(t, parent.Attributes(), "id") - 100)
		want := namesExpect(i)
		a := sp.Attributes()
		assert.Equal(t, want.total, attrInt(t, a, "total"), "the local $total at the line, call %d", i)
		sum := want.total
		for _, b := range []byte(want.path) {
			sum += int64(b)
		}
		assert.Equal(t, sum, attrInt(t, a, "sum"), "checksum's $return")
		assert.Equal(t, want.flags, attrStr(t, a, "params.flags"), "$$params at the line")
		assert.Equal(t, want.count, attrInt(t, a, "params.count"), "$$params at the line")
	}
}

// C, -O0 and -O2, its debuginfo split off into a build-id tree: every value
// read by name is right on every call.
func TestNamesC(t *testing.T) {
	testutil.RequireRoot(t)
	const n = 30
	for _, opt := range []string{"-O0", "-O2"} {
		t.Run(opt, func(t *testing.T) {
			b := testutil.BuildNames(t, opt)
			prog := testutil.StartProgram(t, b.Program, "ready")
			cfg := createDefaultConfig()
			cfg.Targets = namesTargets(b, t)
			cfg.DebugDirectories = []string{b.DebugDir}
			s := startReceiverConfig(t, cfg)
			require.Equal(t, "build-id "+b.DebugFile, s.rcv.plan.Files[0].DebugInfo)
			answer := prog.Ask(fmt.Sprintf("req %d", n), "req ")
			require.NotContains(t, answer, "MISMATCH")
			require.NoError(t, s.rcv.Shutdown(context.Background()))
			checkNames(t, allSpans(s.traces), n)
		})
	}
}

// The debug file served by debuginfod (a few lines of HTTP here): fetched
// once, then read from the cache by the next receiver.
func TestNamesFromDebuginfod(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildNames(t, "-O2")
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if r.URL.Path != "/buildid/"+b.BuildID+"/debuginfo" {
			http.NotFound(w, r)
			return
		}
		http.ServeFile(w, r, b.DebugFile)
	}))
	defer srv.Close()
	t.Setenv("DEBUGINFOD_URLS", srv.URL)
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)

	prog := testutil.StartProgram(t, b.Program, "ready")
	for round := 1; round <= 2; round++ {
		cfg := createDefaultConfig()
		cfg.Targets = namesTargets(b, t)
		cfg.DebugDirectories = []string{} // none: only debuginfod has it
		s := startReceiverConfig(t, cfg)
		want := "debuginfod " + filepath.Join(cache, "otel-uprobe", "debuginfod", b.BuildID+".debug")
		require.Equal(t, want, s.rcv.plan.Files[0].DebugInfo, "round %d", round)
		prog.Ask("req 5", "req 5")
		require.NoError(t, s.rcv.Shutdown(context.Background()))
		checkNames(t, allSpans(s.traces), 5)
		assert.Equal(t, int64(1), requests.Load(), "round %d: one download, then the cache", round)
	}
	_, err := os.Stat(filepath.Join(cache, "otel-uprobe", "debuginfod", b.BuildID+".debug"))
	require.NoError(t, err)
}

// Go: struct fields through pointers ($r.URL.Path), a string parameter,
// the receiver's fields and $return, through Go's DWARF.
func TestNamesGo(t *testing.T) {
	testutil.RequireRoot(t)
	const n = 20
	bin := testutil.BuildGo(t, "names/goapp", false)
	prog := testutil.StartProgram(t, bin, "ready")
	s := startReceiver(t, []config.Target{{Path: bin, Spans: []config.Span{{
		Function: "main.(*Server).Handle",
		Attributes: map[string]string{
			"path": "$r.URL.Path", "id": "$r->ID", "method": "$r.Method", "tag": "$tag", "handled": "$s->Handled",
		},
		ExitAttributes: map[string]string{"ret": "$return"},
	}}}})
	require.Equal(t, "embedded", s.rcv.plan.Files[0].DebugInfo)
	prog.Ask(fmt.Sprintf("handle %d", n), "handle ")
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	spans := allSpans(s.traces)
	require.Len(t, spans, n)
	seen := map[int64]bool{}
	for _, sp := range spans {
		require.Equal(t, "main.(*Server).Handle", sp.Name())
		a := sp.Attributes()
		i := attrInt(t, a, "id") - 1000
		require.True(t, i >= 0 && i < n && !seen[i], "id %d", i+1000)
		seen[i] = true
		path := fmt.Sprintf("/go/%d", i)
		tag := fmt.Sprintf("t%d", i)
		assert.Equal(t, path, attrStr(t, a, "path"), "$r.URL.Path")
		assert.Equal(t, "GET", attrStr(t, a, "method"))
		assert.Equal(t, tag, attrStr(t, a, "tag"), "a string parameter")
		assert.Equal(t, i, attrInt(t, a, "handled"), "$s->Handled before the call")
		assert.Equal(t, int64(200+len(path))+(1000+i)%100+int64(len(tag)), attrInt(t, a, "ret"), "$return")
	}
}

// A pattern over the 50 functions of a call tree: one span per function,
// named after it, nested as the calls nest, with parameters by name.
func TestFunctionPatternCallTree(t *testing.T) {
	testutil.RequireRoot(t)
	const rounds = 3
	b := testutil.BuildNames(t, "-O2")
	prog := testutil.StartProgram(t, b.Program, "ready")
	cfg := createDefaultConfig()
	cfg.Targets = []config.Target{{Path: b.Program, Spans: []config.Span{{
		Function: "ct_*", SourceFile: "*/names/calltree.c",
		Attributes:     map[string]string{"depth": "$depth"},
		ExitAttributes: map[string]string{"ret": "$return"},
	}}}}
	cfg.DebugDirectories = []string{b.DebugDir}
	s := startReceiverConfig(t, cfg)
	require.Len(t, s.rcv.plan.Spans, 50, "one span definition per function")
	require.Empty(t, s.rcv.plan.Targets[0].Notes)
	prog.Ask(fmt.Sprintf("tree %d", rounds), "tree ")
	require.NoError(t, s.rcv.Shutdown(context.Background()))

	spans := allSpans(s.traces)
	require.Len(t, spans, 50*rounds)
	byID := map[pcommon.SpanID]flatSpan{}
	for _, sp := range spans {
		byID[sp.SpanID()] = sp
	}
	depth := func(k int) int {
		d := 0
		for ; k > 0; k = (k - 1) / 2 {
			d++
		}
		return d
	}
	perName := map[string]int{}
	traces := map[pcommon.TraceID]int{}
	for _, sp := range spans {
		var k int
		_, err := fmt.Sscanf(sp.Name(), "ct_%d", &k)
		require.NoError(t, err, "span named after its function: %q", sp.Name())
		perName[sp.Name()]++
		traces[sp.TraceID()]++
		assert.Equal(t, int64(depth(k)), attrInt(t, sp.Attributes(), "depth"), sp.Name())
		if k == 0 {
			assert.True(t, sp.ParentSpanID().IsEmpty(), "ct_00 is the root")
			continue
		}
		parent, ok := byID[sp.ParentSpanID()]
		require.True(t, ok, "the parent of %s was recorded", sp.Name())
		assert.Equal(t, fmt.Sprintf("ct_%02d", (k-1)/2), parent.Name(), "%s nests in its caller", sp.Name())
		assert.Equal(t, parent.TraceID(), sp.TraceID())
		assert.LessOrEqual(t, parent.StartTimestamp(), sp.StartTimestamp())
		assert.GreaterOrEqual(t, parent.EndTimestamp(), sp.EndTimestamp())
		assert.True(t, strings.HasPrefix(sp.Name(), "ct_"))
	}
	require.Len(t, perName, 50)
	for name, c := range perName {
		assert.Equal(t, rounds, c, name)
	}
	require.Len(t, traces, rounds, "one trace per call of ct_00")
}
