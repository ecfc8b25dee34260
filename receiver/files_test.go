package receiver

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/otel-uprobe/uprobereceiver/internal/planner"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
)

// Only a bare IN_MODIFY is filtered, and only for files that are not
// attached: every write to a log next to a traced binary is one.
func TestModifyMatters(t *testing.T) {
	w := &fileWatcher{
		stamps: map[string]fileStamp{"/opt/app/bin/app": {}, "/opt/lib/libx.so": {}},
		dirs:   map[int]string{1: "/opt/app/bin", 2: "/opt/lib", 3: "/var/log"},
	}
	assert.False(t, w.modifyMatters(1, unix.IN_MODIFY, []byte("app\x00\x00\x00")), "nothing published yet")
	w.publishWritable()
	for _, tt := range []struct {
		wd   int
		mask uint32
		name string
		want bool
	}{
		{1, unix.IN_MODIFY, "app\x00\x00\x00", true}, // written in place
		{1, unix.IN_MODIFY, "app.log", false},
		{1, unix.IN_MODIFY, "ap", false},
		{2, unix.IN_MODIFY, "libx.so", true},
		{2, unix.IN_MODIFY, "app", false}, // the name of a file in another directory
		{3, unix.IN_MODIFY, "app", false},
		{1, unix.IN_CLOSE_WRITE, "app.log", true},
		{1, unix.IN_CREATE, "app.new", true},
		{1, unix.IN_MOVED_TO, "app", true},
		{1, unix.IN_ATTRIB, "other", true},
		{-1, unix.IN_Q_OVERFLOW, "", true},
	} {
		assert.Equal(t, tt.want, w.modifyMatters(tt.wd, tt.mask, []byte(tt.name)), "%d %#x %q", tt.wd, tt.mask, tt.name)
	}
}

// TestSameViewOfAnExitedProcess: a process that exited before the watcher
// looked is gone, not in another view (looking inside it for the targets'
// files cost a dozen system calls per short-lived process of a busy host);
// a live one in the collector's view is in the same view.
func TestSameViewOfAnExitedProcess(t *testing.T) {
	fs := procfs.FS{}
	w := &fileWatcher{locator: planner.HostLocator{FS: fs}}
	w.ownMounts, _ = fs.MountNamespace(os.Getpid())
	w.ownRoot, _ = os.Readlink(fs.ProcessRoot(os.Getpid()).Dir())
	same, gone := w.sameView(os.Getpid())
	assert.True(t, same)
	assert.False(t, gone)
	cmd := exec.Command("true")
	require.NoError(t, cmd.Run())
	same, gone = w.sameView(cmd.Process.Pid)
	assert.False(t, same)
	assert.True(t, gone, "process %d exited", cmd.Process.Pid)
}
