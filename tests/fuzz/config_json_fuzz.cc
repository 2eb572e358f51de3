// libFuzzer: arbitrary bytes as config.json: JSON parse, ModelConfig, and (when accepted) the
// family tensor table expansion must never crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "io/json_parse.h"
#include "model/model_config.h"
#include "model/tensor_table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto j = tq::parse_json(text, "config.json");
  if (!j.ok()) return 0;
  auto c = tq::parse_model_config(*j, "config.json");
  if (!c.ok()) return 0;
  if (c->head_dim <= 0 || c->num_attention_heads % c->num_key_value_heads != 0) __builtin_trap();
  if (c->num_hidden_layers <= 64) {
    for (const auto& s : tq::expected_tensors(*c)) {
      auto k = tq::classify(s.name, c->family);
      if (!k || k->kind != s.kind || k->layer != s.layer) __builtin_trap();
      for (int64_t d : s.shape)
        if (d <= 0) __builtin_trap();
    }
  }
  if (c->quantization) (void)c->quantization->spec_for("model.layers.0.mlp.up_proj");
  return 0;
}
