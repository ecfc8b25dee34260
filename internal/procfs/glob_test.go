package procfs

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGlob: a glob inside a root reads its directories from the root's
// descriptor and is bounded: its matches, sorted; an absolute link, ".."
// and a link out of the root name files of the root; a FIFO, a loop of
// links or a file where a directory is expected match nothing, at once;
// a directory of 100,000 entries is read up to GlobMaxNames and says there
// was more.
func TestGlob(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir() // the host, to the root
	mk := func(p string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, p), []byte("x"), 0o644))
	}
	mk("usr/lib/jvm/java-21/lib/server/libjvm.so")
	mk("usr/lib/jvm/java-17/lib/server/libjvm.so")
	require.NoError(t, os.MkdirAll(filepath.Join(outside, "lib/server"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "lib/server/libjvm.so"), []byte("host"), 0o644))
	jvm := filepath.Join(root, "usr/lib/jvm")
	require.NoError(t, os.Symlink(outside, filepath.Join(jvm, "a-absolute")))              // the root's own outside path: none
	require.NoError(t, os.Symlink("../../../../../../..", filepath.Join(jvm, "b-dotdot"))) // the root itself
	require.NoError(t, syscall.Mkfifo(filepath.Join(jvm, "c-fifo"), 0o644))
	require.NoError(t, os.Symlink("d-loop", filepath.Join(jvm, "d-loop")))
	require.NoError(t, os.WriteFile(filepath.Join(jvm, "e-file"), nil, 0o644))

	d, err := Root(root).OpenDir()
	require.NoError(t, err)
	defer d.Close()
	start := time.Now()
	got, more, err := d.Glob("/usr/lib/jvm/*/lib/server/libjvm.so", 16)
	require.NoError(t, err)
	assert.False(t, more)
	assert.Less(t, time.Since(start), 5*time.Second, "a FIFO does not block")
	assert.Equal(t, []string{
		"/usr/lib/jvm/a-absolute/lib/server/libjvm.so", "/usr/lib/jvm/b-dotdot/lib/server/libjvm.so",
		"/usr/lib/jvm/c-fifo/lib/server/libjvm.so", "/usr/lib/jvm/d-loop/lib/server/libjvm.so",
		"/usr/lib/jvm/e-file/lib/server/libjvm.so",
		"/usr/lib/jvm/java-17/lib/server/libjvm.so", "/usr/lib/jvm/java-21/lib/server/libjvm.so",
	}, got, "literal components are joined, not read")
	regular := map[string]string{}
	for _, p := range got {
		f, _, err := d.OpenRegular(p)
		if err != nil {
			continue
		}
		b := make([]byte, 8)
		n, _ := f.Read(b)
		f.Close()
		regular[p] = string(b[:n])
	}
	assert.Equal(t, map[string]string{
		"/usr/lib/jvm/java-17/lib/server/libjvm.so": "x", "/usr/lib/jvm/java-21/lib/server/libjvm.so": "x",
	}, regular, "only the root's files open: never the outside's")

	// Wildcards in the middle read directories: a FIFO, a loop or a file
	// there matches nothing.
	got, _, err = d.Glob("/usr/lib/jvm/*/*/server/libjvm.so", 16)
	require.NoError(t, err)
	assert.Equal(t, []string{"/usr/lib/jvm/b-dotdot/usr/server/libjvm.so", "/usr/lib/jvm/java-17/lib/server/libjvm.so", "/usr/lib/jvm/java-21/lib/server/libjvm.so"}, got,
		"b-dotdot is the root itself, whose usr/ it lists")

	_, _, err = d.Glob("/usr/lib/jvm/[", 16)
	require.Error(t, err)
	_, _, err = d.Glob("usr/lib/*", 16)
	require.Error(t, err)

	t.Logf("small globs: %v", time.Since(start))
	// 100,000 entries: read up to the bound, the rest said.
	// (In a root of its own on tmpfs where there is one: 100,000 files
	// take seconds on a busy disk.)
	start = time.Now()
	bigRoot := t.TempDir()
	if shm, err := os.MkdirTemp("/dev/shm", "globtest"); err == nil {
		bigRoot = shm
		t.Cleanup(func() { os.RemoveAll(shm) })
	}
	d, err = Root(bigRoot).OpenDir()
	require.NoError(t, err)
	defer d.Close()
	many := filepath.Join(bigRoot, "many")
	require.NoError(t, os.Mkdir(many, 0o755))
	for i := range 100_000 {
		f, err := os.Create(filepath.Join(many, fmt.Sprintf("lib%06d.so", i)))
		require.NoError(t, err)
		f.Close()
	}
	t.Logf("100,000 files made in %v", time.Since(start))
	start = time.Now()
	names, more, err := d.ReadDirNames("/many", GlobMaxNames)
	require.NoError(t, err)
	assert.Len(t, names, GlobMaxNames)
	assert.True(t, more)
	got, more, err = d.Glob("/many/lib*.so", 16)
	require.NoError(t, err)
	assert.Len(t, got, 16)
	assert.True(t, more)
	got, more, err = d.Glob("/many/*/lib/server/libjvm.so", 16)
	require.NoError(t, err)
	assert.Len(t, got, 16, "at most max paths at the last component")
	assert.True(t, more)
	// Two wildcards: the second reads the first's matches, within the
	// budget of names: files are no directories, so nothing matches.
	start = time.Now()
	got, _, err = d.Glob("/many/*/*", 16)
	require.NoError(t, err)
	assert.Empty(t, got)
	t.Logf("globs of 100,000 entries: %v", time.Since(start))
	assert.Less(t, time.Since(start), 5*time.Second)
}
