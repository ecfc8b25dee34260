package receiver

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/event"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
	"github.com/otel-uprobe/uprobereceiver/internal/tracer"
)

func TestProcExe(t *testing.T) {
	for _, tt := range []struct {
		filename string
		pid      uint32
		ok       bool
	}{
		{"/proc/self/exe", 42, true},
		{"/proc/17/exe", 17, true},
		{"/proc/self/exe/", 0, false},
		{"/proc/self/fd/3", 0, false},
		{"/proc/x17/exe", 0, false},
		{"/proc/99999999999/exe", 0, false},
		{"/usr/bin/prog", 0, false},
		{"./proc/self/exe", 0, false},
		{"/dev/fd/3", 0, false},
	} {
		pid, ok := procExe(tt.filename, 42)
		assert.Equal(t, tt.ok, ok, tt.filename)
		assert.Equal(t, tt.pid, pid, tt.filename)
	}
}

// TestFoldedOntoSpansThatNeverRan: the engine's snapshot has no duration
// buckets for a span that never ran (tracer.Stats leaves them nil: 20,000
// spans of a function pattern held 10 MiB of zeros per snapshot), and the
// chooser has nothing folded until a chosen process's pending counts come.
// Folded counts still add up onto such a snapshot, bucket by bucket.
func TestFoldedOntoSpansThatNeverRan(t *testing.T) {
	pl := &plan.Plan{
		Targets: []plan.PlannedTarget{{Path: "/bin/app", Chosen: true, ChosenBit: 0}},
		Probes:  []plan.Probe{{Target: 0, Ref: "uprobe:a"}, {Target: 0, Ref: "uretprobe:a"}},
		Spans:   []plan.SpanDef{{Target: 0, Name: "a", Entry: 0, Exit: 1}, {Target: 0, Name: "b", Entry: 0, Exit: 1}},
	}
	c, err := newChooser(pl, nil, procfs.FS{})
	require.NoError(t, err)

	st := event.Stats{Probes: make([]event.ProbeCounts, 2), Spans: make([]event.SpanCounts, 2)}
	c.addFolded(&st)
	assert.Equal(t, event.Stats{Probes: make([]event.ProbeCounts, 2), Spans: make([]event.SpanCounts, 2)}, st, "nothing folded: the snapshot as it was")

	c.fold([]tracer.PendingCount{
		{Kind: bpfobj.PendingHits, ID: 0, Value: 7},
		{Kind: bpfobj.PendingSpanBucket, ID: 1, Bucket: 3, Value: 5},
		{Kind: bpfobj.PendingSpanSum, ID: 1, Value: 60},
	}, 1)
	st = event.Stats{Probes: make([]event.ProbeCounts, 2), Spans: make([]event.SpanCounts, 2)}
	st.Spans[1].Buckets = nil // the span never ran while the engine counted it
	c.addFolded(&st)
	assert.Equal(t, uint64(7), st.Probes[0].Hits)
	assert.Nil(t, st.Spans[0].Buckets, "span a: nothing folded, no buckets")
	require.Len(t, st.Spans[1].Buckets, bpfobj.HistBuckets)
	assert.Equal(t, uint64(5), st.Spans[1].Buckets[3])
	assert.Equal(t, uint64(5), st.Spans[1].Count)
	assert.Equal(t, uint64(60), st.Spans[1].SumNs)
}

// fakeProcesses is an engine's process map for the chooser's unit tests.
type fakeProcesses map[uint32]bpfobj.ProcEntry

func (f fakeProcesses) SetProcess(pid uint32, startNs, mask uint64, decided bool) error {
	if _, ok := f[pid]; decided && !ok {
		return errors.New("no such process")
	}
	f[pid] = bpfobj.ProcEntry{Mask: mask, StartNs: startNs}
	return nil
}

func (f fakeProcesses) ProcessMask(pid uint32) (uint64, uint64, bool) {
	e, ok := f[pid]
	return e.Mask, e.StartNs, ok
}

