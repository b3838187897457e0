// kvlm kv <tool> --kv-disk DIR: what a disk KV tier holds (docs/kv-tiers.md).
//   stat   — records and bytes per namespace (file headers only)
//   verify — decode every record (checksum or, with --kv-secret-file, MAC or
//            tag; namespace, hash); exit 1 if any is bad
//   clear  — remove every namespace's records
//   bench  — store/load throughput and latency of a disk or Redis tier (cmd_kv_bench.cpp)
//   train-policy — fit the learned eviction policy (cmd_kv_train_policy.cpp)
#include <cstdio>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/cli_parse.h"
#include "apps/commands.h"
#include "apps/tier_options.h"
#include "common/error.h"
#include "kvstore/disk_inventory.h"
#include "kvstore/record.h"
#include "model/gguf.h"
#include "model/hf_checkpoint.h"

namespace kvlm::apps {
namespace {

int kv_stat(int argc, char** argv) {
  CLI::App app{"Records and bytes a disk KV tier holds, per namespace", "kvlm kv stat"};
  std::string dir, model_path, kv_type = "f16";
  int32_t block_size = 16;
  app.add_option("--kv-disk", dir, "disk tier directory")->required();
  app.add_option("-m,--model", model_path, "also name this model's namespace (with --kv-type, --block-size)");
  app.add_option("--kv-type", kv_type, "KV cache type of the model's namespace")->capture_default_str();
  app.add_option("--block-size", block_size, "tokens per KV block of the model's namespace")->capture_default_str();
  KVLM_PARSE(app, argc, argv);
  auto namespaces = stat_disk_tier(dir);
  std::optional<Hash128> model_ns;
  if (!model_path.empty()) {
    model_ns = kv_namespace_fingerprint(kv_namespace_spec(*open_model_file(model_path), kv_type, block_size));
    fmt::print("namespace of {} (kv {}, block size {}): {}\n", model_path, kv_type, block_size, hash_hex(*model_ns));
  }
  int64_t num_records = 0, num_bytes = 0, num_bad = 0;
  for (const auto& n : namespaces) {
    num_records += n.num_records;
    num_bytes += n.num_bytes;
    num_bad += n.num_bad;
  }
  int64_t num_temp = 0;
  for (const auto& n : namespaces) num_temp += n.num_temp;
  fmt::print("disk tier {}: {} records, {} bytes ({:.1f} MiB), {} namespaces{}{}\n", dir, num_records, num_bytes,
             static_cast<double>(num_bytes) / 1048576.0, namespaces.size(),
             num_bad ? fmt::format(", {} bad files (kvlm kv verify)", num_bad) : "",
             num_temp ? fmt::format(", {} temporary files of unfinished writes", num_temp) : "");
  for (const auto& n : namespaces)
    fmt::print("  namespace {}: {} records, {} bytes{}{}{}\n", hash_hex(n.ns), n.num_records, n.num_bytes,
               n.num_authenticated ? fmt::format(" ({} written with a tier secret)", n.num_authenticated) : "",
               n.num_bad ? fmt::format(", {} bad files", n.num_bad) : "", model_ns == n.ns ? " (this model)" : "");
  return 0;
}

int kv_verify(int argc, char** argv) {
  CLI::App app{"Check every record of a disk KV tier (checksum or MAC, namespace, hash)", "kvlm kv verify"};
  std::string dir, secret_file;
  bool remove_bad = false;
  app.add_option("--kv-disk", dir, "disk tier directory")->required();
  app.add_option("--kv-secret-file", secret_file, "the tier secret: also check records written with it");
  app.add_flag("--remove", remove_bad,
               "delete the bad records and orphaned temporary files (a server would on its next start)");
  KVLM_PARSE(app, argc, argv);
  TierSecurity security;
  if (!secret_file.empty()) security.keys = derive_tier_keys(read_tier_secret(secret_file, "--kv-secret-file"));
  DiskVerifyReport r = verify_disk_tier(dir, remove_bad, security);
  for (const auto& b : r.bad) fmt::print("bad: {}: {}{}\n", b.path, b.reason, remove_bad ? " (removed)" : "");
  fmt::print("verified {} records ({} bytes): {} good, {} bad{}\n", r.num_ok + static_cast<int64_t>(r.bad.size()),
             r.num_bytes_ok, r.num_ok, r.bad.size(),
             r.num_unchecked ? fmt::format("; {} written with a tier secret not checked (give --kv-secret-file)",
                                           r.num_unchecked)
                             : "");
  if (r.num_temp > 0)
    fmt::print("{} temporary files of unfinished writes (not records; {}){}\n", r.num_temp,
               "a killed writer's are removed when the tier next opens",
               remove_bad ? fmt::format(", {} removed", r.num_temp_removed) : "");
  return r.bad.empty() ? 0 : 1;
}

int kv_clear(int argc, char** argv) {
  CLI::App app{"Remove every record of a disk KV tier", "kvlm kv clear"};
  std::string dir;
  app.add_option("--kv-disk", dir, "disk tier directory")->required();
  KVLM_PARSE(app, argc, argv);
  fmt::print("removed {} records from {}\n", clear_disk_tier(dir), dir);
  return 0;
}

}  // namespace

int cmd_kv(int argc, char** argv) {
  const char* usage = "usage: kvlm kv (stat | verify | clear | bench | train-policy) [options]   (kvlm kv <tool> --help)\n";
  if (argc < 2) {
    std::fputs(usage, stderr);
    return 2;
  }
  std::string tool = argv[1];
  if (tool == "stat") return kv_stat(argc - 1, argv + 1);
  if (tool == "verify") return kv_verify(argc - 1, argv + 1);
  if (tool == "clear") return kv_clear(argc - 1, argv + 1);
  if (tool == "bench") return cmd_kv_bench(argc - 1, argv + 1);
  if (tool == "train-policy") return cmd_kv_train_policy(argc - 1, argv + 1);
  if (tool == "-h" || tool == "--help") {
    std::fputs(usage, stdout);
    return 0;
  }
  throw_error(ErrorCode::kInvalidArgument, "unknown kv tool '{}' (stat, verify, clear, bench, train-policy)", tool);
}

}  // namespace kvlm::apps
