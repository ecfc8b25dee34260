// Package config declares what users write under targets: in the receiver's
// collector configuration, parses probe references (usdt:PROVIDER:NAME,
// uprobe:SYMBOL[+OFFSET], uretprobe:SYMBOL, ret:SYMBOL, line:FILE:LINE) and
// checks everything that can be checked without reading the traced files
// (fetch expressions, $name paths, function patterns), reporting every
// problem at once. It is pure Go: no ELF files are opened and no kernel is
// touched.
package config

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/glob"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
)

// Target is one traced ELF file (an executable or a shared library) and the
// spans and counters to take from it.
type Target struct {
	// Path is the traced file: an absolute path, as the traced processes
	// see it (inside their containers too), or a bare name: an executable
	// found through PATH, a library through /etc/ld.so.cache and the
	// default library directories ("libc", "libc.so.6", "libpthread").
	Path string `mapstructure:"path"`
	// PID restricts the probes to one process; 0 traces every process that
	// maps the file, now and later.
	PID int `mapstructure:"pid"`
	// Process chooses the processes to trace by what they run, now and
	// later (nil: every process that maps the file).
	Process *procfs.Selector `mapstructure:"process"`
	// Optional lets the file be missing at Start: it is attached when a
	// process maps it (a DaemonSet that starts before the application).
	Optional bool `mapstructure:"optional"`
	// BuildID, when set, is the GNU build id (hex) the file must have:
	// a file with another build id is not attached.
	BuildID string `mapstructure:"build_id"`
	// ServiceName is the service.name resource attribute; it defaults to the
	// base name of Path. Like every name that becomes telemetry, it is at
	// most MaxNameBytes of printable UTF-8.
	ServiceName string `mapstructure:"service_name"`
	// Spans are the entry/exit pairs that become spans.
	Spans []Span `mapstructure:"spans"`
	// Counters are probes that are only counted: a probe reference, or a
	// map with a filter and a value histogram (see Counter).
	Counters []Counter `mapstructure:"counters"`
	// Recipe names an embedded recipe (package recipe): the target takes
	// the recipe's spans and counters, and its path when Path is empty,
	// before its own. A target with a recipe must be expanded (recipe.Expand)
	// before it is validated or planned.
	Recipe string `mapstructure:"recipe"`
	// RecipeOptions are the recipe's options, by name: each recipe says
	// which it has, their types and defaults.
	RecipeOptions map[string]any `mapstructure:"recipe_options"`
	// FromRecipe is what expanding Recipe told the planner: where the
	// recipe's usual file is, and what to say of a probe the file lacks.
	// Nil for a target written without a recipe; never configuration.
	FromRecipe *RecipeFacts `mapstructure:"-"`
	// ThreadContext says whether the target's spans join the trace the
	// traced thread published as its active span (OTEP 4947: an SDK's
	// otel_thread_ctx_v1), and with which of its attributes; nil is the
	// default (enabled, ids only).
	ThreadContext *ThreadContext `mapstructure:"thread_context"`
}

// ThreadContext configures reading the OpenTelemetry thread context
// (OTEP 4947) a traced thread publishes.
type ThreadContext struct {
	// Enabled makes a span that opens while its thread has no other span
	// of the receiver open read the thread's published context and, when
	// it holds a valid one, join that trace under that span (default true).
	Enabled *bool `mapstructure:"enabled"`
	// Attributes also takes the context's attributes (its attrs-data,
	// named through the process context's threadlocal.attribute_key_map,
	// OTEP 4719) onto the span that joins the trace: at most 16, from at
	// most 128 bytes of attrs-data (default false: the ids only).
	Attributes bool `mapstructure:"attributes"`
}

// ThreadContextEnabled says whether the target's spans read the thread
// context (thread_context.enabled, true by default).
func (t Target) ThreadContextEnabled() bool {
	return t.ThreadContext == nil || t.ThreadContext.Enabled == nil || *t.ThreadContext.Enabled
}

// ThreadContextAttributes says whether the target's spans take the thread
// context's attributes (thread_context.attributes).
func (t Target) ThreadContextAttributes() bool {
	return t.ThreadContextEnabled() && t.ThreadContext != nil && t.ThreadContext.Attributes
}

