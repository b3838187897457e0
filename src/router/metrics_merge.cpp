#include "router/metrics_merge.h"

#include <map>
#include <string_view>

namespace kvlm::router {
namespace {

struct Family {
  std::string help, type;  // whole lines; empty: none seen yet
  std::string samples;
};

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == ':';
}

std::string_view sample_name(std::string_view line) {
  size_t end = 0;
  while (end < line.size() && name_char(line[end])) ++end;
  return line.substr(0, end);
}

// `name{a="b"} 1` with label model="m": `name{model="m",a="b"} 1`.
std::string labelled(std::string_view line, std::string_view name, const MetricsSource& s) {
  if (s.label_name.empty()) return std::string(line);
  const std::string label = s.label_name + "=\"" + s.label_value + "\"";
  std::string_view rest = line.substr(name.size());
  // A sample that has the label already keeps its own (kvlm serve labels
  // its engine's series with model_name).
  const std::string_view labels = rest.substr(0, rest.starts_with("{") ? rest.find('}') : 0);
  for (const char* before : {"{", ","})
    if (labels.find(before + s.label_name + "=\"") != std::string_view::npos) return std::string(line);
  if (rest.starts_with("{")) {
    rest.remove_prefix(1);
    return std::string(name) + "{" + label + (rest.starts_with("}") ? "" : ",") + std::string(rest);
  }
  return std::string(name) + "{" + label + "}" + std::string(rest);
}

// The family a `# HELP NAME ...` or `# TYPE NAME ...` line declares.
std::string_view declared(std::string_view line) {
  line.remove_prefix(7);  // "# HELP " and "# TYPE " are both 7 bytes
  return sample_name(line);
}

}  // namespace

std::string prometheus_label_value(std::string_view value) {
  std::string out;
  for (const char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string merge_metrics_texts(const std::vector<MetricsSource>& sources) {
  std::vector<std::string> order;
  std::map<std::string, Family, std::less<>> families;
  auto family = [&](std::string_view name) -> Family& {
    auto it = families.find(name);
    if (it == families.end()) {
      order.emplace_back(name);
      it = families.emplace(std::string(name), Family{}).first;
    }
    return it->second;
  };
  for (const MetricsSource& s : sources) {
    std::string current;
    size_t pos = 0;
    while (pos < s.text.size()) {
      size_t end = s.text.find('\n', pos);
      if (end == std::string::npos) end = s.text.size();
      const std::string_view line(s.text.data() + pos, end - pos);
      pos = end + 1;
      const bool help = line.starts_with("# HELP "), type = line.starts_with("# TYPE ");
      if (help || type) {
        current = declared(line);
        Family& f = family(current);
        std::string& slot = help ? f.help : f.type;
        if (slot.empty()) slot = std::string(line) + "\n";
        continue;
      }
      if (line.empty() || line.starts_with("#")) continue;
      const std::string_view name = sample_name(line);
      if (name.empty()) continue;
      Family& f = family(!current.empty() && name.starts_with(current) ? std::string_view(current) : name);
      f.samples += labelled(line, name, s) + "\n";
    }
  }
  std::string out;
  for (const std::string& name : order) {
    const Family& f = families.find(name)->second;
    out += f.help + f.type + f.samples;
  }
  return out;
}

}  // namespace kvlm::router
