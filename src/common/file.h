/*
 * file.h - opening the files dtrain reads and writes when other users may
 * share the directory: every reader and every writer of the project goes
 * through these, so the checks below are made once.
 *
 * Reading: a file is opened without blocking and refused unless it is a
 * regular file (a FIFO would hang the open or the read, a device would
 * hand out endless bytes).
 *
 * Writing: a new file is created under a name nobody can guess, with
 * O_CREAT | O_EXCL | O_NOFOLLOW, in a directory opened once and checked;
 * it replaces the old one by rename(2), which replaces a symbolic link or
 * a hard link planted at the final name instead of writing through it.
 *
 * Beside them, two chores on descriptors that the library and the dtrain
 * command share: writing all of a buffer, and room for more descriptors.
 * Private to the library (not installed).
 */
#ifndef DT_COMMON_FILE_H
#define DT_COMMON_FILE_H

#include <stdio.h>

#include "dtrain/err.h"

/*
 * Open path for reading (O_CLOEXEC, blocking once opened) if it is a
 * regular file; *fd is the descriptor, the caller closes it. On error *fd
 * is -1 and the message names the file as `what` then path ("checkpoint
 * /x: ..." for what "checkpoint ", "DTRAIN_SECRET_FILE=/x ..." for what
 * "DTRAIN_SECRET_FILE="); code is the error returned, and a file that is
 * not a regular one fails with "<what><path> is not a regular file".
 */
dt_err dt__file_open_regular(dt_err code, const char *what, const char *path,
                             int *fd);
/* The same as a stdio stream ("r"); the caller fcloses it. */
dt_err dt__file_fopen_regular(dt_err code, const char *what, const char *path,
                              FILE **f);

/*
 * A file being written in place of another. Fields are private to file.c;
 * fd (or the stream, once asked for) is where the bytes go.
 */
typedef struct dt__file_tmp {
	int fd;       /* the new file, -1 once closed */
	int dfd;      /* its directory */
	FILE *f;      /* a stream over fd, if dt__file_stream made one */
	int placed;   /* renamed to its final name already */
	char *path;   /* the final path, for messages */
	char *base;   /* the final name in the directory */
	char tmp[80]; /* the temporary name in the directory */
} dt__file_tmp;

/*
 * Create a new, empty file that is to become path: in path's directory,
 * named ".<name>.<16 random hex digits>.tmp", mode `mode` less the umask
 * (0600 for a private file). The directory is refused when every user may
 * write in it and it is not sticky: anyone could then rename the file
 * away; and so is a final name that holds something other than a regular
 * file or a link to one (a device, a FIFO, a directory, /dev/stdout).
 * what names the file in messages ("checkpoint "). On error nothing is
 * left behind and t needs no cleanup.
 */
dt_err dt__file_create_tmp(const char *what, const char *path, int mode,
                           dt__file_tmp *t);
/* A stdio stream ("w") over the new file, owned by t; NULL (with a
 * message) when memory runs out. */
FILE *dt__file_stream(dt__file_tmp *t);
/* Give the new file its final name now (for a file written while it is
 * read, such as a log); it stays open for writing. */
dt_err dt__file_place(dt__file_tmp *t);
/* Flush the new file (to the disk too when sync), close it and give it its
 * final name, unless placed already. t is finished in every case: on error
 * the new file is removed (unless already placed). */
dt_err dt__file_commit(dt__file_tmp *t, int sync);
/* Close and remove the new file (unless placed already); finishes t. */
void dt__file_abort(dt__file_tmp *t);

/*
 * write(2) all n bytes of p to fd: a short write continues, EINTR is
 * retried, and a descriptor that is non-blocking (the launcher's stdout
 * may be a pipe left so by a child) is waited for with poll(2), as long
 * as its reader takes nothing: output blocks as it would on a blocking
 * descriptor. 0, or -1 with errno set (EPIPE: the reader is gone).
 */
int dt__write_all(int fd, const void *p, size_t n);

/*
 * Raise the soft limit of open descriptors to need, or to the hard limit
 * when that is lower, if it is below need now. When before is not NULL it
 * receives the limits found, to restore them (the dtrain command does, so
 * that the programs it starts get the limits it got). 1 when the limit
 * was raised, 0 when it was not (high enough, or refused).
 */
struct rlimit;
int dt__nofile_raise(unsigned long need, struct rlimit *before);

#endif
