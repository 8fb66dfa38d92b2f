/*
 * blas.c - OpenBLAS set up for the trainer.
 *
 * OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels when it is
 * loaded, from the processor's family and model. A model newer than its
 * release (Debian 12 ships 0.3.21, from 2022) falls back to the Prescott
 * kernels, SSE3 only, even on a processor with AVX-512: LeNet then trains
 * about 2.8 times slower than with the SkylakeX kernels on the same
 * machine (a Xeon of family 6 model 207). The choice is made before any
 * code of ours runs and cannot be changed afterwards; OPENBLAS_CORETYPE,
 * read at load, overrides it. So we only tell: once per process, naming
 * the value to set. Setting it differently for different processes of a
 * job would make their sums differ in the last bits, so we never set it
 * behind the user's back (`make demo` and `make test` set it for every
 * process they start).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <cblas.h>

#include "common/util.h"
#include "nn/blas.h"

/* OpenBLAS's fall-backs for a processor it does not recognise, and the
 * older cores that one of them could be mistaken for. */
static const char *const generic[] = {
    "prescott", "core2",  "penryn",     "dunnington", "nehalem",
    "atom",     "katmai", "coppermine", "northwood",  "banias",
};

const char *
dt__nn_blas_better_core(const char **now)
{
	const char *name = openblas_get_corename();
	int fell_back = 0;

	if (now)
		*now = name ? name : "?";
	if (!name || getenv("OPENBLAS_CORETYPE"))
		return NULL;
	for (size_t i = 0; i < sizeof(generic) / sizeof(generic[0]); i++)
		if (strcasecmp(name, generic[i]) == 0)
			fell_back = 1;
	if (!fell_back)
		return NULL;
#if defined(__x86_64__) && defined(__GNUC__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") &&
	    __builtin_cpu_supports("avx512bw") &&
	    __builtin_cpu_supports("avx512vl") &&
	    __builtin_cpu_supports("avx512dq"))
		return "SkylakeX";
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return "Haswell";
	if (__builtin_cpu_supports("avx") && strcasecmp(name, "nehalem") != 0)
		return "Sandybridge";
#endif
	return NULL;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;

static void
setup(void)
{
	const char *now, *better;

	openblas_set_num_threads(1);
	if ((better = dt__nn_blas_better_core(&now)) != NULL)
		dt__log(0,
		        "OpenBLAS does not know this processor and runs its "
		        "%s kernels; its %s kernels fit it and are several "
		        "times faster: set OPENBLAS_CORETYPE=%s for every "
		        "process of the job (docs/training.md)",
		        now, better, better);
}

void
dt__nn_blas_setup(void)
{
	pthread_once(&once, setup);
}
