package config

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
)

// RecipeFacts is what expanding a target's recipe tells the planner
// besides spans and counters.
type RecipeFacts struct {
	// Search are absolute path globs where the recipe's usual file lives
	// when the target's path is a name that PATH and the library cache do
	// not know (Debian's /usr/lib/postgresql/*/bin/postgres).
	Search []string
	// Lacking say why a file lacks the recipe's probes.
	Lacking []Lack
	// Program is what the recipe's file must be: "go" for a Go program
	// (the recipe reads Go's types and Go's register ABI), "" for any
	// file with its probes.
	Program string `json:",omitempty"`
}

// Lack is what a recipe says of a file that lacks a probe it needs.
type Lack struct {
	// Probes is a glob on canonical probe references ("usdt:postgresql:*",
	// "uprobe:SSL_*"): the sentence is said of a missing probe it matches
	// when the file has none of the probes it matches.
	Probes string
	// Sentence says why: "this postgres has no USDT probes: it was built
	// without --enable-dtrace".
	Sentence string
}

// SpanMetric is a histogram of a span definition's durations under a
// name of its own, in seconds, by some of its spans' attributes. Unlike
// uprobe.span.duration, which the kernel counts, it is built from the
// span records the engine delivers: spans dropped before they are built
// (ring buffer full, sample_ratio, min_duration) are not in it.
type SpanMetric struct {
	// Name is the metric's name (jvm.gc.duration).
	Name string `mapstructure:"name"`
	// Description is the metric's description.
	Description string `mapstructure:"description"`
	// Attributes are keys of the span's attributes (captured, constant or
	// derived) that the metric's points carry; a span without one of them
	// counts without it.
	Attributes []string `mapstructure:"attributes"`
}

// CounterMetric is a sum of a counter's hits under a name of its own,
// counted in the kernel like uprobe.probe.hits.
type CounterMetric struct {
	// Name is the metric's name (jvm.class.loaded).
	Name string `mapstructure:"name"`
	// Unit is its unit ("{class}"); "1" when empty.
	Unit string `mapstructure:"unit"`
	// Description is the metric's description.
	Description string `mapstructure:"description"`
	// Attributes are constant attributes of its points
	// (cpython.gc.generation: 2 for a counter filtered on generation 2):
	// strings, integers or booleans, as written.
	Attributes map[string]any `mapstructure:"attributes"`
}

// MaxMetricAttributes bounds the attributes of a span's or a counter's
// metric.
const MaxMetricAttributes = 8

// errorExitKey returns the canonical reference of the span's error exit,
// "" when it has none or it does not parse.
func (s Span) errorExitKey() string {
	if s.ErrorExit == "" {
		return ""
	}
	p, err := ParseProbe(s.ErrorExit)
	if err != nil {
		return ""
	}
	return p.String()
}

// ErrorExitRef returns the error exit's reference as the planner places
// it: for a function span, as its exit is.
func (s Span) ErrorExitRef() string { return s.ErrorExit }

