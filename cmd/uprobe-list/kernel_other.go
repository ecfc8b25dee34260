//go:build !linux

package main

// runningKernel: without a Linux kernel to ask, files are listed as for a
// kernel that neither optimizes uprobes on 5-byte nops nor single-steps
// arm64 nops (-optimized-uprobes yes says otherwise).
func runningKernel() (optimizedUprobes, arm64StepsNop bool) { return false, false }
