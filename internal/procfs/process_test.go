//go:build linux

package procfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil/ci"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProcessFactsFake(t *testing.T) {
	tr := newTree(t)
	tr.symlink("proc/100/exe", "/usr/bin/python3.11")
	tr.file("proc/100/cmdline", "python3\x00-m\x00http.server\x008080\x00", 0o444)
	tr.file("proc/100/stat", "100 (my (odd) name) S 1 100 100 0 -1 4194560 300 0 0 0 1 2 0 0 20 0 1 0 123456 10000000 500 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n", 0o444)
	tr.symlink("proc/100/ns/mnt", "mnt:[4026532999]")
	tr.symlink("proc/200/exe", "/opt/app/server (deleted)")
	tr.file("proc/200/cmdline", "postgres: checkpointer   \x00\x00\x00", 0o444)
	tr.file("proc/2/cmdline", "", 0o444) // a kernel thread: no exe link
	tr.file("proc/self/stat", "", 0o444)
	tr.file("proc/sys/kernel/pid_max", "", 0o444)
	fs := FS{Root: tr.dir}

	exe, deleted, err := fs.Executable(100)
	require.NoError(t, err)
	assert.Equal(t, "/usr/bin/python3.11", exe)
	assert.False(t, deleted)
	exe, deleted, err = fs.Executable(200)
	require.NoError(t, err)
	assert.Equal(t, "/opt/app/server", exe)
	assert.True(t, deleted)
	_, _, err = fs.Executable(2)
	require.ErrorIs(t, err, os.ErrNotExist)

	cmd, err := fs.CommandLine(100)
	require.NoError(t, err)
	assert.Equal(t, "python3 -m http.server 8080", cmd)
	cmd, err = fs.CommandLine(200)
	require.NoError(t, err)
	assert.Equal(t, "postgres: checkpointer   ", cmd)
	cmd, err = fs.CommandLine(2)
	require.NoError(t, err)
	assert.Equal(t, "", cmd)

	start, err := fs.StartTime(100)
	require.NoError(t, err)
	assert.Equal(t, uint64(123456), start)

	ns, err := fs.MountNamespace(100)
	require.NoError(t, err)
	assert.Equal(t, uint64(4026532999), ns)

	pids, err := fs.PIDs()
	require.NoError(t, err)
	assert.Equal(t, []int{2, 100, 200}, pids)
}

func TestCommandLineBound(t *testing.T) {
	tr := newTree(t)
	tr.file("proc/5/cmdline", "java\x00-cp\x00"+strings.Repeat("x", MaxCommandLine)+"\x00Main\x00", 0o444)
	cmd, err := FS{Root: tr.dir}.CommandLine(5)
	require.NoError(t, err)
	assert.Len(t, cmd, MaxCommandLine)
	assert.True(t, strings.HasPrefix(cmd, "java -cp xxx"))
}

func TestParseStatStartTime(t *testing.T) {
	tests := []struct {
		stat    string
		want    uint64
		wantErr string
	}{
		{stat: "1 (systemd) S 0 1 1 0 -1 4194560 1 2 3 4 5 6 7 8 20 0 1 0 7 1 2", want: 7},
		{stat: "9 (a) b) c) R 1 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 99 1 2\n", want: 99},
		{stat: "9 (a b c) R 1 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 18446744073709551615", want: 18446744073709551615},
		{stat: "9 no paren", wantErr: "no ')'"},
		{stat: "9 (x) R 1 2 3", wantErr: "want at least 22"},
		{stat: "9 (x) R 1 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 -5", wantErr: `start time "-5"`},
	}
	for _, tt := range tests {
		got, err := ParseStatStartTime([]byte(tt.stat))
		if tt.wantErr != "" {
			require.ErrorContains(t, err, tt.wantErr, "%q", tt.stat)
			continue
		}
		require.NoError(t, err, "%q", tt.stat)
		assert.Equal(t, tt.want, got, "%q", tt.stat)
	}
}

func TestParseNamespaceLink(t *testing.T) {
	ino, err := ParseNamespaceLink("mnt:[4026531841]", "mnt")
	require.NoError(t, err)
	assert.Equal(t, uint64(4026531841), ino)
	for _, bad := range []string{"pid:[4026531841]", "mnt:[x]", "mnt:4026531841", "mnt:[1"} {
		_, err := ParseNamespaceLink(bad, "mnt")
		assert.Error(t, err, bad)
	}
}

