/*
 * launch_test.c - the launcher's plans, made and read without starting a
 * process: for every back-end, the command line and the variables each
 * role gets (rank variables, forwarded ones, the secret kept off every
 * command line), placement on the hosts of a host file with slots, the
 * host file's errors, and the rank marks of mpirun's and srun's lines with
 * the rank wrapper's report taken out of the output.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "cli/launch/launch.h"

struct job {
	struct opts o;
	struct hosts h;
	struct ctx c;
	struct proc *p;
	size_t n;
	char hostfile[64];
};

static void
write_hosts(struct job *j, const char *text)
{
	FILE *f;
	int fd;

	snprintf(j->hostfile, sizeof(j->hostfile), "/tmp/dt_hostsXXXXXX");
	assert_true((fd = mkstemp(j->hostfile)) >= 0);
	assert_non_null(f = fdopen(fd, "w"));
	fputs(text, f);
	fclose(f);
}

/* Plan "dtrain launch ARGS..." (NULL-terminated) with the hosts in
 * hosts_text (or none); returns the error of any step. */
static dt_err
plan_job(struct job *j, const char *hosts_text, ...)
{
	static char *argv[64]; /* o.cmd points into it */
	int argc = 0;
	va_list ap;
	dt_err err;

	memset(j, 0, sizeof(*j));
	argv[argc++] = "launch";
	if (hosts_text) {
		write_hosts(j, hosts_text);
		argv[argc++] = "-H";
		argv[argc++] = j->hostfile;
	}
	va_start(ap, hosts_text);
	for (char *a; (a = va_arg(ap, char *)) != NULL;)
		argv[argc++] = a;
	va_end(ap);
	argv[argc] = NULL;
	if ((err = parse_opts(argc, argv, &j->o)))
		return err;
	if (hosts_text && j->o.be->hosts != HOSTS_UNUSED &&
	    (err = read_hostfile(j->hostfile, &j->h)))
		return err;
	j->c.uri = "10.0.0.1";
	j->c.port = "9000";
	j->c.listen_fd = "7";
	j->c.exe_exec = "/proc/self/exe";
	j->c.exe_name = "/opt/dtrain";
	j->c.cwd = "/work dir";
	j->c.local_cwd = "/work dir";
	j->c.ssh = "ssh";
	j->c.rsync = "rsync";
	j->c.mpirun = "mpirun";
	j->c.srun = "srun";
	j->c.rank_wrap = 1;
	snprintf(j->c.ssh_timeout, sizeof(j->c.ssh_timeout),
	         "ConnectTimeout=10");
	if ((err = build_ctx(&j->o, &j->c)) ||
	    (err = prepare_auth(&j->o, &j->c)))
		return err;
	return build_plan(&j->o, &j->h, &j->c, &j->p, &j->n);
}

static void
job_free(struct job *j)
{
	procs_free(j->p, j->n);
	ctx_free(&j->c);
	hosts_free(&j->h);
	strv_free(&j->o.env);
	strv_free(&j->o.sync_exclude);
	if (j->hostfile[0])
		unlink(j->hostfile);
}

static int
has(const struct strv *v, const char *s)
{
	for (size_t i = 0; i < v->n; i++)
		if (strcmp(v->v[i], s) == 0)
			return 1;
	return 0;
}

/* Index of s in v, or -1. */
static long
index_of(const struct strv *v, const char *s)
{
	for (size_t i = 0; i < v->n; i++)
		if (strcmp(v->v[i], s) == 0)
			return (long)i;
	return -1;
}

/* No secret on a command line or in the shown variables. */
static void
assert_no_secret(const struct job *j)
{
	const char *hex = strchr(j->c.secret_env, '=') + 1;

	for (size_t i = 0; i < j->n; i++) {
		char *line = plan_line(&j->p[i]);

		assert_non_null(line);
		assert_null(strstr(line, hex));
		free(line);
	}
}

