package planner

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/harness/testutil/hostile"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
)

func copyTo(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Dir(to), 0o755))
	require.NoError(t, os.WriteFile(to, b, mode))
}

func fileIDOf(t *testing.T, path string) procfs.FileID {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	return procfs.IDOf(fi)
}

// swapper exchanges two names of a directory with renameat2
// (RENAME_EXCHANGE) in a tight loop until stopped, and counts the swaps.
type swapper struct {
	stop  chan struct{}
	wg    sync.WaitGroup
	swaps atomic.Int64
}

func startSwapper(t *testing.T, a, b string) *swapper {
	t.Helper()
	s := &swapper{stop: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			select {
			case <-s.stop:
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("renameat2: %v", err)
				return
			}
			s.swaps.Add(1)
		}
	}()
	t.Cleanup(s.halt)
	return s
}

func (s *swapper) halt() {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.wg.Wait()
}

// A container swaps its entry /app/prog between its own file and an
// absolute symbolic link to a host binary (renameat2 RENAME_EXCHANGE in a
// tight loop) while targets are resolved 500 times: every file the plan
// holds is the container's own, never the host's (both are the same
// program, so only their identity tells them apart).
func TestContainerSwapsItsEntry(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildStatic(t, "hardening", "-pthread")
	host := filepath.Join(t.TempDir(), "host-prog")
	copyTo(t, bin, host, 0o755)
	root := t.TempDir()
	inside := filepath.Join(root, appDir, "prog")
	copyTo(t, bin, inside, 0o755)
	require.NoError(t, os.Symlink(host, filepath.Join(root, appDir, "prog.swap")))
	ctr := testutil.StartContainer(t, root, "ready", "/"+appDir+"/prog")
	hostID, ownID := fileIDOf(t, host), fileIDOf(t, inside)

	sw := startSwapper(t, inside, filepath.Join(root, appDir, "prog.swap"))
	const resolves = 500
	hostFiles, ownFiles, failed := 0, 0, 0
	targets := []config.Target{{Path: "/" + appDir + "/prog", Optional: true, Counters: config.CountersOf("uprobe:four")}}
	for range resolves {
		pl, err := Resolve(targets, Options{Locator: HostLocator{}})
		if err != nil {
			if failed++; failed == 1 {
				t.Errorf("resolving: %v", err)
			}
			continue
		}
		for _, f := range pl.Files {
			switch f.ID.FileID {
			case hostID:
				hostFiles++
			case ownID:
				ownFiles++
			default:
				t.Errorf("a file of neither: %+v (%s)", f.ID, f.Path)
			}
		}
		pl.Close()
	}
	sw.halt()
	t.Logf("%d resolves, %d swaps: %d files of the container, %d of the host, %d failed (container pid %d)", resolves, sw.swaps.Load(), ownFiles, hostFiles, failed, ctr.PID)
	assert.Zero(t, hostFiles, "a host binary was read as the container's")
	assert.Zero(t, failed, "a file swapped for a link is found or not, never half")
	assert.NotZero(t, ownFiles, "the container's own file was found")
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(ents)
}

// A plan of 2,000 targets holds exactly one descriptor per file, the one
// it was read from, until the tracer takes it or the plan is closed.
func TestPlanHoldsOneDescriptorPerFile(t *testing.T) {
	const targets = 2000
	bin := testutil.BuildC(t, "hardening", "-pthread")
	var ts []config.Target
	for range targets {
		ts = append(ts, config.Target{Path: bin, Counters: config.CountersOf("uprobe:four")})
	}
	before := openFDs(t)
	pl, err := Resolve(ts, Options{Locator: HostLocator{}})
	require.NoError(t, err)
	require.Len(t, pl.Files, targets)
	assert.Equal(t, before+targets, openFDs(t))
	id := fileIDOf(t, bin)
	for fi := range 10 {
		f := pl.TakeFile(fi)
		require.NotNil(t, f)
		var st unix.Stat_t
		require.NoError(t, unix.Fstat(int(f.Fd()), &st))
		assert.Equal(t, id, procfs.FileID{Dev: st.Dev, Ino: st.Ino}, "the file the plan read")
		require.NoError(t, f.Close())
		assert.Nil(t, pl.TakeFile(fi), "taken once")
	}
	assert.Equal(t, before+targets-10, openFDs(t))
	require.NoError(t, pl.Close())
	assert.Equal(t, before, openFDs(t))
}

// appDir is the directory of the test containers' files, its name unique to
// this test process: a target path is looked for in every mount namespace of
// the host, and another package's tests may run a container at the same time.
var appDir = fmt.Sprintf("app-%d", os.Getpid())

