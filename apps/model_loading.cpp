#include "apps/model_loading.h"

#include <algorithm>
#include <filesystem>

#include "common/progress.h"

namespace kvlm::apps {

std::unique_ptr<Model> load_model(const std::string& path, const ModelLoadOptions& options) {
  auto model = Model::load(path, options);
  if (!ProgressBar::enabled()) return model;
  int64_t num_bytes = 0;
  for (const auto& t : model->gguf().tensors()) num_bytes += static_cast<int64_t>(t.num_bytes);
  constexpr int64_t kMiB = 1 << 20, kPage = 4096;
  ProgressBar bar("loading " + std::filesystem::path(path).filename().string(), std::max<int64_t>(num_bytes / kMiB, 1),
                  "MiB");
  // One read per page faults the mapping in; the sum keeps the reads.
  volatile uint8_t sink = 0;
  int64_t done = 0;
  for (const auto& t : model->gguf().tensors()) {
    for (const auto& [data, size] : t.byte_ranges())
      for (uint64_t off = 0; off < size; off += kPage) sink = sink + data[off];
    done += static_cast<int64_t>(t.num_bytes);
    bar.set(done / kMiB);
  }
  return model;
}

}  // namespace kvlm::apps
