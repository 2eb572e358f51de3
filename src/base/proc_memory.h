// The process's memory as Linux reports it (/proc/self/status, /proc/meminfo); 0 when unknown.
#pragma once

#include <cstdint>

namespace tq {

uint64_t resident_bytes();          // VmRSS: pages resident now (file-backed mappings included)
uint64_t peak_resident_bytes();     // VmHWM: the most that ever were
uint64_t available_memory_bytes();  // MemAvailable: what can be had without swapping

}  // namespace tq
