package planner

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/gobin"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/recipe"
	"github.com/otel-uprobe/uprobereceiver/internal/regs"
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
	// sentence, after its name: on a C program, or a Go program for a
	// recipe of Go programs (a C program is not one: TestRecipeGoOnly).
	goprog := testutil.BuildGo(t, "goprog", false)
	for _, name := range recipe.Names() {
		r, err := recipe.Get(name)
		require.NoError(t, err)
		require.NotEmpty(t, r.Lacking, name)
		lacking := "/bin/true"
		if r.Program == "go" {
			lacking = goprog
		}
		_, err = Resolve([]config.Target{expandRecipe(t, config.Target{Recipe: name, Path: lacking})})
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

// notGoHTTP builds a C program whose functions are named like net/http's
// (assembler names): a tenant's file that has the go-http recipe's
// functions without being Go.
func notGoHTTP(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "notgo.c")
	require.NoError(t, os.WriteFile(src, []byte(`#include <stdio.h>
void serve(void *a, void *b, void *c, void *d) __asm__("\"net/http.serverHandler.ServeHTTP\"");
void serve(void *a, void *b, void *c, void *d) { printf("%p\n", d); }
void header(void *a, long c) __asm__("\"net/http.(*response).WriteHeader\"");
void header(void *a, long c) { printf("%ld\n", c); }
int main(void) { serve(0, 0, 0, 0); header(0, 200); return 0; }
`), 0o644))
	bin := filepath.Join(dir, "notgo")
	testutil.Gcc(t, dir, "-O1", "-o", bin, src)
	return bin
}

// TestRecipeGoOnly: the go-http recipe reads Go's register ABI and Go's
// types: a file that is not a Go program is refused with the recipe's
// sentence, by names and by registers, when the target is resolved, when
// a file is read (a container's, found later) and when uprobe-list checks
// the recipe. On main, a C program with net/http's function names was
// planned with stripped: true (its C registers read as Go's), and
// uprobe-list offered it the recipe.
func TestRecipeGoOnly(t *testing.T) {
	bin := notGoHTTP(t)
	const want = "recipe go-http: target " + "%s" + ": not a Go program (no Go build information or function table): the go-http recipe traces Go programs"
	for _, options := range []map[string]any{nil, {"stripped": true}} {
		tg := expandRecipe(t, config.Target{Recipe: "go-http", Path: bin, RecipeOptions: options})
		_, err := Resolve([]config.Target{tg})
		require.Error(t, err, "%v", options)
		assert.Contains(t, err.Error(), fmt.Sprintf(want, bin), "%v", options)

		in, err := Inspect(bin, Options{})
		require.NoError(t, err)
		err = in.Check(tg)
		in.Close()
		require.Error(t, err, "%v", options)
		assert.Contains(t, err.Error(), "not a Go program")
	}

	// A Go program is taken, by registers once stripped.
	prog := testutil.BuildGo(t, "recipegohttp", true)
	pl, err := Resolve([]config.Target{expandRecipe(t, config.Target{Recipe: "go-http", Path: prog, RecipeOptions: map[string]any{"stripped": true}})})
	require.NoError(t, err)
	pl.Close()
}

// withGoVersion returns a copy of the Go program at path whose build
// information says it was built by version (as long as the Go that built
// it: the bytes are replaced in place).
func withGoVersion(t *testing.T, path, version string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	magic := bytes.Index(data, []byte("\xff Go buildinf:"))
	require.GreaterOrEqual(t, magic, 0, "build information")
	own := []byte(runtime.Version())
	require.Len(t, []byte(version), len(own))
	at := bytes.Index(data[magic:magic+64], own)
	require.GreaterOrEqual(t, at, 0, "the version after the build information's header")
	copy(data[magic+at:], version)
	out := filepath.Join(t.TempDir(), filepath.Base(path))
	require.NoError(t, os.WriteFile(out, data, 0o755))
	return out
}

// TestGoArgsNeedTheRegisterABI: Go passes arguments in registers since
// Go 1.17 on x86-64 (1.18 on arm64); a Go function's argN or retval of a
// program built by an older Go (its build information, or else its
// function table's layout, says so) is refused rather than read from
// registers that do not hold it. On main, go-http's stripped: true read
// the registers of a program that says Go 1.16 built it.
func TestGoArgsNeedTheRegisterABI(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the fixture's version is rewritten to one of the same length as this Go's")
	}
	prog := testutil.BuildGo(t, "recipegohttp", true)
	old := withGoVersion(t, prog, "go1.16"+runtime.Version()[len("go1.16"):])
	info, isGo, err := gobin.Detect(old)
	require.NoError(t, err)
	require.True(t, isGo)
	require.True(t, strings.HasPrefix(info.GoVersion, "go1.16"), info.GoVersion)

	tg := expandRecipe(t, config.Target{Recipe: "go-http", Path: old, RecipeOptions: map[string]any{"stripped": true}})
	_, err = Resolve([]config.Target{tg})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"+0(arg3):gostring": `+info.GoVersion+` passes a Go function's arguments on the stack: arguments by register need Go 1.17 or later on x86-64`)

	// The same program as it is: taken.
	pl, err := Resolve([]config.Target{expandRecipe(t, config.Target{Recipe: "go-http", Path: prog, RecipeOptions: map[string]any{"stripped": true}})})
	require.NoError(t, err)
	pl.Close()

	for _, tc := range []struct {
		version, layout string
		arch            regs.Arch
		ok              bool
	}{
		{"go1.26.8", "go1.20", regs.ArchAMD64, true},
		{"go1.17", "go1.16", regs.ArchAMD64, true},
		{"go1.17.13", "go1.16", regs.ArchARM64, false},
		{"go1.16.15", "go1.16", regs.ArchAMD64, false},
		{"devel go1.27-abcdef", "go1.20", regs.ArchAMD64, true},
		{"", "go1.16", regs.ArchAMD64, true}, // 1.16 or 1.17: not known
		{"", "go1.16", regs.ArchARM64, false},
		{"", "go1.2", regs.ArchAMD64, false},
		{"", "go1.18", regs.ArchARM64, true},
		{"", "", regs.ArchAMD64, true},
	} {
		err := goRegisterABI(&file{isGo: true, goVersion: tc.version, goPclntab: tc.layout, arch: tc.arch})
		assert.Equal(t, tc.ok, err == nil, "%+v: %v", tc, err)
	}
}
