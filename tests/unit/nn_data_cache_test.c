/*
 * nn_data_cache_test.c - the decoded-data cache of MNIST files
 * (src/nn/data_cache.c), through dt_data_load_mnist.
 *
 * A data set of 2,000 images of 28 x 28 (6 MiB of arrays, above the
 * cache's 4 MiB) is written as plain idx files in a temporary directory;
 * DTRAIN_DATA_CACHE points at another. The first load writes the cache and
 * maps it, the next maps it without writing; every load gives the bytes of
 * a load with the cache off. A cache file that is damaged (magic, header,
 * a header that checks out but lies about its sizes, truncated), stale
 * (the source changed), a link, another user's or writable by others is
 * refused: the load
 * decodes the files again, with the same bytes, and puts a good file in
 * its place. Two processes that find no cache and load at once both get
 * the right bytes and leave one file (and its lock). A small data set is not
 * cached, and "0" turns the cache off.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <dirent.h>

#include "dtrain/nn.h"

#define N_IMAGES 2000
#define SIDE     28
#define HDR_LEN  4096 /* data_cache.c's header */
#define OFF_UID  16
#define OFF_N    24
#define OFF_Y    152
#define OFF_SUM  168

static char dir[256], cdir[300], img[300], lab[300];
static dt_dataset ref; /* the load with the cache off */

static void
write_set(size_t n)
{
	dt_dataset d = {0};

	d.n = n;
	d.dim = SIDE * SIDE;
	d.label_dim = 1;
	d.shape[0] = 1;
	d.shape[1] = d.shape[2] = SIDE;
	d.x = malloc(sizeof(float) * n * d.dim);
	d.y = malloc(sizeof(float) * n);
	assert_non_null(d.x);
	assert_non_null(d.y);
	for (size_t i = 0; i < n * d.dim; i++)
		d.x[i] = (float)((i * 7 + i / 784 * 13) % 256) / 255.0f;
	for (size_t i = 0; i < n; i++)
		d.y[i] = (float)(i % 10);
	assert_int_equal(dt_data_save_mnist(&d, img, lab), DT_OK);
	dt_data_fini(&d);
}

static int
setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/dtrain_data_cache_XXXXXX");
	if (mkdtemp(dir) == NULL)
		return -1;
	snprintf(cdir, sizeof(cdir), "%s/cache", dir);
	snprintf(img, sizeof(img), "%s/images", dir);
	snprintf(lab, sizeof(lab), "%s/labels", dir);
	write_set(N_IMAGES);
	setenv("DTRAIN_DATA_CACHE", "0", 1);
	if (dt_data_load_mnist(img, lab, &ref) != DT_OK || ref.mapped != NULL)
		return -1;
	setenv("DTRAIN_DATA_CACHE", cdir, 1);
	return 0;
}

static int
teardown(void **state)
{
	char cmd[300];

	(void)state;
	dt_data_fini(&ref);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : -1;
}

/* The one cache file in cdir (its path in p), and how many files the
 * directory holds (temporary ones included), its lock file counted only
 * when locks. */
static int
dir_files(char *p, size_t cap, int locks)
{
	DIR *d = opendir(cdir);
	struct dirent *e;
	int count = 0;

	p[0] = '\0';
	if (d == NULL)
		return 0;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.' &&
		    (e->d_name[1] == '\0' || strcmp(e->d_name, "..") == 0))
			continue;
		if (strstr(e->d_name, ".lock") != NULL) {
			count += locks;
			continue;
		}
		count++;
		if (strncmp(e->d_name, "dtrain-data-", 12) == 0)
			snprintf(p, cap, "%s/%s", cdir, e->d_name);
	}
	closedir(d);
	return count;
}

static int
cache_file(char *p, size_t cap)
{
	return dir_files(p, cap, 0);
}

/* Load with the cache, check the bytes against the reference; whether the
 * arrays came from a mapping must be `mapped`. */
