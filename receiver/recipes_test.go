package receiver

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
)

// The recipes (internal/recipe) on the real programs of this machine,
// each test scoped to the processes it starts (pid: or a process:
// selector), so that other tests' programs do not change its counts.

// spansNamed returns the spans of that name.
func spansNamed(spans []flatSpan, name string) []flatSpan {
	var out []flatSpan
	for _, sp := range spans {
		if sp.Name() == name {
			out = append(out, sp)
		}
	}
	return out
}

// countBy counts spans by the text of one attribute ("-" when absent).
func countBy(spans []flatSpan, key string) map[string]int {
	out := map[string]int{}
	for _, sp := range spans {
		v, ok := sp.Attributes().Get(key)
		if !ok {
			out["-"]++
			continue
		}
		out[v.AsString()]++
	}
	return out
}

// ownHistogram returns the points of a histogram metric of the receiver's
// own name (a span's metric:), by their attributes as "k=v,k=v".
func ownHistogram(md pmetric.Metrics, name string) map[string]pmetric.ExponentialHistogramDataPoint {
	out := map[string]pmetric.ExponentialHistogramDataPoint{}
	eachMetric(md, name, func(m pmetric.Metric) {
		for p := 0; p < m.ExponentialHistogram().DataPoints().Len(); p++ {
			dp := m.ExponentialHistogram().DataPoints().At(p)
			out[attrText(dp.Attributes())] = dp
		}
	})
	return out
}

// ownSum returns the points of a sum metric of the receiver's own name (a
// counter's metric:), by their attributes as "k=v,k=v".
func ownSum(md pmetric.Metrics, name string) map[string]int64 {
	out := map[string]int64{}
	eachMetric(md, name, func(m pmetric.Metric) {
		for p := 0; p < m.Sum().DataPoints().Len(); p++ {
			dp := m.Sum().DataPoints().At(p)
			out[attrText(dp.Attributes())] += dp.IntValue()
		}
	})
	return out
}

func eachMetric(md pmetric.Metrics, name string, fn func(pmetric.Metric)) {
	for i := 0; i < md.ResourceMetrics().Len(); i++ {
		sms := md.ResourceMetrics().At(i).ScopeMetrics()
		for j := 0; j < sms.Len(); j++ {
			ms := sms.At(j).Metrics()
			for k := 0; k < ms.Len(); k++ {
				if ms.At(k).Name() == name {
					fn(ms.At(k))
				}
			}
		}
	}
}

