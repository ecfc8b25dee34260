// Command goprog is the Go fixture of internal/debuginfo: a method on a
// struct pointer, string and int parameters, several results, and a
// *http.Request-like chain of pointers. The tests build it with and without
// optimizations and look its names up in its DWARF.
package main

import (
	"fmt"
	"os"
	"strings"
)

// URL is a cut-down net/url.URL.
type URL struct {
	Scheme string
	Host   string
	Path   string
}

// Request is a cut-down net/http.Request.
type Request struct {
	Method string
	URL    *URL
	Proto  string
	Body   []byte
	Header map[string][]string
	ID     int64
	Flags  uint16
}

// globalCount counts requests, as a package-level variable to look up.
var globalCount int64

// Server counts what it handled.
type Server struct {
	Name    string
	Handled int
}

// Handle serves one request.
//
//go:noinline
func (s *Server) Handle(r *Request, tag string) (status int, err error) {
	s.Handled++
	globalCount++
	if strings.HasPrefix(r.URL.Path, "/fail") {
		return 500, fmt.Errorf("failed %s", tag)
	}
	return 200 + len(tag), nil
}

// Sum returns the sum of its arguments and their count.
//
//go:noinline
func Sum(a int, b int32, c uint8, name string) (int, string) {
	total := a + int(b) + int(c)
	total += len(name) // LINE:total
	return total, name + "!"
}

// Lookup returns the length of a key, as a pointer result.
//
//go:noinline
func Lookup(keys []string, i int) *string {
	if i < len(keys) {
		return &keys[i]
	}
	return nil
}

func main() {
	s := &Server{Name: "srv"}
	r := &Request{Method: "GET", URL: &URL{Scheme: "http", Host: "h", Path: "/index"}, Body: []byte("body"), ID: 7, Flags: 5}
	if len(os.Args) > 1 {
		r.URL.Path = os.Args[1]
	}
	st, err := s.Handle(r, "t1")
	n, name := Sum(1, 2, 3, r.Method)
	p := Lookup(os.Args, 0)
	fmt.Println(st, err, n, name, *p != "")
}