static void
load_check(int mapped)
{
	dt_dataset d;

	assert_int_equal(dt_data_load_mnist(img, lab, &d), DT_OK);
	assert_int_equal(d.n, ref.n);
	assert_int_equal(d.dim, ref.dim);
	assert_int_equal(d.label_dim, 1);
	assert_int_equal(d.shape[1], SIDE);
	assert_int_equal(d.shape[2], SIDE);
	assert_memory_equal(d.x, ref.x, sizeof(float) * ref.n * ref.dim);
	assert_memory_equal(d.y, ref.y, sizeof(float) * ref.n);
	assert_int_equal(d.mapped != NULL, mapped);
	dt_data_fini(&d);
	assert_null(d.x);
}

static ino_t
inode_of(const char *p)
{
	struct stat st;

	assert_int_equal(lstat(p, &st), 0);
	return st.st_ino;
}

/* A fresh cache is made, then used as it is. */
static void
test_fresh(void **state)
{
	char p[600];
	struct stat st;
	dt_dataset d;

	(void)state;
	load_check(1); /* decoded, written, mapped */
	assert_int_equal(cache_file(p, sizeof(p)), 1);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal((size_t)st.st_size,
	                 HDR_LEN + sizeof(float) * N_IMAGES * (784 + 1));
	load_check(1);
	assert_int_equal(inode_of(p), st.st_ino); /* not written again */
	/* Writes to the arrays are the process's own. */
	assert_int_equal(dt_data_load_mnist(img, lab, &d), DT_OK);
	d.x[0] = 42.0f;
	d.y[0] = 42.0f;
	dt_data_fini(&d);
	load_check(1);
	assert_int_equal(inode_of(p), st.st_ino);
}

/* Change len bytes at off of the cache file p (the header's checksum
 * made again when sum), or truncate it to off when len is 0. */
static void
damage(const char *p, long off, const void *b, size_t len, int sum)
{
	int fd = open(p, O_RDWR);

	assert_true(fd >= 0);
	if (len == 0) {
		assert_int_equal(ftruncate(fd, off), 0);
	} else {
		assert_int_equal(pwrite(fd, b, len, off), (ssize_t)len);
	}
	if (sum) {
		unsigned char h[OFF_SUM];
		uint64_t x = 0xcbf29ce484222325ull;

		assert_int_equal(pread(fd, h, sizeof(h), 0),
		                 (ssize_t)sizeof(h));
		for (size_t i = 0; i < sizeof(h); i++)
			x = (x ^ h[i]) * 0x100000001b3ull;
		assert_int_equal(pwrite(fd, &x, 8, OFF_SUM), 8);
	}
	close(fd);
}

/* After each kind of damage the load decodes again and replaces the
 * file with a good one (a new inode), which the next load maps. */
static void
test_refused(void **state)
{
	const uint64_t huge = 1ull << 40, more = N_IMAGES + 1;
	const uint64_t other = (uint64_t)geteuid() + 1;
	char p[600], q[700];
	ino_t was;

	(void)state;
	load_check(1);
	assert_int_equal(cache_file(p, sizeof(p)), 1);
	for (int k = 0; k < 10; k++) {
		struct stat st;

		switch (k) {
		case 0: /* the magic */
			damage(p, 0, "X", 1, 0);
			break;
		case 1: /* a field, its checksum not made again */
			damage(p, OFF_N, &more, 8, 0);
			break;
		case 2: /* more samples than the file holds, checksummed */
			damage(p, OFF_N, &more, 8, 1);
			break;
		case 3: /* an absurd offset, checksummed */
			damage(p, OFF_Y, &huge, 8, 1);
			break;
		case 4: /* truncated: the last label missing */
			damage(p,
			       (long)(HDR_LEN + sizeof(float) * N_IMAGES * 785 -
			              4),
			       NULL, 0, 0);
			break;
		case 5: /* others may write it */
			assert_int_equal(chmod(p, 0622), 0);
			break;
		case 6: /* a link to a good copy of it */
			snprintf(q, sizeof(q), "%s/copy", dir);
			assert_int_equal(rename(p, q), 0);
			assert_int_equal(symlink(q, p), 0);
			break;
		case 8: /* another user's (when the test may give it) */
			if (geteuid() == 0)
				assert_int_equal(chown(p, 65534, (gid_t)-1), 0);
			else
				damage(p, OFF_UID, &other, 8, 1);
			break;
		case 9: /* made by another user, checksummed */
			damage(p, OFF_UID, &other, 8, 1);
			break;
		case 7: { /* stale: the labels' file was written since */
			struct timespec ts[2] = {{0, UTIME_NOW}, {12345, 678}};

			assert_int_equal(utimensat(AT_FDCWD, lab, ts, 0), 0);
			break;
		}
		}
		was = inode_of(p);
		load_check(1);
		assert_int_equal(cache_file(p, sizeof(p)), 1);
		assert_int_equal(lstat(p, &st), 0);
		assert_true(S_ISREG(st.st_mode));
		assert_int_equal(st.st_mode & 0777, 0600);
		assert_true(st.st_ino != was);
		was = st.st_ino;
		load_check(1); /* the new file serves */
		assert_int_equal(inode_of(p), was);
	}
	unlink(q);
}

