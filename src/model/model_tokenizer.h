// The tokenizer that belongs to a model: tokenizer.json of a directory, or the one rebuilt
// from a GGUF file's metadata (the same one `tq import` writes).
#pragma once

#include "base/result.h"
#include "model/model_source.h"
#include "text/tokenizer.h"

namespace tq {

Result<Tokenizer> load_model_tokenizer(const ModelSource& m);

}  // namespace tq

namespace tq {

// A tokenizer.json file, a directory holding one, or a GGUF file (tokenizer rebuilt from its
// metadata), without opening the model's weights.
Result<Tokenizer> load_tokenizer_any(const std::string& path);

}  // namespace tq
