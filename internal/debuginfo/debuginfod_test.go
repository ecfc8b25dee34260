package debuginfo

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil/hostile"
)

// debuginfodServer serves body for every request and counts them.
func debuginfodServer(t *testing.T, handler func(w http.ResponseWriter, r *http.Request)) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		handler(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// cacheNames lists the cache directory.
func cacheNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// A failed download is remembered on disk for NegativeTTL: not asked
// again at the next Open, nor by another client on the same cache (the
// collector restarted), until the memory is older than NegativeTTL. It
// was asked again at every start, each time waiting up to 90 s.
func TestDebuginfodRemembersFailures(t *testing.T) {
	prog := hostile.Program(t)
	srv, hits := debuginfodServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "broken", http.StatusInternalServerError)
	})
	cache := t.TempDir()
	open := func() error {
		d := &Debuginfod{URLs: []string{srv.URL}, CacheDir: cache}
		_, err := Open(context.Background(), prog, Options{DebugDirs: []string{}, Debuginfod: d})
		return err
	}
	err := open()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "500 Internal Server Error")
	assert.Equal(t, int32(1), hits.Load())

	for range 3 {
		err = open()
		assert.ErrorIs(t, err, ErrDebuginfodFailed)
		assert.Contains(t, err.Error(), "not asked again before")
	}
	assert.Equal(t, int32(1), hits.Load(), "remembered, across clients")

	id := failID(t, cache)
	old := time.Now().Add(-DefaultDebuginfodNegativeTTL - time.Minute)
	require.NoError(t, os.Chtimes(filepath.Join(cache, id), old, old))
	require.Error(t, open())
	assert.Equal(t, int32(2), hits.Load(), "asked again once the memory is old")
}

// failID returns the one .fail file of a cache directory.
func failID(t *testing.T, cache string) string {
	t.Helper()
	names := cacheNames(t, cache)
	require.Len(t, names, 1)
	require.Equal(t, ".fail", filepath.Ext(names[0]))
	return names[0]
}

// An answer whose debug sections declare more than the budget (a
// compressed-section bomb) is refused before it is cached, and remembered.
func TestDebuginfodRefusesBombs(t *testing.T) {
	prog := hostile.Program(t)
	bomb, err := hostile.Compressed(".debug_str", nil, 1<<30)
	require.NoError(t, err)
	served, err := os.ReadFile(hostile.WithType(t, prog, func(u *hostile.Unit) uint32 { return u.Base("long", 8) }, bomb))
	require.NoError(t, err)
	srv, hits := debuginfodServer(t, func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(served) })
	cache := t.TempDir()
	d := &Debuginfod{URLs: []string{srv.URL}, CacheDir: cache}
	before := allocated()
	_, err = Open(context.Background(), prog, Options{DebugDirs: []string{}, Debuginfod: d})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrOverBudget)
	assert.Less(t, allocated()-before, uint64(32<<20), "nothing decompressed")
	failID(t, cache) // nothing cached but the failure
	_, err = Open(context.Background(), prog, Options{DebugDirs: []string{}, Debuginfod: d})
	assert.ErrorIs(t, err, ErrDebuginfodFailed)
	assert.Equal(t, int32(1), hits.Load())
}

// A server that does not answer holds Open only as long as its context: a
// deadline is remembered as a failure, a cancellation (Shutdown) is not.
func TestDebuginfodCancellable(t *testing.T) {
	prog := hostile.Program(t)
	srv, hits := debuginfodServer(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	for _, cancel := range []bool{false, true} {
		cache := t.TempDir()
		d := &Debuginfod{URLs: []string{srv.URL}, CacheDir: cache}
		ctx, stop := context.WithTimeout(context.Background(), 200*time.Millisecond)
		if cancel {
			stop()
			ctx, stop = context.WithCancel(context.Background())
			time.AfterFunc(200*time.Millisecond, stop)
		}
		start := time.Now()
		_, err := Open(ctx, prog, Options{DebugDirs: []string{}, Debuginfod: d})
		stop()
		require.Error(t, err)
		assert.Less(t, time.Since(start), 10*time.Second)
		if cancel {
			assert.ErrorIs(t, err, context.Canceled)
			assert.Empty(t, cacheNames(t, cache), "a cancellation is not a failure of the server")
		} else {
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			failID(t, cache)
		}
	}
	assert.Equal(t, int32(2), hits.Load())
}

// A debug file from debuginfo with a type of itself is cached (its
// sections are sound) and its type refused, from the server and from the
// cache alike: on main it crashed every later start, the server gone.
func TestDebuginfodHostileTypes(t *testing.T) {
	prog := hostile.Program(t)
	served, err := os.ReadFile(hostile.WithType(t, prog, func(u *hostile.Unit) uint32 { return u.Typedef("t", u.Next()) }))
	require.NoError(t, err)
	srv, hits := debuginfodServer(t, func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(served) })
	d := &Debuginfod{URLs: []string{srv.URL}, CacheDir: t.TempDir()}
	for range 2 {
		f, err := Open(context.Background(), prog, Options{DebugDirs: []string{}, Debuginfod: d})
		require.NoError(t, err)
		assert.Equal(t, SourceDebuginfod, f.Source)
		fn, err := f.Function("work")
		require.NoError(t, err)
		_, err = f.Scope(fn, 0, SiteEntry)
		assert.ErrorIs(t, err, ErrMalformed)
		require.NoError(t, f.Close())
	}
	assert.Equal(t, int32(1), hits.Load(), "the second from the cache")
}
