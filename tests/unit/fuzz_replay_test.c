/*
 * fuzz_replay_test.c - replays every input kept in fuzz/corpus/<target>
 * (the seeds and any crash the fuzzer found) through that fuzz target's
 * own handler, fuzz/fuzz_<target>_entry.h, so CTest keeps fixed bugs fixed
 * without needing clang or libFuzzer: codec (frame headers and metadata
 * readers), control (core/msg.c), kv (kv/kv_msg.c), coll (coll_msg.c), auth
 * (net/auth.c: the handshake and encrypted records), kv_server (members'
 * frames at a server's message handling, kv/server.c), optstate (a local
 * store's optimizer-state file, kv/kv_optstate.c). Each
 * file is also replayed cut at every length, since a truncated frame is the
 * commonest bad input.
 *
 * Inputs are copied into heap blocks of exactly their length, so in the
 * ASan build any read past the end is reported. The corpus is found
 * through DTRAIN_SOURCE (set by CTest), else beside this source file.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "../../fuzz/fuzz_auth_entry.h"
#include "../../fuzz/fuzz_ckpt_entry.h"
#include "../../fuzz/fuzz_codec_entry.h"
#include "../../fuzz/fuzz_coll_entry.h"
#include "../../fuzz/fuzz_control_entry.h"
#include "../../fuzz/fuzz_kv_entry.h"
#include "../../fuzz/fuzz_kv_server_entry.h"
#include "../../fuzz/fuzz_optstate_entry.h"

typedef struct target {
	const char *name;
	int (*one)(const uint8_t *data, size_t size);
} target;

static void
corpus_dir(const char *name, char *out, size_t cap)
{
	const char *src = getenv("DTRAIN_SOURCE");

	if (src && *src) {
		snprintf(out, cap, "%s/fuzz/corpus/%s", src, name);
		return;
	}
	/* __FILE__ is tests/unit/fuzz_replay_test.c under the source. */
	snprintf(out, cap, "%s", __FILE__);
	char *cut = strstr(out, "tests/unit/");
	if (cut)
		snprintf(cut, cap - (size_t)(cut - out), "fuzz/corpus/%s",
		         name);
	else
		snprintf(out, cap, "fuzz/corpus/%s", name);
}

static uint8_t *
read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	struct stat st;
	uint8_t *buf;

	if (f == NULL)
		return NULL;
	if (fstat(fileno(f), &st) != 0 || st.st_size > (64 << 20)) {
		fclose(f);
		return NULL;
	}
	*len = (size_t)st.st_size;
	buf = malloc(*len ? *len : 1);
	if (buf && fread(buf, 1, *len, f) != *len) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	return buf;
}

static void
test_replay_corpus(void **state)
{
	const target *t = *state;
	char dir[4096], path[8192];
	struct dirent *e;
	DIR *d;
	int files = 0;

	corpus_dir(t->name, dir, sizeof(dir));
	d = opendir(dir);
	if (d == NULL)
		fail_msg("cannot open the corpus %s (set DTRAIN_SOURCE)", dir);
	while ((e = readdir(d)) != NULL) {
		uint8_t *data;
		size_t len = 0;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		data = read_file(path, &len);
		if (data == NULL)
			fail_msg("cannot read %s", path);
		/* The whole input, then every prefix, each in its own
		 * exact-size block. */
		for (size_t n = len + 1; n-- > 0;) {
			uint8_t *cut = malloc(n ? n : 1);
			assert_non_null(cut);
			memcpy(cut, data, n);
			t->one(cut, n);
			free(cut);
			if (len - n > 4096)
				break; /* long inputs: the last 4 KiB of cuts */
		}
		free(data);
		files++;
	}
	closedir(d);
	print_message("replayed %d inputs from %s\n", files, dir);
	/* The seeds are part of the tree: an empty corpus is a broken one. */
	assert_true(files >= 5);
}

int
main(void)
{
	static const target targets[] = {
	    {"codec", dt_fuzz_codec_one},
	    {"control", dt_fuzz_control_one},
	    {"kv", dt_fuzz_kv_one},
	    {"coll", dt_fuzz_coll_one},
	    {"auth", dt_fuzz_auth_one},
	    {"kv_server", dt_fuzz_kv_server_one},
	    {"optstate", dt_fuzz_optstate_one},
	    {"ckpt", dt_fuzz_ckpt_one},
	};
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_prestate(test_replay_corpus, (void *)&targets[0]),
	    cmocka_unit_test_prestate(test_replay_corpus, (void *)&targets[1]),
	    cmocka_unit_test_prestate(test_replay_corpus, (void *)&targets[2]),
	    cmocka_unit_test_prestate(test_replay_corpus, (void *)&targets[3]),
	    cmocka_unit_test_prestate(test_replay_corpus, (void *)&targets[4]),
	    cmocka_unit_test_prestate(test_replay_corpus, (void *)&targets[5]),
	    cmocka_unit_test_prestate(test_replay_corpus, (void *)&targets[6]),
	    cmocka_unit_test_prestate(test_replay_corpus, (void *)&targets[7]),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
