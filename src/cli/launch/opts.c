/*
 * opts.c - `dtrain launch`'s options and its host file.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/launch/launch.h"
#include "common/file.h"

static dt_err elastic_opts(struct opts *o);

/* A host file's limits (docs/launcher.md): bytes of a line, its comment
 * included, and of a host's name, user@ included (DNS allows 255). */
#define MAX_HOST_LINE 1024
#define MAX_HOST_NAME 255

/* ------------------------------------------------------------------ */
/* Options.                                                            */

void
usage(FILE *f)
{
	fputs(
	    "usage: dtrain launch -n W [options] [--] CMD [ARGS...]\n"
	    "\n"
	    "Start a job: one scheduler, S servers and W workers running CMD,\n"
	    "and supervise it. Output lines are prefixed with role and rank;\n"
	    "if any process fails, or on Ctrl-C, every process is stopped.\n"
	    "\n"
	    "  -n, --num-workers W      number of workers (required)\n"
	    "  -s, --num-servers S      number of servers (default W; 0 = "
	    "none)\n"
	    "  -H, --hostfile FILE      hosts, 'host[:port] [slots=N]' per "
	    "line "
	    "(ssh,\n"
	    "                           mpi: the same placement)\n"
	    "      --launcher L         local, ssh, mpi or slurm (default: "
	    "local,\n"
	    "                           or ssh when -H is given)\n"
	    "      --env K=V            set K=V for every process (repeat); "
	    "--env K\n"
	    "                           passes K from this environment\n"
	    "      --sync-dst-dir DIR   rsync this directory to DIR on every "
	    "host\n"
	    "                           first, and run there (ssh)\n"
	    "      --sync-exclude PAT   leave what matches PAT out of the copy "
	    "(repeat;\n"
	    "                           rsync's --exclude; .git/ always)\n"
	    "      --checkpoint-dir DIR servers checkpoint their store in DIR\n"
	    "                           (DTRAIN_CHECKPOINT_DIR; shared or per "
	    "host)\n"
	    "      --checkpoint-every N every N rounds (default 100; 0: only "
	    "when\n"
	    "                           a worker calls dt_kv_checkpoint)\n"
	    "      --min-workers A      an elastic job: a worker that dies "
	    "leaves it,\n"
	    "                           which goes on while A remain;\n"
	    "                           below A it waits for workers to "
	    "join\n"
	    "      --max-workers B      its largest size (default -n)\n"
	    "      --elastic-timeout S  seconds an elastic job below A waits "
	    "for\n"
	    "                           workers to join before it ends "
	    "(default 600)\n"
	    "      --host-discovery-script S  elastic, local or ssh launcher: "
	    "run S\n"
	    "                           every 2 s; it prints host:slots "
	    "lines; keep a\n"
	    "                           worker per slot (up to B), stop those "
	    "of hosts\n"
	    "                           gone\n"
	    "      --restart N          start a new process in the place of "
	    "a\n"
	    "                           server or worker that dies, up to N "
	    "times\n"
	    "                           per role (recovery; local and ssh; "
	    "see\n"
	    "                           docs/fault-tolerance.md)\n"
	    "      --timeline FILE      write a Chrome trace of every process "
	    "to\n"
	    "                           FILE (DTRAIN_TIMELINE; open it in "
	    "Perfetto)\n"
	    "      --stats              print every node's traffic and the\n"
	    "                           straggler report at the end "
	    "(DTRAIN_STATS)\n"
	    "      --timeout SEC        stop the job after SEC seconds\n"
	    "      --grace SEC          time the servers and the scheduler get "
	    "to\n"
	    "                           exit after the last worker (default "
	    "30)\n"
	    "      --dry-run            print the plan, start nothing\n"
	    "  -v, --verbose            say what the launcher does\n"
	    "      --no-scheduler       debugging aid: start no scheduler\n"
	    "  -h, --help               this text\n"
	    "\n"
	    "Exit status: 0 when all workers exited 0 and the servers and the\n"
	    "scheduler then finished; 1 when a process failed; 2 for bad "
	    "usage;\n"
	    "124 on --timeout; 128+N when stopped by signal N. See "
	    "docs/launcher.md.\n",
	    f);
}

