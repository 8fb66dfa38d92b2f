/*
 * launch.c - `dtrain launch`: start a whole job and supervise it to the end.
 *
 * This is MXNet's tools/launch.py made reliable. The launcher builds a plan
 * (one scheduler, S servers and W workers; or one mpirun or srun per role),
 * creates the scheduler's listening socket itself so that no other program
 * can take the port between choosing and binding it, starts every process
 * with pipes on its stdout and stderr, and then runs one poll() loop over
 * those pipes and a signalfd (SIGCHLD, SIGINT, SIGTERM, SIGHUP). The loop
 * prefixes every output line with the role and rank of its process, and
 * stops the whole job as soon as any process fails, the launcher is
 * interrupted, or --timeout passes.
 *
 * Nothing of a job outlives it:
 * - every child is the leader of its own session and process group, so the
 *   launcher signals the group and finds the rest of the session in /proc
 *   (mpirun, for one, puts each rank in a group of its own);
 * - every child dies with the launcher (PR_SET_PDEATHSIG), and a small guard
 *   process, forked first, kills every session of the job when the launcher
 *   itself is killed with SIGKILL, grandchildren included;
 * - exits are observed with WNOWAIT and children are reaped only at the very
 *   end, so the ids of their groups and sessions cannot be reused by an
 *   unrelated process while the launcher may still signal them.
 *
 * The scheduler and servers are this same binary (`dtrain scheduler`,
 * `dtrain server` in main.c); workers run the user's command. The scheduler
 * inherits the listening socket and finds it through DT_LISTEN_FD.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <sodium.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/util.h"
#include "net/sock.h"

extern char **environ;

#define TERM_WAIT_S 3      /* SIGTERM, then SIGKILL this much later */
#define DRAIN_MS    1000   /* wait for pipes to close after all exits */
#define LINE_CAP    65536  /* longer output lines are split */
#define MAX_NODES   100000 /* -n and -s */
#define MAX_TIMEOUT (100L * 365 * 24 * 3600)
#define NS_PER_MS   1000000ull
#define NS_PER_S    1000000000ull

/* Exit statuses (see docs/launcher.md). */
#define RC_FAIL    1
#define RC_USAGE   2
#define RC_TIMEOUT 124

/* ------------------------------------------------------------------ */
/* Strings: growable string vectors and buffers, shell quoting.        */

/* A NULL-terminated vector of owned strings. */
struct strv {
	char **v;
	size_t n, cap;
};

/* Append str, taking ownership; a NULL str means its allocation failed. */
static dt_err
strv_add(struct strv *s, char *str)
{
	if (str == NULL)
		return dt__fail(DT_ENOMEM, "out of memory");
	if (s->n + 2 > s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 16;
		char **v = realloc(s->v, cap * sizeof(*v));

		if (v == NULL) {
			free(str);
			return dt__fail(DT_ENOMEM, "out of memory");
		}
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = str;
	s->v[s->n] = NULL;
	return DT_OK;
}

static dt_err
strv_dup(struct strv *s, const char *str)
{
	return strv_add(s, strdup(str));
}

static dt_err strv_addf(struct strv *s, const char *fmt, ...) DT_PRINTF(2, 3);

static dt_err
strv_addf(struct strv *s, const char *fmt, ...)
{
	va_list ap;
	char *str;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&str, fmt, ap);
	va_end(ap);
	return strv_add(s, n < 0 ? NULL : str);
}

static dt_err
strv_extend(struct strv *s, char *const *v, size_t n)
{
	dt_err err = DT_OK;

	for (size_t i = 0; i < n && !err; i++)
		err = strv_dup(s, v[i]);
	return err;
}

static void
strv_free(struct strv *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
	memset(s, 0, sizeof(*s));
}

/* A growable string; an allocation failure is remembered, not fatal. */
struct sbuf {
	char *p;
	size_t len, cap;
	int oom;
};

static void
sb_addn(struct sbuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 64;
		char *p;

		while (b->len + n + 1 > cap)
			cap *= 2;
		if ((p = realloc(b->p, cap)) == NULL) {
			b->oom = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void
sb_add(struct sbuf *b, const char *s)
{
	sb_addn(b, s, strlen(s));
}

/* Whether s needs no quoting in a POSIX shell. */
static int
shell_safe(const char *s)
{
	if (*s == '\0')
		return 0;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr("_@%+=:,./-", *s))
			return 0;
	return 1;
}

/* Append s as one shell word: 'it'\''s' for it's. */
static void
sb_addq(struct sbuf *b, const char *s)
{
	if (shell_safe(s)) {
		sb_add(b, s);
		return;
	}
	sb_add(b, "'");
	for (; *s; s++) {
		if (*s == '\'')
			sb_add(b, "'\\''");
		else
			sb_addn(b, s, 1);
	}
	sb_add(b, "'");
}

/* The string built so far, owned by the caller (NULL if out of memory). */
static char *
sb_take(struct sbuf *b)
{
	char *p = b->p;

	if (b->oom || p == NULL) {
		free(p);
		p = b->oom ? NULL : strdup("");
	}
	memset(b, 0, sizeof(*b));
	return p;
}

/* ------------------------------------------------------------------ */
/* Messages. Every write is whole, so lines of the launcher and of the */
/* children never mix inside a line.                                   */

static int out_dead[3]; /* our stdout or stderr was closed by the reader */

static void
write_all(int fd, const char *p, size_t n)
{
	while (n > 0 && !out_dead[fd]) {
		ssize_t m = write(fd, p, n);

		if (m > 0) {
			p += m;
			n -= (size_t)m;
		} else if (m < 0 && errno == EAGAIN) {
			struct pollfd pfd = {.fd = fd, .events = POLLOUT};

			poll(&pfd, 1, -1);
		} else if (m < 0 && errno != EINTR) {
			out_dead[fd] = 1; /* EPIPE: drop output, go on */
		}
	}
}

static void say(const char *fmt, ...) DT_PRINTF(1, 2);

static void
say(const char *fmt, ...)
{
	char line[8192];
	va_list ap;
	int n;

	n = snprintf(line, sizeof(line), "dtrain launch: ");
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	n = (int)strlen(line);
	line[n++] = '\n';
	write_all(2, line, (size_t)n);
}

/* ------------------------------------------------------------------ */
/* Options.                                                            */

enum launcher { L_LOCAL, L_SSH, L_MPI, L_SLURM };
static const char *const launcher_names[] = {"local", "ssh", "mpi", "slurm"};

struct opts {
	long workers; /* -n */
	long servers; /* -s, -1 = as many as workers */
	const char *hostfile;
	enum launcher launcher;
	int launcher_set;
	struct strv env; /* --env, resolved to K=V */
	const char *sync_dir;
	struct strv sync_exclude; /* --sync-exclude patterns, for rsync */
	long timeout_s;           /* 0 = none */
	long grace_s; /* servers and scheduler finish after the workers */
	long restart; /* --restart: new processes per role for lost ones */
	int verbose, dry_run, no_scheduler, help;
	char **cmd; /* the worker command, NULL-terminated */
	int ncmd;
};

struct host {
	char *name;
	char *port; /* ssh port from "host:port", or NULL */
};

struct hosts {
	struct host *h;
	size_t n;
};

static void
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
	    "  -H, --hostfile FILE      hosts, one per line (ssh, mpi)\n"
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
	    "      --restart N          start a new process in the place of "
	    "a\n"
	    "                           server that dies, up to N times "
	    "(recovery;\n"
	    "                           local and ssh; see "
	    "docs/fault-tolerance.md)\n"
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
    "DMLC_ROLE",       "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT",
    "DMLC_NUM_SERVER", "DMLC_NUM_WORKER",  "DMLC_WORKER_ID",
    "DMLC_SERVER_ID",  "DTRAIN_LAUNCHED",  "DT_LISTEN_FD",
    "DTRAIN_JOB_ID",   "DTRAIN_SECRET",    "DTRAIN_SECRET_FILE",
};

static int
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

static dt_err
parse_opts(int argc, char **argv, struct opts *o)
{
	const char *val;
	char name[64];
	dt_err err = DT_OK;
	int i, m;

	memset(o, 0, sizeof(*o));
	o->workers = -1;
	o->servers = -1;
	o->grace_s = 30;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

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
		if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
			o->verbose = 1;
			continue;
		}
		if (strcmp(a, "--dry-run") == 0) {
			o->dry_run = 1;
			continue;
		}
		if (strcmp(a, "--no-scheduler") == 0) {
			o->no_scheduler = 1;
			continue;
		}
		opt_name(a, name, sizeof(name));
		if ((m = opt_value(argc, argv, &i, "-n", "--num-workers", &val,
		                   &err)) != 0) {
			if (m < 0 ||
			    (err = dt__parse_long(name, val, 1, MAX_NODES,
			                          &o->workers)))
				return err;
		} else if ((m = opt_value(argc, argv, &i, "-s", "--num-servers",
		                          &val, &err)) != 0) {
			if (m < 0 ||
			    (err = dt__parse_long(name, val, 0, MAX_NODES,
			                          &o->servers)))
				return err;
		} else if ((m = opt_value(argc, argv, &i, "-H", "--hostfile",
		                          &val, &err)) != 0) {
			if (m < 0)
				return err;
			if (*val == '\0')
				return dt__fail(DT_EINVAL,
				                "%s: empty file name", name);
			o->hostfile = val;
		} else if ((m = opt_value(argc, argv, &i, NULL, "--launcher",
		                          &val, &err)) != 0) {
			size_t k;

			if (m < 0)
				return err;
			for (k = 0; k < DT_ARRAY_LEN(launcher_names); k++)
				if (strcmp(val, launcher_names[k]) == 0)
					break;
			if (k == DT_ARRAY_LEN(launcher_names))
				return dt__fail(DT_EINVAL,
				                "%s: unknown launcher '%s' "
				                "(use local, ssh, mpi or "
				                "slurm)",
				                name, val);
			o->launcher = (enum launcher)k;
			o->launcher_set = 1;
		} else if ((m = opt_value(argc, argv, &i, NULL, "--env", &val,
		                          &err)) != 0) {
			if (m < 0 || (err = add_env_opt(o, name, val)))
				return err;
		} else if ((m = opt_value(argc, argv, &i, NULL, "--restart",
		                          &val, &err)) != 0) {
			if (m < 0 || (err = dt__parse_long(name, val, 0, 100,
			                                   &o->restart)))
				return err;
		} else if ((m = opt_value(argc, argv, &i, NULL,
		                          "--checkpoint-dir", &val, &err)) !=
		           0) {
			if (m < 0 ||
			    (err = nonempty(name, val, "directory name")) ||
			    (err = strv_addf(&o->env,
			                     "DTRAIN_CHECKPOINT_DIR=%s", val)))
				return err;
		} else if ((m = opt_value(argc, argv, &i, NULL,
		                          "--checkpoint-every", &val, &err)) !=
		           0) {
			long every;

			if (m < 0 ||
			    (err = dt__parse_long(name, val, 0, 1L << 40,
			                          &every)) ||
			    (err = strv_addf(&o->env,
			                     "DTRAIN_CHECKPOINT_EVERY=%ld",
			                     every)))
				return err;
		} else if ((m = opt_value(argc, argv, &i, NULL,
		                          "--sync-dst-dir", &val, &err)) != 0) {
			if (m < 0 ||
			    (err = nonempty(name, val, "directory name")))
				return err;
			o->sync_dir = val;
		} else if ((m = opt_value(argc, argv, &i, NULL,
		                          "--sync-exclude", &val, &err)) != 0) {
			if (m < 0)
				return err;
			if (*val == '\0')
				return dt__fail(DT_EINVAL, "%s: empty pattern",
				                name);
			if ((err = strv_dup(&o->sync_exclude, val)))
				return err;
		} else if ((m = opt_value(argc, argv, &i, NULL, "--timeout",
		                          &val, &err)) != 0) {
			if (m < 0 ||
			    (err = dt__parse_long(name, val, 1, MAX_TIMEOUT,
			                          &o->timeout_s)))
				return err;
		} else if ((m = opt_value(argc, argv, &i, NULL, "--grace", &val,
		                          &err)) != 0) {
			if (m < 0 ||
			    (err = dt__parse_long(name, val, 0, MAX_TIMEOUT,
			                          &o->grace_s)))
				return err;
		} else {
			return dt__fail(DT_EINVAL, "unknown option '%s'", a);
		}
	}
	o->cmd = argv + i;
	o->ncmd = argc - i;
	if (o->workers < 0)
		return dt__fail(DT_EINVAL,
		                "-n (the number of workers) is required");
	if (o->ncmd == 0)
		return dt__fail(DT_EINVAL, "no command given: dtrain launch "
		                           "-n W [options] [--] CMD [ARGS...]");
	if (o->servers < 0)
		o->servers = o->workers;
	if (!o->launcher_set)
		o->launcher = o->hostfile ? L_SSH : L_LOCAL;
	if (o->launcher == L_SSH && o->hostfile == NULL)
		return dt__fail(DT_EINVAL, "--launcher ssh needs a host file "
		                           "(-H FILE)");
	if (o->sync_dir && o->launcher != L_SSH)
		return dt__fail(DT_EINVAL, "--sync-dst-dir works only with "
		                           "--launcher ssh");
	if (o->restart && o->launcher != L_LOCAL && o->launcher != L_SSH)
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
	return DT_OK;
}

