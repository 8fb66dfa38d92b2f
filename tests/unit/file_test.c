/*
 * file_test.c - common/file.c and dt__escape: a FIFO, a directory or a
 * missing file refused by name without blocking; a new file created under
 * a random name and renamed into place, replacing a link planted at the
 * final name rather than writing through it; nothing left behind on
 * abort; a directory every user may write refused; names escaped for a
 * terminal; all of a buffer written through a full non-blocking pipe, and
 * EPIPE once its reader is gone; the descriptor limit raised to what is
 * needed, capped at the hard limit, with the limits found reported.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/file.h"
#include "common/util.h"

/* Entries of dir other than . and .. */
static int
entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	assert_non_null(d);
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

static void
put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w"); /* the test's own fixture */

	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static void
test_open_regular(void **state)
{
	char dir[] = "/tmp/dt_file_test_XXXXXX", path[128], fifo[128];
	FILE *f;
	int fd;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/plain", dir);
	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	put(path, "abc");
	assert_int_equal(dt__file_open_regular(DT_EIO, "x ", path, &fd), DT_OK);
	/* Blocking again once opened. */
	assert_int_equal(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
	close(fd);
	/* A FIFO with no writer: refused at once (an open without
	 * O_NONBLOCK would wait for a writer forever). */
	assert_int_equal(mkfifo(fifo, 0600), 0);
	assert_int_equal(
	    dt__file_open_regular(DT_ECONFIG, "DTRAIN_SECRET_FILE=", fifo, &fd),
	    DT_ECONFIG);
	assert_int_equal(fd, -1);
	assert_non_null(strstr(dt_errmsg(), "DTRAIN_SECRET_FILE="));
	assert_non_null(strstr(dt_errmsg(), "/fifo is not a regular file"));
	assert_int_equal(dt__file_fopen_regular(DT_EIO, "params ", fifo, &f),
	                 DT_EIO);
	assert_null(f);
	assert_int_equal(dt__file_open_regular(DT_EIO, "x ", dir, &fd), DT_EIO);
	assert_non_null(strstr(dt_errmsg(), "is not a regular file"));
	assert_int_equal(
	    dt__file_open_regular(DT_EIO, "x ", "/nonexistent/y", &fd), DT_EIO);
	assert_non_null(strstr(dt_errmsg(), "x /nonexistent/y: cannot open"));
	unlink(path);
	unlink(fifo);
	rmdir(dir);
}

static void
test_create_replaces_link(void **state)
{
	char dir[] = "/tmp/dt_file_test_XXXXXX", path[128], victim[128];
	char buf[64] = {0};
	dt__file_tmp t, u;
	struct stat st;
	FILE *f;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/out.ckpt", dir);
	snprintf(victim, sizeof(victim), "%s/victim", dir);
	put(victim, "precious");
	/* Another user's link at the final name, to a file of "root". */
	assert_int_equal(symlink(victim, path), 0);
	assert_int_equal(dt__file_create_tmp("checkpoint ", path, 0600, &t),
	                 DT_OK);
	assert_int_equal(dt__file_create_tmp("checkpoint ", path, 0600, &u),
	                 DT_OK);
	/* Two new files at once have different, random names. */
	assert_string_not_equal(t.tmp, u.tmp);
	assert_int_equal(strncmp(t.tmp, ".out.ckpt.", 10), 0);
	dt__file_abort(&u);
	assert_int_equal(write(t.fd, "new", 3), 3);
	assert_int_equal(dt__file_commit(&t, 1), DT_OK);
	/* The link was replaced, not written through. */
	assert_int_equal(lstat(path, &st), 0);
	assert_true(S_ISREG(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0600);
	f = fopen(victim, "r");
	assert_non_null(f);
	assert_non_null(fgets(buf, sizeof(buf), f));
	fclose(f);
	assert_string_equal(buf, "precious");
	assert_int_equal(entries(dir), 2); /* out.ckpt and victim only */
	unlink(path);
	unlink(victim);
	rmdir(dir);
}

static void
test_place_and_abort(void **state)
{
	char dir[] = "/tmp/dt_file_test_XXXXXX", path[128], fifo[128],
	     link[128];
	dt__file_tmp t;
	FILE *f;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/metrics.jsonl", dir);
	/* A log: placed at once, then written. */
	assert_int_equal(dt__file_create_tmp("metrics log ", path, 0644, &t),
	                 DT_OK);
	assert_non_null(f = dt__file_stream(&t));
	assert_int_equal(dt__file_place(&t), DT_OK);
	assert_int_equal(access(path, F_OK), 0);
	fputs("{}\n", f);
	assert_int_equal(dt__file_commit(&t, 0), DT_OK);
	assert_int_equal(entries(dir), 1);
	/* Given up: nothing left, the old file untouched. */
	assert_int_equal(dt__file_create_tmp("x ", path, 0644, &t), DT_OK);
	assert_int_equal(entries(dir), 2);
	dt__file_abort(&t);
	assert_int_equal(entries(dir), 1);
	unlink(path);
	/* A directory every user may write, not sticky: refused. */
	assert_int_equal(chmod(dir, 0777), 0);
	assert_int_equal(dt__file_create_tmp("x ", path, 0644, &t), DT_EIO);
	assert_non_null(strstr(dt_errmsg(), "may be written by every user"));
	assert_int_equal(chmod(dir, 01777), 0);
	assert_int_equal(dt__file_create_tmp("x ", path, 0644, &t), DT_OK);
	dt__file_abort(&t);
	assert_int_equal(entries(dir), 0);
	/* Something other than a regular file at the final name: a FIFO, a
	 * link to one, a device (renaming over /dev/null as root would
	 * replace the device). */
	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	snprintf(link, sizeof(link), "%s/link", dir);
	assert_int_equal(mkfifo(fifo, 0600), 0);
	assert_int_equal(symlink(fifo, link), 0);
	assert_int_equal(dt__file_create_tmp("x ", fifo, 0644, &t), DT_EIO);
	assert_non_null(strstr(dt_errmsg(), "exists and is not a regular"));
	assert_int_equal(dt__file_create_tmp("x ", link, 0644, &t), DT_EIO);
	assert_int_equal(dt__file_create_tmp("x ", "/dev/null", 0644, &t),
	                 DT_EIO);
	assert_int_equal(entries(dir), 2);
	unlink(link);
	unlink(fifo);
	/* A missing directory. */
	assert_int_equal(
	    dt__file_create_tmp("x ", "/nonexistent/d/f", 0644, &t), DT_EIO);
	assert_non_null(strstr(dt_errmsg(), "directory /nonexistent/d"));
	rmdir(dir);
}

static void
test_escape(void **state)
{
	const char in[] = "a\x1b[31m\n\\b\xc2\x85\xc3\xa9\x7f";
	char out[64], small[8];

	(void)state;
	assert_string_equal(dt__escape(in, sizeof(in) - 1, out, sizeof(out)),
	                    "a\\x1b[31m\\n\\\\b\\xc2\\x85\xc3\xa9\\x7f");
	/* A NUL inside a name from a file is shown too. */
	assert_string_equal(dt__escape("x\0y", 3, out, sizeof(out)), "x\\x00y");
	/* A lone C1 byte (CSI on a terminal not in UTF-8). */
	assert_string_equal(dt__escape("a\x9b"
	                               "2J",
	                               4, out, sizeof(out)),
	                    "a\\x9b2J");
	/* Cut at an escape's boundary. */
	assert_string_equal(dt__escape("ab\x01", 3, small, 6), "ab");
}

typedef struct drain {
	int fd;
	uint8_t *buf;
	size_t got;
} drain;

/* The reader of test_write_all's pipe: everything until the end. */
static void *
drain_main(void *arg)
{
	drain *d = arg;
	ssize_t n;

	while ((n = read(d->fd, d->buf + d->got, 65536)) > 0)
		d->got += (size_t)n;
	return NULL;
}

static void
test_write_all(void **state)
{
	size_t len = 1u << 20; /* 16 times a pipe's default capacity */
	uint8_t *src = malloc(len);
	drain d = {.buf = malloc(len + 65536)};
	pthread_t th;
	int p[2];

	(void)state;
	assert_non_null(src);
	assert_non_null(d.buf);
	for (size_t i = 0; i < len; i++)
		src[i] = (uint8_t)(i * 31 + 7);
	assert_int_equal(pipe(p), 0);
	/* Non-blocking, as a child may leave the launcher's stdout: the
	 * writer waits for room instead of failing with EAGAIN. */
	assert_int_equal(fcntl(p[1], F_SETFL, O_NONBLOCK), 0);
	d.fd = p[0];
	assert_int_equal(pthread_create(&th, NULL, drain_main, &d), 0);
	assert_int_equal(dt__write_all(p[1], src, len), 0);
	close(p[1]);
	pthread_join(th, NULL);
	assert_int_equal(d.got, len);
	assert_memory_equal(d.buf, src, len);

	/* The reader gone: -1 with EPIPE, at once. */
	assert_int_equal(pipe(p), 0);
	close(p[0]);
	signal(SIGPIPE, SIG_IGN);
	assert_int_equal(dt__write_all(p[1], src, 10), -1);
	assert_int_equal(errno, EPIPE);
	close(p[1]);
	free(src);
	free(d.buf);
}

static void
test_nofile_raise(void **state)
{
	struct rlimit orig, rl, before;

	(void)state;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &orig), 0);
	if (orig.rlim_max != RLIM_INFINITY && orig.rlim_max < 128)
		skip();
	rl = orig;
	rl.rlim_cur = 64;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);

	/* Below what is needed: raised, the limits found reported. */
	assert_int_equal(dt__nofile_raise(100, &before), 1);
	assert_int_equal(before.rlim_cur, 64);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	assert_int_equal(rl.rlim_cur, 100);
	/* Enough already: left alone. */
	assert_int_equal(dt__nofile_raise(80, NULL), 0);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	assert_int_equal(rl.rlim_cur, 100);
	/* More than the hard limit allows: the hard limit. */
	if (orig.rlim_max != RLIM_INFINITY) {
		assert_int_equal(
		    dt__nofile_raise((unsigned long)orig.rlim_max + 10, NULL),
		    1);
		assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
		assert_int_equal(rl.rlim_cur, orig.rlim_max);
	}
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &orig), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_open_regular),
	    cmocka_unit_test(test_create_replaces_link),
	    cmocka_unit_test(test_place_and_abort),
	    cmocka_unit_test(test_escape),
	    cmocka_unit_test(test_write_all),
	    cmocka_unit_test(test_nofile_raise),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
