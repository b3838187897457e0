// kvlm bench grammar: what compiling a grammar costs, per shape: the time,
// the automaton's states, the heap the compiled grammar keeps, and the peak
// of resident memory while it compiles, per state and per alternative.
//
// The shapes are the ones hostile clients send: a large anyOf of
// small objects, a oneOf of wide objects, an object with min/maxProperties,
// a long enum, a repeated regex; --schema adds a JSON Schema file of yours.
// Each shape compiles in this process, one after the other; the peak comes
// from VmHWM, reset before each compilation (/proc/self/clear_refs), so it
// counts what the compilation touched, freed or not.
#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <fstream>
#include <sstream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "apps/cli_parse.h"
#include "apps/commands.h"
#include "common/error.h"
#include "constrain/constraint.h"

namespace kvlm::apps {
namespace {

using Schema = constrain::Json;
using Clock = std::chrono::steady_clock;

struct Shape {
  std::string name;
  int64_t num_alternatives;  // what "per alternative" divides by
  std::function<std::shared_ptr<const constrain::Program>()> compile;
  size_t text_bytes;         // the schema's (or pattern's) JSON text
};

Schema one_property_objects(int n) {
  Schema list = Schema::array();
  for (int i = 0; i < n; ++i) {
    const std::string key = fmt::format("f{}", i);
    list.push_back({{"type", "object"}, {"properties", {{key, {{"type", "integer"}}}}}, {"required", {key}}});
  }
  return list;
}

Schema wide_object(int i, int num_props) {
  Schema props = Schema::object(), required = Schema::array();
  for (int k = 0; k < num_props; ++k) {
    const std::string key = fmt::format("p{}_{}", i, k);
    props[key] = {{"type", k % 2 ? "string" : "integer"}};
    required.push_back(key);
  }
  return {{"type", "object"}, {"properties", props}, {"required", required}, {"additionalProperties", false}};
}

Shape schema_shape(std::string name, int64_t alternatives, Schema schema) {
  const size_t bytes = schema.dump().size();
  return {std::move(name), alternatives,
          [schema] { return constrain::json_schema_program(schema, constrain::SchemaMode::kLenient); }, bytes};
}

std::vector<Shape> builtin_shapes() {
  std::vector<Shape> shapes;
  for (int n : {1000, 1500}) shapes.push_back(schema_shape(fmt::format("anyof{}", n), n, {{"anyOf", one_property_objects(n)}}));
  Schema wide = Schema::array();
  for (int i = 0; i < 40; ++i) wide.push_back(wide_object(i, 40));
  shapes.push_back(schema_shape("oneof40x40", 40, {{"oneOf", wide}}));
  Schema props = Schema::object();
  for (int i = 0; i < 300; ++i) props[fmt::format("k{}", i)] = {{"type", "integer"}};
  shapes.push_back(schema_shape("props300_minmax", 300,
                                {{"type", "object"}, {"minProperties", 1}, {"maxProperties", 299}, {"properties", props}}));
  Schema values = Schema::array();
  for (int i = 0; i < 20000; ++i) values.push_back(fmt::format("value-{}", i));
  shapes.push_back(schema_shape("enum20000", 20000, {{"enum", values}}));
  const std::string pattern = "(x|[a-z]{1,40}){1,2000}";
  shapes.push_back({"regex_rep", 2000, [pattern] { return constrain::regex_program(pattern); }, pattern.size()});
  return shapes;
}

int64_t proc_status_bytes(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0 && line[std::strlen(key)] == ':') return std::stoll(line.substr(std::strlen(key) + 1)) * 1024;
  return 0;
}

void reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
}

int64_t heap_in_use() { return static_cast<int64_t>(mallinfo2().uordblks); }

struct Cost {
  double compile_ms = 0;
  int64_t num_states = 0;
  int64_t held_bytes = 0;  // heap the compiled grammar keeps
  int64_t peak_bytes = 0;  // resident memory growth while compiling
  std::string error;
};

Cost measure(const Shape& s, int reps) {
  Cost c;
  malloc_trim(0);
  const int64_t rss0 = proc_status_bytes("VmRSS"), heap0 = heap_in_use();
  reset_peak_rss();
  const auto t0 = Clock::now();
  try {
    std::shared_ptr<const constrain::Program> p;
    for (int i = 0; i < reps; ++i) {
      p.reset();
      p = s.compile();
    }
    c.compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / reps;
    c.num_states = p->num_states();
    c.held_bytes = heap_in_use() - heap0;
  } catch (const Error& e) {
    c.compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    c.error = e.what();
  }
  c.peak_bytes = proc_status_bytes("VmHWM") - rss0;
  return c;
}

}  // namespace

int bench_grammar(int argc, char** argv) {
  CLI::App app{"What compiling grammars of hostile shapes costs: time, states, memory", "kvlm bench grammar"};
  std::vector<std::string> schema_files;
  std::string only;
  int reps = 1;
  app.add_option("--schema", schema_files, "a JSON Schema file to measure too (repeatable)");
  app.add_option("--shapes", only, "comma-separated built-in shapes to run (default: all)");
  app.add_option("-r,--repetitions", reps, "compilations per shape (the time is their mean)")->capture_default_str();
  KVLM_PARSE(app, argc, argv);
  std::vector<Shape> shapes;
  for (Shape& s : builtin_shapes())
    if (only.empty() || ("," + only + ",").find("," + s.name + ",") != std::string::npos) shapes.push_back(std::move(s));
  for (const std::string& path : schema_files) {
    std::ifstream f(path);
    if (!f) throw_error(ErrorCode::kNotFound, "cannot read --schema {}", path);
    std::stringstream text;
    text << f.rdbuf();
    shapes.push_back(schema_shape(path, 1, Schema::parse(text.str())));
  }
  fmt::print("{:<16} {:>8} {:>9} {:>10} {:>11} {:>11} {:>9} {:>12}\n", "shape", "text KiB", "states", "compile ms",
             "held MiB", "peak MiB", "B/state", "B/alt(peak)");
  for (const Shape& s : shapes) {
    const Cost c = measure(s, reps);
    if (!c.error.empty()) {
      fmt::print("{:<16} {:>8} {:>9} {:>10.1f} {:>11} {:>11.1f} {:>9} {:>12.0f}  refused: {}\n", s.name,
                 s.text_bytes / 1024, "-", c.compile_ms, "-", c.peak_bytes / 1048576.0, "-",
                 static_cast<double>(c.peak_bytes) / s.num_alternatives, c.error);
      continue;
    }
    fmt::print("{:<16} {:>8} {:>9} {:>10.1f} {:>11.1f} {:>11.1f} {:>9.0f} {:>12.0f}\n", s.name, s.text_bytes / 1024,
               c.num_states, c.compile_ms, c.held_bytes / 1048576.0, c.peak_bytes / 1048576.0,
               static_cast<double>(c.held_bytes) / std::max<int64_t>(c.num_states, 1),
               static_cast<double>(c.peak_bytes) / s.num_alternatives);
  }
  return 0;
}

}  // namespace kvlm::apps
