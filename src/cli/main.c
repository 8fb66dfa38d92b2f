/*
 * main.c - the `dtrain` command: dispatch to a subcommand, and the
 * `dtrain scheduler` / `dtrain server` roles, whose flags are the same
 * settings as the DMLC_* variables (a flag wins over the variable).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/util.h"
#include "dtrain/node.h"
#include "kv/kv_impl.h"

static void
usage(FILE *f)
{
	fputs("usage: dtrain <command> [options]\n"
	      "\n"
	      "commands:\n"
	      "  launch     start a job: scheduler, servers and workers\n"
	      "             (dtrain launch -n 2 -s 2 -- CMD ...)\n"
	      "  scheduler  run the scheduler of a job\n"
	      "  server     run one parameter server of a job\n"
	      "  params     compare saved parameter files (params diff A B)\n"
	      "  checkpoint check server checkpoint files (checkpoint show "
	      "F)\n"
	      "  plot       draw training curves from metrics logs\n"
	      "             (dtrain plot m.jsonl -o curves.svg)\n"
	      "  k8s        print a job's Kubernetes objects (Jobs or a "
	      "Kubeflow\n"
	      "             MXJob) for kubectl apply -f -\n"
	      "  rank-exec  (the launcher's wrapper of one rank under mpirun "
	      "or srun)\n"
	      "  env        list the environment variables dtrain reads\n"
	      "  version    print the version\n"
	      "\n"
	      "See `dtrain <command> --help`, dtrain(1) and the docs.\n",
	      f);
}

static void
role_usage(FILE *f, const char *role)
{
	fprintf(
	    f,
	    "usage: dtrain %s [options]\n"
	    "\n"
	    "Each option sets the variable named beside it; unset options\n"
	    "keep the variable's value from the environment.\n"
	    "  --uri HOST          scheduler address   DMLC_PS_ROOT_URI\n"
	    "  --port N            scheduler port      DMLC_PS_ROOT_PORT\n"
	    "  --num-servers N     servers in the job  DMLC_NUM_SERVER\n"
	    "  --num-workers N     workers in the job  DMLC_NUM_WORKER\n"
	    "  --interface NAME    interface to advertise DMLC_INTERFACE\n"
	    "  --host ADDR         address to advertise DMLC_NODE_HOST\n"
	    "  --rank N            rank to ask for     DMLC_SERVER_ID\n"
	    "  --verbose N         0, 1 or 2           PS_VERBOSE\n"
	    "\n"
	    "Every node of a job needs the job's secret: DTRAIN_SECRET (16 to\n"
	    "4096 bytes) or DTRAIN_SECRET_FILE (a file only its\n"
	    "owner can read). `dtrain launch` makes one for its own jobs;\n"
	    "see dtrain-env(7) for every variable.\n",
	    role);
}

int
dt__cli_role(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"uri", required_argument, 0, 'u'},
	    {"port", required_argument, 0, 'p'},
	    {"num-servers", required_argument, 0, 's'},
	    {"num-workers", required_argument, 0, 'w'},
	    {"interface", required_argument, 0, 'i'},
	    {"host", required_argument, 0, 'H'},
	    {"rank", required_argument, 0, 'r'},
	    {"verbose", required_argument, 0, 'v'},
	    {"help", no_argument, 0, 'h'},
	    {0, 0, 0, 0},
	};
	const char *role = argv[0];
	dt_node_config cfg;
	dt_node *node;
	dt_err err;
	int c;

	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		const char *var = NULL;

		switch (c) {
		case 'u':
			var = "DMLC_PS_ROOT_URI";
			break;
		case 'p':
			var = "DMLC_PS_ROOT_PORT";
			break;
		case 's':
			var = "DMLC_NUM_SERVER";
			break;
		case 'w':
			var = "DMLC_NUM_WORKER";
			break;
		case 'i':
			var = "DMLC_INTERFACE";
			break;
		case 'H':
			var = "DMLC_NODE_HOST";
			break;
		case 'r':
			var = "DMLC_SERVER_ID";
			break;
		case 'v':
			var = "PS_VERBOSE";
			break;
		case 'h':
			role_usage(stdout, role);
			return 0;
		default:
			fprintf(stderr,
			        "dtrain %s: unknown or incomplete "
			        "option '%s'\n",
			        role, argv[optind - 1]);
			role_usage(stderr, role);
			return 2;
		}
		setenv(var, optarg, 1);
	}
	if (optind < argc) {
		fprintf(stderr, "dtrain %s: unexpected argument '%s'\n", role,
		        argv[optind]);
		return 2;
	}
	setenv("DMLC_ROLE", role, 1);
	if ((err = dt_node_config_from_env(&cfg, 1))) {
		fprintf(stderr, "dtrain %s: %s\n", role, dt_errmsg());
		return 2;
	}
	/* A server serves the KVStore. */
	if ((err = dt__kv_register()) || (err = dt_node_start(&cfg, &node))) {
		fprintf(stderr, "dtrain %s: %s\n", role, dt_errmsg());
		return 1;
	}
	err = dt_node_serve(node);
	if (err) {
		fprintf(stderr, "dtrain %s: %s\n", role, dt_errmsg());
		dt_node_stop(node);
		return 1;
	}
	dt_node_stop(node);
	return 0;
}

int
main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : NULL;

	if (cmd == NULL || strcmp(cmd, "-h") == 0 ||
	    strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
		usage(cmd ? stdout : stderr);
		return cmd ? 0 : 2;
	}
	if (strcmp(cmd, "launch") == 0)
		return dt__cli_launch(argc - 1, argv + 1);
	if (strcmp(cmd, "rank-exec") == 0)
		return dt__cli_rank_exec(argc - 1, argv + 1);
	if (strcmp(cmd, "scheduler") == 0 || strcmp(cmd, "server") == 0)
		return dt__cli_role(argc - 1, argv + 1);
	if (strcmp(cmd, "params") == 0)
		return dt__cli_params(argc - 1, argv + 1);
	if (strcmp(cmd, "checkpoint") == 0)
		return dt__cli_checkpoint(argc - 1, argv + 1);
	if (strcmp(cmd, "k8s") == 0)
		return dt__cli_k8s(argc - 1, argv + 1);
	if (strcmp(cmd, "plot") == 0)
		return dt__cli_plot(argc - 1, argv + 1);
	if (strcmp(cmd, "env") == 0)
		return dt__cli_env(argc - 1, argv + 1);
	if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
		if (argc > 2 && (strcmp(argv[2], "--help") == 0 ||
		                 strcmp(argv[2], "-h") == 0)) {
			puts("usage: dtrain version\n"
			     "Prints the version of dtrain.");
			return 0;
		}
		printf("dtrain 0.1.0\n");
		return 0;
	}
	fprintf(stderr, "dtrain: unknown command '%s'\n", cmd);
	usage(stderr);
	return 2;
}
