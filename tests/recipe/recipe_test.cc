#include "recipe/recipe.h"

#include <gtest/gtest.h>

#include <chrono>

#include "../testing/test_files.h"

namespace tq {
namespace {

std::string parse_error(const char* text) {
  auto r = parse_recipe(nlohmann::json::parse(text), "r.json");
  EXPECT_FALSE(r.ok()) << text;
  return r.ok() ? std::string() : r.error().message;
}

// Whether `m` matches; a matching error fails the test.
bool hit(const Result<ModuleMatcher>& m, std::string_view path, TensorRole role) {
  auto r = m->matches(path, role);
  EXPECT_TRUE(r.ok()) << r.error().message;
  return r.ok() && *r;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(ModuleMatcher, GlobRegexAndRole) {
  auto g = ModuleMatcher::parse("model.layers.*.mlp.down_proj", "t");
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(hit(g, "model.layers.12.mlp.down_proj", TensorRole::kMlpDown));
  EXPECT_FALSE(hit(g, "model.layers.12.mlp.down_proj2", TensorRole::kMlpDown));
  EXPECT_FALSE(hit(g, "modelXlayers.1.mlp.down_proj", TensorRole::kMlpDown));  // '.' literal
  auto q = ModuleMatcher::parse("model.layers.?.self_attn.[qk]_proj", "t");
  ASSERT_TRUE(q.ok());  // brackets are literal in globs
  EXPECT_TRUE(hit(q, "model.layers.3.self_attn.[qk]_proj", TensorRole::kAttnQ));
  EXPECT_FALSE(hit(q, "model.layers.3.self_attn.q_proj", TensorRole::kAttnQ));
  auto re = ModuleMatcher::parse("re:.*\\.(q|k)_proj", "t");
  ASSERT_TRUE(re.ok());
  EXPECT_TRUE(hit(re, "model.layers.0.self_attn.k_proj", TensorRole::kAttnK));
  EXPECT_FALSE(hit(re, "model.layers.0.self_attn.v_proj", TensorRole::kAttnV));
  EXPECT_FALSE(hit(re, "model.layers.0.self_attn.k_proj.x", TensorRole::kAttnK));  // whole path
  auto alt = ModuleMatcher::parse("re:lm|lm_head", "t");
  ASSERT_TRUE(alt.ok());  // a later alternative still matches the whole path
  EXPECT_TRUE(hit(alt, "lm_head", TensorRole::kLmHead));
  auto role = ModuleMatcher::parse("role:attn_v", "t");
  ASSERT_TRUE(role.ok());
  EXPECT_TRUE(hit(role, "anything", TensorRole::kAttnV));
  EXPECT_FALSE(hit(role, "model.layers.0.self_attn.v_proj", TensorRole::kAttnK));
  auto bad = ModuleMatcher::parse("re:(", "r.json rule 1");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message.rfind("r.json rule 1: invalid regular expression '('", 0), 0u);
  auto badrole = ModuleMatcher::parse("role:attn_z", "r.json");
  ASSERT_FALSE(badrole.ok());
  EXPECT_NE(badrole.error().message.find("unknown role 'attn_z'"), std::string::npos);
}

TEST(ModuleMatcher, GlobsMatchWithoutExponentialBacktracking) {
  EXPECT_TRUE(glob_match("", ""));
  EXPECT_FALSE(glob_match("", "a"));
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("a*b", "ab"));
  EXPECT_TRUE(glob_match("a*b", "axxbxb"));
  EXPECT_FALSE(glob_match("a*b", "axxbx"));
  EXPECT_TRUE(glob_match("*.mlp.*_proj", "model.layers.1.mlp.up_proj"));
  EXPECT_TRUE(glob_match("?*?", "ab"));
  EXPECT_FALSE(glob_match("?*?", "a"));
  EXPECT_TRUE(glob_match("**a", "xa"));
  EXPECT_TRUE(glob_match("a?c", "a\nc"));  // '?' is any byte
  // Many stars against a long non-matching path: exponential for a backtracking regex.
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(glob_match("*a*a*a*a*a*a*a*a*a*a*a*b", std::string(20000, 'a')));
  EXPECT_LT(seconds_since(t0), 1.0);
}

// Issue 31: nested quantifiers used to backtrack for minutes. PCRE2's match limit
// refuses them when the recipe loads, in well under a second, naming the rule.
TEST(ModuleMatcher, CostlyRegexesAreRefusedQuickly) {
  for (const char* re :
       {"re:(.*.*)*X", "re:(a+)+b", "re:(\\w+\\.?)+$", "re:(x+x+)+y", "re:(\\d|\\d\\d)+z"}) {
    auto t0 = std::chrono::steady_clock::now();
    auto r = parse_recipe(nlohmann::json{{"rules", {{{"match", re}, {"bits", 8}}}}}, "r.json");
    EXPECT_LT(seconds_since(t0), 1.0) << re;
    ASSERT_FALSE(r.ok()) << re;
    EXPECT_EQ(r.error().message.rfind(
                  fmt::format("r.json rule 1: pattern too costly to match: '{}' (PCRE2 ", re), 0),
              0u)
        << r.error().message;
  }
  // Simple patterns, even with several unbounded runs, pass the probe.
  for (const char* re : {"re:.*", "re:.*\\.(q|k)_proj", "re:model\\.layers\\.(\\d+)\\..*_proj",
                         "re:.*\\..*\\..*_proj", "re:(?:[a-z_]+\\.)*down_proj"}) {
    auto m = ModuleMatcher::parse(re, "t");
    EXPECT_TRUE(m.ok()) << re << ": " << m.error().message;
  }
}

// A pattern costly only on bytes the load-time probe does not try: the limit is still an error
// (not a silent non-match) when a module path reaches it.
TEST(ModuleMatcher, LimitHitWhileMatchingIsAnError) {
  auto m = ModuleMatcher::parse("re:(\\xe9+\\xe9+)+z", "r.json rule 2");
  ASSERT_TRUE(m.ok()) << m.error().message;
  auto t0 = std::chrono::steady_clock::now();
  auto r = m->matches(std::string(64, '\xe9') + "z!", TensorRole::kMlpUp);
  EXPECT_LT(seconds_since(t0), 1.0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message.rfind("r.json rule 2: pattern too costly to match: "
                                    "'re:(\\xe9+\\xe9+)+z' (PCRE2 match limit exceeded on '",
                                    0),
            0u)
      << r.error().message;
  EXPECT_TRUE(hit(m, "\xe9\xe9z", TensorRole::kMlpUp));
}

TEST(Recipe, ParsesDefaultsAndRules) {
  auto r = parse_recipe(nlohmann::json::parse(R"({"mode": "affine", "bits": 3, "group_size": 32,
      "description": "x", "rules": [{"match": "lm_head", "bits": 6},
      {"match": "role:attn_v", "layers": [0, 5], "mode": "mxfp4"},
      {"match": "model.embed_tokens", "float": true}]})"),
                        "r.json");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(*r->bits, 3);
  ASSERT_EQ(r->rules.size(), 3u);
  EXPECT_EQ(r->rules[1].layers, (std::vector<int64_t>{0, 5}));
  EXPECT_EQ(r->rules[1].where, "r.json rule 2");
  EXPECT_TRUE(r->rules[2].keep_float);
  QuantSpec global{QuantMode::kAffine, 3, 32};
  EXPECT_EQ(rule_spec(r->rules[0], global), (QuantSpec{QuantMode::kAffine, 6, 32}));
  // Another mode starts from that mode's defaults, as mlx-lm's per-module dicts do.
  EXPECT_EQ(rule_spec(r->rules[1], global), (QuantSpec{QuantMode::kMxfp4, 4, 32}));
  nlohmann::json j = r->to_json();
  EXPECT_EQ(j["rules"][1].dump(), R"({"layers":[0,5],"match":"role:attn_v","mode":"mxfp4"})");
}

