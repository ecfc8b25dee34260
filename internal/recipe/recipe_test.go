package recipe

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/confmap"
	semconv127 "go.opentelemetry.io/otel/semconv/v1.27.0"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
)

var update = flag.Bool("update", false, "rewrite the golden files of TestGolden")

// expansions are the expansions the golden files hold: each recipe with
// its defaults, and with each option set.
func expansions() map[string]config.Target {
	out := map[string]config.Target{}
	for _, n := range Names() {
		base := config.Target{Recipe: n}
		if n == "go-http" {
			base.Path = "/srv/server"
		}
		out[n] = base
		r, _ := Get(n)
		for _, on := range r.OptionNames() {
			t := base
			switch r.Options[on].Type {
			case "bool":
				t.RecipeOptions = map[string]any{on: true}
			case "integer":
				t.RecipeOptions = map[string]any{on: 64}
			case "string":
				t.RecipeOptions = map[string]any{on: "Some Collector"}
			}
			out[n+"."+on] = t
		}
	}
	return out
}

// TestGolden pins what every recipe expands to, with its defaults and
// with each of its options set: the spans and counters a user gets from
// "recipe: NAME". go test -run TestGolden -update rewrites the files.
func TestGolden(t *testing.T) {
	require.NoError(t, allErr)
	require.Equal(t, []string{"dns", "go-http", "jvm", "malloc", "postgresql", "python", "tls"}, Names())
	for name, target := range expansions() {
		t.Run(name, func(t *testing.T) {
			got, err := Expand([]config.Target{target})
			require.NoError(t, err)
			require.NoError(t, config.Validate(got), "the expansion is a valid target")
			text, err := json.MarshalIndent(got[0], "", "  ")
			require.NoError(t, err)
			text = append(text, '\n')
			file := filepath.Join("testdata", name+".golden.json")
			if *update {
				require.NoError(t, os.WriteFile(file, text, 0o644))
			}
			want, err := os.ReadFile(file)
			require.NoError(t, err, "go test -run TestGolden -update writes it")
			assert.Equal(t, string(want), string(text))
		})
	}
}

// TestSemanticConventions checks the recipes' attribute and metric names
// against the semantic conventions' constants (v1.43.0; the JVM's names,
// which the Go module dropped after v1.27.0, from v1.27.0).
func TestSemanticConventions(t *testing.T) {
	spans := func(recipe string, options map[string]any) map[string]config.Span {
		r, err := Get(recipe)
		require.NoError(t, err)
		tg, err := r.Target(options)
		require.NoError(t, err)
		out := map[string]config.Span{}
		for _, s := range tg.Spans {
			out[s.SpanName("")] = s
		}
		return out
	}
	keys := func(s config.Span) []string {
		var out []string
		for k := range s.Attributes {
			out = append(out, k)
		}
		for k := range s.ExitAttributes {
			out = append(out, k)
		}
		for k := range s.ConstantAttributes {
			out = append(out, k)
		}
		for k := range s.FirstWord {
			out = append(out, k)
		}
		return out
	}
	pg := spans("postgresql", nil)["postgresql.query"]
	assert.ElementsMatch(t, []string{string(semconv.DBQueryTextKey), string(semconv.DBSystemNameKey), string(semconv.DBOperationNameKey)}, keys(pg))
	assert.Equal(t, semconv.DBSystemNamePostgreSQL.Value.AsString(), pg.ConstantAttributes[string(semconv.DBSystemNameKey)])

	dns := spans("dns", nil)["getaddrinfo"]
	assert.ElementsMatch(t, []string{string(semconv.DNSQuestionNameKey), string(semconv.ErrorTypeKey)}, keys(dns))
	assert.Equal(t, "dns.lookup.duration", dns.Metric.Name)
	assert.Equal(t, []string{string(semconv.DNSQuestionNameKey), string(semconv.ErrorTypeKey)}, dns.Metric.Attributes)

	gc := spans("jvm", nil)["jvm.gc"]
	assert.ElementsMatch(t, []string{string(semconv127.JVMGCActionKey), string(semconv127.JVMGCNameKey)}, keys(gc))
	assert.Equal(t, "jvm.gc.duration", gc.Metric.Name)
	method := spans("jvm", map[string]any{"extended_dtrace_probes": true})["jvm.method"]
	assert.Contains(t, keys(method), string(semconv.CodeFunctionNameKey))

	http := spans("go-http", nil)
	assert.ElementsMatch(t, []string{string(semconv.HTTPRequestMethodKey), string(semconv.URLPathKey), string(semconv.ServerAddressKey)}, keys(http["http.server.request"]))
	assert.ElementsMatch(t, []string{string(semconv.HTTPResponseStatusCodeKey)}, keys(http["http.response.write_header"]))
	stripped := spans("go-http", map[string]any{"stripped": true})
	assert.ElementsMatch(t, keys(http["http.server.request"]), keys(stripped["http.server.request"]), "the same names by registers")

	py := spans("python", map[string]any{"functions": true})
	assert.ElementsMatch(t, []string{string(semconv.CodeFilePathKey), string(semconv.CodeFunctionNameKey), string(semconv.CodeLineNumberKey)}, keys(py["python.function"]))
	// cpython.gc.generation is in the conventions' registry (v1.32.0 and later), not in the Go module.
	assert.Contains(t, keys(py["python.gc"]), "cpython.gc.generation")

	r, err := Get("jvm")
	require.NoError(t, err)
	tg, err := r.Target(nil)
	require.NoError(t, err)
	var counted []string
	for _, c := range tg.Counters {
		if c.Metric != nil {
			counted = append(counted, c.Metric.Name)
		}
	}
	assert.Equal(t, []string{"jvm.class.loaded", "jvm.class.unloaded"}, counted)
}

