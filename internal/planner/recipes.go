package planner

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/fetch"
	"github.com/otel-uprobe/uprobereceiver/internal/glob"
	"github.com/otel-uprobe/uprobereceiver/internal/plan"
	"github.com/otel-uprobe/uprobereceiver/internal/procfs"
)

// missingProbe is the error of a probe or function the file does not
// have (notFound), which a recipe explains.
type missingProbe struct{ error }

func (m missingProbe) Unwrap() error { return m.error }

// inRecipe names the recipe of target t, if it has one, before err.
func inRecipe(t config.Target, err error) error {
	if err == nil || t.Recipe == "" {
		return err
	}
	return fmt.Errorf("recipe %s: %w", t.Recipe, err)
}

// recipeError names the recipe of target t in err, an error placing ref
// in file fl, and for a probe the file lacks adds the recipe's sentence
// when the file has none of the probes that sentence is about: "recipe
// postgresql: usdt:postgresql:query__start: this postgres has no USDT
// probes: it was built without --enable-dtrace (target …)".
func recipeError(t config.Target, fl *file, ref string, err error) error {
	if err == nil || t.Recipe == "" {
		return err
	}
	var missing missingProbe
	if fl != nil && t.FromRecipe != nil && errors.As(err, &missing) {
		canonical := ref
		if p, perr := config.ParseProbe(ref); perr == nil {
			canonical = p.String()
		}
		for _, l := range t.FromRecipe.Lacking {
			g, gerr := glob.Compile(l.Probes)
			if gerr != nil || !g.Match(canonical) || fl.hasAny(g) {
				continue
			}
			return fmt.Errorf("recipe %s: %s: %s (%w)", t.Recipe, canonical, l.Sentence, err)
		}
	}
	return fmt.Errorf("recipe %s: %w", t.Recipe, err)
}

// recipeFileError refuses a file that is not the program target t's
// recipe reads: a file that is not Go for a recipe that reads Go's types
// and registers (go-http), whatever its functions are named.
func recipeFileError(t config.Target, fl *file) error {
	if t.FromRecipe == nil || t.FromRecipe.Program != "go" || fl.isGo {
		return nil
	}
	return fmt.Errorf("recipe %s: target %s: not a Go program (no Go build information or function table): the %s recipe traces Go programs",
		t.Recipe, fl.path, t.Recipe)
}

// hasAny says whether the file has a USDT probe or a function whose
// reference (usdt:PROVIDER:NAME, uprobe:SYMBOL) g matches.
func (fl *file) hasAny(g *glob.Glob) bool {
	for k := range fl.probes {
		if g.Match("usdt:" + k) {
			return true
		}
	}
	for name := range fl.functions {
		if g.Match("uprobe:" + name) {
			return true
		}
	}
	return false
}

// HasAny says whether the inspected file has a USDT probe or a function
// whose reference (usdt:PROVIDER:NAME, uprobe:SYMBOL) the glob matches:
// the probe browser asks it which recipes apply.
func (in *Inspection) HasAny(pattern string) bool {
	g, err := glob.Compile(pattern)
	if err != nil {
		return false
	}
	if g.Literal() {
		name, isFn := strings.CutPrefix(pattern, "uprobe:")
		if isFn {
			return len(in.fl.functions[name]) > 0
		}
		_, ok := in.fl.probes[strings.TrimPrefix(pattern, "usdt:")]
		return ok
	}
	return in.fl.hasAny(g)
}

// derivedDef puts what span s adds to its records once they are read —
// its error exits aside — into its definition: constant attributes, value
// names, first words, truncations and its metric.
func derivedDef(sd *plan.SpanDef, s config.Span) error {
	for _, k := range sortedKeys(s.ConstantAttributes) {
		sd.Constants = append(sd.Constants, plan.KeyValue{Key: k, Value: s.ConstantAttributes[k]})
	}
	for _, k := range sortedKeys(s.FirstWord) {
		sd.FirstWords = append(sd.FirstWords, plan.Derived{Key: k, From: s.FirstWord[k]})
	}
	for _, k := range sortedKeys(s.Truncate) {
		sd.Truncates = append(sd.Truncates, plan.Derived{Key: k, From: s.Truncate[k]})
	}
	for k, names := range s.ValueNames {
		table, err := config.ParseValueNames(names)
		if err != nil {
			return fmt.Errorf("value_names[%q]: %w", k, err)
		}
		if sd.ValueNames == nil {
			sd.ValueNames = map[string][]fetch.Enumerator{}
		}
		sd.ValueNames[k] = table
	}
	sd.Metric = s.Metric
	return nil
}

// nameValues gives the attribute fetches whose key has value names their
// table: the span builder then writes the names.
func nameValues(fetches []plan.Fetch, names map[string][]fetch.Enumerator) error {
	if len(names) == 0 {
		return nil
	}
	for i := range fetches {
		f := &fetches[i]
		table, ok := names[f.Key]
		if !ok || f.Role != plan.RoleAttribute {
			continue
		}
		if f.Store != plan.StoreInt {
			return fmt.Errorf("value_names[%q]: the attribute is not an integer", f.Key)
		}
		f.Value.Enum = table
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// maxSearched bounds the files the globs of a recipe's usual places may
// give (every PostgreSQL major version installed side by side).
const maxSearched = 16

// searchRecipe opens, in the collector's own view (host), the regular
// files the absolute path globs of a recipe's usual places match, at most
// maxSearched, in the globs' order and each glob's matches sorted. The
// globs are read by descriptor and bounded (procfs.Dir.Glob); a match that
// cannot be opened as a regular file (a directory, a FIFO, a device, no
// permission) is skipped.
func searchRecipe(host *procfs.Dir, globs []string) []Candidate {
	var out []Candidate
	for _, pattern := range globs {
		matches, _, err := host.Glob(pattern, maxSearched)
		if err != nil {
			continue
		}
		for _, m := range matches {
			if len(out) == maxSearched {
				return out
			}
			c, err := openCandidate(host, m, "the recipe's usual place "+pattern)
			if err == nil && c != nil {
				out = append(out, *c)
			}
		}
	}
	return out
}

// firstRegular returns the first path, inside root, that the globs of a
// recipe's usual places match and that is a regular file there, and the
// glob that matched it; "" when none does. Each glob is read by
// descriptor inside the root and bounded (procfs.Dir.Glob): a container's
// links lead only to its own files, its FIFOs, devices and directories are
// not regular files, and its loops of links match nothing.
func firstRegular(root *procfs.Dir, globs []string) (string, string) {
	for _, pattern := range globs {
		matches, _, err := root.Glob(pattern, maxSearched)
		if err != nil {
			continue
		}
		for _, m := range matches {
			if fi, _, err := root.Stat(m); err == nil && fi.Mode().IsRegular() {
				return m, pattern
			}
		}
	}
	return "", ""
}
