/*
 * k8s.c - `dtrain k8s`: print the Kubernetes objects of a job as YAML, for
 * `kubectl apply -f -` (docs/kubernetes.md).
 *
 *   --kind job (the default; no operator needed): a Secret with a fresh
 *       job secret (unless --secret-from names one), a headless Service
 *       NAME-scheduler for the scheduler's pod, and one Job per role. The
 *       servers' and workers' Jobs are Indexed: Kubernetes gives each pod
 *       its rank in JOB_COMPLETION_INDEX. Pods never restart in place
 *       (restartPolicy Never); a failed pod fails its Job at once
 *       (podFailurePolicy FailJob, backoffLimit 0) unless --restart N,
 *       which lets each Job make N new pods that rejoin (DTRAIN_RECOVER).
 *       ttlSecondsAfterFinished removes the Jobs and their pods.
 *       --min-workers/--max-workers make an elastic job: a failed worker
 *       pod leaves the job, which goes on; Kubernetes makes one new pod
 *       for its index (backoffLimitPerIndex 1), which joins, as do the
 *       pods of the indexes added when the worker Job's parallelism and
 *       completions are raised (docs/kubernetes.md). Its servers, if it
 *       has any, are not elastic: their Job fails as without --restart,
 *       and every pod (scheduler and servers too) has the elastic
 *       variables, as `dtrain launch --min-workers` gives every process.
 *   --kind mxjob: one Kubeflow MXJob (kubeflow.org/v1). The training
 *       operator makes the pods and a Service per pod and sets DMLC_ROLE,
 *       DMLC_PS_ROOT_URI (NAME-scheduler-0), DMLC_PS_ROOT_PORT, DMLC_NUM_*,
 *       DMLC_USE_KUBERNETES and MX_CONFIG (with the replica's index).
 *
 * Every pod advertises its own IP (DMLC_NODE_HOST from status.podIP); the
 * scheduler listens there while the others reach it by the Service's name
 * (DMLC_USE_KUBERNETES=1, src/core/config.c).
 *
 * Everything is checked before anything is printed; strings are written
 * as double-quoted YAML scalars, escaped.
 */
#include <ctype.h>
#include <errno.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "common/limits.h"

#define MAX_ENV 64
#define MAX_CMD 256

typedef enum { R_SCHED, R_SERVER, R_WORKER, R_COUNT } k8s_role;

static const char *const role_names[R_COUNT] = {"scheduler", "server",
                                                "worker"};
/* MXJob's replica types */
static const char *const mx_types[R_COUNT] = {"Scheduler", "Server", "Worker"};

typedef struct k8s_opts {
	const char *name, *image, *kind, *ns, *secret_from;
	long workers, servers, port, restart, ttl;
	long min_workers, max_workers; /* an elastic job when either is set */
	long elastic_timeout;          /* DTRAIN_ELASTIC_TIMEOUT, or 0 */
	const char *cpu[R_COUNT], *memory[R_COUNT];
	const char *env[MAX_ENV];
	int nenv;
	char **cmd;
	int ncmd;
	char secret[65]; /* a fresh one, hex */
	/* --restart: the servers' and the workers' place token (a pod's
	 * replacement must present its role's; docs/security.md), hex */
	char token[R_COUNT][33];
} k8s_opts;

