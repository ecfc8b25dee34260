// Package recipe holds the receiver's recipes: the classic user-space
// tracing tools (bcc's dbslower, gethostlatency, sslsniff, ugc, uthreads,
// argdist…) as targets of the receiver's own configuration, with
// OpenTelemetry semantic-convention names. A user writes
//
//	targets:
//	  - recipe: postgresql
//
// and Expand turns that target into the recipe's spans and counters, with
// the target's own fields (path, pid, process, build_id, optional,
// service_name, spans, counters) still applying.
//
// Each recipe is one embedded YAML file, recipes/NAME.yaml, whose target:
// section is written in the schema a user writes (config.Target): it can
// be printed (YAML), copied and changed. Its other sections say where the
// recipe's usual file is (search:), which probes tell that a file is one
// the recipe applies to (applies:), what to say of a file that lacks the
// recipe's probes (lacking:), and the recipe's options, whose values
// replace ${NAME} inside the target's strings and whose spans and counters
// join the target's when they are set.
//
// It is pure Go: it reads no traced file.
package recipe

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"math"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.opentelemetry.io/collector/confmap"

	"github.com/otel-uprobe/uprobereceiver/internal/config"
)

//go:embed recipes/*.yaml
var files embed.FS

// Recipe is one embedded recipe.
type Recipe struct {
	// Name is what a target's recipe: names it by.
	Name string
	// Description says in a sentence what it traces.
	Description string
	// Tested lists the programs and versions it was verified against.
	Tested []string
	// Applies are probe references (usdt:P:N, uprobe:SYMBOL, globs
	// allowed) a file must all have for the recipe to apply to it.
	Applies []string
	// Search are absolute path globs of the recipe's usual file, looked
	// at when the target's path is a name PATH and the library cache do
	// not know.
	Search []string
	// Lacking say why a file lacks the recipe's probes.
	Lacking []config.Lack
	// Program is what the recipe's file must be: "go" for a Go program,
	// "" for any file with the recipe's probes.
	Program string
	// Options are the recipe's options, by name.
	Options map[string]Option

	text []byte // the file
}

// Option is one option of a recipe: a value that replaces ${NAME} in the
// recipe's target, and spans and counters added when it is set (true, or
// not 0 or "").
type Option struct {
	Description string
	// Type is "bool", "integer" or "string".
	Type string
	// Default is the value when the target does not set it.
	Default any
	// Min and Max bound an integer.
	Min, Max int64
	// Spans and Counters join the target's when the option is set; a span
	// replaces the recipe's span of the same name.
	Spans    []config.Span
	Counters []config.Counter
}

// fileSchema is a recipe file.
type fileSchema struct {
	Description string                  `mapstructure:"description"`
	Tested      []string                `mapstructure:"tested"`
	Applies     []string                `mapstructure:"applies"`
	Search      []string                `mapstructure:"search"`
	Lacking     []lackSchema            `mapstructure:"lacking"`
	Program     string                  `mapstructure:"program"`
	Options     map[string]optionSchema `mapstructure:"options"`
	Target      config.Target           `mapstructure:"target"`
}

type lackSchema struct {
	Probes   string `mapstructure:"probes"`
	Sentence string `mapstructure:"sentence"`
}

type optionSchema struct {
	Description string           `mapstructure:"description"`
	Type        string           `mapstructure:"type"`
	Default     any              `mapstructure:"default"`
	Min         *int64           `mapstructure:"min"`
	Max         *int64           `mapstructure:"max"`
	Spans       []config.Span    `mapstructure:"spans"`
	Counters    []config.Counter `mapstructure:"counters"`
}

// all are the recipes by name, read once.
var all, allErr = load()

func load() (map[string]*Recipe, error) {
	entries, err := files.ReadDir("recipes")
	if err != nil {
		return nil, err
	}
	out := map[string]*Recipe{}
	var errs []error
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".yaml")
		text, err := files.ReadFile(path.Join("recipes", e.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r, err := parse(name, text)
		if err != nil {
			errs = append(errs, fmt.Errorf("recipe %s: %w", name, err))
			continue
		}
		out[name] = r
	}
	return out, errors.Join(errs...)
}

