package fetch

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParsePath(t *testing.T) {
	for _, c := range []struct {
		text  string
		want  Path
		canon string
	}{
		{"$req", Path{Kind: PathVariable, Root: "req"}, "$req"},
		{"$req->hdr->name", Path{Kind: PathVariable, Root: "req", Steps: []Step{{Kind: StepField, Field: "hdr", Arrow: true, Column: 5}, {Kind: StepField, Field: "name", Arrow: true, Column: 10}}}, "$req->hdr->name"},
		{"$r.URL.Path", Path{Kind: PathVariable, Root: "r", Steps: []Step{{Kind: StepField, Field: "URL", Column: 3}, {Kind: StepField, Field: "Path", Column: 7}}}, "$r.URL.Path"},
		{"$req->codes[2]", Path{Kind: PathVariable, Root: "req", Steps: []Step{{Kind: StepField, Field: "codes", Arrow: true, Column: 5}, {Kind: StepIndex, Index: 2, Column: 12}}}, "$req->codes[2]"},
		{" $a [ 0x10 ] . b ", Path{Kind: PathVariable, Root: "a", Steps: []Step{{Kind: StepIndex, Index: 16, Column: 5}, {Kind: StepField, Field: "b", Column: 14}}}, "$a[16].b"},
		{"$return", Path{Kind: PathReturn}, "$return"},
		{"$return.x", Path{Kind: PathReturn, Steps: []Step{{Kind: StepField, Field: "x", Column: 8}}}, "$return.x"},
		{"$$params", Path{Kind: PathParams}, "$$params"},
		{"$~r1", Path{Kind: PathVariable, Root: "~r1"}, "$~r1"},
		{"$größe", Path{Kind: PathVariable, Root: "größe"}, "$größe"},
		{"$_x9", Path{Kind: PathVariable, Root: "_x9"}, "$_x9"},
	} {
		p, err := ParsePath(c.text)
		require.NoError(t, err, c.text)
		c.want.Text = c.text
		assert.Equal(t, &c.want, p, c.text)
		assert.Equal(t, c.canon, p.String())
		again, err := ParsePath(p.String())
		require.NoError(t, err)
		assert.Equal(t, p.String(), again.String())
	}
}

func TestParsePathErrors(t *testing.T) {
	for _, c := range []struct {
		text   string
		column int
		msg    string
	}{
		{"", 1, `expected "$"`},
		{"req", 1, `expected "$"`},
		{"$", 2, "expected a name"},
		{"$9x", 2, "expected a name"},
		{"$$param", 3, `expected "params"`},
		{"$$params.x", 9, "takes no steps"},
		{"$a->", 5, "expected a field name"},
		{"$a.", 4, "expected a field name"},
		{"$a[", 4, "expected an index"},
		{"$a[1", 5, `expected "]"`},
		{"$a[-1]", 4, "expected an index"},
		{"$a[01]", 4, "leading zero"},
		{"$a[0x]", 4, "bad index"},
		{"$a[99999999999]", 4, "index over"},
		{"$a+1", 3, "unexpected '+'"},
		{"$a b", 4, "unexpected 'b'"},
		{"$" + strings.Repeat("a", 3) + strings.Repeat(".x", MaxPathSteps+1), 5 + 2*MaxPathSteps, "over 64 steps"},
	} {
		_, err := ParsePath(c.text)
		var pe *PathError
		if assert.ErrorAs(t, err, &pe, c.text) {
			assert.Equal(t, c.column, pe.Column, c.text)
			assert.Contains(t, pe.Msg, c.msg, c.text)
		}
	}
	assert.True(t, IsPath(" $x"))
	assert.False(t, IsPath("arg0"))
}

func FuzzParsePath(f *testing.F) {
	for _, s := range []string{"$req->hdr->name", "$r.URL.Path", "$a[0x10].b", "$$params", "$return", "$~r0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		p, err := ParsePath(text)
		if err != nil {
			var pe *PathError
			if !errors.As(err, &pe) || pe.Column < 1 || pe.Column > len(text)+1 {
				t.Fatalf("%q: %v", text, err)
			}
			return
		}
		// The canonical form parses back to the same path.
		q, err := ParsePath(p.String())
		if err != nil || q.String() != p.String() {
			t.Fatalf("%q: canonical %q does not round-trip: %v", text, p.String(), err)
		}
	})
}
