// Command goprog is the Go program the receiver's Go tests trace. Its probed
// function grows the goroutine's stack (so the runtime copies it) and yields
// (so goroutines move between threads) while its spans are open.
//
// Commands on stdin:
//
//	run N G   N calls of Probed spread over G fresh goroutines; prints "done N"
//	args      one call Probed(42, "hello go"); prints "args 92"
//	exit
package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"sync"
)

// Probed is the probed function: an int and a string argument, an int result.
//
//go:noinline
func Probed(n int, s string) int {
	if n%64 == 0 {
		sink += grow(48) // about 200 KiB of stack: the runtime grows and copies it
	}
	if n%7 == 0 {
		runtime.Gosched()
	}
	return n*2 + len(s)
}

var sink int

// grow recurses with big frames.
//
//go:noinline
func grow(depth int) int {
	var buf [4096]byte
	buf[depth%len(buf)] = byte(depth)
	if depth == 0 {
		return int(buf[0])
	}
	return grow(depth-1) + int(buf[depth%len(buf)])
}

func run(n, g int) {
	var wg sync.WaitGroup
	per := n / g
	for i := 0; i < g; i++ {
		count := per
		if i == g-1 {
			count = n - per*(g-1)
		}
		wg.Add(1)
		go func(base, count int) {
			defer wg.Done()
			local := 0
			for k := 0; k < count; k++ {
				local += Probed(base+k, "x")
			}
			mu.Lock()
			sink += local
			mu.Unlock()
		}(i*per, count)
	}
	wg.Wait()
}

var mu sync.Mutex

func main() {
	fmt.Println("ready", os.Getpid())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var n, g int
		switch line := in.Text(); {
		case line == "args":
			fmt.Println("args", Probed(42, "hello go"))
		case line == "exit":
			return
		default:
			if _, err := fmt.Sscanf(line, "run %d %d", &n, &g); err == nil && g > 0 {
				run(n, g)
				fmt.Println("done", n)
			}
		}
	}
}
