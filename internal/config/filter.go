package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.opentelemetry.io/collector/confmap"

	"github.com/otel-uprobe/uprobereceiver/internal/bpfobj"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
)

// Counter is one count-only probe. In YAML it is either a probe reference
// ("uprobe:palloc") or a map that adds a filter and a value histogram:
//
//	{probe: uprobe:palloc, filter: "arg0:u64 > 4096", histogram: arg0:u64}
type Counter struct {
	// Probe is the counted probe's reference.
	Probe string `mapstructure:"probe"`
	// Filter are conditions that must all hold for a hit to count (and to
	// enter the histogram); evaluated in the kernel. A filtered counter is
	// a probe of its own: its probe.name is "PROBE if CONDITION && …".
	Filter []string `mapstructure:"filter"`
	// Histogram is an integer fetch expression whose values, one per
	// counted hit, the kernel aggregates into an exponential histogram
	// (the uprobe.probe.value metric).
	Histogram string `mapstructure:"histogram"`
	// Metric, when set, also reports the counter's hits as a sum of its
	// own name (jvm.class.loaded), counted in the kernel.
	Metric *CounterMetric `mapstructure:"metric"`
}

// CountersOf returns plain counters of the probe references refs.
func CountersOf(refs ...string) []Counter {
	out := make([]Counter, len(refs))
	for i, r := range refs {
		out[i] = Counter{Probe: r}
	}
	return out
}

// UnmarshalText lets a counter be written as a bare probe reference.
func (c *Counter) UnmarshalText(text []byte) error {
	*c = Counter{Probe: string(text)}
	return nil
}

// Unmarshal reads the map form of a counter, whose filter may be one
// condition or a list.
func (c *Counter) Unmarshal(conf *confmap.Conf) error {
	type plain Counter
	var p plain
	if err := listOfOne(conf, "filter").Unmarshal(&p); err != nil {
		return err
	}
	*c = Counter(p)
	return nil
}

// Unmarshal reads a span, whose filter and exit_filter may each be one
// condition or a list.
func (s *Span) Unmarshal(conf *confmap.Conf) error {
	type plain Span
	p := plain(*s)
	if err := listOfOne(conf, "filter", "exit_filter").Unmarshal(&p); err != nil {
		return err
	}
	*s = Span(p)
	return nil
}

// listOfOne returns conf with each of keys that holds a single string
// turned into a list of that string. Without it, the collector's decoder
// would split a lone condition at its commas.
func listOfOne(conf *confmap.Conf, keys ...string) *confmap.Conf {
	m := conf.ToStringMap()
	for _, k := range keys {
		if s, ok := m[k].(string); ok {
			m[k] = []any{s}
		}
	}
	return confmap.NewFromStringMap(m)
}

// Ref returns the probe.name of the counter: its probe reference, followed
// by " if " and its conditions when it has a filter.
func (c Counter) Ref() string {
	if len(c.Filter) == 0 {
		return strings.TrimSpace(c.Probe)
	}
	return strings.TrimSpace(c.Probe) + " if " + strings.Join(SplitConditions(c.Filter), " && ")
}

// Comparison operators of a Condition.
const (
	OpEQ     = "=="
	OpNE     = "!="
	OpLT     = "<"
	OpLE     = "<="
	OpGT     = ">"
	OpGE     = ">="
	OpPrefix = "prefix"
)

// Condition is one condition of a filter: a fetched value compared with a
// constant, an integer (==, !=, <, <=, >, >=) or a quoted string (==, !=,
// prefix).
type Condition struct {
	// Raw is the condition as written, without surrounding blanks.
	Raw  string
	Expr fetch.Expr
	Op   string
	// Int is an integer constant's bits: a negative number as written, a
	// number above the int64 range as its uint64 bits (Big is set).
	Int int64
	// Big says the constant was written above the int64 range.
	Big bool
	// Text is a string constant, unquoted; IsText says there is one.
	Text   string
	IsText bool
}

// MaxConditionText is the most bytes a string condition's constant may
// have: the engine compares at most that many.
const MaxConditionText = bpfobj.FilterTextMax

