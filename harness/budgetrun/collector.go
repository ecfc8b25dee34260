package budgetrun

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/otel-uprobe/uprobereceiver/harness/testutil"
)

// Config returns a collector configuration that counts every call of the
// hot program's hot_fn with overhead_budget set to budget (none when 0),
// exports the pipeline's metrics every second to the sink at addr, and
// its own telemetry there too.
func Config(hot string, budget float64, addr string) string {
	b := ""
	if budget > 0 {
		b = fmt.Sprintf("\n    overhead_budget: %g", budget)
	}
	return fmt.Sprintf(`receivers:
  uprobe:
    collection_interval: 1s%s
    targets:
      - path: %s
        counters: [uprobe:hot_fn]
exporters:
  otlp_http:
    endpoint: http://%s
    compression: none
service:
  telemetry:
    logs:
      level: info
    metrics:
      level: normal
      readers:
        - periodic:
            interval: 500
            exporter:
              otlp:
                protocol: http/protobuf
                endpoint: http://%s/v1/metrics
  pipelines:
    metrics:
      receivers: [uprobe]
      exporters: [otlp_http]
`, b, hot, addr, addr)
}

// StartCollector writes config into dir and runs bin on it
// (testutil.RunCollector), returning once the collector logs that
// everything is ready (within a minute).
func StartCollector(bin, dir, config string) (*testutil.Collector, error) {
	path := filepath.Join(dir, "collector.yaml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		return nil, err
	}
	return testutil.RunCollector(exec.Command(bin, "--config", path))
}
