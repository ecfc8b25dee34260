package receiver

import (
	"context"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/harness/testutil/testconfig"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
)

// These tests trace binaries nobody here wrote: Debian's python3.11
// (non-PIE, USDT probes with semaphores, a stack argument) and PostgreSQL 15
// (PIE, multi-site probes, memory and %rip-relative arguments).

const (
	python   = "/usr/bin/python3.11"
	postgres = "/usr/lib/postgresql/15/bin/postgres"
	initdb   = "/usr/lib/postgresql/15/bin/initdb"
	psql     = "/usr/bin/psql"
)

func requireFile(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			testutil.SkipOrFail(t, "%s is not installed", p)
		}
	}
}

func TestPython(t *testing.T) {
	testutil.RequireRoot(t)
	requireFile(t, python)
	s := startReceiver(t, []config.Target{{
		Path: python,
		Spans: []config.Span{
			{
				Name:           "python.import",
				Entry:          "usdt:python:import__find__load__start",
				Exit:           "usdt:python:import__find__load__done",
				Attributes:     map[string]string{"module": "arg0:string"},
				ExitAttributes: map[string]string{"found": "arg1"},
			},
			{
				Name:           "python.gc",
				Entry:          "usdt:python:gc__start",
				Exit:           "usdt:python:gc__done",
				Attributes:     map[string]string{"generation": "arg0"},
				ExitAttributes: map[string]string{"collected": "arg0"},
			},
		},
		Counters: config.CountersOf("usdt:python:function__entry"),
	}})
	script := "import gc, json, decimal\ntry:\n  import no_such_module_xyz\nexcept ImportError:\n  pass\ngc.collect(2)\nprint('ok')"
	out, err := exec.Command(python, "-I", "-S", "-c", script).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "ok\n", string(out), "the traced interpreter runs normally")
	require.NoError(t, s.rcv.Shutdown(context.Background()))

	modules := map[string]int64{}
	var gen2 bool
	for _, sp := range allSpans(s.traces) {
		assert.Equal(t, python, attrStr(t, sp.resource, "process.executable.path"))
		switch sp.Name() {
		case "python.import":
			modules[attrStr(t, sp.Attributes(), "module")] = attrInt(t, sp.Attributes(), "found")
		case "python.gc":
			g := attrInt(t, sp.Attributes(), "generation")
			assert.Contains(t, []int64{0, 1, 2}, g, "a stack argument (-4@112(%%rsp))")
			gen2 = gen2 || g == 2
		}
	}
	assert.Equal(t, int64(1), modules["json"], "imported modules: %v", modules)
	assert.Equal(t, int64(1), modules["decimal"], "imported modules: %v", modules)
	found, ok := modules["no_such_module_xyz"]
	assert.True(t, ok, "a failed import is a span too")
	assert.Zero(t, found, "a failed import reports found=0")
	assert.True(t, gen2, "gc.collect(2) made a generation-2 span")
}

// postgresServer runs a throwaway PostgreSQL 15 cluster as the postgres
// user, listening only on a Unix socket in its data directory's parent.
type postgresServer struct {
	dir, socketDir string
	cmd            *exec.Cmd
}

