// `kvlm kv stat|verify|clear --kv-disk DIR` over a disk tier written by
// DiskStore: counts per namespace, every damaged record named by verify (exit
// 1), clear leaves nothing; and `kvlm kv bench` runs on a disk tier.
#include <filesystem>
#include <fstream>
#include <random>

#include <gtest/gtest.h>

#include "kvstore/disk_store.h"
#include "support/test_support.h"

namespace kvlm::kv_cli_test {

namespace fs = std::filesystem;

std::vector<KvRecord> chain(int n, int seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<KvRecord> out;
  std::optional<BlockHash> parent;
  for (int i = 0; i < n; ++i) {
    KvRecord r;
    for (int t = 0; t < 16; ++t) r.tokens.push_back(static_cast<int32_t>(rng() % 1000));
    r.parent = parent;
    r.hash = hash_block(parent, r.tokens);
    r.payload.assign(256, static_cast<std::byte>(i + 1));
    parent = r.hash;
    out.push_back(std::move(r));
  }
  return out;
}

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

TEST(KvCli, StatVerifyClear) {
  const std::string dir = test::temp_dir() + "/kv-cli";
  fs::remove_all(dir);
  const Hash128 ns_a{1, 2}, ns_b{3, 4};
  std::string path_a;
  {
    auto a = DiskStore::open(DiskStoreConfig{dir, 0, ns_a});
    auto b = DiskStore::open(DiskStoreConfig{dir, 0, ns_b});
    auto ca = chain(5, 1), cb = chain(3, 2);
    a->store(ca);
    b->store(cb);
    path_a = a->record_path(ca[2].hash);
  }
  const int64_t rec = static_cast<int64_t>(encoded_record_bytes(16, 256));
  auto r = test::run_kvlm({"kv", "stat", "--kv-disk", dir});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "8 records, " + std::to_string(8 * rec) + " bytes")) << r.out;
  EXPECT_TRUE(contains(r.out, "2 namespaces")) << r.out;
  EXPECT_TRUE(contains(r.out, "namespace " + hash_hex(ns_a) + ": 5 records")) << r.out;
  EXPECT_TRUE(contains(r.out, "namespace " + hash_hex(ns_b) + ": 3 records")) << r.out;

  r = test::run_kvlm({"kv", "verify", "--kv-disk", dir});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "8 good, 0 bad")) << r.out;

  // A payload bit flip: stat (headers only) still counts it; verify names it.
  {
    std::fstream f(path_a, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x5a');
  }
  r = test::run_kvlm({"kv", "verify", "--kv-disk", dir});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.out, "bad: " + path_a + ": checksum mismatch")) << r.out;
  EXPECT_TRUE(contains(r.out, "7 good, 1 bad")) << r.out;
  r = test::run_kvlm({"kv", "verify", "--kv-disk", dir, "--remove"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_FALSE(fs::exists(path_a));
  EXPECT_EQ(test::run_kvlm({"kv", "verify", "--kv-disk", dir}).exit_code, 0);

  r = test::run_kvlm({"kv", "clear", "--kv-disk", dir});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "removed 7 records")) << r.out;
  r = test::run_kvlm({"kv", "stat", "--kv-disk", dir});
  EXPECT_TRUE(contains(r.out, "0 records, 0 bytes")) << r.out;

  r = test::run_kvlm({"kv", "stat", "--kv-disk", dir + "/missing"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.err, "no such directory")) << r.err;
  r = test::run_kvlm({"kv", "frob"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.err, "unknown kv tool 'frob'")) << r.err;
}

TEST(KvCli, StatNamesAModelsNamespace) {
  const std::string dir = test::temp_dir() + "/kv-ns";
  fs::create_directories(dir);
  const std::string model = test::shared_path("models/stories260K.gguf");
  auto ns_line = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"kv", "stat", "--kv-disk", dir, "-m", model};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = test::run_kvlm(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.out.substr(0, r.out.find('\n'));
  };
  const std::string f16 = ns_line({});
  EXPECT_TRUE(contains(f16, "(kv f16, block size 16): ")) << f16;
  EXPECT_EQ(ns_line({}), f16);  // stable across processes
  const std::string q8 = ns_line({"--kv-type", "q8_0"});
  const std::string bs32 = ns_line({"--block-size", "32"});
  auto hex = [](const std::string& line) { return line.substr(line.size() - 32); };
  EXPECT_NE(hex(q8), hex(f16));
  EXPECT_NE(hex(bs32), hex(f16));
  // A record stored under that namespace is listed as this model's.
  auto ns = parse_hash_hex(hex(f16));
  ASSERT_TRUE(ns.has_value());
  DiskStore::open(DiskStoreConfig{dir, 0, *ns})->store(chain(2, 3));
  auto r = test::run_kvlm({"kv", "stat", "--kv-disk", dir, "-m", model});
  EXPECT_TRUE(contains(r.out, "namespace " + hex(f16) + ": 2 records, " +
                                  std::to_string(2 * encoded_record_bytes(16, 256)) + " bytes (this model)"))
      << r.out;
}

// A KV type the model's shape cannot take stops the command before any
// work, with the reason (stories260K's head size is 8).
TEST(KvCli, KvTypesAModelCannotTakeAreRefusedWithTheReason) {
  const std::string model = test::shared_path("models/stories260K.gguf");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--kv-type", "q8_0"}, "needs a head size that is a multiple of 32; this model's is 8"},
      {{"--kv-type", "bf16", "--block-size", "5"}, "needs an even head size and block size"},
      {{"--kv-type", "q4_0"}, "needs a head size that is a multiple of 32; this model's is 8"},
      {{"--kv-type", "q4_k"}, "unknown type 'q4_k' (f16, bf16, f32, q8_0, q4_0)"},
  };
  for (const auto& [extra, why] : cases) {
    std::vector<std::string> args = {"run", "-m", model, "-p", "Once", "-n", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = test::run_kvlm(args);
    EXPECT_NE(r.exit_code, 0) << extra[1];
    EXPECT_TRUE(contains(r.err, why)) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

TEST(KvCli, BenchOnADiskTierLeavesNothingBehind) {
  const std::string dir = test::temp_dir() + "/kv-bench";
  fs::create_directories(dir);
  auto r = test::run_kvlm({"kv", "bench", "--kv-disk", dir, "--iterations", "2", "--block-bytes", "4096"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(contains(r.out, "store 64 blocks")) << r.out;
  EXPECT_TRUE(contains(r.out, "load  64 blocks")) << r.out;
  EXPECT_TRUE(contains(r.out, "decode 64 blocks")) << r.out;
  EXPECT_TRUE(contains(test::run_kvlm({"kv", "stat", "--kv-disk", dir}).out, "0 records")) ;
}

}  // namespace kvlm::kv_cli_test
