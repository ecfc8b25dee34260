// unwind is the C++ program of the receiver's tests of exceptions that
// unwind through probed functions. app::attempt calls app::middle and
// catches; middle calls app::thrower, which throws for every argument at
// or above app::threshold, so each such exception unwinds through
// middle's frame into attempt's handler. app::leaf calls nothing: no
// exception can unwind through it. app::twin is leaf's twin, never
// probed, to measure what a probe on leaf adds.
//
//   unwind        prints "ready PID", then reads commands on stdin:
//                   run N      attempt(i) for i in 0..N-1, every call of
//                              middle throwing; prints "caught C sum S"
//                   calm N     the same with no throw; prints
//                              "calm SUM caught C"
//                   leaf N     N calls of leaf; prints "leaf SUM"
//                   time N R   R rounds of N calls of leaf and of twin;
//                              prints "ns LEAF TWIN", the fastest round's
//                              nanoseconds per call of each
//                   qsort N    N calls of libc's qsort on 4 ints whose
//                              comparator throws at its first call, each
//                              caught; prints "qsort caught C"
//                   qcalm N    N calls of qsort with a comparator that
//                              does not throw; prints "qcalm SUM" (the
//                              sum of the smallest elements)
//                   exit
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <unistd.h>

namespace app {

volatile long threshold;

__attribute__((noipa)) long thrower(long x)
{
	if (x >= threshold)
		throw std::runtime_error("boom");
	return x;
}

__attribute__((noipa)) long middle(long x)
{
	long r = thrower(x);
	return r * 2 + 1; // no tail call: middle's frame is live when thrower throws
}

__attribute__((noipa)) long attempt(long i, long *sum)
{
	try {
		*sum += middle(i);
		return 0;
	} catch (const std::runtime_error &) {
		return 1;
	}
}

// leaf and twin save %rbx, so that they start with push %rbx, which the
// kernel emulates: an entry probe there costs little, and what a return
// probe costs stands out.
__attribute__((noipa)) long leaf(long x)
{
	__asm__ __volatile__("" ::: "rbx");
	return x * 3 + 1;
}

__attribute__((noipa)) long twin(long x)
{
	__asm__ __volatile__("" ::: "rbx");
	return x * 3 + 1;
}

long run(long n, long *sum)
{
	long caught = 0;
	for (long i = 0; i < n; i++)
		caught += attempt(i, sum);
	return caught;
}

double per_call(long (*fn)(long), long n)
{
	auto start = std::chrono::steady_clock::now();
	long sum = 0;
	for (long i = 0; i < n; i++)
		sum += fn(i);
	auto end = std::chrono::steady_clock::now();
	if (sum == 42)
		std::puts(""); // uses the calls' results
	return std::chrono::duration<double, std::nano>(end - start).count() / double(n);
}

// cmp_throw throws an int (whose exception object is the only memory
// the throw allocates: one malloc) through qsort; cmp_int compares.
__attribute__((noipa)) int cmp_throw(const void *, const void *)
{
	throw 42;
}

__attribute__((noipa)) int cmp_int(const void *a, const void *b)
{
	int x = *static_cast<const int *>(a), y = *static_cast<const int *>(b);
	return (x > y) - (x < y);
}

} // namespace app

int main()
{
	char line[64];
	long n, rounds;

	std::printf("ready %d\n", (int)getpid());
	std::fflush(stdout);
	while (std::fgets(line, sizeof(line), stdin)) {
		if (std::sscanf(line, "run %ld", &n) == 1) {
			long sum = 0;
			app::threshold = 0;
			long caught = app::run(n, &sum);
			std::printf("caught %ld sum %ld\n", caught, sum);
		} else if (std::sscanf(line, "calm %ld", &n) == 1) {
			long sum = 0;
			app::threshold = n;
			long caught = app::run(n, &sum);
			std::printf("calm %ld caught %ld\n", sum, caught);
		} else if (std::sscanf(line, "leaf %ld", &n) == 1) {
			long sum = 0;
			for (long i = 0; i < n; i++)
				sum += app::leaf(i);
			std::printf("leaf %ld\n", sum);
		} else if (std::sscanf(line, "time %ld %ld", &n, &rounds) == 2) {
			double leaf = 1e18, twin = 1e18;
			for (long r = 0; r < rounds; r++) {
				double a = app::per_call(app::leaf, n), b = app::per_call(app::twin, n);
				leaf = a < leaf ? a : leaf;
				twin = b < twin ? b : twin;
			}
			std::printf("ns %.1f %.1f\n", leaf, twin);
		} else if (std::sscanf(line, "qsort %ld", &n) == 1) {
			long caught = 0;
			for (long i = 0; i < n; i++) {
				int v[4] = {4, 3, 2, 1};
				try {
					std::qsort(v, 4, sizeof v[0], app::cmp_throw);
				} catch (int) {
					caught++;
				}
			}
			std::printf("qsort caught %ld\n", caught);
		} else if (std::sscanf(line, "qcalm %ld", &n) == 1) {
			long sum = 0;
			for (long i = 0; i < n; i++) {
				int v[4] = {4, 3, 2, 1};
				std::qsort(v, 4, sizeof v[0], app::cmp_int);
				sum += v[0];
			}
			std::printf("qcalm %ld\n", sum);
		} else if (line[0] == 'e') {
			break;
		}
		std::fflush(stdout);
	}
	return 0;
}
