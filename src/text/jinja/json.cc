// tojson (Python json.dumps as transformers calls it) and JSON input to template values.
#include <algorithm>
#include <cmath>

#include "base/utf8.h"
#include "text/jinja/value.h"

namespace tq::jinja {

namespace {

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    char32_t c = next_code_point_lossy(s, i);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
          if (c >= 0x10000) {
            char32_t u = c - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (u >> 10), 0xDC00 + (u & 0x3FF));
          } else {
            out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
          }
        } else {
          append_utf8(out, c);
        }
    }
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return py_float_repr(d);
}

Result<std::string> json_key(const Value& k) {
  switch (k.kind) {
    case Kind::kString:
      return k.s;
    case Kind::kBool:
      return std::string(k.b ? "true" : "false");
    case Kind::kNone:
      return std::string("null");
    case Kind::kInt:
      return std::to_string(k.i);
    case Kind::kFloat:
      return json_float(k.f);
    default:
      return err("keys must be str, int, float, bool or None, not {}", type_name(k));
  }
}

struct JsonWriter {
  const JsonDumpOptions& opt;
  std::string out;
  std::string item_sep, key_sep;

  void newline(int depth) {
    out += '\n';
    for (int k = 0; k < depth; ++k) {
      if (opt.indent_is_str)
        out += opt.indent_str;
      else
        out.append(static_cast<size_t>(std::max<int64_t>(opt.indent, 0)), ' ');
    }
  }
  bool pretty() const { return opt.indent_is_str || opt.indent >= 0; }

  Status write(const Value& v, int depth) {
    if (depth > 512) return err("tojson: nesting too deep");
    switch (v.kind) {
      case Kind::kNone:
        out += "null";
        return ok_status();
      case Kind::kBool:
        out += v.b ? "true" : "false";
        return ok_status();
      case Kind::kInt:
        out += std::to_string(v.i);
        return ok_status();
      case Kind::kFloat:
        out += json_float(v.f);
        return ok_status();
      case Kind::kString:
        append_json_string(out, v.s, opt.ensure_ascii);
        return ok_status();
      case Kind::kList:
      case Kind::kTuple: {
        if (v.list->empty()) {
          out += "[]";
          return ok_status();
        }
        out += '[';
        for (size_t k = 0; k < v.list->size(); ++k) {
          if (k) out += item_sep;
          if (pretty()) newline(depth + 1);
          TQ_CHECK_OK(write((*v.list)[k], depth + 1));
        }
        if (pretty()) newline(depth);
        out += ']';
        return ok_status();
      }
      case Kind::kDict: {
        if (v.dict->items.empty()) {
          out += "{}";
          return ok_status();
        }
        std::vector<std::pair<std::string, const Value*>> kv;
        for (const auto& [k, x] : v.dict->items) {
          TQ_TRY(std::string ks, json_key(k));
          kv.emplace_back(std::move(ks), &x);
        }
        if (opt.sort_keys)
          std::stable_sort(kv.begin(), kv.end(),
                           [](const auto& a, const auto& b) { return a.first < b.first; });
        out += '{';
        for (size_t k = 0; k < kv.size(); ++k) {
          if (k) out += item_sep;
          if (pretty()) newline(depth + 1);
          append_json_string(out, kv[k].first, opt.ensure_ascii);
          out += key_sep;
          TQ_CHECK_OK(write(*kv[k].second, depth + 1));
        }
        if (pretty()) newline(depth);
        out += '}';
        return ok_status();
      }
      default:
        return err("tojson: object of type {} is not JSON serializable", type_name(v));
    }
  }
};

template <typename J>
Result<Value> json_to_value(const J& j, int depth) {
  if (depth > 512) return err("JSON nesting deeper than 512");
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::integer(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      auto u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::number(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value::number(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value::string(j.template get_ref<const std::string&>());
    case nlohmann::json::value_t::array: {
      ValueList items;
      for (const auto& x : j) {
        TQ_TRY(Value v, json_to_value(x, depth + 1));
        items.push_back(std::move(v));
      }
      return Value::make_list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Value d = Value::make_dict();
      for (auto it = j.begin(); it != j.end(); ++it) {
        TQ_TRY(Value v, json_to_value(it.value(), depth + 1));
        d.dict->items.emplace_back(Value::string(it.key()), std::move(v));
      }
      return d;
    }
    default:
      return err("unsupported JSON value (binary or discarded)");
  }
}

}  // namespace

Result<std::string> to_json_text(const Value& v, const JsonDumpOptions& opt) {
  JsonWriter w{opt, {}, opt.item_sep, opt.key_sep};
  if (!opt.has_separators) {
    w.item_sep = w.pretty() ? "," : ", ";
    w.key_sep = ": ";
  }
  TQ_CHECK_OK(w.write(v, 0));
  return std::move(w.out);
}

Result<Value> from_json(const nlohmann::json& j) { return json_to_value(j, 0); }
Result<Value> from_json(const nlohmann::ordered_json& j) { return json_to_value(j, 0); }

}  // namespace tq::jinja
