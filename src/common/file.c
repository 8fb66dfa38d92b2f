/*
 * file.c - the readers' and writers' checks declared in file.h: a file to
 * read must be a regular file, a file written goes in under a random name
 * created exclusively, then is renamed over the old one. Every module that
 * touches a file (checkpoints, parameter files, logs, host files, the
 * secret file, plots) calls these rather than open(2) or fopen(3).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "common/util.h"

dt_err
dt__file_open_regular(dt_err code, const char *what, const char *path, int *fd)
{
	struct stat st;
	int flags;

	/* O_NONBLOCK: opening a FIFO for reading waits for a writer, and
	 * would hang here before fstat could say what the file is. */
	*fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (*fd < 0)
		return dt__fail(code, "%s%s: cannot open: %s", what, path,
		                strerror(errno));
	if (fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(*fd);
		*fd = -1;
		return dt__fail(code, "%s%s is not a regular file", what, path);
	}
	/* A regular file never blocks; reads go back to the usual
	 * semantics so that callers need not handle EAGAIN. */
	if ((flags = fcntl(*fd, F_GETFL)) < 0 ||
	    fcntl(*fd, F_SETFL, flags & ~O_NONBLOCK) < 0) {
		int e = errno;

		close(*fd);
		*fd = -1;
		return dt__fail(code, "%s%s: %s", what, path, strerror(e));
	}
	return DT_OK;
}

dt_err
dt__file_fopen_regular(dt_err code, const char *what, const char *path,
                       FILE **f)
{
	int fd;
	dt_err err;

	*f = NULL;
	if ((err = dt__file_open_regular(code, what, path, &fd)))
		return err;
	if ((*f = fdopen(fd, "r")) == NULL) {
		int e = errno;

		close(fd);
		return dt__fail(code, "%s%s: %s", what, path, strerror(e));
	}
	return DT_OK;
}

/* 64 bits nobody else can predict, for a temporary name. The name is
 * created with O_EXCL anyway, so a weak fallback costs only retries. */
static uint64_t
random_u64(void)
{
	static unsigned counter;
	uint64_t r;

	if (getrandom(&r, sizeof(r), GRND_NONBLOCK) == (ssize_t)sizeof(r))
		return r;
	return dt__now_ns() ^ (uint64_t)getpid() << 32 ^
	       ++counter * 0x9E3779B97F4A7C15ull;
}

/* What is at the final name may be replaced if it is a regular file, or a
 * link (rename(2) replaces the link itself) to one or to nothing. Anything
 * else is refused: renaming over /dev/null or a FIFO, or over the link
 * /dev/stdout, would put a regular file in the place of a device. */
static dt_err
check_final(const char *what, const dt__file_tmp *t)
{
	struct stat st;

	if (fstatat(t->dfd, t->base, &st, AT_SYMLINK_NOFOLLOW) != 0)
		return DT_OK; /* nothing there yet */
	if (S_ISLNK(st.st_mode) && fstatat(t->dfd, t->base, &st, 0) != 0)
		return DT_OK; /* a link to nothing */
	if (!S_ISREG(st.st_mode))
		return dt__fail(DT_EIO, "%s%s exists and is not a regular file",
		                what, t->path);
	return DT_OK;
}

/* Split path into its directory (opened and checked, into t->dfd) and its
 * final name (t->base). */
static dt_err
open_dir(const char *what, const char *path, dt__file_tmp *t)
{
	const char *slash = strrchr(path, '/');
	char *dir;
	struct stat st;

	if (slash && slash[1] == '\0')
		return dt__fail(DT_EINVAL, "%s%s names a directory", what,
		                path);
	dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path))
	            : strdup(".");
	t->base = strdup(slash ? slash + 1 : path);
	t->path = strdup(path);
	if (dir == NULL || t->base == NULL || t->path == NULL) {
		free(dir);
		return dt__fail(DT_ENOMEM, "%s%s: out of memory", what, path);
	}
	t->dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (t->dfd < 0) {
		dt_err err = dt__fail(DT_EIO, "%s%s: directory %s: %s", what,
		                      path, dir, strerror(errno));

		free(dir);
		return err;
	}
	/* Where every user may rename or remove entries (mode o+w without
	 * the sticky bit, unlike /tmp), another user could put anything in
	 * place of the file once written. */
	if (fstat(t->dfd, &st) != 0 ||
	    ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX))) {
		dt_err err = dt__fail(DT_EIO,
		                      "%s%s: directory %s may be written by "
		                      "every user and is not sticky; write "
		                      "elsewhere or chmod o-w it",
		                      what, path, dir);

		free(dir);
		return err;
	}
	free(dir);
	return check_final(what, t);
}

