/*
 * backends.c - the table of back-ends, in the order `--launcher` lists
 * them. A new back-end is a file be_<name>.c and a line here.
 */
#include "cli/launch/launch.h"

const struct dl_backend *const dl_backends[] = {&dl_local, &dl_ssh, &dl_mpi,
                                                &dl_slurm};
const size_t dl_nbackends = DT_ARRAY_LEN(dl_backends);
