/*
 * layers.c - forward/backward kernels of the trainer's layers.
 *
 * Convolutions are im2col + one cblas_sgemm over the whole batch (layers.h
 * explains the channel-major layout that makes this possible without a
 * reordering pass); dense layers are one sgemm each way. The remaining
 * layers are simple loops written so the compiler can vectorise them. No
 * kernel allocates memory or keeps state: model.c owns every buffer, which
 * is what lets several replicas run in parallel threads.
 *
 * Every reduction here runs in a fixed order, so results do not depend on
 * the number of threads; sgemm is deterministic with OpenBLAS on one thread
 * (model.c sets it).
 */
#include <math.h>
#include <string.h>

#include <cblas.h>

#include "nn/layers.h"

/*
 * Loops over runtime lengths are written as blocks of 8 through a small
 * temporary: GCC's -O2 vectoriser (the "very cheap" model) leaves plain
 * loops of unknown length scalar, but its SLP pass turns each block into
 * vector instructions. The arithmetic is the same either way.
 */
#define BLK 8

static inline void
copy_floats(float *d, const float *s, int n)
{
	int i = 0;

	for (; i + BLK <= n; i += BLK) {
		float t[BLK];

		for (int j = 0; j < BLK; j++)
			t[j] = s[i + j];
		for (int j = 0; j < BLK; j++)
			d[i + j] = t[j];
	}
	for (; i < n; i++)
		d[i] = s[i];
}

static inline void
add_floats(float *d, const float *s, int n)
{
	int i = 0;

	for (; i + BLK <= n; i += BLK) {
		float t[BLK];

		for (int j = 0; j < BLK; j++)
			t[j] = d[i + j] + s[i + j];
		for (int j = 0; j < BLK; j++)
			d[i + j] = t[j];
	}
	for (; i < n; i++)
		d[i] += s[i];
}

static inline void
fill_floats(float *d, float v, size_t n)
{
	size_t i = 0;

	for (; i + BLK <= n; i += BLK)
		for (int j = 0; j < BLK; j++)
			d[i + j] = v;
	for (; i < n; i++)
		d[i] = v;
}

/*
 * Sum of n floats in a fixed order: eight interleaved float partial sums
 * (which the compiler can keep in one vector register) combined in double.
 */
static double
sum_floats(const float *x, size_t n)
{
	float acc[8] = {0};
	size_t i = 0;
	double s = 0.0;

	for (; i + 8 <= n; i += 8)
		for (int j = 0; j < 8; j++)
			acc[j] += x[i + j];
	for (int j = 0; j < 8; j++)
		s += acc[j];
	for (; i < n; i++)
		s += x[i];
	return s;
}

/*
 * For a stride of 1, the output columns ox whose input column
 * ix = ox + kj - p lies inside the image: [lo, hi).
 */
static inline void
valid_cols(const nn_conv_shape *sh, int kj, int *lo, int *hi)
{
	*lo = sh->p - kj > 0 ? sh->p - kj : 0;
	*hi = sh->w + sh->p - kj < sh->ow ? sh->w + sh->p - kj : sh->ow;
	if (*hi < *lo)
		*hi = *lo;
}

/*
 * One patch of im2col: the OH x OW values that kernel offset (ki, kj) sees
 * in the input plane xp of one channel and one sample, zero off the edges.
 */
static void
im2col_patch(const float *xp, const nn_conv_shape *sh, int ki, int kj, float *d)
{
	const int ow = sh->ow;
	int lo, hi;

	valid_cols(sh, kj, &lo, &hi);
	for (int oy = 0; oy < sh->oh; oy++, d += ow) {
		int iy = oy * sh->s + ki - sh->p;
		const float *src;

		if (iy < 0 || iy >= sh->h) {
			fill_floats(d, 0.0f, (size_t)ow);
			continue;
		}
		src = xp + (size_t)iy * sh->w;
		if (sh->s != 1) {
			for (int ox = 0; ox < ow; ox++) {
				int ix = ox * sh->s + kj - sh->p;

				d[ox] = (ix >= 0 && ix < sh->w) ? src[ix] : 0;
			}
			continue;
		}
		for (int ox = 0; ox < lo; ox++)
			d[ox] = 0.0f;
		copy_floats(d + lo, src + (lo + kj - sh->p), hi - lo);
		for (int ox = hi; ox < ow; ox++)
			d[ox] = 0.0f;
	}
}

