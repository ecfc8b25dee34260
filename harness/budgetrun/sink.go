package budgetrun

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
)

// Point is one data point the collector exported.
type Point struct {
	Name  string
	Attrs map[string]string
	Value float64
	// At is when it arrived.
	At time.Time
}

// Sink is an OTLP/HTTP endpoint that keeps the metric data points it
// receives (of gauges and sums), at most maxPoints.
type Sink struct {
	mu     sync.Mutex
	points []Point
	srv    *http.Server
	// Addr is its host:port.
	Addr string
}

const maxPoints = 1 << 20

// NewSink listens on 127.0.0.1 and serves until Close.
func NewSink() (*Sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Sink{Addr: ln.Addr().String()}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops serving.
func (s *Sink) Close() error { return s.srv.Shutdown(context.Background()) }

func (s *Sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/metrics" {
		w.WriteHeader(http.StatusOK) // traces and logs are not kept
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req := pmetricotlp.NewExportRequest()
	if err := req.UnmarshalProto(body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.add(req.Metrics(), time.Now())
	resp, _ := pmetricotlp.NewExportResponse().MarshalProto()
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(resp)
}

func (s *Sink) add(md pmetric.Metrics, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rms := md.ResourceMetrics()
	for i := 0; i < rms.Len(); i++ {
		sms := rms.At(i).ScopeMetrics()
		for j := 0; j < sms.Len(); j++ {
			ms := sms.At(j).Metrics()
			for k := 0; k < ms.Len(); k++ {
				m := ms.At(k)
				var dps pmetric.NumberDataPointSlice
				switch m.Type() {
				case pmetric.MetricTypeGauge:
					dps = m.Gauge().DataPoints()
				case pmetric.MetricTypeSum:
					dps = m.Sum().DataPoints()
				default:
					continue
				}
				for d := 0; d < dps.Len() && len(s.points) < maxPoints; d++ {
					dp := dps.At(d)
					p := Point{Name: m.Name(), Attrs: map[string]string{}, At: at}
					dp.Attributes().Range(func(k string, v pcommon.Value) bool {
						p.Attrs[k] = v.AsString()
						return true
					})
					if dp.ValueType() == pmetric.NumberDataPointValueTypeInt {
						p.Value = float64(dp.IntValue())
					} else {
						p.Value = dp.DoubleValue()
					}
					s.points = append(s.points, p)
				}
			}
		}
	}
}

// Points returns the points of a metric whose attributes include attrs,
// in the order they arrived.
func (s *Sink) Points(name string, attrs map[string]string) []Point {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Point
	for _, p := range s.points {
		if p.Name != name {
			continue
		}
		match := true
		for k, v := range attrs {
			match = match && p.Attrs[k] == v
		}
		if match {
			out = append(out, p)
		}
	}
	return out
}

// Latest returns the last point of a metric whose attributes include attrs.
func (s *Sink) Latest(name string, attrs map[string]string) (Point, bool) {
	ps := s.Points(name, attrs)
	if len(ps) == 0 {
		return Point{}, false
	}
	return ps[len(ps)-1], true
}

// Wait waits up to timeout for a point of a metric whose attributes include
// attrs and for which ok holds, polling every 100 ms.
func (s *Sink) Wait(name string, attrs map[string]string, timeout time.Duration, ok func(Point) bool) (Point, bool) {
	deadline := time.Now().Add(timeout)
	for {
		if p, found := s.Latest(name, attrs); found && ok(p) {
			return p, true
		}
		if time.Now().After(deadline) {
			return Point{}, false
		}
		time.Sleep(100 * time.Millisecond)
	}
}
