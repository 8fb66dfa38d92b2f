/*
 * fds.h - the unit tests' count of this process's open descriptors and
 * threads, to prove that a test leaves none behind (compare a count
 * before and after).
 */
#ifndef DT_TESTS_UNIT_FDS_H
#define DT_TESTS_UNIT_FDS_H

#include <dirent.h>
#include <stdio.h>

/* Open descriptors, or -1 when /proc/self/fd cannot be read. */
static inline int
count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the directory's own descriptor */
}

/* This process's threads (/proc/self/status), or -1 when it cannot be
 * read. */
static inline int
count_threads(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	int n = -1;

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Threads: %d", &n) == 1)
			break;
	fclose(f);
	return n;
}

#endif
