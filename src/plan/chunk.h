/* chunk.h — the model's first layers a slice of the batch at a time.
 *
 * The layers from the input up to the first one that mixes samples (a
 * norm over the batch, the loss) compute each sample on its own; their activations
 * at full resolution are often the step's largest tensors (a first
 * convolution's output, its gradient). With cfg.chunks = K those layers run
 * K times in the forward pass, each time on one slice of the batch, writing
 * their slice of the last one's output; the backward pass recomputes each
 * slice's activations and runs its backward, adding its share into the
 * weights' gradients. Full-batch activations inside the run never exist:
 * only a slice's, one slice at a time. The gradients are the same sums taken
 * in slices (as with accumulation: equal up to the order of additions). */
#ifndef HR_CHUNK_H
#define HR_CHUNK_H

#include "plan/program.h"

/* The nodes [from, end) of g that can run in slices of the batch that
 * `input` holds (end == from: none; -1: out of memory), and the one tensor
 * of theirs that later nodes (or the host: `keep`, -1 for none) read
 * (*out): nodes whose op computes each sample alone (hr_op_desc.per_sample),
 * in inference those whose training mixes samples or draws masks too. */
int hr_chunk_segment(const hr_graph *g, int from, int input, int keep, int *out);

/* The most slices a step may ask for: each adds its layers' nodes (forward,
 * recomputation, backward) to the program, which is planned in time and
 * host memory that grow with them (50,000 slices: 10 s and gigabytes). */
#define HR_MAX_CHUNKS 4096

/* Runs the nodes of hr_chunk_segment in `chunks` slices (fewer when the
 * batch is small: each slice starts on an HR_ALIAS_ALIGN boundary of the
 * input and the output; one slice is no rewrite). Call on a forward pass before
 * autodiff, or on the evaluation pass; *done gets the slices made (0:
 * none), *slice their samples (the last one the rest), and layers[l] (nl
 * bools, may be NULL) is set for every layer that runs in slices. */
hr_status hr_chunk_apply(hr_program *p, int from, int input, int keep, int chunks, int *done, int64_t *slice,
                         bool *layers);

#endif
