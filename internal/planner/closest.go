package planner

import (
	"sort"
	"strings"
)

// closest returns up to n names of have nearest to want: names that contain
// want (or are contained in it) first, then by edit distance, then by name.
func closest(want string, have []string, n int) []string {
	type scored struct {
		name     string
		contains bool
		dist     int
	}
	lw := strings.ToLower(want)
	all := make([]scored, 0, len(have))
	for _, h := range have {
		lh := strings.ToLower(h)
		all = append(all, scored{
			name:     h,
			contains: strings.Contains(lh, lw) || strings.Contains(lw, lh),
			dist:     editDistance(lw, lh),
		})
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if a.contains != b.contains {
			return a.contains
		}
		if a.dist != b.dist {
			return a.dist < b.dist
		}
		return a.name < b.name
	})
	if len(all) > n {
		all = all[:n]
	}
	out := make([]string, len(all))
	for i, s := range all {
		out[i] = s.name
	}
	return out
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
