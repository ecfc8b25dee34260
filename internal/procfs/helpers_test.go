//go:build linux

package procfs

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// tree builds a fake file system under a temporary directory.
type tree struct {
	t   *testing.T
	dir string
}

func newTree(t *testing.T) tree { return tree{t: t, dir: t.TempDir()} }

// file writes content to rel (a path below the tree) with mode.
func (tr tree) file(rel, content string, mode os.FileMode) {
	tr.t.Helper()
	p := filepath.Join(tr.dir, rel)
	require.NoError(tr.t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(tr.t, os.WriteFile(p, []byte(content), mode))
}

// symlink makes rel a symbolic link to target.
func (tr tree) symlink(rel, target string) {
	tr.t.Helper()
	p := filepath.Join(tr.dir, rel)
	require.NoError(tr.t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(tr.t, os.Symlink(target, p))
}

// elfHeader returns the first 64 bytes of a 64-bit little-endian ELF file
// for machine, enough for Resolver.checkELF.
func elfHeader(machine elf.Machine) string {
	var h [64]byte
	copy(h[:], elf.ELFMAG)
	h[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	h[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	h[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	binary.LittleEndian.PutUint16(h[16:], uint16(elf.ET_DYN))
	binary.LittleEndian.PutUint16(h[18:], uint16(machine))
	return string(h[:])
}

// startProcess starts a command that prints "ready" once set up and then
// waits; it and its children are killed when the test ends.
func startProcess(t *testing.T, name string, args ...string) int {
	t.Helper()
	cmd := exec.Command(name, args...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // its children too
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "waiting for %s to say ready", name)
	require.Equal(t, "ready", strings.TrimSpace(line))
	return cmd.Process.Pid
}
