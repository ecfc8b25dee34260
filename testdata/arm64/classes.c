/*
 * Driver of classes.S for harness/armvm's kernel check: prints "ready",
 * waits for a line on stdin (so that the test can attach uprobes while the
 * file is mapped), then on "go" runs the sites once and prints what they
 * computed, or on "excl" runs the exclusive load/store loop once.
 */
#include <stdio.h>
#include <string.h>

void run_sites(long out[4]);
long excl_inc(long *p);

int main(void)
{
	char line[64];
	long out[4] = {0, -1, -1, -1};

	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof line, stdin))
		return 2;
	if (strcmp(line, "excl\n") == 0) {
		long v = 41;

		printf("excl %ld\n", excl_inc(&v));
		return 0;
	}
	run_sites(out);
	printf("result %lx %ld %ld %ld\n", out[0], out[1], out[2], out[3]);
	return 0;
}