// TestExpandKeepsTheTargetsFields: a recipe gives spans, counters and a
// default path; the target's own fields still apply, and its spans and
// counters join the recipe's (a span named as the recipe's replaces it).
func TestExpandKeepsTheTargetsFields(t *testing.T) {
	sel := &procfs.Selector{Executable: "psql"}
	got, err := Expand([]config.Target{
		{Path: "/bin/true", Spans: []config.Span{{Name: "x", Function: "main"}}},
		{
			Recipe: "postgresql", PID: 0, Process: sel, Optional: true, BuildID: "0123456789abcdef", ServiceName: "orders-db",
			Spans: []config.Span{
				{Name: "postgresql.lock_wait", Entry: "usdt:postgresql:lock__wait__start", Exit: "usdt:postgresql:lock__wait__done"},
				{Name: "pg.sort", Entry: "usdt:postgresql:sort__start", Exit: "usdt:postgresql:sort__done"},
			},
			Counters:      config.CountersOf("usdt:postgresql:checkpoint__start"),
			ThreadContext: &config.ThreadContext{Attributes: true},
		},
		{Recipe: "malloc", Path: "/usr/lib/libjemalloc.so.2", RecipeOptions: map[string]any{"min_size": 4096}},
	})
	require.NoError(t, err)
	assert.Equal(t, "/bin/true", got[0].Path, "a target without a recipe is kept as it is")
	pg := got[1]
	assert.Equal(t, "postgres", pg.Path, "the recipe's usual file, by name")
	assert.Equal(t, []string{"/usr/lib/postgresql/*/bin/postgres", "/usr/pgsql-*/bin/postgres", "/usr/local/pgsql/bin/postgres"}, pg.FromRecipe.Search)
	assert.Same(t, sel, pg.Process)
	assert.True(t, pg.Optional)
	assert.Equal(t, "0123456789abcdef", pg.BuildID)
	assert.Equal(t, "orders-db", pg.ServiceName)
	assert.True(t, pg.ThreadContextAttributes(), "the target's thread_context")
	assert.Nil(t, got[2].ThreadContext, "none: the default")
	var names []string
	for _, s := range pg.Spans {
		names = append(names, s.Name)
	}
	assert.Equal(t, []string{"postgresql.query", "postgresql.transaction", "postgresql.lock_wait", "pg.sort"}, names)
	assert.Empty(t, pg.Spans[2].Attributes, "the target's span replaced the recipe's of its name")
	assert.Equal(t, "usdt:postgresql:checkpoint__start", pg.Counters[len(pg.Counters)-1].Probe)
	require.NoError(t, config.Validate(got))

	m := got[2]
	assert.Equal(t, "/usr/lib/libjemalloc.so.2", m.Path)
	assert.Equal(t, []string{"arg0:u64 >= 4096"}, m.Spans[0].Filter, "the option's value in the recipe's text")
}