/* ------------------------------------------------------------------ */
/* Host file: one host per line, "#" comments; for ssh, "host:port".   */

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

static void
hosts_free(struct hosts *h)
{
	for (size_t i = 0; i < h->n; i++) {
		free(h->h[i].name);
		free(h->h[i].port);
	}
	free(h->h);
	memset(h, 0, sizeof(*h));
}

static dt_err
read_hostfile(const char *path, struct hosts *out)
{
	struct hosts h = {0};
	size_t cap = 0, lineno = 0;
	char *line = NULL;
	size_t len = 0;
	dt_err err = DT_OK;
	FILE *f;

	if ((f = fopen(path, "r")) == NULL)
		return dt__fail(DT_EINVAL, "-H %s: %s", path, strerror(errno));
	while (getline(&line, &len, f) != -1) {
		char *s = line, *e, *colon;
		struct host host = {0};

		lineno++;
		s += strspn(s, " \t\r\n");
		e = s + strcspn(s, " \t\r\n#");
		*e = '\0';
		if (*s == '\0')
			continue;
		if (!valid_host(s)) {
			err =
			    dt__fail(DT_EINVAL, "-H %s line %zu: bad host '%s'",
			             path, lineno, s);
			goto fail;
		}
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
		if (host.name == NULL || (colon && host.port == NULL)) {
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
	free(line);
	*out = h;
	return DT_OK;
fail:
	fclose(f);
	free(line);
	hosts_free(&h);
	return err;
}

/* ------------------------------------------------------------------ */
/* The plan: every process of the job, with its command and variables. */

/* MAIN processes (workers, rsync) must all exit 0 for the job to end;
 * SERVICE processes (scheduler, servers) must then finish by themselves. */
enum kind { KIND_MAIN, KIND_SERVICE };
/* How a process marks the rank of each line (mpirun, srun). */
enum tag { TAG_NONE, TAG_MPI, TAG_SLURM };

struct stream {
	int fd;  /* read end of the pipe, -1 once closed */
	int dst; /* 1 or 2: our stdout or stderr */
	char *buf;
	size_t len, cap;
};

struct proc {
	char label[80];       /* "worker 1", "scheduler", "workers" */
	char host[256];       /* where it runs, for the plan */
	const char *tag_role; /* "worker"/"server" for tagged lines */
	enum kind kind;
	enum tag tag;
	int strip_cr;           /* remote pty output ends lines with \r\n */
	int is_scheduler;       /* inherits the listening socket */
	int show_env;           /* the plan shows the variables as env K=V */
	const char *exec_path;  /* path to exec, NULL: search argv[0] */
	const char *secret_env; /* "DTRAIN_SECRET=..." added unseen, or NULL */
	const char *stdin_data; /* written to the process's stdin, or NULL */
	struct strv argv;
	struct strv env; /* K=V added to the launcher's environment */
	pid_t pid;       /* 0 until started */
	int exited;
	int failed;         /* exited non-zero or by a signal */
	int restart_wanted; /* --restart: a new process is to take its place */
	int replaced;       /* one did */
	unsigned exit_seq;  /* in which order its exit was noted */
	int code;           /* CLD_EXITED, CLD_KILLED or CLD_DUMPED */
	int status;         /* exit status or signal */
	struct stream out[2];
};

/* What the plan needs besides the options. */
struct ctx {
	const char *uri, *port, *listen_fd; /* scheduler address */
	const char *exe_exec;               /* dtrain to exec locally */
	const char *exe_name;  /* dtrain's path, shown and used remotely */
	const char *cwd;       /* directory of remote processes */
	const char *local_cwd; /* the launcher\'s directory, for rsync */
	const char *ssh, *rsync, *mpirun, *srun;
	char ssh_timeout[48]; /* "ConnectTimeout=N" (DTRAIN_SSH_CONNECT_TIMEOUT)
	                       */
	struct strv common;   /* DMLC_* and DTRAIN_LAUNCHED, then --env */
	struct strv forward;  /* variables passed on to other hosts */
	/* Authentication (docs/security.md): the job's id, and the secret
	 * every process gets in its environment, never on a command line
	 * or in the plan: "DTRAIN_SECRET=<64 hex digits>" (made here, or the
	 * launcher's own), "DTRAIN_SECRET_FILE=PATH" (the launcher's own), or
	 * NULL with DTRAIN_AUTH=none. secret_line is the secret alone, what
	 * the ssh launcher writes to a file on each host. */
	char job_id[40];
	char *secret_env;
	char *secret_line;
	char *remote_secret_file; /* "DIR/.dtrain-JOB.secret" (ssh) */
	unsigned char *unreached; /* by host: ssh could not connect there */
};

static void
procs_free(struct proc *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		strv_free(&p[i].argv);
		strv_free(&p[i].env);
		for (int k = 0; k < 2; k++) {
			if (p[i].out[k].fd >= 0)
				close(p[i].out[k].fd);
			free(p[i].out[k].buf);
		}
	}
	free(p);
}

static struct proc *proc_init(struct proc *p, enum kind kind, const char *host,
                              const char *fmt, ...) DT_PRINTF(4, 5);

static struct proc *
proc_init(struct proc *p, enum kind kind, const char *host, const char *fmt,
          ...)
{
	va_list ap;

	memset(p, 0, sizeof(*p));
	p->kind = kind;
	p->out[0].fd = p->out[1].fd = -1;
	p->out[0].dst = 1;
	p->out[1].dst = 2;
	snprintf(p->host, sizeof(p->host), "%s", host);
	va_start(ap, fmt);
	vsnprintf(p->label, sizeof(p->label), fmt, ap);
	va_end(ap);
	return p;
}

/* Variables of a process: role, rank request, the common ones. */
static dt_err
role_env(struct proc *p, const struct ctx *c, const char *role,
         const char *id_var, long id, int remote)
{
	dt_err err = strv_addf(&p->env, "DMLC_ROLE=%s", role);

	if (!err && id_var)
		err = strv_addf(&p->env, "%s=%ld", id_var, id);
	if (!err && remote)
		err = strv_extend(&p->env, c->forward.v, c->forward.n);
	if (!err)
		err = strv_extend(&p->env, c->common.v, c->common.n);
	return err;
}

/* A process on this machine: the scheduler, or any role with --launcher
 * local. cmd == NULL runs `dtrain ROLE`. */
static dt_err
plan_local(struct proc *p, const struct ctx *c, const char *role,
           const char *id_var, long id, char **cmd, size_t ncmd)
{
	dt_err err;

	p->show_env = 1;
	p->secret_env = c->secret_env;
	if ((err = role_env(p, c, role, id_var, id, 0)))
		return err;
	if (strcmp(role, "scheduler") == 0) {
		p->is_scheduler = 1;
		if ((err = strv_addf(&p->env, "DT_LISTEN_FD=%s", c->listen_fd)))
			return err;
	}
	if (cmd)
		return strv_extend(&p->argv, cmd, ncmd);
	p->exec_path = c->exe_exec;
	if ((err = strv_dup(&p->argv, c->exe_name)))
		return err;
	return strv_dup(&p->argv, role);
}

static dt_err
ssh_prefix(struct strv *a, const struct ctx *c, const struct host *h)
{
	const char *const opts[] = {"-o", "StrictHostKeyChecking=no",
	                            "-o", "BatchMode=yes",
	                            "-o", c->ssh_timeout,
	                            "-o", "ServerAliveInterval=15",
	                            "-tt"};
	dt_err err = strv_dup(a, c->ssh);

	for (size_t i = 0; i < DT_ARRAY_LEN(opts) && !err; i++)
		err = strv_dup(a, opts[i]);
	if (!err && h->port) {
		if (!(err = strv_dup(a, "-p")))
			err = strv_dup(a, h->port);
	}
	if (!err)
		err = strv_dup(a, h->name);
	return err;
}

/*
 * The remote side's supervisor, a POSIX shell script that runs CMD ("$@")
 * as the leader of a session and process group of its own and waits for
 * it. It stays the terminal's session leader, so when the ssh connection
 * drops (the launcher stopping the job, a network failure) it is the one
 * the kernel sends SIGHUP: it then sends SIGTERM to CMD's whole group
 * (once, whatever signals follow), and SIGKILL to what is left of it 2 s
 * later, so a program that ignores SIGHUP, and whatever it started, ends
 * with the job. When CMD exits by itself, what it left running in its
 * group is ended the same way. Its exit status is CMD's (129 when it was
 * stopped).
 */
static const char remote_supervisor[] =
    "p=; stop() { kill -TERM -$p 2>/dev/null || kill -TERM $p 2>/dev/null; "
    "i=0; while kill -0 -$p 2>/dev/null && [ $i -lt 20 ]; do sleep 0.1; "
    "i=$((i + 1)); done; kill -KILL -$p 2>/dev/null; }; "
    "trap 'trap \"\" HUP INT TERM; [ -n \"$p\" ] && stop; exit 129' "
    "HUP INT TERM; if command -v setsid >/dev/null 2>&1; then "
    "setsid \"$@\" & else \"$@\" & fi; p=$!; wait $p; rc=$?; "
    "trap \"\" HUP INT TERM; stop; exit $rc";

/*
 * A process on another host:
 * ssh -tt HOST 'cd DIR && exec env K=V... sh -c SUPERVISOR dtrain-remote CMD'.
 * The remote side runs on a pseudo-terminal, so when the launcher kills ssh
 * the connection drops and the remote process gets SIGHUP.
 */
static dt_err
plan_ssh(struct proc *p, const struct ctx *c, const struct host *h,
         const char *role, const char *id_var, long id, char **cmd, size_t ncmd)
{
	struct sbuf b = {0};
	dt_err err;

	p->strip_cr = 1;
	if ((err = role_env(p, c, role, id_var, id, 1)))
		return err;
	if (c->remote_secret_file &&
	    (err = strv_addf(&p->env, "DTRAIN_SECRET_FILE=%s",
	                     c->remote_secret_file)))
		return err;
	else if (!c->remote_secret_file && c->secret_env &&
	         (err = strv_dup(&p->env, c->secret_env)))
		return err; /* a DTRAIN_SECRET_FILE of the user's */
	sb_add(&b, "cd ");
	sb_addq(&b, c->cwd);
	sb_add(&b, " && exec env");
	for (size_t i = 0; i < p->env.n; i++) {
		sb_add(&b, " ");
		sb_addq(&b, p->env.v[i]);
	}
	sb_add(&b, " sh -c ");
	sb_addq(&b, remote_supervisor);
	sb_add(&b, " dtrain-remote");
	if (cmd) {
		for (size_t i = 0; i < ncmd; i++) {
			sb_add(&b, " ");
			sb_addq(&b, cmd[i]);
		}
	} else {
		sb_add(&b, " ");
		sb_addq(&b, c->exe_name);
		sb_add(&b, " ");
		sb_add(&b, role);
	}
	if ((err = ssh_prefix(&p->argv, c, h)))
		return err;
	return strv_add(&p->argv, sb_take(&b));
}

/* One mpirun for all processes of a role; -x passes every variable. The
 * rank comes from OMPI_COMM_WORLD_RANK, so no DMLC_*_ID is set. */
static dt_err
plan_mpi(struct proc *p, const struct ctx *c, const struct opts *o,
         const char *role, long np, char **cmd, size_t ncmd)
{
	static const char *const opts[] = {"--allow-run-as-root",
	                                   "--oversubscribe", "--tag-output"};
	dt_err err;

	p->tag = TAG_MPI;
	p->tag_role = role;
	p->secret_env = c->secret_env;
	if ((err = role_env(p, c, role, NULL, 0, 1)) ||
	    (err = strv_dup(&p->argv, c->mpirun)))
		return err;
	for (size_t i = 0; i < DT_ARRAY_LEN(opts) && !err; i++)
		err = strv_dup(&p->argv, opts[i]);
	if (!err && !(err = strv_dup(&p->argv, "-np")))
		err = strv_addf(&p->argv, "%ld", np);
	if (!err && o->hostfile && !(err = strv_dup(&p->argv, "-hostfile")))
		err = strv_dup(&p->argv, o->hostfile);
	/* mpirun reaches other hosts through ssh: fail as fast. */
	if (!err && o->hostfile && !(err = strv_dup(&p->argv, "--mca")) &&
	    !(err = strv_dup(&p->argv, "plm_rsh_args")))
		err = strv_addf(&p->argv, "-o %s", c->ssh_timeout);
	for (size_t i = 0; i < p->env.n && !err; i++)
		if (!(err = strv_dup(&p->argv, "-x")))
			err = strv_dup(&p->argv, p->env.v[i]);
	/* The secret by name: mpirun takes its value from its environment,
	 * so it is on no command line. */
	if (!err && c->secret_env && !(err = strv_dup(&p->argv, "-x")))
		err =
		    strv_addf(&p->argv, "%.*s",
		              (int)strcspn(c->secret_env, "="), c->secret_env);
	if (err)
		return err;
	if (cmd)
		return strv_extend(&p->argv, cmd, ncmd);
	if ((err = strv_dup(&p->argv, c->exe_name)))
		return err;
	return strv_dup(&p->argv, role);
}

/* One srun per role; srun passes the environment on (--export=ALL) and
 * --label marks every line with the task's rank (SLURM_PROCID). */
static dt_err
plan_slurm(struct proc *p, const struct ctx *c, const char *role, long np,
           char **cmd, size_t ncmd)
{
	dt_err err;

	p->tag = TAG_SLURM;
	p->tag_role = role;
	p->show_env = 1;
	p->secret_env = c->secret_env; /* srun passes the environment on */
	if ((err = role_env(p, c, role, NULL, 0, 1)) ||
	    (err = strv_dup(&p->argv, c->srun)) ||
	    (err = strv_addf(&p->argv, "--ntasks=%ld", np)) ||
	    (err = strv_dup(&p->argv, "--kill-on-bad-exit=1")) ||
	    /* The servers' and the workers' steps share the allocation's
	     * CPUs: without it the second waits for the first to end. */
	    (err = strv_dup(&p->argv, "--overlap")) ||
	    (err = strv_dup(&p->argv, "--label")))
		return err;
	if (cmd)
		return strv_extend(&p->argv, cmd, ncmd);
	if ((err = strv_dup(&p->argv, c->exe_name)))
		return err;
	return strv_dup(&p->argv, role);
}

/*
 * Build every process of the job. With ssh the servers go on the first S
 * hosts in order and the workers continue the cycle (seed 001: 5 hosts,
 * -n 3 gives servers on h1 h2 h3 and workers on h4 h5 h1).
 */
static dt_err
build_plan(const struct opts *o, const struct hosts *h, const struct ctx *c,
           struct proc **out, size_t *nout)
{
	long S = o->servers, W = o->workers;
	/* (and room for the processes of --restart) */
	size_t n = 0, max = (size_t)(1 + S + W + 2 * o->restart);
	char **cmd = o->cmd;
	size_t ncmd = (size_t)o->ncmd;
	struct proc *p = calloc(max, sizeof(*p));
	dt_err err = DT_OK;

	if (p == NULL)
		return dt__fail(DT_ENOMEM, "out of memory");
	if (!o->no_scheduler) {
		proc_init(&p[n], KIND_SERVICE, "localhost", "scheduler");
		err = plan_local(&p[n++], c, "scheduler", NULL, 0, NULL, 0);
	}
	switch (o->launcher) {
	case L_LOCAL:
		for (long i = 0; i < S && !err; i++) {
			proc_init(&p[n], KIND_SERVICE, "localhost",
			          "server %ld", i);
			err = plan_local(&p[n++], c, "server", "DMLC_SERVER_ID",
			                 i, NULL, 0);
		}
		for (long i = 0; i < W && !err; i++) {
			proc_init(&p[n], KIND_MAIN, "localhost", "worker %ld",
			          i);
			err = plan_local(&p[n++], c, "worker", "DMLC_WORKER_ID",
			                 i, cmd, ncmd);
		}
		break;
	case L_SSH:
		for (long i = 0; i < S && !err; i++) {
			const struct host *hi = &h->h[(size_t)i % h->n];

			proc_init(&p[n], KIND_SERVICE, hi->name, "server %ld",
			          i);
			err = plan_ssh(&p[n++], c, hi, "server",
			               "DMLC_SERVER_ID", i, NULL, 0);
		}
		for (long i = 0; i < W && !err; i++) {
			const struct host *hi = &h->h[(size_t)(S + i) % h->n];

			proc_init(&p[n], KIND_MAIN, hi->name, "worker %ld", i);
			err = plan_ssh(&p[n++], c, hi, "worker",
			               "DMLC_WORKER_ID", i, cmd, ncmd);
		}
		break;
	case L_MPI:
		if (S > 0) {
			proc_init(&p[n], KIND_SERVICE,
			          o->hostfile ? o->hostfile : "localhost",
			          "servers");
			err = plan_mpi(&p[n++], c, o, "server", S, NULL, 0);
		}
		if (!err) {
			proc_init(&p[n], KIND_MAIN,
			          o->hostfile ? o->hostfile : "localhost",
			          "workers");
			err = plan_mpi(&p[n++], c, o, "worker", W, cmd, ncmd);
		}
		break;
	case L_SLURM:
		if (S > 0) {
			proc_init(&p[n], KIND_SERVICE, "slurm", "servers");
			err = plan_slurm(&p[n++], c, "server", S, NULL, 0);
		}
		if (!err) {
			proc_init(&p[n], KIND_MAIN, "slurm", "workers");
			err = plan_slurm(&p[n++], c, "worker", W, cmd, ncmd);
		}
		break;
	}
	if (err) {
		procs_free(p, n);
		return err;
	}
	*out = p;
	*nout = n;
	return DT_OK;
}

/* One ssh per distinct host running remote_cmd (a shell line), with input
 * stdin_data: the secret's file written before the job, removed after. */
static dt_err
build_host_steps(const struct hosts *h, const struct ctx *c, const char *what,
                 const char *remote_cmd, const char *stdin_data,
                 const unsigned char *skip, struct proc **out, size_t *nout)
{
	struct proc *p = calloc(h->n ? h->n : 1, sizeof(*p));
	size_t n = 0;
	dt_err err = DT_OK;

	if (p == NULL)
		return dt__fail(DT_ENOMEM, "out of memory");
	for (size_t i = 0; i < h->n && !err; i++) {
		const char *const opts[] = {"-o", "StrictHostKeyChecking=no",
		                            "-o", "BatchMode=yes",
		                            "-o", c->ssh_timeout};
		size_t k;

		for (k = 0; k < i; k++)
			if (strcmp(h->h[k].name, h->h[i].name) == 0)
				break;
		if (k < i || (skip && skip[i]))
			continue;
		proc_init(&p[n], KIND_MAIN, h->h[i].name, "%s %s", what,
		          h->h[i].name);
		p[n].stdin_data = stdin_data;
		err = strv_dup(&p[n].argv, c->ssh);
		for (size_t j = 0; j < DT_ARRAY_LEN(opts) && !err; j++)
			err = strv_dup(&p[n].argv, opts[j]);
		if (!err && h->h[i].port && !(err = strv_dup(&p[n].argv, "-p")))
			err = strv_dup(&p[n].argv, h->h[i].port);
		if (!err)
			err = strv_dup(&p[n].argv, h->h[i].name);
		if (!err)
			err = strv_dup(&p[n].argv, remote_cmd);
		n++;
	}
	if (err) {
		procs_free(p, n);
		return err;
	}
	*out = p;
	*nout = n;
	return DT_OK;
}

/* rsync the working directory to DIR on every host, once per host. */
static dt_err
build_sync(const struct opts *o, const struct hosts *h, const struct ctx *c,
           struct proc **out, size_t *nout)
{
	struct proc *p = calloc(h->n, sizeof(*p));
	size_t n = 0;
	dt_err err = DT_OK;

	if (p == NULL)
		return dt__fail(DT_ENOMEM, "out of memory");
	for (size_t i = 0; i < h->n && !err; i++) {
		struct sbuf b = {0};
		char *rsh, *rpath;
		size_t k;

		for (k = 0; k < i; k++)
			if (strcmp(h->h[k].name, h->h[i].name) == 0)
				break;
		if (k < i)
			continue; /* already synced */
		proc_init(&p[n], KIND_MAIN, h->h[i].name, "sync %s",
		          h->h[i].name);
		p[n].show_env = 1;
		sb_addq(&b, c->ssh);
		sb_add(&b, " -o StrictHostKeyChecking=no -o BatchMode=yes -o ");
		sb_add(&b, c->ssh_timeout);
		if (h->h[i].port) {
			sb_add(&b, " -p ");
			sb_add(&b, h->h[i].port);
		}
		rsh = sb_take(&b);
		sb_add(&b, "--rsync-path=mkdir -p ");
		sb_addq(&b, o->sync_dir);
		sb_add(&b, " && rsync");
		rpath = sb_take(&b);
		err = strv_dup(&p[n].argv, c->rsync);
		if (!err)
			err = strv_dup(&p[n].argv, "-az");
		/* A repository's history is never needed to run the job. */
		if (!err)
			err = strv_dup(&p[n].argv, "--exclude=.git/");
		for (size_t x = 0; x < o->sync_exclude.n && !err; x++)
			err = strv_addf(&p[n].argv, "--exclude=%s",
			                o->sync_exclude.v[x]);
		if (!err)
			err = strv_dup(&p[n].argv, "-e");
		if (!err) {
			err = strv_add(&p[n].argv, rsh); /* takes rsh */
			rsh = NULL;
		}
		if (!err) {
			err = strv_add(&p[n].argv, rpath);
			rpath = NULL;
		}
		if (!err)
			err = strv_addf(&p[n].argv, "%s/", c->local_cwd);
		if (!err)
			err = strv_addf(&p[n].argv, "%s:%s/", h->h[i].name,
			                o->sync_dir);
		free(rsh);
		free(rpath);
		n++;
	}
	if (err) {
		procs_free(p, n);
		return err;
	}
	*out = p;
	*nout = n;
	return DT_OK;
}

/* One line of the plan: "worker 0 on localhost: env K=V ... CMD". */
static char *
plan_line(const struct proc *p)
{
	struct sbuf b = {0};

	sb_add(&b, p->label);
	sb_add(&b, " on ");
	sb_add(&b, p->host);
	sb_add(&b, ":");
	if (p->show_env && p->env.n > 0) {
		sb_add(&b, " env");
		for (size_t i = 0; i < p->env.n; i++) {
			sb_add(&b, " ");
			sb_addq(&b, p->env.v[i]);
		}
	}
	for (size_t i = 0; i < p->argv.n; i++) {
		sb_add(&b, " ");
		sb_addq(&b, p->argv.v[i]);
	}
	return sb_take(&b);
}

/* ------------------------------------------------------------------ */
/* The scheduler's address and socket.                                 */

static dt_err
resolve4(const char *what, const char *host, struct in_addr *out)
{
	struct addrinfo hints = {0}, *res;
	int rc;

	hints.ai_family = AF_INET;
	hints.ai_socktype = SOCK_STREAM;
	if ((rc = getaddrinfo(host, NULL, &hints, &res)) != 0)
		return dt__fail(DT_ECONFIG, "%s: cannot resolve '%s': %s", what,
		                host, gai_strerror(rc));
	*out = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
	freeaddrinfo(res);
	return DT_OK;
}

/* Whether addr belongs to this machine (it can be bound). */
static int
is_local_addr(struct in_addr addr)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr = addr};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ok;

	if (fd < 0)
		return 0;
	ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

