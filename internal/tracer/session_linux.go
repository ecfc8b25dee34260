package tracer

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
)

// Session uprobes (Linux 6.12) run one program at a function's entry and at
// its return, paired by the kernel; an entry that returns 1 makes the
// kernel skip the return. The engine attaches the entries of function
// spans that may reject a call at entry (a condition, a target that
// chooses its processes) this way, so that a rejected call pays its entry
// only, not the return trap too (issue 21, item 7). cilium/ebpf v0.22 knows
// the program section ("uprobe.session") but its UprobeMulti link always
// attaches as uprobe_multi: the link is made here, with BPF_LINK_CREATE.

// The kernel's BPF_TRACE_UPROBE_SESSION (enum bpf_attach_type) and
// BPF_LINK_CREATE (enum bpf_cmd).
const (
	attachTraceUprobeSession = 57
	bpfLinkCreate            = 28
)

// linkCreateUprobeMulti is union bpf_attr as BPF_LINK_CREATE reads it for
// uprobe_multi and session links (include/uapi/linux/bpf.h): 64 bytes.
type linkCreateUprobeMulti struct {
	progFD        uint32
	targetFD      uint32
	attachType    uint32
	flags         uint32
	path          uint64
	offsets       uint64
	refCtrOffsets uint64
	cookies       uint64
	count         uint32
	multiFlags    uint32
	pid           uint32
	_             uint32
}

// attachSession attaches prog, a session program (site_hit_session), at
// the locations of g in the file at path through one session link, in
// process pid only (0: every process that maps the file): the cookies are
// the entry sites, as for uprobe_multi.
func attachSession(path string, prog *ebpf.Program, g []plan.Attachment, pid uint32) (link.Link, error) {
	if len(g) == 0 {
		return nil, errors.New("no locations")
	}
	p, err := unix.BytePtrFromString(path)
	if err != nil {
		return nil, err
	}
	offsets := make([]uint64, len(g))
	refCtrs := make([]uint64, len(g))
	cookies := make([]uint64, len(g))
	for i, a := range g {
		offsets[i], refCtrs[i], cookies[i] = a.FileOffset, a.RefCtrOffset, a.Cookie
	}
	attr := linkCreateUprobeMulti{
		progFD:        uint32(prog.FD()),
		attachType:    attachTraceUprobeSession,
		path:          uint64(uintptr(unsafe.Pointer(p))),
		offsets:       uint64(uintptr(unsafe.Pointer(&offsets[0]))),
		refCtrOffsets: uint64(uintptr(unsafe.Pointer(&refCtrs[0]))),
		cookies:       uint64(uintptr(unsafe.Pointer(&cookies[0]))),
		count:         uint32(len(g)),
		pid:           pid,
	}
	fd, _, errno := unix.Syscall(unix.SYS_BPF, bpfLinkCreate, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	runtime.KeepAlive(p)
	runtime.KeepAlive(offsets)
	runtime.KeepAlive(refCtrs)
	runtime.KeepAlive(cookies)
	if errno != 0 {
		return nil, fmt.Errorf("creating a session uprobe link: %w", errno)
	}
	l, err := link.NewFromFD(int(fd))
	if err != nil {
		_ = unix.Close(int(fd))
		return nil, fmt.Errorf("wrapping a session uprobe link: %w", err)
	}
	return l, nil
}

// sessionPairs returns, for the attachments of file fi of pl, the entry
// sites to attach as session uprobes, each with the site of its return:
// the entry of a function span (ProgramSite, not a return) that may reject
// a call at entry (a condition evaluated at entry, a target that chooses
// its processes, or with sampling a sample_ratio below 1) and whose span
// closes at a kernel return probe at the same file offset (a uretprobe of a
// file that is not Go) that does nothing else.
func sessionPairs(pl *plan.Plan, fi int, sampling bool) map[int]int {
	f := pl.Files[fi]
	if f.Go {
		return nil
	}
	type at struct {
		offset uint64
		span   int
	}
	returns := map[at]int{}
	for _, a := range pl.Attachments[f.Attachments.Start:f.Attachments.End] {
		if a.Program == plan.ProgramSite && a.Return {
			// A return that only closes the span: one that also feeds a
			// counter's value histogram or filtered count must see every
			// call.
			if s := pl.Sites[a.Cookie]; s.ExitSpan >= 0 && s.EntrySpan < 0 && s.ValueHist == 0 && !s.FilteredHits {
				returns[at{a.FileOffset, s.ExitSpan}] = int(a.Cookie)
			}
		}
	}
	out := map[int]int{}
	for _, a := range pl.Attachments[f.Attachments.Start:f.Attachments.End] {
		if a.Program != plan.ProgramSite || a.Return {
			continue
		}
		s := pl.Sites[a.Cookie]
		if s.EntrySpan < 0 || s.ExitSpan >= 0 || !rejectsAtEntry(pl, s, sampling) {
			continue
		}
		span := pl.Spans[s.EntrySpan]
		if !span.Function || pl.Probes[span.Exit].Kind != config.KindUretprobe {
			continue
		}
		if r, ok := returns[at{a.FileOffset, s.EntrySpan}]; ok {
			out[int(a.Cookie)] = r
		}
	}
	return out
}

// rejectsAtEntry says whether the entry site s may reject a call: a
// condition of its span evaluated at entry, a target that chooses its
// processes, or with sampling (span records emitted) head sampling that
// may leave the call out (sample_ratio below 1: the engine skips the
// return of a call left out, issue 21 item 7).
func rejectsAtEntry(pl *plan.Plan, s plan.Site, sampling bool) bool {
	if pl.Targets[pl.Probes[s.Probe].Target].Chosen {
		return true
	}
	if sampling && pl.Spans[s.EntrySpan].SampleRatio < 1 {
		return true
	}
	for _, f := range s.Filters {
		if !f.AtExit {
			return true
		}
	}
	return false
}