// ParseValueNames parses the value names of one attribute.
func ParseValueNames(names map[string]string) ([]fetch.Enumerator, error) {
	out := make([]fetch.Enumerator, 0, len(names))
	for k, name := range names {
		v, err := strconv.ParseInt(strings.TrimSpace(k), 0, 64)
		if err != nil {
			return nil, fmt.Errorf("value %q is not an integer", k)
		}
		if err := checkTelemetryName("name", name, MaxNameBytes); err != nil {
			return nil, fmt.Errorf("value %d: %w", v, err)
		}
		out = append(out, fetch.Enumerator{Name: name, Value: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Value < out[j].Value })
	for i := 1; i < len(out); i++ {
		if out[i].Value == out[i-1].Value {
			return nil, fmt.Errorf("value %d is named twice", out[i].Value)
		}
	}
	return out, nil
}

// MaxValueNames bounds the names of one attribute's values.
const MaxValueNames = 256

// checkAdded checks error_exit, constant_attributes, value_names,
// first_word, truncate and metric of a span.
func (s Span) checkAdded(where string, entryProbe, exitProbe ProbeRef, entryOK, exitOK, pattern bool) []error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(where+": "+format, args...))
	}
	captured := func(k string) (string, bool) {
		if e, ok := s.Attributes[k]; ok {
			return e, true
		}
		e, ok := s.ExitAttributes[k]
		return e, ok
	}
	if s.ErrorExit != "" {
		p, err := ParseProbe(s.ErrorExit)
		switch {
		case err != nil:
			add("error_exit: %v", err)
		case s.Entry == "" && s.Function == "":
			add("error_exit: a span with an error exit needs entry and exit, or function")
		case entryOK && p.String() == entryProbe.String():
			add("error_exit: %s also opens the span", p)
		case exitOK && p.String() == exitProbe.String():
			add("error_exit: %s is already the exit", p)
		case pattern:
			add("error_exit: a function pattern's spans have no error exit")
		default:
			for _, k := range sortedKeys(s.ExitAttributes) {
				e, err := fetch.Parse(s.ExitAttributes[k])
				if err != nil {
					continue // said of exit_attributes
				}
				if err := checkExpr(e, atExit, p, true); err != nil {
					add("exit_attributes[%s] at error_exit %s: %v", quoteShort(k), p, err)
				}
			}
			if s.StatusError != "" {
				if c, err := ParseComparison(s.StatusError); err == nil {
					if err := checkExpr(c.Expr, atExit, p, true); err != nil {
						add("status_error at error_exit %s: %v", p, err)
					}
				}
			}
			_, ferrs := checkConditions("exit_filter (at error_exit)", s.ExitFilter, atExit, p, true, false)
			errs = append(errs, prefixed(where, ferrs)...)
		}
	}
	for _, k := range sortedKeys(s.ConstantAttributes) {
		at := fmt.Sprintf("constant_attributes[%s]", quoteShort(k))
		if err := checkTelemetryName("the key", k, MaxNameBytes); err != nil || k == "" {
			add("%s: %v", at, errors.Join(err, emptyKey(k)))
		}
		if why, ok := ReservedAttributes[k]; ok {
			add("%s: %q is reserved: %s; choose another key", at, k, why)
		}
		if _, ok := captured(k); ok {
			add("%s: key is also a captured attribute", at)
		}
		if err := checkTelemetryName("the value", s.ConstantAttributes[k], MaxNameBytes); err != nil {
			add("%s: %v", at, err)
		}
	}
	for _, k := range sortedKeys2(s.ValueNames) {
		at := fmt.Sprintf("value_names[%s]", quoteShort(k))
		expr, ok := captured(k)
		if !ok {
			add("%s: no attribute has that key (value names name a captured integer attribute's values)", at)
			continue
		}
		if e, err := fetch.Parse(expr); err == nil && e.Typed && !e.Type.IsInteger() {
			add("%s: the attribute is %s, not an integer", at, e.Type)
		}
		if len(s.ValueNames[k]) > MaxValueNames {
			add("%s: %d names, at most %d", at, len(s.ValueNames[k]), MaxValueNames)
		}
		if _, err := ParseValueNames(s.ValueNames[k]); err != nil {
			add("%s: %v", at, err)
		}
	}
	derived := map[string]bool{}
	for _, k := range sortedKeys(s.FirstWord) {
		at := fmt.Sprintf("first_word[%s]", quoteShort(k))
		if err := checkTelemetryName("the key", k, MaxNameBytes); err != nil || k == "" {
			add("%s: %v", at, errors.Join(err, emptyKey(k)))
		}
		if why, ok := ReservedAttributes[k]; ok {
			add("%s: %q is reserved: %s; choose another key", at, k, why)
		}
		_, isConst := s.ConstantAttributes[k]
		if _, ok := captured(k); ok || isConst {
			add("%s: key is also an attribute", at)
		}
		if !isStringAttribute(captured, s.FirstWord[k]) {
			add("%s: %q is not a captured string attribute", at, s.FirstWord[k])
		}
		derived[k] = true
	}
	for _, k := range sortedKeys(s.Truncate) {
		at := fmt.Sprintf("truncate[%s]", quoteShort(k))
		if !isStringAttribute(captured, k) && !isBytesAttribute(captured, k) {
			add("%s: not a captured string or bytes attribute", at)
		}
		e, ok := captured(s.Truncate[k])
		if !ok {
			add("%s: length %q is not a captured attribute", at, s.Truncate[k])
		} else if pe, err := fetch.Parse(e); err == nil && pe.Typed && !pe.Type.IsInteger() {
			add("%s: length %q is %s, not an integer", at, s.Truncate[k], pe.Type)
		}
	}
	if m := s.Metric; m != nil {
		if err := checkMetricName(m.Name); err != nil {
			add("metric: %v", err)
		}
		if pattern {
			add("metric: a function pattern's spans have no metric of their own")
		}
		if len(m.Attributes) > MaxMetricAttributes {
			add("metric: %d attributes, at most %d", len(m.Attributes), MaxMetricAttributes)
		}
		seen := map[string]bool{}
		for i, k := range m.Attributes {
			_, isConst := s.ConstantAttributes[k]
			if _, ok := captured(k); !ok && !isConst && !derived[k] {
				add("metric.attributes[%d]: %q is not an attribute of the span", i, k)
			}
			if seen[k] {
				add("metric.attributes[%d]: %q twice", i, k)
			}
			seen[k] = true
		}
	}
	return errs
}

