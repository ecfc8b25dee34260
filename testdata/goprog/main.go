// Command goprog is the Go program the receiver's Go tests trace. Its probed
// function grows the goroutine's stack (so the runtime copies it) and yields
// (so goroutines move between threads) while its spans are open.
//
// Commands on stdin:
//
//	run N G    N calls of Probed spread over G fresh goroutines; prints "done N"
//	args       one call Probed(42, "hello go"); prints "args 92"
//	deep D R   R calls of Deep(D) (D+1 nested calls, the stack grows), each
//	           on a fresh goroutine; prints "deep D R SUM"
//	panic      Panicky(-1) on a fresh goroutine, which panics into its
//	           caller's recover; prints "recovered"
//	calm N     N calls of Panicky(i), each on a fresh goroutine started after
//	           the last one ended (the runtime reuses their g); prints "calm N"
//	exit
//
// With the argument "once", it calls Probed(1, "once") and exits.
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

// Deep recurses d levels with frames big enough that the runtime grows and
// copies the goroutine's stack on the way down.
//
//go:noinline
func Deep(d int) int {
	var buf [512]byte
	buf[d%len(buf)] = byte(d)
	if d == 0 {
		return int(buf[0])
	}
	return Deep(d-1) + 1 + int(buf[d%len(buf)]) - int(byte(d))
}

// Panicky panics for a negative n and returns n otherwise.
//
//go:noinline
func Panicky(n int) int {
	if n < 0 {
		panic("negative")
	}
	return n
}

// onGoroutine runs f on a fresh goroutine and waits for it to end.
func onGoroutine(f func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "once" {
		os.Exit(Probed(1, "once") - 6) // 1*2+len("once"): any other status says it ran wrongly
	}
	fmt.Println("ready", os.Getpid())
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var n, g int
		switch line := in.Text(); {
		case line == "args":
			fmt.Println("args", Probed(42, "hello go"))
		case line == "exit":
			return
		case line == "panic":
			onGoroutine(func() {
				defer func() { _ = recover() }()
				Panicky(-1)
			})
			fmt.Println("recovered")
		default:
			var d, r int
			if _, err := fmt.Sscanf(line, "deep %d %d", &d, &r); err == nil {
				sum := 0
				for range r {
					onGoroutine(func() { sum += Deep(d) })
				}
				fmt.Println("deep", d, r, sum)
				continue
			}
			if _, err := fmt.Sscanf(line, "calm %d", &n); err == nil {
				for i := range n {
					onGoroutine(func() { sink += Panicky(i) })
				}
				fmt.Println("calm", n)
				continue
			}
			if _, err := fmt.Sscanf(line, "run %d %d", &n, &g); err == nil && g > 0 {
				run(n, g)
				fmt.Println("done", n)
			}
		}
	}
}
