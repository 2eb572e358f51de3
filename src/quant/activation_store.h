// Calibration activations [rows, width] f32 (one row = one calibration sequence flattened):
// in memory when they fit the budget, else in an unlinked scratch file read and written a
// row at a time, so a conversion's memory stays bounded by --max-calib-memory.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"

namespace tq {

class ActivationStore {
 public:
  ActivationStore() = default;
  ~ActivationStore();
  ActivationStore(ActivationStore&&) noexcept;
  ActivationStore& operator=(ActivationStore&&) noexcept;

  // in_memory: hold the rows in RAM; otherwise a scratch file is created in scratch_dir
  // (default: $TMPDIR or /tmp) and unlinked at once.
  static Result<ActivationStore> create(int64_t rows, int64_t width, bool in_memory,
                                        const std::string& scratch_dir = "");

  int64_t rows() const { return rows_; }
  int64_t width() const { return width_; }
  bool spilled() const { return fd_ >= 0; }
  int64_t bytes() const { return rows_ * width_ * 4; }

  Status write_row(int64_t r, std::span<const float> data);
  Status read_row(int64_t r, std::span<float> data) const;

 private:
  int64_t rows_ = 0, width_ = 0;
  std::vector<float> mem_;
  int fd_ = -1;
  std::string path_;  // for error messages (the file itself is unlinked)
};

}  // namespace tq
