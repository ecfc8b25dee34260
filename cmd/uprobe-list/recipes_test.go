//go:build linux

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
	_, errOut, code = list(t, "-recipe", "dns", "/bin/true")
	assert.Equal(t, 2, code)
	assert.Equal(t, "uprobe-list: -recipe NAME takes no FILE\n", errOut)
	_, errOut, code = list(t, "-recipe", "mysql")
	assert.Equal(t, 2, code)
	assert.Equal(t, "uprobe-list: no recipe \"mysql\" (recipes: dns, go-http, jvm, malloc, postgresql, python, tls)\n", errOut)
}

// recipeOffers returns the target items of a listing's Recipes section
// (the lines under its "  targets:", comments dropped) and the recipes
// they name.
func recipeOffers(t *testing.T, listing string) (lines, names []string) {
	t.Helper()
	_, section, ok := strings.Cut(listing, "\nRecipes: ")
	if !ok {
		return nil, nil
	}
	_, block, ok := strings.Cut(section, "\n  targets:\n")
	require.True(t, ok, "a Recipes section has a targets: block:\n%s", section)
	for _, line := range strings.Split(block, "\n") {
		if line == "" {
			break
		}
		require.True(t, strings.HasPrefix(line, "    "), "a line of the targets: block: %q", line)
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		lines = append(lines, line)
		if name, ok := strings.CutPrefix(line, "    - recipe: "); ok {
			names = append(names, name)
		}
	}
	return lines, names
}

// TestRecipesThatApply: the listing of a file ends with the recipes that
// apply to it, each a target to paste under the receiver's targets: that
// the collector's Start accepts: the C library's dns and malloc, libssl's
// tls, Debian's python3.11's python, PostgreSQL's postgresql, libjvm's
// jvm, a Go HTTP server's go-http (stripped: with recipe_options:
// {stripped: true}); a file none applies to lists none.
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
		out, errOut, code := list(t, "-width", "100", file)
		require.Equal(t, 0, code, errOut)
		lines, got := recipeOffers(t, out)
		assert.Equal(t, want, got, file)
		if len(lines) > 0 {
			assert.Contains(t, lines, "      path: "+file)
			pasted := "receivers:\n  uprobe:\n    targets:\n" + strings.Join(lines, "\n") + "\n"
			assert.NoError(t, startAccepts(pasted), "%s:\n%s", file, pasted)
		}
	}
	for _, stripped := range []bool{false, true} {
		path := testutil.BuildGo(t, "recipegohttp", stripped)
		out, errOut, code := list(t, path)
		require.Equal(t, 0, code, errOut)
		lines, got := recipeOffers(t, out)
		assert.Equal(t, []string{"go-http"}, got, "a Go HTTP server (stripped: %v): its function table names net/http's functions", stripped)
		if stripped {
			assert.Contains(t, lines, "      recipe_options: {stripped: true}", "no DWARF: by registers")
		} else {
			assert.NotContains(t, strings.Join(lines, "\n"), "recipe_options")
		}
		pasted := "receivers:\n  uprobe:\n    targets:\n" + strings.Join(lines, "\n") + "\n"
		assert.NoError(t, startAccepts(pasted), pasted)
	}
}