func attrText(m pcommon.Map) string {
	var parts []string
	for k, v := range m.All() {
		parts = append(parts, k+"="+v.AsString())
	}
	sortStrings(parts)
	return strings.Join(parts, ",")
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// timePerCall asks a test program for its time per call ("time NS").
func timePerCall(t *testing.T, p *testutil.Program, cmd string) int {
	t.Helper()
	line := p.Ask(cmd, "time ")
	n, err := strconv.Atoi(strings.TrimPrefix(line, "time "))
	require.NoError(t, err, line)
	return n
}

// siteClasses lists how the kernel runs each probe of the receiver's
// plan: "probe: class" lines, for the recipes' documented costs.
func siteClasses(s started) []string {
	var out []string
	seen := map[string]bool{}
	for _, a := range s.rcv.plan.Attachments {
		line := fmt.Sprintf("%s: %s", s.rcv.plan.Probes[a.Probe].Ref, a.Class)
		if !seen[line] {
			seen[line] = true
			out = append(out, line)
		}
	}
	sortStrings(out)
	return out
}

// TestRecipeDNS: recipe dns on the C library of a program that looks up
// known names (3 × localhost through /etc/hosts, 2 × a numeric address, 2
// × a name refused as not numeric, 2 × gethostbyname, 1 ×
// gethostbyname2): a span per lookup with the name, EAI_NONAME as
// error.type, and dns.lookup.duration by name and error.
func TestRecipeDNS(t *testing.T) {
	testutil.RequireRoot(t)
	prog := testutil.StartProgram(t, testutil.BuildC(t, "recipeclib"), "ready")
	before := timePerCall(t, prog, "time-gai 2000 127.0.0.1")
	s := startReceiver(t, []config.Target{{Recipe: "dns", PID: prog.PID}})
	t.Logf("site classes: %s", strings.Join(siteClasses(s), "; "))
	after := timePerCall(t, prog, "time-gai 2000 127.0.0.1")
	t.Logf("cost per numeric getaddrinfo: %d ns untraced, %d ns traced: %d ns added", before, after, after-before)
	for range 3 {
		prog.Ask("gai localhost", "gai 0")
	}
	for range 2 {
		prog.Ask("gai 127.0.0.1 numeric", "gai 0")
		prog.Ask("gai not-a-number numeric", "gai -2")
		prog.Ask("ghbn localhost", "ghbn 1")
	}
	prog.Ask("ghbn2 localhost", "ghbn2 1")
	require.NoError(t, s.rcv.Shutdown(context.Background()))

	spans := allSpans(s.traces)
	gai := spansNamed(spans, "getaddrinfo")
	timed := 2 * 2000 // the timed calls before the lookups, traced once
	assert.Equal(t, map[string]int{"localhost": 3, "127.0.0.1": 2 + timed/2, "not-a-number": 2}, countBy(gai, "dns.question.name"))
	assert.Equal(t, map[string]int{"-": 3 + 2 + timed/2, "EAI_NONAME": 2}, countBy(gai, "error.type"), "error.type only on failures")
	for _, sp := range gai {
		assert.Equal(t, ptrace.SpanKindClient, sp.Kind())
		failed := sp.Attributes().AsRaw()["dns.question.name"] == "not-a-number"
		assert.Equal(t, failed, sp.Status().Code() == ptrace.StatusCodeError, "status error on failures")
		assert.Equal(t, int64(prog.PID), attrInt(t, sp.resource, "process.pid"))
	}
	assert.Equal(t, map[string]int{"localhost": 2}, countBy(spansNamed(spans, "gethostbyname"), "dns.question.name"))
	assert.Equal(t, map[string]int{"localhost": 1}, countBy(spansNamed(spans, "gethostbyname2"), "dns.question.name"))
	// gethostbyname calls gethostbyname_r, gethostbyname2 gethostbyname2_r.
	byID := map[pcommon.SpanID]flatSpan{}
	for _, sp := range spans {
		byID[sp.SpanID()] = sp
	}
	for name, parent := range map[string]string{"gethostbyname_r": "gethostbyname", "gethostbyname2_r": "gethostbyname2"} {
		inner := spansNamed(spans, name)
		require.Len(t, inner, len(spansNamed(spans, parent)), name)
		for _, sp := range inner {
			assert.Equal(t, parent, byID[sp.ParentSpanID()].Name(), "%s inside %s", name, parent)
			assert.Equal(t, "localhost", attrStr(t, sp.Attributes(), "dns.question.name"))
		}
	}

	lookups := ownHistogram(lastMetrics(t, s), "dns.lookup.duration")
	counts := map[string]uint64{}
	for attrs, dp := range lookups {
		counts[attrs] = dp.Count()
		assert.Greater(t, dp.Sum(), 0.0, "durations in seconds")
		assert.Less(t, dp.Sum()/float64(dp.Count()), 1.0, "a local lookup takes less than a second")
	}
	assert.Equal(t, map[string]uint64{
		"dns.question.name=localhost":                          3 + 2 + 1, // getaddrinfo, gethostbyname, gethostbyname2
		"dns.question.name=127.0.0.1":                          2 + uint64(timed/2),
		"dns.question.name=not-a-number,error.type=EAI_NONAME": 2,
	}, counts)
}

// TestRecipeMalloc: recipe malloc on a program that allocates 5 × 3 MB
// and 100 × 64 bytes and nothing else while traced: 5 malloc.large spans
// of 3,000,000 bytes (min_size 1 MiB), and a size histogram of exactly
// 105 values in the buckets of 64 and 3,000,000.
func TestRecipeMalloc(t *testing.T) {
	testutil.RequireRoot(t)
	prog := testutil.StartProgram(t, testutil.BuildC(t, "recipeclib"), "ready")
	before := timePerCall(t, prog, "time-malloc 200000 64")
	timed := startReceiver(t, []config.Target{{Recipe: "malloc", PID: prog.PID}})
	t.Logf("site classes: %s", strings.Join(siteClasses(timed), "; "))
	after := timePerCall(t, prog, "time-malloc 200000 64")
	t.Logf("cost per malloc (64 bytes, below min_size) and free: %d ns untraced, %d ns traced: %d ns added", before, after, after-before)
	require.NoError(t, timed.rcv.Shutdown(context.Background()))

	s := startReceiver(t, []config.Target{{Recipe: "malloc", PID: prog.PID}})
	prog.Ask("malloc 5 3000000", "malloc 5")
	prog.Ask("malloc 100 64", "malloc 100")
	require.NoError(t, s.rcv.Shutdown(context.Background()))

	large := spansNamed(allSpans(s.traces), "malloc.large")
	require.Len(t, large, 5)
	for _, sp := range large {
		assert.Equal(t, int64(3000000), attrInt(t, sp.Attributes(), "malloc.size"))
		assert.NotEqual(t, "0x0", attrStr(t, sp.Attributes(), "malloc.address"))
		assert.Equal(t, ptrace.StatusCodeUnset, sp.Status().Code())
	}
	last := lastMetrics(t, s)
	hits := sumPoints(last, "uprobe.probe.hits")
	assert.Equal(t, int64(105), hits["uprobe:malloc"])
	assert.Zero(t, hits["uprobe:calloc"])
	assert.Zero(t, hits["uprobe:realloc"])
	dp, ok := valuePoints(last)["uprobe:malloc"]
	require.True(t, ok, "the size histogram")
	assert.Equal(t, uint64(105), dp.Count())
	assert.Equal(t, float64(5*3000000+100*64), dp.Sum())
	// Bucket i of scale 0 is (2^i, 2^(i+1)]: 64 is in bucket 5, 3,000,000
	// (between 2^21 and 2^22) in bucket 21.
	buckets := dp.Positive().BucketCounts().AsRaw()
	off := int(dp.Positive().Offset())
	require.Equal(t, 5, off)
	assert.Equal(t, uint64(100), buckets[5-off])
	assert.Equal(t, uint64(5), buckets[21-off])
}

// tlsProgram builds testdata/recipetls and starts it with a fresh
// self-signed certificate.
func tlsProgram(t *testing.T) *testutil.Program {
	t.Helper()
	requireFile(t, "/usr/bin/openssl", "/usr/include/openssl/ssl.h")
	dir := t.TempDir()
	cert, key := dir+"/cert.pem", dir+"/key.pem"
	out, err := exec.Command("/usr/bin/openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
		"-nodes", "-keyout", key, "-out", cert, "-subj", "/CN=localhost", "-days", "1").CombinedOutput()
	require.NoError(t, err, "%s", out)
	bin := testutil.BuildC(t, "recipetls", "-pthread", "-Wl,--no-as-needed", "-lssl", "-lcrypto")
	return testutil.StartCommand(t, "ready", bin, cert, key)
}

// TestRecipeTLS: recipe tls on OpenSSL 3's libssl, in a program whose
// client and server threads talk TLS 1.3 over a socketpair: 2 handshakes
// (tls.connect and tls.accept, each with its tls.handshake), 5 SSL_write
// calls of known sizes (3 × 100, 2 × 1,000 bytes) read by 5 SSL_read
// calls, 4 SSL_write_ex of 50 bytes read by 4 SSL_read_ex; then with
// plaintext_bytes: 16, writes of 100 and 10 bytes show their first 16 and
// 10 bytes: never more than the write.
func TestRecipeTLS(t *testing.T) {
	testutil.RequireRoot(t)
	prog := tlsProgram(t)
	prog.Ask("connect", "connected")
	before := timePerCall(t, prog, "time 2000 100")
	s := startReceiver(t, []config.Target{{Recipe: "tls", PID: prog.PID}})
	t.Logf("site classes: %s", strings.Join(siteClasses(s), "; "))
	after := timePerCall(t, prog, "time 2000 100")
	t.Logf("cost per 100-byte SSL_write and its SSL_read: %d ns untraced, %d ns traced: %d ns added", before, after, after-before)
	prog.Ask("connect", "connected")
	prog.Ask("connect", "connected")
	prog.Ask("write 3 100", "wrote 3")
	prog.Ask("write 2 1000", "wrote 2")
	prog.Ask("writeex 4 50", "wrote 4")
	require.NoError(t, s.rcv.Shutdown(context.Background()))

	spans := allSpans(s.traces)
	byID := map[pcommon.SpanID]flatSpan{}
	for _, sp := range spans {
		byID[sp.SpanID()] = sp
		assert.Equal(t, int64(prog.PID), attrInt(t, sp.resource, "process.pid"))
		assert.NotEqual(t, ptrace.StatusCodeError, sp.Status().Code(), "%s succeeded", sp.Name())
	}
	const timed = 2000
	assert.Equal(t, map[string]int{"100": 3 + timed, "1000": 2}, countBy(spansNamed(spans, "tls.write"), "tls.write.size"))
	assert.Equal(t, map[string]int{"100": 3 + timed, "1000": 2}, countBy(spansNamed(spans, "tls.write"), "tls.write.bytes"))
	assert.Equal(t, map[string]int{"65536": 5 + timed}, countBy(spansNamed(spans, "tls.read"), "tls.read.size"))
	assert.Equal(t, map[string]int{"100": 3 + timed, "1000": 2}, countBy(spansNamed(spans, "tls.read"), "tls.read.bytes"))
	assert.Equal(t, map[string]int{"50": 4}, countBy(spansNamed(spans, "tls.write_ex"), "tls.write.size"))
	assert.Equal(t, map[string]int{"65536": 4}, countBy(spansNamed(spans, "tls.read_ex"), "tls.read.size"))
	connects, accepts := spansNamed(spans, "tls.connect"), spansNamed(spans, "tls.accept")
	require.Len(t, connects, 2)
	require.Len(t, accepts, 2)
	for _, sp := range connects {
		assert.Equal(t, ptrace.SpanKindClient, sp.Kind())
	}
	for _, sp := range accepts {
		assert.Equal(t, ptrace.SpanKindServer, sp.Kind())
	}
	handshakes := spansNamed(spans, "tls.handshake")
	require.Len(t, handshakes, 4)
	assert.Equal(t, map[string]int{"tls.connect": 2, "tls.accept": 2}, func() map[string]int {
		out := map[string]int{}
		for _, sp := range handshakes {
			out[byID[sp.ParentSpanID()].Name()]++
		}
		return out
	}(), "each handshake inside its SSL_connect or SSL_accept")
	for _, sp := range spans {
		_, ok := sp.Attributes().Get("tls.plaintext")
		assert.False(t, ok, "no plaintext unless asked for")
	}

	// plaintext_bytes: 16.
	s = startReceiver(t, []config.Target{{Recipe: "tls", PID: prog.PID, RecipeOptions: map[string]any{"plaintext_bytes": 16}}})
	prog.Ask("write 2 100", "wrote 2")
	prog.Ask("write 1 10", "wrote 1")
	prog.Ask("writeex 1 5", "wrote 1")
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	plain := map[string]int{}
	for _, name := range []string{"tls.write", "tls.write_ex"} {
		for _, sp := range spansNamed(allSpans(s.traces), name) {
			v, ok := sp.Attributes().Get("tls.plaintext")
			require.True(t, ok)
			require.Equal(t, pcommon.ValueTypeBytes, v.Type())
			plain[name+" "+string(v.Bytes().AsRaw())]++
		}
	}
	assert.Equal(t, map[string]int{"tls.write 0123456789012345": 2, "tls.write 0123456789": 1, "tls.write_ex 01234": 1}, plain)
}

// recipePython is the script of TestRecipePython: known imports, three
// full collections, f called 50 times from Python code (through g) and 7
// times from C (map), a generator resumed by next, throw and close, then a
// timed loop of h called from C; it ends with os._exit, so that the
// interpreter's own final collection does not run.
const recipePython = `import gc, sys, os, time
import json, decimal, colorsys
try:
    import no_such_module_recipe
except ImportError:
    pass
for _ in range(3):
    gc.collect(2)
def f(x):
    return x + 1
def g(n):
    s = 0
    for i in range(n):
        s += f(i)
    return s
g(50)
list(map(f, range(7)))
def thrower():
    try:
        yield 1  # line 20
    except ValueError:
        yield 2  # line 22
t = thrower(); next(t); t.throw(ValueError); t.close()
def h(x):
    return x
n = int(sys.argv[1])
t0 = time.perf_counter_ns()
list(map(h, range(n)))
sys.stdout.write("time %d\n" % ((time.perf_counter_ns() - t0) // n))
sys.stdout.flush()
os._exit(0)
`

// TestRecipePython: recipe python (functions: true) on Debian's
// python3.11, scoped to the interpreter it starts (a process: selector on
// the script's name): one import span per known module (a failed import
// is an error), three generation-2 collections (spans and
// cpython.gc.collections), and function spans exactly where CPython 3.11.2
// fires function__entry: where a generator is resumed by throw() or
// close() (2 for thrower, at the yields it was suspended at), never for a
// call, from Python code (f through g) or from C (f, h through map), whose
// returns fire function__return alone (unmatched).
func TestRecipePython(t *testing.T) {
	testutil.RequireRoot(t)
	requireFile(t, python)
	script := filepath.Join(t.TempDir(), fmt.Sprintf("recipe_python_%d.py", os.Getpid()))
	require.NoError(t, os.WriteFile(script, []byte(recipePython), 0o644))
	const calls = 20000
	run := func() int {
		out, err := exec.Command(python, "-I", "-S", script, strconv.Itoa(calls)).CombinedOutput()
		require.NoError(t, err, "%s", out)
		n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(string(out), "time ")))
		require.NoError(t, err, "%s", out)
		return n
	}
	before := run()
	sel := &procfs.Selector{CommandLine: regexp.QuoteMeta(script)}
	s := startReceiver(t, []config.Target{{Recipe: "python", Process: sel, RecipeOptions: map[string]any{"functions": true}}})
	t.Logf("site classes: %s", strings.Join(siteClasses(s), "; "))
	after := run()
	t.Logf("cost per Python function called from C (map) with functions: true: %d ns untraced, %d ns traced: %d ns added", before, after, after-before)
	unmatched := spanStats(t, s, "python.function").Unmatched
	require.NoError(t, s.rcv.Shutdown(context.Background()))

	spans := allSpans(s.traces)
	imports := map[string]string{}
	for _, sp := range spansNamed(spans, "python.import") {
		name := attrStr(t, sp.Attributes(), "python.import.module")
		if _, seen := imports[name]; seen {
			t.Errorf("module %s imported twice", name)
		}
		imports[name] = fmt.Sprintf("found=%d status=%s", attrInt(t, sp.Attributes(), "python.import.found"), sp.Status().Code())
	}
	for _, m := range []string{"json", "json.decoder", "decimal", "colorsys", "gc"} {
		assert.Equal(t, "found=1 status=Unset", imports[m], m)
	}
	assert.Equal(t, "found=0 status=Error", imports["no_such_module_recipe"])

	gens := countBy(spansNamed(spans, "python.gc"), "cpython.gc.generation")
	assert.Equal(t, 3, gens["2"], "gc.collect(2) three times, no final collection")
	collections := ownSum(lastMetrics(t, s), "cpython.gc.collections")
	gcDurations := durations(lastMetrics(t, s))["python.gc"]
	assert.Equal(t, uint64(len(spansNamed(spans, "python.gc"))), gcDurations.Count(), "the collections' durations, counted in the kernel")
	assert.Equal(t, int64(3), collections["cpython.gc.generation=2"])
	for g := range 2 {
		key := fmt.Sprintf("cpython.gc.generation=%d", g)
		assert.Equal(t, int64(gens[strconv.Itoa(g)]), collections[key], "the kernel's count of generation %d is the spans'", g)
	}

	var mine []flatSpan
	for _, sp := range spansNamed(spans, "python.function") {
		if attrStr(t, sp.Attributes(), "code.file.path") == script {
			mine = append(mine, sp)
		}
	}
	assert.Equal(t, map[string]int{"thrower": 2}, countBy(mine, "code.function.name"), "no span for f, g or h: calls fire no function__entry")
	assert.Equal(t, map[string]int{"20": 1, "22": 1}, countBy(mine, "code.line.number"), "entered at the yields throw() and close() resumed")
	assert.GreaterOrEqual(t, unmatched, uint64(calls+50+7), "every return of h, f and g fired function__return alone")
}

