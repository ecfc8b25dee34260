// Command benchreadme writes the README's performance section from the
// last `make bench` (docs/benchmarks.json, docs/scale.json and the feature
// table of docs/benchmarks.md), so that the README quotes the measured
// numbers and never drifts from them: `make bench` runs it last, and
// TestReadmeQuotesBenchmarks fails when the README and the documents
// disagree.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/otel-uprobe/uprobereceiver/harness/benchdoc"
)

// Section is the README's performance section, between its markers.
var Section = benchdoc.Section{
	Start: "<!-- performance: written by make bench (harness/benchreadme) -->",
	End:   "<!-- /performance -->",
}

// maxDocBytes bounds every document read: they are this repository's own,
// a few tens of KiB.
const maxDocBytes = 4 << 20

func main() {
	root := flag.String("root", ".", "the repository's root (README.md and docs/)")
	flag.Parse()
	if err := run(*root); err != nil {
		fmt.Fprintln(os.Stderr, "benchreadme:", err)
		os.Exit(1)
	}
}

func run(root string) error {
	section, err := renderFrom(root)
	if err != nil {
		return err
	}
	path := filepath.Join(root, "README.md")
	readme, err := readDoc(path)
	if err != nil {
		return err
	}
	if !strings.Contains(readme, Section.Start) {
		return fmt.Errorf("reading %s: no %s marker: place it where the section goes", path, Section.Start)
	}
	return os.WriteFile(path, []byte(Section.Replace(readme, section)), 0o644)
}

// renderFrom renders the section from the documents under root/docs.
func renderFrom(root string) (string, error) {
	docs := filepath.Join(root, "docs")
	var bench benchResult
	var scale scaleResult
	if err := readJSON(filepath.Join(docs, "benchmarks.json"), &bench); err != nil {
		return "", err
	}
	if err := readJSON(filepath.Join(docs, "scale.json"), &scale); err != nil {
		return "", err
	}
	md, err := readDoc(filepath.Join(docs, "benchmarks.md"))
	if err != nil {
		return "", err
	}
	return render(bench, scale, md), nil
}

func readDoc(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxDocBytes+1))
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	if len(b) > maxDocBytes {
		return "", fmt.Errorf("reading %s: larger than %d bytes", path, maxDocBytes)
	}
	return string(b), nil
}

func readJSON(path string, v any) error {
	s, err := readDoc(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(s), v); err != nil {
		return fmt.Errorf("decoding %s: %w", path, err)
	}
	return nil
}

// goal is one target and what a run measured, as harness/bench and
// harness/scalebench write them.
type goal struct {
	Name     string `json:"name"`
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
}

// benchResult is the part of docs/benchmarks.json the section quotes.
type benchResult struct {
	Date    string `json:"date"`
	Machine string `json:"machine"`
	CPUs    int    `json:"cpus"`
	Kernel  string `json:"kernel"`
	Commit  string `json:"commit"`
	Smoke   bool   `json:"smoke"`
	Trap    struct {
		EmulatedNs      float64 `json:"emulated_ns"`
		OptimizableNs   float64 `json:"optimizable_ns"`
		SingleSteppedNs float64 `json:"single_stepped_ns"`
		ReturnNs        float64 `json:"return_ns"`
	} `json:"trap"`
	Goals []goal `json:"goals"`
}

// scaleResult is the part of docs/scale.json the section quotes.
type scaleResult struct {
	Date  string `json:"date"`
	Smoke bool   `json:"smoke"`
	Goals []goal `json:"goals"`
}

// featureHeading is the heading of the feature table in docs/benchmarks.md.
const featureHeading = "## What each feature costs"

// features returns the rows of the tables under the feature heading of
// md: the feature table's feature, ns added per call and ratio; the recipe
// table's "recipe: NAME (workload)", ns added per call and ratio against
// the floor at its sites. Columns are found by their headers; a table
// without them is skipped.
func features(md string) [][3]string {
	i := strings.Index(md, featureHeading)
	if i < 0 {
		return nil
	}
	body := md[i+len(featureHeading):]
	if j := strings.Index(body, "\n## "); j >= 0 {
		body = body[:j]
	}
	var rows [][3]string
	var name, ns, ratio, workload = -1, -1, -1, -1
	recipe := false
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, "|") {
			name = -1
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for k := range cells {
			cells[k] = strings.TrimSpace(cells[k])
		}
		switch {
		case cells[0] == "feature" || cells[0] == "recipe":
			recipe = cells[0] == "recipe"
			name, ns, ratio, workload = 0, -1, -1, -1
			for k, c := range cells {
				switch {
				case strings.HasPrefix(c, "ns added per call"):
					ns = k
				case c == "ratio" || c == "× floor at its sites":
					ratio = k
				case strings.HasPrefix(c, "workload"):
					workload = k
				}
			}
			if ns < 0 || ratio < 0 {
				name = -1
			}
		case name < 0 || strings.HasPrefix(cells[0], "---") || len(cells) <= max(ns, ratio):
		case recipe && workload >= 0 && workload < len(cells):
			rows = append(rows, [3]string{"recipe: " + cells[name] + " (" + cells[workload] + ")", cells[ns], cells[ratio] + " × floor at its sites"})
		default:
			rows = append(rows, [3]string{cells[name], cells[ns], cells[ratio]})
		}
	}
	return rows
}

func render(bench benchResult, scale scaleResult, md string) string {
	var b strings.Builder
	b.WriteString("## Performance\n\n")
	fmt.Fprintf(&b, "From one `make bench` on %s (%d CPUs, Linux %s), %s, commit `%s`; the scale rows from its `harness/scalebench` run, %s. ",
		bench.Machine, bench.CPUs, bench.Kernel, day(bench.Date), bench.Commit, day(scale.Date))
	fmt.Fprintf(&b, "A uprobe trap costs here %.0f ns on an emulated instruction, %.0f ns on a 5-byte nop (optimizable), %.0f ns single-stepped, and a uretprobe's return leg %.0f ns more: ratios are against floors timed in the same rounds, so machines can be read side by side.",
		bench.Trap.EmulatedNs, bench.Trap.OptimizableNs, bench.Trap.SingleSteppedNs, bench.Trap.ReturnNs)
	if bench.Smoke || scale.Smoke {
		b.WriteString(" **These are smoke-run numbers, not meant to be read.**")
	}
	b.WriteString("\n\n| goal | target | measured | met |\n|---|---|---|---|\n")
	for _, g := range append(append([]goal(nil), bench.Goals...), scale.Goals...) {
		met := "yes"
		if !g.Met {
			met = "**no**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", g.Name, g.Target, g.Measured, met)
	}
	if rows := features(md); len(rows) > 0 {
		b.WriteString("\nWhat each feature adds per call, against the floor of its own site class:\n\n")
		b.WriteString("| feature | ns added per call | ratio |\n|---|---:|---|\n")
		for _, r := range rows {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", r[0], r[1], r[2])
		}
	}
	b.WriteString("\nEvery row, the scale curves (Start, Shutdown and memory from 100 to 20,000 locations and 10 to 2,000 targets), the collector's CPU by stage and the other machine kinds: [docs/benchmarks.md](docs/benchmarks.md); how each is measured: [docs/performance.md](docs/performance.md).\n")
	return b.String()
}

// day returns the date of an RFC 3339 time, or the text itself.
func day(t string) string {
	if len(t) >= 10 {
		return t[:10]
	}
	return t
}
