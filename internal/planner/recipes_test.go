package planner

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/recipe"
)

// expandRecipe expands one recipe target.
func expandRecipe(t *testing.T, tg config.Target) config.Target {
	t.Helper()
	got, err := recipe.Expand([]config.Target{tg})
	require.NoError(t, err)
	return got[0]
}

// TestRecipeLacksProbes: a file without the recipe's probes is refused
// with the recipe's name, the probe, and the recipe's sentence when the
// file has none of the probes the sentence is about; with the planner's
// own sentence (the closest names) when it has some.
func TestRecipeLacksProbes(t *testing.T) {
	_, err := Resolve([]config.Target{expandRecipe(t, config.Target{Recipe: "postgresql", Path: "/bin/true"})})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "recipe postgresql: usdt:postgresql:query__start: this postgres has no USDT probes: it was built without --enable-dtrace (target /bin/true: usdt:postgresql:query__start: the file has no USDT probes)")

	_, err = Resolve([]config.Target{expandRecipe(t, config.Target{Recipe: "tls", Path: "/bin/true"})})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "recipe tls: uprobe:SSL_write: this file has no SSL_* functions: the tls recipe traces OpenSSL's libssl (path: libssl), not GnuTLS, NSS, rustls or Go's crypto/tls")

	// Every recipe on a file that has none of its probes says its
	// sentence, after its name.
	for _, name := range recipe.Names() {
		r, err := recipe.Get(name)
		require.NoError(t, err)
		require.NotEmpty(t, r.Lacking, name)
		_, err = Resolve([]config.Target{expandRecipe(t, config.Target{Recipe: name, Path: "/bin/true"})})
		require.Error(t, err, name)
		assert.Regexp(t, "recipe "+regexp.QuoteMeta(name)+": [^ ]+: "+regexp.QuoteMeta(r.Lacking[0].Sentence)+" \\(", err.Error())
	}

	const postgres = "/usr/lib/postgresql/15/bin/postgres"
	if _, err := os.Stat(postgres); err != nil {
		testutil.SkipOrFail(t, "%s is not installed", postgres)
	}
	tg := expandRecipe(t, config.Target{Recipe: "postgresql", Path: postgres,
		Counters: config.CountersOf("usdt:postgresql:query__nope")})
	_, err = Resolve([]config.Target{tg})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "recipe postgresql: target "+postgres+": usdt:postgresql:query__nope: no such USDT probe in the file; closest: ")
	assert.NotContains(t, err.Error(), "--enable-dtrace", "this postgres has USDT probes: the sentence is not said")

	pl, err := Resolve([]config.Target{expandRecipe(t, config.Target{Recipe: "postgresql", Path: postgres})})
	require.NoError(t, err)
	defer pl.Close()
	names := map[string]bool{}
	for _, s := range pl.Spans {
		names[s.Name] = true
		if s.Name == "postgresql.query" {
			require.Len(t, s.ErrorExits, 1)
			assert.Equal(t, "usdt:postgresql:transaction__abort", pl.Probes[s.ErrorExits[0]].Ref)
			assert.Equal(t, []plan.KeyValue{{Key: "db.system.name", Value: "postgresql"}}, s.Constants)
			assert.Equal(t, []plan.Derived{{Key: "db.operation.name", From: "db.query.text"}}, s.FirstWords)
		}
	}
	assert.Equal(t, map[string]bool{"postgresql.query": true, "postgresql.transaction": true, "postgresql.lock_wait": true}, names)
	var named int
	for _, site := range pl.Sites {
		for _, f := range site.Entry {
			if f.Key == "postgresql.lock.mode" {
				named++
				assert.Equal(t, "AccessExclusiveLock", fetchName(f.Value.Enum, 8))
			}
		}
	}
	assert.Equal(t, 1, named, "value names are in the lock wait's fetch")
}

func fetchName(table []fetch.Enumerator, v int64) string {
	for _, e := range table {
		if e.Value == v {
			return e.Name
		}
	}
	return ""
}

// TestRecipeSearch: a recipe's usual file that PATH and the library
// cache do not know is found in the recipe's usual places; a name found
// nowhere is refused naming the recipe.
func TestRecipeSearch(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{"14", "15"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, v, "bin"), 0o755))
		data, err := os.ReadFile("/bin/true")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, v, "bin", "recipe-test-program"), append(data, v...), 0o755))
	}
	tg := config.Target{
		Path: "recipe-test-program", Recipe: "test",
		Spans:      []config.Span{{Name: "main", Function: "main"}},
		FromRecipe: &config.RecipeFacts{Search: []string{filepath.Join(dir, "*", "bin", "recipe-test-program"), "relative/*"}},
	}
	cands, err := HostLocator{}.Locate(tg)
	require.NoError(t, err)
	var paths []string
	for _, c := range cands {
		paths = append(paths, c.Path)
		assert.Contains(t, c.How, "the recipe's usual place")
		c.Close()
	}
	assert.Equal(t, []string{filepath.Join(dir, "14", "bin", "recipe-test-program"), filepath.Join(dir, "15", "bin", "recipe-test-program")}, paths)

	tg.FromRecipe.Search = []string{filepath.Join(dir, "none", "*")}
	_, err = Resolve([]config.Target{tg}, Options{Locator: HostLocator{}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "recipe test: target recipe-test-program: ")
}
