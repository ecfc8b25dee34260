//go:build linux

package jaegertest

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

// TraceappResult is what harness/traceapp reports about the request it
// handled: its SERVER span "GET /checkout", the root of the trace.
type TraceappResult struct {
	TraceID       string `json:"trace_id"`
	SpanID        string `json:"span_id"`
	StartUnixNano int64  `json:"start_unix_nano"`
	EndUnixNano   int64  `json:"end_unix_nano"`
	// DemoPID is the process ID of the demo program traceapp drove.
	DemoPID int `json:"demo_pid"`
}

// BuildTraceapp builds harness/traceapp with go build into a temporary
// directory and returns the executable's path.
func BuildTraceapp(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "traceapp")
	// go test puts its own toolchain's go first in PATH.
	cmd := exec.Command("go", "build", "-o", bin, "./harness/traceapp")
	cmd.Dir = testutil.RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("jaegertest: go build ./harness/traceapp: %v\n%s", err, out)
	}
	return bin
}

// RunTraceapp runs traceapp (from BuildTraceapp) once: it drives the demo
// program at demo and exports its span over OTLP/gRPC to otlpGRPC
// ("host:port"). args are more flags, e.g. "-service", "checkout" or
// "-wait-probes". It fails the test if traceapp fails.
func RunTraceapp(t testing.TB, traceapp, otlpGRPC, demo string, args ...string) TraceappResult {
	t.Helper()
	cmd := exec.Command(traceapp, append([]string{"-otlp", otlpGRPC, "-demo", demo}, args...)...)
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("jaegertest: traceapp: %v (stdout %q)", err, stdout.String())
	}
	var r TraceappResult
	dec := json.NewDecoder(strings.NewReader(stdout.String()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("jaegertest: traceapp printed %q: %v", stdout.String(), err)
	}
	return r
}