/* The transpose of im2col_patch: add the patch d back into plane dxp. */
static void
col2im_patch(const float *d, const nn_conv_shape *sh, int ki, int kj,
             float *dxp)
{
	const int ow = sh->ow;
	int lo, hi;

	valid_cols(sh, kj, &lo, &hi);
	for (int oy = 0; oy < sh->oh; oy++, d += ow) {
		int iy = oy * sh->s + ki - sh->p;
		float *dst;

		if (iy < 0 || iy >= sh->h)
			continue;
		dst = dxp + (size_t)iy * sh->w;
		if (sh->s != 1) {
			for (int ox = 0; ox < ow; ox++) {
				int ix = ox * sh->s + kj - sh->p;

				if (ix >= 0 && ix < sh->w)
					dst[ix] += d[ox];
			}
			continue;
		}
		add_floats(dst + (lo + kj - sh->p), d + lo, hi - lo);
	}
}

void
nn_im2col(const float *x, const nn_conv_shape *sh, float *col)
{
	const size_t hw = (size_t)sh->oh * sh->ow;
	const size_t ncol = (size_t)sh->batch * hw;
	const int k = sh->k;

	for (int c = 0; c < sh->c; c++) {
		for (int ki = 0; ki < k; ki++) {
			for (int kj = 0; kj < k; kj++) {
				size_t r = (size_t)(c * k + ki) * k + kj;

				for (int b = 0; b < sh->batch; b++)
					im2col_patch(
					    x + c * sh->cs + b * sh->bs, sh, ki,
					    kj, col + r * ncol + b * hw);
			}
		}
	}
}

void
nn_col2im(const float *dcol, const nn_conv_shape *sh, float *dx)
{
	const size_t hw = (size_t)sh->oh * sh->ow;
	const size_t ncol = (size_t)sh->batch * hw;
	const int k = sh->k;

	for (int c = 0; c < sh->c; c++) {
		for (int ki = 0; ki < k; ki++) {
			for (int kj = 0; kj < k; kj++) {
				size_t r = (size_t)(c * k + ki) * k + kj;

				for (int b = 0; b < sh->batch; b++)
					col2im_patch(
					    dcol + r * ncol + b * hw, sh, ki,
					    kj, dx + c * sh->cs + b * sh->bs);
			}
		}
	}
}

void
nn_conv2d_forward(const float *x, const float *w, const float *b,
                  const nn_conv_shape *sh, float *col, float *out)
{
	const int K = sh->c * sh->k * sh->k;
	const size_t ncol = (size_t)sh->batch * sh->oh * sh->ow;

	nn_im2col(x, sh, col);
	/* out (M, B*OH*OW) = bias broadcast, then += w (M, K) x col. */
	for (int m = 0; m < sh->m; m++)
		fill_floats(out + (size_t)m * ncol, b[m], ncol);
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, sh->m, (int)ncol,
	            K, 1.0f, w, K, col, (int)ncol, 1.0f, out, (int)ncol);
}

void
nn_conv2d_backward(const float *dout, const float *w, const nn_conv_shape *sh,
                   float *col, float *dw, float *db, float *dx)
{
	const int K = sh->c * sh->k * sh->k;
	const size_t ncol = (size_t)sh->batch * sh->oh * sh->ow;

	for (int m = 0; m < sh->m; m++)
		db[m] += (float)sum_floats(dout + (size_t)m * ncol, ncol);
	/* dw (M, K) += dout (M, ncol) x col^T (ncol, K) */
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, sh->m, K,
	            (int)ncol, 1.0f, dout, (int)ncol, col, (int)ncol, 1.0f, dw,
	            K);
	if (dx == NULL)
		return;
	/* The forward's columns are no longer needed: reuse them for
	 * dcol (K, ncol) = w^T (K, M) x dout (M, ncol). */
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, (int)ncol,
	            sh->m, 1.0f, w, K, dout, (int)ncol, 0.0f, col, (int)ncol);
	memset(dx, 0,
	       sizeof(float) * (size_t)sh->c * sh->batch * sh->h * sh->w);
	nn_col2im(col, sh, dx);
}

