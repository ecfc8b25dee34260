package main

import (
	"flag"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// floorGolden is the floor batch both floors build: the standalone one
// (buildFloorBatch) and the spanfloor receiver's (spanfloor.Build, a module
// of its own, checked against the same file by its own test).
const floorGolden = "testdata/floor-batch.json"

func TestFloorBatchMatchesGolden(t *testing.T) {
	got, err := (&ptrace.JSONMarshaler{}).MarshalTraces(buildFloorBatch(7, 3))
	require.NoError(t, err)
	if *update {
		require.NoError(t, os.WriteFile(floorGolden, got, 0o644))
	}
	want, err := os.ReadFile(floorGolden)
	require.NoError(t, err, "run go test -update to create it")
	require.JSONEq(t, string(want), string(got))
}