static void
tmp_free(dt__file_tmp *t)
{
	if (t->dfd >= 0)
		close(t->dfd);
	free(t->path);
	free(t->base);
	t->dfd = -1;
	t->path = t->base = NULL;
}

dt_err
dt__file_create_tmp(const char *what, const char *path, int mode,
                    dt__file_tmp *t)
{
	dt_err err;

	memset(t, 0, sizeof(*t));
	t->fd = t->dfd = -1;
	if ((err = open_dir(what, path, t))) {
		tmp_free(t);
		return err;
	}
	/* O_EXCL | O_NOFOLLOW: a name someone planted (a link to a file of
	 * theirs or of root's) is never opened; another random name is
	 * tried instead. */
	for (int tries = 0; tries < 100; tries++) {
		snprintf(t->tmp, sizeof(t->tmp), ".%.40s.%016llx.tmp", t->base,
		         (unsigned long long)random_u64());
		t->fd = openat(t->dfd, t->tmp,
		               O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW |
		                   O_CLOEXEC | O_NOCTTY,
		               (mode_t)mode);
		if (t->fd >= 0 || errno != EEXIST)
			break;
	}
	if (t->fd < 0) {
		err = dt__fail(DT_EIO,
		               "%s%s: cannot create a new file beside "
		               "it: %s",
		               what, path, strerror(errno));
		tmp_free(t);
		return err;
	}
	return DT_OK;
}

FILE *
dt__file_stream(dt__file_tmp *t)
{
	if (t->f == NULL && (t->f = fdopen(t->fd, "w")) == NULL)
		dt__fail(DT_ENOMEM, "%s: %s", t->path, strerror(errno));
	return t->f;
}

dt_err
dt__file_place(dt__file_tmp *t)
{
	if (!t->placed && renameat(t->dfd, t->tmp, t->dfd, t->base) != 0)
		return dt__fail(DT_EIO, "%s: cannot rename %s to it: %s",
		                t->path, t->tmp, strerror(errno));
	t->placed = 1;
	return DT_OK;
}

/* Flush and close the new file; -1 with errno on failure. */
static int
close_new(dt__file_tmp *t, int sync)
{
	int rc = 0, e = 0;

	if (t->f) {
		if (fflush(t->f) != 0 || ferror(t->f))
			rc = -1, e = errno ? errno : EIO;
		if (rc == 0 && sync && fsync(t->fd) != 0)
			rc = -1, e = errno;
		if (fclose(t->f) != 0 && rc == 0)
			rc = -1, e = errno;
	} else if (t->fd >= 0) {
		if (sync && fsync(t->fd) != 0)
			rc = -1, e = errno;
		if (close(t->fd) != 0 && rc == 0)
			rc = -1, e = errno;
	}
	t->f = NULL;
	t->fd = -1;
	errno = e;
	return rc;
}

dt_err
dt__file_commit(dt__file_tmp *t, int sync)
{
	dt_err err = DT_OK;

	if (close_new(t, sync) != 0)
		err = dt__fail(DT_EIO, "%s: writing failed: %s", t->path,
		               strerror(errno));
	else
		err = dt__file_place(t);
	if (err && !t->placed)
		(void)unlinkat(t->dfd, t->tmp, 0);
	else if (sync)
		(void)fsync(t->dfd); /* the rename itself is durable */
	tmp_free(t);
	return err;
}

void
dt__file_abort(dt__file_tmp *t)
{
	(void)close_new(t, 0);
	if (!t->placed && t->dfd >= 0)
		(void)unlinkat(t->dfd, t->tmp, 0);
	tmp_free(t);
}

int
dt__write_all(int fd, const void *p, size_t n)
{
	const char *b = p;

	while (n > 0) {
		/* (at most 1 GiB per call: some kernels refuse more) */
		ssize_t m = write(fd, b, DT_MIN(n, (size_t)1 << 30));

		if (m > 0) {
			b += m;
			n -= (size_t)m;
		} else if (m < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			struct pollfd pfd = {.fd = fd, .events = POLLOUT};

			(void)poll(&pfd, 1, -1);
		} else if (m < 0 && errno == EINTR) {
			continue;
		} else {
			if (m == 0)
				errno = EIO;
			return -1;
		}
	}
	return 0;
}

int
dt__nofile_raise(unsigned long need, struct rlimit *before)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return 0;
	if (before)
		*before = rl;
	if (rl.rlim_cur >= (rlim_t)need)
		return 0;
	rl.rlim_cur = rl.rlim_max == RLIM_INFINITY
	                  ? (rlim_t)need
	                  : DT_MIN((rlim_t)need, rl.rlim_max);
	return setrlimit(RLIMIT_NOFILE, &rl) == 0;
}
