package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
)

// TestAddedKeysValid: the span keys recipes use, as a user writes them.
func TestAddedKeysValid(t *testing.T) {
	tg := queryTarget()
	s := &tg.Spans[0]
	s.ErrorExit = "usdt:postgresql:transaction__abort"
	s.ConstantAttributes = map[string]string{"db.system.name": "postgresql"}
	s.FirstWord = map[string]string{"db.operation.name": "db.query.text"}
	s.Attributes["size"] = "arg1:s32"
	s.Attributes["payload"] = "+0(arg2):bytes[16]"
	s.Truncate = map[string]string{"payload": "size", "db.query.text": "size"}
	s.ExitAttributes["code"] = "arg1:s32"
	s.ValueNames = map[string]map[string]string{"code": {"0": "", "-2": "EAI_NONAME", "0x10": "sixteen"}}
	s.Metric = &SpanMetric{Name: "db.server.query.duration", Attributes: []string{"db.system.name", "db.operation.name", "code"}}
	tg.Counters = append(tg.Counters, Counter{Probe: "usdt:postgresql:deadlock__found",
		Metric: &CounterMetric{Name: "postgresql.deadlocks", Unit: "{deadlock}", Attributes: map[string]any{"db.system.name": "postgresql", "level": 2, "fatal": true}}})
	require.NoError(t, Validate([]Target{tg}))
}

// TestAddedKeysRefused: every mistake in the added keys, said with its
// place, all at once.
func TestAddedKeysRefused(t *testing.T) {
	tg := queryTarget()
	s := &tg.Spans[0]
	s.ErrorExit = "usdt:postgresql:query__done" // the exit already
	s.ConstantAttributes = map[string]string{"thread.id": "1", "db.query.text": "x"}
	s.FirstWord = map[string]string{"op": "missing"}
	s.Truncate = map[string]string{"done.text": "done.text", "nothing": "done.text"}
	s.ValueNames = map[string]map[string]string{"db.query.text": {"x": "y"}, "absent": {"1": "one"}}
	s.Metric = &SpanMetric{Name: "uprobe.mine", Attributes: []string{"nope", "nope"}}
	tg.Spans = append(tg.Spans, Span{
		Name: "abort", Entry: "usdt:postgresql:transaction__start", Exit: "usdt:postgresql:transaction__commit",
		ErrorExit:      "usdt:postgresql:transaction__abort",
		ExitAttributes: map[string]string{"r": "retval:s32"},
	}, Span{
		Name: "closes twice", Entry: "usdt:postgresql:lock__wait__start", Exit: "usdt:postgresql:lock__wait__done",
		ErrorExit: "usdt:postgresql:transaction__abort",
	})
	tg.Counters = append(tg.Counters, Counter{Probe: "usdt:postgresql:deadlock__found", Metric: &CounterMetric{Attributes: map[string]any{"k": 1.5}}})
	err := Validate([]Target{tg})
	require.Error(t, err)
	want := []string{
		`targets[0].spans[0]: error_exit: usdt:postgresql:query__done is already the exit`,
		`targets[0].spans[0]: constant_attributes["thread.id"]: "thread.id" is reserved`,
		`targets[0].spans[0]: constant_attributes["db.query.text"]: key is also a captured attribute`,
		`targets[0].spans[0]: value_names["absent"]: no attribute has that key`,
		`targets[0].spans[0]: value_names["db.query.text"]: the attribute is string, not an integer`,
		`targets[0].spans[0]: value_names["db.query.text"]: value "x" is not an integer`,
		`targets[0].spans[0]: first_word["op"]: "missing" is not a captured string attribute`,
		`targets[0].spans[0]: truncate["done.text"]: length "done.text" is string, not an integer`,
		`targets[0].spans[0]: truncate["nothing"]: not a captured string or bytes attribute`,
		`targets[0].spans[0]: metric: name "uprobe.mine": the receiver's own metrics are named uprobe.*`,
		`targets[0].spans[0]: metric.attributes[0]: "nope" is not an attribute of the span`,
		`targets[0].spans[0]: metric.attributes[1]: "nope" twice`,
		`targets[0].spans[1]: exit_attributes["r"] at error_exit usdt:postgresql:transaction__abort: "retval:s32": retval needs a uretprobe: or ret: exit`,
		`targets[0].spans[2]: probe usdt:postgresql:transaction__abort already closes span "abort"`,
		`targets[0].counters[1].metric: name is required`,
		`targets[0].counters[1].metric.attributes["k"]: 1.5 is not a string, an integer or a boolean`,
	}
	for _, w := range want {
		assert.Contains(t, err.Error(), w)
	}
}

func TestParseValueNames(t *testing.T) {
	got, err := ParseValueNames(map[string]string{"1": "one", "-3": "minus three", "0x10": "sixteen", " 2 ": "two"})
	require.NoError(t, err)
	assert.Equal(t, []fetch.Enumerator{{Name: "minus three", Value: -3}, {Name: "one", Value: 1}, {Name: "two", Value: 2}, {Name: "sixteen", Value: 16}}, got)
	_, err = ParseValueNames(map[string]string{"1": "one", "0x1": "uno"})
	assert.EqualError(t, err, "value 1 is named twice")
	_, err = ParseValueNames(map[string]string{"1": "a\nb"})
	assert.ErrorContains(t, err, "value 1: name")
}

func TestFirstWord(t *testing.T) {
	for in, want := range map[string]string{
		"SELECT 1":                             "SELECT",
		"  select * from t":                    "select",
		"/* traceparent='00-…' */ UPDATE t":    "UPDATE",
		"-- a comment\nINSERT INTO t":          "INSERT",
		"(SELECT 1) UNION (SELECT 2)":          "SELECT",
		"WITH x AS (SELECT 1) SELECT * FROM x": "WITH",
		"":                                     "",
		"   ":                                  "",
		"/* never closed":                      "",
		"-- no newline":                        "",
		"; SELECT":                             "",
		"pg_sleep_2(1)":                        "pg_sleep_2",
	} {
		assert.Equal(t, want, FirstWord(in), "%q", in)
	}
}

// FuzzFirstWord: FirstWord returns a part of its input made of word bytes.
func FuzzFirstWord(f *testing.F) {
	for _, s := range []string{"SELECT 1", "/**/x", "--\ny", "/*", "(((a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		w := FirstWord(s)
		if len(w) > len(s) {
			t.Fatalf("%q from %q", w, s)
		}
		for i := 0; i < len(w); i++ {
			c := w[i]
			if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
				t.Fatalf("%q from %q", w, s)
			}
		}
	})
}
