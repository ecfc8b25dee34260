package procfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// CgroupMount is one mounted cgroup hierarchy.
type CgroupMount struct {
	// Point is where it is mounted ("/sys/fs/cgroup/pids"), in the mount
	// namespace whose table named it.
	Point string
	// Root is the cgroup the mount shows as its root ("/" unless a
	// subtree was mounted or the mounter was in a cgroup namespace).
	Root string
	// Dir is where the reader opens it: Point, or Point under
	// /proc/1/root for the mounts of the host's init process.
	Dir string
}

// dir returns where to open m.
func (m CgroupMount) dir() string {
	if m.Dir != "" {
		return m.Dir
	}
	return m.Point
}

// CgroupMounts are the cgroup hierarchies of a mount table: the unified
// (v2) one and the v1 ones by controller. The first mount of each counts.
type CgroupMounts struct {
	// Unified is the cgroup2 mount; its Point is "" when there is none.
	Unified CgroupMount
	// V1 holds the v1 mounts by controller ("pids", "memory", …); a
	// hierarchy with co-mounted controllers ("cpu,cpuacct") is under each.
	V1 map[string]CgroupMount
}

// v1Controllers are the cgroup v1 controllers, in the order the receiver
// prefers their hierarchy for container ids: container runtimes put a
// container in every mounted controller's hierarchy, and pids is the
// smallest with no side effect.
var v1Controllers = []string{"pids", "memory", "cpu", "cpuacct", "blkio", "devices", "freezer", "cpuset",
	"perf_event", "net_cls", "net_prio", "hugetlb", "rdma", "misc"}

// ParseCgroupMounts finds the cgroup mounts in a mountinfo file
// (proc(5): "ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL…] - TYPE SOURCE
// SUPEROPTIONS"). Lines that do not parse are skipped. Mount points are
// unescaped (octal escapes such as \040 for a space).
func ParseCgroupMounts(mountinfo []byte) CgroupMounts {
	out := CgroupMounts{V1: map[string]CgroupMount{}}
	known := map[string]bool{}
	for _, c := range v1Controllers {
		known[c] = true
	}
	for _, line := range strings.Split(string(mountinfo), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 6 || len(g) < 3 {
			continue
		}
		m := CgroupMount{Point: unescapeMount(f[4]), Root: unescapeMount(f[3])}
		switch g[0] {
		case "cgroup2":
			if out.Unified.Point == "" {
				out.Unified = m
			}
		case "cgroup":
			for _, opt := range strings.Split(g[2], ",") {
				if _, dup := out.V1[opt]; known[opt] && !dup {
					out.V1[opt] = m
				}
			}
		}
	}
	return out
}

// unescapeMount undoes the octal escapes of mountinfo fields.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// PreferredV1 returns the v1 controller whose hierarchy names a process's
// container best (see v1Controllers), and false when no v1 hierarchy is
// mounted (a cgroup v2 host).
func (m CgroupMounts) PreferredV1() (string, bool) {
	for _, c := range v1Controllers {
		if _, ok := m.V1[c]; ok {
			return c, true
		}
	}
	return "", false
}

// CgroupMounts reads the cgroup mounts of the host: those of its init
// process (/proc/1/mountinfo), opened through its root (/proc/1/root),
// which a collector in a container with the host's pid namespace reaches
// (CAP_SYS_PTRACE) whatever its own mounts and cgroup namespace show;
// else those of the reader's own mount namespace.
func (f FS) CgroupMounts() (CgroupMounts, error) {
	if data, err := readFileLimited(f.pidPath(1, "mountinfo"), maxMountinfo); err == nil {
		m := ParseCgroupMounts(data)
		if m.Unified.Point != "" || len(m.V1) > 0 {
			through := f.pidPath(1, "root")
			m.Unified.Dir = filepath.Join(through, m.Unified.Point)
			for c, v1 := range m.V1 {
				v1.Dir = filepath.Join(through, v1.Point)
				m.V1[c] = v1
			}
			if m.Unified.Point == "" {
				m.Unified.Dir = ""
			}
			if reachable(m) {
				return m, nil
			}
		}
	}
	data, err := readFileLimited(filepath.Join(f.root(), "proc", "self", "mountinfo"), maxMountinfo)
	if err != nil {
		return CgroupMounts{V1: map[string]CgroupMount{}}, err
	}
	return ParseCgroupMounts(data), nil
}

// reachable says whether every mount of m can be opened (the host's
// init process's root may be out of the reader's reach).
func reachable(m CgroupMounts) bool {
	all := []CgroupMount{m.Unified}
	for _, v1 := range m.V1 {
		all = append(all, v1)
	}
	for _, c := range all {
		if c.Point == "" {
			continue
		}
		if _, err := os.Stat(c.dir()); err != nil {
			return false
		}
	}
	return true
}

// maxMountinfo bounds /proc/self/mountinfo (a node with many containers
// has thousands of mounts).
const maxMountinfo = 16 << 20

// fileIDKernfs is the file handle type of kernfs (FILEID_KERNFS): an
// 8-byte handle holding the node's id.
const fileIDKernfs = 0xfe

// maxWalk bounds the directories a walk of a hierarchy looks at.
const maxWalk = 1 << 17

// CgroupPath returns the path of the cgroup whose kernfs id is id, in the
// hierarchy mounted at m ("/docker/<id>"): the cgroup's directory is
// opened by its file handle (open_by_handle_at, which needs
// CAP_DAC_READ_SEARCH) or, where that is refused, found by walking the
// hierarchy for the directory whose inode number is id. It fails with an
// error matching fs.ErrNotExist when no such cgroup exists any more.
func CgroupPath(m CgroupMount, id uint64) (string, error) {
	p, err := cgroupPathByHandle(m, id)
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return p, err
	}
	return cgroupPathByWalk(m, id)
}

// relativeCgroup turns the path of a directory under m's mount point (as
// the namespace of the mount sees it, or through m.Dir) into its cgroup's
// path.
func relativeCgroup(m CgroupMount, p string) (string, error) {
	for _, prefix := range []string{m.dir(), m.Point} {
		rel, ok := strings.CutPrefix(p, strings.TrimSuffix(prefix, "/"))
		if ok && (rel == "" || rel[0] == '/') {
			return path.Join("/", m.Root, rel), nil
		}
	}
	return "", fmt.Errorf("cgroup directory %s is not under %s", p, m.Point)
}

func cgroupPathByWalk(m CgroupMount, id uint64) (string, error) {
	var found string
	seen := 0
	stop := errors.New("found")
	err := filepath.WalkDir(m.dir(), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // removed meanwhile, or unreadable: not this one
		}
		if !d.IsDir() {
			return nil
		}
		if seen++; seen > maxWalk {
			return fmt.Errorf("more than %d cgroups in %s", maxWalk, m.Point)
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		if IDOf(info).Ino == id { // a directory's inode number is its kernfs id
			found = p
			return stop
		}
		return nil
	})
	if found != "" {
		return relativeCgroup(m, found)
	}
	if err != nil && !errors.Is(err, stop) {
		return "", err
	}
	return "", fmt.Errorf("cgroup %d in %s: %w", id, m.Point, fs.ErrNotExist)
}
