package receiver

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/debuginfo"
	"github.com/otel-uprobe/uprobereceiver/internal/planner"
	"github.com/otel-uprobe/uprobereceiver/internal/recipe"
	"github.com/otel-uprobe/uprobereceiver/receiver/internal/metadata"
)

// Config is the receiver's configuration.
type Config struct {
	metadata.MetricsBuilderConfig `mapstructure:",squash"`

	// Targets are the traced files and what to take from each.
	Targets []config.Target `mapstructure:"targets"`
	// FlushInterval is the longest a completed span waits in the ring
	// buffer before it is handed to the pipeline: the receiver drains the
	// ring this long after the previous drain (or after the first record
	// that comes while it sleeps), or sooner when the ring is a quarter
	// full or holds a record to act on at once (an exec). With nothing to
	// read it sleeps, looking once a second.
	FlushInterval time.Duration `mapstructure:"flush_interval"`
	// CollectionInterval is how often the kernel's counters and histograms
	// are read and emitted as metrics; a final snapshot is emitted at shutdown.
	CollectionInterval time.Duration `mapstructure:"collection_interval"`
	// RingBufferSize is the size in bytes of the span ring buffer shared by
	// all CPUs: a power of two of at least one page.
	RingBufferSize int `mapstructure:"ring_buffer_size"`
	// MaxBatchSpans bounds the spans handed to the pipeline in one call. A
	// drain hands over what the ring holds in calls of at most this many:
	// the smaller the calls, the less memory is live at once, which the
	// garbage collector scans (see docs/benchmarks.md).
	MaxBatchSpans int `mapstructure:"max_batch_spans"`
	// MaxGoroutines bounds the goroutines of Go targets that can have open
	// spans at the same time; each takes about 27 KiB of kernel memory
	// while it does. Entries beyond it are counted, not recorded.
	MaxGoroutines int `mapstructure:"max_goroutines"`
	// DebugDirectories are the roots of separate debug files, searched in
	// order when a target uses $names, line: probes or function patterns:
	// DIR/.build-id/xx/rest.debug by the file's GNU build id, and
	// DIR/<directory of the file>/<.gnu_debuglink name>. Debuginfo in the
	// file itself comes first; with DEBUGINFOD_URLS set, debuginfod last.
	DebugDirectories []string `mapstructure:"debug_directories"`
	// OverheadBudget bounds the CPU time all probes together add to the
	// traced programs, as a fraction of one CPU averaged over 10 s (0.02
	// is 2% of a CPU). 0 (the default) sets no budget: nothing is measured
	// and no probe is ever detached. With a budget, the receiver measures
	// what a hit costs at Start and duty-cycles the costliest probes when
	// their estimated cost goes over it.
	OverheadBudget float64 `mapstructure:"overhead_budget"`
	// MaxDebuginfoBytes bounds the memory reading one traced file may
	// take: its debug sections once decompressed (each read once),
	// together, what is decoded from them (functions, types), and its
	// other compressed sections and symbol tables. A file over it (a
	// compressed-section bomb, a million nested types) is left out with a
	// warning, and the other files are traced.
	MaxDebuginfoBytes int64 `mapstructure:"max_debuginfo_bytes"`
	// MaxSitesPerProbe bounds the locations one probe may have in one
	// file; MaxSitesPerFile the distinct USDT sites of a file (copies of
	// one note are one site) and the locations attached in it. A file
	// over either is left out with a warning naming the setting.
	MaxSitesPerProbe int `mapstructure:"max_sites_per_probe"`
	MaxSitesPerFile  int `mapstructure:"max_sites_per_file"`
	// MaxSitesLater is the engine's room for the sites of files attached
	// after Start (containers of other images, upgrades): 1,544 bytes of
	// kernel memory each, taken at Start. 0 (the default) gives as many
	// as the files read at Start have, at least 1024. A file that does not
	// fit is left out with a warning naming the setting; the sites of a
	// file detached while the receiver runs are not given back.
	MaxSitesLater int `mapstructure:"max_sites_later"`
	// AcceptKernelHazards names kernel hazards the receiver finds at Start
	// and refuses to run into, that the user accepts anyway:
	//   - "uretprobe_seccomp": kernels (x86-64, Linux 6.11 to the seccomp
	//     passthrough of 6.12.14, 6.13.3 and 6.14) on which a kernel return
	//     probe kills a process whose seccomp filter denies the uretprobe
	//     system call, as container runtimes' default profiles may;
	//     accepted, return probes are attached there all the same (right
	//     only if no traced process filters system calls that way).
	//   - "uretprobe_unwind": a kernel return probe (uretprobe:, returns:
	//     uretprobe) on a function an exception may unwind through (it is
	//     in a file that unwinds exceptions, C++ say, and calls other code),
	//     whose return address the probe replaces with a trampoline the
	//     unwinder cannot step through, so that the exception aborts the
	//     program (std::terminate); accepted, such probes are attached
	//     (right only if no exception ever leaves the function).
	//     returns: auto probes those functions' RET instructions either way.
	AcceptKernelHazards []string `mapstructure:"accept_kernel_hazards"`

	// prevent unkeyed literal initialization
	_ struct{}
}

