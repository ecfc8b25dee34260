// Package procfs reads what the receiver needs to know about processes and
// files from /proc and the file system, as plain Go that tests run against a
// fake tree under t.TempDir():
//
//   - name resolution as bcc, bpftrace and perf do it: an executable name
//     through PATH, a library name through /etc/ld.so.cache and the default
//     library directories, and a library name as one process sees it
//     (through its /proc/PID/maps);
//   - /proc/PID/maps: every mapping with its device, inode, file offset,
//     permissions and path, read with bounds;
//   - /proc/PID/cgroup: the container id of a process (docker, containerd,
//     CRI-O, podman, Kubernetes pods; cgroup v1 and v2);
//   - process facts: the executable path and command line as the process
//     sees them, its start time (to detect pid reuse), its mount namespace,
//     the list of pids;
//   - process selectors: an executable glob and a command-line regular
//     expression, compiled once;
//   - paths "as process PID sees them": resolved inside /proc/PID/root so
//     that neither ".." nor symbolic links leave that root ([Root]).
//
// Every reader takes its tree from an [FS] (for /proc) or a [Root] (for
// files): "/" on a live system, a directory in tests. Nothing here loads BPF
// programs or attaches probes; reading other processes' /proc entries needs
// the privileges listed by package privilege (CAP_SYS_PTRACE for
// /proc/PID/exe, /proc/PID/root and /proc/PID/ns of processes of other users
// or with capabilities the reader lacks).
package procfs
