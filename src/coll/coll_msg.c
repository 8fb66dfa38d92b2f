/*
 * coll_msg.c - the collectives' message metadata, encoder beside decoder
 * (docs/protocol.md). Every DATA and READY message starts its metadata
 * with the operation's signature, so a receiver checks that both ranks run
 * the same operation before it touches a byte of data; a DATA message read
 * from the sender's memory (same host) adds the address to read. ABORT
 * carries one line of text.
 */
#include <stdio.h>
#include <string.h>

#include "coll/state.h"
#include "net/codec.h"

void
dt__coll_sig_encode(const dt__coll_sig *s, uint8_t out[DT__COLL_SIG_LEN])
{
	out[0] = s->kind;
	out[1] = s->dtype;
	out[2] = s->op;
	out[3] = s->ntensors;
	dt__put_u32(out + 4, s->root);
	dt__put_u64(out + 8, s->count);
	dt__put_u64(out + 16, s->hash);
}

dt_err
dt__coll_sig_decode(const uint8_t *in, size_t len, dt__coll_sig *s)
{
	if (in == NULL || len < DT__COLL_SIG_LEN)
		return dt__fail(DT_EPROTO,
		                "collective message: signature of %zu bytes "
		                "(expected %d)",
		                len, DT__COLL_SIG_LEN);
	s->kind = in[0];
	s->dtype = in[1];
	s->op = in[2];
	s->ntensors = in[3];
	s->root = dt__get_u32(in + 4);
	s->count = dt__get_u64(in + 8);
	s->hash = dt__get_u64(in + 16);
	return DT_OK;
}

int
dt__coll_sig_equal(const dt__coll_sig *a, const dt__coll_sig *b)
{
	return a->kind == b->kind && a->dtype == b->dtype && a->op == b->op &&
	       a->ntensors == b->ntensors && a->root == b->root &&
	       a->count == b->count && a->hash == b->hash;
}

void
dt__coll_sig_describe(const dt__coll_sig *s, char *out, size_t cap)
{
	const char *dt = dt__coll_dtype_valid(s->dtype)
	                     ? dt_dtype_name((dt_dtype)s->dtype)
	                     : "?";
	const char *op =
	    dt__coll_op_valid(s->op) ? dt_coll_op_name((dt_coll_op)s->op) : "?";
	unsigned long long n = (unsigned long long)s->count;

	switch (s->kind) {
	case DT__COLL_ALLREDUCE:
		if (s->ntensors > 1)
			snprintf(out, cap,
			         "allreduce(group of %u tensors, count=%llu, "
			         "%s, %s)",
			         s->ntensors, n, dt, op);
		else
			snprintf(out, cap, "allreduce(count=%llu, %s, %s)", n,
			         dt, op);
		break;
	case DT__COLL_BROADCAST:
		snprintf(out, cap, "broadcast(count=%llu, %s, root=%u)", n, dt,
		         s->root);
		break;
	case DT__COLL_ALLGATHERV:
		snprintf(out, cap, "allgatherv(total count=%llu, %s)", n, dt);
		break;
	case DT__COLL_REDUCE_SCATTER:
		snprintf(out, cap,
		         "reduce_scatter(count=%llu per rank, %s, %s)", n, dt,
		         op);
		break;
	case DT__COLL_BARRIER:
		snprintf(out, cap, "barrier()");
		break;
	default:
		snprintf(out, cap, "operation kind %u", s->kind);
	}
}

dt_err
dt__coll_meta_decode(const uint8_t *meta, size_t len, unsigned cmd,
                     dt__coll_meta *out)
{
	dt_err err;

	memset(out, 0, sizeof(*out));
	if (cmd != DT_CMD_COLL_DATA && cmd != DT_CMD_COLL_READY)
		return DT_OK;
	if ((err = dt__coll_sig_decode(meta, len, &out->sig)))
		return err;
	out->has_sig = 1;
	if (cmd == DT_CMD_COLL_DATA && len >= DT__COLL_META_CMA) {
		out->has_remote = 1;
		out->remote = dt__get_u64(meta + DT__COLL_SIG_LEN);
	}
	return DT_OK;
}

uint32_t
dt__coll_meta_encode(const dt__coll_sig *sig, int with_remote, uint64_t remote,
                     uint8_t out[DT__COLL_META_CMA])
{
	dt__coll_sig_encode(sig, out);
	if (!with_remote)
		return DT__COLL_SIG_LEN;
	dt__put_u64(out + DT__COLL_SIG_LEN, remote);
	return DT__COLL_META_CMA;
}
