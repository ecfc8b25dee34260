/*
 * filters.c is the program of the receiver's in-kernel filter and value
 * histogram tests. Call i of serve() gets the path, size and return code
 * the tests compute the same way (see receiver/filters_test.go):
 *
 *	path  i%4: "/api/users/I", "/health", "/api/orders/I", "/static/app.js"
 *	size  (i*37) % 3000 - 500
 *	code  i%5 == 0: -(i%13) - 1; i%5 == 1: i%3; otherwise 0
 *
 * Commands on stdin, one per line:
 *
 *	run N   N calls of serve() for i = 0..N-1; prints "run N SUM"
 *	exit
 */
#include <stdio.h>
#include <string.h>
#include <sys/sdt.h>

#define NOIPA __attribute__((noipa))

/* serve handles one request; its USDT probe sees the path and the size. */
NOIPA int serve(const char *path, long size, int code)
{
	STAP_PROBE2(filt, req, path, size);
	return code + (int)(size - size); /* code, without the compiler knowing */
}

int main(void)
{
	char line[128], path[64];
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready\n");
	while (fgets(line, sizeof(line), stdin)) {
		long n;
		if (sscanf(line, "run %ld", &n) == 1) {
			long sum = 0;
			for (long i = 0; i < n; i++) {
				switch (i % 4) {
				case 0: snprintf(path, sizeof(path), "/api/users/%ld", i); break;
				case 1: snprintf(path, sizeof(path), "/health"); break;
				case 2: snprintf(path, sizeof(path), "/api/orders/%ld", i); break;
				default: snprintf(path, sizeof(path), "/static/app.js"); break;
				}
				long size = (i * 37) % 3000 - 500;
				int code = i % 5 == 0 ? -(int)(i % 13) - 1 : i % 5 == 1 ? (int)(i % 3) : 0;
				sum += serve(path, size, code);
			}
			printf("run %ld %ld\n", n, sum);
		} else if (strncmp(line, "exit", 4) == 0) {
			return 0;
		}
	}
	return 0;
}
