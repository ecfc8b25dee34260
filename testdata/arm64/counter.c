/*
 * Fixture of harness/armvm's uprobe smoke test: calls work() as many times
 * as its first argument says, then prints the sum of the results, so that a
 * test can compare the hits of uprobes on work's entry and returns with
 * the number of calls, and check that the probed program still computes
 * the right sum. Built natively on the host and statically for arm64 (the
 * VM has no C library).
 */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noipa)) long work(long i)
{
	if (i % 3 == 0)
		return i * 2;
	return i + 1;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1;
	long sum = 0;

	for (long i = 0; i < n; i++)
		sum += work(i);
	printf("sum %ld\n", sum);
	return 0;
}
