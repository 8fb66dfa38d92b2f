/*
 * blas.h - the BLAS the trainer's layers call (OpenBLAS), set up once per
 * process: one thread per call (the job's processes are the parallelism),
 * and a check that OpenBLAS chose kernels fit for this processor.
 */
#ifndef DT_NN_BLAS_H
#define DT_NN_BLAS_H

/* Once per process, before the first BLAS call: one thread, and a warning
 * (logged once) when OpenBLAS runs slower kernels than the processor
 * allows (see dt__nn_blas_better_core). */
void dt__nn_blas_setup(void);

/*
 * The OpenBLAS core type (a value for OPENBLAS_CORETYPE) this processor
 * can run when OpenBLAS fell back to an old generic one because it does
 * not know the processor's model; NULL when OpenBLAS's choice is fine or
 * OPENBLAS_CORETYPE is set. *now, when not NULL, gets OpenBLAS's choice.
 */
const char *dt__nn_blas_better_core(const char **now);

#endif
