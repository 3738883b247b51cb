// Feeds the input as a request target to http::SplitTarget and as text to
// http::PercentDecode: the helpers routing relies on (http_message.h).
//
// Invariants:
// - SplitTarget accepts exactly the origin-form targets ("/...") whose query decodes; the path
//   is the target up to the first '?', never decoded; there is one parameter per non-empty
//   '&'-separated piece of the query, and the parameters written out again percent-encoded read
//   back the same;
// - PercentDecode agrees with a plain reading of RFC 3986 escapes (every '%' followed by two hex
//   digits, nothing else changed, '+' a space only in query mode); what it decodes, encoded
//   again, decodes to the same bytes;
// - a path segment decodes to "." or ".." only when it is spelt with '.' and "%2E"/"%2e", and
//   to a text with '/' only when it holds "%2F"/"%2f": the spellings the router's {id} segment
//   must refuse, so no escape smuggles a dot segment or a separator past it.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "ql/http/http_message.h"

namespace {

int Hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// RFC 3986 percent-decoding, written independently of http_message.cc.
std::optional<std::string> ReferenceDecode(std::string_view text, bool plus_is_space) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] != '%') {
      out.push_back(plus_is_space && text[i] == '+' ? ' ' : text[i]);
      ++i;
      continue;
    }
    if (text.size() - i < 3 || Hex(text[i + 1]) < 0 || Hex(text[i + 2]) < 0) return std::nullopt;
    out.push_back(static_cast<char>(Hex(text[i + 1]) * 16 + Hex(text[i + 2])));
    i += 3;
  }
  return out;
}

// Percent-encodes every byte outside RFC 3986's unreserved set.
std::string Encode(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char c : text) {
    const unsigned char u = static_cast<unsigned char>(c);
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                            (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' || c == '~';
    if (unreserved) {
      out.push_back(c);
    } else {
      out.push_back('%');
      out.push_back(kHex[u >> 4]);
      out.push_back(kHex[u & 15]);
    }
  }
  return out;
}

bool IsDotSpelling(std::string_view segment) {
  // Only '.', "%2e" and "%2E" pieces.
  size_t i = 0;
  while (i < segment.size()) {
    if (segment[i] == '.') {
      ++i;
    } else if (segment.substr(i, 3) == "%2e" || segment.substr(i, 3) == "%2E") {
      i += 3;
    } else {
      return false;
    }
  }
  return true;
}

bool HasEscapedSlash(std::string_view segment) {
  return segment.find("%2f") != std::string_view::npos ||
         segment.find("%2F") != std::string_view::npos;
}

void CheckDecode(std::string_view text) {
  for (bool plus : {false, true}) {
    const std::optional<std::string> got = ql::http::PercentDecode(text, plus);
    const std::optional<std::string> want = ReferenceDecode(text, plus);
    QL_FUZZ_CHECK(got == want, std::string(text));
    if (got) {
      QL_FUZZ_CHECK(ql::http::PercentDecode(Encode(*got), plus) == got, *got);
    }
  }
}

void CheckTarget(std::string_view target) {
  std::string path = "unchanged";
  std::multimap<std::string, std::string> params;
  const bool ok = ql::http::SplitTarget(target, &path, &params);
  const size_t question = target.find('?');
  const std::string_view query =
      question == std::string_view::npos ? std::string_view() : target.substr(question + 1);

  // Independently: origin-form, and every query piece decodes.
  bool query_decodes = true;
  size_t pieces = 0;
  for (size_t start = 0; start <= query.size() && !query.empty();) {
    size_t amp = query.find('&', start);
    if (amp == std::string_view::npos) amp = query.size();
    const std::string_view piece = query.substr(start, amp - start);
    if (!piece.empty()) {
      ++pieces;
      const size_t eq = piece.find('=');
      query_decodes =
          query_decodes && ReferenceDecode(piece.substr(0, eq), true).has_value() &&
          (eq == std::string_view::npos || ReferenceDecode(piece.substr(eq + 1), true).has_value());
    }
    start = amp + 1;
  }
  const bool origin_form = !target.empty() && target[0] == '/';
  QL_FUZZ_CHECK(ok == (origin_form && query_decodes), std::string(target));
  if (!ok) return;

  QL_FUZZ_CHECK(path == target.substr(0, question), std::string(target));
  QL_FUZZ_CHECK(params.size() == pieces, std::string(target));

  std::string again = path + "?";
  for (const auto& [key, value] : params) again += Encode(key) + "=" + Encode(value) + "&";
  std::string path2;
  std::multimap<std::string, std::string> params2;
  QL_FUZZ_CHECK(ql::http::SplitTarget(again, &path2, &params2), again);
  QL_FUZZ_CHECK(path2 == path && params2 == params, again);

  // Every segment of the raw path, as the router's {id} segment would decode it.
  std::string_view rest = std::string_view(path).substr(1);
  while (true) {
    const size_t slash = rest.find('/');
    const std::string_view segment = rest.substr(0, slash);
    if (const std::optional<std::string> decoded = ql::http::PercentDecode(segment, false)) {
      if (*decoded == "." || *decoded == "..") {
        QL_FUZZ_CHECK(IsDotSpelling(segment), std::string(segment));
      }
      if (decoded->find('/') != std::string::npos) {
        QL_FUZZ_CHECK(HasEscapedSlash(segment), std::string(segment));
      }
    }
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  CheckTarget(text);
  CheckDecode(text);
  return 0;
}
