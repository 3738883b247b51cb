#include "ql/core/canonical_json.h"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

namespace ql {
namespace {

using nlohmann::json;

constexpr char kHexDigits[] = "0123456789abcdef";

// Returns the length of the well-formed UTF-8 sequence starting at `i`, or 0 when the bytes
// there are ill-formed (RFC 3629, table 3-7 of the Unicode standard).
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xbf;  // allowed range of the second byte
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    len = 2;
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    len = 3;
    if (b0 == 0xe0) lo = 0xa0;  // no overlong forms
    if (b0 == 0xed) hi = 0x9f;  // no UTF-16 surrogates
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    len = 4;
    if (b0 == 0xf0) lo = 0x90;  // no overlong forms
    if (b0 == 0xf4) hi = 0x8f;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xbf) return 0;
  }
  return len;
}

// Returns the offset of the first ill-formed UTF-8 byte in `s`, if any.
std::optional<size_t> FirstInvalidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t len = Utf8SequenceLength(s, i);
    if (len == 0) return i;
    i += len;
  }
  return std::nullopt;
}

// Returns `s` with each byte that is not part of well-formed UTF-8 written as \xNN.
std::string EscapeIllFormedUtf8(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const size_t len = Utf8SequenceLength(s, i);
    if (len == 0) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      out += "\\x";
      out.push_back(kHexDigits[c >> 4]);
      out.push_back(kHexDigits[c & 0x0f]);
      ++i;
      continue;
    }
    out.append(s.substr(i, len));
    i += len;
  }
  return out;
}

// Returns `s` cut to at most `max_bytes` on a character boundary, with "..." when cut.
std::string TruncateUtf8(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return std::string(s);
  size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xc0) == 0x80) --end;
  return std::string(s.substr(0, end)) + "...";
}

void AppendEscapedControl(unsigned char c, std::string& out) {
  out += "\\u00";
  out.push_back(kHexDigits[c >> 4]);
  out.push_back(kHexDigits[c & 0x0f]);
}

// Appends `s` (valid UTF-8 unless `lossy`) as a JSON string with minimal escaping. Returns false
// when `s` is not valid UTF-8 and `lossy` is false.
bool AppendJsonString(std::string_view s, bool lossy, std::string& out) {
  out.push_back('"');
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t len = Utf8SequenceLength(s, i);
      if (len == 0) {
        if (!lossy) return false;
        out += "\xef\xbf\xbd";  // U+FFFD REPLACEMENT CHARACTER
        ++i;
        continue;
      }
      out.append(s.substr(i, len));
      i += len;
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          AppendEscapedControl(c, out);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
  out.push_back('"');
  return true;
}

// One step of a JSON path: an object key or an array index.
struct PathSegment {
  std::string key;
  size_t index = 0;
  bool is_index = false;
};

