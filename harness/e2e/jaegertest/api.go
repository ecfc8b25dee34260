//go:build linux

package jaegertest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// ErrNotFound is the error of Trace while Jaeger does not know the trace.
var ErrNotFound = errors.New("trace not found")

// Trace is a trace as Jaeger's query API returns it.
type Trace struct {
	TraceID  string
	Spans    []Span
	Warnings []string
}

// Span is one span of a Trace. Jaeger keeps times in microseconds.
type Span struct {
	// TraceID is 32 hex digits, SpanID 16 (Jaeger drops the leading zeros of
	// 64-bit trace IDs; they are restored here).
	TraceID, SpanID string
	OperationName   string
	References      []Reference
	// Start is the span's start, to the microsecond.
	Start time.Time
	// Duration is the span's duration, to the microsecond.
	Duration time.Duration
	// Tags are the span's attributes, plus what Jaeger derives from the
	// OTLP span: span.kind ("server", "client", …), otel.scope.name,
	// otel.status_code, error… Values are string, bool, int64, float64, or
	// []byte.
	Tags map[string]any
	// ServiceName and ProcessTags describe the process (the OTLP resource)
	// that emitted the span.
	ServiceName string
	ProcessTags map[string]any
	Warnings    []string
}

// Reference links a span to another one.
type Reference struct {
	// RefType is "CHILD_OF" (the parent) or "FOLLOWS_FROM" (a link).
	RefType         string
	TraceID, SpanID string
}

// End returns the end of the span.
func (s Span) End() time.Time { return s.Start.Add(s.Duration) }

// ParentSpanID returns the span ID of the span's CHILD_OF reference, or ""
// for a root span.
func (s Span) ParentSpanID() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// Kind returns the span.kind tag ("server", "client", "internal", …; ""
// when unset).
func (s Span) Kind() string {
	k, _ := s.Tags["span.kind"].(string)
	return k
}

// SpansNamed returns the spans whose operation name is name.
func (tr Trace) SpansNamed(name string) []Span {
	var out []Span
	for _, s := range tr.Spans {
		if s.OperationName == name {
			out = append(out, s)
		}
	}
	return out
}

// Span returns the span with the given ID.
func (tr Trace) Span(spanID string) (Span, bool) {
	for _, s := range tr.Spans {
		if s.SpanID == spanID {
			return s, true
		}
	}
	return Span{}, false
}

// Services returns the service names Jaeger has seen.
func (j *Jaeger) Services() ([]string, error) {
	var services []string
	err := j.get("/api/services", &services)
	return services, err
}

// Trace fetches a trace by its ID (hex). It returns ErrNotFound (wrapped)
// while Jaeger does not have the trace.
func (j *Jaeger) Trace(t testing.TB, traceID string) (Trace, error) {
	t.Helper()
	var data []jsonTrace
	if err := j.get("/api/traces/"+url.PathEscape(traceID), &data); err != nil {
		return Trace{}, fmt.Errorf("trace %s: %w", traceID, err)
	}
	if len(data) != 1 {
		return Trace{}, fmt.Errorf("trace %s: Jaeger returned %d traces", traceID, len(data))
	}
	return data[0].convert()
}

// WaitTrace polls Jaeger until the trace has at least wantSpans spans and
// returns it; it fails the test after timeout.
func (j *Jaeger) WaitTrace(t testing.TB, traceID string, wantSpans int, timeout time.Duration) Trace {
	t.Helper()
	deadline := time.Now().Add(timeout)
	delay := 10 * time.Millisecond
	for {
		tr, err := j.Trace(t, traceID)
		if err == nil && len(tr.Spans) >= wantSpans {
			return tr
		}
		select {
		case <-j.exited:
			t.Fatalf("jaegertest: Jaeger exited (%s) while waiting for trace %s", j.cmd.ProcessState, traceID)
		default:
		}
		if time.Now().After(deadline) {
			if err != nil {
				t.Fatalf("jaegertest: trace %s not complete within %s: %v", traceID, timeout, err)
			}
			t.Fatalf("jaegertest: trace %s has %d spans after %s, want at least %d:\n%s",
				traceID, len(tr.Spans), timeout, wantSpans, tr)
		}
		time.Sleep(delay)
		delay = min(2*delay, 200*time.Millisecond)
	}
}

// String lists the spans, one a line, for failure messages.
func (tr Trace) String() string {
	var b strings.Builder
	for _, s := range tr.Spans {
		fmt.Fprintf(&b, "%s %s/%q parent=%s kind=%s start=%s duration=%s tags=%v\n",
			s.SpanID, s.ServiceName, s.OperationName, s.ParentSpanID(), s.Kind(),
			s.Start.UTC().Format(time.RFC3339Nano), s.Duration, s.Tags)
	}
	return b.String()
}

