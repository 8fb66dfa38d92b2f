/*
 * output.c - the job's output: whole lines, each prefixed with "[role
 * rank] " (the rank from the line's own mark under mpirun and srun), and
 * the rank wrapper's report of a failed rank taken out of the stream.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/launch/launch.h"

/* The rank wrapper's report "RANK_MARK CODE STATUS" (what waitid says of
 * the rank's command): the first one of a process is kept, for the
 * launcher's message when the process fails. Returns 1 if the line is
 * one. */
static int
rank_report(struct proc *p, long rank, const char *s, size_t n)
{
	size_t m = sizeof(RANK_MARK) - 1;
	char tmp[48], *end;
	long code, status;

	if (n < m || n - m >= sizeof(tmp) || memcmp(s, RANK_MARK, m) != 0)
		return 0;
	memcpy(tmp, s + m, n - m);
	tmp[n - m] = '\0';
	code = strtol(tmp, &end, 10);
	if (*end != ' ' ||
	    (code != CLD_EXITED && code != CLD_KILLED && code != CLD_DUMPED))
		return 0;
	status = strtol(end + 1, &end, 10);
	if (*end != '\0' || status < 0 || status > 255)
		return 0;
	if (p->rank_code == 0) {
		p->rank = rank;
		p->rank_code = (int)code;
		p->rank_status = (int)status;
	}
	return 1;
}

/* The scheduler's "aborting the job: ROLE N (pid PID ..." line: PID, the
 * node it lost, which the launcher names as the job's cause when that
 * process failed too (supervise.c: blame). */
static void
note_abort(struct proc *p, const char *s, size_t n)
{
	static const char key[] = "aborting the job: ";
	char line[256];
	const char *a, *pid;
	long v;
	char *end;

	if (!p->is_scheduler || p->named_lost_pid)
		return;
	snprintf(line, sizeof(line), "%.*s", (int)DT_MIN(n, sizeof(line) - 1),
	         s);
	if ((a = strstr(line, key)) == NULL ||
	    (pid = strstr(a + sizeof(key) - 1, " (pid ")) == NULL ||
	    strchr(a + sizeof(key) - 1, ' ') == NULL)
		return;
	v = strtol(pid + 6, &end, 10);
	if (end != pid + 6 && v > 0 && (*end == ' ' || *end == ')'))
		p->named_lost_pid = v;
}

/* The scheduler's word on an elastic job: "membership E has K workers"
 * (the size of each new membership), "..., fewer than
 * DTRAIN_ELASTIC_MIN=M; waiting up to" (it waits for workers to join) and
 * "the elastic job ends: " (it gave up waiting), which supervise.c's wait
 * below the minimum follows. */
static void
note_elastic(struct proc *p, const char *s, size_t n)
{
	char line[256];
	const char *m;
	unsigned long long epoch;
	long live;

	if (!p->is_scheduler)
		return;
	snprintf(line, sizeof(line), "%.*s", (int)DT_MIN(n, sizeof(line) - 1),
	         s);
	if (strstr(line, "the elastic job ends: ") ||
	    strstr(line, "aborting the job: "))
		p->aborted = 1;
	if (strstr(line, ", fewer than DTRAIN_ELASTIC_MIN=") &&
	    strstr(line, "; waiting up to "))
		p->el_below = 1;
	for (m = strstr(line, "membership "); m;
	     m = strstr(m + 1, "membership "))
		if (sscanf(m, "membership %llu has %ld worker", &epoch,
		           &live) == 2 &&
		    live >= 0) {
			p->el_live = live;
			p->el_below = 0;
			p->el_reports++;
			return;
		}
}

static void
emit_line(struct proc *p, int dst, const char *s, size_t n)
{
	static char buf[LINE_CAP + 128];
	char label[96];
	size_t t = 0, len;
	long rank = 0;

	if (p->strip_cr && n > 0 && s[n - 1] == '\r')
		n--;
	if (p->line_tag)
		t = p->line_tag(s, n, &rank);
	if (t > 0 && rank_report(p, rank, s + t, n - t))
		return;
	note_abort(p, s, n);
	note_elastic(p, s, n);
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
void
stream_feed(struct proc *p, struct stream *st, const char *data, size_t n)
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

void
stream_close(struct proc *p, struct stream *st)
{
	if (st->len > 0) /* a last line without '\n' */
		emit_line(p, st->dst, st->buf, st->len);
	st->len = 0;
	if (st->fd >= 0)
		close(st->fd);
	st->fd = -1;
}

/* Read what the pipe holds now; returns 0 when it is empty or closed. */
int
stream_read(struct proc *p, struct stream *st)
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
