//go:build linux && (amd64 || arm64)

package receiver

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/otel-uprobe/uprobereceiver/internal/debuginfo"
	"github.com/otel-uprobe/uprobereceiver/internal/planner"
	"github.com/otel-uprobe/uprobereceiver/internal/usdt"
	"github.com/otel-uprobe/uprobereceiver/receiver/internal/metadata"
)

// unplannedReason says why a file was left out, for self-telemetry.
func unplannedReason(err error) metadata.AttributeUnplannedReason {
	switch {
	case errors.Is(err, planner.ErrPanic):
		return metadata.AttributeUnplannedReasonPanic
	case errors.Is(err, debuginfo.ErrOverBudget), errors.Is(err, planner.ErrTooManySites), errors.Is(err, usdt.ErrTooManySites):
		return metadata.AttributeUnplannedReasonOverLimit
	case errors.Is(err, debuginfo.ErrMalformed):
		return metadata.AttributeUnplannedReasonMalformed
	}
	return metadata.AttributeUnplannedReasonOther
}

// leftOut says that a file of a target was left out: a warning with the
// reason, a count by reason, and a recoverable error as the component's
// status. The receiver goes on tracing every other file: a tenant's file,
// however hostile, hurts only itself.
func (r *uprobeReceiver) leftOut(ctx context.Context, targetPath string, c planner.Candidate, err error) {
	reason := unplannedReason(err)
	r.set.Logger.Warn("File left out: it cannot be read or planned; the target's other files are traced",
		zap.String("target", targetPath), zap.String("path", c.Path), zap.String("seen_as", c.SeenAs),
		zap.String("found", c.How), zap.String("reason", reason.String()), zap.Error(err))
	r.tel.ReceiverUprobeFilesUnplanned.Add(ctx, 1, metric.WithAttributes(attribute.String("unplanned.reason", reason.String())))
	r.unplanned.Add(1)
	r.hosts.report(componentstatus.NewRecoverableErrorEvent(
		fmt.Errorf("traced file %s of target %s left out (%s; the other files are traced): %w", c.Path, targetPath, reason, err)))
}