/* The local address the kernel would use to reach dst (no packet sent). */
static dt_err
route_source(struct in_addr dst, struct in_addr *out)
{
	struct sockaddr_in sa = {
	    .sin_family = AF_INET, .sin_addr = dst, .sin_port = htons(9)};
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
		dt_err err = dt__fail(DT_ESYS, "no route to %s: %s",
		                      inet_ntoa(dst), strerror(errno));
		if (fd >= 0)
			close(fd);
		return err;
	}
	close(fd);
	*out = sa.sin_addr;
	return DT_OK;
}

/*
 * The address the scheduler binds and every node connects to. local:
 * 127.0.0.1. Otherwise DMLC_NODE_HOST when set; else the first host of the
 * host file when it is this machine, or this machine's address on the way
 * to it; else (mpi on this machine) 127.0.0.1; slurm uses the address of
 * this machine's name.
 */
static dt_err
scheduler_addr(const struct opts *o, const struct hosts *h, struct in_addr *out)
{
	const char *nh = dt__env_str("DMLC_NODE_HOST");
	char name[256];
	dt_err err;

	out->s_addr = htonl(INADDR_LOOPBACK);
	if (o->launcher == L_LOCAL)
		return DT_OK;
	if (nh)
		return resolve4("DMLC_NODE_HOST", nh, out);
	if (h->n > 0) {
		struct in_addr first = {0};

		if ((err =
		         resolve4("first host of -H", h->h[0].name, &first))) {
			char msg[512];

			snprintf(msg, sizeof(msg), "%s", dt_errmsg());
			return dt__fail(err,
			                "%s; set DMLC_NODE_HOST to the address "
			                "other hosts reach this machine at",
			                msg);
		}
		if (is_local_addr(first)) {
			*out = first;
			return DT_OK;
		}
		return route_source(first, out);
	}
	if (o->launcher == L_SLURM && gethostname(name, sizeof(name)) == 0 &&
	    resolve4("host name", name, out) == DT_OK &&
	    (ntohl(out->s_addr) >> 24) != 127)
		return DT_OK;
	out->s_addr = htonl(INADDR_LOOPBACK);
	if (o->launcher == L_SLURM)
		say("warning: the scheduler listens on 127.0.0.1; set "
		    "DMLC_NODE_HOST to an address the compute nodes reach");
	return DT_OK;
}

