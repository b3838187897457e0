#include "apps/plot.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <sys/wait.h>

#include <fmt/format.h>

#include "common/error.h"

namespace kvlm::apps {
namespace {

// gnuplot strings are single-quoted; a quote inside is doubled.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

size_t num_points(const PlotPanel& p) { return p.x_labels.empty() ? p.x.size() : p.x_labels.size(); }

// $dN: one row per point, x (or a label) then every series' value.
std::string datablock(const PlotPanel& p, size_t n) {
  std::string s = fmt::format("$d{} << EOD\n", n);
  for (size_t i = 0; i < num_points(p); ++i) {
    // Data files quote strings with double quotes (single quotes are for commands).
    std::string label = p.x_labels.empty() ? "" : p.x_labels[i];
    label.erase(std::remove(label.begin(), label.end(), '"'), label.end());
    s += p.x_labels.empty() ? fmt::format("{}", p.x[i]) : "\"" + label + "\"";
    for (const PlotSeries& ser : p.series) s += fmt::format(" {}", ser.y[i]);
    s += "\n";
  }
  return s + "EOD\n";
}

std::string panel_commands(const PlotPanel& p, size_t n) {
  bool has_right = false;
  for (const PlotSeries& ser : p.series) has_right |= ser.right_axis;
  std::string s;
  s += fmt::format("set title {}\nset xlabel {}\nset ylabel {}\n", quoted(p.title), quoted(p.x_label), quoted(p.y_label));
  s += has_right ? fmt::format("set y2label {}\nset y2tics\nset ytics nomirror\nset y2range [0:*]\n", quoted(p.y2_label))
                 : "unset y2label\nunset y2tics\nset ytics mirror\n";
  s += p.log_x ? "set logscale x 2\n" : "unset logscale x\n";
  s += "set yrange [0:*]\nset grid\nset key top left\n";
  std::vector<std::string> plots;
  if (!p.x_labels.empty()) {
    s += "set style data histograms\nset style histogram clustered gap 1\nset style fill solid 0.8 border -1\n"
         "set boxwidth 0.9\nset xtics rotate by 0\n";
    for (size_t k = 0; k < p.series.size(); ++k)
      plots.push_back(fmt::format("$d{} using {}:xtic(1) title {}", n, k + 2, quoted(p.series[k].name)));
  } else {
    s += "set style data linespoints\nset xtics ()\n";
    for (double x : p.x) s += fmt::format("set xtics add ('{:g}' {})\n", x, x);
    // A margin around the points, so the first and last tics are drawn.
    const auto [lo, hi] = std::minmax_element(p.x.begin(), p.x.end());
    if (lo != p.x.end())
      s += p.log_x ? fmt::format("set xrange [{}:{}]\n", *lo / 1.25, *hi * 1.25)
                   : fmt::format("set xrange [{}:{}]\n", *lo - 0.5, *hi + 0.5);
    for (size_t k = 0; k < p.series.size(); ++k)
      plots.push_back(fmt::format("$d{} using 1:{} axes x1{} title {} lw 2 pt 7", n, k + 2,
                                  p.series[k].right_axis ? "y2" : "y1", quoted(p.series[k].name)));
  }
  s += "plot ";
  for (size_t k = 0; k < plots.size(); ++k) s += (k ? ", " : "") + plots[k];
  return s + "\n";
}

}  // namespace

void write_plot_png(const std::string& path, const std::string& title, const std::vector<PlotPanel>& panels) {
  for (const PlotPanel& p : panels)
    for (const PlotSeries& ser : p.series)
      if (ser.y.size() != num_points(p))
        throw_error(ErrorCode::kInvalidArgument, "plot series '{}' has {} values for {} points", ser.name,
                    ser.y.size(), num_points(p));
  std::string script;
  for (size_t n = 0; n < panels.size(); ++n) script += datablock(panels[n], n);
  // noenhanced: titles are literal text (no ^ _ ~ markup in model names).
  script += fmt::format("set terminal pngcairo noenhanced size {},480 font 'DejaVu Sans,10'\nset output {}\n",
                        560 * std::max<size_t>(1, panels.size()), quoted(path));
  script += fmt::format("set multiplot layout 1,{} title {}\n", panels.size(), quoted(title));
  for (size_t n = 0; n < panels.size(); ++n) script += panel_commands(panels[n], n);
  script += "unset multiplot\nset output\n";

  // gnuplot reads the script on stdin; its own errors go to our stderr. A
  // gnuplot that is missing closes the pipe: a failed write, not SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  FILE* pipe = ::popen("gnuplot", "w");
  if (!pipe) throw_error(ErrorCode::kUnavailable, "cannot run gnuplot for --plot (install gnuplot-nox)");
  std::fwrite(script.data(), 1, script.size(), pipe);
  const int status = ::pclose(pipe);
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw_error(ErrorCode::kUnavailable, "gnuplot failed writing {} (exit status {}; is gnuplot-nox installed?)",
                path, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

void write_load_plot(const std::string& path, const std::string& title, const std::vector<LoadPoint>& points) {
  PlotPanel throughput{"Throughput", "concurrent requests", "generated tokens/s", "requests/s", {}, {}, true, {}};
  PlotPanel latency{"Latency (p50)", "concurrent requests", "TTFT, ITL (ms)", "end-to-end (ms)", {}, {}, true, {}};
  PlotSeries tok{"generated tokens/s", {}, false}, req{"requests/s", {}, true};
  PlotSeries ttft{"TTFT", {}, false}, itl{"ITL", {}, false}, e2e{"end-to-end", {}, true};
  for (const LoadPoint& p : points) {
    throughput.x.push_back(p.concurrency);
    latency.x.push_back(p.concurrency);
    tok.y.push_back(p.generated_tokens_per_s);
    req.y.push_back(p.requests_per_s);
    ttft.y.push_back(p.ttft_p50_ms);
    itl.y.push_back(p.itl_p50_ms);
    e2e.y.push_back(p.e2e_p50_ms);
  }
  throughput.series = {tok, req};
  latency.series = {ttft, itl, e2e};
  write_plot_png(path, title, {throughput, latency});
}

}  // namespace kvlm::apps