static void
usage(FILE *f)
{
	fputs("usage: dtrain k8s --name NAME --image IMAGE -n W [-s S] "
	      "[options] -- CMD [ARGS...]\n"
	      "\n"
	      "Print the Kubernetes objects of a job (YAML, for kubectl apply "
	      "-f -):\n"
	      "the scheduler, S servers and W workers running CMD.\n"
	      "\n"
	      "  --kind job|mxjob      job: a Secret, a headless Service and "
	      "one Job per\n"
	      "                        role (no operator needed; the "
	      "default); mxjob: one\n"
	      "                        Kubeflow MXJob (kubeflow.org/v1)\n"
	      "  -n, --num-workers W   workers (1 or more)\n"
	      "  -s, --num-servers S   servers (0 or more; default 1)\n"
	      "  --namespace NS        the objects' namespace (default: "
	      "kubectl's)\n"
	      "  --port P              the port every pod listens on "
	      "(default 9091)\n"
	      "  --cpu [ROLE=]Q        CPU request per pod, for every role or "
	      "one\n"
	      "                        (scheduler, server, worker); "
	      "repeatable\n"
	      "  --memory [ROLE=]Q     memory request and limit per pod, "
	      "likewise\n"
	      "  --secret-from NAME    take the job's secret from the Secret "
	      "NAME (key\n"
	      "                        \"secret\") instead of a new Secret "
	      "NAME-secret\n"
	      "  --restart N           a failed pod may be replaced N times "
	      "per role and\n"
	      "                        rejoins (DTRAIN_RECOVER=1); default "
	      "0: the job fails\n"
	      "  --min-workers A       an elastic job: it goes on while A "
	      "workers are\n"
	      "                        left (default 1); its servers are not "
	      "elastic\n"
	      "  --max-workers B       an elastic job: at most B workers over "
	      "its life,\n"
	      "                        those that join included (default "
	      "W)\n"
	      "  --elastic-timeout S   an elastic job below A waits S seconds "
	      "for workers\n"
	      "                        to join before it ends (default 600)\n"
	      "  --ttl SECONDS         remove finished Jobs after this long "
	      "(default 600)\n"
	      "  --env NAME=VALUE      set a variable in every pod; "
	      "repeatable\n"
	      "\n"
	      "Example:\n"
	      "  dtrain k8s --name mnist --image registry/dtrain:1 -n 2 -s 2 "
	      "-- \\\n"
	      "      mnist --kvstore dist_sync --model lenet | kubectl apply "
	      "-f -\n",
	      f);
}

static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Say what is wrong with the command line; the exit status of bad usage. */
static int
bad(const char *fmt, ...)
{
	va_list ap;

	fputs("dtrain k8s: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 2;
}

/* A whole number in [lo, hi], or -1 (said). */
static int
parse_long(const char *flag, const char *s, long lo, long hi, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi) {
		fprintf(stderr,
		        "dtrain k8s: %s needs a whole number from %ld to %ld, "
		        "not '%s'\n",
		        flag, lo, hi, s);
		return -1;
	}
	*out = v;
	return 0;
}

/* A DNS-1035 label of at most max characters (Kubernetes' object names;
 * the job's name gets suffixes like "-scheduler-0"). */
static int
dns_label(const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n == 0 || n > max || !islower((unsigned char)s[0]) ||
	    s[n - 1] == '-')
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!(islower((unsigned char)s[i]) ||
		      isdigit((unsigned char)s[i]) || s[i] == '-'))
			return 0;
	return 1;
}

/* A resource quantity: digits, an optional fraction, an optional unit. */
static int
quantity(const char *s)
{
	static const char *const units[] = {"",  "m",  "k",  "M",  "G",
	                                    "T", "Ki", "Mi", "Gi", "Ti"};
	size_t i = 0;

	if (!isdigit((unsigned char)s[0]))
		return 0;
	while (isdigit((unsigned char)s[i]))
		i++;
	if (s[i] == '.') {
		if (!isdigit((unsigned char)s[++i]))
			return 0;
		while (isdigit((unsigned char)s[i]))
			i++;
	}
	for (size_t u = 0; u < sizeof(units) / sizeof(units[0]); u++)
		if (strcmp(s + i, units[u]) == 0)
			return 1;
	return 0;
}

