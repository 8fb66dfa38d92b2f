/*
 * raw_ask.h - the request-and-answer loop of the test programs that play a
 * worker sending hand-made KV frames to server 0 (kv_bad_push.c,
 * kv_member.c): one request at a time, its answer kept in `answer` (the
 * error code and message decoded, the payload's length and first bytes).
 * Included by one program each; everything here is static.
 */
#ifndef DT_TESTS_RAW_ASK_H
#define DT_TESTS_RAW_ASK_H

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "kv/kv_impl.h"

static pthread_mutex_t raw_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t raw_cv = PTHREAD_COND_INITIALIZER;
static struct {
	int have;
	uint64_t seq;
	int error;
	uint32_t arg2;
	dt_err code;
	char msg[512];
	size_t len;        /* the payload's */
	uint8_t head[256]; /* and its first bytes */
} answer;

/* The node's hook: keep the answer to a request. */
static void
raw_on_msg(void *arg, dt_node *n, dt_conn *c, dt_msg *m)
{
	(void)arg;
	(void)n;
	(void)c;
	if (!(m->hdr.flags & DT_F_RESPONSE))
		return;
	pthread_mutex_lock(&raw_mu);
	answer.have = 1;
	answer.seq = m->hdr.seq;
	answer.error = (m->hdr.flags & DT_F_ERROR) != 0;
	answer.arg2 = m->hdr.arg2;
	answer.msg[0] = '\0';
	answer.code = DT_OK;
	if (answer.error &&
	    dt__kv_error_decode(m->meta, m->hdr.meta_len, &answer.code,
	                        answer.msg, sizeof(answer.msg)))
		snprintf(answer.msg, sizeof(answer.msg), "(malformed)");
	answer.len = m->payload ? m->hdr.payload_len : 0;
	memset(answer.head, 0, sizeof(answer.head));
	if (m->payload)
		memcpy(answer.head, m->payload,
		       (size_t)DT_MIN(answer.len, sizeof(answer.head)));
	pthread_cond_broadcast(&raw_cv);
	pthread_mutex_unlock(&raw_mu);
}

/* Send h (a request; its seq is set here) with meta and body to server 0
 * and wait secs at most for its answer; prog names the program in
 * messages. 0 when answered, else -1 (said on stderr). */
static int
raw_ask(const char *prog, int secs, dt_node *n, dt_msg_hdr *h, const void *meta,
        uint32_t meta_len, const void *body, size_t len)
{
	static uint64_t seq = 1;
	struct iovec iov = {(void *)body, len};
	struct timespec until;

	h->flags = DT_F_REQUEST;
	h->seq = seq++;
	pthread_mutex_lock(&raw_mu);
	answer.have = 0;
	pthread_mutex_unlock(&raw_mu);
	if (dt__node_send(n, dt__node_server_id(n, 0), h, meta, meta_len,
	                  len ? &iov : NULL, len ? 1 : 0)) {
		fprintf(stderr, "%s: send: %s\n", prog, dt_errmsg());
		return -1;
	}
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += secs;
	pthread_mutex_lock(&raw_mu);
	while (!(answer.have && answer.seq == h->seq))
		if (pthread_cond_timedwait(&raw_cv, &raw_mu, &until)) {
			pthread_mutex_unlock(&raw_mu);
			fprintf(stderr, "%s: no answer in %d s\n", prog, secs);
			return -1;
		}
	pthread_mutex_unlock(&raw_mu);
	return 0;
}

#endif
