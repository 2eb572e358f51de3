// Per-layer GPTQ checkpoint files (see gptq_driver.h).
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "quant/gptq_driver.h"

namespace tq {

namespace {

nlohmann::json ref(uint64_t* off, const std::vector<uint8_t>& b) {
  nlohmann::json r = {*off, b.size()};
  *off += b.size();
  return r;
}

}  // namespace

Status write_modules_file(const std::string& path, const std::vector<GptqModule>& mods) {
  nlohmann::json header = nlohmann::json::array();
  uint64_t off = 0;
  for (const GptqModule& m : mods) {
    nlohmann::json j = {{"name", m.name},
                        {"shape", m.shape},
                        {"mode", quant_mode_name(m.spec.mode)},
                        {"bits", m.spec.bits},
                        {"group_size", m.spec.group_size},
                        {"scale_dtype", dtype_name(m.scale_dtype)},
                        {"info", m.info}};
    j["weight"] = ref(&off, m.weight);
    j["scales"] = ref(&off, m.scales);
    j["biases"] = ref(&off, m.biases);
    header.push_back(std::move(j));
  }
  const std::string h = header.dump();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return err("{}: cannot write checkpoint", tmp);
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(h.size() >> (8 * i));
    f.write(reinterpret_cast<const char*>(len), 8);
    f.write(h.data(), static_cast<std::streamsize>(h.size()));
    for (const GptqModule& m : mods)
      for (const auto* b : {&m.weight, &m.scales, &m.biases})
        f.write(reinterpret_cast<const char*>(b->data()), static_cast<std::streamsize>(b->size()));
    if (!f.flush()) return err("{}: write failed", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return err("{}: cannot rename checkpoint: {}", path, ec.message());
  return ok_status();
}

Result<std::vector<GptqModule>> read_modules_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return err("{}: cannot open checkpoint", path);
  std::vector<uint8_t> data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (data.size() < 8) return err("{}: truncated checkpoint", path);
  uint64_t hlen = 0;
  for (int i = 0; i < 8; ++i) hlen |= static_cast<uint64_t>(data[i]) << (8 * i);
  if (hlen > data.size() - 8) return err("{}: header length {} past the end", path, hlen);
  const uint64_t base = 8 + hlen, blob = data.size() - base;
  std::vector<GptqModule> mods;
  try {
    const nlohmann::json header =
        nlohmann::json::parse(data.begin() + 8, data.begin() + static_cast<int64_t>(base));
    for (const auto& j : header) {
      GptqModule m;
      m.name = j.at("name").get<std::string>();
      m.shape = j.at("shape").get<Shape>();
      auto mode = quant_mode_from_name(j.at("mode").get<std::string>());
      auto sd = dtype_from_name(j.at("scale_dtype").get<std::string>());
      if (!mode || !sd) return err("{}: module '{}' has a bad mode or scale dtype", path, m.name);
      m.spec = {*mode, j.at("bits").get<int>(), j.at("group_size").get<int>()};
      m.scale_dtype = *sd;
      m.info = j.at("info");
      for (auto [key, dst] : {std::pair{"weight", &m.weight}, std::pair{"scales", &m.scales},
                              std::pair{"biases", &m.biases}}) {
        const uint64_t o = j.at(key).at(0).get<uint64_t>(), n = j.at(key).at(1).get<uint64_t>();
        if (o > blob || n > blob - o)
          return err("{}: module '{}' {} [{}, {}] past the end", path, m.name, key, o, n);
        dst->assign(data.begin() + static_cast<int64_t>(base + o),
                    data.begin() + static_cast<int64_t>(base + o + n));
      }
      mods.push_back(std::move(m));
    }
  } catch (const nlohmann::json::exception& e) {
    return err("{}: bad checkpoint header: {}", path, e.what());
  }
  return mods;
}

}  // namespace tq
