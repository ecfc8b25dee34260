// Package testconfig holds the receiver configurations several tests share.
// It is apart from package testutil so that testutil stays below package
// config (whose dependencies' own tests use testutil).
package testconfig

import (
	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
)

// DemoTargets is a configuration with every kind of probe the demo has.
func DemoTargets(b testutil.DemoBuild) []config.Target {
	return []config.Target{
		{
			Path:        b.Program,
			ServiceName: "demo",
			Spans: []config.Span{
				{
					Name:  "query",
					Entry: "usdt:demo:query__start",
					Exit:  "usdt:demo:query__done",
					Attributes: map[string]string{
						"query": "arg0:string", "id": "arg1", "small": "arg2", "five": "arg3",
					},
					ExitAttributes: map[string]string{"done.id": "arg1", "iterations": "arg2"},
				},
				{
					Name:           "work",
					Function:       "work",
					Attributes:     map[string]string{"n": "arg0", "label": "arg1:string"},
					ExitAttributes: map[string]string{"ret": "retval:s64"},
				},
				// The kernel's return probe, not the RET instructions "auto"
				// picks for a recursive function: the demo's recursion is
				// shallow, and these tests pin the kernel's path.
				{Name: "recurse", Function: "recurse", Returns: config.ReturnsUretprobe, Attributes: map[string]string{"depth": "arg0:s32"}},
				{Name: "outer", Function: "outer"},
				{Name: "inner", Function: "inner", Attributes: map[string]string{"i": "arg0:u32"}},
			},
			Counters: config.CountersOf("usdt:demo:tick", "uprobe:work"),
		},
		{
			Path:     b.Library,
			Spans:    []config.Span{{Name: "lib_call", Function: "lib_call", Attributes: map[string]string{"i": "arg0:s32"}}},
			Counters: config.CountersOf("usdt:demolib:call"),
		},
	}
}

// PostgresContract is the configuration the receiver's first issue gives as
// its contract, for a PostgreSQL binary at path.
func PostgresContract(path string) config.Target {
	return config.Target{
		Path: path, ServiceName: "postgres",
		Spans: []config.Span{
			{
				Name: "pg.query", Entry: "usdt:postgresql:query__start", Exit: "usdt:postgresql:query__done",
				Attributes:     map[string]string{"db.query.text": "arg0:string"},
				ExitAttributes: map[string]string{"done.text": "arg0:string"},
			},
			{
				Name: "palloc", Function: "palloc",
				Attributes:     map[string]string{"size": "arg0:u64"},
				ExitAttributes: map[string]string{"ptr": "retval:x64"},
			},
		},
		Counters: config.CountersOf("usdt:postgresql:transaction__start", "uprobe:palloc"),
	}
}
