// Command httpserver is the Go HTTP server of the probe browser's tests
// (cmd/uprobe-list): net/http serving a handler, so that its listing holds
// what a real Go server's does (net/http, crypto/tls, generic
// instantiations from the standard library), and a few functions of its
// own for the browser's cases:
//
//   - (*Server).ServeHTTP takes a *http.Request, whose fields ($r.Host,
//     $r.RemoteAddr) lie beyond the first 32 fields of a listing;
//   - Greeting returns a string, which a stripped build reads as
//     retval:gostring;
//   - Divide returns a struct in two registers;
//   - Keys and Sum are generic, instantiated for several types (their
//     symbols are spelled with brackets: main.Keys[go.shape.string,go.shape.int]);
//     Keys's instantiation for a map of slices holds "[]".
//
// It listens on the address of its first argument (default 127.0.0.1:0),
// prints "listening ADDR", and exits when its stdin ends or says "exit".
package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
)

// Server counts the requests it served.
type Server struct {
	Name   string
	Served int
}

// Pair is a quotient and a remainder.
type Pair struct {
	Quot, Rem int
}

// ServeHTTP answers every request with a greeting.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.Served++
	q := Divide(len(r.URL.Path), 3)
	fmt.Fprintf(w, "%s %d %d %s\n", Greeting(r.Host), q.Quot, q.Rem, strings.Join(Keys(r.URL.Query()), ","))
}

// Greeting returns a greeting for name.
//
//go:noinline
func Greeting(name string) string {
	return "hello " + name
}

// Divide divides n by d.
//
//go:noinline
func Divide(n, d int) Pair {
	return Pair{n / d, n % d}
}

// Keys returns the keys of m, sorted.
//
//go:noinline
func Keys[K ~string, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Sum adds numbers of any integer type.
//
//go:noinline
func Sum[T ~int | ~int64 | ~uint8](xs ...T) T {
	var s T
	for _, x := range xs {
		s += x
	}
	return s
}

func main() {
	addr := "127.0.0.1:0"
	if len(os.Args) > 1 {
		addr = os.Args[1]
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	_ = Keys(map[string]int{"a": 1}) // Keys[string,int]
	_ = Sum(1, 2) + int(Sum[int64](3)) + int(Sum[uint8](4))
	fmt.Println("listening", ln.Addr())
	go func() {
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() && in.Text() != "exit" {
		}
		os.Exit(0)
	}()
	fmt.Fprintln(os.Stderr, http.Serve(ln, &Server{Name: "httpserver"}))
}
