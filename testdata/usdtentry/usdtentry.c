/*
 * usdtentry: a function whose first instruction is the nop of a USDT probe
 * with a semaphore (app:start at entered(), built -O2
 * -fcf-protection=none), so that a uprobe on the function's entry or
 * return and the USDT probe share one kernel uprobe at one file offset.
 * Commands on stdin: "run N" calls entered() and other() N times;
 * "semaphore" prints the probe's semaphore as the process sees it.
 */
#define _SDT_HAS_SEMAPHORES 1
#include <stdio.h>
#include <sys/sdt.h>

unsigned short app_start_semaphore __attribute__((section(".probes")));

__attribute__((noinline)) int entered(int x)
{
	DTRACE_PROBE1(app, start, x);
	return x + 1;
}

__attribute__((noinline)) int other(int x)
{
	return x * 2;
}

int main(void)
{
	char line[64];
	int n;
	long sum = 0;

	printf("ready\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		if (sscanf(line, "run %d", &n) == 1) {
			for (int i = 0; i < n; i++)
				sum += entered(i) + other(i);
			printf("ran %d\n", n);
		} else if (sscanf(line, "semaphore%n", &n) == 0 && n == 9) {
			printf("semaphore %u\n", (unsigned)*(volatile unsigned short *)&app_start_semaphore);
		}
		fflush(stdout);
	}
	return sum == 42;
}
