#include "text/post_processor.h"

#include "text/json_fields.h"

namespace tq::text {

void PostProcessor::apply(std::vector<int32_t>& ids) const {
  switch (kind) {
    case Kind::kIdentity:
      return;
    case Kind::kSequence:
      for (const PostProcessor& p : children) p.apply(ids);
      return;
    case Kind::kTemplate: {
      std::vector<int32_t> out;
      for (const Piece& p : pieces) {
        const auto& src = p.is_sequence ? ids : p.ids;
        out.insert(out.end(), src.begin(), src.end());
      }
      ids = std::move(out);
      return;
    }
  }
}

static Result<int32_t> special_pair_id(const json& j, std::string_view key, const JsonWhere& w) {
  const json* p = find_field(j, key);
  if (!p || !p->is_array() || p->size() != 2 || !(*p)[1].is_number_integer() ||
      (*p)[1].get<int64_t>() < 0 || (*p)[1].get<int64_t>() > kMaxTokenId) {
    return err("{}: {}: '{}' must be [token, id]", w.source, w.what, key);
  }
  return static_cast<int32_t>((*p)[1].get<int64_t>());
}

static Result<PostProcessor> parse_template(const json& j, const JsonWhere& w) {
  PostProcessor p;
  p.kind = PostProcessor::Kind::kTemplate;
  const json* single = find_field(j, "single");
  if (!single || !single->is_array()) {
    return err("{}: {}: 'single' must be a list of pieces", w.source, w.what);
  }
  const json* specials = find_field(j, "special_tokens");
  for (const json& item : *single) {
    if (const json* seq = find_field(item, "Sequence")) {
      TQ_TRY(std::string id, req_string(*seq, "id", w));
      if (id != "A") return err("{}: {}: single template refers to ${}", w.source, w.what, id);
      p.pieces.push_back({true, {}});
    } else if (const json* sp = find_field(item, "SpecialToken")) {
      TQ_TRY(std::string name, req_string(*sp, "id", w));
      const json* entry = specials ? find_field(*specials, name) : nullptr;
      const json* ids = entry ? find_field(*entry, "ids") : nullptr;
      if (!ids || !ids->is_array()) {
        return err("{}: {}: special token '{}' is missing from special_tokens", w.source, w.what,
                   name);
      }
      PostProcessor::Piece piece;
      for (const json& id : *ids) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxTokenId) {
          return err("{}: {}: special token '{}' has a bad id", w.source, w.what, name);
        }
        piece.ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
      }
      p.pieces.push_back(std::move(piece));
    } else {
      return err("{}: {}: template piece must be Sequence or SpecialToken", w.source, w.what);
    }
  }
  return p;
}

Result<std::optional<PostProcessor>> parse_post_processor(const nlohmann::json& j,
                                                          const std::string& source) {
  if (j.is_null()) return std::optional<PostProcessor>();
  JsonWhere w{source, "post_processor"};
  TQ_TRY(std::string type, req_string(j, "type", w));
  w.what = "post_processor " + type;
  PostProcessor p;
  if (type == "Sequence") {
    p.kind = PostProcessor::Kind::kSequence;
    const json* list = find_field(j, "processors");
    if (!list || !list->is_array())
      return err("{}: {}: 'processors' must be a list", source, w.what);
    for (const json& c : *list) {
      TQ_TRY(auto child, parse_post_processor(c, source));
      if (child) p.children.push_back(std::move(*child));
    }
  } else if (type == "TemplateProcessing") {
    TQ_TRY(p, parse_template(j, w));
  } else if (type == "ByteLevel") {
    p.kind = PostProcessor::Kind::kIdentity;  // it only trims offsets
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    TQ_TRY(int32_t cls, special_pair_id(j, "cls", w));
    TQ_TRY(int32_t sep, special_pair_id(j, "sep", w));
    p.kind = PostProcessor::Kind::kTemplate;
    p.pieces = {{false, {cls}}, {true, {}}, {false, {sep}}};
  } else {
    return err("{}: post_processor type '{}' is not supported", source, type);
  }
  return std::optional<PostProcessor>(std::move(p));
}

}  // namespace tq::text