/* --cpu / --memory: "Q" for every role, or "ROLE=Q". */
static int
per_role(const char *flag, const char *v, const char *out[R_COUNT])
{
	const char *eq = strchr(v, '=');

	if (eq == NULL) {
		if (!quantity(v))
			return bad("%s: '%s' is not a quantity (such as 2, "
			           "500m, 4Gi)",
			           flag, v);
		for (int r = 0; r < R_COUNT; r++)
			out[r] = v;
		return 0;
	}
	for (int r = 0; r < R_COUNT; r++) {
		size_t n = strlen(role_names[r]);

		if ((size_t)(eq - v) == n &&
		    strncmp(v, role_names[r], n) == 0) {
			if (!quantity(eq + 1))
				return bad("%s: '%s' is not a quantity (such "
				           "as 2, 500m, 4Gi)",
				           flag, eq + 1);
			out[r] = eq + 1;
			return 0;
		}
	}
	return bad("%s: '%s' names no role (scheduler, server or worker)", flag,
	           v);
}

/* Variables dtrain k8s (or the operator) sets: --env may not. */
static int
reserved(const char *name, size_t n)
{
	static const char *const names[] = {"DMLC_ROLE",
	                                    "DMLC_PS_ROOT_URI",
	                                    "DMLC_PS_ROOT_PORT",
	                                    "DMLC_NUM_SERVER",
	                                    "DMLC_NUM_WORKER",
	                                    "DMLC_WORKER_ID",
	                                    "DMLC_SERVER_ID",
	                                    "DMLC_NODE_HOST",
	                                    "DMLC_USE_KUBERNETES",
	                                    "DTRAIN_SECRET",
	                                    "DTRAIN_SECRET_FILE",
	                                    "DTRAIN_RECOVER",
	                                    "DTRAIN_NODE_TOKEN",
	                                    "JOB_COMPLETION_INDEX",
	                                    "MX_CONFIG",
	                                    "DTRAIN_ELASTIC",
	                                    "DTRAIN_ELASTIC_MIN",
	                                    "DTRAIN_ELASTIC_MAX",
	                                    "DTRAIN_ELASTIC_TIMEOUT"};

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strlen(names[i]) == n && strncmp(name, names[i], n) == 0)
			return 1;
	return 0;
}

static int
check_env(const char *v)
{
	const char *eq = strchr(v, '=');
	size_t n = eq ? (size_t)(eq - v) : 0;

	if (eq == NULL || n == 0 ||
	    !(isalpha((unsigned char)v[0]) || v[0] == '_'))
		return bad("--env needs NAME=VALUE, not '%s'", v);
	for (size_t i = 0; i < n; i++)
		if (!(isalnum((unsigned char)v[i]) || v[i] == '_'))
			return bad("--env: '%.*s' is not a variable name",
			           (int)n, v);
	if (reserved(v, n))
		return bad("--env: %.*s is set by dtrain k8s (or the operator) "
		           "itself",
		           (int)n, v);
	return 0;
}

/* No control characters in what goes into the YAML (escaped anyway, but
 * a newline in an image name is a mistake). */
static int
printable(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return 0;
	return 1;
}

/* One option a with its value v; 0 when taken, 1 after a message. */
static int
set_opt(k8s_opts *o, const char *a, const char *v)
{
	if (strcmp(a, "--name") == 0)
		o->name = v;
	else if (strcmp(a, "--image") == 0)
		o->image = v;
	else if (strcmp(a, "--kind") == 0)
		o->kind = v;
	else if (strcmp(a, "--namespace") == 0)
		o->ns = v;
	else if (strcmp(a, "--secret-from") == 0)
		o->secret_from = v;
	else if (strcmp(a, "-n") == 0 || strcmp(a, "--num-workers") == 0) {
		if (parse_long(a, v, 1, DT_MAX_ROLE_NODES, &o->workers))
			return 1;
	} else if (strcmp(a, "-s") == 0 || strcmp(a, "--num-servers") == 0) {
		if (parse_long(a, v, 0, DT_MAX_ROLE_NODES, &o->servers))
			return 1;
	} else if (strcmp(a, "--port") == 0) {
		if (parse_long(a, v, 1, 65535, &o->port))
			return 1;
	} else if (strcmp(a, "--restart") == 0) {
		if (parse_long(a, v, 0, 1000, &o->restart))
			return 1;
	} else if (strcmp(a, "--min-workers") == 0) {
		if (parse_long(a, v, 1, DT_MAX_ROLE_NODES, &o->min_workers))
			return 1;
	} else if (strcmp(a, "--max-workers") == 0) {
		if (parse_long(a, v, 1, DT_MAX_ROLE_NODES, &o->max_workers))
			return 1;
	} else if (strcmp(a, "--elastic-timeout") == 0) {
		if (parse_long(a, v, 1, 7L * 86400, &o->elastic_timeout))
			return 1;
	} else if (strcmp(a, "--ttl") == 0) {
		if (parse_long(a, v, 0, 365L * 86400, &o->ttl))
			return 1;
	} else if (strcmp(a, "--cpu") == 0) {
		if (per_role(a, v, o->cpu))
			return 1;
	} else if (strcmp(a, "--memory") == 0) {
		if (per_role(a, v, o->memory))
			return 1;
	} else if (strcmp(a, "--env") == 0) {
		if (check_env(v))
			return 1;
		if (o->nenv == MAX_ENV)
			return bad("at most %d --env options", MAX_ENV);
		o->env[o->nenv++] = v;
	} else {
		return bad("unknown option '%s'", a);
	}
	return 0;
}

