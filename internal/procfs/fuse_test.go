//go:build linux

package procfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

func TestParseFUSEMounts(t *testing.T) {
	mountinfo := `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:50 / /mnt/s3 rw,nosuid,nodev - fuse.s3fs s3fs rw,user_id=0,group_id=0
31 22 0:51 / /mnt/with\040space rw - fuse hung rw
32 22 0:52 / /mnt/blk rw - fuseblk /dev/sdb1 rw
33 22 0:53 / /mnt/not rw - fusectl fusectl rw
34 22 0:54 / /mnt/tricky\040-\040fuse rw - tmpfs none rw
garbage line - fuse
`
	assert.Equal(t, []FUSEMount{
		{ID: 30, Point: "/mnt/s3", Type: "fuse.s3fs"},
		{ID: 31, Point: "/mnt/with space", Type: "fuse"},
		{ID: 32, Point: "/mnt/blk", Type: "fuseblk"},
	}, ParseFUSEMounts([]byte(mountinfo)))
}

// A process with a FUSE mount whose server never answers: its root, opened
// by OpenProcessRoot, refuses with ErrCrossesMount, at once, every path
// into that mount (directly, and through a symbolic link on the root's
// file system), by openat2 and by the user-space walk, and still opens the
// files of its root file system.
func TestOpenProcessRootNeverWaitsForFUSE(t *testing.T) {
	testutil.RequireRoot(t)
	dir, err := os.MkdirTemp("/var/tmp", "fuse-test-") // on the root file system
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	hung := filepath.Join(dir, "hung")
	require.NoError(t, os.Mkdir(hung, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "plain"), []byte("plain\n"), 0o644))
	require.NoError(t, os.Symlink(filepath.Join(hung, "x"), filepath.Join(dir, "link")))
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		testutil.SkipOrFail(t, "opening /dev/fuse: %v", err)
	}
	if err := unix.Mount("hung", hung, "fuse", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0", fd)); err != nil {
		unix.Close(fd)
		testutil.SkipOrFail(t, "mounting FUSE: %v", err)
	}
	t.Cleanup(func() {
		unix.Close(fd) // aborts the connection: a lookup still waiting fails
		_ = unix.Unmount(hung, unix.MNT_DETACH)
	})

	fuseCache.Lock()
	fuseCache.m = nil // this namespace's table, read before the mount, is stale
	fuseCache.Unlock()
	d, err := FS{}.OpenProcessRoot(os.Getpid())
	require.NoError(t, err)
	defer d.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, p := range []string{filepath.Join(hung, "x"), filepath.Join(dir, "link")} {
			_, _, err := d.OpenRegular(p)
			assert.True(t, errors.Is(err, ErrCrossesMount), "%s: %v", p, err)
			_, err = d.Realpath(p)
			assert.True(t, errors.Is(err, ErrCrossesMount), "walk %s: %v", p, err)
		}
		data, _, err := d.ReadFile(filepath.Join(dir, "plain"), 100)
		assert.NoError(t, err)
		assert.Equal(t, "plain\n", string(data))
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a lookup waits for the FUSE server")
	}
}
