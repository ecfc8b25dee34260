/*
 * exactness is the program the tracer's exactness tests of the engine's
 * fast paths run (internal/tracer/exactness_test.go): plain function spans
 * that recurse, nest, longjmp and run in threads, a USDT pair, a function
 * with a plain span and a counter on one site, and a chain of USDT probes
 * where one site closes a span and opens the next. Commands on stdin:
 *
 *   deep N       calls rec(N): N+1 nested calls of a function that calls
 *                itself (probed on its RET instructions); prints "deep N"
 *   deepu N      the same with rec_u, whose span's returns are kernel
 *                return probes; prints "deepu N"
 *   roots N      for i in 0..N-1 calls sroot(i), which calls leaf(i) and
 *                leaf(i+1), then free_leaf(i) from the same loop;
 *                prints "roots N"
 *   disp N       for i in 0..N-1 calls handlers[i & 1](i) through one
 *                indirect call: sroot(i) for even i, via(i), which calls
 *                free_leaf(i), for odd i; prints "disp N"
 *   jump N       N times: ja(i) fires jop__start and calls jb(i), which
 *                calls jc(i), which longjmps back here (jop__done and
 *                the three returns never come); then after(i) calls
 *                leaf(i);
 *                prints "jumped N"
 *   jumpu N      the same with ju(i), which fires ju__start and longjmps
 *                back itself; prints "jumpedu N"
 *   threads T N  T threads each call tw(i) for i in 0..N-1 (tw calls
 *                leaf(i) and leaf(i+1)); prints "threads done"
 *   ops N        for i in 0..N-1 calls op(i, 3*i): op__start(i, 3*i),
 *                leaf(i), op__done(i, 3*i+1); prints "ops N"
 *   mixed N      for i in 0..N-1 calls both(i): ph__a(i), leaf(i),
 *                ph__b(i), leaf(i+1), ph__c(i); prints "mixed N"
 *   lus N        for i in 0..N-1 calls lu(i), a leaf function (no call)
 *                with the USDT pair lu__start(i) and lu__done(i) inside
 *                it, then after(i) from the same loop; prints "lus N"
 *   exit         exits
 */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

unsigned short exactness_op__start_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short exactness_op__done_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short exactness_jop__start_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short exactness_jop__done_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short exactness_ju__start_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short exactness_ju__done_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short exactness_ph__a_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short exactness_ph__b_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short exactness_ph__c_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short exactness_lu__start_semaphore __attribute__((unused)) __attribute__((section(".probes")));
unsigned short exactness_lu__done_semaphore __attribute__((unused)) __attribute__((section(".probes")));

/* checksum keeps the compiler from folding the calls away, and the
 * accesses after calls keep it from turning them into tail calls. */
volatile long checksum;

__attribute__((noinline)) long rec(int depth)
{
	long r;

	if (depth <= 0) {
		checksum++;
		return 0;
	}
	r = rec(depth - 1);
	checksum += r;
	return r + 1;
}

__attribute__((noinline)) long rec_u(int depth)
{
	long r;

	if (depth <= 0) {
		checksum++;
		return 0;
	}
	r = rec_u(depth - 1);
	checksum += r;
	return r + 1;
}

__attribute__((noinline)) void leaf(int i)
{
	checksum += i;
}

__attribute__((noinline)) void free_leaf(int i)
{
	checksum += i;
}

__attribute__((noinline)) void sroot(int i)
{
	leaf(i);
	leaf(i + 1);
	checksum++;
}

/* via is called through the same indirect call as sroot (disp). */
__attribute__((noinline)) void via(int i)
{
	free_leaf(i);
	checksum++;
}

void (*handlers[2])(int) = {sroot, via};

static jmp_buf jump_back;

__attribute__((noinline)) void jc(int i)
{
	if (i >= 0)
		longjmp(jump_back, 1);
	checksum++;
}

__attribute__((noinline)) void jb(int i)
{
	jc(i);
	checksum++;
}

__attribute__((noinline)) void ja(int i)
{
	DTRACE_PROBE1(exactness, jop__start, i);
	jb(i);
	checksum++;
	DTRACE_PROBE1(exactness, jop__done, i);
}

