#include "kvstore/tier_secret.h"

#include <cstring>
#include <fstream>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/stat.h>

#include "common/assert.h"
#include "common/error.h"
#include "common/log.h"

namespace kvlm {
namespace {

std::span<const std::byte> bytes_of(std::string_view s) { return std::as_bytes(std::span(s.data(), s.size())); }

TierKey derive(std::string_view secret, std::string_view info) {
  constexpr std::string_view kSalt = "kvlm kv tier secret v1";
  return hkdf_sha256(std::span(reinterpret_cast<const unsigned char*>(kSalt.data()), kSalt.size()), bytes_of(secret),
                     info);
}

}  // namespace

TierKey hkdf_sha256(std::span<const unsigned char> salt, std::span<const std::byte> ikm, std::string_view info) {
  // Extract, then the first expand block T(1) = HMAC(PRK, info || 0x01).
  const Sha256 prk = hmac_sha256(salt, ikm);
  std::string block(info);
  block.push_back('\x01');
  const Sha256 t1 = hmac_sha256(prk, bytes_of(block));
  TierKey out;
  std::memcpy(out.data(), t1.data(), out.size());
  return out;
}

Sha256 hmac_sha256(std::span<const unsigned char> key, std::span<const std::byte> data) {
  Sha256 out;
  unsigned int len = 0;
  const unsigned char* r = HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
                                reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data(), &len);
  KVLM_ASSERT(r != nullptr && len == out.size(), "HMAC-SHA-256 failed (OpenSSL)");
  return out;
}

TierKeys derive_tier_keys(std::string_view secret) {
  return TierKeys{derive(secret, "record mac"), derive(secret, "names"), derive(secret, "record seal")};
}

std::string read_tier_secret(const std::string& path, const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error(ErrorCode::kNotFound, "{} {}: cannot read it", flag, path);
  // Bounded: a path such as /dev/zero must not be read for ever.
  std::string secret(kMaxTierSecretBytes + 1, '\0');
  in.read(secret.data(), static_cast<std::streamsize>(secret.size()));
  secret.resize(static_cast<size_t>(in.gcount()));
  if (secret.size() > kMaxTierSecretBytes)
    throw_error(ErrorCode::kInvalidArgument, "{} {}: longer than {} bytes; a secret of 32 random bytes is enough",
                flag, path, kMaxTierSecretBytes);
  if (!secret.empty() && secret.back() == '\n') secret.pop_back();
  if (!secret.empty() && secret.back() == '\r') secret.pop_back();
  if (secret.size() < kMinTierSecretBytes)
    throw_error(ErrorCode::kInvalidArgument,
                "{} {}: the secret has {} bytes, fewer than {}; make one with `openssl rand -hex 32 > {}` and give "
                "every server that shares the tier the same file",
                flag, path, secret.size(), kMinTierSecretBytes, path);
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
    log_warn("{} {}: others than its owner may read it (chmod 600 {})", flag, path, path);
  return secret;
}

}  // namespace kvlm