// ParseCondition parses one condition of a filter, such as
// "arg0:u64 > 4096", "$req->len >= 0x100" or `arg1:string prefix "/api/"`.
// The string constant is Go-quoted ("…" with \ escapes, or `…`). Types are
// checked when the expression has one; an untyped one is checked once the
// traced file gives its type.
func ParseCondition(s string) (Condition, error) {
	if strings.TrimSpace(s) == "" {
		return Condition{}, errors.New("an empty condition: && joins two conditions, and a filter item is one or more of them")
	}
	c, err := parseCondition(strings.TrimSpace(s))
	c.Raw = strings.TrimSpace(s)
	return c, err
}

func parseCondition(s string) (Condition, error) {
	if q := strings.IndexAny(s, "\"`"); q >= 0 {
		return parseTextCondition(s, q)
	}
	if i := strings.Index(s, " prefix "); i >= 0 {
		return Condition{}, fmt.Errorf("condition %q: prefix compares strings: quote the text (%s prefix \"…\")", s, strings.TrimSpace(s[:i]))
	}
	for _, op := range []string{OpLE, OpGE, OpEQ, OpNE, OpLT, OpGT} {
		i := lastOperator(s, op)
		if i < 0 {
			continue
		}
		lhs, rhs := strings.TrimSpace(s[:i]), strings.TrimSpace(s[i+len(op):])
		if rhs == "" || strings.ContainsAny(rhs[:1], "<>=!") {
			break
		}
		if t := strings.TrimRight(lhs, "<>=!"); len(t) < len(lhs) {
			return Condition{}, fmt.Errorf("condition %q: operator %q: want one of == != < <= > >= (integers) or == != prefix (a quoted string)", s, lhs[len(t):]+op)
		}
		c := Condition{Op: op}
		e, err := fetch.Parse(lhs)
		if err != nil {
			return Condition{}, fmt.Errorf("condition %q: %w", s, err)
		}
		c.Expr = e
		v, err := strconv.ParseInt(rhs, 0, 64)
		switch {
		case err == nil:
			c.Int = v
		case errors.Is(err, strconv.ErrRange):
			u, uerr := strconv.ParseUint(rhs, 0, 64)
			if uerr != nil {
				return Condition{}, fmt.Errorf("condition %q: %s is out of the range of 64-bit integers", s, rhs)
			}
			c.Int, c.Big = int64(u), true
		default:
			return Condition{}, fmt.Errorf("condition %q: %q is not an integer (a Go integer literal: 42, -1, 0x2a; a string constant is quoted: \"…\")", s, rhs)
		}
		if e.Typed && !e.Type.IsInteger() {
			return Condition{}, fmt.Errorf("condition %q: %s is not an integer type; %s compares integers", s, e.Type, op)
		}
		return c, c.checkExpr(s)
	}
	return Condition{}, fmt.Errorf("condition %q: want EXPR OP CONSTANT with OP one of == != < <= > >= (integers) or == != prefix (a quoted string)", s)
}

// parseTextCondition parses a condition whose constant is the quoted string
// starting at byte q of s.
func parseTextCondition(s string, q int) (Condition, error) {
	text, err := strconv.Unquote(strings.TrimSpace(s[q:]))
	if err != nil {
		return Condition{}, fmt.Errorf("condition %q: %s is not one quoted string", s, strings.TrimSpace(s[q:]))
	}
	if len(text) > MaxConditionText {
		return Condition{}, fmt.Errorf("condition %q: the string is %d bytes, at most %d are compared", s, len(text), MaxConditionText)
	}
	lhs := strings.TrimSpace(s[:q])
	c := Condition{Text: text, IsText: true}
	switch {
	case strings.HasSuffix(lhs, OpEQ):
		c.Op = OpEQ
	case strings.HasSuffix(lhs, OpNE):
		c.Op = OpNE
	case strings.HasSuffix(lhs, " "+OpPrefix) || strings.HasSuffix(lhs, "\t"+OpPrefix):
		c.Op = OpPrefix
	default:
		return Condition{}, fmt.Errorf("condition %q: a string compares with ==, != or prefix", s)
	}
	e, err := fetch.Parse(strings.TrimSpace(strings.TrimSuffix(lhs, c.Op)))
	if err != nil {
		return Condition{}, fmt.Errorf("condition %q: %w", s, err)
	}
	c.Expr = e
	if e.Typed && e.Type.Kind != fetch.KindString && e.Type.Kind != fetch.KindGoString {
		return Condition{}, fmt.Errorf("condition %q: %s is not a string type (string, string[N], gostring); %s compares strings", s, e.Type, c.Op)
	}
	return c, c.checkExpr(s)
}