/*
 * Match argv[*i] against a short (-n, -n3) or long (--num-workers,
 * --num-workers=3) option taking a value. Returns 1 and sets *val on a match,
 * 0 on no match, -1 (with a message) when the value is missing.
 */
static int
opt_value(int argc, char **argv, int *i, const char *sopt, const char *lopt,
          const char **val, dt_err *err)
{
	const char *a = argv[*i];
	size_t n;

	if (sopt && a[0] == '-' && a[1] == sopt[1] && a[1] != '-') {
		if (a[2] != '\0') {
			*val = a + 2;
			return 1;
		}
	} else if (lopt && strncmp(a, lopt, n = strlen(lopt)) == 0 &&
	           (a[n] == '=' || a[n] == '\0')) {
		if (a[n] == '=') {
			*val = a + n + 1;
			return 1;
		}
	} else {
		return 0;
	}
	if (*i + 1 >= argc) {
		*err = dt__fail(DT_EINVAL, "option %s needs a value", a);
		return -1;
	}
	*val = argv[++*i];
	return 1;
}

/* The option's name as the user wrote it, without "=value". */
static const char *
opt_name(const char *arg, char *buf, size_t len)
{
	size_t n = strcspn(arg, "=");

	if (arg[1] != '-' && n > 2)
		n = 2; /* -n3 */
	snprintf(buf, len, "%.*s", (int)n, arg);
	return buf;
}

