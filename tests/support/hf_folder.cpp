#include "support/hf_folder.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "backend/quant.h"
#include "common/assert.h"

namespace kvlm::test {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
  KVLM_ASSERT(out.good(), "hf_folder: write failed");
}

// GGUF layer part -> HF name (transformers' modeling_llama / qwen2 / qwen3,
// the MoE parts of modeling_mixtral / qwen2_moe / qwen3_moe, and
// modeling_phi3's fused qkv_proj and gate_up_proj).
std::string hf_name(const std::string& gguf, bool mixtral, bool phi3, bool gemma2) {
  if (gguf == "token_embd.weight") return "model.embed_tokens.weight";
  if (gguf == "output_norm.weight") return "model.norm.weight";
  if (gguf == "output.weight") return "lm_head.weight";
  static const std::map<std::string, std::string> kParts = {
      {"attn_norm.weight", "input_layernorm.weight"}, {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},   {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.weight", "self_attn.k_proj.weight"},   {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.weight", "self_attn.v_proj.weight"},   {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_output.weight", "self_attn.o_proj.weight"}, {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"}, {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},        {"ffn_down.weight", "mlp.down_proj.weight"},
      {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight"},
      {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"},
      {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight"},
      {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"}};
  if (gguf.find("ffn_gate_inp.weight") != std::string::npos)
    return "model.layers." + gguf.substr(4, gguf.find('.', 4) - 4) + (mixtral ? ".block_sparse_moe.gate.weight" : ".mlp.gate.weight");
  const size_t a = gguf.find('.'), b = gguf.find('.', a + 1);
  KVLM_ASSERT(gguf.rfind("blk.", 0) == 0 && b != std::string::npos, "hf_folder: unexpected tensor name");
  const std::string part = gguf.substr(b + 1);
  static const std::map<std::string, std::string> kGemma2 = {
      {"post_attention_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_norm.weight", "pre_feedforward_layernorm.weight"},
      {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"}};
  if (gemma2 && kGemma2.count(part)) return "model.layers." + gguf.substr(a + 1, b - a - 1) + "." + kGemma2.at(part);
  if (phi3 && (part == "attn_qkv.weight" || part == "ffn_up.weight"))
    return "model.layers." + gguf.substr(a + 1, b - a - 1) +
           (part == "attn_qkv.weight" ? ".self_attn.qkv_proj.weight" : ".mlp.gate_up_proj.weight");
  auto it = kParts.find(part);
  KVLM_ASSERT(it != kParts.end(), "hf_folder: no HF name for this tensor");
  return "model.layers." + gguf.substr(a + 1, b - a - 1) + "." + it->second;
}

// The tensor's bytes in HF's layout and `dtype`: llama's Q/K rows back to
// HF's halves order (GGUF row 2i + h of a head is HF row h * head_dim / 2 + i);
// `minus_one`: a Gemma-2 norm, which HF stores as w - 1.
// `transpose`: a GPT-2 Conv1D weight, which HF stores [in, out].
std::vector<uint8_t> hf_bytes(const GgufTensor& t, DType dtype, int64_t permute_heads, bool minus_one = false,
                              bool transpose = false) {
  const int64_t cols = t.dims[0], n = t.num_elements(), rows = n / cols;
  std::vector<float> f(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r)
    dequantize_row(t.dtype, t.data + r * row_bytes(t.dtype, cols), &f[r * cols], cols);
  if (minus_one)
    for (float& x : f) x -= 1.0f;
  if (transpose) {
    std::vector<float> tr(f.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) tr[c * rows + r] = f[r * cols + c];
    f = std::move(tr);
  }
  if (permute_heads > 0) {
    const int64_t prow = t.dims.size() > 1 ? cols : 1, prows = n / prow, head_dim = prows / permute_heads;
    std::vector<float> p(f.size());
    for (int64_t h = 0; h < permute_heads; ++h)
      for (int64_t i = 0; i < head_dim / 2; ++i)
        for (int64_t half = 0; half < 2; ++half)
          std::copy_n(&f[(h * head_dim + 2 * i + half) * prow], prow, &p[(h * head_dim + half * head_dim / 2 + i) * prow]);
    f = std::move(p);
  }
  std::vector<uint8_t> out(row_bytes(dtype, n));
  quantize_row(dtype, f.data(), out.data(), n);
  return out;
}

using HfTensors = std::vector<std::tuple<std::string, std::vector<int64_t>, DType, std::vector<uint8_t>>>;

// A GGUF expert stack ({cols, rows, experts}) as HF's one tensor per expert.
void add_experts(const GgufTensor& t, DType dtype, bool mixtral, HfTensors& out) {
  const std::string layer = t.name.substr(4, t.name.find('.', 4) - 4);
  const std::string kind = t.name.substr(t.name.find('.', 4) + 1);
  const char* part = kind == "ffn_gate_exps.weight" ? (mixtral ? "w1" : "gate_proj")
                     : kind == "ffn_up_exps.weight" ? (mixtral ? "w3" : "up_proj") : (mixtral ? "w2" : "down_proj");
  GgufTensor one = t;
  one.dims.pop_back();
  one.num_bytes = t.num_bytes / static_cast<size_t>(t.dims[2]);
  for (int64_t e = 0; e < t.dims[2]; ++e) {
    one.data = t.data + e * one.num_bytes;
    out.emplace_back(fmt::format("model.layers.{}.{}.experts.{}.{}.weight", layer, mixtral ? "block_sparse_moe" : "mlp", e, part),
                     std::vector<int64_t>{one.dims[1], one.dims[0]}, dtype, hf_bytes(one, dtype, 0));
  }
}

void write_safetensors(const fs::path& p, const HfTensors& tensors) {
  Json header = {{"__metadata__", {{"format", "pt"}}}};
  uint64_t offset = 0;
  for (const auto& [name, shape, dtype, bytes] : tensors) {
    header[name] = {{"dtype", std::string(dtype_name(dtype))}, {"shape", shape}, {"data_offsets", {offset, offset + bytes.size()}}};
    offset += bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t n = text.size();
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << text;
  for (const auto& t : tensors) out.write(reinterpret_cast<const char*>(std::get<3>(t).data()), static_cast<std::streamsize>(std::get<3>(t).size()));
  KVLM_ASSERT(out.good(), "hf_folder: write failed");
}

// A GGUF float vector tensor's values (Phi-3's rope factors).
std::vector<float> float_values(const GgufTensor& t) {
  KVLM_ASSERT(t.dtype == DType::kF32, "hf_folder: rope factors are F32");
  std::vector<float> v(static_cast<size_t>(t.num_elements()));
  std::memcpy(v.data(), t.data, v.size() * sizeof(float));
  return v;
}

// Phi-3's fields: its window, the rope's trained context, and long-rope's
// factors (from the GGUF's rope_factors tensors) as modeling_phi3 reads them.
void phi3_config(const GgufFile& gguf, Json& c) {
  const Metadata& m = gguf.metadata();
  const int64_t window = m.require_int("phi3.attention.sliding_window");
  c["sliding_window"] = window > 0 ? Json(window) : Json();
  c["original_max_position_embeddings"] = m.require_int("phi3.rope.scaling.original_context_length");
  c["embd_pdrop"] = 0.0;
  c["resid_pdrop"] = 0.0;
  c["attention_bias"] = false;
  const GgufTensor* long_f = gguf.find_tensor("rope_factors_long.weight");
  const GgufTensor* short_f = gguf.find_tensor("rope_factors_short.weight");
  if (long_f && short_f)
    c["rope_scaling"] = {{"type", "longrope"}, {"long_factor", float_values(*long_f)},
                         {"short_factor", float_values(*short_f)}};
}

// GPT-2's names (GPT2LMHeadModel's state dict without the `transformer.`
// prefix, as the original checkpoint keeps it) and whether the weight is a
// Conv1D one, stored [in, out].
std::pair<std::string, bool> gpt2_hf_name(const std::string& gguf) {
  static const std::map<std::string, std::string> kTop = {
      {"token_embd.weight", "wte.weight"}, {"position_embd.weight", "wpe.weight"},
      {"output_norm.weight", "ln_f.weight"}, {"output_norm.bias", "ln_f.bias"}, {"output.weight", "lm_head.weight"}};
  if (kTop.count(gguf)) return {kTop.at(gguf), false};
  static const std::map<std::string, std::string> kParts = {
      {"attn_norm", "ln_1"}, {"attn_qkv", "attn.c_attn"}, {"attn_output", "attn.c_proj"},
      {"ffn_norm", "ln_2"},  {"ffn_up", "mlp.c_fc"},      {"ffn_down", "mlp.c_proj"}};
  const size_t a = gguf.find('.'), b = gguf.find('.', a + 1), c = gguf.rfind('.');
  const std::string part = gguf.substr(b + 1, c - b - 1), kind = gguf.substr(c);
  KVLM_ASSERT(kParts.count(part), "hf_folder: no GPT-2 name for this tensor");
  return {"h." + gguf.substr(a + 1, b - a - 1) + "." + kParts.at(part) + kind,
          kind == ".weight" && part != "attn_norm" && part != "ffn_norm"};
}

Json gpt2_config_json(const Metadata& m, bool tied) {
  Json c = {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}, {"activation_function", "gelu_new"},
            {"n_embd", m.require_int("gpt2.embedding_length")}, {"n_layer", m.require_int("gpt2.block_count")},
            {"n_head", m.require_int("gpt2.attention.head_count")}, {"n_positions", m.require_int("gpt2.context_length")},
            {"n_ctx", m.require_int("gpt2.context_length")}, {"n_inner", m.require_int("gpt2.feed_forward_length")},
            {"layer_norm_epsilon", m.get_float("gpt2.attention.layer_norm_epsilon").value_or(1e-5)},
            {"vocab_size", m.require_string_array("tokenizer.ggml.tokens").size()}, {"resid_pdrop", 0.1},
            {"embd_pdrop", 0.1}, {"attn_pdrop", 0.1}, {"scale_attn_weights", true}, {"use_cache", true},
            {"tie_word_embeddings", tied}, {"summary_type", "cls_index"}, {"torch_dtype", "float32"}};
  if (auto bos = m.get_int("tokenizer.ggml.bos_token_id")) c["bos_token_id"] = *bos;
  if (auto eos = m.get_int("tokenizer.ggml.eos_token_id")) c["eos_token_id"] = *eos;
  return c;
}

Json config_json(const Metadata& m, bool tied) {
  const std::string arch = m.require_string("general.architecture"), p = arch + ".";
  const int64_t experts = m.get_int(p + "expert_count").value_or(0);
  const std::map<std::string, std::string> names = {
      {"llama", experts > 0 ? "MixtralForCausalLM" : "LlamaForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"},
      {"qwen3", "Qwen3ForCausalLM"}, {"qwen2moe", "Qwen2MoeForCausalLM"}, {"qwen3moe", "Qwen3MoeForCausalLM"},
      {"phi3", "Phi3ForCausalLM"}, {"gemma2", "Gemma2ForCausalLM"}};
  KVLM_ASSERT(names.count(arch), "hf_folder: llama (Mixtral), qwen2, qwen3, qwen2moe, qwen3moe, phi3 and gemma2 only");
  const int64_t heads = m.require_int(p + "attention.head_count");
  Json c = {{"architectures", {names.at(arch)}}, {"model_type", arch}, {"hidden_act", "silu"},
            {"hidden_size", m.require_int(p + "embedding_length")}, {"num_hidden_layers", m.require_int(p + "block_count")},
            {"num_attention_heads", heads}, {"num_key_value_heads", m.get_int(p + "attention.head_count_kv").value_or(heads)},
            {"intermediate_size", m.require_int(p + "feed_forward_length")},
            {"max_position_embeddings", m.get_int(p + "context_length").value_or(2048)},
            {"rms_norm_eps", m.get_float(p + "attention.layer_norm_rms_epsilon").value_or(1e-5)},
            {"rope_theta", m.get_float(p + "rope.freq_base").value_or(10000.0)},
            {"vocab_size", m.require_string_array("tokenizer.ggml.tokens").size()},
            {"tie_word_embeddings", tied}, {"torch_dtype", "float32"}, {"use_cache", true}};
  if (auto kl = m.get_int(p + "attention.key_length")) c["head_dim"] = *kl;
  if (experts > 0) {
    c[arch == "llama" ? "num_local_experts" : "num_experts"] = experts;
    c["num_experts_per_tok"] = m.require_int(p + "expert_used_count");
    if (auto f = m.get_int(p + "expert_feed_forward_length")) c["moe_intermediate_size"] = *f;
    if (auto f = m.get_int(p + "expert_shared_feed_forward_length")) c["shared_expert_intermediate_size"] = *f;
    if (auto n = m.get_bool(p + "expert_weights_norm")) c["norm_topk_prob"] = *n;
  }
  if (arch == "gemma2") {  // modeling_gemma2's fields
    c["hidden_act"] = c["hidden_activation"] = "gelu_pytorch_tanh";
    c["sliding_window"] = m.require_int(p + "attention.sliding_window");
    c["attn_logit_softcapping"] = m.get_float(p + "attn_logit_softcapping").value_or(50.0);
    c["final_logit_softcapping"] = m.get_float(p + "final_logit_softcapping").value_or(30.0);
    c["query_pre_attn_scalar"] = m.get_int(p + "attention.key_length").value_or(c["hidden_size"].get<int64_t>() / heads);
    c["cache_implementation"] = "hybrid";
    c["attention_bias"] = false;
  } else if (arch != "llama" && arch != "phi3") {
    c["use_sliding_window"] = false, c["sliding_window"] = 4096;
  }
  if (auto bos = m.get_int("tokenizer.ggml.bos_token_id")) c["bos_token_id"] = *bos;
  if (auto eos = m.get_int("tokenizer.ggml.eos_token_id")) c["eos_token_id"] = *eos;
  return c;
}

}  // namespace

void write_hf_folder(const GgufFile& gguf, const std::string& dir, const HfFolderOptions& o) {
  const fs::path root(dir);
  fs::create_directories(root);
  const Metadata& m = gguf.metadata();
  const bool llama = m.require_string("general.architecture") == "llama";
  const std::string p = m.require_string("general.architecture") + ".";
  const int64_t heads = m.require_int(p + "attention.head_count");
  const int64_t kv_heads = m.get_int(p + "attention.head_count_kv").value_or(heads);
  HfTensors tensors;
  const bool mixtral = llama && m.get_int(p + "expert_count").value_or(0) > 0;
  const bool phi3 = m.require_string("general.architecture") == "phi3";
  const bool gemma2 = m.require_string("general.architecture") == "gemma2";
  const bool gpt2 = m.require_string("general.architecture") == "gpt2";
  for (const GgufTensor& t : gguf.tensors()) {
    if (t.name.rfind("rope_factors_", 0) == 0) continue;  // config.json's rope_scaling
    const bool q = t.name.find("attn_q.") != std::string::npos, k = t.name.find("attn_k.") != std::string::npos;
    const DType dtype = o.dtype.value_or(t.dtype);
    std::vector<int64_t> shape(t.dims.rbegin(), t.dims.rend());
    if (t.name.find("_exps.") != std::string::npos) {
      add_experts(t, dtype, mixtral, tensors);
      continue;
    }
    if (gpt2) {
      const auto [name, conv1d] = gpt2_hf_name(t.name);
      if (conv1d) std::reverse(shape.begin(), shape.end());
      tensors.emplace_back(name, shape, dtype, hf_bytes(t, dtype, 0, false, conv1d));
      continue;
    }
    tensors.emplace_back(hf_name(t.name, mixtral, phi3, gemma2), shape, dtype,
                         hf_bytes(t, dtype, llama && (q || k) ? (q ? heads : kv_heads) : 0,
                                  gemma2 && t.name.ends_with("norm.weight")));
  }
  const bool tied = !gguf.find_tensor("output.weight");
  Json config = gpt2 ? gpt2_config_json(m, tied) : config_json(m, tied);
  if (phi3) phi3_config(gguf, config);
  write_text(root / "config.json", config.dump(2));
  if (o.num_shards <= 1) {
    write_safetensors(root / "model.safetensors", tensors);
  } else {
    Json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", Json::object()}};
    const size_t per = (tensors.size() + o.num_shards - 1) / o.num_shards;
    for (int s = 0; s < o.num_shards; ++s) {
      const std::string file = fmt::format("model-{:05}-of-{:05}.safetensors", s + 1, o.num_shards);
      const size_t begin = std::min(tensors.size(), s * per), end = std::min(tensors.size(), (s + 1) * per);
      HfTensors part(
          std::make_move_iterator(tensors.begin() + begin), std::make_move_iterator(tensors.begin() + end));
      for (const auto& t : part) index["weight_map"][std::get<0>(t)] = file;
      write_safetensors(root / file, part);
    }
    write_text(root / "model.safetensors.index.json", index.dump(2));
  }
  write_text(root / "tokenizer.json", hf_tokenizer_json(m).dump());
  write_text(root / "tokenizer_config.json", hf_tokenizer_config_json(m, !o.chat_template_file).dump(2));
  if (o.chat_template_file)
    if (auto t = m.get_string("tokenizer.chat_template")) write_text(root / "chat_template.jinja", *t);
  Json gen = {{"do_sample", false}};
  if (auto eos = m.get_int("tokenizer.ggml.eos_token_id")) gen["eos_token_id"] = *eos;
  write_text(root / "generation_config.json", gen.dump(2));
}

}  // namespace kvlm::test