func (f fakeProcesses) TakePending(map[uint32]bool) (map[uint32][]tracer.PendingCount, error) {
	return nil, nil
}

// A process that takes a pid: target's pid after the target exited and
// execs is not chosen for that target, even where a process: target makes
// the chooser decide every exec; the target's own process keeps its bit
// across an exec (the engine kept it).
func TestReusedPIDIsNotChosenAtExec(t *testing.T) {
	pl := &plan.Plan{Targets: []plan.PlannedTarget{
		{Path: "libc", PID: 4242, ProcessStart: 100, Chosen: true, ChosenBit: 0},
		{Path: "libc", Selector: &procfs.Selector{Executable: "no-such-program"}, Chosen: true, ChosenBit: 1},
	}}
	engine := fakeProcesses{}
	c, err := newChooser(pl, engine, procfs.FS{Root: t.TempDir()})
	require.NoError(t, err)
	pending := uint64(1) << bpfobj.ProcPendingBit

	// The target's own process execs: the engine kept its bit.
	engine[4242] = bpfobj.ProcEntry{Mask: 1 | pending, StartNs: 7_000}
	c.exec(event.Process{PID: 4242, Filename: "/bin/app", Image: event.Image{StartNs: 7_000}})
	assert.Equal(t, uint64(1), engine[4242].Mask, "the target's process stays chosen")

	// It exits (the engine forgets it); another process takes the pid and
	// execs: the engine has it pending, with no target's bit.
	delete(engine, 4242)
	c.exit(event.Process{PID: 4242, Image: event.Image{StartNs: 7_000}})
	engine[4242] = bpfobj.ProcEntry{Mask: pending, StartNs: 9_000}
	c.exec(event.Process{PID: 4242, Filename: "/bin/other", Image: event.Image{StartNs: 9_000}})
	assert.Equal(t, uint64(0), engine[4242].Mask, "the newcomer is not the pid: target's process")
}

// A child of a process chosen for a pid: target and for a process:
// target keeps the process: choice only, whether its parent was decided
// before the fork or after: the pid: target's bit is its process's alone
// (on kernels whose uprobe_multi links take every process, Linux 6.6 to
// 6.10, the child would count for it).
func TestForkKeepsSelectorChoicesOnly(t *testing.T) {
	pl := &plan.Plan{Targets: []plan.PlannedTarget{
		{Path: "libc", PID: 4242, ProcessStart: 100, Chosen: true, ChosenBit: 0},
		{Path: "libc", Selector: &procfs.Selector{Executable: "app"}, Chosen: true, ChosenBit: 1},
	}}
	engine := fakeProcesses{}
	c, err := newChooser(pl, engine, procfs.FS{Root: t.TempDir()})
	require.NoError(t, err)
	pending := uint64(1) << bpfobj.ProcPendingBit

	// Decided before the fork.
	c.decisions[imageKey{4242, event.Image{StartNs: 100}}] = 0b11
	engine[5000] = bpfobj.ProcEntry{Mask: pending, StartNs: 200}
	c.fork(event.Process{PID: 5000, Parent: 4242, Image: event.Image{StartNs: 200}})
	assert.Equal(t, uint64(0b10), engine[5000].Mask, "the child keeps the process: choice only")

	// Decided after: the child waits for its parent.
	engine[6000] = bpfobj.ProcEntry{Mask: pending, StartNs: 300}
	engine[6001] = bpfobj.ProcEntry{Mask: pending, StartNs: 400}
	c.fork(event.Process{PID: 6001, Parent: 6000, Image: event.Image{StartNs: 400}})
	c.decide(6000, event.Image{StartNs: 300}, 0b11)
	assert.Equal(t, uint64(0b11), engine[6000].Mask)
	assert.Equal(t, uint64(0b10), engine[6001].Mask, "its child keeps the process: choice only")
}