static void
test_local(void **state)
{
	struct job j;

	(void)state;
	assert_int_equal(plan_job(&j, NULL, "-n", "2", "-s", "1", "--",
	                          "./train", "--epochs", "1", NULL),
	                 DT_OK);
	assert_ptr_equal(j.o.be, &dl_local);
	assert_int_equal(j.n, 4);
	/* The scheduler inherits the socket. */
	assert_string_equal(j.p[0].label, "scheduler");
	assert_true(j.p[0].is_scheduler);
	assert_int_equal(j.p[0].kind, KIND_SERVICE);
	assert_true(has(&j.p[0].env, "DT_LISTEN_FD=7"));
	assert_true(has(&j.p[0].env, "DMLC_ROLE=scheduler"));
	assert_string_equal(j.p[0].argv.v[1], "scheduler");
	/* A server: `dtrain server` with its rank. */
	assert_string_equal(j.p[1].label, "server 0");
	assert_string_equal(j.p[1].argv.v[0], "/opt/dtrain");
	assert_string_equal(j.p[1].argv.v[1], "server");
	assert_string_equal(j.p[1].exec_path, "/proc/self/exe");
	assert_true(has(&j.p[1].env, "DMLC_SERVER_ID=0"));
	assert_false(j.p[1].is_scheduler);
	/* Workers run the command as given, with their rank. */
	assert_string_equal(j.p[3].label, "worker 1");
	assert_int_equal(j.p[3].kind, KIND_MAIN);
	assert_int_equal(j.p[3].argv.n, 3);
	assert_string_equal(j.p[3].argv.v[0], "./train");
	assert_null(j.p[3].exec_path);
	for (size_t i = 0; i < j.n; i++) {
		assert_true(has(&j.p[i].env, "DMLC_PS_ROOT_URI=10.0.0.1"));
		assert_true(has(&j.p[i].env, "DMLC_PS_ROOT_PORT=9000"));
		assert_true(has(&j.p[i].env, "DMLC_NUM_SERVER=1"));
		assert_true(has(&j.p[i].env, "DMLC_NUM_WORKER=2"));
		assert_true(has(&j.p[i].env, "DTRAIN_LAUNCHED=1"));
		assert_ptr_equal(j.p[i].secret_env, j.c.secret_env);
		assert_null(j.p[i].line_tag);
	}
	assert_true(has(&j.p[3].env, "DMLC_WORKER_ID=1"));
	assert_non_null(j.c.secret_env);
	assert_int_equal(strncmp(j.c.secret_env, "DTRAIN_SECRET=", 14), 0);
	assert_int_equal(strlen(j.c.secret_env), 14 + 64);
	assert_no_secret(&j);
	job_free(&j);
}

static void
test_ssh(void **state)
{
	struct job j;
	const char *last;
	char want[256];

	(void)state;
	setenv("PS_VERBOSE", "1", 1);
	assert_int_equal(plan_job(&j, "h1\nh2:2222 # the second\n", "-n", "2",
	                          "-s", "2", "--env", "MSG=it's", "--",
	                          "python", "train.py", NULL),
	                 DT_OK);
	unsetenv("PS_VERBOSE");
	assert_ptr_equal(j.o.be, &dl_ssh); /* the default with -H */
	assert_int_equal(j.n, 5);
	assert_string_equal(j.p[1].host, "h1");
	assert_string_equal(j.p[2].host, "h2");
	assert_string_equal(j.p[3].host, "h1");
	assert_string_equal(j.p[4].host, "h2");
	/* ssh -tt with the connect timeout; -p for h2. */
	assert_string_equal(j.p[4].argv.v[0], "ssh");
	assert_true(has(&j.p[4].argv, "-tt"));
	assert_true(has(&j.p[4].argv, "ConnectTimeout=10"));
	assert_true(has(&j.p[4].argv, "BatchMode=yes"));
	assert_int_equal(index_of(&j.p[4].argv, "-p") + 1,
	                 index_of(&j.p[4].argv, "2222"));
	assert_int_equal(index_of(&j.p[3].argv, "-p"), -1);
	assert_true(j.p[4].strip_cr);
	/* One remote shell line: the directory, the variables, the
	 * supervisor, the command; quoted. */
	last = j.p[4].argv.v[j.p[4].argv.n - 1];
	assert_int_equal(strncmp(last, "cd '/work dir' && exec env ", 27), 0);
	assert_non_null(strstr(last, " DMLC_ROLE=worker DMLC_WORKER_ID=1 "));
	assert_non_null(strstr(last, " PS_VERBOSE=1 "));
	assert_non_null(strstr(last, " 'MSG=it'\\''s' "));
	/* The secret's directory: a random name, not the job's id; h2 is
	 * the host file's second line. */
	assert_non_null(j.c.remote_secret_dir);
	assert_int_equal(strlen(j.c.remote_secret_dir),
	                 strlen("/work dir/.dtrain-") + 32);
	assert_int_equal(
	    strncmp(j.c.remote_secret_dir, "/work dir/.dtrain-", 18), 0);
	assert_null(strstr(j.c.remote_secret_dir, "testjob"));
	snprintf(want, sizeof(want), " 'DTRAIN_SECRET_FILE=%s-1/secret' ",
	         j.c.remote_secret_dir);
	assert_non_null(strstr(last, want));
	assert_non_null(strstr(last, " sh -c "));
	assert_non_null(strstr(last, " dtrain-remote python train.py"));
	last = j.p[1].argv.v[j.p[1].argv.n - 1];
	assert_non_null(strstr(last, " dtrain-remote /opt/dtrain server"));
	/* The secret goes by file: the processes' environment has only its
	 * name. */
	assert_null(j.p[1].secret_env);
	assert_non_null(j.c.secret_line);
	assert_no_secret(&j);
	job_free(&j);
}