/* Two processes find no cache and load at once: both get the right bytes,
 * and one file is left. */
static void
test_race(void **state)
{
	char p[600];
	pid_t pid[2];
	int ok = 0;
	double scale = getenv("DT_TEST_TIME_SCALE")
	                   ? atof(getenv("DT_TEST_TIME_SCALE"))
	                   : 1.0;
	time_t end = time(NULL) + (time_t)(60 * (scale > 1 ? scale : 1));

	(void)state;
	if (cache_file(p, sizeof(p)) == 1)
		assert_int_equal(unlink(p), 0);
	for (int i = 0; i < 2; i++) {
		pid[i] = fork();
		assert_true(pid[i] >= 0);
		if (pid[i] == 0) {
			dt_dataset d;
			int bad = dt_data_load_mnist(img, lab, &d) != DT_OK ||
			          d.n != ref.n ||
			          memcmp(d.x, ref.x,
			                 sizeof(float) * ref.n * ref.dim) ||
			          memcmp(d.y, ref.y, sizeof(float) * ref.n);

			_exit(bad);
		}
	}
	for (int left = 2; left > 0;) {
		for (int i = 0; i < 2; i++) {
			int st;

			if (pid[i] > 0 && waitpid(pid[i], &st, WNOHANG) > 0) {
				ok += WIFEXITED(st) && WEXITSTATUS(st) == 0;
				pid[i] = 0;
				left--;
			}
		}
		if (left > 0 && time(NULL) > end) {
			for (int i = 0; i < 2; i++)
				if (pid[i] > 0) {
					kill(pid[i], SIGKILL);
					waitpid(pid[i], NULL, 0);
				}
			fail_msg("the loads took over %g s", 60 * scale);
		}
		usleep(10000);
	}
	assert_int_equal(ok, 2);
	/* no temporary left: the cache and its lock */
	assert_int_equal(dir_files(p, sizeof(p), 1), 2);
	load_check(1);
}

/* A small data set is not cached; "0" turns the cache off. */
static void
test_small_and_off(void **state)
{
	char p[600];
	dt_dataset d;

	(void)state;
	setenv("DTRAIN_DATA_CACHE", "0", 1);
	load_check(0);
	setenv("DTRAIN_DATA_CACHE", cdir, 1);
	if (cache_file(p, sizeof(p)) == 1) {
		char q[700];

		snprintf(q, sizeof(q), "%s.lock", p);
		assert_int_equal(unlink(p), 0);
		assert_int_equal(unlink(q), 0);
	}
	snprintf(img, sizeof(img), "%s/small_images", dir);
	snprintf(lab, sizeof(lab), "%s/small_labels", dir);
	write_set(100);
	assert_int_equal(dt_data_load_mnist(img, lab, &d), DT_OK);
	assert_int_equal(d.n, 100);
	assert_null(d.mapped);
	dt_data_fini(&d);
	assert_int_equal(dir_files(p, sizeof(p), 1), 0); /* no lock either */
	snprintf(img, sizeof(img), "%s/images", dir);
	snprintf(lab, sizeof(lab), "%s/labels", dir);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_fresh),
	    cmocka_unit_test(test_refused),
	    cmocka_unit_test(test_race),
	    cmocka_unit_test(test_small_and_off),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
