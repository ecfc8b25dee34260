//go:build linux && (amd64 || arm64)

package receiver

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/receiver"
)

// receivers holds the one instance of each configuration, shared by the
// traces and the metrics pipelines.
var receivers = newSharedInstances()

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