// Span defines one kind of span: where it opens, where it closes, and what
// to capture at each end.
type Span struct {
	// Name is the span name. A Function span defaults to the function's
	// name; for a Function pattern, Name is a prefix of each matched
	// function's name ("app." gives "app.handle_get").
	Name string `mapstructure:"name"`
	// Entry is the probe that opens the span (usdt: or uprobe:).
	Entry string `mapstructure:"entry"`
	// Exit is the probe that closes it (usdt:, uretprobe: or uprobe:).
	Exit string `mapstructure:"exit"`
	// Function is shorthand for entry uprobe:FUNCTION and an exit where
	// FUNCTION returns (see Returns). It may be a pattern (a glob, see
	// FunctionIsPattern): every matched function gets a span definition of
	// its own, named after it.
	Function string `mapstructure:"function"`
	// SourceFile restricts Function to the functions whose compile unit
	// (or declaration file) path matches this glob, read from the DWARF,
	// as a path suffix of whole components (glob.MatchPath):
	// "*/server/*.c", "libio/fileops.c" or "net/http" (a Go package). It
	// makes Function a pattern.
	SourceFile string `mapstructure:"source_file"`
	// MaxFunctions bounds the functions a Function pattern may match; a
	// pattern matching more is refused with the count. 0 means
	// DefaultMaxFunctions.
	MaxFunctions int `mapstructure:"max_functions"`
	// Returns says how a Function span's exit is probed: "uretprobe" (the
	// kernel's return probe: cheap, but the kernel reports at most 64
	// nested returns per thread, and an exception unwinding through it
	// aborts the program), "ret" (every RET instruction: any depth, safe
	// for exceptions, but single-stepped, about 9 µs per return against
	// 0.4 µs), or "auto" (default): "ret" for a function that calls itself
	// or that an exception may unwind through (in a C++ file, one that
	// calls other code), "uretprobe" otherwise. "uretprobe" on a function
	// an exception may unwind through is refused unless
	// accept_kernel_hazards has "uretprobe_unwind".
	Returns string `mapstructure:"returns"`
	// Attributes maps attribute keys to fetch expressions evaluated at entry.
	Attributes map[string]string `mapstructure:"attributes"`
	// ExitAttributes maps attribute keys to fetch expressions evaluated at exit.
	ExitAttributes map[string]string `mapstructure:"exit_attributes"`
	// MinDuration drops spans shorter than this in the kernel, before they
	// cost a ring-buffer record; they still count in the metrics.
	MinDuration time.Duration `mapstructure:"min_duration"`
	// SampleRatio is the share of traces this span records when it is the
	// outermost open span on its thread (head sampling in the kernel, 0 to
	// 1, default 1); spans nested under it follow its decision. With a
	// traces pipeline, uprobe.span.duration (like a span's metric) counts
	// the spans recorded only: a call left out counts in the probe's hits
	// and as dropped (unsampled), and where the kernel has session uprobes
	// (Linux 6.12, x86-64) its return is not probed at all. Without one,
	// nothing is sampled out of the metrics.
	SampleRatio *float64 `mapstructure:"sample_ratio"`
	// Kind is the span kind: internal (default), server, client, producer
	// or consumer.
	Kind string `mapstructure:"kind"`
	// TraceContext names a captured string attribute (entry or exit) that
	// carries a W3C traceparent, as the whole value or inside it (e.g. a
	// sqlcommenter comment): the span joins that trace under that parent,
	// and spans nested in it on the thread join the trace too.
	TraceContext string `mapstructure:"trace_context"`
	// TraceID and ParentSpanID are a binary carrier: expressions fetched at
	// entry giving the raw ids (bytes[16] and bytes[8]) or their hex text.
	TraceID      string `mapstructure:"trace_id"`
	ParentSpanID string `mapstructure:"parent_span_id"`
	// StatusError marks the span as an error when a value fetched at exit
	// compares true, e.g. "retval:s64 < 0".
	StatusError string `mapstructure:"status_error"`
	// Filter are conditions (see ParseCondition) evaluated in the kernel at
	// the span's entry, before anything is copied: when one does not hold,
	// the call is neither recorded nor counted in the duration histogram.
	// The entry probe's hit counter still counts it. In YAML, one
	// condition or a list.
	Filter []string `mapstructure:"filter"`
	// ExitFilter are conditions evaluated at the span's exit (retval,
	// $return and exit-side values), with the same effect.
	ExitFilter []string `mapstructure:"exit_filter"`
	// ErrorExit is a second probe that closes the span, marking it an
	// error: a transaction's abort beside its commit (exit). Its exit
	// attributes and exit_filter are read there as at Exit.
	ErrorExit string `mapstructure:"error_exit"`
	// ConstantAttributes are attributes with the same value on every span
	// of the definition (db.system.name: postgresql).
	ConstantAttributes map[string]string `mapstructure:"constant_attributes"`
	// ValueNames name the values of integer attributes, by attribute key
	// and value (in YAML, {0: end of minor GC}): the attribute is the
	// name; a value without one stays its number, in text; a value named
	// "" leaves the attribute out (error.type on success).
	ValueNames map[string]map[string]string `mapstructure:"value_names"`
	// FirstWord adds, by key, an attribute holding the first word (letters,
	// digits and underscores, after blanks and /* comments */) of another
	// string attribute: db.operation.name from db.query.text.
	FirstWord map[string]string `mapstructure:"first_word"`
	// Truncate cuts string or bytes attributes, by key, to the length an
	// integer attribute of the span holds (the byte count of a buffer
	// captured with a fixed bound); negative lengths cut to nothing.
	Truncate map[string]string `mapstructure:"truncate"`
	// Metric, when set, makes a histogram of the span's durations, in
	// seconds, under a metric name of its own with some of the span's
	// attributes (jvm.gc.duration by jvm.gc.name and jvm.gc.action),
	// built from the spans the engine records (see SpanMetric).
	Metric *SpanMetric `mapstructure:"metric"`
}

