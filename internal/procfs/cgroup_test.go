//go:build linux

package procfs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil/ci"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Container ids in the examples below (lines as runtimes write them; the
// layouts are documented in ContainerIDFromPath).
const (
	idA = "4f797c539e6c745de61a93ca3ff892358ecbcaccd8414d5db545c38428142970"
	idB = "9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d"
	idC = "e857a4bf05a69080a759574949d7a0e69572e27647800fa7faff6a05a8332aa1"
	idD = "34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376"
)

func TestContainerIDFromCgroupFile(t *testing.T) {
	tests := []struct {
		name, file, want string
	}{
		{
			name: "docker, cgroup v1, cgroupfs driver",
			file: "12:pids:/docker/" + idA + "\n11:memory:/docker/" + idA + "\n1:name=systemd:/docker/" + idA + "\n",
			want: idA,
		},
		{
			name: "docker, cgroup v1 and v2 hybrid, systemd driver",
			file: "10:devices:/system.slice/docker-" + idB + ".scope\n2:cpuacct,cpu:/system.slice/docker-" + idB + ".scope\n1:name=systemd:/system.slice/docker-" + idB + ".scope\n0::/system.slice/docker-" + idB + ".scope\n",
			want: idB,
		},
		{
			name: "docker, cgroup v2, systemd driver",
			file: "0::/system.slice/docker-" + idB + ".scope\n",
			want: idB,
		},
		{
			name: "containerd in Kubernetes, cgroup v2, systemd driver",
			file: "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod2f3c9a0e_6b1d_4c5e_9a7f_0d1e2f3a4b5c.slice/cri-containerd-" + idC + ".scope\n",
			want: idC,
		},
		{
			name: "containerd in Kubernetes, seen from the collector's own cgroup namespace",
			file: "0::/../../kubepods-besteffort.slice/kubepods-besteffort-pod2f3c9a0e_6b1d_4c5e_9a7f_0d1e2f3a4b5c.slice/cri-containerd-" + idC + ".scope\n",
			want: idC,
		},
		{
			name: "containerd, systemd driver on cgroup v1 (colon form)",
			file: "13:name=systemd:/kuberuntime/containerd/kubepods-pod872d2066_00ef_48ea_a7d8_51b18b72d739:cri-containerd:" + idC + "\n",
			want: idC,
		},
		{
			name: "Kubernetes, cgroup v1, cgroupfs driver (GKE, k3s)",
			file: "11:devices:/kubepods/besteffort/pod74c13223-5a00-11e9-b385-42010a80018d/" + idD + "\n10:perf_event:/kubepods/besteffort/pod74c13223-5a00-11e9-b385-42010a80018d/" + idD + "\n",
			want: idD,
		},
		{
			name: "CRI-O",
			file: "0::/kubepods.slice/kubepods-pod0a1b2c3d_4e5f_6789_abcd_ef0123456789.slice/crio-" + idA + ".scope\n",
			want: idA,
		},
		{
			name: "CRI-O conmon is not a container",
			file: "0::/kubepods.slice/kubepods-pod0a1b2c3d_4e5f_6789_abcd_ef0123456789.slice/crio-conmon-" + idA + ".scope\n",
			want: "",
		},
		{
			name: "dockershim in Kubernetes",
			file: "4:memory:/kubepods.slice/kubepods-podXXX.slice/docker-" + idB + ".scope\n",
			want: idB,
		},
		{
			name: "podman rootful",
			file: "0::/machine.slice/libpod-" + idD + ".scope\n",
			want: idD,
		},
		{
			name: "podman rootless, payload in a sub-cgroup",
			file: "0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + idD + ".scope/container\n",
			want: idD,
		},
		{
			name: "podman conmon is not a container",
			file: "0::/machine.slice/libpod-conmon-" + idD + ".scope\n",
			want: "",
		},
		{
			name: "nested containers: the innermost",
			file: "0::/docker/" + idA + "/docker/" + idB + "\n",
			want: idB,
		},
		{
			name: "host process, cgroup v2",
			file: "0::/system.slice/ssh.service\n",
			want: "",
		},
		{
			name: "host process, hybrid (this kind of VM)",
			file: "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/c780ee2d183203de649664dcf8462922\n0::/\n",
			want: "",
		},
		{
			name: "inside a private cgroup namespace",
			file: "0::/\n",
			want: "",
		},
		{
			name: "uppercase hex is not an id",
			file: "0::/docker/" + strings.ToUpper(idA) + "\n",
			want: "",
		},
		{
			name: "63 hex digits is not an id",
			file: "0::/docker/" + idA[1:] + "\n",
			want: "",
		},
		{
			name: "session scope",
			file: "0::/user.slice/user-0.slice/session-3.scope\n",
			want: "",
		},
		{
			name: "first line with an id wins",
			file: "12:pids:/docker/" + idA + "\n0::/system.slice/docker-" + idB + ".scope\n",
			want: idA,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			groups, err := ParseCgroup([]byte(tt.file))
			require.NoError(t, err)
			assert.Equal(t, tt.want, ContainerID(groups))
		})
	}
}