bool IsIdentifier(std::string_view key) {
  if (key.empty()) return false;
  for (size_t i = 0; i < key.size(); ++i) {
    const char c = key[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

// Formats a path as `$`, `$.spec.args[2]` or `$["odd key"]`.
std::string FormatPath(const std::vector<PathSegment>& path) {
  std::string out = "$";
  for (const PathSegment& seg : path) {
    if (seg.is_index) {
      out += "[" + std::to_string(seg.index) + "]";
    } else if (IsIdentifier(seg.key)) {
      out += "." + seg.key;
    } else {
      out += "[" + QuoteForMessage(seg.key) + "]";
    }
  }
  return out;
}

// Builds the document from nlohmann's SAX events while enforcing the strict rules the DOM
// parser does not: unique keys, bounded depth and int64-only numbers.
class StrictSaxBuilder {
 public:
  bool null() { return Put(json(nullptr)); }
  bool boolean(bool v) { return Put(json(v)); }
  bool number_integer(json::number_integer_t v) { return Put(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) {
    if (v > static_cast<json::number_unsigned_t>(std::numeric_limits<int64_t>::max())) {
      return Fail(InvalidArgument(
          "json_number_unsupported",
          "number " + std::to_string(v) + " at " + CurrentPath() + " is outside the int64 range"));
    }
    return Put(json(static_cast<json::number_integer_t>(v)));
  }
  bool number_float(json::number_float_t, const std::string& token) {
    return Fail(UnsupportedNumber(token));
  }
  bool string(std::string& s) { return Put(json(std::move(s))); }
  bool binary(json::binary_t&) {
    return Fail(InvalidArgument("invalid_json", "binary values are not JSON"));
  }
  bool start_object(std::size_t) { return Open(json::object()); }
  bool key(std::string& k) {
    json& object = *frames_.back().node;
    if (object.contains(k)) {
      return Fail(InvalidArgument("json_duplicate_key", "duplicate key " + QuoteForMessage(k) +
                                                            " in the object at " + PathOfTop()));
    }
    frames_.back().segment.key = k;
    pending_ = &object[k];
    return true;
  }
  bool end_object() { return Close(); }
  bool start_array(std::size_t) { return Open(json::array()); }
  bool end_array() { return Close(); }
  bool parse_error(std::size_t position, const std::string& last_token, const json::exception& ex) {
    if (ex.id == 406) return Fail(UnsupportedNumber(last_token));  // number overflow
    // The explanation quotes the bytes read last, which may end inside a character: those are
    // escaped so the message stays UTF-8.
    std::string what = EscapeIllFormedUtf8(ex.what());
    // Drop nlohmann's "[json.exception.parse_error.101] " tag; keep its explanation.
    if (const size_t tag_end = what.find("] "); tag_end != std::string::npos) {
      what = what.substr(tag_end + 2);
    }
    const size_t offset = position == 0 ? 0 : position - 1;
    return Fail(InvalidArgument(
        "invalid_json",
        "invalid JSON at byte offset " + std::to_string(offset) + ": " + TruncateUtf8(what, 240)));
  }

  json TakeRoot() { return std::move(root_); }
  const std::optional<Status>& error() const { return error_; }

 private:
  struct Frame {
    json* node;
    PathSegment segment;  // the key or index of the child being filled
  };

  Status UnsupportedNumber(const std::string& token) {
    const bool integral = token.find_first_of(".eE") == std::string::npos;
    return InvalidArgument("json_number_unsupported",
                           "number " + TruncateUtf8(token, 40) + " at " + CurrentPath() +
                               (integral ? " is outside the int64 range"
                                         : " is not an integer; only integers are supported"));
  }

  bool Fail(Status status) {
    error_ = std::move(status);
    return false;
  }

  // Returns where the value being read goes.
  json* Slot() {
    if (frames_.empty()) return &root_;
    Frame& top = frames_.back();
    if (top.node->is_object()) return pending_;
    top.node->push_back(json());
    top.segment.is_index = true;
    top.segment.index = top.node->size() - 1;
    // Safe to keep: the parent array grows again only after this child is closed.
    return &top.node->back();
  }

  bool Put(json value) {
    *Slot() = std::move(value);
    return true;
  }

  bool Open(json container) {
    if (static_cast<int>(frames_.size()) >= kMaxJsonDepth) {
      return Fail(InvalidArgument("json_too_deep", "nesting at " + CurrentPath() +
                                                       " is deeper than " +
                                                       std::to_string(kMaxJsonDepth) + " levels"));
    }
    json* slot = Slot();
    *slot = std::move(container);
    frames_.push_back(Frame{slot, PathSegment{}});
    return true;
  }

  bool Close() {
    frames_.pop_back();
    return true;
  }

  // The path of the value currently being read.
  std::string CurrentPath() const {
    std::vector<PathSegment> path;
    for (const Frame& f : frames_) path.push_back(f.segment);
    if (!frames_.empty() && frames_.back().node->is_array()) {
      path.back().is_index = true;
      path.back().index = frames_.back().node->size();
    }
    return FormatPath(path);
  }

  // The path of the innermost open container.
  std::string PathOfTop() const {
    std::vector<PathSegment> path;
    for (size_t i = 0; i + 1 < frames_.size(); ++i) path.push_back(frames_[i].segment);
    return FormatPath(path);
  }

  json root_;
  std::vector<Frame> frames_;
  json* pending_ = nullptr;
  std::optional<Status> error_;
};

class CanonicalWriter {
 public:
  explicit CanonicalWriter(bool lossy) : lossy_(lossy) {}

  Status Write(const json& v, std::string& out) {
    switch (v.type()) {
      case json::value_t::null:
        out += "null";
        return Status::Ok();
      case json::value_t::boolean:
        out += v.get<bool>() ? "true" : "false";
        return Status::Ok();
      case json::value_t::number_integer:
        out += std::to_string(v.get<json::number_integer_t>());
        return Status::Ok();
      case json::value_t::number_unsigned: {
        const auto u = v.get<json::number_unsigned_t>();
        if (u > static_cast<json::number_unsigned_t>(std::numeric_limits<int64_t>::max()) &&
            !lossy_) {
          return InvalidArgument("json_number_unsupported", "number " + std::to_string(u) + " at " +
                                                                FormatPath(path_) +
                                                                " is outside the int64 range");
        }
        out += std::to_string(u);
        return Status::Ok();
      }
      case json::value_t::number_float:
        if (!lossy_) {
          return InvalidArgument("json_number_unsupported",
                                 "number " + v.dump() + " at " + FormatPath(path_) +
                                     " is not an integer; only integers are supported");
        }
        out += v.dump();
        return Status::Ok();
      case json::value_t::string:
        if (!AppendJsonString(v.get_ref<const std::string&>(), lossy_, out)) {
          return InvalidUtf8("string");
        }
        return Status::Ok();
      case json::value_t::array: {
        QL_RETURN_IF_ERROR(Enter());
        out.push_back('[');
        path_.push_back(PathSegment{.key = {}, .index = 0, .is_index = true});
        for (size_t i = 0; i < v.size(); ++i) {
          if (i > 0) out.push_back(',');
          path_.back().index = i;
          QL_RETURN_IF_ERROR(Write(v[i], out));
        }
        path_.pop_back();
        out.push_back(']');
        return Status::Ok();
      }
      case json::value_t::object: {
        QL_RETURN_IF_ERROR(Enter());
        out.push_back('{');
        path_.push_back(PathSegment{});
        // nlohmann::json keeps objects in a std::map<std::string, json, std::less<>>, and
        // std::string compares as unsigned char, so iteration order is UTF-8 byte order.
        bool first = true;
        for (const auto& [key, child] : v.items()) {
          if (!first) out.push_back(',');
          first = false;
          path_.back().key = key;
          if (!AppendJsonString(key, lossy_, out)) return InvalidUtf8("key");
          out.push_back(':');
          QL_RETURN_IF_ERROR(Write(child, out));
        }
        path_.pop_back();
        out.push_back('}');
        return Status::Ok();
      }
      case json::value_t::binary:
      case json::value_t::discarded:
        if (lossy_) {
          out += "null";
          return Status::Ok();
        }
        return InvalidArgument("json_value_unsupported",
                               "value at " + FormatPath(path_) + " is not representable in JSON");
    }
    return Internal("json_value_unsupported", "unknown JSON value type");
  }

 private:
  Status Enter() {
    if (static_cast<int>(path_.size()) >= kMaxJsonDepth && !lossy_) {
      return InvalidArgument("json_too_deep", "nesting at " + FormatPath(path_) +
                                                  " is deeper than " +
                                                  std::to_string(kMaxJsonDepth) + " levels");
    }
    return Status::Ok();
  }

  Status InvalidUtf8(std::string_view what) {
    return InvalidArgument("json_invalid_utf8",
                           std::string(what) + " at " + FormatPath(path_) + " is not valid UTF-8");
  }

  bool lossy_;
  std::vector<PathSegment> path_;
};

}  // namespace

Result<json> ParseJsonStrict(std::string_view text) {
  if (const std::optional<size_t> bad = FirstInvalidUtf8(text)) {
    return InvalidArgument("json_invalid_utf8", "invalid UTF-8 at byte offset " +
                                                    std::to_string(*bad) + " of the JSON text");
  }
  // nlohmann's lexer takes a NUL byte for the end of the input and would ignore what follows;
  // JSON text holds none (control characters in strings are escaped).
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    return InvalidArgument("invalid_json", "invalid JSON at byte offset " + std::to_string(nul) +
                                               ": a NUL byte is not allowed in JSON text");
  }
  StrictSaxBuilder builder;
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &builder, json::input_format_t::json,
                         /*strict=*/true, /*ignore_comments=*/false);
  } catch (const std::exception& e) {
    return InvalidArgument("invalid_json", std::string("invalid JSON: ") + e.what());
  }
  if (builder.error().has_value()) return *builder.error();
  if (!ok) return InvalidArgument("invalid_json", "invalid JSON");
  return builder.TakeRoot();
}

