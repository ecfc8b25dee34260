//go:build linux

package procfs

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// escapeTree is a container-like root whose links try to leave it.
func escapeTree(t *testing.T) tree {
	tr := newTree(t)
	tr.file("etc/passwd", "inside\n", 0o644)
	tr.file("usr/lib/libz.so.1", "zlib\n", 0o644)
	tr.symlink("lib", "usr/lib")                          // relative, fine
	tr.symlink("abs", "/etc")                             // absolute: the root's /etc
	tr.symlink("up", "../../../../../../../../etc")       // ".." stops at the root
	tr.symlink("usr/lib/evil.so", "/../../../etc/passwd") // absolute with ".."
	tr.symlink("loop1", "loop2")
	tr.symlink("loop2", "loop1")
	tr.symlink("proc-self", "/proc/self/root/etc/passwd") // a magic link on a live system
	tr.symlink("dangling", "/nowhere/file")
	return tr
}

func TestRootStaysInside(t *testing.T) {
	tr := escapeTree(t)
	r := Root(tr.dir)
	tests := []struct {
		name, path, wantJoin, wantContent string
	}{
		{"plain", "/etc/passwd", "etc/passwd", "inside\n"},
		{"relative name", "etc/passwd", "etc/passwd", "inside\n"},
		{"relative link", "/lib/libz.so.1", "usr/lib/libz.so.1", "zlib\n"},
		{"absolute link", "/abs/passwd", "etc/passwd", "inside\n"},
		{"dot-dot link", "/up/passwd", "etc/passwd", "inside\n"},
		{"dot-dot in the name", "/../../../etc/passwd", "etc/passwd", "inside\n"},
		{"absolute link with dot-dot", "/lib/evil.so", "etc/passwd", "inside\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := r.Join(tt.path)
			require.NoError(t, err)
			assert.Equal(t, filepath.Join(tr.dir, tt.wantJoin), p)

			data, _, err := r.ReadFile(tt.path, 100)
			require.NoError(t, err)
			assert.Equal(t, tt.wantContent, string(data))

			d, err := r.OpenDir()
			require.NoError(t, err)
			defer d.Close()
			f, real, err := d.walk(tt.path, os.O_RDONLY)
			require.NoError(t, err, "fallback without openat2")
			f.Close()
			assert.Equal(t, "/"+tt.wantJoin, real)

			_, id, err := r.Stat(tt.path)
			require.NoError(t, err)
			fi, err := os.Stat(filepath.Join(tr.dir, tt.wantJoin))
			require.NoError(t, err)
			assert.Equal(t, IDOf(fi), id)
		})
	}
}

func TestRootErrors(t *testing.T) {
	tr := escapeTree(t)
	r := Root(tr.dir)

	_, err := r.Join("/loop1")
	require.ErrorIs(t, err, syscall.ELOOP)
	_, err = r.Open("/loop1")
	require.ErrorIs(t, err, syscall.ELOOP)

	_, err = r.Open("/proc-self")
	require.ErrorIs(t, err, os.ErrNotExist, "the link resolves inside the root, which has no /proc")

	p, err := r.Join("/dangling")
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(tr.dir, "nowhere/file"), p)
	_, _, err = r.Stat("/dangling")
	require.ErrorIs(t, err, os.ErrNotExist)
	assert.Contains(t, err.Error(), tr.dir+"/dangling")

	_, truncated, err := r.ReadFile("/etc/passwd", 3)
	require.NoError(t, err)
	assert.True(t, truncated)
}

// TestRootRefusesMagicLinks: on the live system, /proc/self/root is a
// magic link, which resolution inside a root refuses to follow.
func TestRootRefusesMagicLinks(t *testing.T) {
	_, err := Root("/").Open("/proc/self/root/etc/hostname")
	require.ErrorIs(t, err, syscall.ELOOP)
	f, err := Root("/").Open("/etc/hostname")
	require.NoError(t, err)
	f.Close()
}

