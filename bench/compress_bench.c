/*
 * compress_bench.c - the gradient-compression codecs (common/quant.h) on
 * one core, beside memcpy of the same fp32 input: quantise + pack and
 * unpack + add for fp16, 2-bit and 1-bit, in GB/s of fp32 input (the
 * issue's target: >= 2 GB/s). Median of several repetitions over an array
 * larger than the caches. Prints a table, or JSON lines with --json.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/quant.h"
#include "common/util.h"

#define N    (4u << 20) /* floats: 16 MiB */
#define REPS 9

static float *in, *res, *acc, *copy;
static uint8_t *buf;

enum op { MEMCPY, Q16, D16, Q2, D2, Q1, D1 };
static const char *const names[] = {"memcpy (baseline)", "fp16 quantise",
                                    "fp16 unpack+add",   "2bit quantise+pack",
                                    "2bit unpack+add",   "1bit quantise+pack",
                                    "1bit unpack+add"};

static void
run(enum op op)
{
	switch (op) {
	case MEMCPY:
		memcpy(copy, in, N * sizeof(float));
		break;
	case Q16:
		dt__quant_fp16(in, buf, N);
		break;
	case D16:
		dt__dequant_fp16_add(buf, acc, N);
		break;
	case Q2:
		dt__quant_2bit(in, res, N, 0.5f, buf);
		break;
	case D2:
		if (dt__dequant_2bit_add(buf, N, 0.5f, acc))
			abort();
		break;
	case Q1:
		dt__quant_1bit(in, res, N, 0.0f, buf);
		break;
	case D1:
		if (dt__dequant_1bit_add(buf, N, acc))
			abort();
		break;
	}
}

int
main(int argc, char **argv)
{
	int json = argc > 1 && strcmp(argv[1], "--json") == 0;
	double base = 0;

	in = malloc(N * sizeof(float));
	res = calloc(N, sizeof(float));
	acc = calloc(N, sizeof(float));
	copy = malloc(N * sizeof(float));
	buf = malloc(N * sizeof(float) + 64);
	if (!in || !res || !acc || !copy || !buf)
		return 1;
	srand(1);
	for (size_t i = 0; i < N; i++) /* gradient-like: small, both signs */
		in[i] = ((float)rand() / (float)RAND_MAX - 0.5f) * 2.0f;
	if (!json)
		printf("%-22s %10s %10s\n", "codec (16 MiB fp32)", "GB/s",
		       "vs memcpy");
	for (int op = MEMCPY; op <= D1; op++) {
		double t[REPS], gbs;

		/* The unpack benches read what the quantiser wrote. */
		if (op == D16)
			run(Q16);
		else if (op == D2)
			run(Q2);
		else if (op == D1)
			run(Q1);
		run((enum op)op); /* warm */
		for (int r = 0; r < REPS; r++) {
			double t0 = dt__now_s();

			run((enum op)op);
			t[r] = dt__now_s() - t0;
		}
		qsort(t, REPS, sizeof(double), dt__cmp_double);
		gbs = (double)N * sizeof(float) / t[REPS / 2] / 1e9;
		if (op == MEMCPY)
			base = gbs;
		if (json)
			printf("{\"bench\":\"compress\",\"codec\":\"%s\","
			       "\"bytes\":%zu,\"gbps\":%.3f,\"vs_memcpy\":%.3f}"
			       "\n",
			       names[op], (size_t)N * sizeof(float), gbs,
			       gbs / base);
		else
			printf("%-22s %10.2f %10.2f\n", names[op], gbs,
			       gbs / base);
	}
	free(in);
	free(res);
	free(acc);
	free(copy);
	free(buf);
	return 0;
}