static int
valid_env_name(const char *s, size_t n)
{
	if (n == 0 || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
		return 0;
	for (size_t i = 1; i < n; i++)
		if (!(isalnum((unsigned char)s[i]) || s[i] == '_'))
			return 0;
	return 1;
}

/* Variables the launcher sets itself: --env may not change them. */
static const char *const reserved_env[] = {
    "DMLC_ROLE",         "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT",
    "DMLC_NUM_SERVER",   "DMLC_NUM_WORKER",  "DMLC_WORKER_ID",
    "DMLC_SERVER_ID",    "DTRAIN_LAUNCHED",  "DT_LISTEN_FD",
    "DTRAIN_JOB_ID",     "DTRAIN_SECRET",    "DTRAIN_SECRET_FILE",
    "DTRAIN_NODE_TOKEN",
};

int
is_reserved(const char *name, size_t n)
{
	for (size_t i = 0; i < DT_ARRAY_LEN(reserved_env); i++)
		if (strlen(reserved_env[i]) == n &&
		    memcmp(reserved_env[i], name, n) == 0)
			return 1;
	return 0;
}

static dt_err
add_env_opt(struct opts *o, const char *flag, const char *kv)
{
	const char *eq = strchr(kv, '=');
	size_t n = eq ? (size_t)(eq - kv) : strlen(kv);
	const char *v;

	if (n == 0)
		return dt__fail(DT_EINVAL, "%s '%s': empty variable name", flag,
		                kv);
	if (!valid_env_name(kv, n))
		return dt__fail(DT_EINVAL,
		                "%s '%s': '%.*s' is not a valid variable name",
		                flag, kv, (int)n, kv);
	if (is_reserved(kv, n) && strncmp(kv, "DTRAIN_SECRET", 13) == 0)
		return dt__fail(
		    DT_EINVAL,
		    "%s '%.*s': a secret does not go on a command "
		    "line; export %.*s instead (or let the launcher "
		    "make one)",
		    flag, (int)n, kv, (int)n, kv);
	if (is_reserved(kv, n))
		return dt__fail(DT_EINVAL,
		                "%s '%s': %.*s is set by the launcher itself",
		                flag, kv, (int)n, kv);
	if (eq)
		return strv_dup(&o->env, kv);
	if ((v = getenv(kv)) == NULL)
		return dt__fail(DT_EINVAL,
		                "%s %s: %s is not set in this environment",
		                flag, kv, kv);
	return strv_addf(&o->env, "%s=%s", kv, v);
}

/* An option's value that must not be empty (what: "directory name"). */
static dt_err
nonempty(const char *name, const char *val, const char *what)
{
	return *val ? DT_OK : dt__fail(DT_EINVAL, "%s: empty %s", name, what);
}

/*
 * The option groups of parse_opts. Each looks at argv[*i] (its name in
 * name) and answers 1 when it took it (with its value: *i moves on), 0
 * when the option is not its, or -1 with *err set.
 */
struct arg {
	int argc;
	char **argv;
	int *i;
	const char *name;
	dt_err *err;
};

/* (m: what opt_value answered; err: the value's check) */
static int
took(int m, dt_err err, dt_err *errp)
{
	if (m < 0)
		return -1;
	if (err) {
		*errp = err;
		return -1;
	}
	return m;
}

static int
value(const struct arg *a, const char *sh, const char *lo, const char **val)
{
	return opt_value(a->argc, a->argv, a->i, sh, lo, val, a->err);
}

/* The job's shape: -n, -s, -H, --launcher, --env, --restart and the
 * elastic options. */
static int
shape_opt(const struct arg *a, struct opts *o)
{
	const char *val, *name = a->name;
	int m;

	if ((m = value(a, "-n", "--num-workers", &val)) != 0)
		return m < 0 ? -1
		             : took(m,
		                    dt__parse_long(name, val, 1,
		                                   DT_MAX_ROLE_NODES,
		                                   &o->workers),
		                    a->err);
	if ((m = value(a, "-s", "--num-servers", &val)) != 0)
		return m < 0 ? -1
		             : took(m,
		                    dt__parse_long(name, val, 0,
		                                   DT_MAX_ROLE_NODES,
		                                   &o->servers),
		                    a->err);
	if ((m = value(a, "-H", "--hostfile", &val)) != 0) {
		if (m < 0)
			return -1;
		o->hostfile = val;
		return took(m, nonempty(name, val, "file name"), a->err);
	}
	if ((m = value(a, NULL, "--launcher", &val)) != 0) {
		if (m < 0)
			return -1;
		size_t k;

		for (k = 0; k < dl_nbackends; k++)
			if (strcmp(val, dl_backends[k]->name) == 0)
				break;
		if (k == dl_nbackends)
			return took(m,
			            dt__fail(DT_EINVAL,
			                     "%s: unknown launcher '%s' (use "
			                     "local, ssh, mpi or slurm)",
			                     name, val),
			            a->err);
		o->be = dl_backends[k];
		o->launcher_set = 1;
		return m;
	}
	if ((m = value(a, NULL, "--env", &val)) != 0)
		return m < 0 ? -1 : took(m, add_env_opt(o, name, val), a->err);
	if ((m = value(a, NULL, "--restart", &val)) != 0)
		return m < 0 ? -1
		             : took(m,
		                    dt__parse_long(name, val, 0, 100,
		                                   &o->restart),
		                    a->err);
	if ((m = value(a, NULL, "--min-workers", &val)) != 0)
		return m < 0 ? -1
		             : took(m,
		                    dt__parse_long(name, val, 1, 1L << 20,
		                                   &o->min_workers),
		                    a->err);
	if ((m = value(a, NULL, "--max-workers", &val)) != 0)
		return m < 0 ? -1
		             : took(m,
		                    dt__parse_long(name, val, 1, 1L << 20,
		                                   &o->max_workers),
		                    a->err);
	if ((m = value(a, NULL, "--elastic-timeout", &val)) != 0)
		return m < 0 ? -1
		             : took(m,
		                    dt__parse_long(name, val, 1, 7 * 86400,
		                                   &o->elastic_timeout),
		                    a->err);
	if ((m = value(a, NULL, "--host-discovery-script", &val)) > 0)
		o->discovery = val;
	return m; /* (-1: the value is missing) */
}

/* --timeline FILE: a path from here, made absolute (the scheduler may
 * run elsewhere). */
static dt_err
timeline_opt(struct opts *o, const char *name, const char *val)
{
	char cwd[4096];
	dt_err err;

	if ((err = nonempty(name, val, "file name")))
		return err;
	if (val[0] == '/')
		return strv_addf(&o->env, "DTRAIN_TIMELINE=%s", val);
	if (getcwd(cwd, sizeof(cwd)) == NULL)
		return dt__fail(DT_ESYS,
		                "%s: cannot read the current directory", name);
	return strv_addf(&o->env, "DTRAIN_TIMELINE=%s/%s", cwd, val);
}

/* What every process gets in its environment: --checkpoint-dir,
 * --checkpoint-every, --timeline, --stats. */
static int
env_opt(const struct arg *a, struct opts *o)
{
	const char *val, *name = a->name;
	dt_err err;
	long every;
	int m;

	if (strcmp(a->argv[*a->i], "--stats") == 0)
		return took(1, strv_addf(&o->env, "DTRAIN_STATS=1"), a->err);
	if ((m = value(a, NULL, "--checkpoint-dir", &val)) != 0) {
		if (m < 0)
			return -1;
		if (!(err = nonempty(name, val, "directory name")))
			err =
			    strv_addf(&o->env, "DTRAIN_CHECKPOINT_DIR=%s", val);
		return took(m, err, a->err);
	}
	if ((m = value(a, NULL, "--checkpoint-every", &val)) != 0) {
		if (m < 0)
			return -1;
		if (!(err = dt__parse_long(name, val, 0, 1L << 40, &every)))
			err = strv_addf(&o->env, "DTRAIN_CHECKPOINT_EVERY=%ld",
			                every);
		return took(m, err, a->err);
	}
	if ((m = value(a, NULL, "--timeline", &val)) != 0)
		return m < 0 ? -1 : took(m, timeline_opt(o, name, val), a->err);
	return m;
}

/* How the launcher runs: --sync-dst-dir, --sync-exclude, --timeout,
 * --grace. */
static int
run_opt(const struct arg *a, struct opts *o)
{
	const char *val, *name = a->name;
	int m;

	if ((m = value(a, NULL, "--sync-dst-dir", &val)) != 0) {
		if (m < 0)
			return -1;
		o->sync_dir = val;
		return took(m, nonempty(name, val, "directory name"), a->err);
	}
	if ((m = value(a, NULL, "--sync-exclude", &val)) != 0)
		return m < 0 ? -1
		             : took(m,
		                    *val ? strv_dup(&o->sync_exclude, val)
		                         : dt__fail(DT_EINVAL,
		                                    "%s: empty pattern", name),
		                    a->err);
	if ((m = value(a, NULL, "--timeout", &val)) != 0)
		return m < 0 ? -1
		             : took(m,
		                    dt__parse_long(name, val, 1, MAX_TIMEOUT,
		                                   &o->timeout_s),
		                    a->err);
	if ((m = value(a, NULL, "--grace", &val)) != 0)
		return m < 0 ? -1
		             : took(m,
		                    dt__parse_long(name, val, 0, MAX_TIMEOUT,
		                                   &o->grace_s),
		                    a->err);
	return m;
}

/* The flags without a value; 1 if a is one. */
static int
flag_opt(const char *a, struct opts *o)
{
	if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0)
		o->verbose = 1;
	else if (strcmp(a, "--dry-run") == 0)
		o->dry_run = 1;
	else if (strcmp(a, "--no-scheduler") == 0)
		o->no_scheduler = 1;
	else
		return 0;
	return 1;
}

