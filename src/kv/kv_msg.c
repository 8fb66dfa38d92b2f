/*
 * kv_msg.c - the KVStore's message bodies, encoder beside decoder
 * (docs/protocol.md). Most KV messages are header fields and a payload of
 * floats; the bodies with structure are an error answer and the optimizer
 * that KV_SET_OPT sends (as data: no code crosses the wire).
 */
#include <math.h>
#include <string.h>

#include "kv/kv_impl.h"

dt_err
dt__kv_error_encode(dt_err code, const char *msg, dt_wbuf *w)
{
	dt__wbuf_u32(w, (uint32_t)code);
	dt__wbuf_str(w, msg);
	return dt__wbuf_err(w);
}

dt_err
dt__kv_error_decode(const void *meta, size_t len, dt_err *code, char *msg,
                    size_t cap)
{
	dt_rbuf r;
	uint32_t c;
	dt_err err;

	dt__rbuf_init(&r, meta, len);
	c = dt__rbuf_u32(&r);
	dt__rbuf_str(&r, msg, cap);
	if ((err = dt__rbuf_err(&r, "KV error answer")))
		return err;
	if (c == 0 || c >= DT__ERR_COUNT)
		return dt__fail(DT_EPROTO, "KV error answer: error code %u", c);
	*code = (dt_err)c;
	return DT_OK;
}

void
dt__opt_encode(const dt_opt *o, dt_wbuf *w)
{
	dt__wbuf_u8(w, (uint8_t)o->kind);
	dt__wbuf_f64(w, o->p.lr);
	dt__wbuf_f64(w, o->p.momentum);
	dt__wbuf_f64(w, o->p.wd);
	dt__wbuf_f64(w, o->p.rescale_grad);
	dt__wbuf_f64(w, o->p.clip_gradient);
	dt__wbuf_f64(w, o->p.beta1);
	dt__wbuf_f64(w, o->p.beta2);
	dt__wbuf_f64(w, o->p.epsilon);
}

dt_err
dt__opt_decode(dt_rbuf *r, dt_opt *o)
{
	dt_err err;

	memset(o, 0, sizeof(*o));
	o->kind = (dt_opt_kind)dt__rbuf_u8(r);
	o->p.lr = dt__rbuf_f64(r);
	o->p.momentum = dt__rbuf_f64(r);
	o->p.wd = dt__rbuf_f64(r);
	o->p.rescale_grad = dt__rbuf_f64(r);
	o->p.clip_gradient = dt__rbuf_f64(r);
	o->p.beta1 = dt__rbuf_f64(r);
	o->p.beta2 = dt__rbuf_f64(r);
	o->p.epsilon = dt__rbuf_f64(r);
	if ((err = dt__rbuf_err(r, "KV_SET_OPT")))
		return err;
	if (o->kind != DT_OPT_SGD && o->kind != DT_OPT_ADAM)
		return dt__fail(DT_EPROTO, "KV_SET_OPT: unknown optimizer %d",
		                (int)o->kind);
	if (!isfinite(o->p.lr) || !isfinite(o->p.momentum) ||
	    !isfinite(o->p.wd) || !isfinite(o->p.rescale_grad) ||
	    !isfinite(o->p.clip_gradient) || !(o->p.momentum >= 0) ||
	    !(o->p.momentum < 1) ||
	    (o->kind == DT_OPT_ADAM &&
	     (!(o->p.beta1 >= 0 && o->p.beta1 < 1) ||
	      !(o->p.beta2 >= 0 && o->p.beta2 < 1) || !(o->p.epsilon > 0))))
		return dt__fail(DT_EPROTO, "KV_SET_OPT: parameters out of "
		                           "range");
	return DT_OK;
}
