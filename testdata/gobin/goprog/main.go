// Command goprog is a fixture for internal/insn and internal/gobin: Go
// functions with stack frames of different sizes (each size gets a different
// stack-check prologue), a leaf without a stack check, a recursive function
// and a function with several returns. The tests build it and compare what
// the packages find with objdump and go tool nm.
package main

import (
	"fmt"
	"os"
	"strconv"
)

// Leaf is small enough to need no stack check.
//
//go:noinline
func Leaf(a, b int) int { return a*b + 1 }

// Small has a small frame: cmp %rsp, 0x10(%r14).
//
//go:noinline
func Small(a, b int) string { return fmt.Sprint(a + b) }

// Medium has a frame above 128 bytes: lea -N(%rsp), %r12 first.
//
//go:noinline
func Medium(n int) int {
	var buf [64]int
	for i := range buf {
		buf[i] = i * n
	}
	return sink(buf[:])
}

// Large has a frame above 4096 bytes: mov %rsp, %r12; sub; jb first.
//
//go:noinline
func Large(n int) int {
	var buf [2048]int
	for i := range buf {
		buf[i] = i ^ n
	}
	return sink(buf[:])
}

//go:noinline
func sink(b []int) int {
	s := 0
	for _, v := range b {
		s += v
	}
	return s
}

// Fib recurses.
//
//go:noinline
func Fib(n int) int {
	if n < 2 {
		return n
	}
	return Fib(n-1) + Fib(n-2)
}

// Classify returns from several places.
//
//go:noinline
func Classify(s string) (int, error) {
	if s == "" {
		return 0, fmt.Errorf("empty")
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1, err
	}
	if n < 0 {
		return -n, nil
	}
	return n, nil
}

func main() {
	n := len(os.Args)
	c, err := Classify(strconv.Itoa(n))
	fmt.Println(Leaf(n, 2), Small(n, 3), Medium(n), Large(n), Fib(n+10), c, err)
}