// parse reads a recipe file: its options with their defaults, checked.
func parse(name string, text []byte) (*Recipe, error) {
	var f fileSchema
	if err := decode(text, &f); err != nil {
		return nil, err
	}
	if f.Program != "" && f.Program != "go" {
		return nil, fmt.Errorf("program %q: want go, or none", f.Program)
	}
	r := &Recipe{Name: name, Description: f.Description, Tested: f.Tested, Applies: f.Applies, Search: f.Search,
		Program: f.Program, Options: map[string]Option{}, text: text}
	for _, l := range f.Lacking {
		r.Lacking = append(r.Lacking, config.Lack{Probes: l.Probes, Sentence: l.Sentence})
	}
	for on, o := range f.Options {
		opt := Option{Description: o.Description, Type: o.Type, Spans: o.Spans, Counters: o.Counters, Min: math.MinInt64, Max: math.MaxInt64}
		if o.Min != nil {
			opt.Min = *o.Min
		}
		if o.Max != nil {
			opt.Max = *o.Max
		}
		v, err := opt.value(o.Default)
		if err != nil {
			return nil, fmt.Errorf("option %s: default: %w", on, err)
		}
		opt.Default = v
		r.Options[on] = opt
	}
	for _, m := range placeholder.FindAllSubmatch(text, -1) {
		if _, ok := r.Options[string(m[1])]; !ok {
			return nil, fmt.Errorf("${%s} names no option", m[1])
		}
	}
	return r, nil
}

// decode reads YAML text as the collector reads its configuration's
// sections: unknown keys are errors.
func decode(text []byte, into any) error {
	ret, err := confmap.NewRetrievedFromYAML(text)
	if err != nil {
		return err
	}
	conf, err := ret.AsConf()
	if err != nil {
		return err
	}
	return conf.Unmarshal(into)
}

// placeholder is an option's place in a recipe's text.
var placeholder = regexp.MustCompile(`\$\{([a-z_][a-z0-9_]*)\}`)

// value checks a value of the option, as the collector decoded it from
// YAML, and returns it as bool, int64 or string.
func (o Option) value(v any) (any, error) {
	switch o.Type {
	case "bool":
		b, ok := v.(bool)
		if !ok {
			return nil, fmt.Errorf("%s is not true or false", shortValue(v))
		}
		return b, nil
	case "integer":
		var n int64
		switch x := v.(type) {
		case int:
			n = int64(x)
		case int64:
			n = x
		case uint64:
			if x > math.MaxInt64 {
				return nil, fmt.Errorf("%d is too large", x)
			}
			n = int64(x)
		case float64:
			if x != math.Trunc(x) || x < math.MinInt64 || x > math.MaxInt64 {
				return nil, fmt.Errorf("%s is not an integer", shortValue(x))
			}
			n = int64(x)
		case string:
			p, err := strconv.ParseInt(x, 0, 64)
			if err != nil {
				return nil, fmt.Errorf("%s is not an integer", shortValue(x))
			}
			n = p
		default:
			return nil, fmt.Errorf("%s is not an integer", shortValue(v))
		}
		if n < o.Min || n > o.Max {
			return nil, fmt.Errorf("%d is out of range: want %d to %d", n, o.Min, o.Max)
		}
		return n, nil
	case "string":
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%s is not a string", shortValue(v))
		}
		// It becomes telemetry (value names), as names do; and it goes
		// into the recipe's text inside double quotes, which must take it
		// as it is.
		if err := config.CheckTelemetryText("the value", s); err != nil {
			return nil, err
		}
		if i := strings.IndexAny(s, "\"\\$"); i >= 0 {
			return nil, fmt.Errorf("the value %s has %q at byte %d: a recipe's text takes no \", \\ or $", config.QuoteShort(s), s[i], i)
		}
		return s, nil
	}
	return nil, fmt.Errorf("type %q: want bool, integer or string", o.Type)
}

