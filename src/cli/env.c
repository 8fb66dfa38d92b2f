/*
 * env.c - `dtrain env`: the environment variables dtrain reads, from the
 * one table in common/env_table.h, with their defaults and the values set
 * now; `dtrain env --man` prints the same table as the dtrain-env(7)
 * manual page (man/dtrain-env.7 is its output, checked by a test).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/env_table.h"
#include "nn/blas.h"

static void
usage(FILE *f)
{
	fputs("usage: dtrain env [--man | --blas-core]\n"
	      "\n"
	      "Lists every environment variable dtrain reads, its default,\n"
	      "and its value when it is set in this environment.\n"
	      "  --man        print the list as the dtrain-env(7) manual page\n"
	      "  --blas-core  print the OPENBLAS_CORETYPE this processor\n"
	      "               needs when OpenBLAS does not know it and runs\n"
	      "               slower generic kernels (nothing otherwise)\n"
	      "  --help       this text\n",
	      f);
}

/* s with roff's special characters made plain: a backslash doubled, a
 * leading dot or quote kept from starting a request. */
static void
roff(FILE *f, const char *s)
{
	if (*s == '.' || *s == '\'')
		fputs("\\&", f);
	for (; *s; s++) {
		if (*s == '\\')
			fputs("\\e", f);
		else if (*s == '-')
			fputs("\\-", f);
		else
			fputc(*s, f);
	}
}

static void
man_section(FILE *f, char kind, const char *title, const char *intro)
{
	fprintf(f, ".SH %s\n%s\n", title, intro);
	for (size_t i = 0; i < dt__env_nvars; i++) {
		const dt__env_var *v = &dt__env_vars[i];

		if (v->kind != kind)
			continue;
		fputs(".TP\n.B ", f);
		roff(f, v->name);
		fputs("\n", f);
		roff(f, v->summary);
		fputs(".\nDefault: ", f);
		roff(f, v->def);
		fputs(".\n", f);
	}
}

static void
man_page(FILE *f)
{
	fputs(".\\\" Made by `dtrain env --man` from src/common/env_table.h;\n"
	      ".\\\" edit the table, not this file.\n"
	      ".TH DTRAIN-ENV 7 \"\" \"dtrain 0.1.0\" \"dtrain manual\"\n"
	      ".SH NAME\n"
	      "dtrain-env \\- environment variables of dtrain\n"
	      ".SH DESCRIPTION\n"
	      "Every node of a dtrain job (scheduler, server, worker) and the\n"
	      ".B dtrain\n"
	      "command read their settings from these variables. The names\n"
	      "follow MXNet's parameter server (DMLC_*, PS_*) and Horovod\n"
	      "where those have one. A variable named DMLC_*, DTRAIN_* or\n"
	      "PS_* that is not listed here is reported at start-up, with\n"
	      "the closest name that is.\n"
	      ".PP\n"
	      ".B dtrain env\n"
	      "prints this list with the values set in the environment.\n",
	      f);
	man_section(f, 'U', "USER SETTINGS",
	            "Set by the user, in the environment of `dtrain launch`\n"
	            "or of each node.");
	man_section(f, 'L', "SET BY THE LAUNCHER",
	            "`dtrain launch` (and `dtrain k8s`) set these for the\n"
	            "processes of a job; set them only when starting nodes\n"
	            "by hand.");
	man_section(f, 'T', "TESTING AND FAULT INJECTION",
	            "For tests of the system itself.");
	fputs(".SH SEE ALSO\n"
	      ".BR dtrain (1),\n"
	      ".BR dtrain\\-launch (1),\n"
	      ".BR dtrain\\-scheduler (1),\n"
	      ".BR dtrain\\-server (1)\n",
	      f);
}

int
dt__cli_env(int argc, char **argv)
{
	if (argc > 1 &&
	    (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		usage(stdout);
		return 0;
	}
	if (argc == 2 && strcmp(argv[1], "--man") == 0) {
		man_page(stdout);
		return 0;
	}
	if (argc == 2 && strcmp(argv[1], "--blas-core") == 0) {
		const char *core = dt__nn_blas_better_core(NULL);

		if (core)
			printf("%s\n", core);
		return 0;
	}
	if (argc > 1) {
		fprintf(stderr, "dtrain env: unexpected argument '%s'\n",
		        argv[1]);
		usage(stderr);
		return 2;
	}
	for (size_t i = 0; i < dt__env_nvars; i++) {
		const dt__env_var *v = &dt__env_vars[i];
		const char *now = getenv(v->name);

		printf("%-32s %s%s%s\n", v->name, v->def, now ? "  now: " : "",
		       now ? now : "");
	}
	return 0;
}