/* Seed 001's example, a host with slots, and one role over few hosts. */
static void
test_placement(void **state)
{
	static const char *const five[] = {"h1", "h2", "h3", "h4", "h5", "h1"};
	static const char *const slots[] = {"a", "a", "b", "a", "a"};
	struct job j;

	(void)state;
	assert_int_equal(
	    plan_job(&j, "h1\nh2\nh3\nh4\nh5\n", "-n", "3", "--", "w", NULL),
	    DT_OK);
	for (size_t i = 1; i < j.n; i++)
		assert_string_equal(j.p[i].host, five[i - 1]);
	job_free(&j);

	/* a takes two per pass: servers a a, workers b a a. */
	assert_int_equal(plan_job(&j, "a slots=2\nb\n", "-n", "3", "-s", "2",
	                          "--", "w", NULL),
	                 DT_OK);
	assert_string_equal(j.p[1].host, slots[0]);
	assert_string_equal(j.p[2].host, slots[1]);
	assert_string_equal(j.p[3].host, slots[2]);
	assert_string_equal(j.p[4].host, slots[3]);
	assert_string_equal(j.p[5].host, slots[4]);
	job_free(&j);

	/* mpi: the same placement, as mpirun's --host list. */
	assert_int_equal(plan_job(&j, "a slots=2\nb\n", "--launcher", "mpi",
	                          "-n", "3", "-s", "2", "--", "w", NULL),
	                 DT_OK);
	assert_int_equal(j.n, 3);
	assert_string_equal(j.p[1].argv.v[index_of(&j.p[1].argv, "--host") + 1],
	                    "a:2");
	assert_string_equal(j.p[2].argv.v[index_of(&j.p[2].argv, "--host") + 1],
	                    "b:1,a:2");
	job_free(&j);
}

static void
test_mpi(void **state)
{
	struct job j;
	long k;

	(void)state;
	assert_int_equal(plan_job(&j, "h1:2200\nh2:2200\n", "--launcher", "mpi",
	                          "-n", "2", "-s", "1", "--", "python",
	                          "train.py", NULL),
	                 DT_OK);
	assert_int_equal(j.n, 3);
	assert_string_equal(j.p[2].label, "workers");
	assert_string_equal(j.p[2].argv.v[0], "mpirun");
	assert_true(has(&j.p[2].argv, "--tag-output"));
	assert_true(j.p[2].term_leader);
	assert_true(j.p[2].line_tag == mpi_tag);
	assert_string_equal(j.p[2].tag_role, "worker");
	/* Not bound to a core, whatever the count of ranks per host. */
	assert_string_equal(
	    j.p[2].argv.v[index_of(&j.p[2].argv, "--bind-to") + 1], "none");
	assert_string_equal(j.p[2].argv.v[index_of(&j.p[2].argv, "-np") + 1],
	                    "2");
	assert_string_equal(j.p[2].argv.v[index_of(&j.p[2].argv, "--host") + 1],
	                    "h2:1,h1:1");
	assert_string_equal(
	    j.p[2].argv.v[index_of(&j.p[2].argv, "plm_rsh_args") + 1],
	    "-o ConnectTimeout=10 -p 2200");
	/* Every variable by -x, the secret by name only, no rank ids. */
	assert_true(index_of(&j.p[2].argv, "DMLC_ROLE=worker") ==
	            index_of(&j.p[2].argv, "-x") + 1);
	assert_true(has(&j.p[2].argv, "DTRAIN_SECRET"));
	for (size_t i = 0; i < j.p[2].argv.n; i++)
		assert_null(strstr(j.p[2].argv.v[i], "DMLC_WORKER_ID"));
	/* The rank wrapper, then the command. */
	k = index_of(&j.p[2].argv, "rank-exec");
	assert_true(k > 0);
	assert_string_equal(j.p[2].argv.v[k - 1], "/opt/dtrain");
	assert_string_equal(j.p[2].argv.v[k + 1], "--");
	assert_string_equal(j.p[2].argv.v[k + 2], "python");
	k = index_of(&j.p[1].argv, "rank-exec");
	assert_string_equal(j.p[1].argv.v[k + 2], "/opt/dtrain");
	assert_string_equal(j.p[1].argv.v[k + 3], "server");
	assert_no_secret(&j);
	job_free(&j);

	/* Without -H: this machine, no --host. */
	assert_int_equal(plan_job(&j, NULL, "--launcher", "mpi", "-n", "2",
	                          "-s", "0", "--", "w", NULL),
	                 DT_OK);
	assert_int_equal(j.n, 2);
	assert_int_equal(index_of(&j.p[1].argv, "--host"), -1);
	assert_int_equal(index_of(&j.p[1].argv, "plm_rsh_args"), -1);
	job_free(&j);

	/* mpirun has one ssh command line: ports must agree. */
	assert_int_equal(plan_job(&j, "h1:2200\nh2\n", "--launcher", "mpi",
	                          "-n", "2", "--", "w", NULL),
	                 DT_EINVAL);
	assert_non_null(strstr(dt_errmsg(), "different ssh ports"));
	job_free(&j);
}