// OpenRegular opens without blocking and refuses what is not a regular
// file, saying what it is; links leading out of the tree are resolved
// inside it. With openat2 and with the user-space walk alike.
func TestDirOpenRegular(t *testing.T) {
	tr := escapeTree(t)
	require.NoError(t, syscall.Mkfifo(filepath.Join(tr.dir, "fifo"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(tr.dir, "dev"), 0o755))
	tr.symlink("zero", "/dev/zero")
	tr.symlink("hostzero", "/proc/self/root/dev/zero")
	d, err := Root(tr.dir).OpenDir()
	require.NoError(t, err)
	defer d.Close()
	for _, fallback := range []bool{false, true} {
		openat2Refused.Store(fallback)
		f, _, err := d.OpenRegular("/lib/evil.so")
		require.NoError(t, err, "fallback %v", fallback)
		f.Close()

		_, _, err = d.OpenRegular("/fifo")
		require.ErrorIs(t, err, ErrNotRegular, "fallback %v", fallback)
		assert.Equal(t, tr.dir+"/fifo: not a regular file (a FIFO)", err.Error())
		_, _, err = d.OpenRegular("/etc")
		assert.Equal(t, tr.dir+"/etc: not a regular file (a directory)", err.Error())
		_, _, err = d.OpenRegular("/zero")
		require.ErrorIs(t, err, os.ErrNotExist, "/dev/zero inside the tree, which has none (fallback %v)", fallback)
		_, _, err = d.OpenRegular("/hostzero")
		require.Error(t, err, "a magic link is never followed (fallback %v)", fallback)
		_, _, err = d.OpenRegular("/proc-self")
		require.ErrorIs(t, err, os.ErrNotExist, "fallback %v", fallback)

		p, err := d.Realpath("/lib/evil.so")
		require.NoError(t, err)
		assert.Equal(t, "/etc/passwd", p)
	}
	openat2Refused.Store(false)
}

// OpenRegular and ReadDirNames never open for reading what is not a
// regular file (a directory for ReadDirNames): a device's driver runs its
// open for the opener (a container's node of the host's watchdog, c 10
// 130, is armed by an open from the collector, which the container's
// device cgroup does not confine), and a FIFO's open releases a writer
// that waits for a reader. inotify's IN_OPEN tells every open of the
// tree's FIFO and device (O_PATH aside): on main OpenRegular opened them
// (O_NONBLOCK) before refusing them. With openat2 and with the user-space
// walk.
func TestNonRegularNeverOpened(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "libfifo.so"), 0o644))
	names := []string{"/libfifo.so"}
	if os.Geteuid() == 0 {
		require.NoError(t, syscall.Mknod(filepath.Join(dir, "libdevice.so"), syscall.S_IFCHR|0o644, int(unix.Mkdev(1, 3)))) // /dev/null's
		names = append(names, "/libdevice.so")
	}
	d, err := Root(dir).OpenDir()
	require.NoError(t, err)
	defer d.Close()
	in, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	require.NoError(t, err)
	defer unix.Close(in)
	_, err = unix.InotifyAddWatch(in, dir, unix.IN_OPEN)
	require.NoError(t, err)
	for _, fallback := range []bool{false, true} {
		openat2Refused.Store(fallback)
		for _, name := range names {
			_, _, err := d.OpenRegular(name)
			require.ErrorIs(t, err, ErrNotRegular, "%s, fallback %v", name, fallback)
			_, _, err = d.ReadDirNames(name, 10)
			require.ErrorIs(t, err, syscall.ENOTDIR, "%s, fallback %v", name, fallback)
		}
		// A process's LD_LIBRARY_PATH naming them: the loader's search
		// reads directories.
		_, err = Resolver{Root: d, LibraryPath: names}.Library("libz")
		require.Error(t, err)
		_, err = Resolver{Root: Root(dir), LibraryPath: names}.Library("libz")
		require.Error(t, err)
	}
	openat2Refused.Store(false)
	var buf [4096]byte
	n, err := unix.Read(in, buf[:])
	var opened []string
	for off := 0; err == nil && off+unix.SizeofInotifyEvent <= n; {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
		opened = append(opened, strings.TrimRight(string(name), "\x00"))
		off += unix.SizeofInotifyEvent + int(ev.Len)
	}
	assert.Empty(t, opened, "opened for reading (IN_OPEN)")

	// A regular file still opens, and is the one the name leads to.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "lib.so"), []byte("ELF"), 0o644))
	f, fi, err := d.OpenRegular("/lib.so")
	require.NoError(t, err)
	b := make([]byte, 8)
	m, _ := f.Read(b)
	assert.Equal(t, "ELF", string(b[:m]))
	assert.Equal(t, int64(3), fi.Size())
	assert.Equal(t, filepath.Join(dir, "lib.so"), f.Name(), "named as the collector sees it")
	f.Close()
}
