package receiver

import (
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/receiver"

	"github.com/otel-uprobe/uprobereceiver/receiver/internal/metadata"
)

// NewFactory returns the factory of the uprobe receiver. It builds on
// every platform the collector ships, so that a distribution for several
// can include it; the receiver runs on Linux on x86-64 and arm64
// (factory_linux.go), and elsewhere its Start refuses with a sentence
// saying so (factory_others.go).
func NewFactory() receiver.Factory {
	return receiver.NewFactory(
		metadata.Type,
		func() component.Config { return createDefaultConfig() },
		receiver.WithTraces(createTraces, metadata.TracesStability),
		receiver.WithMetrics(createMetrics, metadata.MetricsStability),
	)
}