TEST(Recipe, RejectsMalformedRecipesWithOneLine) {
  EXPECT_EQ(parse_error(R"({"rules": [{"bits": 4}]})"),
            "r.json rule 1: 'match' (a glob, \"re:REGEX\" or \"role:NAME\") is required");
  EXPECT_EQ(parse_error(R"({"rules": [{"match": "x", "float": true, "bits": 4}]})"),
            "r.json rule 1: a rule with \"float\": true takes no mode, bits or group_size");
  EXPECT_EQ(parse_error(R"({"rules": [{"match": "x"}]})"),
            "r.json rule 1: a rule needs \"float\": true, \"min_bits\" or at least one of mode, "
            "bits, group_size");
  EXPECT_EQ(parse_error(R"({"rules": [{"match": "x", "bitz": 4}]})"),
            "r.json rule 1: unknown key 'bitz' (match, layers, float, bits, group_size, mode, "
            "min_bits)");
  EXPECT_EQ(parse_error(R"({"rules": [{"match": "x", "mode": "int4"}]})"),
            "r.json rule 1: unknown mode 'int4' (affine, mxfp4, nvfp4, mxfp8)");
  EXPECT_EQ(parse_error(R"({"bits": "4"})"), "r.json: 'bits' must be an integer, got \"4\"");
  EXPECT_EQ(parse_error(R"([1])"), "r.json: a recipe must be a JSON object");
  EXPECT_EQ(parse_error(R"({"rules": {}})"), "r.json: 'rules' must be an array");
  EXPECT_EQ(parse_error(R"({"rules": [{"match": "x", "bits": 4, "layers": [-1]}]})"),
            "r.json rule 1: 'layers' must hold non-negative integers, got -1");
}

TEST(Recipe, LoadsFilesWithErrorsNamingThem) {
  testing::TempDir dir;
  testing::write_file(dir.file("r.json"), R"({"rules": [{"match": "lm_head", "bits": 8}]})");
  auto r = load_recipe_file(dir.file("r.json"));
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->rules[0].where, dir.file("r.json") + " rule 1");
  testing::write_file(dir.file("bad.json"), "{");
  auto b = load_recipe_file(dir.file("bad.json"));
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().message.rfind(dir.file("bad.json") + ": invalid JSON", 0), 0u);
  auto m = load_recipe_file(dir.file("missing.json"));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().message, dir.file("missing.json") + ": cannot open recipe file");
}

}  // namespace
}  // namespace tq
