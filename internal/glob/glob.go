// Package glob compiles the name patterns users write for function: and
// source_file: (and the probe browser's arguments): a Glob matches symbol
// names and source paths. It is plain Go, shared by the configuration's
// checks (internal/config) and the DWARF reader (internal/debuginfo).
package glob

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Glob is a compiled name pattern. Its syntax is that of path.Match with
// two changes that suit symbol names:
//
//   - "*" matches any run of characters, including ".", "/", ":" and
//     parentheses, so "main.*" matches every function of package main and
//     "srv::*" every C++ function in namespace srv; nothing is special about
//     separators.
//   - "*" right after "(" is a literal asterisk, so that Go method names can
//     be written as they are: "main.(*Server).*" matches
//     "main.(*Server).Handle" (the first "*" is literal, the last a
//     wildcard). Write "(\*" for the same literal explicitly, and "(**" for a
//     literal "(*" followed by a wildcard.
//
// "?" matches one character, "[abc]", "[a-z]" and "[^a-z]" (or "[!a-z]")
// one character of a class, and "\c" the character c itself: write "\[" for
// the "[" of a Go generic instantiation such as "main.Map\[go.shape.int\]".
// "[]", which would be an empty class, is the two characters themselves, as
// in Go's slice types: so every Go function name, generic instantiations
// such as "slices.Sort[go.shape.[]uint8]" included, compiles (and the
// planner takes a pattern that is exactly a function's name as that
// function, see config.FunctionIsPattern).
type Glob struct {
	text  string
	toks  []globTok
	plain bool
}

type globKind uint8

const (
	globLit   globKind = iota
	globAny            // *
	globOne            // ?
	globClass          // [...]
)

type globTok struct {
	kind   globKind
	lit    string
	neg    bool
	ranges [][2]rune
}

// Error says where a pattern went wrong.
type Error struct {
	Pattern string
	// Column is the 1-based byte column of the problem.
	Column int
	Msg    string
}

// Error formats the error as `pattern "[x" at column 1: unterminated "["`.
func (e *Error) Error() string {
	return fmt.Sprintf("pattern %q at column %d: %s", e.Pattern, e.Column, e.Msg)
}

// maxGlobLen bounds a pattern's length in bytes.
const maxGlobLen = 4096

