package procfs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// FS reads /proc below Root: "" or "/" is the live system, a directory in
// tests holds a fake proc/ tree. An FS is a value; it holds nothing open.
type FS struct {
	Root string
}

// Bounds of what is read from /proc/PID.
const (
	// MaxCommandLine bounds the command line read from /proc/PID/cmdline
	// (Linux allows up to ARG_MAX, usually 2 MiB; Java class paths can take
	// tens of kilobytes).
	MaxCommandLine = 64 << 10
	// maxStat bounds /proc/PID/stat (52 numeric fields and a 16-byte comm
	// take well under 1 KiB).
	maxStat = 4 << 10
	// maxCgroup bounds /proc/PID/cgroup (one line per hierarchy).
	maxCgroup = 64 << 10
)

func (f FS) root() string {
	if f.Root == "" {
		return "/"
	}
	return f.Root
}

func (f FS) pidPath(pid int, name string) string {
	return filepath.Join(f.root(), "proc", strconv.Itoa(pid), name)
}

// ProcessRoot returns the root directory of process pid (/proc/PID/root):
// paths resolved in it are the paths the process sees, in its mount
// namespace and after its chroot. Reaching it needs ptrace read access to
// the process (CAP_SYS_PTRACE for other users' processes).
func (f FS) ProcessRoot(pid int) Root {
	return Root(f.pidPath(pid, "root"))
}

// StatInProcess returns the identity (device and inode) of path as process
// pid sees it, resolved inside its root directory.
func (f FS) StatInProcess(pid int, path string) (FileID, error) {
	d, err := f.OpenProcessRoot(pid)
	if err != nil {
		return FileID{}, err
	}
	defer d.Close()
	_, id, err := d.Stat(path)
	return id, err
}

// Executable returns the path of process pid's executable as the process
// sees it (the target of /proc/PID/exe), and whether the kernel marked it
// deleted: the file was removed or replaced since the process started.
// Kernel threads have no executable: the error then matches
// fs.ErrNotExist.
func (f FS) Executable(pid int) (path string, deleted bool, err error) {
	p, err := os.Readlink(f.pidPath(pid, "exe"))
	if err != nil {
		return "", false, err
	}
	if q, ok := strings.CutSuffix(p, deletedSuffix); ok {
		return q, true, nil
	}
	return p, false, nil
}

// CommandLine returns process pid's command line: its arguments joined by
// spaces, at most MaxCommandLine bytes (longer ones are cut). A process
// that rewrote its arguments (setproctitle) shows what it wrote. Kernel
// threads and zombies have an empty command line.
func (f FS) CommandLine(pid int) (string, error) {
	file, err := os.Open(f.pidPath(pid, "cmdline"))
	if err != nil {
		return "", err
	}
	defer file.Close()
	data, _, err := readLimited(file, MaxCommandLine)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", file.Name(), err)
	}
	return JoinCommandLine(data), nil
}

// JoinCommandLine turns the NUL-separated arguments of /proc/PID/cmdline
// into one line: trailing NULs are dropped and the others become spaces.
func JoinCommandLine(data []byte) string {
	data = bytes.TrimRight(data, "\x00")
	return string(bytes.ReplaceAll(data, []byte{0}, []byte{' '}))
}

// StartTime returns when process pid started, in clock ticks (USER_HZ,
// usually 100 per second) since boot: field 22 of /proc/PID/stat. A pid and
// its start time together name one process; a reused pid has a later start
// time.
func (f FS) StartTime(pid int) (uint64, error) {
	data, err := readFileLimited(f.pidPath(pid, "stat"), maxStat)
	if err != nil {
		return 0, err
	}
	t, err := ParseStatStartTime(data)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", f.pidPath(pid, "stat"), err)
	}
	return t, nil
}

// ParseStatStartTime returns field 22 (starttime) of a /proc/PID/stat
// line. The command name (field 2) may hold spaces and parentheses, so
// fields are counted after its last ')'.
func ParseStatStartTime(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat line has no ')' after the command name")
	}
	fields := strings.Fields(string(stat[i+1:]))
	const startTime = 22 - 3 // the fields after ')' start with field 3 (state)
	if len(fields) <= startTime {
		return 0, fmt.Errorf("stat line has %d fields, want at least 22", len(fields)+2)
	}
	t, err := strconv.ParseUint(fields[startTime], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat start time %q: %w", truncate(fields[startTime]), err)
	}
	return t, nil
}

// MountNamespace returns the inode number of process pid's mount namespace
// (from the link /proc/PID/ns/mnt, "mnt:[4026531841]"). Two processes with
// the same number see the same mounts.
func (f FS) MountNamespace(pid int) (uint64, error) {
	link, err := os.Readlink(f.pidPath(pid, "ns/mnt"))
	if err != nil {
		return 0, err
	}
	return ParseNamespaceLink(link, "mnt")
}

// ParseNamespaceLink returns the inode number in a namespace link's target
// such as "mnt:[4026531841]"; kind is the namespace type ("mnt", "pid", …).
func ParseNamespaceLink(link, kind string) (uint64, error) {
	rest, ok := strings.CutPrefix(link, kind+":[")
	if !ok || !strings.HasSuffix(rest, "]") {
		return 0, fmt.Errorf("namespace link %q: want %s:[INODE]", truncate(link), kind)
	}
	ino, err := strconv.ParseUint(strings.TrimSuffix(rest, "]"), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("namespace link %q: %w", truncate(link), err)
	}
	return ino, nil
}

// PIDs returns the ids of all processes (thread-group leaders) in /proc, in
// increasing order.
func (f FS) PIDs() ([]int, error) {
	dir, err := os.Open(filepath.Join(f.root(), "proc"))
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir.Name(), err)
	}
	pids := make([]int, 0, len(names))
	for _, n := range names {
		if n == "" || n[0] < '1' || n[0] > '9' {
			continue
		}
		if pid, err := strconv.Atoi(n); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	sort.Ints(pids)
	return pids, nil
}