/* --min-workers / --max-workers: an elastic job, as dtrain launch runs
 * one: every worker a new one (no --restart); servers, if any, are not
 * elastic and end the job when one is lost. */
static int
check_elastic(k8s_opts *o)
{
	if (o->elastic_timeout && !o->min_workers && !o->max_workers)
		return bad("--elastic-timeout: for an elastic job "
		           "(--min-workers / --max-workers)");
	if (!o->min_workers && !o->max_workers)
		return 0;
	if (!o->min_workers)
		o->min_workers = 1;
	if (!o->max_workers)
		o->max_workers = o->workers;
	if (o->min_workers > o->workers || o->workers > o->max_workers)
		return bad("--min-workers %ld, -n %ld, --max-workers %ld: "
		           "need min <= n <= max",
		           o->min_workers, o->workers, o->max_workers);
	if (strcmp(o->kind, "job") != 0)
		return bad("--min-workers/--max-workers: an elastic job is "
		           "printed as Jobs (--kind job), not as an MXJob");
	if (o->restart)
		return bad("--min-workers/--max-workers and --restart: a lost "
		           "worker of an elastic job leaves it, and a new pod "
		           "joins as a new worker");
	if (dt__job_size_check(o->servers, o->max_workers, "--num-servers",
	                       "--max-workers"))
		return bad("%s", dt_errmsg());
	return 0;
}

/* The options together, and the values a manifest must not carry. */
static int
check_opts(k8s_opts *o)
{
	if (o->name == NULL || o->image == NULL || o->workers < 0)
		return bad("--name, --image and -n are needed");
	if (check_elastic(o))
		return 2;
	if (dt__job_size_check(o->servers, o->workers, "--num-servers",
	                       "--num-workers"))
		return bad("%s", dt_errmsg());
	if (!dns_label(o->name, 40))
		return bad("--name '%s': at most 40 lowercase letters, digits "
		           "and '-', starting with a letter",
		           o->name);
	if (o->ns && !dns_label(o->ns, 63))
		return bad("--namespace '%s' is not a namespace name", o->ns);
	if (o->secret_from && !dns_label(o->secret_from, 253))
		return bad("--secret-from '%s' is not a Secret's name",
		           o->secret_from);
	if (strcmp(o->kind, "job") != 0 && strcmp(o->kind, "mxjob") != 0)
		return bad("--kind '%s': job or mxjob", o->kind);
	if (!*o->image || !printable(o->image))
		return bad("--image '%s' is not an image name", o->image);
	if (o->ncmd == 0)
		return bad("no worker command: put it after --");
	if (o->ncmd > MAX_CMD)
		return bad("the worker's command has more than %d words",
		           MAX_CMD);
	for (int k = 0; k < o->ncmd; k++)
		if (!printable(o->cmd[k]))
			return bad("the worker's command has a control "
			           "character in '%s'",
			           o->cmd[k]);
	for (int k = 0; k < o->nenv; k++)
		if (!printable(o->env[k]))
			return bad("--env '%s' has a control character",
			           o->env[k]);
	return 0;
}