static dt_err
listen_on(struct in_addr addr, int *fd_out, int *port_out)
{
	char host[INET_ADDRSTRLEN];

	inet_ntop(AF_INET, &addr, host, sizeof(host));
	return dt__sock_listen(host, 0, "the scheduler's socket", fd_out,
	                       port_out);
}

/* ------------------------------------------------------------------ */
/* Running processes.                                                  */

struct run {
	struct proc *p;
	size_t n;
	int verbose;
	pid_t self;
	int sfd;       /* signalfd: SIGCHLD, SIGINT, SIGTERM, SIGHUP */
	int listen_fd; /* the scheduler's socket until it is handed over */
	int guard_fd;  /* write end of the guard's pipe, -1 without guard */
	pid_t guard_pid;
	sigset_t orig_mask;
	struct sigaction old_pipe, old_chld, old_term;
	struct rlimit orig_nofile;
	int nofile_raised;
	uint64_t deadline; /* --timeout, 0 = none */
	long timeout_s;
	long grace_s;
	/* State of the current supervise() call. */
	int stopping, killed;
	uint64_t kill_at, grace_at;
	/* A failure seen: who to blame is chosen at blame_at, among the
	 * failures seen by then (one exit often brings others, a moment
	 * later or sooner: the scheduler exits when it loses a node). */
	uint64_t blame_at;
	unsigned exits; /* exits noted, for their order */
	/* --restart: how many new processes each role may get, how many it
	 * got (servers, workers), and free slots after p[n] for them. */
	long restart_max;
	long restarts[2];
	size_t spare;
	int rc;
	char reason[256];
};

