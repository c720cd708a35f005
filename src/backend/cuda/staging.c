/* staging.c — the batch's way to the device: pinned double-buffered slots on
 * a copy stream, and the input in pieces that its reader takes as they come. */
#include "backend/cuda/hr_cuda.h"

#include <omp.h>
#include <string.h>

/* ---- the pinned slots ---------------------------------------------------------- */
/* Two slots, each of set_batch's input and labels, so that the host may stage
 * the next batch while the copy of this one runs; none past this size (the
 * uploads then go straight, in order). */
#define HR_PINNED_SLOT_MAX ((size_t)1 << 30)

hr_status hr_cuda_staging_alloc(hr_cuda *c) {
    char a[32];
    size_t slot = c->want_slot;
    if (slot == 0 || slot > HR_PINNED_SLOT_MAX) return HR_OK;
    void *pin = NULL;
    if (hr_fault_should_fail(HR_MEM_PINNED))
        return hr_error_set(HR_ERR_OOM, "could not pin %zu bytes of host memory for batch staging: injected fault",
                            2 * slot);
    cudaError_t e = cudaHostAlloc(&pin, 2 * slot + HR_ALIGN, cudaHostAllocDefault); /* + the losses' slots */
    c->allocs++;
    if (e != cudaSuccess) {
        cudaGetLastError();
        return hr_error_set(HR_ERR_OOM, "could not pin %s (%zu bytes) of host memory for batch staging: %s",
                            hr_format_bytes(2 * slot, a, sizeof a), 2 * slot, cudaGetErrorString(e));
    }
    c->pinned = pin;
    c->slot_bytes = slot;
    c->loss_pin = (float *)(c->pinned + 2 * slot);
    c->fill[0] = c->fill[1] = 0;
    c->cur = 0;
    return HR_OK;
}

void hr_cuda_staging_free(hr_cuda *c) {
    if (c->pinned) cudaFreeHost(c->pinned);
    c->pinned = NULL;
    c->loss_pin = NULL;
    c->slot_bytes = 0;
}

/* ---- copies -------------------------------------------------------------------- */
/* Staging copies: from 256 KiB up, by up to 16 threads (HR_STAGE_THREADS),
 * no more than OpenMP has. One thread's memcpy from pageable memory moves far
 * less than the link takes (53 GB/s pinned on the H200 machine): on it, an
 * MLP step at batch 1024 (4 MB of input) took 1.07 ms with one thread, 0.87
 * with 4, 0.84 with 8 and 0.83 with 16. */
#define HR_STAGE_PAR_MIN ((size_t)256 << 10)
static void stage_copy(const hr_cuda *c, unsigned char *dst, const unsigned char *src, size_t n) {
    int th = omp_get_max_threads();
    th = th > c->opt.stage_threads ? c->opt.stage_threads : th;
    if (n < HR_STAGE_PAR_MIN || th <= 1) {
        memcpy(dst, src, n);
        return;
    }
    size_t piece = hr_align_up((n + (size_t)th - 1) / (size_t)th, 4096);
#pragma omp parallel for num_threads(th) schedule(static)
    for (int i = 0; i < th; i++) {
        size_t off = (size_t)i * piece;
        if (off < n) memcpy(dst + off, src + off, n - off < piece ? n - off : piece);
    }
}

/* HR_CUDA_PIECE_MIN=bytes: the smallest input sent in pieces (default 2 MiB:
 * smaller inputs go whole, as splitting them costs the first node more than
 * it hides; tests lower it to reach every path; 0 sends every input whole). */
int64_t hr_cuda_piece_samples(const hr_cuda *c, int64_t batch, int64_t sample) {
    int64_t min = c->opt.piece_min;
    if (min <= 0 || batch < 2 || sample <= 0 || batch * sample < min) return 0;
    return (batch + HR_PIECES - 1) / HR_PIECES;
}

#define HR_UPLOAD_CHUNK ((size_t)1 << 20) /* bytes a host copy and a transfer take at a time */

