// The CPU a run executes on and the kernel paths dispatched for it, so that every speed number
// can be traced to a code path (tq bench / generate --json, "cpu").
#pragma once

#include <string>

namespace tq {

struct CpuInfo {
  std::string vendor;                // CPUID vendor: "AuthenticAMD", "GenuineIntel", ...
  std::string model;                 // CPUID brand string: "AMD EPYC 9R45 ..." (VMs may shorten it)
  int family = 0, model_number = 0;  // CPUID display family and model: 26/2 = Zen 5, 25/17 = Zen 4
  std::string simd;  // Highway target of the float and decode kernels: "AVX3_DL", "AVX2", ...
  std::string int8;  // integer dot-product kernels (packed_int8_path)
  bool amx = false;  // AMX tile kernels for int8 prefill (amx_available)
};

// Read once per process; the dispatch it reports is the one the kernels use.
const CpuInfo& cpu_info();

// "AMD EPYC (family 26 model 2; AVX3_DL, int8 avx512-vnni, no AMX)".
std::string cpu_summary(const CpuInfo& c);

}  // namespace tq
