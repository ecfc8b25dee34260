package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// defaultWidth is the width of a listing that goes neither to a terminal
// nor to a shell that says its width in $COLUMNS.
const defaultWidth = 120

// outputWidth decides a listing's width: the -width flag when given (0 is
// no limit), else the terminal's width when stdout is one, else $COLUMNS,
// else defaultWidth.
func outputWidth(flagWidth int, stdout io.Writer) int {
	if flagWidth >= 0 {
		return flagWidth
	}
	if f, ok := stdout.(*os.File); ok {
		if w, ok := terminalWidth(f); ok && w > 0 {
			return w
		}
	}
	if c, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && c > 0 {
		return c
	}
	return defaultWidth
}

// minWidth is the narrowest layout: a narrower width is taken as this.
const minWidth = 40

// ellipsis marks a cell cut to fit the width.
const ellipsis = "…"

// page writes a listing's lines, none wider than width columns (0: no
// limit): prose is wrapped at blanks, a value to paste is wrapped inside a
// YAML double-quoted string (which pastes as one value), and explanations
// in table columns are cut with ellipsis. It counts the cells it cut, so
// that the listing can say so.
type page struct {
	w     io.Writer
	width int
	cut   int
}

func newPage(w io.Writer, width int) *page {
	if width > 0 && width < minWidth {
		width = minWidth
	}
	return &page{w: w, width: width}
}

func (p *page) println(s string) { fmt.Fprintln(p.w, s) }

func (p *page) printf(format string, args ...any) { p.text(fmt.Sprintf(format, args...)) }

// text writes prose lines (several when s holds newlines), each wrapped at
// blanks to the width; continuation lines are indented 4 columns more than
// the line (a comment line's continuations stay comments).
func (p *page) text(s string) {
	for _, line := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
		indent := line[:len(line)-len(strings.TrimLeft(line, " "))]
		body := line[len(indent):]
		cont := indent + "    "
		if strings.HasPrefix(body, "#") {
			cont = indent + "#   "
		}
		for _, l := range wrapWords(body, indent, cont, p.width) {
			p.println(l)
		}
	}
}

// wrapWords wraps text at blanks into lines of at most width columns,
// the first starting with first, the others with cont; a word longer than
// a line is broken.
func wrapWords(text, first, cont string, width int) []string {
	if width <= 0 || cols(first)+cols(text) <= width {
		return []string{first + text}
	}
	var out []string
	line := first
	room := func() int { return width - cols(line) }
	fresh := true
	for _, word := range strings.Fields(text) {
		sep := " "
		if fresh {
			sep = ""
		}
		if cols(sep)+cols(word) <= room() {
			line += sep + word
			fresh = false
			continue
		}
		if !fresh {
			out = append(out, line)
			line, fresh = cont, true
		}
		for cols(word) > room() {
			n := max(room(), 1)
			head, rest := splitCols(word, n)
			out = append(out, line+head)
			line, word = cont, rest
		}
		line += word
		fresh = word == ""
	}
	if !fresh || line != cont {
		out = append(out, line)
	}
	return out
}

// cols is the number of columns a string takes (one per rune).
func cols(s string) int { return utf8.RuneCountInString(s) }

// splitCols splits s after n columns.
func splitCols(s string, n int) (string, string) {
	i := 0
	for k := range s {
		if i == n {
			return s[:k], s[k:]
		}
		i++
	}
	return s, ""
}

// elide cuts s to n columns, the last being ellipsis.
func elide(s string, n int) string {
	if cols(s) <= n {
		return s
	}
	if n <= 1 {
		return ellipsis
	}
	head, _ := splitCols(s, n-1)
	return head + ellipsis
}

// pad pads s with blanks to n columns.
func pad(s string, n int) string {
	if c := cols(s); c < n {
		return s + strings.Repeat(" ", n-c)
	}
	return s
}

// row is one line of a table: YAML to paste (key: value, "- function:
// NAME"), or a comment ("# NAME"), and the cells that explain it, written
// after "# " in aligned columns.
type row struct {
	yaml  string
	cells []string
}