static int
parse(int argc, char **argv, k8s_opts *o)
{
	int i;

	memset(o, 0, sizeof(*o));
	o->kind = "job";
	o->servers = 1;
	o->workers = -1;
	o->port = 9091;
	o->ttl = 600;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(a, "--") == 0) {
			i++;
			break;
		}
		if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
			usage(stdout);
			return 1;
		}
		if (a[0] != '-')
			return bad("'%s': the worker's command comes after "
			           "--",
			           a);
		if (v == NULL)
			return bad("option %s needs a value", a);
		i++;
		if (set_opt(o, a, v))
			return 2;
	}
	o->cmd = argv + i;
	o->ncmd = argc - i;
	return check_opts(o);
}

/* ---- YAML ---- */

/* The code point of the UTF-8 sequence at s (its length in *len), or -1
 * (and *len 1) when s holds no valid one: a stray continuation byte, a
 * cut or overlong sequence, a surrogate, or a byte like 0xff. */
static long
utf8_at(const unsigned char *s, size_t *len)
{
	size_t n = s[0] >= 0xf0 && s[0] <= 0xf4   ? 4
	           : s[0] >= 0xe0 && s[0] <= 0xef ? 3
	           : s[0] >= 0xc2 && s[0] <= 0xdf ? 2
	                                          : 0;
	long cp = n == 4 ? s[0] & 0x07 : n == 3 ? s[0] & 0x0f : s[0] & 0x1f;

	*len = 1;
	if (n == 0)
		return -1;
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return -1;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((n == 3 && cp < 0x800) ||
	    (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return -1;
	*len = n;
	return cp;
}

/*
 * A double-quoted YAML scalar that every conforming parser reads back as
 * the same characters: quotes, backslashes and control characters are
 * escaped, and so are the characters YAML 1.1 parsers take as line
 * breaks (NEL U+0085, U+2028, U+2029: folded to a space otherwise), the
 * other C1 controls and the byte order mark. A byte that is not UTF-8
 * (which would make the whole file unreadable) is written as \xNN, the
 * character of that number (Latin-1's reading of the byte): a YAML string
 * holds characters, not bytes.
 */
static void
q(FILE *f, const char *s)
{
	const unsigned char *u = (const unsigned char *)s;

	fputc('"', f);
	while (*u) {
		size_t n;
		long cp = *u < 0x80 ? *u : utf8_at(u, &n);

		if (*u < 0x80)
			n = 1;
		if (cp == '"' || cp == '\\')
			fprintf(f, "\\%c", (int)cp);
		else if (cp < 0)
			fprintf(f, "\\x%02x", *u);
		else if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f))
			fprintf(f, "\\x%02lx", cp);
		else if (cp == 0x2028 || cp == 0x2029 || cp == 0xfeff)
			fprintf(f, "\\u%04lx", cp);
		else
			fwrite(u, 1, n, f);
		u += n;
	}
	fputc('"', f);
}

static void
labels(FILE *f, const k8s_opts *o, const char *role, int indent)
{
	fprintf(f, "%*slabels:\n", indent, "");
	fprintf(f, "%*sapp.kubernetes.io/name: dtrain\n", indent + 2, "");
	fprintf(f, "%*sdtrain.io/job: ", indent + 2, "");
	q(f, o->name);
	fputc('\n', f);
	if (role)
		fprintf(f, "%*sdtrain.io/role: %s\n", indent + 2, "", role);
}

static void
metadata(FILE *f, const k8s_opts *o, const char *name, const char *role)
{
	fputs("metadata:\n  name: ", f);
	q(f, name);
	fputc('\n', f);
	if (o->ns) {
		fputs("  namespace: ", f);
		q(f, o->ns);
		fputc('\n', f);
	}
	labels(f, o, role, 2);
}

