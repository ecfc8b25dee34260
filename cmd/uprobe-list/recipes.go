package main

import (
	"fmt"
	"io"

	"github.com/otel-uprobe/uprobereceiver/internal/recipe"
)

// printRecipe writes recipe name's YAML (uprobe-list --recipe NAME): a
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

// recipes lists the recipes that apply to the file, each with the target
// to paste and how to see what it traces; nothing when none applies.
func (l *lister) recipes() {
	rs := l.applyingRecipes()
	if len(rs) == 0 {
		return
	}
	l.printf("\nRecipes: %d\n", len(rs))
	for _, r := range rs {
		l.printf("  %s: %s\n", r.Name, r.Description)
		l.printf("    targets:  - {recipe: %s, path: %s}\n", r.Name, l.path)
		l.printf("    its spans and counters: uprobe-list --recipe %s\n", r.Name)
	}
}
