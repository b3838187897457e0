// merge_metrics_texts: several processes' Prometheus texts as one
// exposition, each family once with every source's samples.
#include <gtest/gtest.h>

#include "router/metrics_merge.h"

namespace kvlm::router::metrics_merge_test {

TEST(MetricsMerge, EachFamilyOnceWithEverySourcesSamplesLabelled) {
  const std::string front =
      "# HELP kvlm_http_connections Open connections.\n# TYPE kvlm_http_connections gauge\nkvlm_http_connections 3\n"
      "# HELP kvlm_model_loaded 1 while loaded.\n# TYPE kvlm_model_loaded gauge\nkvlm_model_loaded{model=\"a\"} 1\n";
  const std::string worker =
      "# HELP kvlm_http_connections Open connections.\n# TYPE kvlm_http_connections gauge\nkvlm_http_connections 1\n"
      "# HELP kvlm_ttft_seconds Time to first token.\n# TYPE kvlm_ttft_seconds histogram\n"
      "kvlm_ttft_seconds_bucket{le=\"0.1\"} 2\nkvlm_ttft_seconds_bucket{le=\"+Inf\"} 3\n"
      "kvlm_ttft_seconds_sum 0.5\nkvlm_ttft_seconds_count 3\n";
  const std::string merged =
      merge_metrics_texts({{front, "", ""}, {worker, "model", "a"}, {worker, "model", prometheus_label_value("b\"c")}});
  EXPECT_EQ(merged,
            "# HELP kvlm_http_connections Open connections.\n# TYPE kvlm_http_connections gauge\n"
            "kvlm_http_connections 3\nkvlm_http_connections{model=\"a\"} 1\nkvlm_http_connections{model=\"b\\\"c\"} 1\n"
            "# HELP kvlm_model_loaded 1 while loaded.\n# TYPE kvlm_model_loaded gauge\nkvlm_model_loaded{model=\"a\"} 1\n"
            "# HELP kvlm_ttft_seconds Time to first token.\n# TYPE kvlm_ttft_seconds histogram\n"
            "kvlm_ttft_seconds_bucket{model=\"a\",le=\"0.1\"} 2\nkvlm_ttft_seconds_bucket{model=\"a\",le=\"+Inf\"} 3\n"
            "kvlm_ttft_seconds_sum{model=\"a\"} 0.5\nkvlm_ttft_seconds_count{model=\"a\"} 3\n"
            "kvlm_ttft_seconds_bucket{model=\"b\\\"c\",le=\"0.1\"} 2\nkvlm_ttft_seconds_bucket{model=\"b\\\"c\",le=\"+Inf\"} 3\n"
            "kvlm_ttft_seconds_sum{model=\"b\\\"c\"} 0.5\nkvlm_ttft_seconds_count{model=\"b\\\"c\"} 3\n");
}

TEST(MetricsMerge, UndeclaredSamplesAndBlankLinesAndATextWithoutAFinalNewline) {
  const std::string merged = merge_metrics_texts({{"\n# a comment\nup 1\n", "", ""}, {"up 0", "model", "m"}});
  EXPECT_EQ(merged, "up 1\nup{model=\"m\"} 0\n");
}

TEST(MetricsMerge, ASampleWithTheLabelAlreadyKeepsItsOwn) {
  const std::string merged = merge_metrics_texts({{"kvlm_kv_blocks_capacity{model_name=\"x\"} 8\nup{a=\"model_name=\"} 1\n",
                                                   "model_name", "m"}});
  EXPECT_EQ(merged, "kvlm_kv_blocks_capacity{model_name=\"x\"} 8\nup{model_name=\"m\",a=\"model_name=\"} 1\n");
}

TEST(MetricsMerge, LabelValuesAreEscaped) {
  EXPECT_EQ(prometheus_label_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
}

}  // namespace kvlm::router::metrics_merge_test
