// Command goapp is the Go program of the receiver's $name tests: a method
// on a struct pointer whose parameters are read by name through Go's DWARF
// ($r.URL.Path through two pointers, a string parameter, an int result).
//
// Commands on stdin:
//
//	handle N   N calls of (*Server).Handle for i = 0..N-1, each with the
//	           request {Method: "GET", URL: {Path: "/go/i"}, ID: 1000+i} and
//	           the tag "t<i>"; prints "handle N SUM"
//	exit
package main

import (
	"bufio"
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
	ID     int64
}

// Server counts the requests it handled.
type Server struct {
	Name    string
	Handled int
}

// Handle serves one request and returns a status computed from it.
//
//go:noinline
func (s *Server) Handle(r *Request, tag string) int {
	s.Handled++
	return 200 + len(r.URL.Path) + int(r.ID%100) + len(tag)
}

func main() {
	s := &Server{Name: "goapp"}
	fmt.Println("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var n int
		line := in.Text()
		switch {
		case strings.HasPrefix(line, "handle "):
			fmt.Sscanf(line, "handle %d", &n)
			sum := 0
			for i := 0; i < n; i++ {
				r := &Request{Method: "GET", URL: &URL{Scheme: "http", Host: "h", Path: fmt.Sprintf("/go/%d", i)}, ID: int64(1000 + i)}
				sum += s.Handle(r, fmt.Sprintf("t%d", i))
			}
			fmt.Printf("handle %d %d\n", n, sum)
		case line == "exit":
			return
		}
	}
}
