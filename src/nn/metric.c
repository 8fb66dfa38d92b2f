/*
 * metric.c - evaluation metrics (accuracy, MAE) and the Speedometer.
 *
 * The Speedometer reproduces MXNet's batch-end callback of the same name,
 * whose lines users grep and plot:
 *   Epoch[0] Batch [0-50] Speed: 2248.71 samples/sec accuracy=0.583640
 * MXNet starts its clock at the end of batch 0 and prints at every batch
 * index that is a multiple of `frequent`, with the speed over the last
 * `frequent` batches and the metric (reset after printing, MXNet's
 * auto_reset). MXNet separates the fields with tabs; dtrain uses single
 * spaces, as the documents it reproduces show them.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"
#include "dtrain/nn.h"

dt_err
dt_metric_init(dt_metric *mt, const char *name)
{
	if (mt == NULL || name == NULL)
		return dt__fail(DT_EINVAL, "metric: NULL argument");
	memset(mt, 0, sizeof(*mt));
	if (strcmp(name, "accuracy") == 0 || strcmp(name, "acc") == 0)
		mt->kind = DT_METRIC_ACCURACY;
	else if (strcmp(name, "mae") == 0)
		mt->kind = DT_METRIC_MAE;
	else
		return dt__fail(DT_EINVAL,
		                "metric '%s' unknown (accuracy, mae)", name);
	return DT_OK;
}

const char *
dt_metric_name(const dt_metric *mt)
{
	return mt->kind == DT_METRIC_MAE ? "mae" : "accuracy";
}

void
dt_metric_reset(dt_metric *mt)
{
	mt->sum = 0.0;
	mt->count = 0.0;
}

dt_err
dt_metric_update(dt_metric *mt, const float *out, const float *y, size_t batch,
                 size_t out_dim)
{
	if (out == NULL || y == NULL || out_dim == 0)
		return dt__fail(DT_EINVAL, "metric update: NULL data or zero "
		                           "width");
	if (mt->kind == DT_METRIC_ACCURACY) {
		size_t hits = 0;

		for (size_t b = 0; b < batch; b++) {
			const float *o = out + b * out_dim;
			size_t arg = 0;

			for (size_t j = 1; j < out_dim; j++)
				if (o[j] > o[arg])
					arg = j;
			hits += (float)arg == y[b];
		}
		mt->sum += (double)hits;
		mt->count += (double)batch;
		return DT_OK;
	}
	for (size_t i = 0; i < batch * out_dim; i++)
		mt->sum += fabs((double)out[i] - y[i]);
	mt->count += (double)(batch * out_dim);
	return DT_OK;
}

void
dt_metric_add(dt_metric *mt, double sum, double count)
{
	mt->sum += sum;
	mt->count += count;
}

double
dt_metric_get(const dt_metric *mt)
{
	return mt->count > 0.0 ? mt->sum / mt->count : 0.0;
}

dt_err
dt_speedometer_init(dt_speedometer *sp, size_t batch_size, long frequent,
                    FILE *out)
{
	if (sp == NULL || batch_size == 0 || frequent <= 0)
		return dt__fail(DT_EINVAL,
		                "speedometer: need batch_size > 0 "
		                "and frequent > 0 (got %zu, %ld)",
		                batch_size, frequent);
	memset(sp, 0, sizeof(*sp));
	sp->batch_size = batch_size;
	sp->frequent = frequent;
	sp->out = out;
	return DT_OK;
}

dt_err
dt_speedometer_update(dt_speedometer *sp, int epoch, long nbatch,
                      dt_metric *metric, int *printed)
{
	uint64_t now = dt__now_ns();
	int n;

	if (printed)
		*printed = 0;
	/* A new epoch restarts the count: start timing again. */
	if (sp->last_count > nbatch)
		sp->started = 0;
	sp->last_count = nbatch;
	if (!sp->started) {
		sp->started = 1;
		sp->tic_ns = now;
		return DT_OK;
	}
	if (nbatch % sp->frequent != 0)
		return DT_OK;
	{
		double dt = (double)(now - sp->tic_ns) * 1e-9;
		double speed = dt > 0.0 ? (double)sp->frequent *
		                              (double)sp->batch_size / dt
		                        : 0.0;

		sp->speed = speed;

		n = snprintf(sp->line, sizeof(sp->line),
		             "Epoch[%d] Batch [%ld-%ld] Speed: %.2f "
		             "samples/sec",
		             epoch, nbatch - sp->frequent, nbatch, speed);
		if (metric && n > 0 && (size_t)n < sizeof(sp->line))
			snprintf(sp->line + n, sizeof(sp->line) - (size_t)n,
			         " %s=%f", dt_metric_name(metric),
			         dt_metric_get(metric));
	}
	if (metric)
		dt_metric_reset(metric);
	if (sp->out) {
		fprintf(sp->out, "%s\n", sp->line);
		fflush(sp->out);
	}
	sp->tic_ns = now;
	if (printed)
		*printed = 1;
	return DT_OK;
}
