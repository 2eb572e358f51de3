#include "eval/eval_model.h"

#include <unistd.h>

#include <cstdio>

#include "base/sha256.h"
#include "eval/results_db.h"
#include "io/json_parse.h"
#include "model/model_tokenizer.h"

namespace tq::eval {

Result<EvalText> read_eval_text(const std::string& path) {
  EvalText t;
  t.path = path;
  TQ_TRY(t.bytes, read_text_file(path));
  if (t.bytes.empty()) return err("{}: text is empty", path);
  t.sha256 = sha256_hex(t.bytes);
  return t;
}

Result<EvalModel> open_eval_model(const std::string& path, bool with_tokenizer,
                                  std::string fingerprint) {
  EvalModel m;
  m.path = path;
  TQ_TRY(m.src, open_model(path));
  if (with_tokenizer) {
    TQ_TRY(Tokenizer tok, load_model_tokenizer(m.src));
    m.tokenizer.emplace(std::move(tok));
  }
  if (!fingerprint.empty()) {
    m.fingerprint = std::move(fingerprint);
  } else {
    TQ_TRY(m.fingerprint, model_fingerprint(m.src));
  }
  return m;
}

Status EvalModel::load_weights(bool show_progress, const RuntimeOptions& runtime) {
  const bool tty = show_progress && ::isatty(STDERR_FILENO) == 1;
  auto progress = [&](int64_t done, int64_t total) {
    std::fprintf(stderr, "\rloading %s: %lld/%lld tensors\x1b[K%s", path.c_str(),
                 static_cast<long long>(done), static_cast<long long>(total),
                 done == total ? "\n" : "");
  };
  TQ_TRY(net, Transformer::load(src, runtime,
                                tty ? std::function<void(int64_t, int64_t)>(progress)
                                    : std::function<void(int64_t, int64_t)>()));
  // The network holds its own f32 copy or mapping: drop this one so its pages leave the RSS.
  src.tensors.reset();
  return ok_status();
}

LogitsModel EvalModel::logits(int64_t max_len) const {
  auto cache = std::make_shared<KvCache>(net->new_cache(max_len));
  const Transformer* t = net.get();
  return {src.config.vocab_size, [t, cache](std::span<const int32_t> tokens, std::span<float> out) {
            cache->clear();
            return t->forward(tokens, *cache, out, true);
          }};
}

BosInfo bos_info(const Tokenizer& tok, const nlohmann::json& config_json) {
  BosInfo b;
  auto plain = tok.encode("a", false), special = tok.encode("a", true);
  if (special.size() > plain.size() && (plain.empty() || special[0] != plain[0])) {
    b.id = special[0];
    b.tokenizer_adds = true;
    return b;
  }
  auto it = config_json.find("bos_token_id");
  if (it != config_json.end() && it->is_number_integer()) {
    int64_t id = it->get<int64_t>();
    if (id >= 0 && id <= INT32_MAX) b.id = int32_t(id);
  }
  return b;
}

Result<Windows> text_windows(const EvalModel& m, const EvalText& text, const WindowSpec& spec) {
  std::vector<int32_t> ids = m.tokenizer->encode(text.bytes, false);
  BosInfo bos = bos_info(*m.tokenizer, m.src.config_json);
  TQ_TRY(Windows w, make_windows(ids, spec, bos, text.path));
  const int64_t vocab = m.src.config.vocab_size;
  for (int32_t id : w.tokens)
    if (id < 0 || id >= vocab)
      return err("{}: tokenizer gives id {}, outside the model's vocabulary of {}", m.path, id,
                 vocab);
  return w;
}

}  // namespace tq::eval
