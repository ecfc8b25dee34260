package config

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/config")

// configDir holds the configuration fixtures, at the top of the repository.
var configDir = filepath.Join("..", "..", "testdata", "config")

// receiverConfig is the part of the receiver's configuration this package declares.
type receiverConfig struct {
	Targets []Target `mapstructure:"targets"`
}

// loadTargets reads file as a collector configuration and returns the
// targets under receivers::uprobe.
func loadTargets(t *testing.T, file string) []Target {
	t.Helper()
	conf, err := confmaptest.LoadConf(filepath.Join(configDir, file))
	require.NoError(t, err)
	sub, err := conf.Sub("receivers::uprobe")
	require.NoError(t, err)
	var cfg receiverConfig
	require.NoError(t, sub.Unmarshal(&cfg))
	return cfg.Targets
}

func TestConfigFileValid(t *testing.T) {
	targets := loadTargets(t, "valid.yaml")
	want := []Target{{
		Path:        "/usr/lib/postgresql/15/bin/postgres",
		PID:         0,
		ServiceName: "postgres",
		Spans: []Span{
			{
				Name:           "pg.query",
				Entry:          "usdt:postgresql:query__start",
				Exit:           "usdt:postgresql:query__done",
				Attributes:     map[string]string{"db.query.text": "arg0:string"},
				ExitAttributes: map[string]string{"done.text": "arg0:string"},
			},
			{
				Name:           "palloc",
				Function:       "palloc",
				Attributes:     map[string]string{"size": "arg0:u64"},
				ExitAttributes: map[string]string{"ptr": "retval:x64"},
			},
			{
				Name:       "exec_simple_query",
				Function:   "exec_simple_query",
				Filter:     []string{`arg0:string prefix "SELECT a, b"`},
				ExitFilter: []string{"retval:s64 != 0"},
			},
		},
		Counters: append(CountersOf("usdt:postgresql:transaction__start", "uprobe:palloc"),
			Counter{Probe: "uprobe:palloc", Filter: []string{"arg0:u64 >= 4096", "arg0:u64 < 0x100000"}, Histogram: "arg0:u64"},
			Counter{Probe: "uretprobe:MemoryContextAlloc", Histogram: "retval:u64"}),
	}}
	assert.Equal(t, want, targets, "dotted attribute keys survive confmap")
	assert.NoError(t, Validate(targets))
}

func TestConfigFileInvalid(t *testing.T) {
	targets := loadTargets(t, "invalid.yaml")
	err := Validate(targets)
	require.Error(t, err)
	got := err.Error() + "\n"

	golden := filepath.Join(configDir, "invalid.golden")
	if *update {
		require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
	}
	want, rerr := os.ReadFile(golden)
	require.NoError(t, rerr, "run go test ./internal/config -run TestConfigFileInvalid -update to create it")
	assert.Equal(t, string(want), got)
}

// TestConfigFileUnknownField checks that a misspelled field is an error of
// the unmarshalling, before Validate.
func TestConfigFileUnknownField(t *testing.T) {
	conf := confmap.NewFromStringMap(map[string]any{
		"targets": []any{map[string]any{"path": "/bin/true", "countres": []any{"usdt:a:b"}}},
	})
	var cfg receiverConfig
	err := conf.Unmarshal(&cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "countres")
}