// TestExpandErrors: every mistake in a recipe target is said with the
// target and the recipe.
func TestExpandErrors(t *testing.T) {
	for _, tc := range []struct {
		target config.Target
		want   string
	}{
		{config.Target{Recipe: "mysql"}, `targets[0]: no recipe "mysql" (recipes: dns, go-http, jvm, malloc, postgresql, python, tls)`},
		{config.Target{Recipe: "go-http"}, "recipe go-http has no usual file: give the target's path"},
		{config.Target{Recipe: "jvm", RecipeOptions: map[string]any{"extended": true}}, `recipe_options: "extended": recipe jvm has no such option (options: extended_dtrace_probes, full_gc_name, young_gc_name)`},
		{config.Target{Recipe: "jvm", RecipeOptions: map[string]any{"extended_dtrace_probes": "yes"}}, `recipe_options: extended_dtrace_probes: "yes" is not true or false`},
		{config.Target{Recipe: "tls", RecipeOptions: map[string]any{"plaintext_bytes": 4096}}, "recipe_options: plaintext_bytes: 4096 is out of range: want 0 to 256"},
		{config.Target{Recipe: "malloc", RecipeOptions: map[string]any{"min_size": 0}}, "recipe_options: min_size: 0 is out of range"},
		{config.Target{Recipe: "malloc", RecipeOptions: map[string]any{"min_size": 1.5}}, "recipe_options: min_size: 1.5 is not an integer"},
		{config.Target{Recipe: "jvm", RecipeOptions: map[string]any{"full_gc_name": `G1 "Old"`}}, `recipe_options: full_gc_name: the value "G1 \"Old\"" has '"' at byte 3: a recipe's text takes no ", \ or $`},
	} {
		_, err := Expand([]config.Target{tc.target})
		require.Error(t, err, "%+v", tc.target)
		assert.Contains(t, err.Error(), tc.want)
	}
	// recipe_options on a target without a recipe set nothing: said, not
	// ignored.
	err := config.Validate([]config.Target{{Path: "/bin/true", Counters: config.CountersOf("uprobe:main"), RecipeOptions: map[string]any{"min_size": 4096}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "targets[0]: recipe_options without recipe: they set the options of a recipe")
	// Validating a recipe target that was not expanded is a mistake of
	// the caller, said as such.
	err = config.Validate([]config.Target{{Recipe: "dns"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `targets[0] (recipe dns): recipe "dns" is not expanded`)
}

// TestYAML: uprobe-list --recipe NAME prints a collector configuration
// that the collector accepts and that traces what the recipe traces.
func TestYAML(t *testing.T) {
	for _, n := range Names() {
		t.Run(n, func(t *testing.T) {
			r, err := Get(n)
			require.NoError(t, err)
			text := r.YAML()
			assert.True(t, strings.HasPrefix(string(text), "# recipe "+n+": "))
			ret, err := confmap.NewRetrievedFromYAML(text)
			require.NoError(t, err, "%s", text)
			conf, err := ret.AsConf()
			require.NoError(t, err)
			sub, err := conf.Sub("receivers::uprobe")
			require.NoError(t, err)
			var cfg struct {
				Targets []config.Target `mapstructure:"targets"`
			}
			require.NoError(t, sub.Unmarshal(&cfg), "%s", text)
			require.Len(t, cfg.Targets, 1)
			printed := cfg.Targets[0]
			if n == "go-http" {
				printed.Path = "/srv/server"
				require.Error(t, config.Validate([]config.Target{cfg.Targets[0]}), "the printed go-http target asks for a path")
			}
			require.NoError(t, config.Validate([]config.Target{printed}), "%s", text)
			want, err := r.Target(nil)
			require.NoError(t, err)
			want.Recipe, want.RecipeOptions, want.FromRecipe = "", nil, nil
			if n == "go-http" {
				want.Path = "/srv/server"
			}
			assert.Equal(t, want, printed, "the printed target is the recipe's")
		})
	}
}

// TestExpandErrorsAreShort: what a configuration gives a recipe target
// (its recipe's name, its options' names and values) is quoted in an
// error at most 64 bytes long and escaped, whatever its size or bytes; a
// string option takes what names that become telemetry take (printable
// UTF-8), and is what the telemetry says, byte for byte. On main a
// megabyte name or value gave a megabyte error (twice over for the
// recipe's name, unescaped: a terminal escape reached the log), U+0085
// was taken and became a space, and invalid UTF-8 gave YAML's error.
func TestExpandErrorsAreShort(t *testing.T) {
	big := strings.Repeat("A", 1<<20)
	for _, tc := range []struct {
		target config.Target
		want   string
	}{
		{config.Target{Recipe: big}, `targets[0]: no recipe "` + strings.Repeat("A", 64) + `"… (recipes: dns, go-http, jvm, malloc, postgresql, python, tls)`},
		{config.Target{Recipe: "\x1b[31mred"}, `targets[0]: no recipe "\x1b[31mred" (recipes: `},
		{config.Target{Recipe: "jvm", RecipeOptions: map[string]any{big: 1}}, `targets[0] (recipe jvm): recipe_options: "` + strings.Repeat("A", 64) + `"…: recipe jvm has no such option`},
		{config.Target{Recipe: "malloc", RecipeOptions: map[string]any{"min_size": big}}, `recipe_options: min_size: "` + strings.Repeat("A", 64) + `"… is not an integer`},
		{config.Target{Recipe: "jvm", RecipeOptions: map[string]any{"extended_dtrace_probes": big}}, `recipe_options: extended_dtrace_probes: "` + strings.Repeat("A", 64) + `"… is not true or false`},
		{config.Target{Recipe: "jvm", RecipeOptions: map[string]any{"extended_dtrace_probes": []any{big, big}}}, "recipe_options: extended_dtrace_probes: a list is not true or false"},
		{config.Target{Recipe: "jvm", RecipeOptions: map[string]any{"young_gc_name": map[string]any{big: big}}}, "recipe_options: young_gc_name: a map is not a string"},
		{config.Target{Recipe: "malloc", RecipeOptions: map[string]any{"min_size": nil}}, "recipe_options: min_size: null is not an integer"},
		{config.Target{Recipe: "jvm", RecipeOptions: map[string]any{"young_gc_name": strings.Repeat("\x01", 200)}}, `recipe_options: young_gc_name: the value "` + strings.Repeat(`\x01`, 64) + `"… has the control character U+0001 at byte 0`},
		{config.Target{Recipe: "jvm", RecipeOptions: map[string]any{"young_gc_name": "G1\u0085Young"}}, `recipe_options: young_gc_name: the value "G1\u0085Young" has the control character U+0085 at byte 2`},
		{config.Target{Recipe: "jvm", RecipeOptions: map[string]any{"young_gc_name": "G1\xffYoung"}}, `recipe_options: young_gc_name: the value "G1\xffYoung" is not UTF-8 at byte 2`},
		{config.Target{Recipe: "jvm", RecipeOptions: map[string]any{"young_gc_name": "G1 ${x}"}}, `recipe_options: young_gc_name: the value "G1 ${x}" has '$' at byte 3: a recipe's text takes no ", \ or $`},
	} {
		_, err := Expand([]config.Target{tc.target})
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
		assert.Less(t, len(err.Error()), 600, "%.600s", err.Error())
	}

	// Many unknown options: a few are named, the others counted.
	many := map[string]any{}
	for i := range 10000 {
		many[fmt.Sprintf("option%05d", i)] = i
	}
	_, err := Expand([]config.Target{{Recipe: "jvm", RecipeOptions: many}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `recipe_options: "option00000": recipe jvm has no such option`)
	assert.Contains(t, err.Error(), "recipe_options: 9992 more problems")
	assert.Less(t, len(err.Error()), 2000)
}
