package recipe

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/otel-uprobe/uprobereceiver/internal/config"
)

// FuzzExpand expands a recipe target with one option of any name and
// value (kind: 0 a string, 1 an integer, 2 a boolean, 3 a float, 4 null,
// 5 a list): never a panic; an error is printable UTF-8 of bounded size;
// an expansion is a valid target, and a string option's value is in it as
// given (the recipe's text took it as it is).
func FuzzExpand(f *testing.F) {
	f.Add("jvm", "young_gc_name", "G1 Young Generation", int64(0), uint8(0))
	f.Add("jvm", "young_gc_name", "\u0085G1 Young", int64(0), uint8(0))
	f.Add("jvm", "full_gc_name", `a"b`, int64(0), uint8(0))
	f.Add("tls", "plaintext_bytes", "", int64(64), uint8(1))
	f.Add("malloc", "min_size", "0x1000", int64(0), uint8(0))
	f.Add("go-http", "stripped", "", int64(1), uint8(2))
	f.Add("python", "functions", "", int64(0), uint8(4))
	f.Add("mysql\x1b[0m", "x", "", int64(0), uint8(5))
	f.Fuzz(func(t *testing.T, name, option, value string, n int64, kind uint8) {
		var v any
		switch kind % 6 {
		case 0:
			v = value
		case 1:
			v = n
		case 2:
			v = n%2 == 0
		case 3:
			v = float64(n) / 3
		case 4:
			v = nil
		case 5:
			v = []any{value}
		}
		if name == "" {
			return // not a recipe target: Expand leaves it
		}
		got, err := Expand([]config.Target{{Recipe: name, Path: "/srv/prog", RecipeOptions: map[string]any{option: v}}})
		if err != nil {
			msg := err.Error()
			if len(msg) > 2048 {
				t.Fatalf("error of %d bytes: %.200q", len(msg), msg)
			}
			if !utf8.ValidString(msg) {
				t.Fatalf("error is not UTF-8: %q", msg)
			}
			for _, r := range msg {
				if unicode.IsControl(r) && r != '\n' {
					t.Fatalf("error has the control character %U: %q", r, msg)
				}
			}
			return
		}
		if err := config.Validate(got); err != nil {
			t.Fatalf("the expansion with %s: %#v is not valid: %v", option, v, err)
		}
		if s, ok := v.(string); ok {
			r, _ := Get(name)
			if r.Options[option].Type == "string" {
				expanded := got[0]
				expanded.RecipeOptions = nil // the value as given
				text, err := json.Marshal(expanded)
				if err != nil {
					t.Fatal(err)
				}
				quoted, _ := json.Marshal(s)
				if !strings.Contains(string(text), string(quoted)) {
					t.Fatalf("the value %q of %s is not in the expansion as given", s, option)
				}
			}
		}
	})
}