// TestProcessFactsLive reads a child process's facts and checks them
// against what the test knows or the kernel reports otherwise.
func TestProcessFactsLive(t *testing.T) {
	sh, err := exec.LookPath("sh")
	require.NoError(t, err)
	sh, err = filepath.EvalSymlinks(sh)
	require.NoError(t, err)
	fs := FS{}
	selfStart, err := fs.StartTime(os.Getpid())
	require.NoError(t, err)

	// The shell says ready once it runs, so its exec is complete.
	pid := startProcess(t, "sh", "-c", "echo ready; while :; do sleep 600; done", "sh", "two words")
	exe, deleted, err := fs.Executable(pid)
	require.NoError(t, err)
	assert.Equal(t, sh, exe)
	assert.False(t, deleted)
	cmd, err := fs.CommandLine(pid)
	require.NoError(t, err)
	assert.Equal(t, "sh -c echo ready; while :; do sleep 600; done sh two words", cmd)

	start, err := fs.StartTime(pid)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, start, selfStart, "the child started after the test")
	uptime, err := os.ReadFile("/proc/uptime")
	require.NoError(t, err)
	secs, err := strconv.ParseFloat(strings.Fields(string(uptime))[0], 64)
	require.NoError(t, err)
	assert.LessOrEqual(t, float64(start), secs*100+1, "start time in USER_HZ ticks (100/s) is not after now")

	var st syscall.Stat_t
	require.NoError(t, syscall.Stat("/proc/self/ns/mnt", &st))
	ns, err := fs.MountNamespace(os.Getpid())
	require.NoError(t, err)
	assert.Equal(t, st.Ino, ns)
	childNS, err := fs.MountNamespace(pid)
	require.NoError(t, err)
	assert.Equal(t, ns, childNS, "the child shares the test's mount namespace")

	pids, err := fs.PIDs()
	require.NoError(t, err)
	assert.Contains(t, pids, os.Getpid())
	assert.Contains(t, pids, pid)
	assert.IsIncreasing(t, pids)
}

// TestProcessInOtherMountNamespace starts a process in its own mount
// namespace with a tmpfs only it sees, and reaches a file there through
// its root.
func TestProcessInOtherMountNamespace(t *testing.T) {
	ci.RequireRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		ci.SkipOrFail(t, "unshare not found")
	}
	dir := t.TempDir()
	script := `mount -t tmpfs none "$1" && echo only > "$1/only-here" && ln -s /etc/hostname "$1/abs" && echo ready && exec sleep 600`
	pid := startProcess(t, "unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", dir)
	fs := FS{}

	ns, err := fs.MountNamespace(pid)
	require.NoError(t, err)
	own, err := fs.MountNamespace(os.Getpid())
	require.NoError(t, err)
	assert.NotEqual(t, own, ns)

	_, err = os.Stat(filepath.Join(dir, "only-here"))
	require.ErrorIs(t, err, os.ErrNotExist, "the tmpfs is private to the child")
	id, err := fs.StatInProcess(pid, filepath.Join(dir, "only-here"))
	require.NoError(t, err)
	assert.NotZero(t, id.Ino)

	data, _, err := fs.ProcessRoot(pid).ReadFile(filepath.Join(dir, "only-here"), 100)
	require.NoError(t, err)
	assert.Equal(t, "only\n", string(data))

	// An absolute symbolic link resolves in the process's root, here the
	// same / as the test's.
	want, err := os.Stat("/etc/hostname")
	require.NoError(t, err)
	id, err = fs.StatInProcess(pid, filepath.Join(dir, "abs"))
	require.NoError(t, err)
	assert.Equal(t, IDOf(want), id)
}

// TestOverlayIdentity runs a program from an overlay mount (as container
// images are) in a private mount namespace: the device and inode its maps
// show are the overlay's, the same as stat(2) through /proc/PID/root, not
// those of the file underneath (which the kernel attaches uprobes to).
func TestOverlayIdentity(t *testing.T) {
	ci.RequireRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		ci.SkipOrFail(t, "unshare not found")
	}
	sh, err := exec.LookPath("sh")
	require.NoError(t, err)
	bin, err := os.ReadFile(sh)
	require.NoError(t, err)
	dir := t.TempDir()
	for _, d := range []string{"lower", "upper", "work", "merged"} {
		require.NoError(t, os.Mkdir(filepath.Join(dir, d), 0o755))
	}
	lower := filepath.Join(dir, "lower", "shx")
	require.NoError(t, os.WriteFile(lower, bin, 0o755))
	merged := filepath.Join(dir, "merged", "shx")
	// The shell from the overlay says ready, so its exec is complete.
	script := `mount -t overlay overlay -o lowerdir="$1/lower",upperdir="$1/upper",workdir="$1/work" "$1/merged" && exec "$1/merged/shx" -c 'echo ready; while :; do sleep 600; done'`
	pid := startProcess(t, "unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", dir)

	fs := FS{}
	var mapped *MappedFile
	files, err := fs.MappedFiles(pid)
	require.NoError(t, err)
	for i := range files {
		if files[i].Path == merged {
			mapped = &files[i]
		}
	}
	require.NotNil(t, mapped, "%s not mapped: %+v", merged, files)
	viaRoot, err := fs.StatInProcess(pid, merged)
	require.NoError(t, err)
	assert.Equal(t, viaRoot, mapped.ID, "maps and stat through /proc/PID/root agree on overlayfs")
	fi, err := os.Stat(lower)
	require.NoError(t, err)
	assert.NotEqual(t, IDOf(fi).Dev, mapped.ID.Dev, "the overlay has its own device number")
}
