package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

// TestRecipeYAML: -recipe NAME prints the recipe as a collector
// configuration (its contents are checked by internal/recipe's TestYAML);
// an unknown name is refused with the names there are.
func TestRecipeYAML(t *testing.T) {
	out, errOut, code := list(t, "-recipe", "postgresql")
	require.Equal(t, 0, code, errOut)
	assert.True(t, strings.HasPrefix(out, "# recipe postgresql: "))
	assert.Contains(t, out, "receivers:\n  uprobe:\n    targets:\n      - path: postgres\n")
	assert.Contains(t, out, "entry: usdt:postgresql:query__start")
	out, errOut, code = list(t, "--recipe", "malloc")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, `filter: "arg0:u64 >= 1048576"`, "the options' defaults")
	_, errOut, code = list(t, "-recipe", "mysql")
	assert.Equal(t, 2, code)
	assert.Equal(t, "uprobe-list: no recipe \"mysql\" (recipes: dns, go-http, jvm, malloc, postgresql, python, tls)\n", errOut)
}

// TestRecipesThatApply: the listing of a file ends with the recipes that
// apply to it: the C library's dns and malloc, libssl's tls, Debian's
// python3.11's python, PostgreSQL's postgresql, a Go HTTP server's
// go-http; a file none applies to lists none.
func TestRecipesThatApply(t *testing.T) {
	for file, want := range map[string][]string{
		"/lib/x86_64-linux-gnu/libc.so.6":                         {"dns", "malloc"},
		"/lib/x86_64-linux-gnu/libssl.so.3":                       {"tls"},
		"/usr/bin/python3.11":                                     {"python"},
		"/usr/lib/postgresql/15/bin/postgres":                     {"postgresql"},
		"/usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so": {"jvm"},
		"/bin/true": nil,
	} {
		if _, err := os.Stat(file); err != nil {
			testutil.SkipOrFail(t, "%s is not installed", file)
		}
		out, errOut, code := list(t, file)
		require.Equal(t, 0, code, errOut)
		var got []string
		if _, section, ok := strings.Cut(out, "\nRecipes: "); ok {
			for _, line := range strings.Split(section, "\n") {
				if name, _, ok := strings.Cut(line, ": "); ok && strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "    ") {
					got = append(got, strings.TrimSpace(name))
				}
			}
			assert.Contains(t, section, "targets:  - {recipe: "+want[0]+", path: "+file+"}")
		}
		assert.Equal(t, want, got, file)
	}
	out, errOut, code := list(t, testutil.BuildGo(t, "recipegohttp", true))
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "\nRecipes: 1\n  go-http: ", "a stripped Go HTTP server: its function table names net/http's functions")
}