static void
env_value(FILE *f, int in, const char *name, const char *value)
{
	fprintf(f, "%*s- name: %s\n%*s  value: ", in, "", name, in, "");
	q(f, value);
	fputc('\n', f);
}

/* The container's env (at indentation in), role r. */
static void
container_env(FILE *f, const k8s_opts *o, k8s_role r, int in, int mxjob)
{
	char name_buf[300], num[32];

	if (!mxjob) {
		/* (MXJob's operator sets these itself) */
		env_value(f, in, "DMLC_ROLE", role_names[r]);
		snprintf(name_buf, sizeof(name_buf), "%s-scheduler", o->name);
		env_value(f, in, "DMLC_PS_ROOT_URI", name_buf);
		snprintf(num, sizeof(num), "%ld", o->port);
		env_value(f, in, "DMLC_PS_ROOT_PORT", num);
		snprintf(num, sizeof(num), "%ld", o->servers);
		env_value(f, in, "DMLC_NUM_SERVER", num);
		snprintf(num, sizeof(num), "%ld", o->workers);
		env_value(f, in, "DMLC_NUM_WORKER", num);
		env_value(f, in, "DMLC_USE_KUBERNETES", "1");
	}
	snprintf(num, sizeof(num), "%ld", o->port);
	env_value(f, in, "DMLC_PORT", num);
	fprintf(f,
	        "%*s- name: DMLC_NODE_HOST\n"
	        "%*s  valueFrom:\n"
	        "%*s    fieldRef:\n"
	        "%*s      fieldPath: status.podIP\n",
	        in, "", in, "", in, "", in, "");
	if (o->secret_from)
		snprintf(name_buf, sizeof(name_buf), "%s", o->secret_from);
	else
		snprintf(name_buf, sizeof(name_buf), "%s-secret", o->name);
	fprintf(f,
	        "%*s- name: DTRAIN_SECRET\n"
	        "%*s  valueFrom:\n"
	        "%*s    secretKeyRef:\n"
	        "%*s      name: ",
	        in, "", in, "", in, "", in, "");
	q(f, name_buf);
	fprintf(f, "\n%*s      key: \"secret\"\n", in, "");
	if (o->restart)
		env_value(f, in, "DTRAIN_RECOVER", "1");
	if (o->max_workers) {
		env_value(f, in, "DTRAIN_ELASTIC", "1");
		snprintf(num, sizeof(num), "%ld", o->min_workers);
		env_value(f, in, "DTRAIN_ELASTIC_MIN", num);
		snprintf(num, sizeof(num), "%ld", o->max_workers);
		env_value(f, in, "DTRAIN_ELASTIC_MAX", num);
		if (o->elastic_timeout) {
			snprintf(num, sizeof(num), "%ld", o->elastic_timeout);
			env_value(f, in, "DTRAIN_ELASTIC_TIMEOUT", num);
		}
	}
	if (o->restart && r != R_SCHED) {
		/* The pods of a role share a template, and so a token: a
		 * replacement takes a lost node of its role. Optional: a
		 * --secret-from Secret may have none (no replacement then). */
		fprintf(f,
		        "%*s- name: DTRAIN_NODE_TOKEN\n"
		        "%*s  valueFrom:\n"
		        "%*s    secretKeyRef:\n"
		        "%*s      name: ",
		        in, "", in, "", in, "", in, "");
		q(f, name_buf);
		fprintf(f,
		        "\n%*s      key: \"%s-token\"\n"
		        "%*s      optional: true\n",
		        in, "", role_names[r], in, "");
	}
	for (int k = 0; k < o->nenv; k++) {
		const char *eq = strchr(o->env[k], '=');
		char name[256];

		snprintf(name, sizeof(name), "%.*s", (int)(eq - o->env[k]),
		         o->env[k]);
		env_value(f, in, name, eq + 1);
	}
}