// DefaultMaxFunctions is the default of Span.MaxFunctions.
const DefaultMaxFunctions = 1000

// FunctionIsPattern reports whether a function: value is a glob rather than
// a name: it holds "*", "?" or "[" (a "*" right after "(" is literal, as in
// Go's "main.(*Server).Handle", and "\" escapes; see glob.Glob). The
// resolver still takes a pattern that is exactly a symbol of the file as
// that symbol.
func FunctionIsPattern(name string) bool {
	g, err := glob.Compile(name)
	return err != nil || !g.Literal()
}

// IsPattern reports whether the span is expanded into one span definition
// per matched function: its Function is a pattern, or SourceFile is set.
func (s Span) IsPattern() bool {
	return s.Function != "" && (s.SourceFile != "" || FunctionIsPattern(s.Function))
}

// FunctionLimit returns MaxFunctions, or DefaultMaxFunctions when it is 0.
func (s Span) FunctionLimit() int {
	if s.MaxFunctions == 0 {
		return DefaultMaxFunctions
	}
	return s.MaxFunctions
}

// SpanName returns the name of the span's spans: Name, or Function when
// Name is empty; for a pattern, the name of one matched function prefixed
// with Name.
func (s Span) SpanName(function string) string {
	if s.IsPattern() {
		return s.Name + function
	}
	if s.Name == "" {
		return s.Function
	}
	return s.Name
}

// Ratio returns SampleRatio, or 1 when it is not set.
func (s Span) Ratio() float64 {
	if s.SampleRatio == nil {
		return 1
	}
	return *s.SampleRatio
}

// ServiceNameOrDefault returns ServiceName, or the base name of Path when it is empty.
func (t Target) ServiceNameOrDefault() string {
	if t.ServiceName != "" {
		return t.ServiceName
	}
	return filepath.Base(t.Path)
}

// Probes returns the entry and exit references of the span, with Function
// expanded: its exit is uretprobe:FUNCTION, or ret:FUNCTION with Returns
// "ret" (the resolver may choose ret: for "auto", see Returns).
func (s Span) Probes() (entry, exit string) {
	if s.Function != "" {
		if s.Returns == ReturnsRet {
			return "uprobe:" + s.Function, "ret:" + s.Function
		}
		return "uprobe:" + s.Function, "uretprobe:" + s.Function
	}
	return s.Entry, s.Exit
}

// The values of Span.Returns.
const (
	ReturnsAuto      = "auto"
	ReturnsUretprobe = "uretprobe"
	ReturnsRet       = "ret"
)

// Attribute is one captured value of a span: its key and parsed expression.
type Attribute struct {
	Key  string
	Expr fetch.Expr
}

