package receiver

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/confmap"
)

// The documents whose YAML examples TestDocsConfigExamples loads, relative
// to this package: the README and every page of docs/.
const (
	docsReadme = "../README.md"
	docsGlob   = "../docs/*.md"
)

// docsEnv holds the values the examples' ${env:NAME} references resolve
// to: an example may only name these.
var docsEnv = map[string]string{
	"UPROBE_DEMO_DIR": "/opt/demo",
}

// docBlock is one ```yaml block of a document.
type docBlock struct {
	file   string
	line   int    // the line of its opening fence, 1-based
	marker string // the docs-test marker before it: "", "skip …", "invalid …", "ocb"
	text   string
}

// where names the block in failures, as an editor jumps to it.
func (b docBlock) where() string {
	return fmt.Sprintf("%s:%d", strings.TrimPrefix(b.file, "../"), b.line)
}

// markerRE matches the HTML comment that may stand on the line before a
// block (blank lines between are allowed).
var markerRE = regexp.MustCompile(`^<!--\s*docs-test:\s*(.*?)\s*-->$`)

// yamlBlocks returns the ```yaml blocks of a Markdown file, with the
// docs-test marker that precedes each, dedented to their fence.
func yamlBlocks(t *testing.T, file string) []docBlock {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	var (
		out    []docBlock
		cur    *docBlock
		indent string
		body   strings.Builder
		marker string // the marker seen since the last non-blank line
	)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		if cur != nil {
			if trimmed == "```" {
				cur.text = body.String()
				out = append(out, *cur)
				cur = nil
				continue
			}
			body.WriteString(strings.TrimPrefix(line, indent))
			body.WriteByte('\n')
			continue
		}
		switch {
		case trimmed == "```yaml" || trimmed == "```yml":
			indent = line[:len(line)-len(strings.TrimLeft(line, " "))]
			cur = &docBlock{file: file, line: n, marker: marker}
			body.Reset()
			marker = ""
		case markerRE.MatchString(trimmed):
			marker = markerRE.FindStringSubmatch(trimmed)[1]
		case trimmed != "":
			marker = ""
		}
	}
	require.NoError(t, sc.Err())
	require.Nil(t, cur, "%s: a ```yaml block is not closed", file)
	return out
}

// docsProvider serves the examples to a confmap.Resolver (scheme "docs",
// URI "docs:N"), so that they are resolved as the collector resolves its
// configuration files: $$ escapes and ${env:…} references expand.
type docsProvider struct{ blocks []docBlock }

func (p *docsProvider) Retrieve(_ context.Context, uri string, _ confmap.WatcherFunc) (*confmap.Retrieved, error) {
	var i int
	if _, err := fmt.Sscanf(uri, "docs:%d", &i); err != nil || i < 0 || i >= len(p.blocks) {
		return nil, fmt.Errorf("no example %q", uri)
	}
	return confmap.NewRetrievedFromYAML([]byte(p.blocks[i].text))
}
func (p *docsProvider) Scheme() string                 { return "docs" }
func (p *docsProvider) Shutdown(context.Context) error { return nil }

// envProvider resolves ${env:NAME} from docsEnv.
type envProvider struct{}

func (envProvider) Retrieve(_ context.Context, uri string, _ confmap.WatcherFunc) (*confmap.Retrieved, error) {
	name := strings.TrimPrefix(uri, "env:")
	v, ok := docsEnv[name]
	if !ok {
		return nil, fmt.Errorf("${env:%s}: an example may only name the variables of docsEnv", name)
	}
	return confmap.NewRetrieved(v)
}
func (envProvider) Scheme() string                 { return "env" }
func (envProvider) Shutdown(context.Context) error { return nil }

// resolveExample resolves block i of p as the collector resolves a
// configuration file.
func resolveExample(p *docsProvider, i int) (*confmap.Conf, error) {
	res, err := confmap.NewResolver(confmap.ResolverSettings{
		URIs: []string{fmt.Sprintf("docs:%d", i)},
		ProviderFactories: []confmap.ProviderFactory{
			confmap.NewProviderFactory(func(confmap.ProviderSettings) confmap.Provider { return p }),
			confmap.NewProviderFactory(func(confmap.ProviderSettings) confmap.Provider { return envProvider{} }),
		},
		DefaultScheme: "env",
	})
	if err != nil {
		return nil, err
	}
	return res.Resolve(context.Background())
}