/* The container of role r, at indentation in ("- name: ..."). */
static void
container(FILE *f, const k8s_opts *o, k8s_role r, int in, int mxjob)
{
	fprintf(f, "%*s- name: %s\n", in, "", mxjob ? "mxnet" : "dtrain");
	fprintf(f, "%*s  image: ", in, "");
	q(f, o->image);
	fputc('\n', f);
	fprintf(f, "%*s  command:\n", in, "");
	if (r == R_WORKER) {
		for (int k = 0; k < o->ncmd; k++) {
			fprintf(f, "%*s  - ", in, "");
			q(f, o->cmd[k]);
			fputc('\n', f);
		}
	} else {
		fprintf(f, "%*s  - \"dtrain\"\n%*s  - \"%s\"\n", in, "", in, "",
		        role_names[r]);
	}
	fprintf(f, "%*s  ports:\n", in, "");
	fprintf(f, "%*s  - name: %s\n%*s    containerPort: %ld\n", in, "",
	        mxjob ? "mxjob-port" : "dtrain", in, "", o->port);
	fprintf(f, "%*s  env:\n", in, "");
	container_env(f, o, r, in + 2, mxjob);
	if (o->cpu[r] || o->memory[r]) {
		fprintf(f, "%*s  resources:\n%*s    requests:\n", in, "", in,
		        "");
		if (o->cpu[r])
			fprintf(f, "%*s      cpu: \"%s\"\n", in, "", o->cpu[r]);
		if (o->memory[r])
			fprintf(f,
			        "%*s      memory: \"%s\"\n%*s    limits:\n"
			        "%*s      memory: \"%s\"\n",
			        in, "", o->memory[r], in, "", in, "",
			        o->memory[r]);
	}
}

static void
print_secret(FILE *f, const k8s_opts *o)
{
	char name[64];

	snprintf(name, sizeof(name), "%s-secret", o->name);
	fputs("apiVersion: v1\nkind: Secret\n", f);
	metadata(f, o, name, NULL);
	fputs("type: Opaque\nstringData:\n  secret: ", f);
	q(f, o->secret);
	for (int r = R_SERVER; o->restart && r < R_COUNT; r++) {
		fprintf(f, "\n  %s-token: ", role_names[r]);
		q(f, o->token[r]);
	}
	fputs("\n---\n", f);
}

static void
print_job_kind(FILE *f, const k8s_opts *o)
{
	char name[64];
	const long count[R_COUNT] = {1, o->servers, o->workers};

	snprintf(name, sizeof(name), "%s-scheduler", o->name);
	/* The scheduler's name: resolvable before its pod is ready (the
	 * others dial it while it waits for them). */
	fputs("apiVersion: v1\nkind: Service\n", f);
	metadata(f, o, name, "scheduler");
	fputs("spec:\n  clusterIP: None\n  publishNotReadyAddresses: true\n"
	      "  selector:\n",
	      f);
	fputs("    dtrain.io/job: ", f);
	q(f, o->name);
	fputs("\n    dtrain.io/role: scheduler\n", f);
	fprintf(f,
	        "  ports:\n  - name: dtrain\n    port: %ld\n    targetPort: "
	        "%ld\n",
	        o->port, o->port);
	for (int r = 0; r < R_COUNT; r++) {
		if (count[r] == 0)
			continue;
		/* An elastic job's workers: a failed pod's index gets one new
		 * pod, which joins (while the job has places left). A limit
		 * per index, not per Job: a Job over its backoffLimit would
		 * stop every pod, the survivors too. Its scheduler and servers
		 * are not elastic: a failed one fails its Job. */
		int elastic = o->max_workers && r == R_WORKER;

		snprintf(name, sizeof(name), "%s-%s", o->name, role_names[r]);
		fputs("---\napiVersion: batch/v1\nkind: Job\n", f);
		metadata(f, o, name, role_names[r]);
		fprintf(f,
		        "spec:\n  completions: %ld\n  parallelism: %ld\n"
		        "  completionMode: Indexed\n",
		        count[r], count[r]);
		if (elastic)
			fputs("  backoffLimitPerIndex: 1\n", f);
		else
			fprintf(f, "  backoffLimit: %ld\n", o->restart);
		fprintf(f, "  ttlSecondsAfterFinished: %ld\n", o->ttl);
		/* A pod evicted or preempted is not the program's failure;
		 * without --restart any other failure ends the job. */
		fputs("  podFailurePolicy:\n    rules:\n"
		      "    - action: Ignore\n      onPodConditions:\n"
		      "      - type: DisruptionTarget\n",
		      f);
		if (o->restart == 0 && !elastic)
			fputs("    - action: FailJob\n      onExitCodes:\n"
			      "        containerName: dtrain\n"
			      "        operator: NotIn\n        values: [0]\n",
			      f);
		fputs("  template:\n    metadata:\n", f);
		labels(f, o, role_names[r], 6);
		fputs("    spec:\n      restartPolicy: Never\n"
		      "      containers:\n",
		      f);
		container(f, o, (k8s_role)r, 6, 0);
	}
}

