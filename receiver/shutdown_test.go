package receiver

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/testutil"
)

// TestShutdownDrainsPastProcessRecords: Shutdown right after the traced
// calls finds every span still in the ring buffer, behind process records
// (the traced program's own exec, any exec on the host). The final drain
// read the ring in batches of max_batch_spans records and stopped at the
// first batch with fewer spans than that, leaving the rest: TestPostgres
// lost its pg.query span that way (1,022 of 3,866 palloc spans came, in
// a first batch of 1,024 records with two process records).
func TestShutdownDrainsPastProcessRecords(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.BuildDemo(t, "-O2")
	cfg := createDefaultConfig()
	cfg.Targets = []config.Target{{Path: b.Program, Spans: []config.Span{{Name: "work", Function: "work", Returns: config.ReturnsUretprobe}}}}
	cfg.MaxBatchSpans = 4
	// The drain goroutine waits this long after the first record: the
	// spans are still in the ring when Shutdown comes.
	cfg.FlushInterval = time.Second
	s := startReceiverConfig(t, cfg)
	demo := testutil.StartDemo(t, b.Program) // its exec is a record before its spans
	const n = 50
	demo.Run(n)
	require.NoError(t, s.rcv.Shutdown(context.Background()))
	assert.Equal(t, n, len(allSpans(s.traces)), "every span completed before Shutdown")
}