// SortedAttributes parses the expressions of m and returns them sorted by key,
// the order in which they are fetched and stored.
func SortedAttributes(m map[string]string) ([]Attribute, error) {
	keys := sortedKeys(m)
	out := make([]Attribute, 0, len(keys))
	var errs []error
	for _, k := range keys {
		e, err := fetch.Parse(m[k])
		if err != nil {
			errs = append(errs, fmt.Errorf("attribute %q: %w", k, err))
			continue
		}
		out = append(out, Attribute{Key: k, Expr: e})
	}
	return out, errors.Join(errs...)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ReservedAttributes are the attribute keys the receiver sets itself, with
// why: a span attribute may not take one of these names.
var ReservedAttributes = map[string]string{
	"thread.id":                       "the receiver sets it on every span to the thread the span ended on",
	"service.name":                    "it is a resource attribute the receiver sets (service_name:)",
	"process.pid":                     "it is a resource attribute the receiver sets",
	"process.executable.path":         "it is a resource attribute the receiver sets",
	"process.executable.build_id.gnu": "it is a resource attribute the receiver sets",
	"process.executable.build_id.go":  "it is a resource attribute the receiver sets",
	"host.name":                       "it is a resource attribute the receiver sets",
	"container.id":                    "it is a resource attribute the receiver sets",
}

// role says at which end of a span an expression is evaluated.
type role uint8

const (
	atEntry role = iota
	atExit
)

// Validate checks every target and returns all problems joined, each prefixed
// with where it is (targets[0].spans[1].attributes["key"]: …).
func Validate(targets []Target) error {
	if len(targets) == 0 {
		return errors.New("targets: at least one target is required")
	}
	var errs []error
	chosen, histograms := 0, 0
	for i, t := range targets {
		where := fmt.Sprintf("targets[%d]", i)
		if t.Recipe != "" {
			where += fmt.Sprintf(" (recipe %s)", t.Recipe)
			if t.FromRecipe == nil {
				errs = append(errs, fmt.Errorf("%s: recipe %q is not expanded (recipe.Expand)", where, t.Recipe))
				continue
			}
		}
		if t.Recipe == "" && len(t.RecipeOptions) > 0 {
			errs = append(errs, fmt.Errorf("%s: recipe_options without recipe: they set the options of a recipe (recipe: NAME)", where))
		}
		errs = append(errs, t.validate(where)...)
		// Limits of the engine that the configuration alone decides,
		// said here rather than at Start after every file was read; the
		// sentences are the resolver's.
		if t.PID != 0 || t.Process != nil {
			if chosen == bpfobj.MaxChosenTargets {
				errs = append(errs, fmt.Errorf("targets[%d]: more than %d targets choose their processes (pid: or process:)", i, bpfobj.MaxChosenTargets))
			}
			chosen++
		}
		for j, c := range t.Counters {
			if c.Histogram == "" {
				continue
			}
			if histograms == MaxHistograms {
				errs = append(errs, fmt.Errorf("targets[%d].counters[%d]: more than %d counters have a histogram", i, j, MaxHistograms))
			}
			histograms++
		}
	}
	return errors.Join(errs...)
}

// MaxHistograms bounds the counters with a histogram of a configuration:
// the engine's site spec holds 1 + a histogram's index in 16 bits.
const MaxHistograms = math.MaxUint16

// ConditionsAtOneLocation is the sentence of the engine's limit on the
// conditions evaluated at one location (bpfobj.MaxFilters): a probe that
// opens a span and closes another evaluates both spans' conditions.
func ConditionsAtOneLocation(n int) string {
	return fmt.Sprintf("%d conditions at one location (its spans' filter and exit_filter, or its counter's), at most %d", n, bpfobj.MaxFilters)
}

func (t Target) validate(where string) []error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(where+": "+format, args...))
	}
	switch {
	case t.Path == "":
		add("path is required")
	case len(t.Path) > MaxPathBytes:
		add("path is %d bytes, at most %d (PATH_MAX)", len(t.Path), MaxPathBytes)
	case strings.ContainsRune(t.Path, '/') && !filepath.IsAbs(t.Path):
		add("path %q must be absolute, or a bare name (an executable in PATH, a library such as libc)", t.Path)
	case strings.ContainsAny(t.Path, "\x00\n"):
		add("path %q has a NUL or newline", t.Path)
	}
	switch {
	case t.ServiceName != "":
		if err := checkTelemetryName("service_name", t.ServiceName, MaxNameBytes); err != nil {
			add("%v", err)
		}
	case t.Path != "" && len(t.Path) <= MaxPathBytes:
		if err := checkTelemetryName("service_name (the base name of path by default)", t.ServiceNameOrDefault(), MaxNameBytes); err != nil {
			add("%v", err)
		}
	}
	if t.PID < 0 {
		add("pid %d must be 0 (every process) or a process id", t.PID)
	}
	if t.Process != nil {
		if t.PID != 0 {
			add("pid and process are exclusive: one process, or the processes a selector chooses")
		}
		if _, err := t.Process.Compile(); err != nil {
			add("process: %v", err)
		}
	}
	if t.BuildID != "" {
		if _, err := hex.DecodeString(t.BuildID); err != nil || len(t.BuildID) < 8 {
			add("build_id %q: want the hex GNU build id (readelf -n FILE)", t.BuildID)
		}
	}
	if len(t.Spans) == 0 && len(t.Counters) == 0 {
		add("nothing to trace: add spans or counters")
	}
	if tc := t.ThreadContext; tc != nil && tc.Attributes && !t.ThreadContextEnabled() {
		add("thread_context: attributes: true needs enabled: true (attributes come with the context)")
	}

	names := map[string]int{}
	entries := map[string]string{} // canonical probe → span name
	exits := map[string]string{}
	// The conditions a probe evaluates: those of the span it opens
	// (filter) and of the span it closes (exit_filter).
	entryConds, exitConds := map[string]int{}, map[string]int{}
	for i, s := range t.Spans {
		sw := fmt.Sprintf("%s.spans[%d]", where, i)
		if name := s.SpanName(""); name != "" && !s.IsPattern() {
			if j, dup := names[name]; dup {
				errs = append(errs, fmt.Errorf("%s: duplicate span name %q (also spans[%d])", sw, name, j))
			} else {
				names[name] = i
			}
		}
		entry, exit, serrs := s.validate(sw)
		errs = append(errs, serrs...)
		if entry != "" {
			if other, dup := entries[entry]; dup {
				errs = append(errs, fmt.Errorf("%s: probe %s already opens span %q", sw, entry, other))
			}
			entries[entry] = s.SpanName("")
			entryConds[entry] = len(SplitConditions(s.Filter))
			if _, shared := exits[entry]; shared && entryConds[entry]+exitConds[entry] > bpfobj.MaxFilters {
				n := entryConds[entry] + exitConds[entry]
				errs = append(errs, fmt.Errorf("%s: probe %s: %s", sw, entry, ConditionsAtOneLocation(n)))
			}
		}
		// The error exit closes the span as its exit does.
		for _, exit := range []string{exit, s.errorExitKey()} {
			if exit == "" {
				continue
			}
			if other, dup := exits[exit]; dup {
				errs = append(errs, fmt.Errorf("%s: probe %s already closes span %q", sw, exit, other))
			}
			exits[exit] = s.SpanName("")
			exitConds[exit] = len(SplitConditions(s.ExitFilter))
			if _, shared := entries[exit]; shared && entryConds[exit]+exitConds[exit] > bpfobj.MaxFilters {
				n := entryConds[exit] + exitConds[exit]
				errs = append(errs, fmt.Errorf("%s: probe %s: %s", sw, exit, ConditionsAtOneLocation(n)))
			}
		}
	}

	counters := map[string]int{}
	for i, c := range t.Counters {
		cw := fmt.Sprintf("%s.counters[%d]", where, i)
		key, cerrs := c.validate(cw)
		errs = append(errs, cerrs...)
		if key == "" {
			continue
		}
		if j, dup := counters[key]; dup {
			hint := ""
			if c.Histogram != "" {
				hint = fmt.Sprintf(": one counter per probe and filter; put histogram: on counters[%d]", j)
			}
			errs = append(errs, fmt.Errorf("%s: probe %s is already counted (counters[%d])%s", cw, key, j, hint))
			continue
		}
		counters[key] = i
	}
	return errs
}

