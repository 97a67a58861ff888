#pragma once
// Internals shared by calibrate/src/kernels*.cpp: OpenBLAS's bf16 entry points, found at run time, and the
// words that label a measurement.

#include <cblas.h>

#include <string>

#include "moesim/calibrate/kernels.hpp"

namespace moesim::calibrate::kernels_detail {

std::string threads_text(int t);

// The bf16 entry points, resolved at run time (they are absent from an OpenBLAS built without
// BUILD_BFLOAT16, and a direct reference would not link).
using SbgemvFn = decltype(&cblas_sbgemv);
using SbgemmFn = decltype(&cblas_sbgemm);

SbgemvFn sbgemv();
SbgemmFn sbgemm();

/// "f32 gemv 4096x4096 (roles) batch 1, 8 threads": one sample, for notes and skipped lists.
std::string sample_label(const KernelSample& s);

}  // namespace moesim::calibrate::kernels_detail
