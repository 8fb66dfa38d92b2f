/*
 * pipe.h - what the pipeline's files share (private): pipeline.c runs a
 * stage's step, pipe_replicas.c sums a stage's gradients over the
 * replicas of the pipeline.
 */
#ifndef DT_NN_PIPE_H
#define DT_NN_PIPE_H

#include "dtrain/nn.h"

/* This rank's place in the grid of replicas x stages is in range. */
int dt__nn_pipe_grid_ok(const dt_nn_pipe_cfg *c);

#endif
