// The text-window flags `tq ppl` and `tq kl` share (--text, --seq-len, --windows, --protocol,
// --bos), and the window-size pair `tq sensitivity` uses for its calibration windows.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "base/result.h"
#include "eval/windows.h"

namespace tq::cli {

inline void add_window_size_flags(CLI::App& app, int64_t* seq_len, int64_t* windows,
                                  const std::string& windows_help) {
  app.add_option("--seq-len", *seq_len, "Window length L in tokens (llamacpp protocol: n_ctx)")
      ->capture_default_str();
  app.add_option("--windows", *windows, windows_help)->capture_default_str();
}

struct TextWindowFlags {
  std::string text, protocol = "mlx", bos = "auto";
  int64_t seq_len = 512, windows = 0;
};

inline void add_text_window_flags(CLI::App& app, TextWindowFlags* f) {
  app.add_option("--text", f->text, "Text file to score (bytes as they are)")->required();
  add_window_size_flags(app, &f->seq_len, &f->windows,
                        "Score the first N windows (0: every complete window)");
  app.add_option("--protocol", f->protocol, "mlx | llamacpp")->capture_default_str();
  app.add_option("--bos", f->bos,
                 "auto | yes | no (auto: no for mlx, the tokenizer's own for llamacpp)")
      ->capture_default_str();
}

inline Result<eval::WindowSpec> window_spec(const TextWindowFlags& f) {
  eval::WindowSpec spec;
  TQ_TRY(spec.protocol, eval::parse_protocol(f.protocol));
  TQ_TRY(spec.bos, eval::parse_bos_mode(f.bos));
  spec.seq_len = f.seq_len;
  spec.windows = f.windows;
  return spec;
}

}  // namespace tq::cli
