/*
 * hardening is the C program of the receiver's production-hardening tests.
 *
 * Commands on stdin, each answered by one line:
 *   four N        N calls of four(a, b, c, d), each pointing at 256 bytes
 *                 (a[i] = i, b[i] = i+1, ...); prints "four N"
 *   exec          hex:start fires (opening a span), four() is called once
 *                 inside it, then the process execs
 *                 itself as "hardening second", which fires hex:done (no
 *                 span of its own image is open), then hex:start and hex:done
 *                 once more, and prints "second PID"; the pid is the same
 *   threads N     N threads that each call four() once and exit; prints
 *                 "threads N"
 *   exit
 *
 * Run as "hardening once…" (any first argument starting with "once"), it
 * calls four() once and exits. Run as "hardening chain N", it calls four()
 * once and execs itself through /proc/self/exe as "hardening chain N-1",
 * until N is 0: N+1 images of one process, one call each.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sdt.h>
#include <unistd.h>

static unsigned char bufs[4][256];

__attribute__((noinline)) long four(const unsigned char *a, const unsigned char *b,
				    const unsigned char *c, const unsigned char *d)
{
	__asm__ __volatile__("" ::: "memory");
	return a[0] + b[0] + c[0] + d[0];
}

static void *thread_main(void *arg)
{
	(void)arg;
	four(bufs[0], bufs[1], bufs[2], bufs[3]);
	return NULL;
}

int main(int argc, char **argv)
{
	char line[64];
	int n;

	for (int k = 0; k < 4; k++)
		for (int i = 0; i < 256; i++)
			bufs[k][i] = (unsigned char)(i + k);
	if (argc > 1 && strncmp(argv[1], "once", 4) == 0)
		return four(bufs[0], bufs[1], bufs[2], bufs[3]) != 6;
	if (argc > 2 && strcmp(argv[1], "chain") == 0) {
		char next[16];
		if (four(bufs[0], bufs[1], bufs[2], bufs[3]) != 6)
			return 1;
		n = atoi(argv[2]);
		if (n <= 0)
			return 0;
		snprintf(next, sizeof(next), "%d", n - 1);
		execl("/proc/self/exe", argv[0], "chain", next, (char *)NULL);
		return 1;
	}
	if (argc > 1 && strcmp(argv[1], "second") == 0) {
		DTRACE_PROBE1(hex, done, 2);
		DTRACE_PROBE1(hex, start, 3);
		DTRACE_PROBE1(hex, done, 4);
		printf("second %d\n", getpid());
		fflush(stdout);
		argc = 1; /* go on reading commands */
	} else {
		printf("ready %d\n", getpid());
		fflush(stdout);
	}
	while (fgets(line, sizeof(line), stdin)) {
		if (sscanf(line, "four %d", &n) == 1) {
			long sum = 0;
			for (int i = 0; i < n; i++)
				sum += four(bufs[0], bufs[1], bufs[2], bufs[3]);
			printf("four %d\n", n + (int)(sum - 6L * n));
		} else if (sscanf(line, "threads %d", &n) == 1) {
			for (int i = 0; i < n; i++) {
				pthread_t t;
				if (pthread_create(&t, NULL, thread_main, NULL) != 0 || pthread_join(t, NULL) != 0)
					return 1;
			}
			printf("threads %d\n", n);
		} else if (strncmp(line, "exec", 4) == 0) {
			DTRACE_PROBE1(hex, start, 1);
			four(bufs[0], bufs[1], bufs[2], bufs[3]);
			fflush(stdout);
			execl("/proc/self/exe", argv[0], "second", (char *)NULL);
			return 1;
		} else if (strncmp(line, "exit", 4) == 0) {
			break;
		}
		fflush(stdout);
	}
	return 0;
}
