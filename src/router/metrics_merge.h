// Prometheus texts of several processes as one exposition (a model host's
// /metrics: the router's own series and each model worker's, labelled with
// its model). Internal to router/.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvlm::router {

struct MetricsSource {
  std::string text;         // a Prometheus text exposition
  std::string label_name;   // set: added to each of its samples that lacks it (model_name)
  std::string label_value;  // escaped already
};

// A label value as the text format writes it: backslash, quote and line
// feed escaped.
std::string prometheus_label_value(std::string_view value);

// Each family once, in the order first seen, with the HELP and TYPE of the
// first source that declares it, followed by its samples from every source
// (the labelled ones with their label first). A sample belongs to the
// family declared last before it when its name extends that family's name
// (histograms' _bucket, _sum, _count), else to a family of its own name.
std::string merge_metrics_texts(const std::vector<MetricsSource>& sources);

}  // namespace kvlm::router
