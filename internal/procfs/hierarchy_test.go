package procfs

import (
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

// hybridMountinfo is the cgroup part of a hybrid host's mount table (cgroup
// v1 controllers, cpu and cpuacct co-mounted, and cgroup2 at unified).
const hybridMountinfo = `22 1 0:21 / /proc rw,nosuid - proc proc rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
90 31 0:36 /docker /var/lib/my\040pids rw,relatime - cgroup cgroup rw,pids
`

func TestParseCgroupMounts(t *testing.T) {
	for _, tc := range []struct {
		name      string
		mountinfo string
		want      CgroupMounts
		preferred string
	}{
		{"hybrid", hybridMountinfo, CgroupMounts{
			Unified: CgroupMount{Point: "/sys/fs/cgroup/unified", Root: "/"},
			V1: map[string]CgroupMount{
				"cpu":     {Point: "/sys/fs/cgroup/cpu,cpuacct", Root: "/"},
				"cpuacct": {Point: "/sys/fs/cgroup/cpu,cpuacct", Root: "/"},
				"memory":  {Point: "/sys/fs/cgroup/memory", Root: "/"},
				"pids":    {Point: "/sys/fs/cgroup/pids", Root: "/"}, // the first mount of pids
			},
		}, "pids"},
		{"v2 only", "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n", CgroupMounts{
			Unified: CgroupMount{Point: "/sys/fs/cgroup", Root: "/"}, V1: map[string]CgroupMount{},
		}, ""},
		{"memory only, escaped, a subtree", `40 31 0:3 /kubepods /sys/fs/cgroup/mem\040ory rw - cgroup cgroup rw,memory` + "\n", CgroupMounts{
			V1: map[string]CgroupMount{"memory": {Point: "/sys/fs/cgroup/mem ory", Root: "/kubepods"}},
		}, "memory"},
		{"garbage", "no separator here\n1 2 3 - cgroup\n - cgroup2 x y\n", CgroupMounts{V1: map[string]CgroupMount{}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ParseCgroupMounts([]byte(tc.mountinfo))
			assert.Equal(t, tc.want, got)
			p, ok := got.PreferredV1()
			assert.Equal(t, tc.preferred, p)
			assert.Equal(t, tc.preferred != "", ok)
		})
	}
}

func FuzzParseCgroupMounts(f *testing.F) {
	f.Add([]byte(hybridMountinfo))
	f.Add([]byte(`1 2 0:3 /a\ /b\04 rw - cgroup cgroup rw,pids`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := ParseCgroupMounts(data)
		for c := range m.V1 {
			if !strings.Contains(string(data), c) {
				t.Fatalf("controller %q from %q", c, data)
			}
		}
		if p, ok := m.PreferredV1(); ok {
			if _, in := m.V1[p]; !in {
				t.Fatalf("preferred %q is not mounted", p)
			}
		}
	})
}

// The path of a cgroup is found from its kernfs id (its directory's inode
// number) in a v1 hierarchy and in the unified one, by file handle and by
// walking the hierarchy; a removed cgroup is not found.
func TestCgroupPath(t *testing.T) {
	testutil.RequireRoot(t)
	mounts, err := FS{}.CgroupMounts()
	require.NoError(t, err)
	var hierarchies []CgroupMount
	if c, ok := mounts.PreferredV1(); ok {
		hierarchies = append(hierarchies, mounts.V1[c])
	}
	if mounts.Unified.Point != "" {
		hierarchies = append(hierarchies, mounts.Unified)
	}
	if len(hierarchies) == 0 {
		testutil.SkipOrFail(t, "no cgroup hierarchy mounted")
	}
	for _, m := range hierarchies {
		t.Run(filepath.Base(m.Point), func(t *testing.T) {
			raw := make([]byte, 8)
			_, _ = rand.Read(raw)
			name := "uprobe-path-" + hex.EncodeToString(raw)
			dir := filepath.Join(m.Point, name, "inner")
			require.NoError(t, os.MkdirAll(dir, 0o755))
			t.Cleanup(func() { _ = os.Remove(dir); _ = os.Remove(filepath.Dir(dir)) })
			var st syscall.Stat_t
			require.NoError(t, syscall.Stat(dir, &st))
			want := "/" + name + "/inner"

			got, err := CgroupPath(m, st.Ino)
			require.NoError(t, err)
			assert.Equal(t, want, got, "by handle")
			got, err = cgroupPathByWalk(m, st.Ino)
			require.NoError(t, err)
			assert.Equal(t, want, got, "by walk")

			require.NoError(t, os.Remove(dir))
			_, err = CgroupPath(m, st.Ino)
			assert.ErrorIs(t, err, fs.ErrNotExist)
			_, err = cgroupPathByWalk(m, st.Ino)
			assert.ErrorIs(t, err, fs.ErrNotExist)
		})
	}
}

// The host's cgroup mounts are those of its init process, opened through
// its root (a collector in a pod sees its own cgroup namespace in its
// mounts); when that root is out of reach, the reader's own mounts.
func TestCgroupMountsThroughInit(t *testing.T) {
	testutil.RequireRoot(t)
	self, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	own := ParseCgroupMounts(self)
	c, ok := own.PreferredV1()
	if !ok {
		testutil.SkipOrFail(t, "no cgroup v1 hierarchy mounted")
	}
	root := t.TempDir()
	for _, d := range []string{"proc/1", "proc/self"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, d), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, d, "mountinfo"), self, 0o644))
	}
	require.NoError(t, os.Symlink("/", filepath.Join(root, "proc/1/root")))
	m, err := FS{Root: root}.CgroupMounts()
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(root, "proc/1/root", own.V1[c].Point), m.V1[c].Dir)
	assert.Equal(t, own.V1[c].Point, m.V1[c].Point)

	raw := make([]byte, 8)
	_, _ = rand.Read(raw)
	name := "uprobe-init-" + hex.EncodeToString(raw)
	dir := filepath.Join(own.V1[c].Point, name)
	require.NoError(t, os.Mkdir(dir, 0o755))
	t.Cleanup(func() { _ = os.Remove(dir) })
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(dir, &st))
	got, err := CgroupPath(m.V1[c], st.Ino)
	require.NoError(t, err)
	assert.Equal(t, "/"+name, got, "by handle")
	got, err = cgroupPathByWalk(m.V1[c], st.Ino)
	require.NoError(t, err)
	assert.Equal(t, "/"+name, got, "by walk")

	// Init's root out of reach: the reader's own mounts.
	require.NoError(t, os.Remove(filepath.Join(root, "proc/1/root")))
	require.NoError(t, os.Symlink(filepath.Join(root, "nowhere"), filepath.Join(root, "proc/1/root")))
	m, err = FS{Root: root}.CgroupMounts()
	require.NoError(t, err)
	assert.Equal(t, own, m)
}