static void
test_slurm(void **state)
{
	struct job j;
	long k;

	(void)state;
	assert_int_equal(plan_job(&j, NULL, "--launcher", "slurm", "-n", "4",
	                          "-s", "1", "--", "python", "train.py", NULL),
	                 DT_OK);
	assert_int_equal(j.n, 3);
	assert_string_equal(j.p[2].argv.v[0], "srun");
	assert_true(has(&j.p[2].argv, "--ntasks=4"));
	assert_true(has(&j.p[1].argv, "--ntasks=1"));
	assert_true(has(&j.p[2].argv, "--overlap"));
	assert_true(has(&j.p[2].argv, "--label"));
	assert_true(has(&j.p[2].argv, "--kill-on-bad-exit=1"));
	assert_true(j.p[2].line_tag == slurm_tag);
	assert_false(j.p[2].term_leader);
	/* Variables through srun's environment. */
	assert_true(j.p[2].show_env);
	assert_true(has(&j.p[2].env, "DMLC_ROLE=worker"));
	assert_ptr_equal(j.p[2].secret_env, j.c.secret_env);
	k = index_of(&j.p[2].argv, "rank-exec");
	assert_true(k > 0);
	assert_string_equal(j.p[2].argv.v[k + 2], "python");
	assert_no_secret(&j);
	job_free(&j);

	/* Without the wrapper (DTRAIN_RANK_WRAP=0). */
	assert_int_equal(plan_job(&j, NULL, "--launcher", "slurm", "-n", "1",
	                          "--", "w", NULL),
	                 DT_OK);
	procs_free(j.p, j.n);
	j.c.rank_wrap = 0;
	assert_int_equal(build_plan(&j.o, &j.h, &j.c, &j.p, &j.n), DT_OK);
	assert_int_equal(index_of(&j.p[2].argv, "rank-exec"), -1);
	job_free(&j);
}

static void
test_options(void **state)
{
	struct job j;

	(void)state;
	assert_int_equal(
	    plan_job(&j, NULL, "--launcher", "ssh", "-n", "1", "--", "w", NULL),
	    DT_EINVAL);
	assert_non_null(strstr(dt_errmsg(), "needs a host file"));
	job_free(&j);
	assert_int_equal(
	    plan_job(&j, NULL, "--launcher", "k8s", "-n", "1", "--", "w", NULL),
	    DT_EINVAL);
	job_free(&j);
	assert_int_equal(plan_job(&j, NULL, "--launcher", "mpi", "--restart",
	                          "1", "-n", "1", "--", "w", NULL),
	                 DT_EINVAL);
	job_free(&j);
	assert_int_equal(plan_job(&j, NULL, "--launcher", "mpi",
	                          "--sync-dst-dir", "/x", "-n", "1", "--", "w",
	                          NULL),
	                 DT_EINVAL);
	job_free(&j);
	/* A job of more than 8,192 nodes (once refused: every node got the
	 * whole node table in one message) is planned, a process for each;
	 * past the bound of a role (common/limits.h) it is refused before a
	 * process starts, naming the bound. */
	assert_int_equal(
	    plan_job(&j, NULL, "-n", "100000", "-s", "1", "--", "w", NULL),
	    DT_OK);
	assert_int_equal(j.n, 1 + 1 + 100000);
	job_free(&j);
	assert_int_not_equal(
	    plan_job(&j, NULL, "-n", "1000001", "-s", "1", "--", "w", NULL),
	    DT_OK);
	assert_non_null(strstr(dt_errmsg(), "1000000"));
	job_free(&j);
}