// validate checks one counter and returns the key that tells counters
// apart (its probe and conditions, canonical) when its probe parses.
func (c Counter) validate(where string) (key string, errs []error) {
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(where+": "+format, args...))
	}
	if c.Probe == "" {
		add("probe is required")
		return "", errs
	}
	p, err := ParseProbe(c.Probe)
	if err != nil {
		add("%v", err)
		return "", errs
	}
	if err := checkTelemetryName("probe.name (the probe and its filter)", c.Ref(), MaxProbeRefBytes); err != nil {
		add("%v", err)
	}
	// A counter reads its values where its probe fires: at a return
	// probe, that is the return.
	r := atEntry
	if p.Returns() {
		r = atExit
	}
	key = p.String()
	conds, ferrs := checkConditions("filter", c.Filter, r, p, true, true)
	errs = append(errs, prefixed(where, ferrs)...)
	if len(ferrs) > 0 {
		key = "" // which counter it is, is unclear
	}
	if n := len(SplitConditions(c.Filter)); n > bpfobj.MaxFilters {
		add("filter: %d conditions, at most %d", n, bpfobj.MaxFilters)
	}
	for i, cond := range conds {
		if key == "" {
			break
		}
		if i == 0 {
			key += " if "
		} else {
			key += " && "
		}
		key += cond.String()
	}
	if c.Metric != nil {
		errs = append(errs, prefixed(where, c.Metric.validate())...)
	}
	if c.Histogram != "" {
		e, err := fetch.Parse(c.Histogram)
		nameErr := checkTelemetryName("histogram (probe.value)", c.Histogram, MaxProbeRefBytes)
		switch {
		case nameErr != nil:
			add("%v", nameErr)
		case err != nil:
			add("histogram: %v", err)
		case e.Typed && !e.Type.IsInteger():
			add("histogram %q: %s is not an integer type; a histogram records integers", c.Histogram, e.Type)
		case e.Root == fetch.RootName && strings.HasPrefix(e.Path, "$$"):
			add("histogram %q: $$params stands for several values, a histogram records one", c.Histogram)
		default:
			if err := checkExpr(e, r, p, true); err != nil {
				add("histogram: %v", advise(err, e, r, p, true))
			}
		}
	}
	return key, errs
}

