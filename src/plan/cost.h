/* cost.h — predicted step times: each node's time measured once on this
 * device for its shapes (cached on disk, keyed by device, driver and headroom
 * version), else estimated from its FLOP and byte counts (the op's `work`).
 *
 *     hr_cost_model *cm = hr_cost_model_new(HR_DEVICE_CUDA, "NVIDIA H100 80GB HBM3", "550.54.15");
 *     if (!cm) return hr_last_status();              // out of memory only
 *     // once per device and shapes, on a throwaway session (exec/calibrate.c):
 *     hr_cost_measure(scratch_session, cm, 10);      // times its nodes, saves the cache
 *     double step_s = hr_cost_step(cm, &program);    // any program of those shapes (or others: estimated)
 *     int measured, estimated;
 *     hr_cost_count(cm, &program, &measured, &estimated);
 *     hr_cost_model_free(cm);
 *
 * A node's key is its op, activation type, the types and shapes of its
 * inputs and outputs, and the attributes that change its work (kernel,
 * stride, padding, training, accumulation, in place); a node of the same key
 * costs the same. An unmeasured node is its roofline estimate, max(flops /
 * peak, bytes / bandwidth) plus a launch, times what the measured nodes of
 * its op and type took against their own estimates (nearer sizes weigh more).
 *
 * The cache: one text file per device, driver and version, in $HR_CACHE_DIR,
 * else $XDG_CACHE_HOME/headroom, else ~/.cache/headroom; a line a key,
 * "KEY\tSECONDS\tFLOPS\tBYTES\tMATMUL". A file that is corrupt or unreadable
 * is ignored with one warning; one that can't be written is a warning. */
#ifndef HR_COST_H
#define HR_COST_H

#include "plan/program.h"


typedef struct hr_cost_model hr_cost_model;

/* The model for a device: its peaks from a table (by name; CPU: a modest
 * default) and the cache's times for (device_name, driver, HR_VERSION).
 * device_name NULL: the CPU's model name (/proc/cpuinfo), or "cuda";
 * driver NULL: "none". NULL only when out of memory (error set). */
hr_cost_model *hr_cost_model_new(hr_device dev_kind, const char *device_name, const char *driver);
void hr_cost_model_free(hr_cost_model *cm);
/* The cache file this model reads and writes. */
const char *hr_cost_cache_path(const hr_cost_model *cm);

/* What node n computes and moves: its op's work, or the default (its tensors'
 * bytes, one flop an output value). */
hr_work hr_cost_work(const hr_graph *g, const hr_node *n);
/* Seconds of node n: measured for its key if known, else estimated. */
double hr_cost_node(const hr_cost_model *cm, const hr_graph *g, const hr_node *n);
bool hr_cost_node_measured(const hr_cost_model *cm, const hr_graph *g, const hr_node *n);
/* The roofline estimate alone (no correction from measured nodes). */
double hr_cost_estimate(const hr_cost_model *cm, const hr_graph *g, const hr_node *n);
/* Predicted seconds of one optimizer step of p: accumulate x (forward and
 * backward nodes) + the update, and what a step does between nodes (the
 * batch's upload on the CPU, a sync a pass on a GPU); the evaluation pass is
 * left out. */
double hr_cost_step(const hr_cost_model *cm, const hr_program *p);
/* How many of p's step nodes [0, n_step) are measured and estimated. */
void hr_cost_count(const hr_cost_model *cm, const hr_program *p, int *measured, int *estimated);

/* Records a measurement: node n took `seconds`. The first this model
 * records for a key replaces the cache's; later ones are averaged with it.
 * HR_ERR_OOM (error set) when out of memory. */
hr_status hr_cost_record(hr_cost_model *cm, const hr_graph *g, const hr_node *n, double seconds);
/* Records what one pass of p (a micro-batch's forward and backward) took
 * beyond its nodes' times: a measured step less its nodes, over its passes. */
hr_status hr_cost_record_pass(hr_cost_model *cm, const hr_program *p, double seconds);
/* Writes the cache: what is on disk, merged with this model's times (which
 * win), written whole to a temporary file that replaces it. A failure is a
 * warning on stderr and HR_ERR_IO (error set); the model keeps its times. */
hr_status hr_cost_save(hr_cost_model *cm);

/* Node n's key into buf (truncated to n_buf - 1 characters); buf. */
const char *hr_cost_key(const hr_graph *g, const hr_node *n, char *buf, size_t n_buf);

#endif