// waitFor polls cond until it holds (PostgreSQL says when a lock is taken
// or awaited only through its views), failing after a minute.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// pgbenchLatency runs pgbench's SELECT 1 (simple protocol, one client,
// n transactions) three times and returns the lowest average latency, in
// microseconds.
func pgbenchLatency(t *testing.T, pg *postgresServer, n int) float64 {
	t.Helper()
	best := math.Inf(1)
	for range 3 {
		best = min(best, pgbenchOnce(t, pg, n))
	}
	return best
}

func pgbenchOnce(t *testing.T, pg *postgresServer, n int) float64 {
	t.Helper()
	script := filepath.Join(t.TempDir(), "select1.sql")
	require.NoError(t, os.WriteFile(script, []byte("SELECT 1;\n"), 0o644))
	out, err := exec.Command("/usr/lib/postgresql/15/bin/pgbench", "-h", pg.socketDir, "-U", "postgres", "-n", "-c", "1",
		"-t", strconv.Itoa(n), "-M", "simple", "-f", script, "postgres").CombinedOutput()
	require.NoError(t, err, "%s", out)
	m := regexp.MustCompile(`latency average = ([0-9.]+) ms`).FindSubmatch(out)
	require.NotNil(t, m, "%s", out)
	ms, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(t, err)
	return ms * 1000
}

