package receiver

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
)

// overlayRoot mounts an overlay of lower (read-only, shared) with an
// upper directory of its own, as a container runtime mounts an image's
// layers for each container, and returns where it is mounted.
func overlayRoot(t *testing.T, lower string) string {
	t.Helper()
	dir := t.TempDir()
	upper, work, merged := filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "merged")
	for _, d := range []string{upper, work, merged} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	require.NoError(t, unix.Mount("overlay", merged, "overlay", 0, fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)))
	t.Cleanup(func() { _ = unix.Unmount(merged, unix.MNT_DETACH) })
	return merged
}

// Two containers of one image (overlay mounts over the same lower layer)
// run the same file: the kernel puts uprobes on the file underneath, which
// both containers' files are. A call in one container is one span, not one
// per container that maps the image.
func TestContainersOfOneImageCountOnce(t *testing.T) {
	testutil.RequireRoot(t)
	const n = 10
	bin := testutil.BuildStatic(t, "hardening", "-pthread")
	lower := t.TempDir()
	install(t, bin, filepath.Join(lower, appDir, "prog"))
	a := testutil.StartContainer(t, overlayRoot(t, lower), "ready", "/"+appDir+"/prog")
	testutil.StartContainer(t, overlayRoot(t, lower), "ready", "/"+appDir+"/prog")

	cfg := createDefaultConfig()
	cfg.Targets = []config.Target{{Path: "/" + appDir + "/prog", Optional: true, Spans: []config.Span{{Name: "four", Function: "four"}}}}
	s := createdBounded(t, cfg)
	_, err := startBounded(s)
	require.NoError(t, err)
	// Two rounds: spans of the first round counted twice would be in the
	// ring before the second round's, so delivered by the time its last
	// span is.
	for round := 1; round <= 2; round++ {
		require.Equal(t, fmt.Sprintf("four %d", n), a.Ask(fmt.Sprintf("four %d", n), "four "))
		require.Eventually(t, func() bool { return s.traces.SpanCount() >= round*n }, 10*time.Second, 10*time.Millisecond)
	}
	assert.Equal(t, 2*n, s.traces.SpanCount(), "one span per call")
}

// max_sites_later is the engine's room for the sites of files attached
// after Start: a container whose file needs more is left out with a
// warning naming it, and one that fits is traced.
func TestMaxSitesLater(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildStatic(t, "hardening", "-pthread")
	for _, tc := range []struct {
		room     int
		attached bool
	}{{1, false}, {2, true}} { // the span's entry and its return: two sites
		t.Run(fmt.Sprint(tc.room), func(t *testing.T) {
			cfg := createDefaultConfig()
			cfg.MaxSitesLater = tc.room
			cfg.Targets = []config.Target{{Path: "/" + appDir + "/prog", Optional: true, Spans: []config.Span{{Name: "four", Function: "four"}}}}
			s := createdBounded(t, cfg)
			_, err := startBounded(s)
			require.NoError(t, err)
			root := t.TempDir()
			install(t, bin, filepath.Join(root, appDir, "prog"))
			c := testutil.StartContainer(t, root, "ready", "/"+appDir+"/prog")
			want := "failed"
			if tc.attached {
				want = "attached"
			}
			require.Eventually(t, func() bool { return fileChanges(s, want) == 1 }, 10*time.Second, 10*time.Millisecond)
			require.Equal(t, "four 3", c.Ask("four 3", "four "))
			if tc.attached {
				require.Eventually(t, func() bool { return s.traces.SpanCount() == 3 }, 10*time.Second, 10*time.Millisecond)
			}
			assert.Zero(t, fileChanges(s, map[string]string{"failed": "attached", "attached": "failed"}[want]))
		})
	}
}
