/*
 * err.c - the error table and the per-thread detailed error message.
 *
 * Library code reports a failure with dt__fail(code, fmt, ...), which records
 * a message naming what was wrong on the calling thread and returns the code,
 * so a failing path reads `return dt__fail(DT_ESIZE, "push of key %llu: ...")`.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"

static _Thread_local char last_msg[DT__ERRMSG_MAX];

const char *
dt_strerror(dt_err err)
{
	switch (err) {
#define DT_ERR_TEXT_(name, value, text)                                        \
	case name:                                                             \
		return text;
		DT_ERR_TABLE(DT_ERR_TEXT_)
#undef DT_ERR_TEXT_
	}
	return "unknown error";
}

const char *
dt_errname(dt_err err)
{
	switch (err) {
#define DT_ERR_NAME_(name, value, text)                                        \
	case name:                                                             \
		return #name;
		DT_ERR_TABLE(DT_ERR_NAME_)
#undef DT_ERR_NAME_
	}
	return "DT_E?";
}

const char *
dt_errmsg(void)
{
	return last_msg;
}

void
dt__errmsg_set(const char *msg)
{
	snprintf(last_msg, sizeof(last_msg), "%s", msg);
}

void
dt__err_keep(dt__err_kept *k, dt_err err)
{
	k->err = err;
	snprintf(k->msg, sizeof(k->msg), "%s", last_msg);
}

dt_err
dt__err_restore(const dt__err_kept *k)
{
	memcpy(last_msg, k->msg, sizeof(last_msg));
	return k->err;
}

dt_err
dt__fail(dt_err err, const char *fmt, ...)
{
	char buf[sizeof(last_msg)];
	va_list ap;

	/* Format aside first: callers may pass dt_errmsg() as an argument. */
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	memcpy(last_msg, buf, sizeof(buf));
	return err;
}

void
dt__clear_error(void)
{
	last_msg[0] = '\0';
}
