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
  const int64_t rd = c.rotary_dims();
  if (rd <= 0 || rd > c.head_dim || rd % 2 != 0)
    return err("config: rotary dims {} not an even number in (0, head_dim {}]", rd, c.head_dim);
  if (c.family == Family::kQwen35) {
    const int64_t lin[] = {c.linear_num_key_heads,   c.linear_num_value_heads,
                           c.linear_key_head_dim,    c.linear_value_head_dim,
                           c.linear_conv_kernel_dim, c.full_attention_interval};
    for (int64_t v : lin)
      if (v <= 0 || v > (int64_t{1} << 20))
        return err("config: linear-attention geometry out of range (a size is {})", v);
    if (c.linear_num_value_heads % c.linear_num_key_heads != 0)
      return err("config: linear_num_value_heads {} is not a multiple of linear_num_key_heads {}",
                 c.linear_num_value_heads, c.linear_num_key_heads);
    if (c.linear_conv_dim() > std::numeric_limits<int32_t>::max() ||
        c.linear_num_value_heads * c.linear_value_head_dim * c.linear_key_head_dim >
            std::numeric_limits<int32_t>::max())
      return err("config: linear-attention state too large");
  }
  return ok_status();
}

}  // namespace tq
