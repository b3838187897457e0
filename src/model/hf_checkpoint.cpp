#include "model/hf_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "backend/quant.h"
#include "common/printable.h"
#include "model/hf_config.h"
#include "model/hf_tokenizer.h"
#include "model/safetensors.h"

namespace kvlm {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

// The mappings the tensors point into, and the bytes made here.
struct HfOwner : TensorOwner {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::vector<std::vector<uint8_t>> buffers;
};

Json read_config(const fs::path& dir) {
  std::ifstream in(dir / "config.json");
  if (!in) throw_error(ErrorCode::kNotFound, "{}: no config.json (a Hugging Face checkpoint folder needs it)", dir.string());
  Json j = Json::parse(in, nullptr, false);
  if (j.is_discarded()) throw_error(ErrorCode::kCorrupt, "{}: config.json is not JSON", dir.string());
  return j;
}

// The safetensors files: one, or the shards the index lists.
std::vector<std::unique_ptr<SafetensorsFile>> open_weights(const fs::path& dir) {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  const fs::path index_path = dir / "model.safetensors.index.json";
  if (!fs::exists(index_path)) {
    files.push_back(SafetensorsFile::open((dir / "model.safetensors").string()));
    return files;
  }
  std::ifstream in(index_path);
  const Json index = Json::parse(in, nullptr, false);
  if (index.is_discarded() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw_error(ErrorCode::kCorrupt, "{}: no 'weight_map' object", index_path.string());
  std::map<std::string, std::vector<std::string>> by_file;
  for (const auto& [name, file] : index["weight_map"].items()) {
    const std::string f = file.get<std::string>();
    if (f.find('/') != std::string::npos || f == "..")
      throw_error(ErrorCode::kCorrupt, "{}: shard '{}' is not a file of the folder", index_path.string(), printable(f));
    by_file[f].push_back(name);
  }
  for (const auto& [file, names] : by_file) {
    files.push_back(SafetensorsFile::open((dir / file).string()));
    for (const std::string& name : names)
      if (!files.back()->find(name))
        throw_error(ErrorCode::kCorrupt, "{}: the index puts tensor '{}' in it, but it is not there",
                    files.back()->path(), printable(name));
  }
  return files;
}

using MappedName = HfGgufName;

std::optional<MappedName> map_layer_part(const std::string& rest, int64_t layer, const std::string& arch) {
  const std::string blk = "blk." + std::to_string(layer) + ".";
  // Gemma-2 norms its sub-layers' inputs and outputs both.
  if (arch == "gemma2") {
    static const std::pair<const char*, const char*> kGemma2[] = {
        {"post_attention_layernorm.weight", "post_attention_norm.weight"},
        {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
        {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"}};
    for (const auto& [hf, gguf] : kGemma2)
      if (rest == hf) return MappedName{blk + gguf, layer, -1};
  }
  static const std::pair<const char*, const char*> kParts[] = {
      {"input_layernorm.weight", "attn_norm.weight"}, {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},   {"self_attn.q_proj.bias", "attn_q.bias"},
      {"self_attn.k_proj.weight", "attn_k.weight"},   {"self_attn.k_proj.bias", "attn_k.bias"},
      {"self_attn.v_proj.weight", "attn_v.weight"},   {"self_attn.v_proj.bias", "attn_v.bias"},
      {"self_attn.o_proj.weight", "attn_output.weight"}, {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"}, {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},        {"mlp.down_proj.weight", "ffn_down.weight"},
      // Phi-3's fused matrices, kept fused as in its GGUF: [q; k; v] and [gate; up].
      {"self_attn.qkv_proj.weight", "attn_qkv.weight"}, {"mlp.gate_up_proj.weight", "ffn_up.weight"},
      {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"}, {"mlp.gate.weight", "ffn_gate_inp.weight"},
      {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
      {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
      {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
      {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
  };
  for (const auto& [hf, gguf] : kParts)
    if (rest == hf) return MappedName{blk + gguf, layer, -1};
  // Experts: block_sparse_moe.experts.E.w1 (Mixtral) or mlp.experts.E.gate_proj (Qwen MoE).
  for (const char* prefix : {"block_sparse_moe.experts.", "mlp.experts."}) {
    if (rest.rfind(prefix, 0) != 0) continue;
    const std::string tail = rest.substr(std::strlen(prefix));
    const size_t dot = tail.find('.');
    if (dot == std::string::npos || dot == 0 || tail.find_first_not_of("0123456789") != dot) return std::nullopt;
    const int64_t e = std::stoll(tail.substr(0, dot));
    const std::string w = tail.substr(dot + 1);
    const char* kind = w == "w1.weight" || w == "gate_proj.weight" ? "ffn_gate_exps.weight"
                       : w == "w3.weight" || w == "up_proj.weight" ? "ffn_up_exps.weight"
                       : w == "w2.weight" || w == "down_proj.weight" ? "ffn_down_exps.weight" : nullptr;
    if (!kind) return std::nullopt;
    return MappedName{blk + kind, layer, e};
  }
  return std::nullopt;
}

std::optional<MappedName> map_name(const std::string& hf, const std::string& arch) {
  if (hf == "model.embed_tokens.weight") return MappedName{"token_embd.weight", -1, -1};
  if (hf == "model.norm.weight") return MappedName{"output_norm.weight", 1 << 30, -1};
  if (hf == "lm_head.weight") return MappedName{"output.weight", 1 << 30, -1};
  const std::string prefix = "model.layers.";
  if (hf.rfind(prefix, 0) != 0) return std::nullopt;
  const size_t dot = hf.find('.', prefix.size());
  const std::string num = hf.substr(prefix.size(), dot - prefix.size());
  if (dot == std::string::npos || num.empty() || num.size() > 6 || num.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return map_layer_part(hf.substr(dot + 1), std::stoll(num), arch);
}

}  // namespace

std::optional<HfGgufName> hf_gguf_name(const std::string& hf, const std::string& arch) { return map_name(hf, arch); }

namespace {

GgufTensor gguf_tensor(const std::string& name, const SafetensorsTensor& t) {
  GgufTensor g;
  g.name = name;
  g.dims.assign(t.shape.rbegin(), t.shape.rend());
  g.dtype = t.dtype;
  g.data = t.data;
  g.num_bytes = t.num_bytes;
  return g;
}

// A GPT-2 Conv1D weight, stored [in, out] (GGUF dims {out, in}), as the
// rows of `in` values GGUF holds (dims {in, out}), copied into `out`.
void transpose_conv1d(GgufTensor& t, std::vector<uint8_t>& out) {
  if (t.dims.size() != 2 || row_bytes(t.dtype, 1) == 0 || dtype_info(t.dtype).block_size != 1)
    throw_error(ErrorCode::kCorrupt, "{}: a GPT-2 Conv1D weight must be a float matrix", t.name);
  const int64_t rows = t.dims[1], cols = t.dims[0];  // HF's [in, out]: `in` rows of `out` values
  const size_t e = row_bytes(t.dtype, 1);
  out.resize(t.num_bytes);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t o = 0; o < cols; ++o)
      std::memcpy(&out[(static_cast<size_t>(o) * rows + i) * e], t.data + (static_cast<size_t>(i) * cols + o) * e, e);
  t.dims = {rows, cols};
  t.data = out.data();
}

// Gemma-2's norm weight w as GGUF stores it: 1 + w, in F32 (copied into `out`).
void add_one(GgufTensor& t, std::vector<uint8_t>& out) {
  const int64_t n = t.num_elements();
  out.resize(static_cast<size_t>(n) * sizeof(float));
  auto* f = reinterpret_cast<float*>(out.data());
  dequantize_row(t.dtype, t.data, f, n);  // F32, F16 or BF16
  for (int64_t i = 0; i < n; ++i) f[i] += 1.0f;
  t.dtype = DType::kF32;
  t.data = out.data();
  t.num_bytes = out.size();
}

// HF keeps each head's rotary pairs as (first half, second half) of its rows;
// llama's GGUF interleaves them: GGUF row 2i + h of a head is HF row
// h * head_dim / 2 + i. The rows are copied into `out`.
void permute_qk(GgufTensor& t, int64_t num_heads, std::vector<uint8_t>& out) {
  const int64_t rows = t.dims.size() > 1 ? t.dims[1] : t.dims[0];
  const size_t row_bytes = t.num_bytes / static_cast<size_t>(rows);
  const int64_t head_dim = rows / num_heads;
  out.resize(t.num_bytes);
  for (int64_t h = 0; h < num_heads; ++h)
    for (int64_t i = 0; i < head_dim / 2; ++i)
      for (int64_t half = 0; half < 2; ++half)
        std::memcpy(out.data() + (h * head_dim + 2 * i + half) * row_bytes,
                    t.data + (h * head_dim + half * head_dim / 2 + i) * row_bytes, row_bytes);
  t.data = out.data();
}

// One [num_experts, rows, cols] tensor of the experts' matrices, each left in its mapping.
GgufTensor stack_experts(const std::string& name, const std::map<int64_t, const SafetensorsTensor*>& experts,
                         const std::string& dir) {
  const SafetensorsTensor& first = *experts.begin()->second;
  GgufTensor g = gguf_tensor(name, first);
  g.dims.push_back(static_cast<int64_t>(experts.size()));
  g.num_bytes = 0;
  int64_t expect = 0;
  for (const auto& [e, t] : experts) {
    if (e != expect++ || t->shape != first.shape || t->dtype != first.dtype)
      throw_error(ErrorCode::kCorrupt, "{}: expert {} of '{}' is missing or differs from expert 0 in shape or dtype",
                  dir, expect - 1, name);
    g.slices.push_back(t->data);
    g.num_bytes += t->num_bytes;
  }
  return g;
}

std::vector<GgufTensor> map_tensors(const std::vector<std::unique_ptr<SafetensorsFile>>& files, const HfModelInfo& info,
                                    const std::string& dir, HfOwner& owner) {
  std::vector<std::pair<MappedName, GgufTensor>> out;
  std::map<std::string, std::map<int64_t, const SafetensorsTensor*>> experts;
  std::map<std::string, int64_t> expert_layer;
  for (const auto& f : files) {
    for (const SafetensorsTensor& t : f->tensors()) {
      if (t.name.size() > 9 && t.name.compare(t.name.size() - 9, 9, ".inv_freq") == 0) continue;  // recomputed
      std::optional<MappedName> m;
      bool transpose = false;
      if (info.arch == "gpt2") {
        if (const std::optional<Gpt2Name> g = gpt2_gguf_name(t.name)) {
          if (g->name.empty()) continue;  // a causal-mask buffer
          m = MappedName{g->name, g->layer, -1};
          transpose = g->transpose;
        }
      } else {
        m = map_name(t.name, info.arch);
      }
      if (!m) throw_error(ErrorCode::kUnsupported, "{}: tensor '{}' is not part of a model kvlm implements",
                          f->path(), printable(t.name));
      if (m->expert >= 0) {
        if (!experts[m->name].emplace(m->expert, &t).second)
          throw_error(ErrorCode::kCorrupt, "{}: tensor '{}' appears twice", dir, printable(t.name));
        expert_layer[m->name] = m->layer;
        continue;
      }
      GgufTensor g = gguf_tensor(m->name, t);
      const bool q = g.name.find("attn_q.") != std::string::npos, k = g.name.find("attn_k.") != std::string::npos;
      if (info.permute_qk && (q || k)) permute_qk(g, q ? info.num_heads : info.num_kv_heads, owner.buffers.emplace_back());
      if (info.norm_plus_one && g.name.ends_with("norm.weight")) add_one(g, owner.buffers.emplace_back());
      if (transpose) transpose_conv1d(g, owner.buffers.emplace_back());
      out.emplace_back(*m, std::move(g));
    }
  }
  for (const auto& [name, stack] : experts)
    out.emplace_back(MappedName{name, expert_layer[name], 0}, stack_experts(name, stack, dir));
  // llama.cpp's order: embeddings, layers in order, then the head.
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return std::tie(a.first.layer, a.first.name) < std::tie(b.first.layer, b.first.name);
  });
  std::vector<GgufTensor> tensors;
  for (auto& [m, g] : out) tensors.push_back(std::move(g));
  return tensors;
}

// The rope factor tensors first, as llama.cpp's converter orders them.
void add_rope_factors(const HfModelInfo& info, HfOwner& owner, std::vector<GgufTensor>& tensors) {
  for (auto it = info.rope_factors.rbegin(); it != info.rope_factors.rend(); ++it) {
    const auto& [name, factors] = *it;
    std::vector<uint8_t>& bytes = owner.buffers.emplace_back(factors.size() * sizeof(float));
    std::memcpy(bytes.data(), factors.data(), bytes.size());
    GgufTensor g;
    g.name = name;
    g.dims = {static_cast<int64_t>(factors.size())};
    g.data = bytes.data();
    g.num_bytes = bytes.size();
    tensors.insert(tensors.begin(), std::move(g));
  }
}

int64_t config_id(const Json& config, const char* key) {
  if (!config.contains(key)) return -1;
  const Json& v = config[key];
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_array() && !v.empty() && v[0].is_number_integer()) return v[0].get<int64_t>();
  return -1;
}

// A sentence-transformers folder names its pooling in the Pooling module's
// config (modules.json says where; 1_Pooling by convention): written as
// llama.cpp's pooling_type (1 mean, 2 cls, 3 last), which the server reads.
void read_pooling(const fs::path& root, const std::string& arch, Metadata& out) {
  fs::path dir = root / "1_Pooling";
  if (std::ifstream modules(root / "modules.json"); modules) {
    const Json m = Json::parse(modules, nullptr, false);
    if (m.is_array())
      for (const Json& module : m)
        if (module.is_object() && module.value("type", "") == "sentence_transformers.models.Pooling" &&
            module.contains("path") && module["path"].is_string())
          dir = root / module["path"].get<std::string>();
  }
  std::ifstream in(dir / "config.json");
  if (!in) return;
  const Json c = Json::parse(in, nullptr, false);
  if (!c.is_object()) throw_error(ErrorCode::kCorrupt, "{}: not a JSON object", (dir / "config.json").string());
  int64_t type = -1;
  if (c.value("pooling_mode_mean_tokens", false)) type = 1;
  if (c.value("pooling_mode_cls_token", false)) type = 2;
  if (c.value("pooling_mode_lasttoken", false)) type = 3;
  if (c.value("pooling_mode_max_tokens", false) || c.value("pooling_mode_weightedmean_tokens", false))
    type = 5;  // none kvlm has: the server asks for --pooling
  if (type >= 0) out.set(arch + ".pooling_type", meta_u32(static_cast<uint32_t>(type)));
}

}  // namespace

std::unique_ptr<GgufFile> open_hf_checkpoint(const std::string& dir) {
  const fs::path root(dir);
  const Json config = read_config(root);
  Metadata m;
  const HfModelInfo info = read_hf_config(config, (root / "config.json").string(), m);
  m.set("general.name", meta_string(fs::absolute(root).lexically_normal().filename().string()));
  read_hf_tokenizer(dir, config_id(config, "bos_token_id"), config_id(config, "eos_token_id"), m);
  read_pooling(root, info.arch, m);
  auto owner = std::make_unique<HfOwner>();
  owner->files = open_weights(root);
  std::vector<GgufTensor> tensors = map_tensors(owner->files, info, dir, *owner);
  add_rope_factors(info, *owner, tensors);
  const bool has_head = std::any_of(tensors.begin(), tensors.end(), [](const GgufTensor& t) { return t.name == "output.weight"; });
  if (!has_head && !info.tied_embeddings)
    throw_error(ErrorCode::kCorrupt, "{}: no lm_head.weight, and config.json does not set tie_word_embeddings", dir);
  return GgufFile::from_parts(dir, std::move(m), std::move(tensors), std::move(owner));
}

std::unique_ptr<GgufFile> open_model_file(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return open_hf_checkpoint(path);
  return GgufFile::open(path);
}

}  // namespace kvlm
