// Byte sizes as flags give them: "5GiB", "500MB", "1.5G", "123456". The one parser every
// size flag uses (--max-shard-size, --target-size, --max-calib-memory, --memory-budget).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"

namespace tq {

// A decimal number (digits, at most one '.') and an optional unit: B, KB/MB/GB (powers of
// 1000), KiB/MiB/GiB or K/M/G (powers of 1024); fractions of a byte are dropped. Errors name
// `what` (e.g. the flag) and the text: no number, another unit, or 2^63 bytes or more.
Result<uint64_t> parse_byte_size(std::string_view text, std::string_view what);

// For people: "512 B", "1.5 MiB", "2.25 GiB" (powers of 1024, three significant digits).
std::string format_bytes(uint64_t bytes);

}  // namespace tq
