package procfs

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
)

// Selector chooses processes by what they run: the receiver's process
// selector as written in the configuration. At least one field must be set;
// a process matches when every field set matches.
type Selector struct {
	// Executable is a glob on the path of the process's executable as the
	// process sees it (the target of /proc/PID/exe). Pattern elements
	// follow path.Match ('*' and '?' do not cross '/', '[a-z]' classes,
	// '\\' escapes) and match the path's elements one by one; an element
	// "**" matches any number of elements, none included
	// ("/opt/**/bin/java"). A pattern without '/' matches the base name
	// alone ("python3*" matches /usr/bin/python3.11). Otherwise the
	// pattern must be absolute or start with "**/".
	Executable string `mapstructure:"executable"`
	// CommandLine is a regular expression (Go's RE2 syntax) searched in the
	// process's command line: its arguments joined by spaces, at most
	// MaxCommandLine bytes. It is not anchored: use ^ and $ to match the
	// whole line.
	CommandLine string `mapstructure:"command_line"`
}

// Matcher is a compiled [Selector]. It is safe for concurrent use.
type Matcher struct {
	sel      Selector
	baseOnly bool     // the pattern has no '/': match the base name
	elems    []string // the pattern's elements, "**" included
	re       *regexp.Regexp
}

// maxPatternElems bounds the elements of an executable pattern (and so the
// matching work: elements × path elements).
const maxPatternElems = 64

// Compile checks the selector and compiles it once for matching many
// processes. Its errors name the field ("executable: …", "command_line: …").
func (s Selector) Compile() (*Matcher, error) {
	if s.Executable == "" && s.CommandLine == "" {
		return nil, errors.New("process selector: set executable, command_line or both")
	}
	m := &Matcher{sel: s}
	var errs []error
	if s.Executable != "" {
		if err := m.compileGlob(s.Executable); err != nil {
			errs = append(errs, fmt.Errorf("executable: %w", err))
		}
	}
	if s.CommandLine != "" {
		re, err := regexp.Compile(s.CommandLine)
		if err != nil {
			errs = append(errs, fmt.Errorf("command_line: %w", err))
		}
		m.re = re
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *Matcher) compileGlob(p string) error {
	if !strings.Contains(p, "/") {
		if p == "**" {
			return fmt.Errorf("pattern %q: \"**\" matches whole paths; use \"*\" for any base name", p)
		}
		if err := checkElem(p); err != nil {
			return fmt.Errorf("pattern %q: %w", p, err)
		}
		m.baseOnly, m.elems = true, []string{p}
		return nil
	}
	if !strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "**/") {
		return fmt.Errorf("pattern %q: a pattern with '/' must be absolute or start with \"**/\" (a pattern without '/' matches the base name)", p)
	}
	elems := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if len(elems) > maxPatternElems {
		return fmt.Errorf("pattern %q: more than %d elements", p, maxPatternElems)
	}
	for _, e := range elems {
		switch {
		case e == "":
			return fmt.Errorf("pattern %q: empty element (\"//\" or a trailing '/')", p)
		case e == "**":
		case strings.Contains(e, "**"):
			return fmt.Errorf("pattern %q: \"**\" must be a whole element, as in /opt/**/bin", p)
		default:
			if err := checkElem(e); err != nil {
				return fmt.Errorf("pattern %q: %w", p, err)
			}
		}
	}
	m.elems = elems
	return nil
}

// checkElem reports a malformed path.Match pattern element.
func checkElem(e string) error {
	if _, err := path.Match(e, ""); err != nil {
		return fmt.Errorf("element %q: %w", e, err)
	}
	return nil
}

// Selector returns the selector the matcher was compiled from.
func (m *Matcher) Selector() Selector { return m.sel }

// NeedsCommandLine says whether Match looks at the command line, so a
// caller can skip reading it.
func (m *Matcher) NeedsCommandLine() bool { return m.re != nil }

// Match says whether a process with this executable path (as the process
// sees it) and command line is selected. An empty executable (a kernel
// thread, or a process whose /proc/PID/exe could not be read) never
// matches an executable pattern.
func (m *Matcher) Match(executable, commandLine string) bool {
	if m.elems != nil {
		if executable == "" || !m.matchPath(executable) {
			return false
		}
	}
	if m.re != nil && !m.re.MatchString(commandLine) {
		return false
	}
	return true
}

func (m *Matcher) matchPath(p string) bool {
	if m.baseOnly {
		ok, _ := path.Match(m.elems[0], path.Base(p))
		return ok
	}
	if !strings.HasPrefix(p, "/") {
		return false
	}
	return matchElems(m.elems, strings.Split(path.Clean(p)[1:], "/"))
}

// matchElems matches pattern elements against path elements, "**" standing
// for any number of path elements, in O(len(pat)×len(elems)) time.
func matchElems(pat, elems []string) bool {
	// ok[j] says whether pat[:i] matches elems[:j] for the current i.
	ok := make([]bool, len(elems)+1)
	ok[0] = true
	for _, p := range pat {
		next := make([]bool, len(elems)+1)
		if p == "**" {
			seen := false
			for j := range ok {
				seen = seen || ok[j]
				next[j] = seen
			}
		} else {
			for j := 1; j <= len(elems); j++ {
				if ok[j-1] {
					next[j], _ = path.Match(p, elems[j-1])
				}
			}
		}
		ok = next
	}
	return ok[len(elems)]
}

// MatchProcess reads what the matcher needs about process pid (its
// executable, and its command line only when the selector has one) and
// says whether it is selected. A process whose executable cannot be read
// (gone, a kernel thread, no permission) is reported with the error.
func (m *Matcher) MatchProcess(f FS, pid int) (bool, error) {
	var exe, cmdline string
	if m.elems != nil {
		var err error
		if exe, _, err = f.Executable(pid); err != nil {
			return false, err
		}
	}
	if m.re != nil {
		var err error
		if cmdline, err = f.CommandLine(pid); err != nil {
			return false, err
		}
	}
	return m.Match(exe, cmdline), nil
}