static void
print_mxjob(FILE *f, const k8s_opts *o)
{
	const long count[R_COUNT] = {1, o->servers, o->workers};

	fputs("apiVersion: kubeflow.org/v1\nkind: MXJob\n", f);
	metadata(f, o, o->name, NULL);
	fprintf(f,
	        "spec:\n  jobMode: MXTrain\n  runPolicy:\n"
	        "    cleanPodPolicy: All\n    backoffLimit: %ld\n"
	        "    ttlSecondsAfterFinished: %ld\n  mxReplicaSpecs:\n",
	        o->restart, o->ttl);
	for (int r = 0; r < R_COUNT; r++) {
		if (count[r] == 0)
			continue;
		fprintf(f, "    %s:\n      replicas: %ld\n", mx_types[r],
		        count[r]);
		fprintf(f, "      restartPolicy: %s\n",
		        o->restart ? "OnFailure" : "Never");
		fputs("      template:\n        metadata:\n", f);
		labels(f, o, role_names[r], 10);
		fputs("        spec:\n          containers:\n", f);
		container(f, o, (k8s_role)r, 10, 1);
	}
}

int
dt__cli_k8s(int argc, char **argv)
{
	k8s_opts o;
	int rc = parse(argc, argv, &o);

	if (rc == 1)
		return 0; /* --help */
	if (rc) {
		fputs("(dtrain k8s --help for the options)\n", stderr);
		return 2;
	}
	if (!o.secret_from) {
		unsigned char raw[32];

		if (sodium_init() < 0) {
			fputs("dtrain k8s: libsodium cannot start\n", stderr);
			return 1;
		}
		randombytes_buf(raw, sizeof(raw));
		sodium_bin2hex(o.secret, sizeof(o.secret), raw, sizeof(raw));
		for (int r = R_SERVER; r < R_COUNT; r++) {
			randombytes_buf(raw, 16);
			sodium_bin2hex(o.token[r], sizeof(o.token[r]), raw, 16);
		}
		sodium_memzero(raw, sizeof(raw));
	}
	printf("# dtrain k8s: job %s, %ld servers and %ld workers (%s)\n",
	       o.name, o.servers, o.workers,
	       strcmp(o.kind, "mxjob") == 0 ? "a Kubeflow MXJob"
	                                    : "Jobs and a Service");
	if (o.max_workers)
		printf("# elastic: %ld to %ld workers; grow or shrink with\n"
		       "#   kubectl patch job %s-worker --type=merge -p "
		       "'{\"spec\":{\"parallelism\":N,\"completions\":N}}'\n",
		       o.min_workers, o.max_workers, o.name);
	if (!o.secret_from)
		print_secret(stdout, &o);
	if (strcmp(o.kind, "mxjob") == 0)
		print_mxjob(stdout, &o);
	else
		print_job_kind(stdout, &o);
	sodium_memzero(o.secret, sizeof(o.secret));
	sodium_memzero(o.token, sizeof(o.token));
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fputs("dtrain k8s: cannot write the manifests\n", stderr);
		return 1;
	}
	return 0;
}
