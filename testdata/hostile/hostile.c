/* The program whose DWARF and notes the hostile tests replace
 * (harness/testutil/hostile): built without debuginfo, then given
 * generated DWARF that describes work's parameter with a hostile type,
 * compressed-section bombs, or 100,000 copies of its USDT note.
 *
 * Commands on stdin: "work N" calls work N times and prints the sum of
 * its results; "tick N" fires the USDT probe hostile:tick N times. */
#include <stdio.h>
#include <string.h>
#include <sys/sdt.h>

__attribute__((noinline)) long work(long x)
{
	__asm__ volatile("" : "+r"(x));
	return x + 1;
}

__attribute__((noinline)) void tick(long i)
{
	DTRACE_PROBE1(hostile, tick, i);
}

int main(void)
{
	char line[64];
	long n;

	printf("ready\n");
	fflush(stdout);
	while (fgets(line, sizeof(line), stdin)) {
		if (sscanf(line, "work %ld", &n) == 1) {
			long sum = 0;
			for (long i = 0; i < n; i++)
				sum += work(i);
			printf("work %ld sum=%ld\n", n, sum);
		} else if (sscanf(line, "tick %ld", &n) == 1) {
			for (long i = 0; i < n; i++)
				tick(i);
			printf("tick %ld\n", n);
		} else if (strncmp(line, "exit", 4) == 0) {
			break;
		}
		fflush(stdout);
	}
	return 0;
}
