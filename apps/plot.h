// PNG charts of benchmark results, drawn by gnuplot (Debian gnuplot-nox),
// the one place every benchmark's --plot goes through.
#pragma once

#include <string>
#include <vector>

namespace kvlm::apps {

struct PlotSeries {
  std::string name;
  std::vector<double> y;   // one value per x of its panel
  bool right_axis = false; // drawn against the panel's second y axis
};

// One chart: lines over numeric x values, or bars over labels when
// x_labels is set (then x is ignored).
struct PlotPanel {
  std::string title;
  std::string x_label, y_label, y2_label;
  std::vector<double> x;
  std::vector<std::string> x_labels;
  bool log_x = false;  // concurrency 1, 2, 4, ... spaced evenly
  std::vector<PlotSeries> series;
};

// Writes the panels side by side into one PNG. Throws Error(kUnavailable)
// when gnuplot is missing or fails, Error(kInvalidArgument) for a series
// whose length differs from its panel's x.
void write_plot_png(const std::string& path, const std::string& title, const std::vector<PlotPanel>& panels);

// One run of a load benchmark (bench batch, bench serve) at one concurrency.
struct LoadPoint {
  double concurrency = 0;
  double requests_per_s = 0, generated_tokens_per_s = 0;
  double ttft_p50_ms = 0, itl_p50_ms = 0, e2e_p50_ms = 0;
};

// Throughput and latency against concurrency: the chart of --sweep.
void write_load_plot(const std::string& path, const std::string& title, const std::vector<LoadPoint>& points);

}  // namespace kvlm::apps