// TestRecipePostgres: recipe postgresql (path: the name postgres) on
// PostgreSQL 15, scoped to the server it starts (its postmaster's command
// line, inherited by its backends): a span per statement with its text,
// operation and db.system.name; the transaction of each statement outside
// BEGIN inside it; a failed statement closed by its transaction's abort,
// as an error; a sqlcommenter comment putting a statement in its
// application's trace; a lock wait of known mode and relation under the
// statement that waited.
func TestRecipePostgres(t *testing.T) {
	testutil.RequireRoot(t)
	pg := startPostgres(t)
	requireFile(t, "/usr/lib/postgresql/15/bin/pgbench")
	before := pgbenchLatency(t, pg, 2000)
	sel := &procfs.Selector{CommandLine: regexp.QuoteMeta(pg.dir)}
	s := startReceiver(t, []config.Target{{Recipe: "postgresql", Process: sel}})
	t.Logf("site classes: %s", strings.Join(siteClasses(s), "; "))
	after := pgbenchLatency(t, pg, 2000)
	t.Logf("cost per SELECT 1 (pgbench, simple protocol): %.1f us untraced, %.1f us traced: %.1f us added", before, after, after-before)

	const (
		create  = "CREATE TABLE recipe_t (id int)"
		insert  = "INSERT INTO recipe_t VALUES (1), (2)"
		answer  = "SELECT 6 * 7 AS answer"
		failing = "SELECT 1 / 0 AS recipe_failure"
		trace   = "4bf92f3577b34da6a3ce929d0e0e4736"
		parent  = "00f067aa0ba902b7"
		waiting = "SELECT count(*) FROM recipe_t /* waits */"
	)
	commented := "SELECT 2 AS commented /*traceparent='00-" + trace + "-" + parent + "-01'*/"
	pg.query(t, create)
	pg.query(t, insert)
	for range 3 {
		require.Equal(t, "42", pg.query(t, answer))
	}
	out, err := exec.Command(psql, "-h", pg.socketDir, "-U", "postgres", "-d", "postgres", "-At", "-c", failing).CombinedOutput()
	require.Error(t, err, "%s", out)
	require.Contains(t, string(out), "division by zero")
	require.Equal(t, "2", pg.query(t, commented))
	relation := pg.query(t, "SELECT 'recipe_t'::regclass::oid")

	// A lock wait: session A holds an ACCESS EXCLUSIVE lock in a
	// transaction block while session B's SELECT waits for it.
	a := exec.Command(psql, "-h", pg.socketDir, "-U", "postgres", "-d", "postgres", "-At")
	stdin, err := a.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, a.Start())
	t.Cleanup(func() { _ = a.Process.Kill(); _ = a.Wait() })
	fmt.Fprintln(stdin, "BEGIN;")
	fmt.Fprintln(stdin, "LOCK TABLE recipe_t IN ACCESS EXCLUSIVE MODE;")
	locks := "SELECT count(*) FROM pg_locks WHERE relation = " + relation + " AND "
	waitFor(t, "session A's lock", func() bool { return pg.query(t, locks+"granted /* poll */") == "1" })
	b := exec.Command(psql, "-h", pg.socketDir, "-U", "postgres", "-d", "postgres", "-At", "-c", waiting)
	require.NoError(t, b.Start())
	waitFor(t, "session B's wait", func() bool { return pg.query(t, locks+"NOT granted /* poll */") == "1" })
	fmt.Fprintln(stdin, "COMMIT;")
	require.NoError(t, b.Wait(), "session B's SELECT ends once A commits")
	stdin.Close()
	require.NoError(t, a.Wait())
	require.NoError(t, s.rcv.Shutdown(context.Background()))

	spans := allSpans(s.traces)
	byID := map[pcommon.SpanID]flatSpan{}
	for _, sp := range spans {
		byID[sp.SpanID()] = sp
	}
	queries := map[string][]flatSpan{}
	for _, sp := range spansNamed(spans, "postgresql.query") {
		assert.Equal(t, "postgresql", attrStr(t, sp.Attributes(), "db.system.name"))
		assert.Equal(t, ptrace.SpanKindServer, sp.Kind())
		assert.Equal(t, "postgresql", attrStr(t, sp.resource, "service.name"))
		text := attrStr(t, sp.Attributes(), "db.query.text")
		queries[text] = append(queries[text], sp)
	}
	counts := map[string]int{}
	for _, q := range []string{create, insert, answer, failing, commented, waiting, "SELECT 1;", "BEGIN;", "LOCK TABLE recipe_t IN ACCESS EXCLUSIVE MODE;", "COMMIT;"} {
		counts[q] = len(queries[q])
	}
	assert.Equal(t, map[string]int{create: 1, insert: 1, answer: 3, failing: 1, commented: 1, waiting: 1, "SELECT 1;": 3 * 2000,
		"BEGIN;": 1, "LOCK TABLE recipe_t IN ACCESS EXCLUSIVE MODE;": 1, "COMMIT;": 1}, counts)
	operation := map[string]string{create: "CREATE", insert: "INSERT", answer: "SELECT", failing: "SELECT", "BEGIN;": "BEGIN", "COMMIT;": "COMMIT"}
	for q, op := range operation {
		for _, sp := range queries[q] {
			assert.Equal(t, op, attrStr(t, sp.Attributes(), "db.operation.name"), q)
		}
	}
	// Each statement outside BEGIN … COMMIT is its own transaction, inside
	// its span; the failed one's span ends at the abort, as an error, and
	// its transaction never commits.
	transactions := map[string]int{}
	for _, sp := range spansNamed(spans, "postgresql.transaction") {
		if p, ok := byID[sp.ParentSpanID()]; ok && p.Name() == "postgresql.query" {
			transactions[attrStr(t, p.Attributes(), "db.query.text")]++
			assert.Equal(t, sp.TraceID(), p.TraceID())
		}
	}
	for _, q := range []string{create, insert, answer, commented, waiting} {
		assert.Equal(t, len(queries[q]), transactions[q], "the transaction of %q", q)
	}
	assert.Zero(t, transactions[failing])
	for q, list := range queries {
		for _, sp := range list {
			assert.Equal(t, q == failing, sp.Status().Code() == ptrace.StatusCodeError, "%q: error only where the statement failed", q)
		}
	}
	assert.Equal(t, "closed at its error exit usdt:postgresql:transaction__abort", queries[failing][0].Status().Message())
	// The statements' duration histogram, counted in the kernel: every
	// statement's span, the failed one's too.
	statements := durations(lastMetrics(t, s))["postgresql.query"]
	assert.Equal(t, uint64(len(spansNamed(spans, "postgresql.query"))), statements.Count())
	// sqlcommenter.
	c := queries[commented][0]
	assert.Equal(t, trace, c.TraceID().String())
	assert.Equal(t, parent, c.ParentSpanID().String())
	// The lock wait.
	waits := spansNamed(spans, "postgresql.lock_wait")
	require.Len(t, waits, 1)
	w := waits[0]
	parentOf := byID[w.ParentSpanID()]
	assert.Equal(t, "postgresql.transaction", parentOf.Name(), "in the transaction of the statement that waited")
	assert.Equal(t, waiting, attrStr(t, byID[parentOf.ParentSpanID()].Attributes(), "db.query.text"), "under the statement that waited")
	assert.Equal(t, "AccessShareLock", attrStr(t, w.Attributes(), "postgresql.lock.mode"))
	assert.Equal(t, "relation", attrStr(t, w.Attributes(), "postgresql.lock.tag.type"))
	assert.Equal(t, relation, strconv.FormatInt(attrInt(t, w.Attributes(), "postgresql.lock.relation.oid"), 10))
	assert.Greater(t, w.EndTimestamp()-w.StartTimestamp(), pcommon.Timestamp(0))
}