/* What the options mean together, once all are read. */
static dt_err
check_opts(struct opts *o)
{
	dt_err err;

	if (o->workers < 0)
		return dt__fail(DT_EINVAL,
		                "-n (the number of workers) is required");
	if (o->ncmd == 0)
		return dt__fail(DT_EINVAL, "no command given: dtrain launch "
		                           "-n W [options] [--] CMD [ARGS...]");
	if (o->servers < 0)
		o->servers = o->workers;
	if ((err = dt__job_size_check(o->servers, o->workers, "-s", "-n")))
		return err;
	if (!o->launcher_set)
		o->be = o->hostfile ? &dl_ssh : &dl_local;
	if (o->be->hosts == HOSTS_REQUIRED && o->hostfile == NULL)
		return dt__fail(DT_EINVAL,
		                "--launcher %s needs a host file (-H FILE)",
		                o->be->name);
	if (o->sync_dir && !o->be->sync)
		return dt__fail(DT_EINVAL, "--sync-dst-dir works only with "
		                           "--launcher ssh");
	if (o->restart && !o->be->restart)
		return dt__fail(DT_EINVAL,
		                "--restart works with --launcher local or ssh; "
		                "under mpirun or Slurm, let the engine start "
		                "the process again (with DTRAIN_RECOVER=1)");
	/* Every process knows that a lost node may come back. */
	if (o->restart && (err = strv_dup(&o->env, "DTRAIN_RECOVER=1")))
		return err;
	if (o->sync_exclude.n && !o->sync_dir)
		return dt__fail(DT_EINVAL,
		                "--sync-exclude needs --sync-dst-dir");
	return elastic_opts(o);
}