void
nn_dense_forward(const float *x, const float *w, const float *b, int B, int K,
                 int N, float *out)
{
	for (int i = 0; i < B; i++)
		memcpy(out + (size_t)i * N, b, sizeof(float) * N);
	/* out (B, N) += x (B, K) x w^T (K, N) */
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, N, K, 1.0f, x,
	            K, w, K, 1.0f, out, N);
}

void
nn_dense_backward(const float *dout, const float *x, const float *w, int B,
                  int K, int N, float *dw, float *db, float *dx)
{
	for (int i = 0; i < B; i++)
		add_floats(db, dout + (size_t)i * N, N);
	/* dw (N, K) += dout^T (N, B) x x (B, K) */
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, K, B, 1.0f,
	            dout, N, x, K, 1.0f, dw, K);
	/* dx (B, K) = dout (B, N) x w (N, K) */
	if (dx != NULL)
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, K, N,
		            1.0f, dout, N, w, K, 0.0f, dx, K);
}

void
nn_maxpool_forward(const float *x, size_t planes, int h, int w, int k, int s,
                   float *out, int32_t *arg)
{
	const int oh = nn_out_dim(h, k, s, 0), ow = nn_out_dim(w, k, s, 0);
	const size_t in_hw = (size_t)h * w, out_hw = (size_t)oh * ow;

	/* The first maximum of a window wins; a NaN in first place stays. */
	for (size_t pl = 0; pl < planes; pl++) {
		const float *xp = x + pl * in_hw;
		float *op = out + pl * out_hw;
		int32_t *ap = arg + pl * out_hw;

		for (int oy = 0; oy < oh; oy++) {
			if (k == 2 && s == 2) {
				/* LeNet's pooling, without branches: the
				 * maximum of each row pair, then of the two
				 * rows (the first row wins ties, as the first
				 * maximum in row-major order must). */
				const float *r0 = xp + (size_t)2 * oy * w;
				const float *r1 = r0 + w;

				for (int ox = 0; ox < ow; ox++) {
					float a = r0[2 * ox],
					      b = r0[2 * ox + 1];
					float c = r1[2 * ox],
					      d = r1[2 * ox + 1];
					float v0 = b > a ? b : a;
					float v1 = d > c ? d : c;
					int jb = b > a, jd = d > c;
					int lower = v1 > v0;

					/* Arithmetic, not ?:, for the index:
					 * the compiler branches on ?: here. */
					op[oy * ow + ox] = v1 > v0 ? v1 : v0;
					ap[oy * ow + ox] =
					    2 * oy * w + 2 * ox + jb +
					    lower * (w + jd - jb);
				}
				continue;
			}
			for (int ox = 0; ox < ow; ox++) {
				int y0 = oy * s, x0 = ox * s;
				int best = y0 * w + x0;
				float v = xp[best];

				for (int i = 0; i < k; i++) {
					for (int j = 0; j < k; j++) {
						int idx = (y0 + i) * w + x0 + j;

						if (xp[idx] > v) {
							v = xp[idx];
							best = idx;
						}
					}
				}
				op[oy * ow + ox] = v;
				ap[oy * ow + ox] = best;
			}
		}
	}
}