static int
cmp_pid(const void *a, const void *b)
{
	pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * Signal every process of the given sessions: the group of each session
 * leader, then whatever else /proc shows in the session (mpirun puts its
 * ranks in groups of their own). sids must be sorted.
 */
static void
kill_sessions(const pid_t *sids, size_t n, int sig, pid_t self)
{
	struct dirent *de;
	DIR *d;

	/* A stopped process (SIGSTOP, a debugger) acts on SIGTERM only once
	 * continued: continue it too. */
	for (size_t i = 0; i < n; i++) {
		kill(-sids[i], sig);
		if (sig == SIGTERM)
			kill(-sids[i], SIGCONT);
	}
	if ((d = opendir("/proc")) == NULL)
		return;
	while ((de = readdir(d)) != NULL) {
		char path[64], buf[512], *rp;
		int pid, sid, ppid, pgrp, fd;
		ssize_t m;
		char state;

		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		pid = atoi(de->d_name);
		snprintf(path, sizeof(path), "/proc/%d/stat", pid);
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			continue;
		m = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (m <= 0)
			continue;
		buf[m] = '\0';
		/* "pid (comm) state ppid pgrp session ...": comm may hold
		 * anything, so parse from the last ')'. */
		if ((rp = strrchr(buf, ')')) == NULL ||
		    sscanf(rp + 1, " %c %d %d %d", &state, &ppid, &pgrp,
		           &sid) != 4)
			continue;
		if (pid != self &&
		    bsearch(&(pid_t){sid}, sids, n, sizeof(pid_t), cmp_pid)) {
			kill(pid, sig);
			if (sig == SIGTERM)
				kill(pid, SIGCONT);
		}
	}
	closedir(d);
}

static void
kill_all(struct run *r, int sig)
{
	pid_t *sids = calloc(r->n ? r->n : 1, sizeof(pid_t));
	size_t n = 0;

	for (size_t i = 0; i < r->n; i++)
		if (r->p[i].pid > 0) {
			if (sids)
				sids[n++] = r->p[i].pid;
			else
				kill(-r->p[i].pid, sig);
		}
	if (sids) {
		qsort(sids, n, sizeof(pid_t), cmp_pid);
		kill_sessions(sids, n, sig, r->self);
	}
	free(sids);
}

/*
 * The guard: a process forked before any child, in its own process group,
 * holding the read end of a pipe only the launcher can write. The launcher
 * sends it the session id of every child it starts, and 0 when it has
 * cleaned up itself. If the pipe reaches end of file first, the launcher
 * died without cleaning up (SIGKILL): the guard kills every session.
 */
static void
guard_main(int rfd, int sfd)
{
	pid_t *sids = NULL;
	size_t n = 0, cap = 0;
	int fd;

	setpgid(0, 0);
	close(sfd);
	if ((fd = open("/dev/null", O_RDWR)) >= 0) {
		dup2(fd, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		if (fd > 2)
			close(fd);
	}
	for (;;) {
		int32_t v;
		ssize_t m = read(rfd, &v, sizeof(v));

		if (m < 0 && errno == EINTR)
			continue;
		if (m != (ssize_t)sizeof(v))
			break;
		if (v == 0)
			_exit(0);
		if (n == cap) {
			pid_t *q = realloc(sids, (cap = cap ? 2 * cap : 64) *
			                             sizeof(pid_t));
			if (q == NULL)
				continue;
			sids = q;
		}
		sids[n++] = v;
	}
	if (n > 0) {
		qsort(sids, n, sizeof(pid_t), cmp_pid);
		kill_sessions(sids, n, SIGKILL, getpid());
		/* Once more for processes forked during the first pass. */
		kill_sessions(sids, n, SIGKILL, getpid());
	}
	_exit(0);
}

static void
guard_start(struct run *r)
{
	int fds[2];
	pid_t pid;

	r->guard_fd = -1;
	if (pipe2(fds, O_CLOEXEC) < 0)
		return;
	if ((pid = fork()) == 0) {
		close(fds[1]);
		guard_main(fds[0], r->sfd);
	}
	close(fds[0]);
	if (pid < 0) {
		close(fds[1]);
		if (r->verbose)
			say("warning: no guard process: %s", strerror(errno));
		return;
	}
	r->guard_fd = fds[1];
	r->guard_pid = pid;
}

static void
guard_send(struct run *r, pid_t pid)
{
	int32_t v = (int32_t)pid;

	/* If the guard is gone, children still die by PDEATHSIG. */
	if (r->guard_fd >= 0 && write(r->guard_fd, &v, sizeof(v)) < 0)
		return;
}

static void
guard_stop(struct run *r)
{
	if (r->guard_fd < 0)
		return;
	guard_send(r, 0);
	close(r->guard_fd);
	r->guard_fd = -1;
	while (waitpid(r->guard_pid, NULL, 0) < 0 && errno == EINTR)
		;
}

/* The environment of a child: ours without the launcher's own variables
 * and the ones it adds, then the additions. Pointers are borrowed. */
static char **
build_envp(const struct strv *add, const char *extra)
{
	size_t n = 0, k = 0;
	char **envp;

	while (environ[n])
		n++;
	if ((envp = calloc(n + add->n + 2, sizeof(*envp))) == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		const char *e = environ[i];
		size_t len = strcspn(e, "=");
		int skip = is_reserved(e, len);

		for (size_t j = 0; j < add->n && !skip; j++)
			skip = strncmp(add->v[j], e, len) == 0 &&
			       add->v[j][len] == '=';
		if (!skip)
			envp[k++] = environ[i];
	}
	for (size_t j = 0; j < add->n; j++)
		envp[k++] = add->v[j];
	if (extra)
		envp[k++] = (char *)extra;
	envp[k] = NULL;
	return envp;
}

/* In the child: become a session leader, die with the launcher, wire the
 * pipes, undo the launcher's signal settings, exec. Never returns. */
static void
child_exec(const struct run *r, const struct proc *p, char **envp, int ifd,
           int ofd, int efd)
{
	const char *prog = p->argv.v[0];
	char msg[512];
	int fd, e;

	setsid();
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != r->self)
		_exit(1); /* the launcher died before prctl */
	if (ifd >= 0)
		dup2(ifd, 0);
	else if ((fd = open("/dev/null", O_RDONLY)) >= 0 && fd != 0) {
		dup2(fd, 0);
		close(fd);
	}
	dup2(ofd, 1);
	dup2(efd, 2);
	if (p->is_scheduler && r->listen_fd >= 0)
		fcntl(r->listen_fd, F_SETFD, 0);
	sigaction(SIGPIPE, &r->old_pipe, NULL);
	sigaction(SIGCHLD, &r->old_chld, NULL);
	sigaction(SIGTERM, &r->old_term, NULL);
	/* (A limit the launcher raised for the job stays raised: the
	 * scheduler of a big job needs a descriptor per node.) */
	sigprocmask(SIG_SETMASK, &r->orig_mask, NULL);
	if (p->exec_path)
		execve(p->exec_path, p->argv.v, envp);
	else
		execvpe(prog, p->argv.v, envp);
	e = errno;
	snprintf(msg, sizeof(msg), "dtrain launch: cannot run '%s': %s\n", prog,
	         strerror(e));
	if (write(2, msg, strlen(msg)) < 0)
		_exit(127);
	_exit(e == ENOENT || e == ENOTDIR ? 127 : 126);
}

static dt_err
spawn(struct run *r, struct proc *p)
{
	int po[2] = {-1, -1}, pe[2] = {-1, -1}, pi[2] = {-1, -1};
	char **envp = build_envp(&p->env, p->secret_env);
	dt_err err = DT_OK;
	pid_t pid;

	if (envp == NULL)
		return dt__fail(DT_ENOMEM, "starting %s: out of memory",
		                p->label);
	if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0 ||
	    (p->stdin_data && pipe2(pi, O_CLOEXEC) < 0)) {
		err = dt__fail(DT_ESYS, "starting %s: pipe: %s", p->label,
		               strerror(errno));
		goto out;
	}
	/* Signals stay blocked across fork: the child restores the mask
	 * just before exec, so no handler runs in between. */
	if ((pid = fork()) < 0) {
		err = dt__fail(DT_ESYS, "starting %s: fork: %s", p->label,
		               strerror(errno));
		goto out;
	}
	if (pid == 0)
		child_exec(r, p, envp, pi[0], po[1], pe[1]);
	p->pid = pid;
	if (p->stdin_data) {
		/* Small (< PIPE_BUF): the pipe takes it at once. */
		size_t len = strlen(p->stdin_data);

		if (write(pi[1], p->stdin_data, len) != (ssize_t)len)
			say("%s: cannot write its input: %s", p->label,
			    strerror(errno));
	}
	guard_send(r, pid);
	p->out[0].fd = po[0];
	p->out[1].fd = pe[0];
	po[0] = pe[0] = -1;
	for (int k = 0; k < 2; k++)
		fcntl(p->out[k].fd, F_SETFL,
		      fcntl(p->out[k].fd, F_GETFL) | O_NONBLOCK);
	if (r->verbose)
		say("started %s (pid %d)", p->label, (int)pid);
out:
	for (int k = 0; k < 2; k++) {
		if (po[k] >= 0)
			close(po[k]);
		if (pe[k] >= 0)
			close(pe[k]);
		if (pi[k] >= 0)
			close(pi[k]);
	}
	free(envp);
	return err;
}

/* ------------------------------------------------------------------ */
/* Output: whole lines, prefixed with "[role rank] ".                  */

/* "[1,3]<stdout>:" from mpirun --tag-output: returns its length and the
 * rank, or 0. */
static size_t
mpi_tag(const char *s, size_t n, long *rank)
{
	size_t i = 1, r0;

	if (n < 1 || s[0] != '[')
		return 0;
	while (i < n && isdigit((unsigned char)s[i]))
		i++;
	if (i >= n || s[i++] != ',')
		return 0;
	for (r0 = i; i < n && isdigit((unsigned char)s[i]); i++)
		;
	if (i == r0 || i >= n || s[i] != ']' || i - r0 > 9)
		return 0;
	*rank = strtol(s + r0, NULL, 10);
	if (++i >= n || s[i] != '<')
		return 0;
	for (i++; i < n && isalpha((unsigned char)s[i]); i++)
		;
	if (i + 1 >= n || s[i] != '>' || s[i + 1] != ':')
		return 0;
	return i + 2;
}

/* " 3: " from srun --label. */
static size_t
slurm_tag(const char *s, size_t n, long *rank)
{
	size_t i = 0, r0;

	while (i < n && s[i] == ' ')
		i++;
	for (r0 = i; i < n && isdigit((unsigned char)s[i]); i++)
		;
	if (i == r0 || i - r0 > 9 || i + 1 >= n || s[i] != ':' ||
	    s[i + 1] != ' ')
		return 0;
	*rank = strtol(s + r0, NULL, 10);
	return i + 2;
}

static void
emit_line(const struct proc *p, int dst, const char *s, size_t n)
{
	static char buf[LINE_CAP + 128];
	char label[96];
	size_t t = 0, len;
	long rank = 0;

	if (p->strip_cr && n > 0 && s[n - 1] == '\r')
		n--;
	if (p->tag == TAG_MPI)
		t = mpi_tag(s, n, &rank);
	else if (p->tag == TAG_SLURM)
		t = slurm_tag(s, n, &rank);
	if (t > 0)
		snprintf(label, sizeof(label), "%s %ld", p->tag_role, rank);
	else
		snprintf(label, sizeof(label), "%s", p->label);
	s += t;
	n -= t;
	len = (size_t)snprintf(buf, sizeof(buf), "[%s] ", label);
	memcpy(buf + len, s, n);
	len += n;
	buf[len++] = '\n';
	write_all(dst, buf, len);
}

/* Split data into lines; keep an unfinished line for later. */
static void
stream_feed(const struct proc *p, struct stream *st, const char *data, size_t n)
{
	while (n > 0) {
		const char *nl = memchr(data, '\n', n);
		size_t seg = nl ? (size_t)(nl - data) : n;
		size_t room = LINE_CAP - st->len;

		if (seg > room) { /* too long: split it */
			seg = room;
			nl = NULL;
		}
		if (nl && st->len == 0) {
			emit_line(p, st->dst, data, seg);
		} else {
			if (st->len + seg > st->cap) {
				size_t cap = st->cap ? st->cap : 256;
				char *b;

				while (cap < st->len + seg)
					cap *= 2;
				if ((b = realloc(st->buf, cap)) == NULL) {
					/* No memory: pass the piece on. */
					emit_line(p, st->dst, data, seg);
					data += seg + (nl != NULL);
					n -= seg + (nl != NULL);
					continue;
				}
				st->buf = b;
				st->cap = cap;
			}
			memcpy(st->buf + st->len, data, seg);
			st->len += seg;
			if (nl || st->len == LINE_CAP) {
				emit_line(p, st->dst, st->buf, st->len);
				st->len = 0;
			}
		}
		data += seg + (nl != NULL);
		n -= seg + (nl != NULL);
	}
}

static void
stream_close(const struct proc *p, struct stream *st)
{
	if (st->len > 0) /* a last line without '\n' */
		emit_line(p, st->dst, st->buf, st->len);
	st->len = 0;
	if (st->fd >= 0)
		close(st->fd);
	st->fd = -1;
}

/* Read what the pipe holds now; returns 0 when it is empty or closed. */
static int
stream_read(const struct proc *p, struct stream *st)
{
	static char buf[65536];
	ssize_t m = read(st->fd, buf, sizeof(buf));

	if (m > 0) {
		stream_feed(p, st, buf, (size_t)m);
		return 1;
	}
	if (m == 0 || (errno != EAGAIN && errno != EINTR))
		stream_close(p, st);
	return 0;
}

/* ------------------------------------------------------------------ */
/* Supervision.                                                        */

static void
describe(const struct proc *p, char *buf, size_t len)
{
	if (p->code == CLD_EXITED)
		snprintf(buf, len, "exited with status %d", p->status);
	else
		snprintf(buf, len, "killed by signal %d (%s)%s", p->status,
		         strsignal(p->status),
		         p->code == CLD_DUMPED ? ", core dumped" : "");
}

static int
all_exited(const struct run *r, int main_only)
{
	for (size_t i = 0; i < r->n; i++)
		if (r->p[i].pid > 0 && !r->p[i].exited &&
		    (!main_only || r->p[i].kind == KIND_MAIN))
			return 0;
	return 1; /* never-started processes (a failed spawn) count too */
}

