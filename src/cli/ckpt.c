/*
 * ckpt.c - `dtrain checkpoint`: look at a server's checkpoint file.
 *
 *   dtrain checkpoint show FILE...
 *       checks each file whole (end mark, length, checksum, every record
 *       against the file's bounds) and prints what it holds; exit 0 when
 *       all are good, 1 when one is damaged or unreadable (the reason on
 *       stderr), 2 on bad usage.
 *
 * The format lives in src/kv/ckpt.c (docs/fault-tolerance.md).
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "common/util.h"
#include "dtrain/kv.h"

static void
usage(FILE *f)
{
	fputs("usage: dtrain checkpoint show FILE...\n"
	      "\n"
	      "Check server checkpoint files (DTRAIN_CHECKPOINT_DIR/"
	      "server-R.ckpt)\n"
	      "and say what each holds. Exit status: 0 all good, 1 a file is\n"
	      "damaged or unreadable, 2 bad usage.\n",
	      f);
}

int
dt__cli_checkpoint(int argc, char **argv)
{
	int bad = 0;

	/* argv[0] is "checkpoint" */
	if (argc >= 2 &&
	    (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
		usage(stdout);
		return 0;
	}
	if (argc < 3 || strcmp(argv[1], "show") != 0) {
		usage(stderr);
		return 2;
	}
	for (int i = 2; i < argc; i++) {
		char summary[512], name[1024];

		if (dt_kv_checkpoint_inspect(argv[i], summary,
		                             sizeof(summary)) != DT_OK) {
			const char *m = dt_errmsg();

			fprintf(stderr, "dtrain checkpoint: %s\n",
			        dt__escape(m, strlen(m), name, sizeof(name)));
			bad = 1;
			continue;
		}
		/* (a file name may hold control characters) */
		printf("%s: %s\n",
		       dt__escape(argv[i], strlen(argv[i]), name, sizeof(name)),
		       summary);
	}
	return bad;
}