func TestParseCgroup(t *testing.T) {
	groups, err := ParseCgroup([]byte("2:cpu,cpuacct:/a\n1:name=systemd:/b:c\n\n0::/\n"))
	require.NoError(t, err)
	assert.Equal(t, []Cgroup{
		{Hierarchy: 2, Controllers: []string{"cpu", "cpuacct"}, Path: "/a"},
		{Hierarchy: 1, Controllers: []string{"name=systemd"}, Path: "/b:c"},
		{Hierarchy: 0, Path: "/"},
	}, groups)

	for _, bad := range []string{"0/", "x::/", "-1::/", "1:cpu"} {
		_, err := ParseCgroup([]byte(bad))
		assert.Error(t, err, "%q", bad)
	}
}

func TestContainerIDFake(t *testing.T) {
	tr := newTree(t)
	tr.file("proc/7/cgroup", "0::/system.slice/docker-"+idB+".scope\n", 0o444)
	id, err := FS{Root: tr.dir}.ContainerID(7)
	require.NoError(t, err)
	assert.Equal(t, idB, id)
	_, err = FS{Root: tr.dir}.ContainerID(8)
	require.ErrorIs(t, err, os.ErrNotExist)
}

// TestContainerIDSelf reads this process's own cgroups: they parse, and the
// container id is the 64-hex-digit name in them, if any (none on a host).
func TestContainerIDSelf(t *testing.T) {
	groups, err := FS{}.Cgroups(os.Getpid())
	require.NoError(t, err)
	require.NotEmpty(t, groups)
	data, err := os.ReadFile("/proc/self/cgroup")
	require.NoError(t, err)
	assert.Len(t, groups, strings.Count(strings.TrimSpace(string(data)), "\n")+1)
	want := regexp.MustCompile(`[0-9a-f]{64}`).FindString(string(data))
	assert.Equal(t, want, ContainerID(groups))
}

// TestContainerIDDockerStyleCgroup moves a process into a docker-style
// cgroup v1 directory (/sys/fs/cgroup/pids/docker/ID) and reads its id.
func TestContainerIDDockerStyleCgroup(t *testing.T) {
	ci.RequireRoot(t)
	base := "/sys/fs/cgroup/pids"
	if _, err := os.Stat(filepath.Join(base, "cgroup.procs")); err != nil {
		ci.SkipOrFail(t, "no cgroup v1 pids hierarchy at %s", base)
	}
	id := fmt.Sprintf("%064x", os.Getpid()) // 64 hex digits, unique per run
	parent := filepath.Join(base, "docker")
	if _, err := os.Stat(parent); os.IsNotExist(err) {
		require.NoError(t, os.Mkdir(parent, 0o755))
		t.Cleanup(func() { _ = os.Remove(parent) })
	}
	dir := filepath.Join(parent, id)
	require.NoError(t, os.Mkdir(dir, 0o755))
	cmd := exec.Command("sleep", "600")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = os.Remove(dir)
	})
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0))

	got, err := FS{}.ContainerID(cmd.Process.Pid)
	require.NoError(t, err)
	assert.Equal(t, id, got)
}

func FuzzParseCgroup(f *testing.F) {
	f.Add([]byte("12:pids:/docker/" + idA + "\n0::/\n"))
	f.Add([]byte("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podX.slice/cri-containerd-" + idC + ".scope\n"))
	f.Add([]byte("13:name=systemd:/kuberuntime/containerd/kubepods-podX:cri-containerd:" + idC))
	f.Add([]byte("0::/machine.slice/libpod-conmon-" + idD + ".scope\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		groups, err := ParseCgroup(data)
		if err != nil {
			return
		}
		id := ContainerID(groups)
		if id != "" && (!isContainerID(id) || !strings.Contains(string(data), id)) {
			t.Fatalf("container id %q from %q", id, data)
		}
	})
}