static int
streams_closed(const struct run *r)
{
	for (size_t i = 0; i < r->n; i++)
		if (r->p[i].out[0].fd >= 0 || r->p[i].out[1].fd >= 0)
			return 0;
	return 1;
}

/* Begin stopping the job: SIGTERM now, SIGKILL TERM_WAIT_S later. The
 * first reason (and exit status) wins. */
static void
stop_job(struct run *r, int rc)
{
	if (r->stopping)
		return;
	r->stopping = 1;
	r->rc = rc;
	r->kill_at = dt__now_ns() + TERM_WAIT_S * NS_PER_S;
	kill_all(r, SIGTERM);
}

/* Which of the exits seen at once to report first (lower first): the
 * first failure is the one named, and of exits that arrive together the
 * cause is likelier a process killed by a signal than one that exited 1,
 * a worker than a server, a server than the scheduler (which exits when it
 * loses any node). */
static int
blame_order(const struct proc *p)
{
	if (p->code == CLD_EXITED && p->status == 0)
		return 100;
	if (p->code != CLD_EXITED)
		return 0;
	return 10 + (p->is_scheduler ? 2 : p->kind == KIND_SERVICE ? 1 : 0);
}

#define BLAME_WAIT_NS (300 * NS_PER_MS)
/* A server or the scheduler that fails first has most often lost a node
 * whose own exit is on its way (slowed by whatever runs at its exit: a
 * leak checker, a core dump): wait longer for it. */
#define BLAME_WAIT_SERVICE_NS (1500 * NS_PER_MS)

/* Name the failure to blame (the lowest blame_order, the first seen among
 * equals) and stop the job. */
static void
blame(struct run *r)
{
	struct proc *best = NULL;
	char how[128];

	r->blame_at = 0;
	for (size_t i = 0; i < r->n; i++) {
		struct proc *p = &r->p[i];

		if (p->failed &&
		    (best == NULL || blame_order(p) < blame_order(best) ||
		     (blame_order(p) == blame_order(best) &&
		      p->exit_seq < best->exit_seq)))
			best = p;
	}
	if (best == NULL || r->stopping)
		return;
	describe(best, how, sizeof(how));
	say("%s (pid %d) %s; stopping the job", best->label, (int)best->pid,
	    how);
	snprintf(r->reason, sizeof(r->reason), "%s %s", best->label, how);
	stop_job(r, RC_FAIL);
}

/* --restart: whether a new process may take p's place (a single server
 * of the local or ssh launcher, with restarts left). A worker is not
 * restarted yet: its place in the data and in the rounds is not kept. */
static int
restartable(const struct run *r, const struct proc *p)
{
	if (r->restart_max == 0 || r->spare == 0 || p->tag != TAG_NONE ||
	    strncmp(p->label, "server ", 7) != 0)
		return 0;
	return r->restarts[0] < r->restart_max;
}

/* Start the new processes note_exit asked for, in the spare slots. */
static void
restart_procs(struct run *r)
{
	size_t n = r->n;

	for (size_t i = 0; i < n && !r->stopping; i++) {
		struct proc *old = &r->p[i], *p;
		dt_err err = DT_OK;

		if (!old->restart_wanted || r->spare == 0)
			continue;
		old->restart_wanted = 0;
		old->replaced = 1;
		p = &r->p[r->n];
		proc_init(p, old->kind, old->host, "%s", old->label);
		p->tag_role = old->tag_role;
		p->tag = old->tag;
		p->strip_cr = old->strip_cr;
		p->show_env = old->show_env;
		p->exec_path = old->exec_path;
		p->secret_env = old->secret_env;
		p->stdin_data = old->stdin_data;
		for (size_t k = 0; k < old->argv.n && !err; k++)
			err = strv_dup(&p->argv, old->argv.v[k]);
		for (size_t k = 0; k < old->env.n && !err; k++)
			err = strv_dup(&p->env, old->env.v[k]);
		r->n++;
		r->spare--;
		if (err || spawn(r, p) != DT_OK) {
			say("%s: %s; stopping the job", p->label, dt_errmsg());
			snprintf(r->reason, sizeof(r->reason),
			         "%s could not be started again", p->label);
			stop_job(r, RC_FAIL);
		}
	}
}

static void
note_exit(struct run *r, struct proc *p)
{
	char how[128];

	describe(p, how, sizeof(how));
	p->exit_seq = r->exits++;
	if (r->stopping) {
		if (r->verbose)
			say("%s (pid %d) %s", p->label, (int)p->pid, how);
		return;
	}
	if ((p->code != CLD_EXITED || p->status != 0) && restartable(r, p)) {
		int role = strncmp(p->label, "worker ", 7) == 0;

		r->restarts[role]++;
		p->restart_wanted = 1;
		say("%s (pid %d) %s; starting a new one in its place (%ld of "
		    "%ld)",
		    p->label, (int)p->pid, how, r->restarts[role],
		    r->restart_max);
		return;
	}
	if (p->code != CLD_EXITED || p->status != 0) {
		p->failed = 1;
		if (r->verbose)
			say("%s (pid %d) %s", p->label, (int)p->pid, how);
		/* A process killed by a signal is the likeliest cause: at
		 * once. Otherwise wait a moment for the exit that caused
		 * this one. */
		if (blame_order(p) == 0) {
			blame(r);
		} else {
			/* (a worker's failure after a service's: what the
			 * longer wait was for has come) */
			uint64_t at =
			    dt__now_ns() + (p->kind == KIND_SERVICE
			                        ? BLAME_WAIT_SERVICE_NS
			                        : BLAME_WAIT_NS);

			if (r->blame_at == 0 || at < r->blame_at)
				r->blame_at = at;
		}
		return;
	}
	if (r->verbose)
		say("%s (pid %d) %s", p->label, (int)p->pid, how);
	if (p->kind == KIND_MAIN && all_exited(r, 1) && !all_exited(r, 0) &&
	    r->grace_at == 0)
		r->grace_at =
		    dt__now_ns() + (uint64_t)r->grace_s * NS_PER_S + 1;
}

/* Look for exits without reaping (WNOWAIT): a zombie keeps its pid, so
 * its process group and session id stay ours until the end. */
static void
check_exits(struct run *r)
{
	size_t fresh[64], nfresh = 0;

	for (size_t i = 0; i < r->n; i++) {
		struct proc *p = &r->p[i];
		siginfo_t si;

		if (p->pid <= 0 || p->exited)
			continue;
		memset(&si, 0, sizeof(si));
		if (waitid(P_PID, (id_t)p->pid, &si,
		           WEXITED | WNOHANG | WNOWAIT) < 0 ||
		    si.si_pid != p->pid)
			continue;
		p->exited = 1;
		p->code = si.si_code;
		p->status = si.si_status;
		/* Its last words (already in the pipes) come before the
		 * launcher's message about its exit. The bound keeps a
		 * chatty grandchild from holding up the loop. */
		for (int k = 0; k < 2; k++)
			for (int t = 0; t < 64 && p->out[k].fd >= 0; t++)
				if (!stream_read(p, &p->out[k]))
					break;
		if (nfresh == DT_ARRAY_LEN(fresh))
			note_exit(r, p);
		else
			fresh[nfresh++] = i;
	}
	/* Report in blame order (stable: plan order among equals). */
	for (size_t a = 1; a < nfresh; a++)
		for (size_t b = a;
		     b > 0 && blame_order(&r->p[fresh[b]]) <
		                  blame_order(&r->p[fresh[b - 1]]);
		     b--) {
			size_t t = fresh[b];

			fresh[b] = fresh[b - 1];
			fresh[b - 1] = t;
		}
	for (size_t a = 0; a < nfresh; a++)
		note_exit(r, &r->p[fresh[a]]);
}

/* Names of the processes still running, for messages. */
static void
running_list(const struct run *r, char *buf, size_t len)
{
	size_t k = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < r->n && k + 1 < len; i++) {
		const struct proc *p = &r->p[i];
		int m;

		if (p->pid <= 0 || p->exited)
			continue;
		m = snprintf(buf + k, len - k, "%s%s (pid %d)", k ? ", " : "",
		             p->label, (int)p->pid);
		if (m < 0 || (size_t)m >= len - k) {
			snprintf(buf + (len > 5 ? len - 5 : 0), 5, "...");
			break;
		}
		k += (size_t)m;
	}
}

static void
on_signal(struct run *r, int sig)
{
	const char *name = sig == SIGINT    ? "SIGINT"
	                   : sig == SIGTERM ? "SIGTERM"
	                                    : "SIGHUP";

	if (r->stopping) {
		if (!r->killed) {
			say("got %s again; killing the job now", name);
			kill_all(r, SIGKILL);
			r->killed = 1;
		}
		return;
	}
	say("got %s; stopping the job", name);
	snprintf(r->reason, sizeof(r->reason), "stopped by %s", name);
	stop_job(r, 128 + sig);
}

static void
on_timers(struct run *r, uint64_t now)
{
	char list[512];

	if (!r->stopping && r->blame_at && now >= r->blame_at)
		blame(r);
	if (!r->stopping && r->deadline && now >= r->deadline) {
		say("the job did not finish within --timeout %ld s; stopping "
		    "it",
		    r->timeout_s);
		snprintf(r->reason, sizeof(r->reason), "timed out after %ld s",
		         r->timeout_s);
		stop_job(r, RC_TIMEOUT);
	}
	if (!r->stopping && r->grace_at && now >= r->grace_at &&
	    !all_exited(r, 0)) {
		running_list(r, list, sizeof(list));
		say("all workers finished, but %s did not exit within %ld s "
		    "(--grace); stopping the job",
		    list, r->grace_s);
		snprintf(r->reason, sizeof(r->reason),
		         "servers or scheduler did not finish");
		stop_job(r, RC_FAIL);
	}
	if (r->stopping && !r->killed && now >= r->kill_at) {
		if (!all_exited(r, 0)) {
			running_list(r, list, sizeof(list));
			say("%s still running %d s after SIGTERM; killing",
			    list, TERM_WAIT_S);
		}
		kill_all(r, SIGKILL);
		r->killed = 1;
	}
}

static uint64_t
min_deadline(uint64_t a, uint64_t b)
{
	return a == 0 ? b : b == 0 ? a : DT_MIN(a, b);
}

/*
 * Supervise r->p until every process has exited and its output is read;
 * then kill what is left of their sessions and reap them. Returns the exit
 * status of the launcher for this set of processes.
 */