func emptyKey(k string) error {
	if k == "" {
		return errors.New("empty attribute key")
	}
	return nil
}

func isStringAttribute(captured func(string) (string, bool), k string) bool {
	e, ok := captured(k)
	if !ok {
		return false
	}
	pe, err := fetch.Parse(e)
	// A $name's type is known when the file is read: the planner checks it.
	return err == nil && (!pe.Typed && pe.Root == fetch.RootName || pe.Type.Kind == fetch.KindString || pe.Type.Kind == fetch.KindGoString)
}

func isBytesAttribute(captured func(string) (string, bool), k string) bool {
	e, ok := captured(k)
	if !ok {
		return false
	}
	pe, err := fetch.Parse(e)
	return err == nil && pe.Type.Kind == fetch.KindBytes
}

// checkMetricName checks a metric name of a span's or counter's metric.
func checkMetricName(name string) error {
	if name == "" {
		return errors.New("name is required")
	}
	if err := checkTelemetryName("name", name, MaxNameBytes); err != nil {
		return err
	}
	if strings.HasPrefix(name, "uprobe.") || strings.HasPrefix(name, "receiver_uprobe") {
		return fmt.Errorf("name %q: the receiver's own metrics are named uprobe.*", name)
	}
	return nil
}

// validateMetric checks a counter's metric.
func (m *CounterMetric) validate() []error {
	var errs []error
	if err := checkMetricName(m.Name); err != nil {
		errs = append(errs, fmt.Errorf("metric: %w", err))
	}
	if m.Unit != "" {
		if err := checkTelemetryName("unit", m.Unit, MaxNameBytes); err != nil {
			errs = append(errs, fmt.Errorf("metric: %w", err))
		}
	}
	if len(m.Attributes) > MaxMetricAttributes {
		errs = append(errs, fmt.Errorf("metric: %d attributes, at most %d", len(m.Attributes), MaxMetricAttributes))
	}
	for _, k := range sortedKeys2(m.Attributes) {
		if err := checkTelemetryName("the key", k, MaxNameBytes); err != nil || k == "" {
			errs = append(errs, fmt.Errorf("metric.attributes[%s]: %w", quoteShort(k), errors.Join(err, emptyKey(k))))
		}
		switch v := m.Attributes[k].(type) {
		case string:
			if err := checkTelemetryName("the value", v, MaxNameBytes); err != nil {
				errs = append(errs, fmt.Errorf("metric.attributes[%s]: %w", quoteShort(k), err))
			}
		case int, int64, uint64, bool:
		default:
			errs = append(errs, fmt.Errorf("metric.attributes[%s]: %v is not a string, an integer or a boolean", quoteShort(k), v))
		}
	}
	return errs
}

func sortedKeys2[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// FirstWord returns the first word of s: its first run of letters,
// digits and underscores after blanks, parentheses and /* comments */;
// "" when it has none. It reads at most the whole of s and never
// allocates.
func FirstWord(s string) string {
	i := 0
	for i < len(s) {
		switch {
		case s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == '(':
			i++
		case strings.HasPrefix(s[i:], "/*"):
			end := strings.Index(s[i+2:], "*/")
			if end < 0 {
				return ""
			}
			i += 2 + end + 2
		case strings.HasPrefix(s[i:], "--"):
			end := strings.IndexByte(s[i:], '\n')
			if end < 0 {
				return ""
			}
			i += end + 1
		default:
			j := i
			for j < len(s) && (s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			return s[i:j]
		}
	}
	return ""
}
