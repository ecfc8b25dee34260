/*
 * pidscope is the program the tests of pid: targets run twice: one copy
 * traced, the other not. It calls work() from its threads and fires a USDT
 * probe guarded by a semaphore in it. Commands on stdin:
 *
 *   go N T    calls work N times in each of T new threads (T = 0: in the
 *             main thread), prints "done"
 *   fork N    forks a child that calls work N times in its main thread
 *             and exits; prints "forked NS": the child's nanoseconds a call
 *   sem       prints "sem S": the semaphore of pidscope:tick
 *   exit      exits
 */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

unsigned short pidscope_tick_semaphore __attribute__((unused)) __attribute__((section(".probes")));

/* checksum keeps the compiler from folding the calls away. */
volatile long checksum;

__attribute__((noinline)) void work(long i)
{
	checksum += i;
	if (__builtin_expect(pidscope_tick_semaphore, 0))
		DTRACE_PROBE1(pidscope, tick, i);
}

static void *run(void *arg)
{
	long n = (long)arg;

	for (long i = 0; i < n; i++)
		work(i);
	return NULL;
}

int main(void)
{
	char line[256];

	printf("ready %d\n", getpid());
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		long n;
		int threads;

		if (sscanf(line, "go %ld %d", &n, &threads) == 2) {
			pthread_t t[16];

			if (threads > 16)
				threads = 16;
			if (threads <= 0)
				run((void *)n);
			for (int i = 0; i < threads; i++)
				pthread_create(&t[i], NULL, run, (void *)n);
			for (int i = 0; i < threads; i++)
				pthread_join(t[i], NULL);
			printf("done\n");
		} else if (sscanf(line, "fork %ld", &n) == 1) {
			/* The child writes its time per call where the parent reads it. */
			volatile double *ns = mmap(NULL, sizeof(*ns), PROT_READ | PROT_WRITE,
						   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
			pid_t child = fork();

			if (child == 0) {
				struct timespec a, b;

				clock_gettime(CLOCK_MONOTONIC, &a);
				run((void *)n);
				clock_gettime(CLOCK_MONOTONIC, &b);
				*ns = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / (double)n;
				_exit(0);
			}
			waitpid(child, NULL, 0);
			printf("forked %.1f\n", *ns);
			munmap((void *)ns, sizeof(*ns));
		} else if (strncmp(line, "sem", 3) == 0) {
			printf("sem %u\n", pidscope_tick_semaphore);
		} else if (strncmp(line, "exit", 4) == 0) {
			return 0;
		}
		fflush(stdout);
	}
	return 0;
}
