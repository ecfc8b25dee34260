package debuginfo

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
)

func installFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Dir(to), 0o755))
	require.NoError(t, os.WriteFile(to, b, 0o755))
}

// splitDebug makes path (a copy of bin) carry no DWARF, with a
// .gnu_debuglink naming its debug file dir/link, which gets its
// debuginfo (objcopy --only-keep-debug), and returns its build id.
func splitDebug(t *testing.T, bin, path, link string) string {
	t.Helper()
	installFile(t, bin, path)
	debug := filepath.Join(filepath.Dir(path), link)
	testutil.Run(t, filepath.Dir(path), "objcopy", "--only-keep-debug", path, debug)
	testutil.Run(t, filepath.Dir(path), "strip", "--strip-debug", path)
	testutil.Run(t, filepath.Dir(path), "objcopy", "--add-gnu-debuglink="+debug, path)
	return testutil.BuildID(t, path)
}

// The debug files of a file found through a container's root come from
// that root, or from the host's debug directories by build id; what a
// debuglink leads to that is not a regular file of the container is
// refused with a sentence, promptly; a host debug directory holding a
// file of the debuglink's name (and the right CRC) is not used.
func TestDebugFilesOfAContainer(t *testing.T) {
	testutil.RequireRoot(t)
	requireTool(t, "objcopy")
	requireTool(t, "strip")
	bin := testutil.BuildStatic(t, "hardening", "-pthread")
	root := t.TempDir()
	installFile(t, bin, filepath.Join(root, "app", "prog"))
	app := func(name string) string { return filepath.Join(root, "app", name) }

	splitDebug(t, bin, app("good"), "good.debug")
	splitDebug(t, bin, app("fifo"), "fifo.debug")
	require.NoError(t, os.Remove(app("fifo.debug")))
	require.NoError(t, unix.Mkfifo(app("fifo.debug"), 0o644))
	splitDebug(t, bin, app("zero"), "zero.debug")
	require.NoError(t, os.Remove(app("zero.debug")))
	require.NoError(t, os.Symlink("/dev/zero", app("zero.debug")))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "dev"), 0o755))
	require.NoError(t, unix.Mknod(filepath.Join(root, "dev", "zero"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 5))))
	hostDir := t.TempDir()
	splitDebug(t, bin, app("abs"), "abs.debug")
	require.NoError(t, os.Rename(app("abs.debug"), filepath.Join(hostDir, "abs.debug")))
	require.NoError(t, os.Symlink(filepath.Join(hostDir, "abs.debug"), app("abs.debug")))
	// A host debug directory with the debuglink's name at the container
	// file's directory, and the right CRC: never looked at.
	named := t.TempDir()
	splitDebug(t, bin, app("named"), "named.debug")
	require.NoError(t, os.MkdirAll(filepath.Join(named, "app"), 0o755))
	require.NoError(t, os.Rename(app("named.debug"), filepath.Join(named, "app", "named.debug")))
	// A host debug directory by build id: used.
	byID := t.TempDir()
	id := splitDebug(t, bin, app("byid"), "byid.debug")
	require.NoError(t, os.MkdirAll(filepath.Join(byID, ".build-id", id[:2]), 0o755))
	require.NoError(t, os.Rename(app("byid.debug"), filepath.Join(byID, ".build-id", id[:2], id[2:]+".debug")))

	ctr := testutil.StartContainer(t, root, "ready", "/app/prog")
	dir, err := procfs.FS{}.ProcessRoot(ctr.PID).OpenDir()
	require.NoError(t, err)
	defer dir.Close()
	in := "/proc/" + strconv.Itoa(ctr.PID) + "/root"

	open := func(path string, dirs ...string) (*File, error) {
		t.Helper()
		start := time.Now()
		f, err := Open(context.Background(), path, Options{Root: dir, DebugDirs: dirs})
		assert.Less(t, time.Since(start), 2*time.Second, "%s: promptly", path)
		return f, err
	}

	f, err := open("/app/good")
	require.NoError(t, err)
	assert.Equal(t, SourceDebuglink, f.Source)
	assert.Equal(t, in+"/app/good.debug", f.DebugPath)
	require.NoError(t, f.Close())

	f, err = open("/app/byid", byID, named)
	require.NoError(t, err, "the host's debug directory by build id")
	assert.Equal(t, SourceBuildID, f.Source)
	assert.Equal(t, filepath.Join(byID, ".build-id", id[:2], id[2:]+".debug"), f.DebugPath)
	require.NoError(t, f.Close())

	for _, tt := range []struct {
		path string
		dirs []string
		want string
	}{
		{"/app/fifo", nil, in + "/app/fifo.debug: not a regular file (a FIFO)"},
		{"/app/zero", nil, in + "/app/zero.debug: not a regular file (a character device)"},
		{"/app/abs", nil, ""},               // the link leads nowhere inside the root
		{"/app/named", []string{named}, ""}, // not on the host by its debuglink name
	} {
		_, err := open(tt.path, tt.dirs...)
		require.ErrorIs(t, err, ErrNoDebugInfo, tt.path)
		assert.Contains(t, err.Error(), in+tt.path+".debug", "%s: where it looked", tt.path)
		if tt.want != "" {
			assert.Contains(t, err.Error(), "debug file candidate ignored: "+tt.want)
		} else {
			assert.NotContains(t, err.Error(), "crc32", "%s: no CRC of a host file", tt.path)
		}
		for _, d := range tt.dirs {
			assert.Contains(t, err.Error(), filepath.Join(d, "app", filepath.Base(tt.path)+".debug"), "%s: looked inside the root", tt.path)
		}
	}

	// A debug file over the size bound is refused before its CRC is read.
	_, err = Open(context.Background(), "/app/good", Options{Root: dir, MaxDebugFileBytes: 4096})
	require.ErrorIs(t, err, ErrNoDebugInfo)
	assert.Contains(t, err.Error(), "over the 4096-byte limit")
	assert.False(t, errors.Is(err, ErrCRCMismatch))
}