static int
supervise(struct run *r)
{
	size_t cap = 1 + 2 * (r->n + r->spare);
	struct pollfd *pfd = calloc(cap, sizeof(*pfd));
	struct stream **pst = calloc(cap, sizeof(*pst));
	struct proc **pp = calloc(cap, sizeof(*pp));
	uint64_t drain_at = 0;
	int drain_killed = 0;

	if (!pfd || !pst || !pp) {
		say("out of memory; stopping the job");
		stop_job(r, RC_FAIL);
		kill_all(r, SIGKILL);
		r->killed = 1;
	}
	check_exits(r);
	while (pfd && pst && pp) {
		uint64_t now = dt__now_ns(), next = 0;
		size_t nfd = 0;
		int timeout = -1, n;

		on_timers(r, now);
		if (!r->stopping && r->blame_at && all_exited(r, 0))
			blame(r); /* no exit left to wait for */
		if (all_exited(r, 0)) {
			if (streams_closed(r))
				break;
			/* Something outside the process (a daemon it left)
			 * still holds its pipe: give it a moment, kill the
			 * sessions, then give up on the output. */
			if (drain_at == 0) {
				drain_at = now + DRAIN_MS * NS_PER_MS;
			} else if (now >= drain_at) {
				if (drain_killed) {
					say("output pipes still open after all "
					    "processes exited; not waiting");
					break;
				}
				kill_all(r, SIGKILL);
				drain_killed = 1;
				drain_at = now + DRAIN_MS * NS_PER_MS;
			}
		}
		if (!r->stopping)
			next =
			    min_deadline(min_deadline(r->deadline, r->grace_at),
			                 r->blame_at);
		else if (!r->killed)
			next = r->kill_at;
		next = min_deadline(next, drain_at);
		if (next)
			timeout =
			    next <= now
			        ? 0
			        : (int)DT_MIN((next - now + NS_PER_MS - 1) /
			                          NS_PER_MS,
			                      (uint64_t)INT_MAX);
		pfd[nfd++] = (struct pollfd){.fd = r->sfd, .events = POLLIN};
		for (size_t i = 0; i < r->n; i++)
			for (int k = 0; k < 2; k++)
				if (r->p[i].out[k].fd >= 0) {
					pst[nfd] = &r->p[i].out[k];
					pp[nfd] = &r->p[i];
					pfd[nfd++] = (struct pollfd){
					    .fd = r->p[i].out[k].fd,
					    .events = POLLIN};
				}
		n = poll(pfd, nfd, timeout);
		if (n < 0 && errno != EINTR) {
			say("poll: %s; stopping the job", strerror(errno));
			stop_job(r, RC_FAIL);
			kill_all(r, SIGKILL);
			r->killed = 1;
			break;
		}
		for (size_t i = 1; n > 0 && i < nfd; i++)
			if (pfd[i].revents)
				stream_read(pp[i], pst[i]);
		if (n > 0 && pfd[0].revents) {
			struct signalfd_siginfo si;
			int chld = 0;

			while (read(r->sfd, &si, sizeof(si)) ==
			       (ssize_t)sizeof(si)) {
				if (si.ssi_signo == SIGCHLD)
					chld = 1;
				else
					on_signal(r, (int)si.ssi_signo);
			}
			if (chld) {
				check_exits(r);
				restart_procs(r);
			}
		}
	}
	free(pfd);
	free(pst);
	free(pp);
	/* Whatever the processes left behind in their sessions goes too;
	 * then reap them, which frees their ids. */
	kill_all(r, SIGKILL);
	for (size_t i = 0; i < r->n; i++) {
		struct proc *p = &r->p[i];

		for (int k = 0; k < 2; k++)
			stream_close(p, &p->out[k]);
		if (p->pid > 0)
			while (waitpid(p->pid, NULL, 0) < 0 && errno == EINTR)
				;
	}
	if (!r->stopping)
		r->rc = 0;
	return r->rc;
}

/* ------------------------------------------------------------------ */
/* Entry point.                                                        */

static const char *
prog(const char *var, const char *def)
{
	const char *v = dt__env_str(var);

	return v ? v : def;
}

/* Variables passed on to processes on other hosts (ssh, mpi, slurm), in
 * addition to the launcher's own and --env. */
static int
forwarded(const char *e)
{
	static const char *const prefixes[] = {"PS_", "MXNET_", "DT_"};
	static const char *const names[] = {"DMLC_INTERFACE", "OMP_NUM_THREADS",
	                                    "DTRAIN_AUTH", "DTRAIN_ENCRYPT"};
	size_t len = strcspn(e, "=");

	if (is_reserved(e, len))
		return 0;
	for (size_t i = 0; i < DT_ARRAY_LEN(prefixes); i++)
		if (strncmp(e, prefixes[i], strlen(prefixes[i])) == 0)
			return 1;
	for (size_t i = 0; i < DT_ARRAY_LEN(names); i++)
		if (strlen(names[i]) == len && strncmp(e, names[i], len) == 0)
			return 1;
	return 0;
}

static dt_err
build_ctx(const struct opts *o, struct ctx *c)
{
	dt_err err;

	if ((err = strv_addf(&c->common, "DMLC_PS_ROOT_URI=%s", c->uri)) ||
	    (err = strv_addf(&c->common, "DMLC_PS_ROOT_PORT=%s", c->port)) ||
	    (err = strv_addf(&c->common, "DMLC_NUM_SERVER=%ld", o->servers)) ||
	    (err = strv_addf(&c->common, "DMLC_NUM_WORKER=%ld", o->workers)) ||
	    (err = strv_dup(&c->common, "DTRAIN_LAUNCHED=1")) ||
	    (err = strv_extend(&c->common, o->env.v, o->env.n)))
		return err;
	for (size_t i = 0; environ[i]; i++) {
		const char *e = environ[i];
		size_t len = strcspn(e, "=");
		int dup = 0;

		for (size_t j = 0; j < o->env.n && !dup; j++)
			dup = strncmp(o->env.v[j], e, len) == 0 &&
			      o->env.v[j][len] == '=';
		if (!dup && forwarded(e) && (err = strv_dup(&c->forward, e)))
			return err;
	}
	return DT_OK;
}

/*
 * The job's id and secret (docs/security.md). The launcher's own
 * DTRAIN_SECRET or DTRAIN_SECRET_FILE is passed on as it is; otherwise a
 * fresh random secret is made for this job. DTRAIN_AUTH=none passes none.
 */
static dt_err
prepare_auth(const struct opts *o, struct ctx *c)
{
	const char *id = dt__env_str("DTRAIN_JOB_ID");
	const char *mode = dt__env_str("DTRAIN_AUTH");
	const char *secret = dt__env_str("DTRAIN_SECRET");
	const char *file = dt__env_str("DTRAIN_SECRET_FILE");
	dt_err err;

	if (sodium_init() < 0)
		return dt__fail(DT_ESYS, "libsodium cannot start");
	if (id) {
		if (strlen(id) >= sizeof(c->job_id) ||
		    strspn(id, "abcdefghijklmnopqrstuvwxyz"
		               "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") !=
		        strlen(id))
			return dt__fail(DT_ECONFIG,
			                "DTRAIN_JOB_ID must be at most %zu "
			                "letters, digits, '-', '_' or '.'",
			                sizeof(c->job_id) - 1);
		snprintf(c->job_id, sizeof(c->job_id), "%s", id);
	} else {
		uint8_t raw[16];

		randombytes_buf(raw, sizeof(raw));
		sodium_bin2hex(c->job_id, sizeof(c->job_id), raw, sizeof(raw));
	}
	if ((err = strv_addf(&c->common, "DTRAIN_JOB_ID=%s", c->job_id)))
		return err;
	if (mode && strcmp(mode, "none") == 0)
		return DT_OK;
	if (secret && file)
		return dt__fail(DT_ECONFIG, "both DTRAIN_SECRET and "
		                            "DTRAIN_SECRET_FILE are set; "
		                            "keep one");
	if (file) {
		if (asprintf(&c->secret_env, "DTRAIN_SECRET_FILE=%s", file) < 0)
			c->secret_env = NULL;
		return c->secret_env ? DT_OK : DT_ENOMEM;
	}
	if (secret) {
		c->secret_line = sodium_malloc(strlen(secret) + 2);
		if (c->secret_line)
			snprintf(c->secret_line, strlen(secret) + 2, "%s\n",
			         secret);
	} else {
		uint8_t raw[32];

		c->secret_line = sodium_malloc(2 * sizeof(raw) + 2);
		if (c->secret_line) {
			randombytes_buf(raw, sizeof(raw));
			sodium_bin2hex(c->secret_line, 2 * sizeof(raw) + 1, raw,
			               sizeof(raw));
			strcat(c->secret_line, "\n");
			sodium_memzero(raw, sizeof(raw));
		}
	}
	if (c->secret_line == NULL)
		return dt__fail(DT_ENOMEM, "out of memory");
	size_t len = strlen(c->secret_line); /* with its newline */
	c->secret_env = sodium_malloc(len + 14);
	if (c->secret_env == NULL)
		return dt__fail(DT_ENOMEM, "out of memory");
	snprintf(c->secret_env, len + 14, "DTRAIN_SECRET=%.*s", (int)len - 1,
	         c->secret_line);
	if (o->launcher == L_SSH &&
	    asprintf(&c->remote_secret_file, "%s%s.dtrain-%s.secret",
	             c->cwd[0] == '/' ? c->cwd : "",
	             c->cwd[0] == '/' ? "/" : "", c->job_id) < 0) {
		c->remote_secret_file = NULL;
		return dt__fail(DT_ENOMEM, "out of memory");
	}
	return DT_OK;
}

static void
ctx_free(struct ctx *c)
{
	strv_free(&c->common);
	strv_free(&c->forward);
	if (c->secret_line)
		sodium_free(c->secret_line); /* zeroes it */
	if (c->secret_env && strncmp(c->secret_env, "DTRAIN_SECRET=", 14) == 0)
		sodium_free(c->secret_env);
	else
		free(c->secret_env);
	free(c->remote_secret_file);
	free(c->unreached);
	c->secret_line = c->secret_env = c->remote_secret_file = NULL;
	c->unreached = NULL;
}

static int
dry_run(struct proc *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char *line = plan_line(&p[i]);

		printf("%s\n", line ? line : "(out of memory)");
		free(line);
	}
	fflush(stdout);
	return 0;
}

/* Make sure 0, 1 and 2 are open, so no socket or pipe of ours lands on
 * them and is then overwritten in a child. */
static void
open_std_fds(void)
{
	for (int fd = 0; fd < 3; fd++)
		if (fcntl(fd, F_GETFD) < 0 && errno == EBADF &&
		    open("/dev/null", O_RDWR) < 0)
			break;
}

/* Make room for two pipes per process. */
static void
raise_nofile(struct run *r, size_t nprocs)
{
	rlim_t need = (rlim_t)(2 * nprocs + 64);
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &r->orig_nofile) < 0 ||
	    r->orig_nofile.rlim_cur >= need)
		return;
	rl = r->orig_nofile;
	rl.rlim_cur =
	    rl.rlim_max == RLIM_INFINITY ? need : DT_MIN(need, rl.rlim_max);
	if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
		r->nofile_raised = 1;
}

