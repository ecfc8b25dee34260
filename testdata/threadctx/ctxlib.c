/*
 * ctxlib.c is the writer side of OTEP 4947, as an SDK's native library
 * does it: one thread-local pointer, exported, set when a span becomes
 * active on the thread and cleared when it ends. Only the thread itself
 * writes it; compiler fences keep the record's bytes before the pointer
 * (readers look while the thread is stopped: no CPU barrier is needed).
 * Built into a shared library (with -mtls-dialect=gnu2, TLSDESC, or gnu,
 * legacy general dynamic) or into an executable (static TLS).
 */
#include <stdatomic.h>
#include <stddef.h>

#include "otel_thread_ctx.h"

__thread struct otel_thread_ctx_record *otel_thread_ctx_v1 __attribute__((visibility("default")));

void otel_ctx_attach(struct otel_thread_ctx_record *r)
{
	r->valid = 1;
	atomic_signal_fence(memory_order_seq_cst);
	otel_thread_ctx_v1 = r;
	atomic_signal_fence(memory_order_seq_cst);
}

void otel_ctx_detach(void)
{
	otel_thread_ctx_v1 = NULL;
	atomic_signal_fence(memory_order_seq_cst);
}

void *otel_ctx_address(void)
{
	return &otel_thread_ctx_v1;
}
