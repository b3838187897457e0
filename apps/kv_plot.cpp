#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "apps/bench_kv.h"
#include "common/error.h"

namespace kvlm::apps {
namespace {

// gnuplot reads strings in double quotes; keep titles printable and unquoted.
std::string plot_text(const std::string& s) {
  std::string out;
  for (char c : s) out += (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) ? '_' : c;
  return out;
}

}  // namespace

void write_kv_plot(const std::string& png_path, const std::vector<KvPlotSeries>& series, const KvPlotAxes& axes) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / fmt::format("kvlm-plot-{}", ::getpid());
  fs::create_directories(dir);
  std::string script = fmt::format(
      "set terminal pngcairo size 900,560 noenhanced\nset output \"{}\"\nset title \"{}\"\n"
      "set xlabel \"{}\"\nset ylabel \"{}\"\nset logscale x 2\n"
      "set key outside right\nset grid\n",
      plot_text(png_path), plot_text(axes.title), plot_text(axes.x_label), plot_text(axes.y_label));
  std::string plots;
  for (size_t i = 0; i < series.size(); ++i) {
    const fs::path data = dir / fmt::format("s{}.dat", i);
    std::ofstream f(data);
    for (auto [x, y] : series[i].points) f << x << ' ' << y << '\n';
    const int color = series[i].color > 0 ? series[i].color : static_cast<int>(i % 8) + 1;
    plots += fmt::format("{}\"{}\" using 1:2 with linespoints lw 2 lc {} dt {} title \"{}\"", plots.empty() ? "" : ", ",
                         plot_text(data.string()), color, series[i].dash, plot_text(series[i].name));
  }
  if (axes.reference)
    plots += fmt::format(", {} with lines dt 2 lw 2 lc rgb \"black\" title \"full cache\"", *axes.reference);
  script += "plot " + plots + "\n";
  const fs::path script_path = dir / "plot.gp";
  std::ofstream(script_path) << script;
  const int rc = std::system(fmt::format("gnuplot \"{}\" 2>&1", script_path.string()).c_str());
  fs::remove_all(dir);
  if (rc != 0)
    throw_error(ErrorCode::kUnavailable, "gnuplot failed (exit {}); install it (Debian: gnuplot-nox) to write plots", rc);
}

}  // namespace kvlm::apps
