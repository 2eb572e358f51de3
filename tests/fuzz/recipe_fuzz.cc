// libFuzzer: arbitrary bytes as a recipe file: JSON parse, parse_recipe and (when accepted) the
// plan it builds on a fixed small llama must never crash; an accepted plan's specs are valid.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "io/json_parse.h"
#include "recipe/quant_plan.h"
#include "recipe/recipe.h"

namespace {

tq::ModelConfig small_llama() {
  tq::ModelConfig c;
  c.family = tq::Family::kLlama;
  c.model_type = "llama";
  c.hidden_size = 256;
  c.num_hidden_layers = 3;
  c.intermediate_size = 512;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 64;
  c.vocab_size = 512;
  c.tie_word_embeddings = false;
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto j = tq::parse_json(text, "recipe.json");
  if (!j.ok()) return 0;
  auto r = tq::parse_recipe(*j, "recipe.json");
  if (!r.ok()) return 0;
  (void)r->to_json().dump();
  tq::PlanOptions o;
  o.dtype = tq::DType::kBF16;
  o.recipe = *r;
  auto p = tq::build_plan(small_llama(), o);
  if (!p.ok()) return 0;
  for (const auto& e : p->entries) {
    if (!e.spec) continue;
    if (!tq::validate_quant_spec(*e.spec).ok()) __builtin_trap();
    if (e.shape[1] % e.spec->group_size != 0) __builtin_trap();
    if (e.spec->bits < e.min_bits && e.spec->mode == tq::QuantMode::kAffine) __builtin_trap();
  }
  (void)p->quantization_json().dump();
  (void)p->size();
  return 0;
}
