/*
 * layers.h - the layer and loss kernels of the trainer (private).
 *
 * Each layer is a forward/backward pair over plain float arrays, as in
 * llm.c; model.c strings them together over its buffers, and the unit tests
 * call them directly against naive references and finite differences.
 *
 * Layouts. A sample-major array is (B, C, H, W) — what callers pass in and
 * what dense layers use. Convolutions write channel-major (C, B, H, W), so
 * that one sgemm covers the whole batch: the output of W (M, K) x col (K,
 * B*OH*OW) IS the (M, B, OH, OW) array, with no reordering. A spatial input
 * is described by two strides (channel stride cs, batch stride bs), which
 * covers both layouts: sample-major cs = H*W, bs = C*H*W; channel-major
 * cs = B*H*W, bs = H*W. Pooling and elementwise layers keep the layout;
 * flatten turns channel-major into sample-major.
 *
 * Gradients of parameters are accumulated (+=); gradients of activations
 * are written (=). Elementwise backward passes may run in place (dx == dy).
 */
#ifndef DT_NN_LAYERS_H
#define DT_NN_LAYERS_H

#include <stddef.h>
#include <stdint.h>

/* A 2-D convolution or pooling geometry for one input plane. */
typedef struct nn_conv_shape {
	int c, h, w;   /* input channels, height, width */
	int m;         /* output channels (conv) */
	int k, s, p;   /* kernel, stride, zero padding */
	int oh, ow;    /* output height, width */
	int batch;     /* B */
	size_t cs, bs; /* input strides of a channel and a sample */
} nn_conv_shape;

/* Output size of a window of k with stride s and padding p over n. */
static inline int
nn_out_dim(int n, int k, int s, int p)
{
	return (n + 2 * p - k) / s + 1;
}

/* col (C*K*K, B*OH*OW) <- patches of x; rows ordered (c, ki, kj). */
void nn_im2col(const float *x, const nn_conv_shape *sh, float *col);
/* dx += the patches of dcol scattered back (dx in the layout of x). */
void nn_col2im(const float *dcol, const nn_conv_shape *sh, float *dx);

/*
 * conv2d. x in the layout given by sh->cs/bs; w (M, C, K, K); b (M);
 * col scratch (C*K*K, B*OH*OW) kept for backward; out (M, B, OH, OW).
 */
void nn_conv2d_forward(const float *x, const float *w, const float *b,
                       const nn_conv_shape *sh, float *col, float *out);
/*
 * dout (M, B, OH, OW). dw, db += ; dx = (zeroed here, then col2im), skipped
 * when dx is NULL. col holds the forward's im2col and is overwritten.
 */
void nn_conv2d_backward(const float *dout, const float *w,
                        const nn_conv_shape *sh, float *col, float *dw,
                        float *db, float *dx);

/* dense: x (B, K), w (N, K), b (N) -> out (B, N). */
void nn_dense_forward(const float *x, const float *w, const float *b, int B,
                      int K, int N, float *out);
/* dw, db += ; dx = dout * w (skipped when dx is NULL). */
void nn_dense_backward(const float *dout, const float *x, const float *w, int B,
                       int K, int N, float *dw, float *db, float *dx);

/*
 * max-pool over `planes` planes of (h, w), window k stride s, no padding;
 * arg (planes*oh*ow) records the index of the max within each input plane.
 */
void nn_maxpool_forward(const float *x, size_t planes, int h, int w, int k,
                        int s, float *out, int32_t *arg);
/* dx = 0 then dx[arg] += dout. */
void nn_maxpool_backward(const float *dout, const int32_t *arg, size_t planes,
                         int h, int w, int k, int s, float *dx);

/* Elementwise, n floats; x may equal out, dout may equal dx. */
void nn_relu_forward(const float *x, size_t n, float *out);
void nn_relu_backward(const float *dout, const float *out, size_t n, float *dx);
void nn_tanh_forward(const float *x, size_t n, float *out);
void nn_tanh_backward(const float *dout, const float *out, size_t n, float *dx);
/* mask holds 0 or 1/(1-rate) per element, drawn from *rng. */
void nn_dropout_forward(const float *x, size_t n, float rate, uint64_t *rng,
                        float *mask, float *out);
void nn_dropout_backward(const float *dout, const float *mask, size_t n,
                         float *dx);

/* (C, B, HW) channel-major -> (B, C*HW) sample-major, and back. */
void nn_flatten_forward(const float *x, int C, int B, size_t hw, float *out);
void nn_flatten_backward(const float *dout, int C, int B, size_t hw, float *dx);

/*
 * Losses over logits/predictions (B, N). Each returns the loss SUMMED over
 * the batch and writes the gradient of that sum into dlogits (may be NULL
 * for evaluation). Labels are checked by the caller.
 *   softmax_ce: -sum_b log softmax(z_b)[y_b]; dz = softmax(z) - onehot(y).
 *     *correct (may be NULL) counts arg-max hits.
 *   l2: sum 0.5 * (p - y)^2; dp = p - y   (MXNet's L2Loss / LinearRegression)
 *   l1: sum |p - y|;         dp = sign(p - y)
 */
double nn_softmax_ce(const float *z, const float *y, int B, int N,
                     float *dlogits, int *correct);
double nn_l2_loss(const float *p, const float *y, int B, int N, float *dp);
double nn_l1_loss(const float *p, const float *y, int B, int N, float *dp);

/*
 * The portable PRNG of the trainer: splitmix64 (Steele, Lea, Flood 2014),
 * the same numbers on every machine. Streams for different purposes are
 * separated by hashing (seed, purpose, index) through nn_mix().
 */
static inline uint64_t
nn_rng_next(uint64_t *state)
{
	uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static inline uint64_t
nn_mix(uint64_t a, uint64_t b)
{
	uint64_t s = a ^ (b * 0xd1b54a32d192ed03ull + 0x8bb84b93962eacc9ull);

	return nn_rng_next(&s);
}

/* Uniform in [0, 1) with 24 random bits: exact in float. */
static inline float
nn_rng_uniform(uint64_t *state)
{
	return (float)(nn_rng_next(state) >> 40) * (1.0f / 16777216.0f);
}

/* Uniform integer in [0, bound), bound > 0, without modulo bias (Lemire's
 * multiply-shift with rejection). */
static inline uint64_t
nn_rng_below(uint64_t *state, uint64_t bound)
{
	uint64_t x = nn_rng_next(state);
	unsigned __int128 mprod = (unsigned __int128)x * bound;
	uint64_t low = (uint64_t)mprod;

	if (low < bound) {
		uint64_t t = -bound % bound;

		while (low < t) {
			x = nn_rng_next(state);
			mprod = (unsigned __int128)x * bound;
			low = (uint64_t)mprod;
		}
	}
	return (uint64_t)(mprod >> 64);
}

#endif
