package receiver

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/receiver"

	"github.com/otel-uprobe/uprobereceiver/receiver/internal/metadata"
)

// receivers holds the one instance of each configuration, shared by the
// traces and the metrics pipelines.
var receivers = newSharedInstances()

// NewFactory returns the factory of the uprobe receiver.
func NewFactory() receiver.Factory {
	return receiver.NewFactory(
		metadata.Type,
		func() component.Config { return createDefaultConfig() },
		receiver.WithTraces(createTraces, metadata.TracesStability),
		receiver.WithMetrics(createMetrics, metadata.MetricsStability),
	)
}

func createTraces(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Traces) (receiver.Traces, error) {
	r, err := receivers.get(cfg.(*Config), set)
	if err != nil {
		return nil, err
	}
	r.setTraces(next)
	return r, nil
}

func createMetrics(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Metrics) (receiver.Metrics, error) {
	r, err := receivers.get(cfg.(*Config), set)
	if err != nil {
		return nil, err
	}
	r.setMetrics(next)
	return r, nil
}