const (
	jdk17     = "/usr/lib/jvm/java-17-openjdk-amd64"
	jdk17Java = jdk17 + "/bin/java"
)

// TestRecipeJVM: recipe jvm (path: the libjvm.so of every JDK under
// /usr/lib/jvm, found by the recipe's search) on OpenJDK 17, scoped to
// the java process it starts (a token on its command line), with the
// user's own filtered counters beside the recipe's: 3 full collections
// (System.gc() under G1) as jvm.gc spans and jvm.gc.duration points named
// by G1, 10 classes of dropped class loaders unloaded by them, 5 known
// classes loaded, 2 known threads started and ended; then, with
// -XX:+ExtendedDTraceProbes and extended_dtrace_probes: true, the one
// call of RecipeJvm.main as a jvm.method span.
func TestRecipeJVM(t *testing.T) {
	testutil.RequireRoot(t)
	requireFile(t, jdk17Java, jdk17+"/bin/javac", jdk17+"/lib/server/libjvm.so")
	classes := t.TempDir()
	out, err := exec.Command(jdk17+"/bin/javac", "-d", classes, testutil.Testdata("recipejvm", "RecipeJvm.java")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	token := fmt.Sprintf("recipe-jvm-%d", os.Getpid())
	java := func(flags ...string) {
		args := append([]string{"-Xms256m", "-Xmx256m", "-XX:+UseG1GC"}, flags...)
		out, err := exec.Command(jdk17Java, append(args, "-cp", classes, "RecipeJvm", "3", token)...).CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Equal(t, "done\n", string(out))
	}
	sel := &procfs.Selector{CommandLine: regexp.QuoteMeta(token)}

	// The costs: a class load under the recipe, a Java call under
	// extended_dtrace_probes (each the best of runs: 3 untraced, 2 traced,
	// each traced run under a receiver of its own).
	timeJava := func(targets []config.Target, loads int, flags ...string) (loadNs, callNs int) {
		loadNs, callNs = math.MaxInt, math.MaxInt
		runs := 3
		if targets != nil {
			runs = 2
		}
		for range runs {
			var s started
			if targets != nil {
				s = startReceiver(t, targets)
			}
			args := append([]string{"-Xms256m", "-Xmx256m", "-XX:+UseG1GC", "-XX:CompileCommand=quiet", "-XX:CompileCommand=dontinline,RecipeJvm::called"}, flags...)
			out, err := exec.Command(jdk17Java, append(args, "-cp", classes, "RecipeJvm", "time", strconv.Itoa(loads), "20000", token)...).CombinedOutput()
			require.NoError(t, err, "%s", out)
			var load, call int
			_, err = fmt.Sscanf(string(out), "load %d\ncall %d\n", &load, &call)
			require.NoError(t, err, "%s", out)
			loadNs, callNs = min(loadNs, load), min(callNs, call)
			if targets != nil {
				require.NoError(t, s.rcv.Shutdown(context.Background()))
			}
		}
		return loadNs, callNs
	}
	loadBefore, callPlain := timeJava(nil, 1000)
	loadAfter, _ := timeJava([]config.Target{{Recipe: "jvm", Process: sel}}, 1000)
	t.Logf("cost per class load (a class loader's defineClass): %d ns untraced, %d ns traced: %d ns added", loadBefore, loadAfter, loadAfter-loadBefore)
	// No loads here: each runs hundreds of Java methods, each a span.
	_, callBefore := timeJava(nil, 0, "-XX:+ExtendedDTraceProbes")
	_, callAfter := timeJava([]config.Target{{Recipe: "jvm", Process: sel, RecipeOptions: map[string]any{"extended_dtrace_probes": true}}}, 0, "-XX:+ExtendedDTraceProbes")
	t.Logf("cost per Java call (JIT-compiled, not inlined): %d ns without -XX:+ExtendedDTraceProbes, %d ns with it untraced, %d ns traced with extended_dtrace_probes: %d ns added by the probes",
		callPlain, callBefore, callAfter, callAfter-callBefore)

	known := config.Counter{Probe: "usdt:hotspot:class__loaded", Filter: []string{`arg0:string prefix "RecipeJvm$Known"`}}
	workers := config.Counter{Probe: "usdt:hotspot:thread__start", Filter: []string{`arg0:string prefix "recipe-worker-"`}}
	ended := config.Counter{Probe: "usdt:hotspot:thread__stop", Filter: []string{`arg0:string prefix "recipe-worker-"`}}
	unloaded := config.Counter{Probe: "usdt:hotspot:class__unloaded", Filter: []string{`arg0:string prefix "RecipeJvm$Known"`}}
	s := startReceiver(t, []config.Target{{Recipe: "jvm", Process: sel, Counters: []config.Counter{known, workers, ended, unloaded}}})
	t.Logf("site classes: %s", strings.Join(siteClasses(s), "; "))
	explainFailure(t, s)
	java()
	// The engine's own counters before Shutdown (the pending counters of
	// chosen processes not added), said when the counts below are wrong.
	engine, err := s.rcv.tracer.Stats()
	require.NoError(t, err)
	lost := s.rcv.tracer.ProcessRecordsLost()
	var engineHits []string
	for pi, p := range s.rcv.plan.Probes {
		engineHits = append(engineHits, fmt.Sprintf("%s=%d", p.Ref, engine.Probes[pi].Hits))
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("engine's own counters before Shutdown: %s; process records lost: %d", strings.Join(engineHits, ", "), lost)
		}
	})
	require.NoError(t, s.rcv.Shutdown(context.Background()))

	spans := allSpans(s.traces)
	gcs := spansNamed(spans, "jvm.gc")
	require.Len(t, gcs, 3, "three System.gc(), no other collection in a 256 MB heap")
	for _, sp := range gcs {
		assert.Equal(t, "end of major GC", attrStr(t, sp.Attributes(), "jvm.gc.action"))
		assert.Equal(t, "G1 Old Generation", attrStr(t, sp.Attributes(), "jvm.gc.name"))
		assert.Equal(t, jdk17Java, attrStr(t, sp.resource, "process.executable.path"))
	}
	last := lastMetrics(t, s)
	durations := ownHistogram(last, "jvm.gc.duration")
	require.Contains(t, durations, "jvm.gc.action=end of major GC,jvm.gc.name=G1 Old Generation")
	dp := durations["jvm.gc.action=end of major GC,jvm.gc.name=G1 Old Generation"]
	assert.Equal(t, uint64(3), dp.Count())
	assert.Len(t, durations, 1)
	hits := sumPoints(last, "uprobe.probe.hits")
	assert.Equal(t, int64(10+5), hits[known.Ref()], "Known1 in ten dropped class loaders, then the five known classes")
	assert.Equal(t, int64(10), hits[unloaded.Ref()], "the ten Known1 of the dropped class loaders, unloaded by the full collections")
	unloads := ownSum(last, "jvm.class.unloaded")[""]
	assert.GreaterOrEqual(t, unloads, int64(10))
	assert.Equal(t, hits["usdt:hotspot:class__unloaded"], unloads, "jvm.class.unloaded is the probe's hits")
	assert.Equal(t, int64(2), hits[workers.Ref()], "the two known threads started")
	assert.Equal(t, int64(2), hits[ended.Ref()], "and ended")
	loaded := ownSum(last, "jvm.class.loaded")[""]
	assert.GreaterOrEqual(t, loaded, int64(10+5+400), "the JVM loads hundreds of classes to start")
	assert.Equal(t, hits["usdt:hotspot:class__loaded"], loaded, "jvm.class.loaded is the probe's hits")
	assert.GreaterOrEqual(t, hits["usdt:hotspot:thread__start"], int64(2))
	assert.Empty(t, spansNamed(spans, "jvm.method"), "no method spans without the option")

	// Method spans: -XX:+ExtendedDTraceProbes and the option.
	s = startReceiver(t, []config.Target{{Recipe: "jvm", Process: sel, RecipeOptions: map[string]any{"extended_dtrace_probes": true}}})
	java("-XX:+ExtendedDTraceProbes")
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	methods := map[string]int{}
	for _, sp := range spansNamed(allSpans(s.traces), "jvm.method") {
		methods[attrStr(t, sp.Attributes(), "jvm.class.name")+"."+attrStr(t, sp.Attributes(), "code.function.name")]++
	}
	assert.Equal(t, 1, methods["RecipeJvm.main"], "main, its names cut to their lengths")
	assert.Equal(t, 2, methods["RecipeJvm.lambda$main$0"], "the two workers' runnables")
	assert.Greater(t, len(methods), 100, "every method the JVM runs")
}

