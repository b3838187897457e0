#include "apps/multi_tenant_load.h"

#include <algorithm>
#include <cassert>
#include <numeric>
#include <random>

namespace kvlm::apps {

MultiTenantSource::MultiTenantSource(const MultiTenantShape& shape, uint64_t seed)
    : num_requests_(static_cast<size_t>(shape.num_tenants) * shape.num_users * shape.num_turns) {
  assert(shape.num_tenants > 0 && shape.num_users > 0 && shape.num_turns > 0 && shape.user_words > 0 &&
         shape.system_words >= 0);
  if (shape.system_words > 0) system_texts_ = make_prompts(shape.num_tenants, shape.system_words, 0, "", seed);
  const int num_conversations = shape.num_tenants * shape.num_users;
  // Another stream of words than the system texts', so no message repeats one.
  const std::vector<std::string> messages =
      make_prompts(static_cast<int>(num_requests_), shape.user_words, 0, "", seed ^ 0x9e3779b97f4a7c15ULL);
  conversations_.resize(num_conversations);
  for (int c = 0; c < num_conversations; ++c) {
    Conversation& conv = conversations_[c];
    conv.tenant = c / shape.num_users;
    conv.messages.assign(messages.begin() + static_cast<ptrdiff_t>(c) * shape.num_turns,
                         messages.begin() + static_cast<ptrdiff_t>(c + 1) * shape.num_turns);
  }
  std::vector<int> order(num_conversations);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  ready_.assign(order.begin(), order.end());
  sent_.reserve(num_requests_);
}

size_t MultiTenantSource::num_requests() const { return num_requests_; }

std::optional<LoadRequest> MultiTenantSource::next() {
  std::unique_lock lock(mu_);
  // Empty while turns are in flight: their follow-ups will come.
  ready_cv_.wait(lock, [&] { return !ready_.empty() || sent_.size() == num_requests_; });
  if (ready_.empty()) return std::nullopt;
  const int c = ready_.front();
  ready_.pop_front();
  Conversation& conv = conversations_[c];
  std::string& prompt = conv.history;
  if (conv.num_turns_sent == 0 && !system_texts_.empty()) prompt = system_texts_[conv.tenant];
  if (!prompt.empty()) prompt += '\n';
  prompt += conv.messages[conv.num_turns_sent++];
  sent_.push_back({c, conv.num_turns_sent});
  // The last request is out: wake the senders waiting for one, there are no more.
  if (sent_.size() == num_requests_) ready_cv_.notify_all();
  // Each conversation is one user: a router's session policy keeps it on one worker.
  return LoadRequest{sent_.size() - 1, prompt, "tenant-" + std::to_string(conv.tenant) + "-user-" + std::to_string(c)};
}

void MultiTenantSource::finish(size_t slot, const RequestResult& result) {
  std::lock_guard lock(mu_);
  const int c = sent_.at(slot).conversation;
  Conversation& conv = conversations_[c];
  if (result.ok) conv.history += result.text;
  if (conv.num_turns_sent < static_cast<int>(conv.messages.size())) {
    ready_.push_back(c);
    ready_cv_.notify_one();
  }
}

int MultiTenantSource::turn_of(size_t slot) const {
  std::lock_guard lock(mu_);
  return sent_.at(slot).turn;
}

}  // namespace kvlm::apps
