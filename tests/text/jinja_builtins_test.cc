// Every filter and str method in the interpreter's tables has a probe in the jinja2 oracle test
// (tests/oracle/test_jinja_builtins.py): a new name without one fails here.
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "../testing/test_files.h"
#include "text/jinja/builtins.h"

namespace tq::jinja {
namespace {

// The text of the Python dict `NAME = {...}` in the oracle test, up to its closing brace.
std::string dict_body(const std::string& file, const std::string& name) {
  size_t start = file.find("\n" + name + " = {\n");
  if (start == std::string::npos) return "";
  size_t end = file.find("\n}\n", start);
  return file.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

void expect_probes(const std::vector<std::string_view>& names, const std::string& body,
                   std::string_view what) {
  ASSERT_FALSE(body.empty()) << what << " not found in the oracle test";
  EXPECT_GE(names.size(), 30u);
  for (std::string_view n : names)
    EXPECT_NE(body.find("\n    \"" + std::string(n) + "\": ["), std::string::npos)
        << what << " '" << n << "' has no probe in tests/oracle/test_jinja_builtins.py";
}

TEST(JinjaBuiltins, EveryFilterAndStrMethodHasAnOracleProbe) {
  const std::string file =
      testing::read_file(std::string(TQ_SOURCE_DIR) + "/tests/oracle/test_jinja_builtins.py");
  expect_probes(filter_names(), dict_body(file, "FILTERS"), "filter");
  expect_probes(str_method_names(), dict_body(file, "STR_METHODS"), "str method");
}

TEST(JinjaBuiltins, TablesAnswerEveryNameTheyList) {
  for (std::string_view n : filter_names()) {
    CallArgs none;
    auto r = call_filter(n, Value::string("x"), none);
    if (!r.ok()) {
      EXPECT_EQ(r.error().message.find("no filter named"), std::string::npos) << n;
    }
  }
  for (std::string_view n : str_method_names()) {
    EXPECT_TRUE(is_str_method(n)) << n;
    CallArgs none;
    auto r = call_str_method("x", n, none);
    if (!r.ok()) {
      EXPECT_EQ(r.error().message.find("unsupported"), std::string::npos) << n;
    }
  }
  CallArgs none;
  auto r = call_filter("no_such_filter", Value::string("x"), none);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("no filter named 'no_such_filter'"), std::string::npos);
  r = call_str_method("x", "zfill", none);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("unsupported string method 'zfill'"), std::string::npos);
}

}  // namespace
}  // namespace tq::jinja
