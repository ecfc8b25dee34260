package receiver

import (
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
