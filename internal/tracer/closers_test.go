package tracer

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeFiles writes files (path relative to dir → content).
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
}

// TestPidsHeadroom reads the least room the pids limits of the process's
// cgroup and its ancestors leave, in the unified hierarchy or a v1 pids
// hierarchy, and none where nothing limits.
func TestPidsHeadroom(t *testing.T) {
	for _, tt := range []struct {
		name  string
		files map[string]string
		want  int64
	}{
		{"no pids controller", map[string]string{"self": "0::/pod\n"}, -1},
		{"unlimited (v2)", map[string]string{"self": "0::/pod\n", "fs/pod/pids.max": "max\n", "fs/pod/pids.current": "40\n"}, -1},
		{"v2 limit", map[string]string{"self": "0::/pod\n", "fs/pod/pids.max": "1024\n", "fs/pod/pids.current": "40\n"}, 984},
		{"an ancestor's limit is tighter", map[string]string{
			"self":                         "0::/kubepods/pod/ctr\n",
			"fs/kubepods/pod/ctr/pids.max": "max\n", "fs/kubepods/pod/ctr/pids.current": "30\n",
			"fs/kubepods/pod/pids.max": "300\n", "fs/kubepods/pod/pids.current": "100\n",
			"fs/kubepods/pids.max": "100000\n", "fs/kubepods/pids.current": "5000\n",
		}, 200},
		{"v1 pids hierarchy", map[string]string{"self": "9:pids:/docker/abc\n8:memory:/docker/abc\n", "fs/pids/docker/abc/pids.max": "512\n", "fs/pids/docker/abc/pids.current": "12\n"}, 500},
		{"at the limit", map[string]string{"self": "0::/\n", "fs/pids.max": "64\n", "fs/pids.current": "70\n"}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, tt.files)
			assert.Equal(t, tt.want, pidsHeadroom(filepath.Join(dir, "self"), filepath.Join(dir, "fs")))
		})
	}
	assert.Equal(t, int64(-1), pidsHeadroom("/nonexistent/cgroup", "/nonexistent"))
}

// TestClosersFor: as many closes at once as maxClosers without a limit,
// a quarter of the room a limit leaves, never fewer than minClosers.
func TestClosersFor(t *testing.T) {
	assert.Equal(t, maxClosers, closersFor(-1))
	assert.Equal(t, maxClosers, closersFor(1<<20))
	assert.Equal(t, 246, closersFor(984))
	assert.Equal(t, minClosers, closersFor(40))
	assert.Equal(t, minClosers, closersFor(0))
}