// get decodes the data member of a query API answer into data.
func (j *Jaeger) get(path string, data any) error {
	resp, err := j.client.Get(j.QueryURL + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode == http.StatusNotFound {
		return ErrNotFound
	}
	var r struct {
		Data   json.RawMessage `json:"data"`
		Errors []struct {
			Code int    `json:"code"`
			Msg  string `json:"msg"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return fmt.Errorf("GET %s: %s: %w: %.200q", path, resp.Status, err, body)
	}
	if resp.StatusCode != http.StatusOK || len(r.Errors) > 0 {
		return fmt.Errorf("GET %s: %s: %+v", path, resp.Status, r.Errors)
	}
	dec := json.NewDecoder(bytes.NewReader(r.Data))
	dec.UseNumber()
	if err := dec.Decode(data); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

// The query API's JSON (Jaeger's internal/uimodel).
type (
	jsonTrace struct {
		TraceID   string                 `json:"traceID"`
		Spans     []jsonSpan             `json:"spans"`
		Processes map[string]jsonProcess `json:"processes"`
		Warnings  []string               `json:"warnings"`
	}
	jsonSpan struct {
		TraceID       string          `json:"traceID"`
		SpanID        string          `json:"spanID"`
		OperationName string          `json:"operationName"`
		References    []jsonReference `json:"references"`
		StartTime     int64           `json:"startTime"` // µs since the epoch
		Duration      int64           `json:"duration"`  // µs
		Tags          []jsonKeyValue  `json:"tags"`
		ProcessID     string          `json:"processID"`
		Warnings      []string        `json:"warnings"`
	}
	jsonReference struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	}
	jsonProcess struct {
		ServiceName string         `json:"serviceName"`
		Tags        []jsonKeyValue `json:"tags"`
	}
	jsonKeyValue struct {
		Key   string `json:"key"`
		Type  string `json:"type"`
		Value any    `json:"value"`
	}
)

func (jt jsonTrace) convert() (Trace, error) {
	tr := Trace{TraceID: pad(jt.TraceID, 32), Warnings: jt.Warnings}
	for _, js := range jt.Spans {
		p, ok := jt.Processes[js.ProcessID]
		if !ok {
			return Trace{}, fmt.Errorf("span %s: unknown process %q", js.SpanID, js.ProcessID)
		}
		tags, err := convertTags(js.Tags)
		if err != nil {
			return Trace{}, fmt.Errorf("span %s: %w", js.SpanID, err)
		}
		ptags, err := convertTags(p.Tags)
		if err != nil {
			return Trace{}, fmt.Errorf("process %s: %w", js.ProcessID, err)
		}
		s := Span{
			TraceID:       pad(js.TraceID, 32),
			SpanID:        pad(js.SpanID, 16),
			OperationName: js.OperationName,
			Start:         time.UnixMicro(js.StartTime),
			Duration:      time.Duration(js.Duration) * time.Microsecond,
			Tags:          tags,
			ServiceName:   p.ServiceName,
			ProcessTags:   ptags,
			Warnings:      js.Warnings,
		}
		for _, r := range js.References {
			s.References = append(s.References, Reference{
				RefType: r.RefType, TraceID: pad(r.TraceID, 32), SpanID: pad(r.SpanID, 16),
			})
		}
		tr.Spans = append(tr.Spans, s)
	}
	return tr, nil
}

func convertTags(kvs []jsonKeyValue) (map[string]any, error) {
	tags := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		v, err := kv.value()
		if err != nil {
			return nil, fmt.Errorf("tag %s: %w", kv.Key, err)
		}
		tags[kv.Key] = v
	}
	return tags, nil
}

// value converts a tag's JSON value according to its type.
func (kv jsonKeyValue) value() (any, error) {
	switch kv.Type {
	case "int64":
		if n, ok := kv.Value.(json.Number); ok {
			return n.Int64()
		}
	case "float64":
		if n, ok := kv.Value.(json.Number); ok {
			return n.Float64()
		}
	case "binary":
		// Jaeger sends binary values base64-encoded.
		if s, ok := kv.Value.(string); ok {
			return base64.StdEncoding.DecodeString(s)
		}
	default: // string, bool
		return kv.Value, nil
	}
	return nil, fmt.Errorf("%s value %v (%T)", kv.Type, kv.Value, kv.Value)
}

// pad restores the leading zeros Jaeger leaves out of IDs.
func pad(id string, n int) string {
	if len(id) < n {
		return strings.Repeat("0", n-len(id)) + id
	}
	return id
}