dt_err
parse_opts(int argc, char **argv, struct opts *o)
{
	char name[64];
	dt_err err = DT_OK;
	int i, m;

	memset(o, 0, sizeof(*o));
	o->workers = -1;
	o->servers = -1;
	o->grace_s = 30;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		struct arg g = {argc, argv, &i, name, &err};

		if (strcmp(a, "--") == 0) {
			i++;
			break;
		}
		if (a[0] != '-' || a[1] == '\0')
			break; /* the command */
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			o->help = 1;
			return DT_OK;
		}
		if (flag_opt(a, o))
			continue;
		opt_name(a, name, sizeof(name));
		if ((m = shape_opt(&g, o)) == 0 && (m = env_opt(&g, o)) == 0)
			m = run_opt(&g, o);
		if (m < 0)
			return err;
		if (m == 0)
			return dt__fail(DT_EINVAL, "unknown option '%s'", a);
	}
	o->cmd = argv + i;
	o->ncmd = argc - i;
	return check_opts(o);
}

/*
 * The workers a replay's DTRAIN_ELASTIC_SCHEDULE (the last --env's, else
 * this environment's) takes in: the sum of its "step S: +N" items. Only
 * these are read here; the workers check the whole schedule and refuse
 * a bad one by name. The local launcher starts that many workers without
 * a rank with the job: they join it and wait for their step, as the
 * replay needs (a discovery script brings its own instead).
 */
static dt_err
sched_joiners(struct opts *o)
{
	static const char key[] = "DTRAIN_ELASTIC_SCHEDULE=";
	const char *v = dt__env_str("DTRAIN_ELASTIC_SCHEDULE");
	char buf[4096], *save = NULL;

	o->sched_joiners = 0;
	for (size_t i = 0; i < o->env.n; i++)
		if (strncmp(o->env.v[i], key, sizeof(key) - 1) == 0)
			v = o->env.v[i] + sizeof(key) - 1;
	if (v == NULL || o->discovery || o->be->joiner || !o->be->discovery)
		return DT_OK;
	snprintf(buf, sizeof(buf), "%s", v);
	for (char *item = strtok_r(buf, ";", &save); item;
	     item = strtok_r(NULL, ";", &save)) {
		unsigned long long step;
		long add;
		int used = 0;

		if (sscanf(item, " step %llu: +%ld %n", &step, &add, &used) !=
		        2 ||
		    item[used] != '\0' || add < 1)
			continue; /* (not a grow: the workers judge it) */
		if (add > o->max_workers - o->workers - o->sched_joiners)
			return dt__fail(DT_EINVAL,
			                "DTRAIN_ELASTIC_SCHEDULE takes in more "
			                "workers than -n %ld leaves room for "
			                "under --max-workers %ld",
			                o->workers, o->max_workers);
		o->sched_joiners += add;
	}
	return DT_OK;
}

