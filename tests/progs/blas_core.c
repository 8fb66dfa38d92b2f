/*
 * blas_core.c - prints the kernels OpenBLAS chose for this processor and
 * the widest vector instructions the processor has, as
 * "<corename> <avx512|avx2|none>". The tests that compare trainings of
 * different batch shapes (blas_env.bash) use it to see whether OpenBLAS
 * fell back to its generic kernels on a processor it does not know.
 */
#include <cblas.h>
#include <stdio.h>

int
main(void)
{
	const char *isa = "none";

	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f"))
		isa = "avx512";
	else if (__builtin_cpu_supports("avx2"))
		isa = "avx2";
	printf("%s %s\n", openblas_get_corename(), isa);
	return 0;
}