// loadReceivers loads every uprobe receiver of a collector configuration
// (receivers: uprobe or uprobe/NAME) the way the collector does: the
// factory's default configuration, the receiver's section unmarshalled
// over it (unknown keys refused), then validated. It returns how many it
// loaded and every error, each prefixed with the receiver's id.
func loadReceivers(conf *confmap.Conf) (int, error) {
	recv, err := conf.Sub("receivers")
	if err != nil {
		return 0, err
	}
	factory := NewFactory()
	var ids []string
	for id := range recv.ToStringMap() {
		if typ, _, _ := strings.Cut(id, "/"); typ == factory.Type().String() {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	if len(ids) == 0 {
		return 0, fmt.Errorf("no %s receiver under receivers:", factory.Type())
	}
	var errs []string
	for _, id := range ids {
		sub, err := recv.Sub(id)
		if err == nil {
			cfg := factory.CreateDefaultConfig()
			if err = sub.Unmarshal(cfg); err == nil {
				err = confmap.Validate(cfg)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Sprintf("receivers::%s: %v", id, err))
		}
	}
	if len(errs) > 0 {
		return len(ids), fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return len(ids), nil
}

// TestDocsConfigExamples loads every ```yaml block of README.md and
// docs/*.md, so that no example in the documents is one the collector
// would refuse. The convention, stated in docs/configuration.md:
//
//   - a block with a top-level receivers: key is a collector configuration:
//     each uprobe receiver in it (uprobe, uprobe/NAME) is resolved as the
//     collector resolves its files ($$ escapes, ${env:…}), unmarshalled
//     over the factory's default configuration with unknown keys refused,
//     and validated; it must be accepted;
//   - a block after <!-- docs-test: invalid "TEXT" --> shows a mistake on
//     purpose: it must be refused, with an error containing TEXT;
//   - a block after <!-- docs-test: ocb --> is an ocb manifest: its entry
//     for this receiver must name this module and an existing package, as
//     builder-config.yaml does;
//   - a block after <!-- docs-test: skip REASON --> is not a collector
//     configuration (a Kubernetes object, say): it must parse as YAML;
//   - any other ```yaml block fails the test.
//
// It reads files only: no root, no kernel.
func TestDocsConfigExamples(t *testing.T) {
	files, err := filepath.Glob(docsGlob)
	require.NoError(t, err)
	files = append([]string{docsReadme}, files...)
	var blocks []docBlock
	for _, f := range files {
		blocks = append(blocks, yamlBlocks(t, f)...)
	}
	p := &docsProvider{blocks: blocks}
	loaded, refused, receivers := 0, 0, 0
	for i, b := range blocks {
		t.Run(strings.ReplaceAll(b.where(), "/", "_"), func(t *testing.T) {
			marker, arg, _ := strings.Cut(b.marker, " ")
			switch marker {
			case "skip":
				require.NotEmpty(t, strings.TrimSpace(arg), "%s: say why the block is skipped: <!-- docs-test: skip REASON -->", b.where())
				_, err := confmap.NewRetrievedFromYAML([]byte(b.text))
				require.NoError(t, err, "%s: not YAML", b.where())
				return
			case "ocb":
				checkManifest(t, b)
				return
			case "invalid", "":
			default:
				t.Fatalf("%s: unknown marker <!-- docs-test: %s -->: want invalid \"TEXT\", ocb or skip REASON", b.where(), b.marker)
			}
			if !isCollectorConfig(b.text) {
				t.Fatalf("%s: a ```yaml block must be a collector configuration (with a top-level receivers:), or be marked <!-- docs-test: skip REASON -->", b.where())
			}
			conf, err := resolveExample(p, i)
			require.NoError(t, err, "%s: resolving the example", b.where())
			n, err := loadReceivers(conf)
			if marker == "invalid" {
				want := strings.Trim(strings.TrimSpace(arg), `"`)
				require.NotEmpty(t, want, `%s: say what the error must contain: <!-- docs-test: invalid "TEXT" -->`, b.where())
				require.Error(t, err, "%s: the example is marked invalid, and the receiver accepts it", b.where())
				assert.Contains(t, err.Error(), want, "%s", b.where())
				refused++
				return
			}
			require.NoError(t, err, "%s: the collector would refuse this example", b.where())
			loaded++
			receivers += n
		})
	}
	t.Logf("%d documents, %d yaml blocks: %d configurations loaded (%d receivers), %d refused as marked", len(files), len(blocks), loaded, receivers, refused)
	// The extraction itself must keep working: the README alone shows
	// more than one configuration.
	assert.GreaterOrEqual(t, loaded, 10, "examples loaded")
}

// isCollectorConfig says whether text is YAML with a top-level receivers:
// map, as a collector configuration has.
func isCollectorConfig(text string) bool {
	r, err := confmap.NewRetrievedFromYAML([]byte(text))
	if err != nil {
		return false
	}
	raw, err := r.AsRaw()
	if err != nil {
		return false
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return false
	}
	_, ok = m["receivers"].(map[string]any)
	return ok
}

// checkManifest checks the ocb manifest of a block against this module:
// the entry that imports a package of it names the module (gomod), a
// package that exists (import) and the name builder-config.yaml gives it.
func checkManifest(t *testing.T, b docBlock) {
	t.Helper()
	module := modulePath(t)
	entry := manifestEntry(t, b.text, module)
	require.NotNil(t, entry, "%s: no receivers: entry imports a package of %s", b.where(), module)
	gomod, _ := entry["gomod"].(string)
	gomodPath, _, _ := strings.Cut(gomod, " ")
	assert.Equal(t, module, gomodPath, "%s: gomod", b.where())
	imp, _ := entry["import"].(string)
	dir := filepath.Join("..", strings.TrimPrefix(imp, module))
	_, err := os.Stat(dir)
	assert.NoError(t, err, "%s: import %s is no package of this module", b.where(), imp)

	raw, err := os.ReadFile("../builder-config.yaml")
	require.NoError(t, err)
	ours := manifestEntry(t, string(raw), module)
	require.NotNil(t, ours, "builder-config.yaml has no entry for this receiver")
	for _, k := range []string{"import", "name"} {
		assert.Equal(t, ours[k], entry[k], "%s: %s differs from builder-config.yaml's", b.where(), k)
	}
}

// manifestEntry returns the receivers: entry of an ocb manifest that
// imports a package of module.
func manifestEntry(t *testing.T, text, module string) map[string]any {
	t.Helper()
	r, err := confmap.NewRetrievedFromYAML([]byte(text))
	require.NoError(t, err)
	raw, err := r.AsRaw()
	require.NoError(t, err)
	m, _ := raw.(map[string]any)
	list, _ := m["receivers"].([]any)
	for _, e := range list {
		entry, _ := e.(map[string]any)
		if imp, _ := entry["import"].(string); strings.HasPrefix(imp, module+"/") {
			return entry
		}
	}
	return nil
}

// modulePath returns the module path of ../go.mod.
func modulePath(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("../go.mod")
	require.NoError(t, err)
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "module "); ok {
			return strings.TrimSpace(rest)
		}
	}
	t.Fatal("go.mod has no module line")
	return ""
}

// TestDocsExamplesResolveAsTheCollector: the examples are resolved as the
// collector resolves its files, so that what the documents say about the
// $$ escape holds: $$$$params reaches the receiver as $$params, a single $
// before a name stays, and ${env:…} expands.
func TestDocsExamplesResolveAsTheCollector(t *testing.T) {
	p := &docsProvider{blocks: []docBlock{{text: `
receivers:
  uprobe:
    targets:
      - path: ${env:UPROBE_DEMO_DIR}/demo
        spans:
          - function: work
            attributes:
              args: $$$$params
              id: $req->id
`}}}
	conf, err := resolveExample(p, 0)
	require.NoError(t, err)
	n, err := loadReceivers(conf)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	sub, err := conf.Sub("receivers::uprobe")
	require.NoError(t, err)
	cfg := createDefaultConfig()
	require.NoError(t, sub.Unmarshal(cfg))
	require.Len(t, cfg.Targets, 1)
	assert.Equal(t, "/opt/demo/demo", cfg.Targets[0].Path)
	assert.Equal(t, map[string]string{"args": "$$params", "id": "$req->id"}, cfg.Targets[0].Spans[0].Attributes)
}
