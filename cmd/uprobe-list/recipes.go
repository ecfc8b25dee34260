package main

import (
	"fmt"
	"io"
	"sort"

	"github.com/otel-uprobe/uprobereceiver/internal/config"
	"github.com/otel-uprobe/uprobereceiver/internal/recipe"
)

// printRecipe writes recipe name's YAML (uprobe-list -recipe NAME): a
// collector configuration to copy and change. It returns the exit status.
func printRecipe(name string, stdout, stderr io.Writer) int {
	r, err := recipe.Get(name)
	if err != nil {
		fmt.Fprintln(stderr, "uprobe-list:", err)
		return 2
	}
	_, _ = stdout.Write(r.YAML())
	return 0
}

// applyingRecipes returns the recipes that apply to the inspected file:
// those whose every applies: reference the file has.
func (l *lister) applyingRecipes() []*recipe.Recipe {
	var out []*recipe.Recipe
	for _, n := range recipe.Names() {
		r, err := recipe.Get(n)
		if err != nil || len(r.Applies) == 0 {
			continue
		}
		all := true
		for _, ref := range r.Applies {
			all = all && l.in.HasAny(ref)
		}
		if all {
			out = append(out, r)
		}
	}
	return out
}

// recipeTarget returns the target of recipe r on the inspected file that
// the planner takes, as the collector's Start would: with the recipe's
// defaults, else with one of its boolean options set (go-http's stripped:
// on a binary without DWARF); nil and the planner's refusal of the
// defaults when it takes none.
func (l *lister) recipeTarget(r *recipe.Recipe) (*config.Target, error) {
	try := func(options map[string]any) (*config.Target, error) {
		xs, err := recipe.Expand([]config.Target{{Recipe: r.Name, Path: l.path, RecipeOptions: options}})
		if err != nil {
			return nil, err
		}
		if err := l.in.Check(xs[0]); err != nil {
			return nil, err
		}
		return &config.Target{Recipe: r.Name, Path: l.path, RecipeOptions: options}, nil
	}
	t, refusal := try(nil)
	if t != nil {
		return t, nil
	}
	for _, n := range r.OptionNames() {
		if r.Options[n].Type != "bool" || r.Options[n].Default == true {
			continue
		}
		if t, err := try(map[string]any{n: true}); err == nil {
			return t, nil
		}
	}
	return nil, refusal
}

// recipes lists the recipes that apply to the file, each as a target to
// paste under the receiver's targets: when the planner takes it (else a
// comment says why not); nothing when none applies.
func (l *lister) recipes() {
	rs := l.applyingRecipes()
	if len(rs) == 0 {
		return
	}
	l.p.printf("\nRecipes: %d (each item pastes under the receiver's targets:; uprobe-list -recipe NAME prints a recipe's spans and counters, to copy and change)", len(rs))
	l.p.println("  targets:")
	for _, r := range rs {
		l.p.text("    # " + r.Name + ": " + r.Description)
		t, err := l.recipeTarget(r)
		if err != nil {
			l.p.text(fmt.Sprintf("    # (recipe %s is refused here: %s)", r.Name, shortError(err)))
			continue
		}
		l.p.yamlLines("    ", "- recipe: "+yamlScalar(t.Recipe))
		l.p.yamlLines("      ", "path: "+yamlScalar(t.Path))
		for _, n := range sortedOptionNames(t.RecipeOptions) {
			l.p.yamlLines("      ", fmt.Sprintf("recipe_options: {%s: %v}", n, t.RecipeOptions[n]))
		}
	}
}

// sortedOptionNames returns the keys of options, sorted.
func sortedOptionNames(options map[string]any) []string {
	out := make([]string, 0, len(options))
	for n := range options {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