/* --min-workers A / --max-workers B: an elastic job, told to every
 * process through the environment (docs/elastic.md). */
static dt_err
elastic_opts(struct opts *o)
{
	dt_err err;

	if (o->discovery && !o->min_workers && !o->max_workers)
		return dt__fail(DT_EINVAL,
		                "--host-discovery-script: for an elastic job "
		                "(--min-workers / --max-workers)");
	if (o->elastic_timeout && !o->min_workers && !o->max_workers)
		return dt__fail(DT_EINVAL,
		                "--elastic-timeout: for an elastic job "
		                "(--min-workers / --max-workers)");
	if (o->discovery && !o->be->discovery)
		return dt__fail(
		    DT_EINVAL,
		    "--host-discovery-script works with the local and ssh "
		    "launchers only: mpirun and srun start a fixed set of "
		    "ranks (start workers that join by hand, or with another "
		    "tool, with the job's environment; see docs/elastic.md)");
	if (!o->min_workers && !o->max_workers)
		return DT_OK;
	if (o->restart)
		return dt__fail(DT_EINVAL,
		                "--min-workers/--max-workers and --restart "
		                "exclude each other: a lost worker either "
		                "leaves an elastic job or is replaced");
	if (!o->min_workers)
		o->min_workers = 1;
	if (!o->max_workers)
		o->max_workers = o->workers;
	if (o->min_workers > o->workers || o->max_workers < o->workers)
		return dt__fail(DT_EINVAL,
		                "-n %ld is outside --min-workers %ld .. "
		                "--max-workers %ld",
		                (long)o->workers, o->min_workers,
		                o->max_workers);
	if ((err = strv_dup(&o->env, "DTRAIN_ELASTIC=1")) ||
	    (err = strv_addf(&o->env, "DTRAIN_ELASTIC_MIN=%ld",
	                     o->min_workers)) ||
	    (err = strv_addf(&o->env, "DTRAIN_ELASTIC_MAX=%ld",
	                     o->max_workers)) ||
	    (o->elastic_timeout &&
	     (err = strv_addf(&o->env, "DTRAIN_ELASTIC_TIMEOUT=%ld",
	                      o->elastic_timeout))))
		return err;
	return sched_joiners(o);
}

/* ------------------------------------------------------------------ */
/* Host file: "host[:port] [slots=N]" per line, "#" comments.         */

static int
valid_host(const char *s)
{
	if (*s == '\0' || *s == '-') /* "-oProxyCommand=..." is an option */
		return 0;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr("._-:@[]%", *s))
			return 0;
	return 1;
}

void
hosts_free(struct hosts *h)
{
	for (size_t i = 0; i < h->n; i++) {
		free(h->h[i].name);
		free(h->h[i].port);
	}
	free(h->h);
	memset(h, 0, sizeof(*h));
}

/*
 * One line of a host file into buf (cap bytes, with its NUL), without its
 * newline: 1 for a line, 0 at the end, -1 for a line longer than cap - 1
 * bytes, -2 for one holding a NUL byte (which would cut it short
 * unseen). What follows a bad line is not read.
 */
static int
host_line(FILE *f, char *buf, size_t cap)
{
	size_t n = 0;
	int ch, nul = 0;

	while ((ch = getc(f)) != EOF && ch != '\n') {
		if (n + 1 >= cap)
			return -1;
		nul |= ch == '\0';
		buf[n++] = (char)ch;
	}
	buf[n] = '\0';
	if (nul)
		return -2;
	return ch == EOF && n == 0 ? 0 : 1;
}

/* A host file line's host s (checked) and the words after it (word:
 * "slots=N" only), for line lineno of path. */
