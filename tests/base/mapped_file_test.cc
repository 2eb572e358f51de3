#include "base/mapped_file.h"

#include <gtest/gtest.h>

#include <vector>

#include "../testing/test_files.h"

namespace tq {
namespace {

// release() only drops resident pages: the bytes read back unchanged from the file.
TEST(MappedFile, ReleaseIsLossless) {
  testing::TempDir tmp;
  std::string data(5 * 4096 + 123, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7 + 3);
  testing::write_file(tmp.file("f.bin"), data);
  auto m = MappedFile::open(tmp.file("f.bin"));
  ASSERT_TRUE(m.ok()) << m.error().message;
  std::span<const uint8_t> b = m->bytes();
  uint64_t sum = 0;
  for (uint8_t x : b) sum += x;  // make every page resident
  m->release(b.subspan(100, 3 * 4096));
  m->release(b);
  std::vector<uint8_t> other(64);
  m->release(other);  // not part of the mapping: ignored
  ASSERT_EQ(b.size(), data.size());
  for (size_t i = 0; i < data.size(); ++i) ASSERT_EQ(b[i], static_cast<uint8_t>(data[i])) << i;
  EXPECT_GT(sum, 0u);
}

}  // namespace
}  // namespace tq
