//go:build !(linux && (amd64 || arm64))

package receiver

import (
	"context"
	"fmt"
	"runtime"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/receiver"
)

// unsupported is the receiver on a platform without its kernel side: the
// configuration is read and validated as on Linux, and Start refuses.
type unsupported struct{}

func createTraces(context.Context, receiver.Settings, component.Config, consumer.Traces) (receiver.Traces, error) {
	return unsupported{}, nil
}

func createMetrics(context.Context, receiver.Settings, component.Config, consumer.Metrics) (receiver.Metrics, error) {
	return unsupported{}, nil
}

// Start says that the receiver needs Linux.
func (unsupported) Start(context.Context, component.Host) error {
	return fmt.Errorf("the uprobe receiver needs Linux on x86-64 or arm64 (it attaches eBPF uprobes), and this collector runs on %s/%s", runtime.GOOS, runtime.GOARCH)
}

// Shutdown has nothing to stop.
func (unsupported) Shutdown(context.Context) error { return nil }