void
nn_maxpool_backward(const float *dout, const int32_t *arg, size_t planes, int h,
                    int w, int k, int s, float *dx)
{
	const int oh = nn_out_dim(h, k, s, 0), ow = nn_out_dim(w, k, s, 0);
	const size_t in_hw = (size_t)h * w, out_hw = (size_t)oh * ow;

	if (k == 2 && s == 2 && h == 2 * oh && w == 2 * ow) {
		/* Windows tile the input: clear each window and place its
		 * gradient in one pass, instead of a memset and a scatter. */
		for (size_t pl = 0; pl < planes; pl++) {
			const float *dp = dout + pl * out_hw;
			const int32_t *ap = arg + pl * out_hw;
			float *xp = dx + pl * in_hw;

			for (int oy = 0; oy < oh; oy++) {
				for (int ox = 0; ox < ow; ox++) {
					int i0 = 2 * oy * w + 2 * ox;

					xp[i0] = xp[i0 + 1] = 0.0f;
					xp[i0 + w] = xp[i0 + w + 1] = 0.0f;
					xp[ap[oy * ow + ox]] = dp[oy * ow + ox];
				}
			}
		}
		return;
	}
	memset(dx, 0, sizeof(float) * planes * in_hw);
	for (size_t pl = 0; pl < planes; pl++) {
		const float *dp = dout + pl * out_hw;
		const int32_t *ap = arg + pl * out_hw;
		float *xp = dx + pl * in_hw;

		for (size_t i = 0; i < out_hw; i++)
			xp[ap[i]] += dp[i];
	}
}

void
nn_relu_forward(const float *x, size_t n, float *out)
{
	size_t i = 0;

	for (; i + BLK <= n; i += BLK) {
		float t[BLK];

		for (int j = 0; j < BLK; j++)
			t[j] = x[i + j] > 0.0f ? x[i + j] : 0.0f;
		for (int j = 0; j < BLK; j++)
			out[i + j] = t[j];
	}
	for (; i < n; i++)
		out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void
nn_relu_backward(const float *dout, const float *out, size_t n, float *dx)
{
	size_t i = 0;

	/* dx = out > 0 ? dout : 0 as a bit mask: written with ?: the
	 * compiler loads dout conditionally and branches on random data. */
	for (; i + BLK <= n; i += BLK) {
		uint32_t g[BLK], t[BLK];
		float o[BLK];

		memcpy(g, dout + i, sizeof(g));
		memcpy(o, out + i, sizeof(o));
		for (int j = 0; j < BLK; j++)
			t[j] = g[j] & (0u - (uint32_t)(o[j] > 0.0f));
		memcpy(dx + i, t, sizeof(t));
	}
	for (; i < n; i++)
		dx[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

void
nn_tanh_forward(const float *x, size_t n, float *out)
{
	for (size_t i = 0; i < n; i++)
		out[i] = tanhf(x[i]);
}

void
nn_tanh_backward(const float *dout, const float *out, size_t n, float *dx)
{
	size_t i = 0;

	for (; i + BLK <= n; i += BLK) {
		float t[BLK];

		for (int j = 0; j < BLK; j++)
			t[j] = dout[i + j] * (1.0f - out[i + j] * out[i + j]);
		for (int j = 0; j < BLK; j++)
			dx[i + j] = t[j];
	}
	for (; i < n; i++)
		dx[i] = dout[i] * (1.0f - out[i] * out[i]);
}

void
nn_dropout_forward(const float *x, size_t n, float rate, uint64_t *rng,
                   float *mask, float *out)
{
	/* MXNet's Dropout: keep with probability 1 - rate and scale the kept
	 * values by 1 / (1 - rate), so inference needs no rescaling. */
	const float keep = 1.0f / (1.0f - rate);

	for (size_t i = 0; i < n; i++) {
		mask[i] = nn_rng_uniform(rng) >= rate ? keep : 0.0f;
		out[i] = x[i] * mask[i];
	}
}

void
nn_dropout_backward(const float *dout, const float *mask, size_t n, float *dx)
{
	for (size_t i = 0; i < n; i++)
		dx[i] = dout[i] * mask[i];
}

void
nn_flatten_forward(const float *x, int C, int B, size_t hw, float *out)
{
	for (int c = 0; c < C; c++)
		for (int b = 0; b < B; b++)
			memcpy(out + ((size_t)b * C + c) * hw,
			       x + ((size_t)c * B + b) * hw,
			       sizeof(float) * hw);
}

void
nn_flatten_backward(const float *dout, int C, int B, size_t hw, float *dx)
{
	for (int c = 0; c < C; c++)
		for (int b = 0; b < B; b++)
			memcpy(dx + ((size_t)c * B + b) * hw,
			       dout + ((size_t)b * C + c) * hw,
			       sizeof(float) * hw);
}
