// A file's whole contents folded into a SHA-256 stream cheaply: fast_hash64 (two seeds, 128
// bits) of each 8 MiB piece, for fingerprints of multi-GB model files that must notice any
// changed byte yet cost a fraction of a second per GB from the page cache.
#pragma once

#include <string>

#include "base/result.h"
#include "base/sha256.h"

namespace tq {

// Feeds `h` the file's size and the checksums of its pieces (errors name `path`).
Status hash_file_contents(const std::string& path, Sha256& h);

}  // namespace tq