Result<std::string> CanonicalJson(const json& value) {
  std::string out;
  QL_RETURN_IF_ERROR(CanonicalWriter(/*lossy=*/false).Write(value, out));
  return out;
}

std::string ReplaceInvalidUtf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    if (static_cast<unsigned char>(bytes[i]) < 0x80) {
      out.push_back(bytes[i++]);
      continue;
    }
    const size_t len = Utf8SequenceLength(bytes, i);
    if (len == 0) {
      out += "\xef\xbf\xbd";  // U+FFFD REPLACEMENT CHARACTER
      ++i;
      continue;
    }
    out.append(bytes.substr(i, len));
    i += len;
  }
  return out;
}

bool IsValidUtf8(std::string_view bytes) { return !FirstInvalidUtf8(bytes).has_value(); }

std::string QuoteForMessage(std::string_view value, size_t max_bytes) {
  std::string out = "\"";
  size_t i = 0;
  while (i < value.size()) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    size_t len = c < 0x80 ? 1 : Utf8SequenceLength(value, i);
    if (i + std::max<size_t>(len, 1) > max_bytes) break;
    if (len == 0) {
      out += "\\x";
      out.push_back(kHexDigits[c >> 4]);
      out.push_back(kHexDigits[c & 0x0f]);
      ++i;
      continue;
    }
    if (len > 1) {
      out.append(value.substr(i, len));
    } else {
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        default:
          if (c < 0x20 || c == 0x7f) {
            AppendEscapedControl(c, out);
          } else {
            out.push_back(static_cast<char>(c));
          }
      }
    }
    i += len;
  }
  out.push_back('"');
  if (i < value.size()) out += "...";
  return out;
}

std::string DescribeJsonValue(const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return value.get<bool>() ? "boolean true" : "boolean false";
    case json::value_t::number_integer:
      return "integer " + std::to_string(value.get<json::number_integer_t>());
    case json::value_t::number_unsigned:
      return "integer " + std::to_string(value.get<json::number_unsigned_t>());
    case json::value_t::number_float:
      return "number " + value.dump();
    case json::value_t::string:
      return "string " + QuoteForMessage(value.get_ref<const std::string&>());
    case json::value_t::array:
      return "array of " + std::to_string(value.size()) +
             (value.size() == 1 ? " element" : " elements");
    case json::value_t::object:
      return "object with " + std::to_string(value.size()) + (value.size() == 1 ? " key" : " keys");
    case json::value_t::binary:
      return "binary value";
    case json::value_t::discarded:
      return "discarded value";
  }
  return "value";
}

namespace internal {

std::string CanonicalJsonLossy(const json& value) {
  std::string out;
  // Cannot fail in lossy mode: every case above writes something instead of returning an error.
  (void)CanonicalWriter(/*lossy=*/true).Write(value, out);
  return out;
}

}  // namespace internal

}  // namespace ql