// Compile compiles a pattern; its errors are *Error.
func Compile(pattern string) (*Glob, error) {
	if len(pattern) > maxGlobLen {
		return nil, &Error{pattern, maxGlobLen + 1, fmt.Sprintf("longer than %d bytes", maxGlobLen)}
	}
	g := &Glob{text: pattern, plain: true}
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			g.toks = append(g.toks, globTok{kind: globLit, lit: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(pattern); {
		c := pattern[i]
		switch {
		case c == '\\':
			if i+1 >= len(pattern) {
				return nil, &Error{pattern, i + 1, `trailing "\"`}
			}
			_, n := utf8.DecodeRuneInString(pattern[i+1:])
			lit.WriteString(pattern[i+1 : i+1+n])
			i += 1 + n
		case c == '*' && i > 0 && pattern[i-1] == '(' && !escapedAt(pattern, i-1):
			lit.WriteByte('*')
			i++
		case c == '*':
			flush()
			g.plain = false
			if n := len(g.toks); n == 0 || g.toks[n-1].kind != globAny {
				g.toks = append(g.toks, globTok{kind: globAny})
			}
			i++
		case c == '?':
			flush()
			g.plain = false
			g.toks = append(g.toks, globTok{kind: globOne})
			i++
		case c == '[' && i+1 < len(pattern) && pattern[i+1] == ']':
			lit.WriteString("[]")
			i += 2
		case c == '[':
			flush()
			g.plain = false
			tok, n, err := parseClass(pattern, i)
			if err != nil {
				return nil, err
			}
			g.toks = append(g.toks, tok)
			i += n
		default:
			lit.WriteByte(c)
			i++
		}
	}
	flush()
	return g, nil
}

// escapedAt reports whether the byte at i is escaped by a backslash.
func escapedAt(s string, i int) bool {
	n := 0
	for j := i - 1; j >= 0 && s[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

// parseClass parses the class starting with "[" at i; it returns the token
// and its length in bytes.
func parseClass(p string, i int) (globTok, int, error) {
	tok := globTok{kind: globClass}
	j := i + 1
	if j < len(p) && (p[j] == '^' || p[j] == '!') {
		tok.neg = true
		j++
	}
	readChar := func() (rune, error) {
		if j >= len(p) {
			return 0, &Error{p, i + 1, `unterminated "["`}
		}
		if p[j] == '\\' {
			j++
			if j >= len(p) {
				return 0, &Error{p, j, `trailing "\"`}
			}
		}
		r, n := utf8.DecodeRuneInString(p[j:])
		j += n
		return r, nil
	}
	first := true
	for {
		if j >= len(p) {
			return globTok{}, 0, &Error{p, i + 1, `unterminated "["`}
		}
		if p[j] == ']' && !first {
			j++
			break
		}
		if p[j] == ']' && first {
			return globTok{}, 0, &Error{p, j + 1, `empty character class`}
		}
		first = false
		lo, err := readChar()
		if err != nil {
			return globTok{}, 0, err
		}
		hi := lo
		if j+1 < len(p) && p[j] == '-' && p[j+1] != ']' {
			j++
			if hi, err = readChar(); err != nil {
				return globTok{}, 0, err
			}
			if hi < lo {
				return globTok{}, 0, &Error{p, j, fmt.Sprintf("range %q-%q is backwards", lo, hi)}
			}
		}
		tok.ranges = append(tok.ranges, [2]rune{lo, hi})
	}
	return tok, j - i, nil
}

// String returns the pattern as written.
func (g *Glob) String() string { return g.text }

// Literal reports whether the pattern has no wildcard, so that it matches
// exactly one string (itself, with escapes removed).
func (g *Glob) Literal() bool { return g.plain }

// Match reports whether the whole of s matches the pattern.
func (g *Glob) Match(s string) bool {
	return matchToks(g.toks, s)
}

// matchToks matches with one backtracking point per "*": the classic
// linear-time algorithm for patterns whose only repetition is "*".
func matchToks(toks []globTok, s string) bool {
	ti, si := 0, 0
	starT, starS := -1, 0
	for {
		if ti < len(toks) {
			t := toks[ti]
			switch t.kind {
			case globAny:
				starT, starS = ti, si
				ti++
				continue
			case globLit:
				if strings.HasPrefix(s[si:], t.lit) {
					ti++
					si += len(t.lit)
					continue
				}
			case globOne, globClass:
				if si < len(s) {
					r, n := utf8.DecodeRuneInString(s[si:])
					if t.kind == globOne || t.classHas(r) {
						ti++
						si += n
						continue
					}
				}
			}
		} else if si == len(s) {
			return true
		}
		if starT < 0 || starS >= len(s) {
			return false
		}
		_, n := utf8.DecodeRuneInString(s[starS:])
		starS += n
		ti, si = starT+1, starS
	}
}

func (t globTok) classHas(r rune) bool {
	in := false
	for _, rg := range t.ranges {
		if r >= rg[0] && r <= rg[1] {
			in = true
			break
		}
	}
	return in != t.neg
}

// MatchPath matches a source file path as a path suffix of whole
// components: the pattern matches the whole path or its end after a "/"
// ("server.c", "app/server.c", "*/app/*.c" and "/src/*" all match
// "/src/app/server.c"; "pp/server.c" does not). A relative path, such as
// the compile unit "libio/fileops.c" of a reproducible build (DW_AT_name
// "fileops.c" under DW_AT_comp_dir "./libio"), lies under some directory:
// "*/libio/fileops.c" matches it as it matches "/build/glibc/libio/fileops.c",
// and only a pattern that starts with "/" needs an absolute path.
func (g *Glob) MatchPath(p string) bool {
	if g.Match(p) {
		return true
	}
	if !strings.HasPrefix(p, "/") && !strings.HasPrefix(g.text, "/") && g.Match("/"+p) {
		return true
	}
	for i := 0; i+1 < len(p); i++ {
		if p[i] == '/' && g.Match(p[i+1:]) {
			return true
		}
	}
	return false
}
