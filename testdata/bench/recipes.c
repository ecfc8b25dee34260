// recipes.c is the workload of the benchmark's recipe rows for the C
// libraries (harness/bench/recipes.go): it calls what the dns, malloc and
// tls recipes probe, in the real glibc and libssl of this machine, from
// one thread, and times the calls by the thread's CPU time. It prints
// "ready" and answers on stdout:
//
//	run gai N ROUNDS     N × getaddrinfo("127.0.0.1", AI_NUMERICHOST) and
//	                     freeaddrinfo per round
//	run malloc N ROUNDS  N × malloc(64) and free per round
//	run tls N ROUNDS     N × a 64-byte SSL_write by a TLS 1.3 client and
//	                     the SSL_read of it by the server, both ends in
//	                     this thread over a BIO pair, per round
//
// each with "ns MEDIAN": the median over ROUNDS of the thread's CPU time
// per call, in ns.
#define _GNU_SOURCE
#include <netdb.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

static long thread_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static volatile void *sink;

static void do_gai(long n) {
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_flags = AI_NUMERICHOST}, *res;
	for (long i = 0; i < n; i++) {
		if (getaddrinfo("127.0.0.1", NULL, &hints, &res) == 0) {
			sink = res;
			freeaddrinfo(res);
		}
	}
}

// The allocator is called through volatile pointers: the compiler may
// otherwise drop a malloc whose memory is freed unused.
static void *(*volatile malloc_fn)(size_t) = malloc;
static void (*volatile free_fn)(void *) = free;

static void do_malloc(long n) {
	for (long i = 0; i < n; i++) {
		void *p = malloc_fn(64);
		sink = p;
		free_fn(p);
	}
}

static SSL *client, *server;

// tls_setup makes a self-signed P-256 certificate, a TLS 1.3 client and
// server joined by a BIO pair, and completes their handshake.
static int tls_setup(void) {
	EVP_PKEY *key = EVP_EC_gen("P-256");
	X509 *cert = X509_new();
	if (!key || !cert)
		return -1;
	ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
	X509_gmtime_adj(X509_getm_notBefore(cert), 0);
	X509_gmtime_adj(X509_getm_notAfter(cert), 86400);
	X509_set_pubkey(cert, key);
	X509_NAME_add_entry_by_txt(X509_get_subject_name(cert), "CN", MBSTRING_ASC, (const unsigned char *)"localhost", -1, -1, 0);
	X509_set_issuer_name(cert, X509_get_subject_name(cert));
	if (!X509_sign(cert, key, EVP_sha256()))
		return -1;
	SSL_CTX *sctx = SSL_CTX_new(TLS_server_method()), *cctx = SSL_CTX_new(TLS_client_method());
	if (!sctx || !cctx || SSL_CTX_use_certificate(sctx, cert) != 1 || SSL_CTX_use_PrivateKey(sctx, key) != 1)
		return -1;
	SSL_CTX_set_min_proto_version(sctx, TLS1_3_VERSION);
	SSL_CTX_set_min_proto_version(cctx, TLS1_3_VERSION);
	SSL_CTX_set_num_tickets(sctx, 0);
	client = SSL_new(cctx);
	server = SSL_new(sctx);
	BIO *cb, *sb;
	if (!client || !server || !BIO_new_bio_pair(&cb, 1 << 17, &sb, 1 << 17))
		return -1;
	SSL_set_bio(client, cb, cb);
	SSL_set_bio(server, sb, sb);
	SSL_set_connect_state(client);
	SSL_set_accept_state(server);
	for (int i = 0; i < 100; i++) {
		int c = SSL_do_handshake(client), s = SSL_do_handshake(server);
		if (c == 1 && s == 1)
			return 0;
	}
	return -1;
}

static void do_tls(long n) {
	char out[64], in[64];
	memset(out, 'x', sizeof out);
	for (long i = 0; i < n; i++) {
		if (SSL_write(client, out, sizeof out) != sizeof out || SSL_read(server, in, sizeof in) != sizeof in) {
			fprintf(stderr, "recipes: SSL_write or SSL_read failed\n");
			exit(1);
		}
	}
}

int main(void) {
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (tls_setup() != 0) {
		ERR_print_errors_fp(stderr);
		fprintf(stderr, "recipes: the TLS handshake failed\n");
		return 1;
	}
	printf("ready\n");
	char line[256], mode[32];
	long n, rounds;
	while (fgets(line, sizeof line, stdin)) {
		if (sscanf(line, "run %31s %ld %ld", mode, &n, &rounds) != 3 || n <= 0 || rounds <= 0 || rounds > 1000) {
			if (!strncmp(line, "exit", 4))
				return 0;
			continue;
		}
		void (*fn)(long) = !strcmp(mode, "gai") ? do_gai : !strcmp(mode, "malloc") ? do_malloc : !strcmp(mode, "tls") ? do_tls : NULL;
		if (!fn) {
			printf("error unknown mode %s\n", mode);
			continue;
		}
		double *per = calloc(rounds, sizeof *per);
		fn(n / 10 + 1); // warm-up
		for (long r = 0; r < rounds; r++) {
			long t0 = thread_ns();
			fn(n);
			per[r] = (double)(thread_ns() - t0) / n;
		}
		qsort(per, rounds, sizeof *per, cmp_double);
		printf("ns %.1f\n", per[rounds / 2]);
		free(per);
	}
	return 0;
}
