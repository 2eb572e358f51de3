// Dense f32 matrix products through OpenBLAS.
#pragma once

#include <cstdint>
#include <string>

namespace tq {

// y[n, out] = x[n, in] · W[out, in]^T (+ bias[out] when non-null). Row-major, dense.
void matmul_nt(const float* x, int64_t n, int64_t in, const float* w, int64_t out,
               const float* bias, float* y);

// c[m, n] = alpha · op(a) · op(b) + beta · c, op(x) = x or x^T (a is [m, k] or [k, m], b is
// [k, n] or [n, k]); row-major with leading dimensions lda, ldb, ldc.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// While alive, OpenBLAS runs every product on the calling thread: for callers that run small
// products on threads of their own (OpenBLAS's threads would oversubscribe or serialize them).
class BlasOnCallingThread {
 public:
  BlasOnCallingThread();
  ~BlasOnCallingThread();
  BlasOnCallingThread(const BlasOnCallingThread&) = delete;
  BlasOnCallingThread& operator=(const BlasOnCallingThread&) = delete;

 private:
  int saved_ = 0;
};

// "OpenBLAS <core> x<threads>", e.g. "OpenBLAS SkylakeX x2", for reports.
std::string blas_backend();

}  // namespace tq