__attribute__((noinline)) void ju(int i)
{
	checksum++; /* the USDT probe is not at the function's first instruction */
	DTRACE_PROBE1(exactness, ju__start, i);
	if (i >= 0)
		longjmp(jump_back, 1);
	DTRACE_PROBE1(exactness, ju__done, i);
}

__attribute__((noinline)) void after(int i)
{
	leaf(i);
	checksum++;
}

/* lu makes no call: a leaf, whose entry the planner marks so (SITE_LEAF),
 * with a USDT pair inside it. */
__attribute__((noinline)) void lu(int i)
{
	checksum++; /* the USDT probe is not at the function's first instruction */
	DTRACE_PROBE1(exactness, lu__start, i);
	checksum += i;
	DTRACE_PROBE1(exactness, lu__done, i);
}

__attribute__((noinline)) void tw(int i)
{
	leaf(i);
	leaf(i + 1);
	checksum++;
}

static void *thread_run(void *arg)
{
	long n = (long)arg;

	for (long i = 0; i < n; i++)
		tw((int)i);
	return NULL;
}

__attribute__((noinline)) void op(int i, long k)
{
	if (__builtin_expect(exactness_op__start_semaphore, 0))
		DTRACE_PROBE2(exactness, op__start, i, k);
	leaf(i);
	if (__builtin_expect(exactness_op__done_semaphore, 0))
		DTRACE_PROBE2(exactness, op__done, i, k + 1);
	checksum++;
}

__attribute__((noinline)) void both(int i)
{
	DTRACE_PROBE1(exactness, ph__a, i);
	leaf(i);
	DTRACE_PROBE1(exactness, ph__b, i);
	leaf(i + 1);
	DTRACE_PROBE1(exactness, ph__c, i);
	checksum++;
}

int main(void)
{
	char line[256];

	printf("ready %d\n", getpid());
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		int n, t;

		if (sscanf(line, "deepu %d", &n) == 1) {
			rec_u(n);
			printf("deepu %d\n", n);
		} else if (sscanf(line, "deep %d", &n) == 1) {
			rec(n);
			printf("deep %d\n", n);
		} else if (sscanf(line, "roots %d", &n) == 1) {
			for (int i = 0; i < n; i++) {
				sroot(i);
				free_leaf(i);
			}
			printf("roots %d\n", n);
		} else if (sscanf(line, "disp %d", &n) == 1) {
			for (int i = 0; i < n; i++)
				handlers[i & 1](i);
			printf("disp %d\n", n);
		} else if (sscanf(line, "jumpu %d", &n) == 1) {
			for (volatile int i = 0; i < n; i++) {
				if (setjmp(jump_back) == 0)
					ju(i);
				after(i);
			}
			printf("jumpedu %d\n", n);
		} else if (sscanf(line, "jump %d", &n) == 1) {
			for (volatile int i = 0; i < n; i++) {
				if (setjmp(jump_back) == 0)
					ja(i);
				after(i);
			}
			printf("jumped %d\n", n);
		} else if (sscanf(line, "threads %d %d", &t, &n) == 2) {
			pthread_t th[16];

			if (t > 16)
				t = 16;
			for (int i = 0; i < t; i++)
				pthread_create(&th[i], NULL, thread_run, (void *)(long)n);
			for (int i = 0; i < t; i++)
				pthread_join(th[i], NULL);
			printf("threads done\n");
		} else if (sscanf(line, "ops %d", &n) == 1) {
			for (int i = 0; i < n; i++)
				op(i, 3L * i);
			printf("ops %d\n", n);
		} else if (sscanf(line, "mixed %d", &n) == 1) {
			for (int i = 0; i < n; i++)
				both(i);
			printf("mixed %d\n", n);
		} else if (sscanf(line, "lus %d", &n) == 1) {
			for (int i = 0; i < n; i++) {
				lu(i);
				after(i);
			}
			printf("lus %d\n", n);
		} else if (strncmp(line, "exit", 4) == 0) {
			break;
		}
		fflush(stdout);
	}
	return 0;
}
