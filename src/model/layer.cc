#include "model/layer.h"

#include <limits>

namespace tq {

Status check_geometry(const ModelConfig& c) {
  const int64_t dims[] = {c.hidden_size,         c.num_hidden_layers,   c.intermediate_size,
                          c.num_attention_heads, c.num_key_value_heads, c.head_dim,
                          c.vocab_size};
  for (int64_t v : dims)
    if (v <= 0 || v > std::numeric_limits<int32_t>::max())
      return err("config: model geometry out of range (a size is {})", v);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return err("config: num_attention_heads {} is not a multiple of num_key_value_heads {}",
               c.num_attention_heads, c.num_key_value_heads);
  if (c.head_dim % 2 != 0) return err("config: head_dim {} is odd", c.head_dim);
  if (c.num_attention_heads * c.head_dim > std::numeric_limits<int32_t>::max())
    return err("config: num_attention_heads * head_dim too large");
  return ok_status();
}

}  // namespace tq