static int
run_procs(struct run *r, struct proc *p, size_t n)
{
	r->p = p;
	r->n = n;
	r->stopping = r->killed = 0;
	r->kill_at = r->grace_at = r->blame_at = 0;
	r->rc = -1;
	r->reason[0] = '\0';
	for (size_t i = 0; i < n && !r->stopping; i++) {
		if (r->verbose) {
			char *line = plan_line(&p[i]);

			say("plan: %s", line ? line : p[i].label);
			free(line);
		}
		if (spawn(r, &p[i]) != DT_OK) {
			say("%s; stopping the job", dt_errmsg());
			snprintf(r->reason, sizeof(r->reason), "%s",
			         dt_errmsg());
			stop_job(r, RC_FAIL);
		}
		if (p[i].is_scheduler && r->listen_fd >= 0) {
			/* Now only the scheduler holds it: if it dies,
			 * connecting nodes are refused, not left hanging. */
			close(r->listen_fd);
			r->listen_fd = -1;
		}
	}
	return supervise(r);
}

/* The ssh launcher's secret file on every host: written before the job
 * (mode 0600, from ssh's input: on no command line), removed after. */
static int
remote_secret(const struct hosts *h, struct ctx *c, struct run *r, int remove)
{
	struct proc *p = NULL;
	size_t n = 0;
	char *cmd = NULL;
	struct sbuf b = {0};
	int rc;
	dt_err err;

	sb_add(&b, "cd ");
	sb_addq(&b, c->cwd);
	sb_add(&b, remove ? " && rm -f " : " && umask 077 && cat > ");
	sb_addq(&b, c->remote_secret_file);
	if ((cmd = sb_take(&b)) == NULL) {
		say("out of memory");
		return RC_FAIL;
	}
	err = build_host_steps(
	    h, c, remove ? "removing the secret on" : "writing the secret on",
	    cmd, remove ? NULL : c->secret_line, remove ? c->unreached : NULL,
	    &p, &n);
	free(cmd);
	if (err) {
		say("%s", dt_errmsg());
		return RC_FAIL;
	}
	if (n == 0) {
		procs_free(p, n);
		return 0;
	}
	raise_nofile(r, n);
	rc = run_procs(r, p, n);
	/* Where ssh could not even connect (status 255 before anything
	 * ran) nothing was written: no need to go back and remove it. */
	if (!remove && (c->unreached = calloc(h->n ? h->n : 1, 1)) != NULL)
		for (size_t i = 0; i < n; i++)
			for (size_t k = 0; k < h->n; k++)
				if (p[i].exited && p[i].code == CLD_EXITED &&
				    p[i].status == 255 &&
				    strcmp(p[i].host, h->h[k].name) == 0)
					c->unreached[k] = 1;
	procs_free(p, n);
	if (rc != 0 && remove)
		say("the job's secret file may be left on a host: %s",
		    r->reason);
	else if (rc != 0)
		say("job failed before it started: %s", r->reason);
	return rc;
}

static int
run_job(const struct opts *o, const struct hosts *h, struct ctx *c)
{
	struct run r = {.sfd = -1, .listen_fd = -1, .guard_fd = -1};
	struct proc *p = NULL;
	size_t n = 0;
	struct sigaction sa = {0};
	struct in_addr addr;
	char uri[INET_ADDRSTRLEN], port[16], lfd[16];
	sigset_t set;
	int rc = RC_FAIL, portnum = 0;
	dt_err err;

	r.verbose = o->verbose;
	r.self = getpid();
	r.timeout_s = o->timeout_s;
	r.grace_s = o->grace_s;
	if (o->timeout_s)
		r.deadline = dt__now_ns() + (uint64_t)o->timeout_s * NS_PER_S;
	open_std_fds();

	/* Signals: SIGCHLD, SIGINT, SIGTERM and SIGHUP arrive through a
	 * signalfd in the poll loop. A SIGCHLD inherited as ignored would
	 * make the kernel reap children for us, and an ignored SIGTERM would
	 * never reach the signalfd, so both are reset (SIGINT and SIGHUP
	 * inherited as ignored stay ignored, as under nohup). */
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, &r.old_pipe);
	sa.sa_handler = SIG_DFL;
	sigaction(SIGCHLD, &sa, &r.old_chld);
	sigaction(SIGTERM, &sa, &r.old_term);
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	sigprocmask(SIG_BLOCK, &set, &r.orig_mask);
	if ((r.sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC)) < 0) {
		say("signalfd: %s", strerror(errno));
		goto out;
	}
	guard_start(&r);

	/* The scheduler's socket, before anything starts. */
	if (o->no_scheduler && dt__env_str("DMLC_PS_ROOT_URI") &&
	    dt__env_str("DMLC_PS_ROOT_PORT")) {
		snprintf(uri, sizeof(uri), "%s", getenv("DMLC_PS_ROOT_URI"));
		snprintf(port, sizeof(port), "%s", getenv("DMLC_PS_ROOT_PORT"));
	} else {
		if ((err = scheduler_addr(o, h, &addr)) ||
		    (err = listen_on(addr, &r.listen_fd, &portnum))) {
			say("%s", dt_errmsg());
			goto out;
		}
		inet_ntop(AF_INET, &addr, uri, sizeof(uri));
		snprintf(port, sizeof(port), "%d", portnum);
		if (o->no_scheduler) {
			close(r.listen_fd);
			r.listen_fd = -1;
		}
	}
	snprintf(lfd, sizeof(lfd), "%d", r.listen_fd);
	c->uri = uri;
	c->port = port;
	c->listen_fd = lfd;
	if ((err = build_ctx(o, c)) || (err = prepare_auth(o, c))) {
		say("%s", dt_errmsg());
		goto out;
	}
	if (o->verbose)
		say("scheduler address %s:%s", uri, port);

	if (o->sync_dir) {
		if ((err = build_sync(o, h, c, &p, &n))) {
			say("%s", dt_errmsg());
			goto out;
		}
		raise_nofile(&r, n);
		rc = run_procs(&r, p, n);
		procs_free(p, n);
		p = NULL;
		n = 0;
		if (rc != 0) {
			say("copying the working directory failed (%s)",
			    r.reason);
			goto out;
		}
	}
	if (c->remote_secret_file && (rc = remote_secret(h, c, &r, 0)) != 0) {
		(void)remote_secret(h, c, &r, 1);
		goto out;
	}
	if ((err = build_plan(o, h, c, &p, &n))) {
		say("%s", dt_errmsg());
		rc = RC_FAIL;
		goto out;
	}
	raise_nofile(&r,
	             n + (size_t)(o->workers + o->servers + 2 * o->restart));
	r.restart_max = o->restart;
	r.spare = (size_t)(2 * o->restart);
	rc = run_procs(&r, p, n);
	n = r.n; /* (with the restarted ones) */
	r.restart_max = 0;
	r.spare = 0;
	if (rc != 0)
		say("job failed: %s", r.reason);
	else if (o->verbose)
		say("job finished");
	if (c->remote_secret_file) {
		/* Whatever became of the job, and within a short while. */
		r.deadline = dt__now_ns() + 30 * NS_PER_S;
		(void)remote_secret(h, c, &r, 1);
	}
out:
	procs_free(p, n);
	if (r.listen_fd >= 0)
		close(r.listen_fd);
	guard_stop(&r);
	if (r.sfd >= 0)
		close(r.sfd);
	if (r.nofile_raised)
		setrlimit(RLIMIT_NOFILE, &r.orig_nofile);
	sigprocmask(SIG_SETMASK, &r.orig_mask, NULL);
	sigaction(SIGCHLD, &r.old_chld, NULL);
	sigaction(SIGTERM, &r.old_term, NULL);
	sigaction(SIGPIPE, &r.old_pipe, NULL);
	return rc;
}

/*
 * `dtrain launch`; argv[0] is "launch". Returns the exit status: 0 when
 * every worker exited 0 and the servers and the scheduler then finished by
 * themselves; 1 when a process failed, did not finish within --grace, or
 * could not be started; 2 for bad usage (the message names the option);
 * 124 when --timeout passed; 128+N when the launcher got signal N. Every
 * process of the job has been stopped and reaped when it returns.
 */
int
dt__cli_launch(int argc, char **argv)
{
	struct opts o;
	struct hosts h = {0};
	struct ctx c = {0};
	char self[PATH_MAX], cwd[PATH_MAX];
	ssize_t m;
	dt_err err;
	int rc = RC_USAGE;

	if ((err = parse_opts(argc, argv, &o)) != DT_OK) {
		fprintf(stderr, "dtrain launch: %s\n", dt_errmsg());
		fprintf(stderr, "Try 'dtrain launch --help'.\n");
		goto out;
	}
	if (o.help) {
		usage(stdout);
		rc = 0;
		goto out;
	}
	if (o.hostfile && (o.launcher == L_LOCAL || o.launcher == L_SLURM))
		say("warning: -H is not used by --launcher %s",
		    launcher_names[o.launcher]);
	else if (o.hostfile && (err = read_hostfile(o.hostfile, &h))) {
		fprintf(stderr, "dtrain launch: %s\n", dt_errmsg());
		goto out;
	}
	if (getcwd(cwd, sizeof(cwd)) == NULL) {
		say("getcwd: %s", strerror(errno));
		rc = RC_FAIL;
		goto out;
	}
	if ((m = readlink("/proc/self/exe", self, sizeof(self) - 1)) < 0)
		snprintf(self, sizeof(self), "dtrain");
	else
		self[m] = '\0';
	c.exe_exec = prog("DTRAIN_EXE", "/proc/self/exe");
	c.exe_name = prog("DTRAIN_EXE", self);
	c.cwd = o.sync_dir ? o.sync_dir : cwd;
	c.local_cwd = cwd;
	c.ssh = prog("DTRAIN_SSH", "ssh");
	c.rsync = prog("DTRAIN_RSYNC", "rsync");
	c.mpirun = prog("DTRAIN_MPIRUN", "mpirun");
	c.srun = prog("DTRAIN_SRUN", "srun");
	{
		long t;

		if ((err = dt__env_long("DTRAIN_SSH_CONNECT_TIMEOUT", 10, 1,
		                        3600, &t))) {
			fprintf(stderr, "dtrain launch: %s\n", dt_errmsg());
			goto out;
		}
		snprintf(c.ssh_timeout, sizeof(c.ssh_timeout),
		         "ConnectTimeout=%ld", t);
	}

	if (o.dry_run) {
		struct proc *p = NULL;
		size_t n = 0;

		/* The address is shown as given: nothing is resolved. */
		c.uri = dt__env_str("DMLC_NODE_HOST");
		if (o.launcher == L_LOCAL || c.uri == NULL)
			c.uri = o.launcher != L_LOCAL && h.n ? h.h[0].name
			                                     : "127.0.0.1";
		c.port = "PORT";
		c.listen_fd = "FD";
		rc = RC_FAIL;
		if ((err = build_ctx(&o, &c)) || (err = prepare_auth(&o, &c)) ||
		    (o.sync_dir && (err = build_sync(&o, &h, &c, &p, &n)))) {
			say("%s", dt_errmsg());
			goto out;
		}
		dry_run(p, n);
		procs_free(p, n);
		if ((err = build_plan(&o, &h, &c, &p, &n))) {
			say("%s", dt_errmsg());
			goto out;
		}
		rc = dry_run(p, n);
		procs_free(p, n);
		goto out;
	}
	rc = run_job(&o, &h, &c);
out:
	ctx_free(&c);
	hosts_free(&h);
	strv_free(&o.env);
	strv_free(&o.sync_exclude);
	return rc;
}
