package fetch

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// PathKind is what a path starts from.
type PathKind uint8

// The roots of a path.
const (
	// PathVariable starts from a named variable: a parameter, a local in
	// scope, a Go result by name, or a global.
	PathVariable PathKind = iota + 1
	// PathReturn is $return: the function's return value (Go: its first
	// result) at a return site.
	PathReturn
	// PathParams is $$params: every parameter, each as its own fetch.
	PathParams
)

// StepKind is one step of a path.
type StepKind uint8

// The steps of a path.
const (
	// StepField selects a struct or union member: ".f" or "->f". Either
	// follows a pointer when the value is one, so "$req.hdr" and
	// "$req->hdr" mean the same; "->" on a non-pointer is an error.
	StepField StepKind = iota + 1
	// StepIndex selects element N of an array, or of what a pointer points
	// to: "[N]".
	StepIndex
)

// Step is one step of a path.
type Step struct {
	Kind StepKind
	// Field is the member name of a StepField.
	Field string
	// Arrow is true for "->".
	Arrow bool
	// Index is N of a StepIndex.
	Index int64
	// Column is the 1-based byte column of the step in the text.
	Column int
}

// Path is a parsed name path such as "$req->hdr->name":
//
//	path  = "$$params" | root { step }
//	root  = "$" ident
//	step  = "->" ident | "." ident | "[" index "]"
//	ident = ( letter | "_" | "~" ) { letter | digit | "_" | "~" }
//	index = decimal | "0x" hex
//
// "$return" is the return value. Blanks may separate tokens. A Go global
// is written with its package, "$main.counter": when no variable is named
// by the root, the root and the following field names are tried as one
// dotted global name, longest first.
type Path struct {
	// Text is the path as written.
	Text string
	Kind PathKind
	// Root is the variable name of a PathVariable.
	Root  string
	Steps []Step
}

// MaxPathSteps bounds the steps of one path.
const MaxPathSteps = 64

// MaxIndex bounds an index in a path.
const MaxIndex = 1 << 31

// PathError says where a path went wrong.
type PathError struct {
	Text string
	// Column is the 1-based byte column of the problem, or len(Text)+1 at
	// the end.
	Column int
	Msg    string
}

// Error formats the error as `path "$a->" at column 5: expected a field
// name`.
func (e *PathError) Error() string {
	return fmt.Sprintf("path %q at column %d: %s", e.Text, e.Column, e.Msg)
}

// IsPath reports whether text is meant as a path (it starts with "$"),
// so that callers can tell paths from other fetch expressions.
func IsPath(text string) bool {
	return strings.HasPrefix(strings.TrimSpace(text), "$")
}

// ParsePath parses a path; its errors are *PathError.
func ParsePath(text string) (*Path, error) {
	p := pathParser{text: text}
	p.space()
	if p.pos >= len(text) || text[p.pos] != '$' {
		return nil, p.errAt(p.pos, `expected "$" (a path starts with $name, $return or $$params)`)
	}
	p.pos++
	if strings.HasPrefix(text[p.pos:], "$") {
		p.pos++
		w := p.ident()
		if w != "params" {
			return nil, p.errAt(p.pos-len(w), `expected "params" after "$$"`)
		}
		p.space()
		if p.pos < len(text) {
			return nil, p.errAt(p.pos, "$$params takes no steps")
		}
		return &Path{Text: text, Kind: PathParams}, nil
	}
	start := p.pos
	root := p.ident()
	if root == "" {
		return nil, p.errAt(start, `expected a name after "$"`)
	}
	path := &Path{Text: text, Kind: PathVariable, Root: root}
	if root == "return" {
		path.Kind, path.Root = PathReturn, ""
	}
	for {
		p.space()
		if p.pos >= len(text) {
			return path, nil
		}
		if len(path.Steps) >= MaxPathSteps {
			return nil, p.errAt(p.pos, fmt.Sprintf("over %d steps", MaxPathSteps))
		}
		col := p.pos + 1
		switch {
		case strings.HasPrefix(text[p.pos:], "->"), text[p.pos] == '.':
			arrow := text[p.pos] == '-'
			if arrow {
				p.pos += 2
			} else {
				p.pos++
			}
			p.space()
			fs := p.pos
			name := p.ident()
			if name == "" {
				return nil, p.errAt(fs, "expected a field name")
			}
			path.Steps = append(path.Steps, Step{Kind: StepField, Field: name, Arrow: arrow, Column: col})
		case text[p.pos] == '[':
			p.pos++
			p.space()
			n, err := p.index()
			if err != nil {
				return nil, err
			}
			p.space()
			if p.pos >= len(text) || text[p.pos] != ']' {
				return nil, p.errAt(p.pos, `expected "]"`)
			}
			p.pos++
			path.Steps = append(path.Steps, Step{Kind: StepIndex, Index: n, Column: col})
		default:
			r, _ := utf8.DecodeRuneInString(text[p.pos:])
			return nil, p.errAt(p.pos, fmt.Sprintf("unexpected %q (want ->field, .field or [N])", r))
		}
	}
}

// String returns the canonical text of the path: "$req->hdr->name".
func (p *Path) String() string {
	var b strings.Builder
	switch p.Kind {
	case PathParams:
		return "$$params"
	case PathReturn:
		b.WriteString("$return")
	default:
		b.WriteString("$" + p.Root)
	}
	for _, s := range p.Steps {
		switch {
		case s.Kind == StepIndex:
			b.WriteString("[" + strconv.FormatInt(s.Index, 10) + "]")
		case s.Arrow:
			b.WriteString("->" + s.Field)
		default:
			b.WriteString("." + s.Field)
		}
	}
	return b.String()
}

type pathParser struct {
	text string
	pos  int
}

func (p *pathParser) errAt(pos int, msg string) *PathError {
	return &PathError{Text: p.text, Column: pos + 1, Msg: msg}
}

func (p *pathParser) space() {
	for p.pos < len(p.text) && (p.text[p.pos] == ' ' || p.text[p.pos] == '\t') {
		p.pos++
	}
}

func isIdentRune(r rune, first bool) bool {
	if r == '_' || r == '~' || unicode.IsLetter(r) {
		return true
	}
	return !first && unicode.IsDigit(r)
}

func (p *pathParser) ident() string {
	start := p.pos
	for p.pos < len(p.text) {
		r, n := utf8.DecodeRuneInString(p.text[p.pos:])
		if r == utf8.RuneError && n <= 1 {
			break
		}
		if !isIdentRune(r, p.pos == start) {
			break
		}
		p.pos += n
	}
	return p.text[start:p.pos]
}

func (p *pathParser) index() (int64, error) {
	start := p.pos
	for p.pos < len(p.text) && (isHexOrX(p.text[p.pos])) {
		p.pos++
	}
	s := p.text[start:p.pos]
	if s == "" {
		return 0, p.errAt(start, "expected an index")
	}
	var (
		n   uint64
		err error
	)
	switch {
	case strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X"):
		n, err = strconv.ParseUint(s[2:], 16, 64)
	case len(s) > 1 && s[0] == '0':
		return 0, p.errAt(start, "leading zero in index (write decimal without it, or hex with 0x)")
	default:
		n, err = strconv.ParseUint(s, 10, 64)
	}
	if err != nil {
		return 0, p.errAt(start, fmt.Sprintf("bad index %q", s))
	}
	if n > MaxIndex {
		return 0, p.errAt(start, fmt.Sprintf("index over %d", int64(MaxIndex)))
	}
	return int64(n), nil
}

func isHexOrX(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == 'x' || c == 'X'
}
