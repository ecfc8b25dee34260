//go:build linux

package main

import (
	"fmt"
	"strings"
)

// treeFunctions is the number of functions of one call tree: a root, 9
// inner functions it calls, 10 leaves each of those calls.
const treeFunctions = 100

// treeAsm returns the x86-64 assembly of the workload's tree set: three
// identical call trees of treeFunctions functions (prefixes pt_, tt_ and
// tt2_: probed, twin, twin2), every function starting with push %rbp, an
// emulated site, as probed() does. A call of a root is treeFunctions calls,
// three deep.
func treeAsm() string {
	var b strings.Builder
	b.WriteString("\t.text\n")
	for _, p := range []string{"pt", "tt", "tt2"} {
		for i := range treeFunctions {
			name := fmt.Sprintf("%s_%d", p, i)
			fmt.Fprintf(&b, "\t.globl %s\n\t.type %s, @function\n%s:\n\tpush %%rbp\n\tmov %%rsp, %%rbp\n", name, name, name)
			var callees []int
			switch {
			case i == 0:
				for c := 1; c < 10; c++ {
					callees = append(callees, c)
				}
			case i < 10:
				for c := 0; c < 10; c++ {
					callees = append(callees, i*10+c)
				}
			}
			for _, c := range callees {
				fmt.Fprintf(&b, "\tcall %s_%d\n", p, c)
			}
			fmt.Fprintf(&b, "\tmov %%rdi, %%rax\n\tpop %%rbp\n\tret\n\t.size %s, .-%s\n", name, name)
		}
	}
	b.WriteString("\t.section .note.GNU-stack,\"\",@progbits\n")
	return b.String()
}
