#include "kernels/cpu_info.h"

#include <cstring>
#include <string>

#include "kernels/amx_matmul.h"
#include "kernels/packed_matmul.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace tq {

namespace {

std::string trimmed(const char* s, size_t n) {
  std::string out(s, strnlen(s, n));
  const size_t b = out.find_first_not_of(' '), e = out.find_last_not_of(' ');
  return b == std::string::npos ? std::string() : out.substr(b, e - b + 1);
}

CpuInfo read_cpu() {
  CpuInfo c;
#if defined(__x86_64__) || defined(__i386__)
  unsigned r[4] = {};
  if (__get_cpuid(0, &r[0], &r[1], &r[2], &r[3])) {
    char v[12];
    std::memcpy(v, &r[1], 4), std::memcpy(v + 4, &r[3], 4), std::memcpy(v + 8, &r[2], 4);
    c.vendor = trimmed(v, sizeof(v));
  }
  if (__get_cpuid(1, &r[0], &r[1], &r[2], &r[3])) {
    const unsigned base = (r[0] >> 8) & 0xF, ext_model = (r[0] >> 16) & 0xF;
    c.family = static_cast<int>(base == 0xF ? base + ((r[0] >> 20) & 0xFF) : base);
    c.model_number = static_cast<int>((r[0] >> 4) & 0xF);
    if (base == 0x6 || base == 0xF) c.model_number += static_cast<int>(ext_model << 4);
  }
  char brand[48] = {};
  bool have_brand = __get_cpuid(0x80000000u, &r[0], &r[1], &r[2], &r[3]) && r[0] >= 0x80000004u;
  for (unsigned leaf = 0; have_brand && leaf < 3; ++leaf) {
    have_brand = __get_cpuid(0x80000002u + leaf, &r[0], &r[1], &r[2], &r[3]) != 0;
    std::memcpy(brand + 16 * leaf, r, 16);
  }
  if (have_brand) c.model = trimmed(brand, sizeof(brand));
#endif
  if (c.model.empty()) c.model = "unknown CPU";
  c.simd = packed_kernel_isa();
  c.int8 = packed_int8_path();
  c.amx = amx_available();
  return c;
}

}  // namespace

const CpuInfo& cpu_info() {
  static const CpuInfo c = read_cpu();
  return c;
}

std::string cpu_summary(const CpuInfo& c) {
  return c.model + " (family " + std::to_string(c.family) + " model " +
         std::to_string(c.model_number) + "; " + c.simd + ", int8 " + c.int8 +
         (c.amx ? ", AMX)" : ", no AMX)");
}

}  // namespace tq
