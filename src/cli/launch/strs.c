/*
 * strs.c - the launcher's strings: growable vectors and buffers, shell
 * quoting, and its messages.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/launch/launch.h"
#include "common/file.h"

/* Append str, taking ownership; a NULL str means its allocation failed. */
dt_err
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

dt_err
strv_dup(struct strv *s, const char *str)
{
	return strv_add(s, strdup(str));
}

dt_err
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

dt_err
strv_extend(struct strv *s, char *const *v, size_t n)
{
	dt_err err = DT_OK;

	for (size_t i = 0; i < n && !err; i++)
		err = strv_dup(s, v[i]);
	return err;
}

void
strv_free(struct strv *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
	memset(s, 0, sizeof(*s));
}

void
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

void
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
void
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
char *
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

void
write_all(int fd, const char *p, size_t n)
{
	if (!out_dead[fd] && dt__write_all(fd, p, n) < 0)
		out_dead[fd] = 1; /* EPIPE: drop output, go on */
}

void
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
