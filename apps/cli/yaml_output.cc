#include "yaml_output.h"

#include <cctype>
#include <string_view>

namespace ql::cli {
namespace {

using nlohmann::json;

// Whether YAML reads `s` unquoted as this very string (not a number, boolean, null, or syntax).
bool Plain(std::string_view s) {
  if (s.empty() || s.size() > 200) return false;
  for (std::string_view word : {"true", "false", "null", "yes", "no", "on", "off", "y", "n", "~",
                                "True", "False", "Null", "TRUE", "FALSE", "NULL", "Yes", "No",
                                "YES", "NO", "On", "Off", "ON", "OFF", ".inf", ".nan"}) {
    if (s == word) return false;
  }
  const unsigned char first = static_cast<unsigned char>(s.front());
  if (first < 0x80 && !std::isalpha(first) && first != '_' && first != '/' && first != '.') {
    return false;
  }
  if (s.back() == ' ' || s.back() == ':') return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) continue;  // UTF-8 text is fine in plain scalars
    if (std::isalnum(c) || std::string_view("_-./@+()=, ").find(static_cast<char>(c)) !=
                               std::string_view::npos) {
      if (c == ' ' && i + 1 < s.size() && s[i + 1] == '#') return false;
      continue;
    }
    if (c == ':' && i + 1 < s.size() && s[i + 1] != ' ') continue;  // 12:30, http://x
    return false;
  }
  return true;
}

std::string Scalar(const json& v) {
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    return Plain(s) ? s : v.dump(-1, ' ', false, json::error_handler_t::replace);
  }
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

bool Block(const json& v) { return (v.is_object() || v.is_array()) && !v.empty(); }

// A value that is not a Block, on one line: a scalar, {} or [].
std::string Inline(const json& v) { return v.is_object() ? "{}" : v.is_array() ? "[]" : Scalar(v); }

std::string Key(const std::string& key) { return Plain(key) ? key : json(key).dump(); }

void Write(const json& v, int indent, std::string& out);

// Writes the entries of an object or array, each line starting at `indent`; the first line's
// indentation is already written when `continued`.
void Entries(const json& v, int indent, bool continued, std::string& out) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  bool first = true;
  const auto line_start = [&] {
    if (!(first && continued)) out += pad;
    first = false;
  };
  if (v.is_object()) {
    for (const auto& [key, item] : v.items()) {
      line_start();
      out += Key(key) + ":";
      if (Block(item)) {
        out += "\n";
        Write(item, item.is_array() ? indent : indent + 2, out);
      } else {
        out += " " + Inline(item) + "\n";
      }
    }
    return;
  }
  for (const json& item : v) {
    line_start();
    out += "- ";
    if (Block(item)) {
      Entries(item, indent + 2, /*continued=*/true, out);
    } else {
      out += Inline(item) + "\n";
    }
  }
}

void Write(const json& v, int indent, std::string& out) {
  if (Block(v)) {
    Entries(v, indent, /*continued=*/false, out);
  } else {
    out += std::string(static_cast<size_t>(indent), ' ') + Inline(v) + "\n";
  }
}

}  // namespace

std::string YamlOutput(const json& value) {
  std::string out;
  Write(value, 0, out);
  return out;
}

}  // namespace ql::cli
