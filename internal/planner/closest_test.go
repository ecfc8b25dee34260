package planner

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"a", "", 1},
		{"", "abc", 3},
		{"abc", "abc", 0},
		{"abc", "abd", 1},
		{"abc", "ab", 1},
		{"ab", "abc", 1},
		{"abc", "xabc", 1},
		{"kitten", "sitting", 3},
		{"flaw", "lawn", 2},
		{"wrok", "work", 2},
		{"query_start", "query__start", 1},
		{"demo:query_start", "demo:query__done", 5},
		{"intention", "execution", 5},
		{"abc", "xyz", 3},
		{"é", "e", 2}, // bytes, not runes
	} {
		assert.Equal(t, c.want, editDistance(c.a, c.b), "editDistance(%q, %q)", c.a, c.b)
		assert.Equal(t, c.want, editDistance(c.b, c.a), "editDistance(%q, %q)", c.b, c.a)
	}
}

func TestClosest(t *testing.T) {
	demo := []string{"demo:tick", "demo:query__done", "demo:query__start"}
	for _, c := range []struct {
		name string
		want string
		have []string
		n    int
		out  []string
	}{
		{"typo first", "demo:query_start", demo, 5, []string{"demo:query__start", "demo:query__done", "demo:tick"}},
		{"cut to n", "demo:query_start", demo, 1, []string{"demo:query__start"}},
		{"n of zero", "x", demo, 0, []string{}},
		{"nothing to choose from", "x", nil, 5, []string{}},
		{"containing names first", "query", []string{"qurey", "pg_query_start", "query_done"}, 5,
			[]string{"query_done", "pg_query_start", "qurey"}},
		{"names contained in want first", "palloc_extended", []string{"palloc", "pallocx_extended", "zalloc"}, 5,
			[]string{"palloc", "pallocx_extended", "zalloc"}},
		{"case-insensitive", "PALLOC", []string{"pfree", "palloc"}, 5, []string{"palloc", "pfree"}},
		{"ties broken by name", "ab", []string{"ad", "ac", "ae"}, 5, []string{"ac", "ad", "ae"}},
		{"exact match first", "work", []string{"worker", "work", "wor"}, 5, []string{"work", "wor", "worker"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			have := append([]string(nil), c.have...)
			assert.Equal(t, c.out, closest(c.want, have, c.n))
			assert.Equal(t, c.have, have, "closest does not reorder its input")
		})
	}
}