// Defaults of the receiver's settings.
const (
	defaultFlushInterval      = 100 * time.Millisecond
	defaultCollectionInterval = 10 * time.Second
	defaultRingBufferSize     = 8 << 20
	defaultMaxBatchSpans      = 1024
	defaultMaxGoroutines      = 4096
	// maxOverheadBudget and minOverheadBudget bound overhead_budget, in
	// CPUs: below the minimum, the samples that keep a detached probe's
	// rate known would cost more than the budget.
	maxOverheadBudget = 1024
	minOverheadBudget = 0.001
)

// Bounds of the per-file limits.
const (
	minDebuginfoBytes = 1 << 20
	maxDebuginfoBytes = 4 << 30
	maxSitesLimit     = 1 << 20
)

// hazardUretprobeSeccomp is the kernel hazard of return probes in processes
// whose seccomp filter denies the uretprobe system call.
const hazardUretprobeSeccomp = "uretprobe_seccomp"

// hazardUretprobeUnwind is the hazard of kernel return probes on functions
// an exception may unwind through.
const hazardUretprobeUnwind = planner.HazardUretprobeUnwind

// kernelHazards are the names accept_kernel_hazards takes.
var kernelHazards = []string{hazardUretprobeSeccomp, hazardUretprobeUnwind}

func createDefaultConfig() *Config {
	return &Config{
		MaxDebuginfoBytes:    debuginfo.DefaultMaxBytes,
		MaxSitesPerProbe:     planner.DefaultMaxSitesPerProbe,
		MaxSitesPerFile:      planner.DefaultMaxSitesPerFile,
		MetricsBuilderConfig: metadata.DefaultMetricsBuilderConfig(),
		FlushInterval:        defaultFlushInterval,
		CollectionInterval:   defaultCollectionInterval,
		RingBufferSize:       defaultRingBufferSize,
		MaxBatchSpans:        defaultMaxBatchSpans,
		MaxGoroutines:        defaultMaxGoroutines,
		DebugDirectories:     []string{debuginfo.DefaultDebugDir},
	}
}

// Validate reports every problem of the configuration at once.
func (c *Config) Validate() error {
	// A recipe target is validated as the recipe expands it.
	targets, err := recipe.Expand(c.Targets)
	errs := []error{err}
	if err == nil {
		errs = append(errs, config.Validate(targets))
	}
	if c.FlushInterval < time.Millisecond || c.FlushInterval > time.Second {
		errs = append(errs, fmt.Errorf("flush_interval %v: want 1ms to 1s", c.FlushInterval))
	}
	if c.CollectionInterval < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("collection_interval %v: want at least 100ms", c.CollectionInterval))
	}
	page := os.Getpagesize()
	if c.RingBufferSize < page || c.RingBufferSize&(c.RingBufferSize-1) != 0 || c.RingBufferSize > 1<<30 {
		errs = append(errs, fmt.Errorf("ring_buffer_size %d: want a power of two from %d (one page) to 1073741824", c.RingBufferSize, page))
	}
	if c.MaxBatchSpans < 1 || c.MaxBatchSpans > 1<<20 {
		errs = append(errs, fmt.Errorf("max_batch_spans %d: want 1 to 1048576", c.MaxBatchSpans))
	}
	if c.MaxGoroutines < 1 || c.MaxGoroutines > 1<<20 {
		errs = append(errs, fmt.Errorf("max_goroutines %d: want 1 to 1048576", c.MaxGoroutines))
	}
	if b := c.OverheadBudget; math.IsNaN(b) || b < 0 || b > maxOverheadBudget || b > 0 && b < minOverheadBudget {
		errs = append(errs, fmt.Errorf("overhead_budget %v: want 0 (none) or a fraction of a CPU from %v to %d", b, minOverheadBudget, maxOverheadBudget))
	}
	if c.MaxDebuginfoBytes < minDebuginfoBytes || c.MaxDebuginfoBytes > maxDebuginfoBytes {
		errs = append(errs, fmt.Errorf("max_debuginfo_bytes %d: want %d (1 MiB) to %d (4 GiB)", c.MaxDebuginfoBytes, minDebuginfoBytes, int64(maxDebuginfoBytes)))
	}
	if c.MaxSitesPerProbe < 1 || c.MaxSitesPerProbe > maxSitesLimit {
		errs = append(errs, fmt.Errorf("max_sites_per_probe %d: want 1 to %d", c.MaxSitesPerProbe, maxSitesLimit))
	}
	if c.MaxSitesPerFile < 1 || c.MaxSitesPerFile > maxSitesLimit {
		errs = append(errs, fmt.Errorf("max_sites_per_file %d: want 1 to %d", c.MaxSitesPerFile, maxSitesLimit))
	}
	if c.MaxSitesLater < 0 || c.MaxSitesLater > maxSitesLimit {
		errs = append(errs, fmt.Errorf("max_sites_later %d: want 0 (automatic) to %d", c.MaxSitesLater, maxSitesLimit))
	}
	for i, h := range c.AcceptKernelHazards {
		if !slices.Contains(kernelHazards, h) {
			errs = append(errs, fmt.Errorf("accept_kernel_hazards[%d] %q: not a kernel hazard the receiver knows (%s)", i, h, strings.Join(kernelHazards, ", ")))
		}
	}
	for i, d := range c.DebugDirectories {
		if !filepath.IsAbs(d) {
			errs = append(errs, fmt.Errorf("debug_directories[%d] %q must be absolute", i, d))
		}
	}
	return errors.Join(errs...)
}
