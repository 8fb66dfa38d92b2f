/*
 * loss.c - the losses of the trainer: softmax cross-entropy, L2 and L1.
 *
 * Each returns the loss SUMMED over the batch and the gradient of that sum,
 * not of the mean: in data-parallel training the per-worker sums are added
 * by the KVStore and the optimizer's rescale_grad = 1/(global batch) makes
 * the mean, as MXNet's Module does. Losses are accumulated in double so the
 * reported value does not depend on the batch size through rounding.
 * Labels are validated by model.c before any gradient is written.
 */
#include <math.h>
#include <stddef.h>

#include "nn/layers.h"

double
nn_softmax_ce(const float *z, const float *y, int B, int N, float *dlogits,
              int *correct)
{
	double loss = 0.0;
	int hits = 0;

	for (int b = 0; b < B; b++) {
		const float *zb = z + (size_t)b * N;
		int label = (int)y[b];
		int arg = 0;
		float mx = zb[0];
		double sum = 0.0;

		for (int j = 1; j < N; j++) {
			if (zb[j] > mx) {
				mx = zb[j];
				arg = j;
			}
		}
		hits += arg == label;
		for (int j = 0; j < N; j++)
			sum += exp((double)zb[j] - mx);
		/* -log softmax(z)[y] = log(sum exp(z - max)) - (z[y] - max) */
		loss += log(sum) - ((double)zb[label] - mx);
		if (dlogits != NULL) {
			float *d = dlogits + (size_t)b * N;

			for (int j = 0; j < N; j++)
				d[j] = (float)(exp((double)zb[j] - mx) / sum);
			d[label] -= 1.0f;
		}
	}
	if (correct != NULL)
		*correct = hits;
	return loss;
}

double
nn_l2_loss(const float *p, const float *y, int B, int N, float *dp)
{
	const size_t n = (size_t)B * N;
	double loss = 0.0;

	for (size_t i = 0; i < n; i++) {
		float d = p[i] - y[i];

		loss += 0.5 * (double)d * d;
		if (dp != NULL)
			dp[i] = d;
	}
	return loss;
}

double
nn_l1_loss(const float *p, const float *y, int B, int N, float *dp)
{
	const size_t n = (size_t)B * N;
	double loss = 0.0;

	for (size_t i = 0; i < n; i++) {
		float d = p[i] - y[i];

		loss += fabs((double)d);
		if (dp != NULL)
			dp[i] = d > 0.0f ? 1.0f : (d < 0.0f ? -1.0f : 0.0f);
	}
	return loss;
}
