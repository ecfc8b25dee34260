package fetch

import (
	"strconv"
	"strings"
)

// Enumerator is one named value of an enum type: the table of a $name of
// an enum type (internal/debuginfo reads it) turns a stored integer into
// the enumerator's name.
type Enumerator struct {
	Name  string
	Value int64
}

// FormatEnum names value v by an enum's table: the enumerator's name when
// one has that value, else the names of single-bit (flag) enumerators
// joined by "|" when their bits make up v exactly, else the number.
func FormatEnum(table []Enumerator, v int64) string {
	for _, e := range table {
		if e.Value == v {
			return e.Name
		}
	}
	if v > 0 {
		var parts []string
		rest := v
		for _, e := range table {
			if e.Value > 0 && e.Value&(e.Value-1) == 0 && rest&e.Value != 0 {
				parts = append(parts, e.Name)
				rest &^= e.Value
			}
		}
		if rest == 0 && len(parts) > 0 {
			return strings.Join(parts, "|")
		}
	}
	return strconv.FormatInt(v, 10)
}
