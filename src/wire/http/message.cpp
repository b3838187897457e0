#include "wire/http/message.h"

namespace kvlm::http {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

const std::string* find_header(const Headers& headers, std::string_view name) {
  for (const Header& h : headers)
    if (iequals(h.name, name)) return &h.value;
  return nullptr;
}

std::string Request::get_header_value(std::string_view name) const {
  const std::string* v = find_header(headers, name);
  return v ? *v : std::string();
}

bool Request::has_header(std::string_view name) const { return find_header(headers, name) != nullptr; }

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Calls visit(name, value) for each name=value pair of a query string, as sent.
template <class Visit>
void each_param(std::string_view query, Visit visit) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    const size_t eq = pair.find('=');
    if (visit(pair.substr(0, eq), eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1))) return;
    if (amp == std::string_view::npos) return;
    query.remove_prefix(amp + 1);
  }
}

}  // namespace

bool percent_decode(std::string_view s, std::string& out, bool plus_is_space) {
  out.clear();
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+' && plus_is_space) {
      out += ' ';
    } else if (s[i] != '%') {
      out += s[i];
    } else {
      if (i + 2 >= s.size()) return false;
      const int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
      if (hi < 0 || lo < 0) return false;
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    }
  }
  return true;
}

std::string Request::get_param_value(std::string_view name) const {
  std::string out;
  each_param(query, [&](std::string_view key, std::string_view value) {
    std::string decoded;
    if (!percent_decode(key, decoded, true) || decoded != name) return false;
    if (!percent_decode(value, out, true)) out.clear();
    return true;
  });
  return out;
}

bool Request::has_param(std::string_view name) const {
  bool found = false;
  each_param(query, [&](std::string_view key, std::string_view) {
    std::string decoded;
    found = percent_decode(key, decoded, true) && decoded == name;
    return found;
  });
  return found;
}

void Response::set_content(std::string content, std::string_view type) {
  body = std::move(content);
  content_type = type;
}

void Response::set_header(std::string name, std::string value) {
  for (Header& h : headers) {
    if (iequals(h.name, name)) {
      h.value = std::move(value);
      return;
    }
  }
  headers.push_back({std::move(name), std::move(value)});
}

std::string Response::get_header_value(std::string_view name) const {
  const std::string* v = find_header(headers, name);
  return v ? *v : std::string();
}

bool Response::has_header(std::string_view name) const { return find_header(headers, name) != nullptr; }

void Response::stream(std::string_view type, std::unique_ptr<Producer> p) {
  content_type = type;
  later = Later::kStream;
  producer = std::move(p);
}

void Response::defer(std::unique_ptr<Producer> p) {
  later = Later::kWhole;
  producer = std::move(p);
}

std::string_view reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return status < 300 ? "OK" : status < 500 ? "Client Error" : "Server Error";
  }
}

}  // namespace kvlm::http
