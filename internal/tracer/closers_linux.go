package tracer

import (
	"bufio"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
)

// minClosers is the fewest links closed at once, whatever the pids limit.
const minClosers = 32

// closerSlots returns how many links may close at once (each close
// blocks an OS thread, see maxClosers): maxClosers, or a quarter of the
// threads the collector's pids limit still allows when that is fewer (a
// Go program that cannot make a thread dies), but at least minClosers.
var closerSlots = sync.OnceValue(func() int {
	return closersFor(pidsHeadroom("/proc/self/cgroup", "/sys/fs/cgroup"))
})

// closersFor returns the closes at once for a pids headroom (-1: no limit).
func closersFor(headroom int64) int {
	if headroom < 0 {
		return maxClosers
	}
	return int(min(max(headroom/4, minClosers), maxClosers))
}

// pidsHeadroom returns how many more tasks the cgroups of this process
// let it make (pids.max − pids.current of its cgroup and each ancestor,
// the least), or -1 when none limits it or it cannot tell. selfCgroup is
// /proc/self/cgroup; root the cgroup file system's mount point: the
// unified (v2) hierarchy there, a v1 pids hierarchy at root/pids.
func pidsHeadroom(selfCgroup, root string) int64 {
	f, err := os.Open(selfCgroup)
	if err != nil {
		return -1
	}
	defer f.Close()
	headroom := int64(-1)
	sc := bufio.NewScanner(f)
	for lines := 0; sc.Scan() && lines < 64; lines++ {
		id, rest, _ := strings.Cut(sc.Text(), ":")
		controllers, dir, ok := strings.Cut(rest, ":")
		if !ok || !strings.HasPrefix(dir, "/") {
			continue
		}
		var base string
		switch {
		case id == "0" && controllers == "":
			base = root
		case hasController(controllers, "pids"):
			base = path.Join(root, "pids")
		default:
			continue
		}
		for d, depth := path.Clean(dir), 0; depth < 64; d, depth = path.Dir(d), depth+1 {
			if h, ok := cgroupHeadroom(path.Join(base, d)); ok && (headroom < 0 || h < headroom) {
				headroom = h
			}
			if d == "/" {
				break
			}
		}
	}
	return headroom
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// cgroupHeadroom returns pids.max − pids.current of one cgroup directory,
// and false when it sets no limit (or has no pids files).
func cgroupHeadroom(dir string) (int64, bool) {
	limit, err := os.ReadFile(path.Join(dir, "pids.max"))
	if err != nil {
		return 0, false
	}
	most, err := strconv.ParseInt(strings.TrimSpace(string(limit)), 10, 64)
	if err != nil { // "max": no limit
		return 0, false
	}
	cur, err := os.ReadFile(path.Join(dir, "pids.current"))
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(cur)), 10, 64)
	if err != nil {
		return 0, false
	}
	return max(0, most-n), true
}
