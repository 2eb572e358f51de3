#include "serve/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tq::serve {
namespace {

using json = nlohmann::json;

json bytes_json(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

}  // namespace

TokenLogprob token_logprob(std::span<const float> logits, int32_t id, int k) {
  float mx = -std::numeric_limits<float>::infinity();
  for (float x : logits)
    if (x > mx) mx = x;
  double sum = 0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - mx);
  const double lse = mx + std::log(sum);
  TokenLogprob r;
  r.id = id;
  r.logprob = static_cast<float>(logits[static_cast<size_t>(id)] - lse);
  if (k > 0) {
    // A min-heap of the k best (value, id); "better" is larger value, then lower id.
    auto better = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    std::vector<std::pair<float, int32_t>> heap;
    heap.reserve(static_cast<size_t>(k) + 1);
    for (size_t i = 0; i < logits.size(); ++i) {
      std::pair<float, int32_t> e{logits[i], static_cast<int32_t>(i)};
      if (std::isnan(e.first)) continue;
      if (static_cast<int>(heap.size()) < k) {
        heap.push_back(e);
        std::push_heap(heap.begin(), heap.end(), better);
      } else if (better(e, heap.front())) {
        std::pop_heap(heap.begin(), heap.end(), better);
        heap.back() = e;
        std::push_heap(heap.begin(), heap.end(), better);
      }
    }
    std::sort(heap.begin(), heap.end(), better);
    for (const auto& [v, t] : heap) r.top.emplace_back(t, static_cast<float>(v - lse));
  }
  return r;
}

json chat_logprobs_json(const Tokenizer& tok, std::span<const TokenLogprob> lps) {
  auto entry = [&](int32_t id, float lp) {
    const std::string s = tok.decode(std::span<const int32_t>(&id, 1));
    return json{{"token", s}, {"logprob", lp}, {"bytes", bytes_json(s)}};
  };
  json content = json::array();
  for (const auto& t : lps) {
    json e = entry(t.id, t.logprob);
    json top = json::array();
    for (const auto& [id, lp] : t.top) top.push_back(entry(id, lp));
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return json{{"content", std::move(content)}, {"refusal", nullptr}};
}

json completion_logprobs_json(const Tokenizer& tok, std::span<const TokenLogprob> lps,
                              size_t offset0) {
  json tokens = json::array(), values = json::array(), tops = json::array(),
       offsets = json::array();
  size_t offset = offset0;
  for (const auto& t : lps) {
    const std::string s = tok.decode(std::span<const int32_t>(&t.id, 1));
    tokens.push_back(s);
    values.push_back(t.logprob);
    json top = json::object();
    for (const auto& [id, lp] : t.top) top[tok.decode(std::span<const int32_t>(&id, 1))] = lp;
    tops.push_back(std::move(top));
    offsets.push_back(offset);
    offset += s.size();
  }
  return json{{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(values)},
              {"top_logprobs", std::move(tops)},
              {"text_offset", std::move(offsets)}};
}

}  // namespace tq::serve
