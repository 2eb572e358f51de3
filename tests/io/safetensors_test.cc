#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

#include "../testing/test_files.h"

namespace tq {
namespace {

using testing::as_bytes;
using testing::contains;
using testing::raw_safetensors;

// Parses raw bytes and returns the error message ("" on success).
std::string parse_error(const std::string& file) {
  auto r = parse_safetensors(as_bytes(file), "t.safetensors");
  return r.ok() ? "" : r.error().message;
}

std::string f32_bytes(std::vector<float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

TEST(SafetensorsReader, ParsesValidFile) {
  // Offsets deliberately not in name order: "b" first in the buffer.
  std::string header = R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("a":{"dtype":"BF16","shape":[1,2],"data_offsets":[8,12]},)"
                       R"("__metadata__":{"format":"mlx"}})";
  std::string data = f32_bytes({1.5f, -2.0f}) + std::string("\x80\x3f\x00\x40", 4);
  testing::TempDir tmp;
  testing::write_file(tmp.file("x.safetensors"), raw_safetensors(header, data));
  auto f = SafetensorsFile::open(tmp.file("x.safetensors"));
  ASSERT_TRUE(f.ok()) << f.error().message;
  ASSERT_EQ(f->entries().size(), 2u);
  EXPECT_EQ(f->entries()[0].name, "a");
  EXPECT_EQ(f->entries()[1].name, "b");
  EXPECT_EQ(f->entries()[0].dtype, DType::kBF16);
  EXPECT_EQ(f->entries()[0].shape, (Shape{1, 2}));
  EXPECT_EQ(f->metadata().at("format"), "mlx");
  const SafetensorsEntry* b = f->find("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(f->find("c"), nullptr);
  TensorView v = f->view(*b);
  ASSERT_EQ(v.bytes.size(), 8u);
  float x[2];
  std::memcpy(x, v.bytes.data(), 8);
  EXPECT_EQ(x[0], 1.5f);
  EXPECT_EQ(x[1], -2.0f);
  EXPECT_EQ(f->data(*f->find("a"))[1], 0x3f);
}

TEST(SafetensorsReader, AcceptsScalarsEmptyTensorsPaddingAndNullMetadata) {
  std::string header =
      R"({"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
      R"("z":{"dtype":"U8","shape":[0,3],"data_offsets":[4,4]},"__metadata__":null}   )";
  auto r = parse_safetensors(as_bytes(raw_safetensors(header, f32_bytes({3.0f}))), "t");
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r->entries.size(), 2u);
  EXPECT_EQ(r->entries[0].shape, Shape{});
  EXPECT_EQ(r->data_start, 8 + header.size());
  // An empty header object with no data is a valid (empty) file.
  EXPECT_EQ(parse_error(raw_safetensors("{}", "")), "");
}

TEST(SafetensorsReader, AcceptsEveryDtypeOfTheTable) {
  for (const char* d : {"BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0", "I16", "U16", "F16",
                        "BF16", "I32", "U32", "F32", "F64", "I64", "U64"}) {
    DType t = *dtype_from_name(d);
    size_t n = dtype_size(t);
    std::string header =
        fmt::format(R"({{"x":{{"dtype":"{}","shape":[3],"data_offsets":[0,{}]}}}})", d, 3 * n);
    EXPECT_EQ(parse_error(raw_safetensors(header, std::string(3 * n, '\0'))), "") << d;
  }
}

TEST(SafetensorsReader, RejectsBadLengths) {
  EXPECT_TRUE(contains(parse_error("abc"), "too short"));
  EXPECT_TRUE(contains(parse_error(raw_safetensors("", "", 0)), "header length is 0"));
  EXPECT_TRUE(contains(parse_error(raw_safetensors("{}", "", 100'000'000)), "too large"));
  EXPECT_TRUE(contains(parse_error(raw_safetensors("{}", "", 3)), "past end of file"));
  EXPECT_TRUE(contains(parse_error(raw_safetensors("{}", "", UINT64_MAX - 4)), "too large"));
  std::string good = raw_safetensors(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                                     f32_bytes({1, 2}));
  // Truncated file: the data buffer is 4 bytes short.
  EXPECT_TRUE(contains(parse_error(good.substr(0, good.size() - 4)), "truncated"));
  // Truncated inside the header.
  EXPECT_TRUE(contains(parse_error(good.substr(0, 20)), "past end of file"));
}

TEST(SafetensorsReader, RejectsBadHeaderJson) {
  EXPECT_TRUE(contains(parse_error(raw_safetensors("[1,2]", "")), "does not start with '{'"));
  EXPECT_TRUE(contains(parse_error(raw_safetensors(" {}", "")), "does not start with '{'"));
  EXPECT_TRUE(contains(parse_error(raw_safetensors("{\"x\":", "")), "invalid JSON"));
  EXPECT_TRUE(contains(parse_error(raw_safetensors("{} x", "")), "invalid JSON"));
  EXPECT_TRUE(contains(parse_error(raw_safetensors("{\"\xff\":1}", "")), "invalid JSON"));
  EXPECT_TRUE(contains(parse_error(raw_safetensors(R"({"x":1})", "")), "must be an object"));
  EXPECT_TRUE(
      contains(parse_error(raw_safetensors(R"({"x":{"a":[[[[[1]]]]]}})", "")), "nested deeper"));
}

TEST(SafetensorsReader, ErrorsStayOnOneLine) {
  for (const std::string& h :
       {std::string("{\n\"x\":\n\n}"), std::string(R"({"a\nb":{}})"),
        std::string(R"({"x":{"dtype":"F\n4","shape":[],"data_offsets":[0,0]}})"),
        std::string(R"({"__metadata__":{"a\nb":1}})")}) {
    std::string e = parse_error(raw_safetensors(h, ""));
    EXPECT_NE(e, "");
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
  EXPECT_TRUE(contains(parse_error(raw_safetensors(R"({"a\u0007":{}})", "")), "control"));
}

TEST(SafetensorsReader, RejectsDuplicateKeys) {
  std::string e = R"("x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  EXPECT_TRUE(contains(parse_error(raw_safetensors("{" + e + "," + e + "}", f32_bytes({1}))),
                       "duplicate key 'x'"));
  std::string inner = R"({"x":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  EXPECT_TRUE(contains(parse_error(raw_safetensors(inner, f32_bytes({1}))), "duplicate key"));
}

TEST(SafetensorsReader, RejectsBadEntries) {
  auto one = [](const std::string& entry, const std::string& data) {
    return parse_error(raw_safetensors("{\"w\":" + entry + "}", data));
  };
  std::string four(4, '\0');
  EXPECT_TRUE(contains(one(R"({"dtype":"F4","shape":[1],"data_offsets":[0,4]})", four),
                       "unknown dtype 'F4'"));
  EXPECT_TRUE(contains(one(R"({"dtype":7,"shape":[1],"data_offsets":[0,4]})", four),
                       "dtype must be a string"));
  EXPECT_TRUE(contains(one(R"({"shape":[1],"data_offsets":[0,4]})", four), "missing 'dtype'"));
  EXPECT_TRUE(contains(one(R"({"dtype":"F32","data_offsets":[0,4]})", four), "missing 'shape'"));
  EXPECT_TRUE(contains(one(R"({"dtype":"F32","shape":[1]})", four), "missing 'data_offsets'"));
  EXPECT_TRUE(
      contains(one(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})", four), "non-negative"));
  EXPECT_TRUE(
      contains(one(R"({"dtype":"F32","shape":[1.0],"data_offsets":[0,4]})", four), "non-negative"));
  EXPECT_TRUE(
      contains(one(R"({"dtype":"F32","shape":[1],"data_offsets":[0]})", four), "[begin, end]"));
  EXPECT_TRUE(contains(one(R"({"dtype":"F32","shape":[1],"data_offsets":[4,0]})", four),
                       "end before begin"));
  // Shape/size mismatch: [2] F32 needs 8 bytes.
  std::string msg = one(R"({"dtype":"F32","shape":[2],"data_offsets":[0,4]})", four);
  EXPECT_TRUE(contains(msg, "hold 4 bytes but F32 [2] needs 8")) << msg;
  EXPECT_TRUE(contains(msg, "t.safetensors: tensor 'w'")) << msg;
  EXPECT_TRUE(contains(
      one(R"({"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]})", four),
      "overflows"));
  EXPECT_TRUE(
      contains(one(R"({"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,4]})", four),
               "overflows"));
}

TEST(SafetensorsReader, RejectsOverlapGapAndTrailingBytes) {
  auto two = [](uint64_t b0, uint64_t e0, uint64_t b1, uint64_t e1, size_t data) {
    std::string h = fmt::format(R"({{"a":{{"dtype":"U8","shape":[{}],"data_offsets":[{},{}]}},)"
                                R"("b":{{"dtype":"U8","shape":[{}],"data_offsets":[{},{}]}}}})",
                                e0 - b0, b0, e0, e1 - b1, b1, e1);
    return parse_error(raw_safetensors(h, std::string(data, 'x')));
  };
  EXPECT_EQ(two(0, 4, 4, 8, 8), "");
  EXPECT_TRUE(contains(two(0, 4, 2, 6, 6), "overlap")) << two(0, 4, 2, 6, 6);
  EXPECT_TRUE(contains(two(0, 4, 0, 4, 4), "overlap"));
  EXPECT_TRUE(contains(two(0, 4, 5, 9, 9), "gap"));
  EXPECT_TRUE(contains(two(1, 5, 5, 9, 9), "gap after offset 0"));
  EXPECT_TRUE(contains(two(0, 4, 4, 8, 9), "trailing bytes"));
  EXPECT_TRUE(contains(two(0, 4, 4, 8, 7), "truncated"));
}

TEST(SafetensorsReader, RejectsBadMetadata) {
  EXPECT_TRUE(contains(parse_error(raw_safetensors(R"({"__metadata__":{"format":1}})", "")),
                       "__metadata__ value of 'format' must be a string"));
  EXPECT_TRUE(contains(parse_error(raw_safetensors(R"({"__metadata__":["a"]})", "")),
                       "__metadata__ must be an object"));
}

TEST(SafetensorsReader, OpenErrorsNameThePath) {
  testing::TempDir tmp;
  std::string p = tmp.file("bad.safetensors");
  testing::write_file(p, raw_safetensors("{}", "", 99));
  auto f = SafetensorsFile::open(p);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.error().message.rfind(p + ": ", 0), 0u) << f.error().message;
  auto g = SafetensorsFile::open(tmp.file("missing.safetensors"));
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(contains(g.error().message, "missing.safetensors: cannot open"));
  auto d = SafetensorsFile::open(tmp.path());
  EXPECT_FALSE(d.ok());
}

}  // namespace
}  // namespace tq
