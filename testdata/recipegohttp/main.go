// Command recipegohttp is the Go HTTP server of the recipe tests
// (receiver's recipes_test.go): net/http on 127.0.0.1, on a port of its
// own choosing. It prints "ready PORT" and serves until stdin closes:
//
//	GET  /hello    200 "hello" (Write writes the header)
//	GET  /missing  404 (http.NotFound)
//	POST /items    201 (WriteHeader)
//	GET  /silent   200, written by the server after the handler (it writes nothing)
package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
)

func main() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })
	mux.HandleFunc("GET /missing", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	mux.HandleFunc("POST /items", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
	mux.HandleFunc("GET /silent", func(w http.ResponseWriter, r *http.Request) {})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("ready %d\n", l.Addr().(*net.TCPAddr).Port)
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	_ = http.Serve(l, mux)
}
