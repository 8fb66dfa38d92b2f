/*
 * dtrain/err.h - error codes shared by every dtrain call.
 *
 * Every public call returns a dt_err. DT_OK is zero; every other value names
 * a class of failure. dt_strerror() gives the fixed text of a code, and
 * dt_errmsg() the detailed message of the last failure on the calling thread
 * ("push of key 12: length 300 != initialised length 256"), which is what a
 * program should print.
 */
#ifndef DTRAIN_ERR_H
#define DTRAIN_ERR_H

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, text): the one table of error codes. */
#define DT_ERR_TABLE(X)                                                        \
	X(DT_OK, 0, "success")                                                 \
	X(DT_EINVAL, 1, "invalid argument")                                    \
	X(DT_ENOMEM, 2, "out of memory")                                       \
	X(DT_ECONFIG, 3, "bad configuration")                                  \
	X(DT_EIO, 4, "input/output error")                                     \
	X(DT_ETIMEDOUT, 5, "timed out")                                        \
	X(DT_ECONNREFUSED, 6, "connection refused")                            \
	X(DT_ECLOSED, 7, "connection closed")                                  \
	X(DT_EPROTO, 8, "protocol error")                                      \
	X(DT_ETOOBIG, 9, "message too large")                                  \
	X(DT_ENOKEY, 10, "unknown key")                                        \
	X(DT_ESIZE, 11, "size mismatch")                                       \
	X(DT_EEXIST, 12, "already exists")                                     \
	X(DT_ESTATE, 13, "wrong state for this call")                          \
	X(DT_EPEER, 14, "peer failed")                                         \
	X(DT_EFORMAT, 15, "bad file format")                                   \
	X(DT_ENOTSUP, 16, "not supported")                                     \
	X(DT_EMISMATCH, 17, "ranks disagree")                                  \
	X(DT_ESYS, 18, "system call failed")                                   \
	X(DT_ESHUTDOWN, 19, "cluster is shutting down")                        \
	X(DT_EAUTH, 20, "authentication failed")                               \
	X(DT_EMEMBERSHIP, 21, "elastic membership changed")

typedef enum dt_err {
#define DT_ERR_ENUM_(name, value, text) name = value,
	DT_ERR_TABLE(DT_ERR_ENUM_)
#undef DT_ERR_ENUM_
} dt_err;

/* Fixed text of an error code ("timed out"); never NULL. */
const char *dt_strerror(dt_err err);

/* Name of an error code ("DT_ETIMEDOUT"); never NULL. */
const char *dt_errname(dt_err err);

/*
 * Detailed message of the last failed dtrain call on this thread, or "" if
 * none failed. The text stays valid until the next dtrain call on the thread.
 */
const char *dt_errmsg(void);

#ifdef __cplusplus
}
#endif
#endif
