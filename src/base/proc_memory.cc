#include "base/proc_memory.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

namespace tq {
namespace {

// The "Key:   N kB" line of a /proc file, in bytes.
uint64_t kb_field(const char* path, std::string_view key) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line))
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 &&
        line[key.size()] == ':')
      return std::strtoull(line.c_str() + key.size() + 1, nullptr, 10) * 1024;
  return 0;
}

}  // namespace

uint64_t resident_bytes() { return kb_field("/proc/self/status", "VmRSS"); }
uint64_t peak_resident_bytes() { return kb_field("/proc/self/status", "VmHWM"); }
uint64_t available_memory_bytes() { return kb_field("/proc/meminfo", "MemAvailable"); }

}  // namespace tq
