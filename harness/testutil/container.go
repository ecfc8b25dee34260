//go:build linux

package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// containerRootEnv carries, to a copy of the test binary started by
// StartContainer, the directory it makes its root.
const containerRootEnv = "UPROBE_TESTUTIL_CONTAINER_ROOT"

func init() {
	if root := os.Getenv(containerRootEnv); root != "" {
		err := enterContainer(root, os.Args[1:])
		fmt.Fprintf(os.Stderr, "container in %s: %v\n", root, err)
		os.Exit(111)
	}
}

// enterContainer runs in a copy of the test binary that is alone in a new
// mount namespace: it makes root the root of that namespace as container
// runtimes do (a bind mount of it, pivot_root, the old root unmounted), so
// that /proc/PID/root of the process reads as "/" and nothing of the host
// is reachable from it, then execs argv inside it. It returns only on
// error.
func enterContainer(root string, argv []string) error {
	if len(argv) == 0 {
		return fmt.Errorf("no program")
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	if err := unix.Mount(root, root, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind mount: %w", err)
	}
	if err := unix.Chdir(root); err != nil {
		return err
	}
	if err := os.MkdirAll(".oldroot", 0o700); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", ".oldroot"); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount("/.oldroot", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmounting the old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, containerRootEnv+"=") {
			env = append(env, kv)
		}
	}
	return unix.Exec(argv[0], argv, env)
}

// StartContainer starts argv[0], a path inside the directory root, as a
// container does: in a mount namespace of its own whose root is root
// (bind-mounted and pivoted into, the host's tree unmounted), so that its
// /proc/PID/root reads as "/" like a container's and paths in it are
// resolved in root. The program must be able to run there alone (a static
// build). The Program's PID is the program's own; ready is as for
// StartCommand.
func StartContainer(t testing.TB, root, ready string, argv ...string) *Program {
	t.Helper()
	RequireRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, argv...)
	cmd.Env = append(os.Environ(), containerRootEnv+"="+root)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	return startCmd(t, ready, cmd)
}

// BuildStatic builds testdata/NAME/NAME.c as BuildC does, linked
// statically, so that it runs in a root of its own (StartContainer).
func BuildStatic(t testing.TB, name string, extra ...string) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		SkipOrFail(t, "gcc not found")
	}
	return BuildC(t, name, append([]string{"-static"}, extra...)...)
}
