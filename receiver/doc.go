// Package receiver is the uprobe receiver's collector component: it attaches
// the USDT probes and uprobes listed under targets: and turns every
// entry/exit pair into a span and every hit into metrics. The factory shares
// one instance per configuration between the traces and metrics pipelines,
// so probes are attached once.
package receiver

//go:generate go tool mdatagen metadata.yaml