// checkConditions parses the conditions of a filter evaluated at end r of
// probe p, reporting every problem (prefixed with field).
func checkConditions(field string, list []string, r role, p ProbeRef, pOK, counter bool) ([]Condition, []error) {
	var out []Condition
	var errs []error
	for i, item := range list {
		for _, s := range SplitConditions([]string{item}) {
			c, err := ParseCondition(s)
			if err == nil {
				if err = checkExpr(c.Expr, r, p, pOK); err != nil {
					err = fmt.Errorf("condition %q: %w", s, advise(err, c.Expr, r, p, counter))
				} else if c.Expr.Typed {
					// A declared type is known now; others when the file is read.
					if err = c.CheckType(c.Expr.Type); err != nil {
						err = fmt.Errorf("condition %q: %w", s, err)
					}
				}
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s[%d]: %w", field, i, err)) // the item as written
				continue
			}
			out = append(out, c)
		}
	}
	return out, errs
}

// advise replaces the advice of err, about expression e read at end r of
// probe p, with what a filter (counter unset) or a counter can do instead.
func advise(err error, e fetch.Expr, r role, p ProbeRef, counter bool) error {
	returned := e.Root == fetch.RootRetval || e.Root == fetch.RootName && e.Path == "$return"
	gone := e.Root == fetch.RootArg && p.Returns()
	switch {
	case counter && returned && p.Symbol != "":
		return fmt.Errorf("%q: the return value is only known at a return: count at uretprobe:%s", e.Text, p.Symbol)
	case counter && gone:
		return fmt.Errorf("%q: arguments are gone when a function returns: count at uprobe:%s", e.Text, p.Symbol)
	case !counter && r == atEntry && returned:
		return fmt.Errorf("%w: put it in exit_filter", err)
	case !counter && gone:
		return fmt.Errorf("%q: arguments are gone when a function returns: compare arg%d in filter (at entry)", e.Text, e.Arg)
	}
	return err
}

// prefixed puts where before each error.
func prefixed(where string, errs []error) []error {
	for i, err := range errs {
		errs[i] = fmt.Errorf("%s.%w", where, err)
	}
	return errs
}