static void
test_hostfile_errors(void **state)
{
	static const char *const bad[] = {"h1 slots=0\n",       "h1 slots=x\n",
	                                  "h1 cores=2\n",       "h1:99999\n",
	                                  "-oProxyCommand=x\n", "# nothing\n\n",
	                                  "h1 slots=2000\n"};
	struct job j;

	(void)state;
	for (size_t i = 0; i < DT_ARRAY_LEN(bad); i++) {
		assert_int_equal(
		    plan_job(&j, bad[i], "-n", "1", "--", "w", NULL),
		    DT_EINVAL);
		assert_non_null(strstr(dt_errmsg(), j.hostfile));
		job_free(&j);
	}
	/* Comments, blank lines, tabs, an IPv6 address. */
	assert_int_equal(plan_job(&j, "\n# c\n  h1\tslots=3 # x\nfe80::1\n",
	                          "-n", "1", "--", "w", NULL),
	                 DT_OK);
	assert_int_equal(j.h.n, 2);
	assert_int_equal(j.h.h[0].slots, 3);
	assert_null(j.h.h[0].port);
	assert_string_equal(j.h.h[1].name, "fe80::1");
	assert_int_equal(j.h.h[1].slots, 1);
	job_free(&j);
}

static void
test_line_tags(void **state)
{
	struct proc p;
	long rank = -1;
	char line[64];
	int n;

	(void)state;
	assert_int_equal(mpi_tag("[1,3]<stdout>:hi", 16, &rank), 14);
	assert_int_equal(rank, 3);
	assert_int_equal(mpi_tag("[1,3]<stdout>hi", 15, &rank), 0);
	assert_int_equal(mpi_tag("[1,]<stdout>:hi", 15, &rank), 0);
	assert_int_equal(slurm_tag(" 12: x", 6, &rank), 5);
	assert_int_equal(rank, 12);
	assert_int_equal(slurm_tag("12 x", 4, &rank), 0);

	/* The wrapper's report: kept (the first), never printed. */
	proc_init(&p, KIND_MAIN, "slurm", "workers");
	p.line_tag = slurm_tag;
	p.tag_role = "worker";
	n = snprintf(line, sizeof(line), "3: %s%d %d\n", RANK_MARK, CLD_EXITED,
	             7);
	stream_feed(&p, &p.out[1], line, (size_t)n);
	n = snprintf(line, sizeof(line), "0: %s%d %d\n", RANK_MARK, CLD_KILLED,
	             15);
	stream_feed(&p, &p.out[1], line, (size_t)n);
	assert_int_equal(p.rank, 3);
	assert_int_equal(p.rank_code, CLD_EXITED);
	assert_int_equal(p.rank_status, 7);
	/* A lookalike with a bad status is an ordinary line. */
	proc_init(&p, KIND_MAIN, "slurm", "workers");
	p.line_tag = slurm_tag;
	p.tag_role = "worker";
	p.out[1].dst = 1;
	n = snprintf(line, sizeof(line), "1: %s9 300\n", RANK_MARK);
	fflush(stdout);
	stream_feed(&p, &p.out[1], line, (size_t)n);
	assert_int_equal(p.rank_code, 0);
	free(p.out[1].buf);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_local),
	    cmocka_unit_test(test_ssh),
	    cmocka_unit_test(test_placement),
	    cmocka_unit_test(test_mpi),
	    cmocka_unit_test(test_slurm),
	    cmocka_unit_test(test_options),
	    cmocka_unit_test(test_hostfile_errors),
	    cmocka_unit_test(test_line_tags),
	};

	setenv("DTRAIN_JOB_ID", "testjob", 1);
	unsetenv("DTRAIN_SECRET");
	unsetenv("DTRAIN_SECRET_FILE");
	unsetenv("DMLC_NODE_HOST");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