// A recipe's usual places (a glob such as /usr/lib/jvm/*/lib/server/
// libjvm.so) are searched inside each container's root, by descriptor,
// for a name the container's PATH and library cache do not know: its own
// file is found. Its hostile entries, sorted before it, give nothing: an
// absolute link and a "../.." link to a host directory that has the file
// (the host's file is never a candidate), a FIFO, a directory and a
// character device (/dev/zero's) named like the file, a loop of links.
// On main the usual places were searched on the host only: the
// container's file was not found.
func TestRecipeSearchInContainer(t *testing.T) {
	testutil.RequireRoot(t)
	bin := testutil.BuildStatic(t, "hardening", "-pthread")
	root := t.TempDir()
	copyTo(t, bin, filepath.Join(root, appDir, "prog"), 0o755)
	lib := "librecipe-" + appDir + ".so" // a name no library cache knows
	jvm := filepath.Join(root, appDir, "jvm")
	own := filepath.Join(jvm, "java-17", "lib", lib)
	copyTo(t, bin, own, 0o755)
	hostDir := t.TempDir()
	copyTo(t, bin, filepath.Join(hostDir, "lib", lib), 0o755)
	require.NoError(t, os.Symlink(hostDir, filepath.Join(jvm, "a-absolute")))
	require.NoError(t, os.Symlink("../../../../../../../.."+hostDir, filepath.Join(jvm, "b-dotdot")))
	require.NoError(t, os.MkdirAll(filepath.Join(jvm, "c-fifo", "lib"), 0o755))
	require.NoError(t, unix.Mkfifo(filepath.Join(jvm, "c-fifo", "lib", lib), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(jvm, "d-dir", "lib", lib), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(jvm, "e-device", "lib"), 0o755))
	require.NoError(t, unix.Mknod(filepath.Join(jvm, "e-device", "lib", lib), unix.S_IFCHR|0o644, int(unix.Mkdev(1, 5))))
	require.NoError(t, os.Symlink("f-loop", filepath.Join(jvm, "f-loop")))
	ctr := testutil.StartContainer(t, root, "ready", "/"+appDir+"/prog")

	tg := config.Target{
		Path: lib, Recipe: "test", Counters: config.CountersOf("uprobe:four"),
		FromRecipe: &config.RecipeFacts{Search: []string{"/" + appDir + "/jvm/*/lib/" + lib}},
	}
	cands, err := HostLocator{}.Locate(tg)
	require.NoError(t, err)
	ownID := fileIDOf(t, own)
	var ids []procfs.FileID
	for _, c := range cands {
		ids = append(ids, c.ID.FileID)
		if c.ID.FileID == ownID {
			assert.Equal(t, "/"+appDir+"/jvm/java-17/lib/"+lib, c.SeenAs)
			assert.Contains(t, c.How, "the recipe's usual place /"+appDir+"/jvm/*/lib/"+lib+" in the root of process ")
			assert.True(t, c.ThroughRoot)
		}
		c.Close()
	}
	assert.Equal(t, []procfs.FileID{ownID}, ids, "the container's own file, and nothing else")

	c, err := HostLocator{}.LocateInProcess(tg, ctr.PID)
	require.NoError(t, err)
	require.NotNil(t, c, "a container started later: its own file")
	assert.Equal(t, ownID, c.ID.FileID)
	c.Close()

	// The program resolves and plans from the container's file.
	pl, err := Resolve([]config.Target{tg}, Options{Locator: HostLocator{}})
	require.NoError(t, err)
	require.Len(t, pl.Files, 1)
	assert.Equal(t, ownID, pl.Files[0].ID.FileID)
	pl.Close()
}

// withDynamicStringBomb returns a copy of program whose .dynamic section
// names, as its string table, a compressed section that declares
// declared bytes of zeros (about declared/1000 in the file). The loader
// reads the dynamic segment by program header: the program still runs.
func withDynamicStringBomb(t *testing.T, program string, declared uint64) string {
	t.Helper()
	bomb, err := hostile.Compressed(".dynstr.bomb", nil, declared)
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), filepath.Base(program))
	require.NoError(t, hostile.AddSections(program, out, bomb))
	f, err := elf.Open(out)
	require.NoError(t, err)
	dynamic, last := -1, len(f.Sections)-1
	for i, s := range f.Sections {
		if s.Type == elf.SHT_DYNAMIC {
			dynamic = i
		}
	}
	require.Equal(t, ".dynstr.bomb", f.Sections[last].Name)
	f.Close()
	require.GreaterOrEqual(t, dynamic, 0, "a dynamically linked program")
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	shoff := binary.LittleEndian.Uint64(b[0x28:])
	binary.LittleEndian.PutUint32(b[shoff+uint64(dynamic)*64+0x28:], uint32(last)) // sh_link
	require.NoError(t, os.WriteFile(out, b, 0o755))
	return out
}

// A process's executable whose .dynamic links to a compressed string
// table declaring 256 MiB: looking for a library the process has not
// mapped reads its DT_RUNPATH (the loader's search) without
// decompressing the table, on every exec the file watcher looks at. On
// main debug/elf decompressed all of it: 256 MiB allocated per lookup.
func TestDynamicStringBomb(t *testing.T) {
	testutil.RequireRoot(t)
	prog := testutil.StartProgram(t, withDynamicStringBomb(t, hostile.Program(t), 256<<20), "ready")
	tg := config.Target{Path: "libnosuch-" + appDir + ".so", Optional: true, Counters: config.CountersOf("uprobe:x")}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	c, err := HostLocator{}.LocateInProcess(tg, prog.PID)
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	if c != nil {
		c.Close()
	}
	t.Logf("lookup: %v, %d bytes allocated, err %v", took, after.TotalAlloc-before.TotalAlloc, err)
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(16<<20), "the string table is not decompressed")
}