// validate checks one span and returns the canonical entry and exit
// references when they parse.
func (s Span) validate(where string) (entry, exit string, errs []error) {
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(where+": "+format, args...))
	}
	if s.Name == "" && s.Function == "" {
		add("name is required")
	}
	if s.Name != "" {
		if err := checkTelemetryName("name", s.Name, MaxNameBytes); err != nil {
			add("%v", err)
		}
	}
	pattern := s.IsPattern()
	var entryProbe, exitProbe ProbeRef
	var entryOK, exitOK bool
	switch {
	case s.Function != "" && (s.Entry != "" || s.Exit != ""):
		add("function and entry/exit are exclusive: use one or the other")
	case len(s.Function) > MaxProbeRefBytes:
		add("function is %d bytes, at most %d", len(s.Function), MaxProbeRefBytes)
	case s.Function != "":
		if err := checkSymbol(s.Function); err != nil {
			add("function: %v", err)
		} else if strings.Contains(s.Function, "+") {
			add("function: %q: a function name takes no offset; use entry: uprobe:SYMBOL+OFFSET with an exit", s.Function)
		} else if pattern {
			if _, err := glob.Compile(s.Function); err != nil {
				add("function: %v", err)
			}
		}
		entryProbe = ProbeRef{Kind: KindUprobe, Symbol: s.Function}
		exitProbe = ProbeRef{Kind: KindUretprobe, Symbol: s.Function}
		if s.Returns == ReturnsRet {
			exitProbe.Kind = KindRet
		}
		entryOK, exitOK = true, true
	case s.Entry == "" && s.Exit != "":
		add("exit without entry: add entry (usdt:… or uprobe:…)")
	case s.Entry == "":
		add("entry and exit (or function) are required")
	case s.Exit == "":
		add("entry without exit: add exit (usdt:… or uretprobe:…), or use function: for a whole function")
	}
	if s.Function == "" && s.Entry != "" {
		p, err := ParseProbe(s.Entry)
		switch {
		case err != nil:
			add("entry: %v", err)
		case p.Returns():
			add("entry: %s is a return probe; a span opens at usdt: or uprobe:", p)
		default:
			entryProbe, entryOK = p, true
		}
	}
	if s.Function == "" && s.Exit != "" {
		p, err := ParseProbe(s.Exit)
		if err != nil {
			add("exit: %v", err)
		} else {
			exitProbe, exitOK = p, true
		}
	}
	if s.SourceFile != "" {
		if s.Function == "" {
			add("source_file: only a function: span selects functions by source file")
		} else if err := checkName(s.SourceFile); err != nil {
			add("source_file: %v", err)
		} else if _, err := glob.Compile(s.SourceFile); err != nil {
			add("source_file: %v", err)
		}
	}
	switch {
	case s.MaxFunctions < 0:
		add("max_functions %d must not be negative (0 means %d)", s.MaxFunctions, DefaultMaxFunctions)
	case s.MaxFunctions > 0 && !pattern:
		add("max_functions: only a function pattern (a glob, or source_file:) matches several functions")
	}
	switch {
	case s.Returns == "" || s.Returns == ReturnsAuto || s.Returns == ReturnsUretprobe || s.Returns == ReturnsRet:
		if s.Returns != "" && s.Function == "" {
			add("returns: only a function: span chooses how its return is probed; with exit:, write uretprobe:SYMBOL or ret:SYMBOL")
		}
	default:
		add("returns %q: want auto, uretprobe or ret", s.Returns)
	}
	if s.MinDuration < 0 {
		add("min_duration %v must not be negative", s.MinDuration)
	}
	if r := s.Ratio(); r < 0 || r > 1 || r != r {
		add("sample_ratio %v must be between 0 and 1", r)
	}
	if entryOK && exitOK && entryProbe.String() == exitProbe.String() {
		add("entry and exit are the same probe %s", entryProbe)
	}

	entryFetches, exitFetches := s.Fetches()
	checkAttrs := func(field string, m map[string]string, r role, p ProbeRef, pOK bool) {
		if n := map[role]int{atEntry: entryFetches, atExit: exitFetches}[r]; n > bpfobj.MaxFetches {
			add("%s: %d values to fetch, at most %d per span end (carrier ids and status_error count too)", field, n, bpfobj.MaxFetches)
		}
		for _, k := range sortedKeys(m) {
			at := fmt.Sprintf("%s.%s[%s]", where, field, quoteShort(k))
			if k == "" {
				errs = append(errs, fmt.Errorf("%s: empty attribute key", at))
			} else if err := checkTelemetryName("the key", k, MaxNameBytes); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", at, err))
			}
			if why, ok := ReservedAttributes[k]; ok {
				errs = append(errs, fmt.Errorf("%s: %q is reserved: %s; choose another key", at, k, why))
			}
			e, err := fetch.Parse(m[k])
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", at, err))
				continue
			}
			if err := checkExpr(e, r, p, pOK); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", at, err))
			}
		}
	}
	checkAttrs("attributes", s.Attributes, atEntry, entryProbe, entryOK)
	checkAttrs("exit_attributes", s.ExitAttributes, atExit, exitProbe, exitOK)
	for _, k := range sortedKeys(s.ExitAttributes) {
		if _, dup := s.Attributes[k]; dup {
			errs = append(errs, fmt.Errorf("%s.exit_attributes[%q]: key is also in attributes", where, k))
		}
	}
	errs = append(errs, s.checkAdded(where, entryProbe, exitProbe, entryOK, exitOK, pattern)...)
	for _, err := range s.checkContext(exitProbe, exitOK) {
		errs = append(errs, fmt.Errorf("%s: %w", where, err))
	}
	_, ferrs := checkConditions("filter", s.Filter, atEntry, entryProbe, entryOK, false)
	_, xerrs := checkConditions("exit_filter", s.ExitFilter, atExit, exitProbe, exitOK, false)
	errs = append(errs, prefixed(where, append(ferrs, xerrs...))...)
	if n := len(SplitConditions(s.Filter)) + len(SplitConditions(s.ExitFilter)); n > bpfobj.MaxFilters {
		add("filter and exit_filter: %d conditions, at most %d together", n, bpfobj.MaxFilters)
	}
	if entryOK && !pattern {
		entry = entryProbe.String()
	}
	if exitOK && !pattern {
		exit = exitProbe.String()
	}
	return entry, exit, errs
}