func asPostgres(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	u, err := user.Lookup("postgres")
	if err != nil {
		testutil.SkipOrFail(t, "no postgres user")
	}
	full := append([]string{"--reuid=" + u.Uid, "--regid=" + u.Gid, "--init-groups", name}, args...)
	cmd := exec.Command("setpriv", full...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	return cmd
}

func startPostgres(t *testing.T) *postgresServer {
	t.Helper()
	requireFile(t, postgres, initdb, psql)
	u, err := user.Lookup("postgres")
	if err != nil {
		testutil.SkipOrFail(t, "no postgres user")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	top, err := os.MkdirTemp("", "uprobe-pg-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(top) })
	require.NoError(t, os.Chown(top, uid, gid))
	pg := &postgresServer{dir: filepath.Join(top, "data"), socketDir: top}
	out, err := asPostgres(t, initdb, "-D", pg.dir, "--auth=trust", "--no-sync", "-U", "postgres").CombinedOutput()
	require.NoError(t, err, "initdb: %s", out)

	pg.cmd = asPostgres(t, postgres, "-D", pg.dir, "-k", top, "-c", "listen_addresses=", "-c", "fsync=off")
	logFile, err := os.Create(filepath.Join(top, "postgres.log"))
	require.NoError(t, err)
	pg.cmd.Stdout, pg.cmd.Stderr = logFile, logFile
	require.NoError(t, pg.cmd.Start())
	t.Cleanup(func() {
		_ = pg.cmd.Process.Signal(os.Interrupt) // fast shutdown
		_ = pg.cmd.Wait()
		logFile.Close()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := exec.Command("/usr/bin/pg_isready", "-h", top, "-q").Run(); err == nil {
			return pg
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logFile.Name())
			t.Fatalf("postgres not ready within 30s:\n%s", log)
		}
		time.Sleep(100 * time.Millisecond) // pg_isready has no way to wait on a signal
	}
}

func (pg *postgresServer) query(t *testing.T, sql string) string {
	t.Helper()
	out, err := exec.Command(psql, "-h", pg.socketDir, "-U", "postgres", "-d", "postgres", "-At", "-c", sql).CombinedOutput()
	require.NoError(t, err, "psql %q: %s", sql, out)
	return strings.TrimSpace(string(out))
}

// TestPostgres uses the configuration of the README (the contract)
// on a real PostgreSQL 15 server.
func TestPostgres(t *testing.T) {
	testutil.RequireRoot(t)
	pg := startPostgres(t)
	contract := testconfig.PostgresContract(postgres)
	contract.Spans = append(contract.Spans,
		config.Span{Name: "pg.parse", Entry: "usdt:postgresql:query__parse__start", Exit: "usdt:postgresql:query__parse__done"},
		config.Span{Name: "pg.plan", Entry: "usdt:postgresql:query__plan__start", Exit: "usdt:postgresql:query__plan__done"},
		config.Span{Name: "pg.execute", Entry: "usdt:postgresql:query__execute__start", Exit: "usdt:postgresql:query__execute__done"},
	)
	// A filtered counter with a value histogram, beside the plain counter
	// of the same probe.
	contract.Counters = append(contract.Counters, config.Counter{Probe: "uprobe:palloc", Filter: []string{"arg0:u64 >= 64"}, Histogram: "arg0:u64"})
	s := startReceiver(t, []config.Target{contract})
	const sql = "SELECT 6 * 7 AS answer"
	require.Equal(t, "42", pg.query(t, sql))
	require.NoError(t, s.rcv.Shutdown(context.Background()))

	spans := allSpans(s.traces)
	byID := map[pcommon.SpanID]flatSpan{}
	for _, sp := range spans {
		byID[sp.SpanID()] = sp
	}
	var query *flatSpan
	for i, sp := range spans {
		if sp.Name() == "pg.query" && attrStr(t, sp.Attributes(), "db.query.text") == sql {
			query = &spans[i]
		}
	}
	require.NotNil(t, query, "a pg.query span with the query text")
	assert.Equal(t, sql, attrStr(t, query.Attributes(), "done.text"))
	assert.Equal(t, "postgres", attrStr(t, query.resource, "service.name"))

	children := map[string]int{}
	pallocs := 0
	for _, sp := range spans {
		if sp.TraceID() != query.TraceID() || sp.SpanID() == query.SpanID() {
			continue
		}
		if sp.Name() == "palloc" {
			pallocs++
			assert.True(t, strings.HasPrefix(attrStr(t, sp.Attributes(), "ptr"), "0x"))
			continue
		}
		assert.Equal(t, query.SpanID(), sp.ParentSpanID(), "%s hangs under pg.query", sp.Name())
		children[sp.Name()]++
	}
	assert.Equal(t, map[string]int{"pg.parse": 1, "pg.plan": 1, "pg.execute": 1}, children)
	assert.Positive(t, pallocs, "palloc calls inside the query")

	last := s.metrics.AllMetrics()[len(s.metrics.AllMetrics())-1]
	hits := sumPoints(last, "uprobe.probe.hits")
	assert.GreaterOrEqual(t, hits["usdt:postgresql:transaction__start"], int64(1))
	assert.Equal(t, hits["uprobe:palloc"], hits["uretprobe:palloc"], "every palloc returned")
	assert.GreaterOrEqual(t, hits["uprobe:palloc"], int64(pallocs))
	big := hits["uprobe:palloc if arg0:u64 >= 64"]
	assert.Positive(t, big, "some pallocs are of 64 bytes or more")
	assert.Less(t, big, hits["uprobe:palloc"], "and some are smaller")
	dp, ok := valuePoints(last)["uprobe:palloc if arg0:u64 >= 64"]
	require.True(t, ok, "the filtered counter's histogram")
	assert.Equal(t, uint64(big), dp.Count(), "one value per counted hit")
	assert.Zero(t, dp.ZeroCount())
	assert.Zero(t, dp.Negative().BucketCounts().Len())
	assert.GreaterOrEqual(t, dp.Positive().Offset(), int32(5), "every value is at least 64: bucket (32, 64] or above")
}