static hr_status stage_piece(hr_cuda *c, int k) {
    size_t p0 = (size_t)k * c->defer_piece, pend = c->defer_n - p0 < c->defer_piece ? c->defer_n : p0 + c->defer_piece;
    for (size_t off = p0; off < pend; off += HR_UPLOAD_CHUNK) {
        size_t b = pend - off < HR_UPLOAD_CHUNK ? pend - off : HR_UPLOAD_CHUNK;
        stage_copy(c, c->defer_stage + off, c->defer_src + off, b);
        HR_CU(cudaMemcpyAsync(c->defer_dst + off, c->defer_stage + off, b, cudaMemcpyHostToDevice, c->copy_stream));
    }
    HR_CU(cudaEventRecord(c->piece_ev[k], c->copy_stream));
    return HR_OK;
}

hr_status hr_cuda_stage_upto(hr_cuda *c, int k) {
    if (!c->defer_src) return HR_OK;
    if (k >= c->npieces) k = c->npieces - 1;
    while (c->staged <= k) {
        hr_status st = stage_piece(c, c->staged++);
        if (st) {
            c->defer_src = NULL; /* x is the caller's again: nothing may read it later */
            return st;
        }
    }
    if (c->staged == c->npieces) { /* all of it: the slot's last copy, what settle waits for */
        c->defer_src = NULL;
        HR_CU(cudaEventRecord(c->slot_ev[c->defer_slot], c->copy_stream));
        c->pending_ev = c->slot_ev[c->defer_slot];
    }
    return HR_OK;
}

hr_status hr_cuda_settle(hr_cuda *c) {
    hr_status st = hr_cuda_stage_upto(c, HR_PIECES);
    if (st) return st;
    if (!c->pending) return HR_OK;
    c->pending = false;
    c->piece_dst = NULL;
    HR_CU(cudaStreamWaitEvent(c->stream, c->pending_ev, 0));
    return HR_OK;
}

/* Through a pinned slot on the copy stream, after the compute queued so far
 * (which may still read dst) and before the compute that reads it. The host
 * returns once the bytes are staged: it may prepare the next batch while the
 * device works. The bytes are staged and sent in chunks of 1 MiB, so that the
 * host's copy of one chunk overlaps the link's transfer of the one before.
 * The compute stream waits for them at the next node (hr_cuda_settle). The
 * batch's input (upload_input: the last upload of a step) goes in HR_PIECES pieces of
 * samples, an event after each: the first is staged here, the others by the
 * node that reads the input, each just before it queues the work on it
 * (hr_cuda_*_pieces), so that the host's copying overlaps the device's work;
 * any other node, download or sync stages what is left first. Every step
 * ends with the input staged (the session syncs on its error paths), so x is
 * never read after hr_train_step returns. A transfer larger than a slot goes
 * straight, in order. */
static hr_status upload(hr_cuda *c, void *dst, const void *src, size_t n, bool input, bool staged) {
    if (n == 0) return HR_OK;
    if (c->defer_src) { /* another upload before the input's reader ran: send the input now */
        hr_status st = hr_cuda_settle(c);
        if (st) return st;
    }
    if (!c->pinned || n > c->slot_bytes) {
        hr_status st = hr_cuda_settle(c);
        if (st) return st;
        HR_CU(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, c->stream));
        return HR_OK;
    }
    int s = c->cur;
    if (c->fill[s] + n > c->slot_bytes) { /* the other slot: wait until its last copy is done */
        s = c->cur = 1 - s;
        HR_CU(cudaEventSynchronize(c->slot_ev[s]));
        c->fill[s] = 0;
    }
    unsigned char *stage = c->pinned + (size_t)s * c->slot_bytes + c->fill[s];
    if (staged) { /* the staged batch's buffer: free once the last stage_in copied it out */
        HR_CU(cudaStreamWaitEvent(c->copy_stream, c->staged_ev, 0));
    } else {
        HR_CU(cudaEventRecord(c->compute_ev, c->stream));
        HR_CU(cudaStreamWaitEvent(c->copy_stream, c->compute_ev, 0));
    }
    c->fill[s] += hr_align_up(n, 256);
    c->pending = true;
    /* the input (by its size), once a step: in pieces, the first staged now,
     * the others by its reader (hr_cuda_stage_upto) or at the next settle */
    int64_t q = input && !c->piece_dst && (int64_t)n == c->in_batch * c->in_sample
                    ? hr_cuda_piece_samples(c, c->in_batch, c->in_sample)
                    : 0;
    if (q) {
        c->defer_src = src, c->defer_stage = stage, c->defer_dst = dst;
        c->defer_n = n, c->defer_piece = (size_t)(q * c->in_sample), c->defer_slot = s;
        c->npieces = (int)((c->in_batch + q - 1) / q);
        for (int k = 0; k < c->npieces; k++) c->piece_upto[k] = k + 1 < c->npieces ? (k + 1) * q : c->in_batch;
        c->staged = 0;
        c->piece_dst = dst;
        return hr_cuda_stage_upto(c, 0);
    }
    for (size_t off = 0; off < n; off += HR_UPLOAD_CHUNK) {
        size_t k = n - off < HR_UPLOAD_CHUNK ? n - off : HR_UPLOAD_CHUNK;
        stage_copy(c, stage + off, (const unsigned char *)src + off, k);
        HR_CU(cudaMemcpyAsync((unsigned char *)dst + off, stage + off, k, cudaMemcpyHostToDevice, c->copy_stream));
    }
    HR_CU(cudaEventRecord(c->slot_ev[s], c->copy_stream));
    c->pending_ev = c->slot_ev[s];
    return HR_OK;
}

