//go:build linux

package procfs

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

// mapBomb maps one page-sized file through N hard links whose paths are
// about 3,800 bytes long (a deep tree of 250-byte names): N distinct
// lines of /proc/PID/maps of ~3.9 KB each. It prints "ready" and waits.
const mapBomb = `#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	char path[4096], comp[256], file[4096], lk[4096];
	int n = atoi(argv[2]), fd;
	memset(comp, 'd', 250);
	comp[250] = 0;
	snprintf(path, sizeof(path), "%s", argv[1]);
	while (strlen(path) + 252 < 3800) {
		strcat(path, "/");
		strcat(path, comp);
		mkdir(path, 0755);
	}
	snprintf(file, sizeof(file), "%s/f", path);
	fd = open(file, O_CREAT | O_RDWR, 0644);
	if (fd < 0 || ftruncate(fd, 4096))
		return 1;
	close(fd);
	for (int i = 0; i < n; i++) {
		snprintf(lk, sizeof(lk), "%s/%0200d", path, i);
		if (link(file, lk))
			return 2;
		fd = open(lk, O_RDONLY);
		if (fd < 0 || mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0) == MAP_FAILED)
			return 3;
		close(fd);
	}
	printf("ready\n");
	fflush(stdout);
	pause();
	return 0;
}
`

// A process that maps 20,000 files through 3,800-byte paths (78 MB of
// /proc/PID/maps, made in about a second by any tenant) is refused by
// every reader of its maps with a sentence naming the bound, having kept
// at most MaxMapsBytes of it: on main LibraryInProcess read it all and
// held every path (254 MB of heap and 2.9 s for 60,000 such mappings).
func TestMapsOfAHostileProcessAreBounded(t *testing.T) {
	const links = 20000
	dir := t.TempDir()
	src := filepath.Join(dir, "mapbomb.c")
	require.NoError(t, os.WriteFile(src, []byte(mapBomb), 0o644))
	bin := filepath.Join(dir, "mapbomb")
	testutil.Gcc(t, dir, "-O2", "-o", bin, src)
	tree := filepath.Join(dir, "tree")
	require.NoError(t, os.Mkdir(tree, 0o755))
	cmd := exec.Command(bin, tree, "20000")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "mapbomb did not start")
	require.Equal(t, "ready\n", line)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	_, err = FS{}.LibraryInProcess(cmd.Process.Pid, "libc")
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	t.Logf("LibraryInProcess took %v, heap in use %d -> %d MB", took, before.HeapInuse>>20, after.HeapInuse>>20)
	assert.ErrorContains(t, err, "longer than 33554432 bytes")
	_, err = FS{}.Maps(cmd.Process.Pid)
	assert.ErrorContains(t, err, "longer than 33554432 bytes")
	assert.Less(t, int64(after.HeapInuse)-int64(before.HeapInuse), int64(MaxMapsBytes)+8<<20, "at most the bound is kept")
}
