// Loading a model for the commands, with a progress bar on a terminal.
#pragma once

#include <memory>
#include <string>

#include "model/model.h"

namespace kvlm::apps {

// Model::load(path, options). When stderr is a terminal it then reads the weights
// into the page cache behind a progress bar, so the wait is seen here and
// not as a slow first request; otherwise pages are read on first use.
std::unique_ptr<Model> load_model(const std::string& path, const ModelLoadOptions& options = {});

}  // namespace kvlm::apps