/* ---- losses read back without waiting -------------------------------------------- */
/* Slot k of the pinned tail (after the two batch slots), and an event after
 * its copy; without pinned staging the copy waits (pageable memory). */
hr_status hr_cuda_loss_queue(hr_cuda *c, const float *loss, int slot) {
    if (slot < 0 || slot >= HR_STEP_QUEUE) return hr_error_set(HR_ERR_INTERNAL, "cuda backend: loss slot %d", slot);
    hr_status st = hr_cuda_settle(c);
    if (st) return st;
    float *dst = c->loss_pin ? c->loss_pin + slot : &c->loss_host[slot];
    HR_CU(cudaMemcpyAsync(dst, loss, sizeof(float), cudaMemcpyDeviceToHost, c->stream));
    HR_CU(cudaEventRecord(c->loss_ev[slot], c->stream));
    return HR_OK;
}

hr_status hr_cuda_loss_wait(hr_cuda *c, int slot, float *out) {
    if (slot < 0 || slot >= HR_STEP_QUEUE) return hr_error_set(HR_ERR_INTERNAL, "cuda backend: loss slot %d", slot);
    HR_CU(cudaEventSynchronize(c->loss_ev[slot]));
    *out = c->loss_pin ? c->loss_pin[slot] : c->loss_host[slot];
    return HR_OK;
}

hr_status hr_cuda_upload(hr_cuda *c, void *dst, const void *src, size_t n, bool input) {
    return upload(c, dst, src, n, input, false);
}

/* ---- the next batch while a step runs --------------------------------------------- */
/* Into the staged batch's buffer, through a pinned slot like any upload, but
 * the copy waits only for the last stage_in (staged_ev), not for the steps
 * queued on the compute stream: batch t+1 crosses the link while step t
 * runs. Never in pieces (no node reads this buffer). */
hr_status hr_cuda_upload_staged(hr_cuda *c, void *dst, const void *src, size_t n) {
    return upload(c, dst, src, n, false, true);
}

/* The staged batch into the step's tensors, on the compute stream after the
 * uploads (device-to-device: microseconds); staged_ev then frees the buffer
 * for the next batch. Outside any graph, so that the event is an ordinary one. */
hr_status hr_cuda_stage_in(hr_cuda *c, void *const *dst, const void *const *src, const size_t *n, int count) {
    hr_status st = hr_cuda_settle(c);
    if (st) return st;
    for (int i = 0; i < count; i++)
        if (n[i]) HR_CU(cudaMemcpyAsync(dst[i], src[i], n[i], cudaMemcpyDeviceToDevice, c->stream));
    HR_CU(cudaEventRecord(c->staged_ev, c->stream));
    return HR_OK;
}
