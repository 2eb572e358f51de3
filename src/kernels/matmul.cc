#include "kernels/matmul.h"

#include <cblas.h>

#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

// Weak: present in DYNAMIC_ARCH builds of OpenBLAS (Debian's); absent elsewhere.
extern "C" {
char* openblas_get_corename(void) __attribute__((weak));
int openblas_get_num_threads(void) __attribute__((weak));
void openblas_set_num_threads(int) __attribute__((weak));
void gotoblas_dynamic_init(void) __attribute__((weak));
void gotoblas_dynamic_quit(void) __attribute__((weak));
}

namespace tq {

namespace {

bool generic_core(std::string_view c) {
  return c == "Prescott" || c == "Core2" || c == "Penryn" || c == "Dunnington" || c == "Nehalem" ||
         c == "Atom";
}

// OpenBLAS 0.3.21 (Debian 12) does not know recent Xeons (e.g. family 6 model 0xCF) and falls
// back to its Prescott SSE3 kernels, several times slower. When it did that on a CPU with AVX2 or
// AVX-512 and the user set no OPENBLAS_CORETYPE, pick the kernels again by CPU features.
// Runs before main (after OpenBLAS's own constructor), before any BLAS call.
__attribute__((constructor)) void fix_openblas_coretype() {
  if (!openblas_get_corename || !gotoblas_dynamic_init || !gotoblas_dynamic_quit) return;
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || !generic_core(openblas_get_corename())) return;
  __builtin_cpu_init();
  const char* core = nullptr;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    core = "SkylakeX";
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    core = "Haswell";
  if (core == nullptr) return;
  setenv("OPENBLAS_CORETYPE", core, 0);  // read by gotoblas_dynamic_init
  gotoblas_dynamic_quit();
  gotoblas_dynamic_init();
  unsetenv("OPENBLAS_CORETYPE");
}

}  // namespace

void matmul_nt(const float* x, int64_t n, int64_t in, const float* w, int64_t out,
               const float* bias, float* y) {
  if (n == 1) {
    // One row: y[out] = W[out, in] · x[in] is a GEMV, which OpenBLAS runs faster than GEMM.
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(out), static_cast<int>(in), 1.0f, w,
                static_cast<int>(in), x, 1, 0.0f, y, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(out),
                static_cast<int>(in), 1.0f, x, static_cast<int>(in), w, static_cast<int>(in), 0.0f,
                y, static_cast<int>(out));
  }
  if (bias != nullptr)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < out; ++j) y[r * out + j] += bias[j];
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}

BlasOnCallingThread::BlasOnCallingThread() {
  if (!openblas_get_num_threads || !openblas_set_num_threads) return;
  saved_ = openblas_get_num_threads();
  if (saved_ > 1) openblas_set_num_threads(1);
}

BlasOnCallingThread::~BlasOnCallingThread() {
  if (saved_ > 1) openblas_set_num_threads(saved_);
}

std::string blas_backend() {
  if (!openblas_get_corename || !openblas_get_num_threads) return "BLAS";
  return fmt::format("OpenBLAS {} x{}", openblas_get_corename(), openblas_get_num_threads());
}

}  // namespace tq