// checkExpr refuses what no condition can compare.
func (c Condition) checkExpr(s string) error {
	if c.Expr.Root == fetch.RootName && strings.HasPrefix(c.Expr.Path, "$$") {
		return fmt.Errorf("condition %q: $$params stands for several values, a condition compares one", s)
	}
	return nil
}

// String returns the canonical form of the condition.
func (c Condition) String() string {
	v := strconv.FormatInt(c.Int, 10)
	switch {
	case c.IsText:
		v = strconv.Quote(c.Text)
	case c.Big:
		v = strconv.FormatUint(uint64(c.Int), 10)
	}
	return c.Expr.String() + " " + c.Op + " " + v
}

// CheckType checks the condition against the type its value has in the
// traced file (the declared type, or the one debuginfo gives): a string
// constant needs a string, an integer one an integer whose range holds it.
func (c Condition) CheckType(t fetch.Type) error {
	if c.IsText {
		if t.Kind != fetch.KindString && t.Kind != fetch.KindGoString {
			return fmt.Errorf("the value is %s, not a string", t)
		}
		if t.Kind == fetch.KindString && strings.ContainsRune(c.Text, 0) {
			return errors.New("a C string ends at its first NUL: the constant cannot hold one")
		}
		return nil
	}
	if !t.IsInteger() {
		return fmt.Errorf("the value is %s, not an integer", t)
	}
	bits := uint(t.Size) * 8
	if t.Kind == fetch.KindSigned {
		if c.Big || bits < 64 && (c.Int < -1<<(bits-1) || c.Int >= 1<<(bits-1)) {
			return fmt.Errorf("%s is out of the range of %s", c.constant(), t)
		}
		return nil
	}
	if !c.Big && c.Int < 0 {
		return fmt.Errorf("%s is unsigned, %s is negative", t, c.constant())
	}
	if bits < 64 && uint64(c.Int) >= 1<<bits {
		return fmt.Errorf("%s is out of the range of %s", c.constant(), t)
	}
	return nil
}

// constant returns the condition's constant as written.
func (c Condition) constant() string {
	if i := strings.LastIndex(c.Raw, c.Op); i >= 0 {
		return strings.TrimSpace(c.Raw[i+len(c.Op):])
	}
	return strconv.FormatInt(c.Int, 10)
}

// ParseConditions parses every condition of a filter, reporting all
// problems.
func ParseConditions(list []string) ([]Condition, error) {
	out := make([]Condition, 0, len(list))
	var errs []error
	for _, s := range SplitConditions(list) {
		c, err := ParseCondition(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, c)
	}
	return out, errors.Join(errs...)
}

// SplitConditions returns the conditions of a filter: each string of list,
// cut at every "&&" outside a quoted string ("a > 1 && b < 2" is two).
func SplitConditions(list []string) []string {
	var out []string
	for _, s := range list {
		start := 0
		var quote byte
		for i := 0; i < len(s); i++ {
			switch c := s[i]; {
			case quote == '"' && c == '\\':
				i++ // an escaped character
			case quote != 0:
				if c == quote {
					quote = 0
				}
			case c == '"' || c == '`':
				quote = c
			case c == '&' && i+1 < len(s) && s[i+1] == '&':
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 2
				i++
			}
		}
		out = append(out, strings.TrimSpace(s[start:]))
	}
	return out
}
