/* test_nancheck.c — the NaN stop on the CPU (tests/nan_stop.h): a
 * non-finite loss runs no update, hr_nan_find names a NaN parameter, a NaN in
 * the batch or the op that overflowed, with and without accumulation, and the
 * stop changes no number of a finite run. (tests/gpu/test_cuda_nonfinite.c
 * runs the same cases on the GPU.) */
#include "nan_stop.h"

int main(void) {
    for (int K = 1; K <= 2; K++) {
        nan_stop_cases(HR_DEVICE_CPU, K);
        nan_stop_same_numbers(HR_DEVICE_CPU, K);
    }
    TEST_END();
}