// shortValue names a value of an option as the collector decoded it from
// YAML, for an error: a string quoted (at most 64 bytes of it), a number
// or boolean as it is, anything else by its kind.
func shortValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return config.QuoteShort(x)
	case bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64:
		return fmt.Sprint(x)
	case []any:
		return "a list"
	case map[string]any:
		return "a map"
	}
	return fmt.Sprintf("a value of type %T", v)
}

// set says whether a value turns the option's spans and counters on.
func set(v any) bool {
	switch x := v.(type) {
	case bool:
		return x
	case int64:
		return x != 0
	case string:
		return x != ""
	}
	return false
}

// text returns v as it replaces ${NAME}.
func text(v any) string {
	switch x := v.(type) {
	case bool:
		return strconv.FormatBool(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case string:
		return x
	}
	return ""
}

// Names returns the names of the recipes, sorted.
func Names() []string {
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Get returns the recipe of that name.
func Get(name string) (*Recipe, error) {
	if allErr != nil {
		return nil, fmt.Errorf("reading the recipes: %w", allErr)
	}
	r, ok := all[name]
	if !ok {
		return nil, fmt.Errorf("no recipe %s (recipes: %s)", config.QuoteShort(name), strings.Join(Names(), ", "))
	}
	return r, nil
}

// OptionNames returns the names of the recipe's options, sorted.
func (r *Recipe) OptionNames() []string {
	names := make([]string, 0, len(r.Options))
	for n := range r.Options {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// values returns every option's value: the target's, or the default.
func (r *Recipe) values(given map[string]any) (map[string]any, error) {
	out := map[string]any{}
	for n, o := range r.Options {
		out[n] = o.Default
	}
	var errs []error
	for _, n := range sortedKeys(given) {
		o, ok := r.Options[n]
		if !ok {
			errs = append(errs, fmt.Errorf("recipe_options: %s: recipe %s has no such option (options: %s)", config.QuoteShort(n), r.Name, strings.Join(r.OptionNames(), ", ")))
			continue
		}
		v, err := o.value(given[n])
		if err != nil {
			errs = append(errs, fmt.Errorf("recipe_options: %s: %w", n, err))
			continue
		}
		out[n] = v
	}
	if len(errs) > maxOptionErrors {
		errs = append(errs[:maxOptionErrors], fmt.Errorf("recipe_options: %d more problems", len(errs)-maxOptionErrors))
	}
	return out, errors.Join(errs...)
}

// maxOptionErrors bounds the problems of one target's recipe_options said
// one by one; the others are counted.
const maxOptionErrors = 8

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// substitute replaces each ${NAME} of the recipe's text by its option's
// value.
func (r *Recipe) substitute(values map[string]any) []byte {
	return placeholder.ReplaceAllFunc(r.text, func(m []byte) []byte {
		return []byte(text(values[string(m[2:len(m)-1])]))
	})
}

// Target returns the recipe's target with these option values (nil for
// the defaults): its own spans and counters, and those of the options
// that are set, an option's span replacing the recipe's of the same name.
func (r *Recipe) Target(options map[string]any) (config.Target, error) {
	values, err := r.values(options)
	if err != nil {
		return config.Target{}, err
	}
	var f fileSchema
	if err := decode(r.substitute(values), &f); err != nil {
		return config.Target{}, fmt.Errorf("recipe %s: %w", r.Name, err)
	}
	t := f.Target
	for _, n := range r.OptionNames() {
		if !set(values[n]) {
			continue
		}
		o := f.Options[n]
		t.Spans = mergeSpans(t.Spans, o.Spans)
		t.Counters = append(t.Counters, o.Counters...)
	}
	t.Recipe, t.RecipeOptions = r.Name, options
	t.FromRecipe = &config.RecipeFacts{Search: r.Search, Lacking: r.Lacking, Program: r.Program}
	return t, nil
}

// mergeSpans returns base with more added: a span of more replaces the
// span of base with its name, in place; the others are appended.
func mergeSpans(base, more []config.Span) []config.Span {
	out := append([]config.Span(nil), base...)
	for _, s := range more {
		replaced := false
		for i := range out {
			if out[i].SpanName("") == s.SpanName("") && !out[i].IsPattern() && !s.IsPattern() {
				out[i], replaced = s, true
				break
			}
		}
		if !replaced {
			out = append(out, s)
		}
	}
	return out
}

// Expand returns targets with every recipe target expanded: the recipe's
// target, with the target's own path (when set), pid, process, optional,
// build_id and service_name (when set), and the target's own spans (one
// named as a recipe span replaces it) and counters after the recipe's.
// Targets without a recipe are returned as they are, and targets itself
// when none has a recipe (it shares their backing array). The error names each
// target that could not be expanded.
func Expand(targets []config.Target) ([]config.Target, error) {
	if !slices.ContainsFunc(targets, func(t config.Target) bool { return t.Recipe != "" }) {
		return targets, nil // no copy of what the caller keeps
	}
	out := make([]config.Target, len(targets))
	var errs []error
	for i, t := range targets {
		if t.Recipe == "" {
			out[i] = t
			continue
		}
		x, err := expand(t)
		if err != nil {
			where := fmt.Sprintf("targets[%d]", i)
			if _, known := all[t.Recipe]; known {
				where += " (recipe " + t.Recipe + ")" // an unknown name is quoted, short, in err
			}
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			out[i] = t
			continue
		}
		out[i] = x
	}
	return out, errors.Join(errs...)
}

func expand(t config.Target) (config.Target, error) {
	r, err := Get(t.Recipe)
	if err != nil {
		return t, err
	}
	x, err := r.Target(t.RecipeOptions)
	if err != nil {
		return t, err
	}
	if t.Path != "" {
		x.Path = t.Path
	}
	if x.Path == "" {
		return t, fmt.Errorf("recipe %s has no usual file: give the target's path", r.Name)
	}
	x.PID, x.Process, x.Optional, x.BuildID = t.PID, t.Process, t.Optional, t.BuildID
	if t.ServiceName != "" {
		x.ServiceName = t.ServiceName
	}
	if t.ThreadContext != nil {
		x.ThreadContext = t.ThreadContext
	}
	x.Spans = mergeSpans(x.Spans, t.Spans)
	x.Counters = append(x.Counters, t.Counters...)
	return x, nil
}

// YAML returns the recipe's target as a collector configuration with the
// options' defaults: the receivers: section a user can paste and change,
// preceded by comments that say what the recipe is and what its options
// do.
func (r *Recipe) YAML() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# recipe %s: %s\n", r.Name, r.Description)
	for _, v := range r.Tested {
		fmt.Fprintf(&b, "# tested: %s\n", v)
	}
	fmt.Fprintf(&b, "# As a target, \"- recipe: %s\" is this target; below it is written out, to copy and change.\n", r.Name)
	if len(r.Options) > 0 {
		fmt.Fprintf(&b, "# Options (recipe_options: {NAME: VALUE} on a \"recipe: %s\" target):\n", r.Name)
		for _, n := range r.OptionNames() {
			o := r.Options[n]
			fmt.Fprintf(&b, "#   %s (%s, default %v): %s\n", n, o.Type, o.Default, o.Description)
		}
	}
	b.WriteString("receivers:\n  uprobe:\n    targets:\n")
	values, _ := r.values(nil)
	body := targetSection(r.substitute(values))
	for i, line := range body {
		switch {
		case i == 0:
			b.WriteString("      - " + line + "\n")
		case line == "":
			b.WriteString("\n")
		default:
			b.WriteString("        " + line + "\n")
		}
	}
	return b.Bytes()
}

// targetSection returns the lines of the target: section of a recipe
// file, without their two spaces of indentation, comments kept.
func targetSection(text []byte) []string {
	var out []string
	in := false
	for _, line := range strings.Split(string(text), "\n") {
		switch {
		case line == "target:":
			in = true
		case !in:
		case line != "" && line[0] != ' ' && line[0] != '#':
			in = false
		default:
			out = append(out, strings.TrimPrefix(line, "  "))
		}
	}
	for len(out) > 0 && strings.TrimSpace(out[len(out)-1]) == "" {
		out = out[:len(out)-1]
	}
	for len(out) > 0 && strings.HasPrefix(strings.TrimSpace(out[0]), "#") {
		out = out[1:] // the first line follows "- "
	}
	return out
}
