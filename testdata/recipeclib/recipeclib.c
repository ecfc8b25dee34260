// recipeclib is the C library program of the recipe tests (receiver's
// recipes_test.go): it looks names up and allocates memory on command,
// one command per line on stdin, and answers one line on stdout. It uses
// no stdio, so that the only allocations it makes after "ready" are the
// ones it is asked for.
//
//	gai NAME [numeric]   getaddrinfo(NAME) (AI_NUMERICHOST): "gai RESULT"
//	ghbn NAME            gethostbyname(NAME): "ghbn FOUND"
//	ghbn2 NAME           gethostbyname2(NAME, AF_INET): "ghbn2 FOUND"
//	malloc N SIZE        N times malloc(SIZE) and free: "malloc N"
//	time-malloc N SIZE   the same, timed: "time NS_PER_CALL"
//	time-gai N NAME      N numeric getaddrinfo calls, timed
//	exit
#define _GNU_SOURCE
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void say(const char *s) { (void)!write(1, s, strlen(s)); }

static void sayn(const char *prefix, long n) {
	char buf[64], digits[24];
	int i = 0, len;
	unsigned long u = n < 0 ? -(unsigned long)n : (unsigned long)n;
	do {
		digits[i++] = '0' + u % 10;
		u /= 10;
	} while (u);
	len = strlen(prefix);
	memcpy(buf, prefix, len);
	buf[len++] = ' ';
	if (n < 0)
		buf[len++] = '-';
	while (i)
		buf[len++] = digits[--i];
	buf[len++] = '\n';
	(void)!write(1, buf, len);
}

static long now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static int lookup(const char *name, int numeric) {
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = 0;
	if (numeric)
		hints.ai_flags = AI_NUMERICHOST;
	int r = getaddrinfo(name, 0, &hints, &res);
	if (r == 0)
		freeaddrinfo(res);
	return r;
}

/* allocate is not inlined, so that the compiler keeps each malloc. */
__attribute__((noinline)) static void allocate(long n, long size) {
	for (long i = 0; i < n; i++) {
		char *volatile p = malloc(size);
		if (p)
			p[0] = 1;
		free(p);
	}
}

int main(void) {
	static char line[512];
	size_t have = 0;
	say("ready\n");
	for (;;) {
		ssize_t r = read(0, line + have, sizeof line - 1 - have);
		if (r <= 0)
			return 0;
		have += r;
		char *nl;
		while ((nl = memchr(line, '\n', have))) {
			*nl = 0;
			char *words[4] = {0};
			int nw = 0;
			for (char *w = strtok(line, " "); w && nw < 4; w = strtok(0, " "))
				words[nw++] = w;
			if (nw == 0) {
			} else if (!strcmp(words[0], "exit")) {
				return 0;
			} else if (!strcmp(words[0], "gai") && nw >= 2) {
				sayn("gai", lookup(words[1], nw == 3));
			} else if (!strcmp(words[0], "ghbn") && nw == 2) {
				sayn("ghbn", gethostbyname(words[1]) != 0);
			} else if (!strcmp(words[0], "ghbn2") && nw == 2) {
				sayn("ghbn2", gethostbyname2(words[1], AF_INET) != 0);
			} else if (!strcmp(words[0], "malloc") && nw == 3) {
				allocate(atol(words[1]), atol(words[2]));
				sayn("malloc", atol(words[1]));
			} else if (!strcmp(words[0], "time-malloc") && nw == 3) {
				long n = atol(words[1]), t0 = now_ns();
				allocate(n, atol(words[2]));
				sayn("time", (now_ns() - t0) / n);
			} else if (!strcmp(words[0], "time-gai") && nw == 3) {
				long n = atol(words[1]), t0 = now_ns();
				for (long i = 0; i < n; i++)
					lookup(words[2], 1);
				sayn("time", (now_ns() - t0) / n);
			} else {
				say("what\n");
			}
			size_t used = nl + 1 - line;
			memmove(line, nl + 1, have - used);
			have -= used;
		}
		if (have == sizeof line - 1)
			have = 0;
	}
}
