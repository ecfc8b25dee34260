package planner

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
)

// fakeNamespace makes process pid of a fake /proc under root live in mount
// namespace ns.
func fakeNamespace(t *testing.T, root string, pid int, ns int) {
	t.Helper()
	dir := filepath.Join(root, "proc", strconv.Itoa(pid), "ns")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.Symlink("mnt:["+strconv.Itoa(ns)+"]", filepath.Join(dir, "mnt")))
}

// TestLocatorBatchLooksAtNamespacesOnce: the locator of one Resolve lists
// the machine's mount namespaces once for all its targets (once per
// target read every process's namespace link 2,000 times for 2,000
// targets); a locator outside a batch (the file watcher's, later) looks
// each time.
func TestLocatorBatchLooksAtNamespacesOnce(t *testing.T) {
	root := t.TempDir()
	fakeNamespace(t, root, os.Getpid(), 1)
	fakeNamespace(t, root, 100, 1) // the collector's own namespace
	fakeNamespace(t, root, 200, 2)
	l := HostLocator{FS: procfs.FS{Root: root}}
	b := l.batch()
	assert.Equal(t, []int{200}, b.namespaces())
	fakeNamespace(t, root, 300, 3) // a container started meanwhile
	assert.Equal(t, []int{200}, b.namespaces(), "one look per batch")
	assert.Equal(t, []int{200, 300}, l.namespaces(), "outside a batch: every look")
	assert.Equal(t, []int{200, 300}, l.batch().namespaces(), "a new batch looks again")
}