static dt_err
host_words(const char *path, size_t lineno, const char *s, char *word,
           long *slots)
{
	if (strlen(s) > MAX_HOST_NAME)
		return dt__fail(DT_EINVAL,
		                "-H %s line %zu: a host name of %zu bytes "
		                "(%d at most)",
		                path, lineno, strlen(s), MAX_HOST_NAME);
	if (!valid_host(s))
		return dt__fail(DT_EINVAL, "-H %s line %zu: bad host '%s'",
		                path, lineno, s);
	/* What follows the host: "slots=N", as in mpirun's files. */
	while (*word) {
		char *end = word + strcspn(word, " \t");
		char save = *end;

		*end = '\0';
		if (strncmp(word, "slots=", 6) != 0 ||
		    dt__parse_long("slots", word + 6, 1, MAX_SLOTS, slots))
			return dt__fail(DT_EINVAL,
			                "-H %s line %zu: '%s' is not "
			                "slots=N (N from 1 to %d)",
			                path, lineno, word, MAX_SLOTS);
		*end = save;
		word = end + strspn(end, " \t");
	}
	return DT_OK;
}

dt_err
read_hostfile(const char *path, struct hosts *out)
{
	struct hosts h = {0};
	size_t cap = 0, lineno = 0;
	char line[MAX_HOST_LINE + 1];
	dt_err err = DT_OK;
	FILE *f;
	int got;

	/* (a FIFO given as -H would block the open: refused by name) */
	if ((err = dt__file_fopen_regular(DT_EINVAL, "-H ", path, &f)))
		return err;
	while ((got = host_line(f, line, sizeof(line))) != 0) {
		char *s = line, *e, *colon, *word;
		struct host host = {.slots = 1};
		int has_port = 0;

		lineno++;
		if (got < 0) {
			err =
			    dt__fail(DT_EINVAL,
			             got == -1 ? "-H %s line %zu: longer than "
			                         "%d bytes"
			                       : "-H %s line %zu: holds a NUL "
			                         "byte",
			             path, lineno, MAX_HOST_LINE);
			goto fail;
		}
		line[strcspn(line, "#\r\n")] = '\0'; /* a comment */
		s += strspn(s, " \t");
		e = s + strcspn(s, " \t");
		word = e + strspn(e, " \t");
		*e = '\0';
		if (*s == '\0')
			continue;
		if ((err = host_words(path, lineno, s, word, &host.slots)))
			goto fail;
		/* host:port, unless it is an IPv6 address (several ':'). */
		if ((colon = strchr(s, ':')) && !strchr(colon + 1, ':')) {
			long port;

			*colon = '\0';
			if (dt__parse_long("port", colon + 1, 1, 65535,
			                   &port) ||
			    *s == '\0') {
				err = dt__fail(DT_EINVAL,
				               "-H %s line %zu: bad host:port "
				               "'%s:%s'",
				               path, lineno, s, colon + 1);
				goto fail;
			}
			host.port = strdup(colon + 1);
			has_port = 1;
		}
		host.name = strdup(s);
		if (h.n == cap) {
			struct host *p;

			cap = cap ? 2 * cap : 16;
			if ((p = realloc(h.h, cap * sizeof(*p))) == NULL) {
				free(host.name);
				free(host.port);
				err = dt__fail(DT_ENOMEM, "out of memory");
				goto fail;
			}
			h.h = p;
		}
		h.h[h.n++] = host;
		if (host.name == NULL || (has_port && host.port == NULL)) {
			err = dt__fail(DT_ENOMEM, "out of memory");
			goto fail;
		}
	}
	if (ferror(f)) {
		err = dt__fail(DT_EINVAL, "-H %s: %s", path, strerror(errno));
		goto fail;
	}
	if (h.n == 0) {
		err = dt__fail(DT_EINVAL, "-H %s: no hosts in the file", path);
		goto fail;
	}
	fclose(f);
	*out = h;
	return DT_OK;
fail:
	fclose(f);
	hosts_free(&h);
	return err;
}