// checkExpr checks what can be checked of one expression before the traced
// file is read: where retval, argN and $return make sense, the grammar of a
// $name path, and the engine's limits.
func checkExpr(e fetch.Expr, r role, p ProbeRef, pOK bool) error {
	if e.Root == fetch.RootName {
		if err := checkName(e.Path); err != nil {
			return fmt.Errorf("%q: %w", e.Text, err)
		}
		path, err := fetch.ParsePath(e.Path)
		if err != nil {
			return err
		}
		switch path.Kind {
		case fetch.PathParams:
			if e.Typed {
				return fmt.Errorf("%q: $$params takes no type: each parameter gets the default of its own type", e.Text)
			}
		case fetch.PathReturn:
			if r == atEntry {
				return fmt.Errorf("%q: $return is only known at exit", e.Text)
			}
			if pOK && !p.Returns() {
				return fmt.Errorf("%q: $return needs a uretprobe:, ret: or function: exit (this exit is %s)", e.Text, p)
			}
		}
		return checkLen(e)
	}
	if e.Root == fetch.RootRetval {
		if r == atEntry {
			return fmt.Errorf("%q: retval is only known at exit", e.Text)
		}
		if pOK && !p.Returns() {
			return fmt.Errorf("%q: retval needs a uretprobe: or ret: exit (this exit is %s)", e.Text, p)
		}
	}
	if e.Root == fetch.RootArg && pOK {
		switch {
		case p.Returns():
			return fmt.Errorf("%q: arguments are gone when a function returns; capture arg%d in attributes (at entry)", e.Text, e.Arg)
		case (p.Kind == KindUprobe && p.Offset != 0 || p.Kind == KindLine) && e.Arg >= 6:
			return fmt.Errorf("%q: stack argument arg%d is only known at the function's first instruction", e.Text, e.Arg)
		}
	}
	// A USDT argument in memory costs one more dereference; the resolver
	// checks that once it has read the argument specs.
	if len(e.Derefs) > bpfobj.MaxDerefs {
		return fmt.Errorf("%q: %d dereferences, at most %d", e.Text, len(e.Derefs), bpfobj.MaxDerefs)
	}
	return checkLen(e)
}

// checkLen checks a string or bytes type against the engine's capture limit.
func checkLen(e fetch.Expr) error {
	if (e.Type.Kind == fetch.KindString || e.Type.Kind == fetch.KindGoString || e.Type.Kind == fetch.KindBytes) && int(e.Type.MaxLen) > bpfobj.StringMax {
		return fmt.Errorf("%q: %s is longer than the %d-byte capture limit", e.Text, e.Type, bpfobj.StringMax)
	}
	return nil
}
