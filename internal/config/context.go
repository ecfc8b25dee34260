package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
)

// SpanKind is the OpenTelemetry kind of a span definition's spans.
type SpanKind uint8

// The span kinds, as configured by kind:.
const (
	KindInternal SpanKind = iota + 1
	KindServer
	KindClient
	KindProducer
	KindConsumer
)

var spanKinds = map[string]SpanKind{
	"": KindInternal, "internal": KindInternal, "server": KindServer,
	"client": KindClient, "producer": KindProducer, "consumer": KindConsumer,
}

// ParseSpanKind parses kind: (empty means internal).
func ParseSpanKind(s string) (SpanKind, error) {
	k, ok := spanKinds[s]
	if !ok {
		return 0, fmt.Errorf("kind %q: want internal, server, client, producer or consumer", s)
	}
	return k, nil
}

// Comparison is a parsed status_error condition: EXPR OP VALUE, true when the
// value fetched at exit compares so with the constant.
type Comparison struct {
	Expr  fetch.Expr
	Op    string // <, <=, >, >=, ==, !=
	Value int64
}

// ParseComparison parses a status_error condition such as "retval:s64 < 0"
// or "$return < 0". The expression must have an integer type (or none);
// the "->" of a $name path is never taken for an operator.
func ParseComparison(s string) (Comparison, error) {
	for _, op := range []string{"<=", ">=", "==", "!=", "<", ">"} {
		i := lastOperator(s, op)
		if i < 0 {
			continue
		}
		lhs, rhs := strings.TrimSpace(s[:i]), strings.TrimSpace(s[i+len(op):])
		e, err := fetch.Parse(lhs)
		if err != nil {
			return Comparison{}, fmt.Errorf("status_error %q: %w", s, err)
		}
		if e.Typed && !e.Type.IsInteger() {
			return Comparison{}, fmt.Errorf("status_error %q: %s is not an integer type", s, e.Type)
		}
		v, err := strconv.ParseInt(rhs, 0, 64)
		if err != nil {
			return Comparison{}, fmt.Errorf("status_error %q: %q is not an integer", s, rhs)
		}
		return Comparison{Expr: e, Op: op, Value: v}, nil
	}
	return Comparison{}, fmt.Errorf("status_error %q: want EXPR OP INTEGER with OP one of < <= > >= == != (e.g. \"retval:s64 < 0\")", s)
}

// lastOperator returns the index of the last op in s that is not the ">"
// of a "->", or -1.
func lastOperator(s, op string) int {
	for end := len(s); ; {
		i := strings.LastIndex(s[:end], op)
		if i < 0 {
			return -1
		}
		if op[0] != '>' || i == 0 || s[i-1] != '-' {
			return i
		}
		end = i
	}
}

// Holds reports whether v satisfies the comparison.
func (c Comparison) Holds(v int64) bool {
	switch c.Op {
	case "<":
		return v < c.Value
	case "<=":
		return v <= c.Value
	case ">":
		return v > c.Value
	case ">=":
		return v >= c.Value
	case "==":
		return v == c.Value
	case "!=":
		return v != c.Value
	}
	return false
}

// String returns the canonical form of the condition.
func (c Comparison) String() string {
	return c.Expr.String() + " " + c.Op + " " + strconv.FormatInt(c.Value, 10)
}

// checkContext checks kind:, trace_context:, trace_id:/parent_span_id: and
// status_error: of a span.
func (s Span) checkContext(exitProbe ProbeRef, exitOK bool) []error {
	var errs []error
	if _, err := ParseSpanKind(s.Kind); err != nil {
		errs = append(errs, err)
	}
	if s.TraceContext != "" {
		expr, ok := s.Attributes[s.TraceContext]
		if !ok {
			expr, ok = s.ExitAttributes[s.TraceContext]
		}
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("trace_context %q: no attribute has that key (the carrier must be a captured string attribute)", s.TraceContext))
		default:
			if e, err := fetch.Parse(expr); err == nil && e.Typed && e.Type.Kind != fetch.KindString && e.Type.Kind != fetch.KindGoString {
				errs = append(errs, fmt.Errorf("trace_context %q: the attribute is %s, not a string", s.TraceContext, e.Type))
			}
		}
	}
	if (s.TraceID == "") != (s.ParentSpanID == "") {
		errs = append(errs, errors.New("trace_id and parent_span_id go together"))
	}
	if s.TraceID != "" && s.TraceContext != "" {
		errs = append(errs, errors.New("trace_context and trace_id/parent_span_id are exclusive: use one carrier"))
	}
	for _, id := range []struct {
		field, expr string
		bytes       uint16
	}{{"trace_id", s.TraceID, 16}, {"parent_span_id", s.ParentSpanID, 8}} {
		if id.expr == "" {
			continue
		}
		e, err := fetch.Parse(id.expr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", id.field, err))
			continue
		}
		if isParams(e) {
			errs = append(errs, fmt.Errorf("%s %q: $$params stands for several values, an id is one", id.field, id.expr))
			continue
		}
		binary := e.Type.Kind == fetch.KindBytes && e.Type.MaxLen == id.bytes
		if !binary && e.Type.Kind != fetch.KindString && e.Type.Kind != fetch.KindGoString {
			errs = append(errs, fmt.Errorf("%s %q: want bytes[%d] (raw id) or a string (%d hex digits)", id.field, id.expr, id.bytes, 2*id.bytes))
		}
		if err := checkExpr(e, atEntry, ProbeRef{}, false); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", id.field, err))
		}
	}
	if s.StatusError != "" {
		c, err := ParseComparison(s.StatusError)
		if err != nil {
			errs = append(errs, err)
		} else if isParams(c.Expr) {
			errs = append(errs, fmt.Errorf("status_error %q: $$params stands for several values, a condition compares one", s.StatusError))
		} else if err := checkExpr(c.Expr, atExit, exitProbe, exitOK); err != nil {
			errs = append(errs, fmt.Errorf("status_error: %w", err))
		}
	}
	return errs
}

// isParams reports whether e is $$params.
func isParams(e fetch.Expr) bool {
	return e.Root == fetch.RootName && strings.TrimSpace(e.Path) == "$$params"
}

// Fetches returns the number of values fetched at entry and at exit,
// counting the hidden ones (ids of a binary carrier, the status condition).
func (s Span) Fetches() (entry, exit int) {
	entry, exit = len(s.Attributes), len(s.ExitAttributes)
	if s.TraceID != "" {
		entry += 2
	}
	if s.StatusError != "" {
		exit++
	}
	return entry, exit
}