// table is a YAML block whose lines explain themselves in comments: the
// header is the YAML key the rows go under ("attributes:", "spans:"), with
// the columns' titles as its cells; each row is indented two more
// columns. Rows whose YAML is wider than the YAML column stand on lines of
// their own, their cells on the next line; a value wider than the page is
// wrapped inside a double-quoted string; cells too wide for their column
// are cut with ellipsis.
type table struct {
	indent string
	head   row
	rows   []row
}

// maxYAMLShare is the share of a line the YAML column may take, and
// yamlQuantile the percentage of rows whose YAML it holds: wider rows get
// lines of their own.
const (
	maxYAMLShare = 0.5
	yamlQuantile = 90
)

func (p *page) table(t *table) {
	if len(t.rows) == 0 {
		return
	}
	rowIndent := t.indent + "  "
	// The YAML column: the widest YAML, within its share of the page.
	// The YAML column: as wide as most rows' YAML (the widest when the
	// page has no width), within its share of the page; wider rows stand
	// on lines of their own.
	var widths []int
	for _, r := range t.rows {
		if len(r.cells) > 0 {
			widths = append(widths, cols(r.yaml))
		}
	}
	if len(widths) == 0 {
		t.head.cells = nil
	}
	sort.Ints(widths)
	yamlW := cols(t.head.yaml) - 2
	if len(widths) > 0 {
		yamlW = max(yamlW, widths[len(widths)-1])
		if share := int(float64(p.width-len(rowIndent)) * maxYAMLShare); p.width > 0 && yamlW > share {
			yamlW = max(cols(t.head.yaml)-2, min(widths[(len(widths)-1)*yamlQuantile/100], share))
		}
	}
	// The cells' columns, narrowed (the widest first) to what is left.
	ncols := len(t.head.cells)
	for _, r := range t.rows {
		ncols = max(ncols, len(r.cells))
	}
	// Each column as wide as its widest cell (the head's title included)
	// or, when they do not fit, as most of its cells (the last column
	// takes what is left).
	colW := make([]int, ncols)
	mostW := make([]int, ncols)
	for j := range colW {
		var ws []int
		for _, r := range t.rows {
			if j < len(r.cells) {
				ws = append(ws, cols(r.cells[j]))
			}
		}
		sort.Ints(ws)
		if len(ws) > 0 {
			colW[j], mostW[j] = ws[len(ws)-1], ws[(len(ws)-1)*yamlQuantile/100]
		}
		if j < len(t.head.cells) {
			colW[j], mostW[j] = max(colW[j], cols(t.head.cells[j])), max(mostW[j], cols(t.head.cells[j]))
		}
	}
	cellsAt := len(rowIndent) + yamlW + len("  # ")
	sideBySide := true
	if p.width > 0 {
		room := p.width - cellsAt
		if room < minWidth/2 {
			// Too narrow beside the YAML: cells on lines of their own.
			sideBySide = false
			cellsAt = len(rowIndent) + len("    # ")
			room = p.width - cellsAt
		}
		if ncols > 0 {
			if total := 2*(ncols-1) + sum(colW); total > room {
				copy(colW[:ncols-1], mostW)
			}
			fitColumns(colW, room)
			used := 0
			for _, w := range colW[:ncols-1] {
				used += w + 2
			}
			colW[ncols-1] = max(room-used, 6) // the last column takes the rest
		}
	}
	cells := func(cs []string) string {
		var b strings.Builder
		for j, c := range cs {
			if j > 0 {
				b.WriteString("  ")
			}
			if w := colW[j]; cols(c) > w {
				c = elide(c, w)
				p.cut++
			}
			if j < len(cs)-1 {
				c = pad(c, colW[j])
			}
			b.WriteString(c)
		}
		return strings.TrimRight(b.String(), " ")
	}
	lead := cellsAt - len("  # ") // the YAML ends before it
	write := func(indent string, r row) {
		switch {
		case len(r.cells) == 0:
			p.yamlLines(indent, r.yaml)
		case sideBySide && cols(indent)+cols(r.yaml) <= lead:
			p.println(pad(indent+r.yaml, lead) + "  # " + cells(r.cells))
		default:
			p.yamlLines(indent, r.yaml)
			p.println(strings.Repeat(" ", cellsAt-len("# ")) + "# " + cells(r.cells))
		}
	}
	write(t.indent, t.head)
	for _, r := range t.rows {
		write(rowIndent, r)
	}
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// fitColumns narrows the widest columns until the columns and the two
// blanks between them fit in room (each keeps at least 6 columns).
func fitColumns(colW []int, room int) {
	total := func() int {
		n := 2 * (len(colW) - 1)
		for _, w := range colW {
			n += w
		}
		return n
	}
	for total() > room {
		widest := 0
		for j, w := range colW {
			if w > colW[widest] {
				widest = j
			}
		}
		if colW[widest] <= 6 {
			return
		}
		colW[widest]--
	}
}

// yamlLines writes a line of YAML (or a comment): as is when it fits; a
// comment wrapped as prose; "key: value" with the value as a YAML
// double-quoted string wrapped with escaped line breaks ("\" at a line's
// end, which YAML removes with the next line's indentation), so that the
// lines paste as the one value.
func (p *page) yamlLines(indent, text string) {
	if p.width == 0 || cols(indent)+cols(text) <= p.width {
		p.println(indent + text)
		return
	}
	if strings.HasPrefix(text, "#") {
		p.text(indent + text)
		return
	}
	key, value, ok := cutYAMLValue(text)
	if !ok {
		p.println(indent + text)
		return
	}
	q := strconv.Quote(value)
	cont := indent + "    "
	line := indent + key
	for q != "" {
		room := p.width - cols(line) - 1 // the "\"
		if cols(q) <= room+1 {
			line += q
			break
		}
		head, _ := splitCols(q, max(room, 1))
		// Never break inside an escape or a character, nor before a
		// blank (YAML drops a continuation line's leading blanks).
		cut := len(head)
		for cut > 1 && (escapeAt(q, cut) || q[cut] == ' ' || !utf8.RuneStart(q[cut])) {
			cut--
		}
		p.println(line + q[:cut] + `\`)
		line, q = cont, q[cut:]
	}
	p.println(line)
}

// escapeAt reports whether a cut of s before byte k falls inside a
// backslash escape (\n, \x41, \u00e9 …).
func escapeAt(s string, k int) bool {
	for i := max(0, k-10); i < k; i++ {
		if s[i] == '\\' && !escapedBackslash(s, i) {
			n := 2
			switch s[i+1 : i+2] {
			case "x":
				n = 4
			case "u":
				n = 6
			case "U":
				n = 10
			}
			if i+n > k {
				return true
			}
		}
	}
	return false
}

func escapedBackslash(s string, i int) bool {
	n := 0
	for j := i - 1; j >= 0 && s[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

// cutYAMLValue splits "key: value" or "- key: value" after ": ".
func cutYAMLValue(text string) (key, value string, ok bool) {
	i := strings.Index(text, ": ")
	if i < 0 {
		return "", "", false
	}
	value = text[i+2:]
	if u, err := strconv.Unquote(value); err == nil && strings.HasPrefix(value, `"`) {
		value = u
	}
	return text[:i+2], value, true
}

// yamlScalar writes s as a YAML scalar that reads back as s: plain when
// that is unambiguous, else double-quoted.
func yamlScalar(s string) string {
	if plainSafe(s) {
		return s
	}
	return strconv.Quote(s)
}

// plainSafe reports whether s reads back as the same string when written
// as a plain YAML scalar in block context.
func plainSafe(s string) bool {
	if s == "" || s != strings.TrimSpace(s) || strings.ContainsAny(s[:1], "-?:,[]{}#&*!|>'\"%@`~") {
		return false
	}
	if strings.Contains(s, ": ") || strings.Contains(s, " #") || strings.HasSuffix(s, ":") {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f || !utf8.ValidRune(r) || r == utf8.RuneError {
			return false
		}
	}
	switch strings.ToLower(s) {
	case "true", "false", "yes", "no", "on", "off", "y", "n", "null", "~":
		return false
	}
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return false
	}
	if _, err := strconv.ParseInt(s, 0, 64); err == nil {
		return false
	}
	return true
}

// collectorEscape writes a value as the collector's configuration must
// hold it to deliver it unchanged: the collector turns "$$" into "$" and
// expands "${…}", so "$$params" is written "$$$$params".
func collectorEscape(v string) string {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '$' && (i+1 < len(v) && (v[i+1] == '$' || v[i+1] == '{') || i > 0 && v[i-1] == '$') {
			b.WriteString("$$")
			continue
		}
		b.WriteByte(v[i])
	}
	return b.String()
}
