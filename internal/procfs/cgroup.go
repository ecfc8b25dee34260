package procfs

import (
	"fmt"
	"strconv"
	"strings"
)

// Cgroup is one line of /proc/PID/cgroup: the process's place in one cgroup
// hierarchy.
type Cgroup struct {
	// Hierarchy is the hierarchy id: 0 for cgroup v2 (the unified
	// hierarchy), positive for a cgroup v1 hierarchy.
	Hierarchy int
	// Controllers are the v1 controllers bound to the hierarchy ("cpu",
	// "cpuacct", "name=systemd"); empty for cgroup v2.
	Controllers []string
	// Path is the cgroup's path, relative to the reader's cgroup namespace
	// root: a process outside that namespace shows "/../…".
	Path string
}

// ParseCgroup parses the contents of /proc/PID/cgroup
// ("HIERARCHY:CONTROLLERS:PATH" per line; cgroup v1, v2 or both). Blank
// lines are skipped.
func ParseCgroup(data []byte) ([]Cgroup, error) {
	var out []Cgroup
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		id, rest, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("cgroup line %d %q: want HIERARCHY:CONTROLLERS:PATH", n+1, truncate(line))
		}
		ctrl, path, ok := strings.Cut(rest, ":")
		if !ok {
			return nil, fmt.Errorf("cgroup line %d %q: want HIERARCHY:CONTROLLERS:PATH", n+1, truncate(line))
		}
		h, err := strconv.Atoi(id)
		if err != nil || h < 0 {
			return nil, fmt.Errorf("cgroup line %d: hierarchy id %q is not a number", n+1, truncate(id))
		}
		c := Cgroup{Hierarchy: h, Path: path}
		if ctrl != "" {
			c.Controllers = strings.Split(ctrl, ",")
		}
		out = append(out, c)
	}
	return out, nil
}

// ContainerID returns the container id found in the first cgroup, in file
// order, whose path has one (see [ContainerIDFromPath]), or "".
func ContainerID(groups []Cgroup) string {
	for _, g := range groups {
		if id := ContainerIDFromPath(g.Path); id != "" {
			return id
		}
	}
	return ""
}

// ContainerIDFromPath returns the id of the container a cgroup path belongs
// to, or "" when it belongs to none. Container runtimes name a container's
// cgroup after its id, 64 lowercase hex digits, in one of these forms
// (cgroup v1 or v2):
//
//	/docker/ID                                         docker, cgroupfs driver
//	/system.slice/docker-ID.scope                      docker, systemd driver
//	/kubepods/burstable/podUID/ID                      Kubernetes, cgroupfs driver
//	/kubepods.slice/kubepods-burstable.slice/
//	    kubepods-burstable-podUID.slice/cri-containerd-ID.scope   containerd, systemd driver
//	    …/crio-ID.scope                                CRI-O
//	    …/docker-ID.scope                              dockershim, cri-dockerd
//	/system.slice/containerd.service/
//	    kubepods-besteffort-podUID.slice:cri-containerd:ID   containerd, systemd driver on cgroup v1
//	/machine.slice/libpod-ID.scope                     podman (rootful; rootless under user@UID.service)
//
// The path is searched from its last component up, so a process in a
// sub-cgroup of a container (…/libpod-ID.scope/container) belongs to that
// container, and the innermost container wins for nested ones. Monitor
// processes are not containers: libpod-conmon-ID.scope and
// crio-conmon-ID.scope give "". Paths seen from another cgroup namespace
// ("/../../…-ID.scope") work alike. Anything but exactly 64 lowercase hex
// digits (such as shorter ids some tools use) is not an id.
func ContainerIDFromPath(path string) string {
	for path != "" {
		var comp string
		if i := strings.LastIndexByte(path, '/'); i >= 0 {
			comp, path = path[i+1:], path[:i]
		} else {
			comp, path = path, ""
		}
		if strings.HasSuffix(comp, ".slice") || strings.Contains(comp, "-conmon-") {
			continue
		}
		comp = strings.TrimSuffix(comp, ".scope")
		if i := strings.LastIndexByte(comp, ':'); i >= 0 {
			comp = comp[i+1:]
		}
		if i := strings.LastIndexByte(comp, '-'); i >= 0 {
			comp = comp[i+1:]
		}
		if isContainerID(comp) {
			return comp
		}
	}
	return ""
}

// isContainerID says whether s is 64 lowercase hex digits.
func isContainerID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Cgroups returns process pid's cgroups (/proc/PID/cgroup).
func (f FS) Cgroups(pid int) ([]Cgroup, error) {
	p := f.pidPath(pid, "cgroup")
	data, err := readFileLimited(p, maxCgroup)
	if err != nil {
		return nil, err
	}
	groups, err := ParseCgroup(data)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	return groups, nil
}

// ContainerID returns the id of the container process pid runs in, or ""
// when its cgroups name none (a host process). A reader in its own cgroup
// namespace (a pod, on cgroup v2) sees other processes' paths relative to
// its own cgroup ("/../../kubepods-….slice/cri-containerd-ID.scope"), which
// still name their container; a process reading its own cgroup from inside
// a private cgroup namespace sees "0::/" and no id.
func (f FS) ContainerID(pid int) (string, error) {
	groups, err := f.Cgroups(pid)
	if err != nil {
		return "", err
	}
	return ContainerID(groups), nil
}
