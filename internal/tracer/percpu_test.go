package tracer

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
	"github.com/otel-uprobe/uprobereceiver/internal/config"
)

// perCPUValue is a per-CPU map value of the test: two counters.
type perCPUValue struct{ A, B uint64 }

// TestReadPerCPU reads every element of per-CPU arrays of sizes around
// the batch, each CPU's value exactly, in a few system calls: its
// allocations are a few per batch (one lookup per element allocated its
// values, twice).
func TestReadPerCPU(t *testing.T) {
	testutil.RequireRoot(t)
	cpus, err := ebpf.PossibleCPU()
	require.NoError(t, err)
	for _, n := range []int{1, perCPUBatch - 1, perCPUBatch, perCPUBatch + 1, 2000} {
		m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 16, MaxEntries: uint32(n)})
		require.NoError(t, err)
		defer m.Close()
		vals := make([]perCPUValue, cpus)
		for i := 0; i < n; i++ {
			for c := range vals {
				vals[c] = perCPUValue{uint64(i)*1000 + uint64(c), uint64(i)}
			}
			require.NoError(t, m.Put(uint32(i), vals))
		}
		seen := make([]int, n)
		require.NoError(t, readPerCPU(m, n, func(i int, perCPU []perCPUValue) {
			seen[i]++
			require.Len(t, perCPU, cpus)
			for c, v := range perCPU {
				assert.Equal(t, perCPUValue{uint64(i)*1000 + uint64(c), uint64(i)}, v, "element %d, CPU %d", i, c)
			}
		}), "%d elements", n)
		for i, k := range seen {
			require.Equal(t, 1, k, "element %d of %d read once", i, n)
		}
		allocs := testing.AllocsPerRun(3, func() {
			require.NoError(t, readPerCPU(m, n, func(int, []perCPUValue) {}))
		})
		batches := (n + perCPUBatch - 1) / perCPUBatch
		assert.LessOrEqual(t, allocs, float64(4+3*batches), "allocations reading %d elements: a few per batch", n)
		// The first elements only (the spans of a plan in a larger map).
		k := 0
		require.NoError(t, readPerCPU(m, n/2, func(i int, _ []perCPUValue) { k++; assert.Less(t, i, n/2) }))
		assert.Equal(t, n/2, k)
	}
}

// TestStatsOfSpansThatNeverRan: a span that never ran has no duration
// buckets in a snapshot (a function pattern's thousands of spans held
// 512 bytes of zeros each, per collection); one that ran has them all.
func TestStatsOfSpansThatNeverRan(t *testing.T) {
	b := testutil.BuildDemo(t, "-O2")
	demo := testutil.StartDemo(t, b.Program)
	tr, pl := openDemo(t, []config.Target{{
		Path: b.Program,
		Spans: []config.Span{
			{Name: "query", Entry: "usdt:demo:query__start", Exit: "usdt:demo:query__done"},
			{Name: "never", Entry: "usdt:demo:request__start", Exit: "usdt:demo:request__done"},
		},
	}})
	demo.Run(3)
	st, err := tr.Stats()
	require.NoError(t, err)
	q, never := st.Spans[spanIndex(t, pl.Plan, "query")], st.Spans[spanIndex(t, pl.Plan, "never")]
	assert.Equal(t, uint64(3), q.Count)
	assert.Len(t, q.Buckets, 64)
	var sum uint64
	for _, n := range q.Buckets {
		sum += n
	}
	assert.Equal(t, uint64(3), sum)
	assert.Zero(t, never.Count)
	assert.Nil(t, never.Buckets)
}
