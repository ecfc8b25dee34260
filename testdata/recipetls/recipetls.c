// recipetls is the TLS program of the recipe tests (receiver's
// recipes_test.go): one process, a TLS server thread and a TLS client on a
// socketpair, through OpenSSL's libssl. Usage: recipetls CERT KEY. It
// prints "ready", then takes commands on stdin:
//
//	connect         a new connection: the server thread's SSL_accept and
//	                the client's SSL_connect (TLS 1.3): "connected"
//	write N SIZE    the client sends N SSL_write calls of SIZE bytes each
//	                (the bytes "0123456789" repeated); the server reads them
//	                with one SSL_read per record: "wrote N"
//	writeex N SIZE  the same with SSL_write_ex and SSL_read_ex
//	time N SIZE     write N × SIZE, timed: "time NS_PER_WRITE"
//	exit
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* The connection: the server thread serves the last one. */
static SSL *server, *client;
static SSL_CTX *sctx, *cctx;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static long want, got; /* bytes the server is to read, and has read */
static int ex;         /* the server reads with SSL_read_ex */
static int accepted;   /* the server's SSL_accept is done */

static void die(const char *what) {
	fprintf(stderr, "recipetls: %s\n", what);
	ERR_print_errors_fp(stderr);
	exit(1);
}

static void *serve(void *arg) {
	SSL *ssl = arg;
	if (SSL_accept(ssl) != 1)
		die("SSL_accept");
	pthread_mutex_lock(&mu);
	accepted = 1;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	static char buf[65536];
	for (;;) {
		pthread_mutex_lock(&mu);
		while (got >= want)
			pthread_cond_wait(&cv, &mu);
		int use_ex = ex;
		pthread_mutex_unlock(&mu);
		long n;
		if (use_ex) {
			size_t r = 0;
			if (SSL_read_ex(ssl, buf, sizeof buf, &r) != 1)
				die("SSL_read_ex");
			n = r;
		} else {
			int r = SSL_read(ssl, buf, sizeof buf);
			if (r <= 0)
				die("SSL_read");
			n = r;
		}
		pthread_mutex_lock(&mu);
		got += n;
		pthread_cond_broadcast(&cv);
		pthread_mutex_unlock(&mu);
	}
	return 0;
}

static long now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* send writes n × size bytes and waits until the server has read them. */
static void send_all(long n, long size, int use_ex) {
	static char data[65536];
	for (long i = 0; i < size; i++)
		data[i] = '0' + i % 10;
	pthread_mutex_lock(&mu);
	ex = use_ex;
	want += n * size;
	pthread_cond_broadcast(&cv);
	pthread_mutex_unlock(&mu);
	for (long i = 0; i < n; i++) {
		if (use_ex) {
			size_t w = 0;
			if (SSL_write_ex(client, data, size, &w) != 1 || (long)w != size)
				die("SSL_write_ex");
		} else if (SSL_write(client, data, size) != size) {
			die("SSL_write");
		}
	}
	pthread_mutex_lock(&mu);
	while (got < want)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
}

/* connect makes a new connection; the previous one's server thread is
 * left waiting: it has nothing more to read. */
static void connect_pair(void) {
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		die("socketpair");
	pthread_mutex_lock(&mu);
	want = got = 0;
	accepted = 0;
	pthread_mutex_unlock(&mu);
	server = SSL_new(sctx);
	client = SSL_new(cctx);
	SSL_set_fd(server, sv[0]);
	SSL_set_fd(client, sv[1]);
	pthread_t th;
	pthread_create(&th, 0, serve, server);
	if (SSL_connect(client) != 1)
		die("SSL_connect");
	pthread_mutex_lock(&mu);
	while (!accepted)
		pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
}

int main(int argc, char **argv) {
	if (argc != 3)
		die("usage: recipetls CERT KEY");
	sctx = SSL_CTX_new(TLS_server_method());
	cctx = SSL_CTX_new(TLS_client_method());
	if (!sctx || !cctx)
		die("SSL_CTX_new");
	if (SSL_CTX_use_certificate_file(sctx, argv[1], SSL_FILETYPE_PEM) != 1 ||
	    SSL_CTX_use_PrivateKey_file(sctx, argv[2], SSL_FILETYPE_PEM) != 1)
		die("loading the certificate");
	/* No session tickets: nothing but the writes' records after the handshake. */
	SSL_CTX_set_num_tickets(sctx, 0);
	setvbuf(stdout, 0, _IOLBF, 0);
	printf("ready\n");
	char line[256];
	while (fgets(line, sizeof line, stdin)) {
		long n = 0, size = 0;
		if (!strncmp(line, "connect", 7)) {
			connect_pair();
			printf("connected\n");
		} else if (sscanf(line, "write %ld %ld", &n, &size) == 2 && size > 0 && size <= 16384) {
			send_all(n, size, 0);
			printf("wrote %ld\n", n);
		} else if (sscanf(line, "writeex %ld %ld", &n, &size) == 2 && size > 0 && size <= 16384) {
			send_all(n, size, 1);
			printf("wrote %ld\n", n);
		} else if (sscanf(line, "time %ld %ld", &n, &size) == 2 && size > 0 && size <= 16384 && n > 0) {
			long t0 = now_ns();
			send_all(n, size, 0);
			printf("time %ld\n", (now_ns() - t0) / n);
		} else if (!strncmp(line, "exit", 4)) {
			break;
		} else {
			printf("what\n");
		}
	}
	return 0;
}
