package planner

import (
	"debug/elf"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/harness/testutil/testconfig"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/usdt"
)

// These tests read large programs of the system when they are installed;
// they are optional, so they skip (even in CI) when the file is absent.
const (
	python   = "/usr/bin/python3.11"
	postgres = "/usr/lib/postgresql/15/bin/postgres"
)

func requireFile(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		testutil.SkipOrFail(t, "%s is not installed", path)
	}
}

func TestResolvePython(t *testing.T) {
	requireFile(t, python)
	targets := []config.Target{{
		Path: python,
		Spans: []config.Span{{
			Name: "py.function", Entry: "usdt:python:function__entry", Exit: "usdt:python:function__return",
			Attributes: map[string]string{"code.filepath": "arg0:string", "code.function": "arg1:string", "code.lineno": "arg2:s32"},
		}},
		Counters: config.CountersOf("usdt:python:gc__start", "usdt:python:import__find__load__start"),
	}}
	require.NoError(t, config.Validate(targets))
	pl, err := Resolve(targets)
	require.NoError(t, err)
	assert.True(t, pl.Targets[0].Executable)
	assert.Equal(t, "python3.11", pl.Targets[0].ServiceName)
	require.Len(t, pl.Probes, 4)
	entry := pl.Sites[0]
	require.Len(t, entry.Entry, 3)
	for _, f := range entry.Entry {
		assert.Equal(t, plan.BaseRegister, f.Base, f.Key)
		assert.True(t, f.Value.FromArg, f.Key)
	}
	assert.Equal(t, plan.StoreString, entry.Entry[0].Store)
	assert.Equal(t, plan.StoreString, entry.Entry[1].Store)
	assert.Equal(t, plan.StoreInt, entry.Entry[2].Store)
	for _, a := range pl.Attachments {
		assert.NotZero(t, a.RefCtrOffset, "python's probes have semaphores: %s", pl.Probes[a.Probe].Ref)
	}
	t.Logf("python: %d probes, %d sites, %d attachments", len(pl.Probes), len(pl.Sites), len(pl.Attachments))
}

func TestResolvePostgres(t *testing.T) {
	requireFile(t, postgres)
	targets := []config.Target{testconfig.PostgresContract(postgres)}
	require.NoError(t, config.Validate(targets))
	pl, err := Resolve(targets)
	require.NoError(t, err)
	assert.True(t, pl.Targets[0].Executable)
	require.Len(t, pl.Probes, 5, "uprobe:palloc is one probe")
	t.Logf("postgres contract: %d probes, %d sites, %d attachments", len(pl.Probes), len(pl.Sites), len(pl.Attachments))
}

// TestResolveEveryPostgresProbe resolves every USDT probe of postgres as a
// counter, and as a span entry fetching each of its arguments.
func TestResolveEveryPostgresProbe(t *testing.T) {
	requireFile(t, postgres)
	f, err := elf.Open(postgres)
	require.NoError(t, err)
	probes, err := usdt.Probes(f)
	f.Close()
	require.NoError(t, err)
	require.NotEmpty(t, probes)

	var counters []string
	locations := 0
	for _, p := range probes {
		counters = append(counters, "usdt:"+p.String())
		locations += len(p.Locations)
	}
	pl, err := Resolve([]config.Target{{Path: postgres, Counters: config.CountersOf(counters...)}})
	require.NoError(t, err)
	require.Len(t, pl.Probes, len(probes))
	assert.Len(t, pl.Attachments, locations)
	for i, p := range pl.Probes {
		assert.Equal(t, len(probes[i].Locations), p.Locations, p.Ref)
	}
	t.Logf("postgres: %d USDT probes, %d locations", len(probes), locations)

	// Every argument of every site compiles.
	fetched := 0
	for _, p := range probes {
		attrs := map[string]string{}
		for _, l := range p.Locations {
			require.NoError(t, l.ArgsErr, "%s at %#x", p, l.Address)
			for n := range l.Args {
				attrs[fmt.Sprintf("a%d", n)] = fmt.Sprintf("arg%d", n)
			}
		}
		pl, err := Resolve([]config.Target{{Path: postgres, Spans: []config.Span{{
			Name: p.String(), Entry: "usdt:" + p.String(), Exit: "uretprobe:palloc", Attributes: attrs,
		}}}})
		if !assert.NoError(t, err, "%s", p) {
			continue
		}
		for _, s := range pl.Sites[:len(p.Locations)] {
			fetched += len(s.Entry)
		}
	}
	t.Logf("postgres: %d argument fetches compiled", fetched)
}
