package spans

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
)

// TestDerive: what a span definition derives from its record once its
// values are decoded.
func TestDerive(t *testing.T) {
	probes := []plan.Probe{{Ref: "usdt:p:start"}, {Ref: "usdt:p:done"}, {Ref: "usdt:p:abort"}}
	def := &plan.SpanDef{
		Entry: 0, Exit: 1, ErrorExits: []int{2},
		Constants:  []plan.KeyValue{{Key: "db.system.name", Value: "postgresql"}},
		FirstWords: []plan.Derived{{Key: "db.operation.name", From: "db.query.text"}, {Key: "none", From: "absent"}},
		Truncates:  []plan.Derived{{Key: "payload", From: "size"}, {Key: "text", From: "size"}, {Key: "neg", From: "minus"}},
	}
	build := func(exit int) ptrace.Span {
		sp := ptrace.NewSpan()
		a := sp.Attributes()
		a.PutStr("db.query.text", "/* c */ select 1")
		a.PutInt("size", 3)
		a.PutInt("minus", -1)
		a.PutEmptyBytes("payload").FromRaw([]byte("abcdef"))
		a.PutStr("text", "ññ") // cut to 3 bytes, in the middle of the second ñ: the partial rune goes
		a.PutStr("neg", "xyz")
		derive(sp, a, def, exit, probes)
		return sp
	}
	sp := build(1)
	assert.Equal(t, ptrace.StatusCodeUnset, sp.Status().Code())
	assert.Equal(t, map[string]any{
		"db.query.text": "/* c */ select 1", "db.operation.name": "select", "db.system.name": "postgresql",
		"size": int64(3), "minus": int64(-1), "payload": []byte("abc"), "text": "ñ", "neg": "",
	}, sp.Attributes().AsRaw())
	sp = build(2)
	assert.Equal(t, ptrace.StatusCodeError, sp.Status().Code())
	assert.Equal(t, "closed at its error exit usdt:p:abort", sp.Status().Message())
}

// TestValueNamedEmpty: a value named "" leaves its attribute out; other
// values are named, or stay their number in text.
func TestValueNamedEmpty(t *testing.T) {
	v := plan.Value{Type: fetch.Type{Kind: fetch.KindSigned, Size: 4}, Enum: []fetch.Enumerator{{Name: "", Value: 0}, {Name: "EAI_NONAME", Value: -2}}}
	for raw, want := range map[int64]any{0: nil, -2: "EAI_NONAME", -7: "-7"} {
		m := pcommon.NewMap()
		putInt(m, "error.type", v, uint64(raw), &arena{})
		got, ok := m.AsRaw()["error.type"]
		if want == nil {
			assert.False(t, ok, "%d leaves it out", raw)
			continue
		}
		assert.Equal(t, want, got)
	}
}