// httpServer is a Go HTTP server under test: its process and address.
type httpServer struct {
	prog *testutil.Program
	exe  string
	pid  int
	addr string // 127.0.0.1:PORT
}

// startTestHTTP starts testdata/recipegohttp, stripped of its symbol table
// and DWARF (-ldflags=-s -w) when stripped is set.
func startTestHTTP(t *testing.T, stripped bool) httpServer {
	t.Helper()
	exe := testutil.BuildGo(t, "recipegohttp", stripped)
	p := testutil.StartProgram(t, exe, "")
	port := strings.TrimPrefix(p.Ask("", "ready "), "ready ")
	return httpServer{prog: p, exe: exe, pid: p.PID, addr: "127.0.0.1:" + port}
}

// goHTTPBinVersion is the go-httpbin of TestRecipeGoHTTP, built from the
// Go module proxy.
const goHTTPBinVersion = "v2.26.0"

// startGoHTTPBin builds go-httpbin (go install, with -ldflags=-s -w when
// stripped) and serves it on a free port of 127.0.0.1.
func startGoHTTPBin(t *testing.T, stripped bool) httpServer {
	t.Helper()
	bin := t.TempDir()
	args := []string{"install"}
	if stripped {
		args = append(args, "-ldflags=-s -w")
	}
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append(args, "github.com/mccutchen/go-httpbin/v2/cmd/go-httpbin@"+goHTTPBinVersion)...)
	cmd.Env = append(os.Environ(), "GOBIN="+bin, "GOFLAGS=-mod=mod", "GOWORK=off")
	cmd.Dir = bin
	if out, err := cmd.CombinedOutput(); err != nil {
		testutil.SkipOrFail(t, "building go-httpbin %s from the module proxy: %v\n%s", goHTTPBinVersion, err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	l.Close()
	srv := exec.Command(filepath.Join(bin, "go-httpbin"), "-host", "127.0.0.1", "-port", port, "-log-level", "OFF")
	require.NoError(t, srv.Start())
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	addr := "127.0.0.1:" + port
	waitFor(t, "go-httpbin listening", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return httpServer{exe: srv.Path, pid: srv.Process.Pid, addr: addr}
}

// do sends n requests and checks their status.
func (h httpServer) do(t *testing.T, client *http.Client, n int, method, path string, status int) {
	t.Helper()
	for range n {
		req, err := http.NewRequest(method, "http://"+h.addr+path, strings.NewReader(""))
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, status, resp.StatusCode, "%s %s", method, path)
	}
}

// latency returns the mean time of n GET requests of path, in microseconds.
func (h httpServer) latency(t *testing.T, client *http.Client, n int, path string) float64 {
	t.Helper()
	start := time.Now()
	h.do(t, client, n, "GET", path, 200)
	return float64(time.Since(start).Microseconds()) / float64(n)
}

// TestRecipeGoHTTP: recipe go-http on the receiver's test server and on
// go-httpbin built from the module proxy, each with DWARF (names) and
// stripped (stripped: true, registers), scoped to the server's pid: a
// server span per request with its method, path and host, and each status
// in a WriteHeader span, inside the request's span unless the server
// wrote it after the handler.
func TestRecipeGoHTTP(t *testing.T) {
	testutil.RequireRoot(t)
	type request struct {
		n            int
		method, path string
		status       int
	}
	for _, server := range []struct {
		name     string
		start    func(*testing.T, bool) httpServer
		requests []request
		// after are the statuses the server writes after the handler.
		after map[string]int
	}{
		{"testprogram", startTestHTTP, []request{{3, "GET", "/hello", 200}, {2, "GET", "/missing", 404}, {2, "POST", "/items", 201}, {1, "GET", "/silent", 200}}, map[string]int{"200": 1}},
		{"go-httpbin", startGoHTTPBin, []request{{2, "GET", "/get", 200}, {1, "POST", "/post", 200}, {2, "GET", "/status/418", 418}}, nil},
	} {
		for _, stripped := range []bool{false, true} {
			name := server.name + "/names"
			if stripped {
				name = server.name + "/registers"
			}
			t.Run(name, func(t *testing.T) {
				h := server.start(t, stripped)
				client := &http.Client{Timeout: time.Minute}
				defer client.CloseIdleConnections()
				probe := "/hello"
				if server.name == "go-httpbin" {
					probe = "/get"
				}
				before := h.latency(t, client, 1000, probe)
				target := config.Target{Recipe: "go-http", Path: h.exe, PID: h.pid}
				if stripped {
					target.RecipeOptions = map[string]any{"stripped": true}
				}
				timed := startReceiver(t, []config.Target{target})
				t.Logf("site classes: %s", strings.Join(siteClasses(timed), "; "))
				after := h.latency(t, client, 1000, probe)
				t.Logf("cost per request (GET %s, keep-alive): %.1f us untraced, %.1f us traced: %.1f us added", probe, before, after, after-before)
				require.NoError(t, timed.rcv.Shutdown(context.Background()))

				s := startReceiver(t, []config.Target{target})
				want := map[string]int{}
				statuses := map[string]int{}
				for _, r := range server.requests {
					h.do(t, client, r.n, r.method, r.path, r.status)
					want[r.method+" "+r.path] += r.n
					statuses[strconv.Itoa(r.status)] += r.n
				}
				require.NoError(t, s.rcv.Shutdown(context.Background()))

				spans := allSpans(s.traces)
				got := map[string]int{}
				byID := map[pcommon.SpanID]flatSpan{}
				for _, sp := range spansNamed(spans, "http.server.request") {
					byID[sp.SpanID()] = sp
					got[attrStr(t, sp.Attributes(), "http.request.method")+" "+attrStr(t, sp.Attributes(), "url.path")]++
					assert.Equal(t, h.addr, attrStr(t, sp.Attributes(), "server.address"))
					assert.Equal(t, ptrace.SpanKindServer, sp.Kind())
					assert.Equal(t, int64(h.pid), attrInt(t, sp.resource, "process.pid"))
				}
				assert.Equal(t, want, got)
				inside, outside := map[string]int{}, map[string]int{}
				for _, sp := range spansNamed(spans, "http.response.write_header") {
					code := strconv.FormatInt(attrInt(t, sp.Attributes(), "http.response.status_code"), 10)
					if _, ok := byID[sp.ParentSpanID()]; ok {
						inside[code]++
					} else {
						outside[code]++
					}
				}
				for code, n := range server.after {
					statuses[code] -= n
				}
				assert.Equal(t, statuses, inside, "statuses written by handlers, inside their request's span")
				if server.after == nil {
					server.after = map[string]int{}
				}
				assert.Equal(t, server.after, outside, "statuses the server wrote after the handler")
			})
		}
	}
}
