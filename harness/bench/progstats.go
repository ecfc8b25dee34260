//go:build linux

package main

import (
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// progRun is the run time and run count of one loaded BPF program.
type progRun struct {
	name    string
	runtime time.Duration
	runs    uint64
}

// enableProgramStats turns BPF run-time statistics on (BPF_ENABLE_STATS,
// Linux 5.8) until the returned closer is closed. They add two clock
// reads to every BPF program run on the host, floors included: rows
// measured with them on are read for where a program's time goes, not
// for ratios.
func enableProgramStats() (io.Closer, error) {
	return ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
}

// ownPrograms returns the ids of the BPF programs this process holds a
// descriptor of: the benchmark's own, not those other tracers on the host
// load meanwhile.
func ownPrograms() []ebpf.ProgramID {
	fds, _ := os.ReadDir("/proc/self/fd")
	var ids []ebpf.ProgramID
	for _, fd := range fds {
		if target, _ := os.Readlink("/proc/self/fd/" + fd.Name()); target != "anon_inode:bpf-prog" {
			continue
		}
		info, _ := os.ReadFile("/proc/self/fdinfo/" + fd.Name())
		for _, line := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "prog_id:"); ok {
				if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32); err == nil {
					ids = append(ids, ebpf.ProgramID(n))
				}
			}
		}
	}
	return ids
}

// programRuns returns the statistics of every BPF program this process
// holds whose name starts with one of prefixes, by id.
func programRuns(prefixes []string) (map[ebpf.ProgramID]progRun, error) {
	out := map[ebpf.ProgramID]progRun{}
	for _, id := range ownPrograms() {
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // unloaded meanwhile
		}
		info, err := p.Info()
		if err == nil {
			for _, pre := range prefixes {
				if strings.HasPrefix(info.Name, pre) {
					if st, err := p.Stats(); err == nil {
						out[id] = progRun{name: info.Name, runtime: st.Runtime, runs: st.RunCount}
					}
					break
				}
			}
		}
		p.Close()
	}
	return out, nil
}

// programDelta returns the run time and runs added between two snapshots.
func programDelta(before, after map[ebpf.ProgramID]progRun) (time.Duration, uint64) {
	var rt time.Duration
	var runs uint64
	for id, a := range after {
		b := before[id]
		rt += a.runtime - b.runtime
		runs += a.runs - b.runs
	}
	return rt, runs
}
