package main

import "github.com/otel-uprobe/uprobereceiver/internal/tracer"

// runningKernel says what the running kernel does that decides where
// probes go and what they cost, as the receiver asks it.
func runningKernel() (optimizedUprobes, arm64StepsNop bool) {
	return tracer.HaveOptimizedUprobes(), tracer.ARM64StepsNop()
}
