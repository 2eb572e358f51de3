#include "io/json_parse.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <vector>

namespace tq {

namespace {
// Thrown from the parser callback to stop parsing early; caught in parse_json.
struct JsonAbort {
  std::string message;
};
}  // namespace

std::string printable(std::string_view s) {
  std::string out;
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f)
      out += fmt::format("\\x{:02x}", u);
    else
      out += c;
  }
  return out;
}

Result<nlohmann::json> parse_json(std::string_view text, const std::string& source,
                                  JsonParseOptions opts) {
  using json = nlohmann::json;
  std::vector<std::set<std::string>> keys;  // one key set per open object
  auto cb = [&](int depth, json::parse_event_t ev, json& parsed) -> bool {
    switch (ev) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= opts.max_depth)
          throw JsonAbort{fmt::format("JSON nested deeper than {} levels", opts.max_depth)};
        if (ev == json::parse_event_t::object_start && opts.reject_duplicate_keys)
          keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (opts.reject_duplicate_keys && !keys.empty()) keys.pop_back();
        break;
      case json::parse_event_t::key:
        if (opts.reject_duplicate_keys && !keys.empty() && parsed.is_string() &&
            !keys.back().insert(parsed.get_ref<const std::string&>()).second)
          throw JsonAbort{fmt::format("duplicate key '{}'", parsed.get_ref<const std::string&>())};
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), cb, /*allow_exceptions=*/true,
                       /*ignore_comments=*/false);
  } catch (const JsonAbort& a) {
    return err("{}: {}", source, printable(a.message));
  } catch (const json::exception& e) {
    return err("{}: invalid JSON: {}", source, printable(e.what()));
  } catch (const std::exception& e) {
    return err("{}: cannot parse JSON: {}", source, printable(e.what()));
  }
}

Result<std::string> read_text_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return err("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return err("{}: not a regular file", path);
  }
  std::string out;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      return err("{}: read error: {}", path, std::strerror(e));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

Result<nlohmann::json> read_json_file(const std::string& path, JsonParseOptions opts) {
  TQ_TRY(std::string text, read_text_file(path));
  return parse_json(text, path, opts);
}

std::string_view json_type_name(const nlohmann::json& j) {
  if (j.is_number_integer() || j.is_number_unsigned()) return "integer";
  if (j.is_number_float()) return "float";
  return j.type_name();
}

}  // namespace tq
