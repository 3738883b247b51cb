#include "ql/core/canonical_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "ql/core/digest.h"

namespace ql {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

std::string Nested(int depth, char open, char close) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += open == '{' ? std::string("{\"k\":") : std::string(1, open);
  s += "1";
  for (int i = 0; i < depth; ++i) s += close;
  return s;
}

void ExpectParseError(std::string_view text, std::string_view reason,
                      std::string_view message_part = "") {
  Result<json> r = ParseJsonStrict(text);
  ASSERT_FALSE(r.ok()) << "accepted: " << text;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().reason(), reason) << r.status().message();
  EXPECT_THAT(r.status().message(), HasSubstr(std::string(message_part)));
}

TEST(ParseJsonStrictTest, ParsesDocumentsAndStoresIntegersAsSigned) {
  Result<json> r = ParseJsonStrict(R"( {"a": [1, -2, true, null, "x"], "b": {}} )");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["a"][0], 1);
  EXPECT_TRUE((*r)["a"][0].is_number_integer());
  EXPECT_FALSE((*r)["a"][0].is_number_unsigned());
  EXPECT_EQ((*r)["a"][1], -2);
  EXPECT_EQ((*r)["a"][4], "x");
  EXPECT_TRUE((*r)["b"].is_object());
  EXPECT_EQ(*ParseJsonStrict("\"\\u4e2d\\n\""), json("中\n"));
  EXPECT_EQ(*ParseJsonStrict("\"中文 😀\""), json("中文 😀"));
  EXPECT_EQ(*ParseJsonStrict("-0"), json(0));
}

TEST(ParseJsonStrictTest, RejectsSyntaxErrorsWithByteOffset) {
  ExpectParseError(R"({"a":1,})", "invalid_json", "byte offset 7");
  ExpectParseError("[1 2]", "invalid_json", "byte offset 3");
  ExpectParseError("{", "invalid_json", "byte offset");
  ExpectParseError("", "invalid_json", "byte offset 0");
  ExpectParseError("   ", "invalid_json", "byte offset");
  ExpectParseError("nul", "invalid_json", "byte offset");
  ExpectParseError("{} x", "invalid_json", "byte offset 3");
  ExpectParseError("// c\n{}", "invalid_json", "byte offset 0");
  ExpectParseError("{'a':1}", "invalid_json", "byte offset 1");
  ExpectParseError("\"a\x01\"", "invalid_json", "byte offset 2");
  ExpectParseError("\"\\ud800\"", "invalid_json", "byte offset");
  ExpectParseError("01", "invalid_json", "byte offset");
  ExpectParseError("NaN", "invalid_json", "byte offset 0");
}

// Found by fuzz/api_body_fuzzer and fuzz/canonical_json_fuzzer (corpus/api_body/
// crash-invalid-bom-message, corpus/canonical_json/crash-message-cuts-a-character): the parser's
// explanation quotes the bytes it read last, which may end inside a character of valid input
// (here U+F67F, read as the start of a byte-order mark); the message must stay UTF-8.
TEST(ParseJsonStrictTest, SyntaxErrorMessagesAreValidUtf8) {
  for (std::string_view text :
       {std::string_view("\xef\x99\xbf{\":\"\"n\": "), std::string_view("\xef\xbc\x81"),
        std::string_view("[tr\xc3\xa9]"), std::string_view("{\"a\": n\xe4\xb8\xad}"),
        std::string_view("\xcf\x98")}) {
    Result<json> r = ParseJsonStrict(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().reason(), "invalid_json") << r.status().message();
    EXPECT_TRUE(IsValidUtf8(r.status().message())) << r.status().message();
  }
  ExpectParseError("\xef\x99\xbf{}", "invalid_json", "'\\xef\\x99'");
}

// Found with fuzz/api_body_fuzzer (corpus/api_body/crash-nul-ends-the-text): nlohmann's lexer
// takes a NUL byte for the end of the input, so whatever followed a complete value after a NUL
// was ignored. JSON text holds no raw NUL anywhere.
TEST(ParseJsonStrictTest, RejectsNulBytesAnywhere) {
  using namespace std::string_view_literals;
  ExpectParseError("{\"a\":1}\0{\"b\":2}"sv, "invalid_json", "byte offset 7");
  ExpectParseError("{\"a\":1}\0"sv, "invalid_json", "byte offset 7");
  ExpectParseError("[1]  \0 trailing"sv, "invalid_json", "byte offset 5");
  ExpectParseError("\"a\0b\""sv, "invalid_json", "byte offset 2");
  ExpectParseError("\0"sv, "invalid_json", "byte offset 0");
}

TEST(ParseJsonStrictTest, RejectsDuplicateKeysNamingKeyAndPath) {
  ExpectParseError(R"({"a":1,"a":2})", "json_duplicate_key",
                   "duplicate key \"a\" in the object at $");
  ExpectParseError(R"({"spec":{"environment":{"X":"1","Y":"2","X":"3"}}})", "json_duplicate_key",
                   "duplicate key \"X\" in the object at $.spec.environment");
  ExpectParseError(R"([{}, {"a b":{"k":1,"k":1}}])", "json_duplicate_key", "at $[1][\"a b\"]");
  // The same key in different objects is fine.
  EXPECT_TRUE(ParseJsonStrict(R"({"a":{"a":1},"b":{"a":2}})").ok());
}

TEST(ParseJsonStrictTest, RejectsInvalidUtf8WithByteOffset) {
  ExpectParseError("\"\xff\"", "json_invalid_utf8", "byte offset 1");
  ExpectParseError("[\"ok\", \"\xc0\xaf\"]", "json_invalid_utf8", "byte offset 8");  // overlong
  ExpectParseError("\"\xed\xa0\x80\"", "json_invalid_utf8", "byte offset 1");        // surrogate
  ExpectParseError("\"\xf4\x90\x80\x80\"", "json_invalid_utf8", "byte offset 1");    // > U+10FFFF
  ExpectParseError("\"\xe4\xb8\"", "json_invalid_utf8", "byte offset 1");            // truncated
  ExpectParseError("{\"k\xfe\":1}", "json_invalid_utf8", "byte offset 3");           // in a key
}

TEST(ParseJsonStrictTest, LimitsNestingDepth) {
  EXPECT_TRUE(ParseJsonStrict(Nested(kMaxJsonDepth, '[', ']')).ok());
  EXPECT_TRUE(ParseJsonStrict(Nested(kMaxJsonDepth, '{', '}')).ok());
  ExpectParseError(Nested(kMaxJsonDepth + 1, '[', ']'), "json_too_deep", "deeper than 64");
  ExpectParseError(Nested(kMaxJsonDepth + 1, '{', '}'), "json_too_deep", "deeper than 64");
  // Far deeper input fails the same way without exhausting the stack.
  ExpectParseError(std::string(100000, '['), "json_too_deep");
}

TEST(ParseJsonStrictTest, AcceptsExactlyTheInt64Range) {
  EXPECT_EQ(*ParseJsonStrict("9223372036854775807"), json(INT64_MAX));
  EXPECT_EQ(*ParseJsonStrict("-9223372036854775808"), json(INT64_MIN));
  ExpectParseError("9223372036854775808", "json_number_unsupported", "outside the int64 range");
  ExpectParseError("-9223372036854775809", "json_number_unsupported", "outside the int64 range");
  ExpectParseError("18446744073709551616", "json_number_unsupported", "outside the int64 range");
  ExpectParseError("1e400", "json_number_unsupported", "not an integer");
}

TEST(ParseJsonStrictTest, RejectsNonIntegersNamingThePath) {
  ExpectParseError("1.5", "json_number_unsupported", "number 1.5 at $ is not an integer");
  ExpectParseError("1.0", "json_number_unsupported", "not an integer");
  ExpectParseError("1e3", "json_number_unsupported", "not an integer");
  ExpectParseError("-0.0", "json_number_unsupported", "not an integer");
  ExpectParseError(R"({"a":[1, 2.5]})", "json_number_unsupported", "at $.a[1]");
  ExpectParseError(R"({"spec":{"timeoutMs":30000.5}})", "json_number_unsupported",
                   "at $.spec.timeoutMs");
}

TEST(CanonicalJsonTest, PinsTheEncodingOfASampleSpec) {
  // Keys deliberately out of order, with insignificant whitespace.
  constexpr std::string_view kInput = R"({
    "workingDirectory": "/srv/jobs", "timeoutMs": 30000,
    "environment": {"TZ": "Asia/Shanghai", "A_B": "1", "LANG": "zh_CN.UTF-8"},
    "command": {"kind": "argv", "file": "/usr/bin/env",
                "args": ["echo", "h\u00e9llo 世界", "a\"b\\c\n\t\u0001"]}
  })";
  constexpr std::string_view kCanonical =
      R"({"command":{"args":["echo","héllo 世界","a\"b\\c\n\t\u0001"],"file":"/usr/bin/env",)"
      R"("kind":"argv"},"environment":{"A_B":"1","LANG":"zh_CN.UTF-8","TZ":"Asia/Shanghai"},)"
      R"("timeoutMs":30000,"workingDirectory":"/srv/jobs"})";
  Result<json> parsed = ParseJsonStrict(kInput);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  Result<std::string> canonical = CanonicalJson(*parsed);
  ASSERT_TRUE(canonical.ok()) << canonical.status().ToString();
  EXPECT_EQ(*canonical, kCanonical);
  // Computed independently: printf '%s' "<canonical>" | sha256sum
  EXPECT_EQ(Sha256Hex(*canonical),
            "94d428c36acc3b68403b638f5423ea9171d5f3f389922e9010e71e92769e90ab");
}

TEST(CanonicalJsonTest, IsIndependentOfKeyOrderAndIdempotent) {
  Result<json> a = ParseJsonStrict(R"({"b":1,"a":{"y":[3,{"q":1,"p":2}],"x":null}})");
  Result<json> b = ParseJsonStrict(R"({"a":{"x":null,"y":[3,{"p":2,"q":1}]},"b":1})");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*CanonicalJson(*a), *CanonicalJson(*b));
  EXPECT_EQ(*CanonicalJson(*a), R"({"a":{"x":null,"y":[3,{"p":2,"q":1}]},"b":1})");
  Result<json> again = ParseJsonStrict(*CanonicalJson(*a));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *a);
  EXPECT_EQ(*CanonicalJson(*again), *CanonicalJson(*a));
}

TEST(CanonicalJsonTest, SortsKeysByUtf8Bytes) {
  // UTF-16 order would put U+1F600 before U+FF01; UTF-8 byte order puts it last.
  json j = {
      {"\xef\xbc\x81", 1}, {"😀", 2}, {"中", 3}, {"é", 4}, {"z", 5}, {"a", 6}, {"A", 7}, {"", 8}};
  EXPECT_EQ(*CanonicalJson(j),
            "{\"\":8,\"A\":7,\"a\":6,\"z\":5,\"é\":4,\"中\":3,\"！\":1,\"😀\":2}");
}

TEST(CanonicalJsonTest, EscapesMinimally) {
  std::string all_controls;
  for (int c = 0; c < 0x20; ++c) all_controls.push_back(static_cast<char>(c));
  EXPECT_EQ(*CanonicalJson(json(all_controls)),
            "\"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\\b\\t\\n\\u000b\\f\\r"
            "\\u000e\\u000f\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\\u0018\\u0019"
            "\\u001a\\u001b\\u001c\\u001d\\u001e\\u001f\"");
  EXPECT_EQ(*CanonicalJson(json("q\"b\\s/d\x7f é中😀")), "\"q\\\"b\\\\s/d\x7f é中😀\"");
  EXPECT_EQ(*CanonicalJson(json{{"k\n", "v"}}), "{\"k\\n\":\"v\"}");
}

TEST(CanonicalJsonTest, WritesScalarsAndContainersWithoutWhitespace) {
  EXPECT_EQ(*CanonicalJson(json::parse(R"({"d":false,"c":true,"a":[1,2,{"b":null}]})")),
            R"({"a":[1,2,{"b":null}],"c":true,"d":false})");
  EXPECT_EQ(*CanonicalJson(json::object()), "{}");
  EXPECT_EQ(*CanonicalJson(json::array()), "[]");
  EXPECT_EQ(*CanonicalJson(json(nullptr)), "null");
  EXPECT_EQ(*CanonicalJson(json("")), "\"\"");
}

TEST(CanonicalJsonTest, WritesIntegersExactly) {
  EXPECT_EQ(*CanonicalJson(json(INT64_MAX)), "9223372036854775807");
  EXPECT_EQ(*CanonicalJson(json(INT64_MIN)), "-9223372036854775808");
  EXPECT_EQ(*CanonicalJson(json(uint64_t{INT64_MAX})), "9223372036854775807");
  EXPECT_EQ(*CanonicalJson(json(0)), "0");
  EXPECT_EQ(*CanonicalJson(json(-1)), "-1");
  // A large value that a double would round.
  EXPECT_EQ(*CanonicalJson(json(int64_t{9007199254740993})), "9007199254740993");
}

TEST(CanonicalJsonTest, RejectsNumbersOutsideInt64NamingThePath) {
  Result<std::string> r = CanonicalJson(json{{"a", {1, uint64_t{INT64_MAX} + 1}}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().reason(), "json_number_unsupported");
  EXPECT_THAT(r.status().message(), HasSubstr("$.a[1]"));
  r = CanonicalJson(json{{"x", 1.5}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().reason(), "json_number_unsupported");
  EXPECT_THAT(r.status().message(), HasSubstr("$.x"));
  EXPECT_EQ(CanonicalJson(json(1.0)).status().reason(), "json_number_unsupported");
}

TEST(CanonicalJsonTest, RejectsInvalidUtf8InValuesAndKeys) {
  Result<std::string> r = CanonicalJson(json{{"env", {{"A", "\xff"}}}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().reason(), "json_invalid_utf8");
  EXPECT_THAT(r.status().message(), HasSubstr("$.env.A"));
  r = CanonicalJson(json{{"\xc3", 1}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().reason(), "json_invalid_utf8");
  EXPECT_THAT(r.status().message(), HasSubstr("key"));
}

TEST(CanonicalJsonTest, RejectsDeepAndBinaryValues) {
  json deep = 1;
  for (int i = 0; i < kMaxJsonDepth; ++i) deep = json::array({deep});
  EXPECT_TRUE(CanonicalJson(deep).ok());
  deep = json::array({deep});
  EXPECT_EQ(CanonicalJson(deep).status().reason(), "json_too_deep");
  EXPECT_EQ(CanonicalJson(json::binary({1, 2})).status().reason(), "json_value_unsupported");
}

TEST(CanonicalJsonLossyTest, ReplacesInvalidBytesButMatchesStrictOtherwise) {
  json valid = {{"a", "中"}, {"b", {1, 2}}};
  EXPECT_EQ(internal::CanonicalJsonLossy(valid), *CanonicalJson(valid));
  EXPECT_EQ(internal::CanonicalJsonLossy(json("a\xff"
                                              "b")),
            "\"a\xef\xbf\xbd"
            "b\"");
}

TEST(IsValidUtf8Test, FollowsRfc3629) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(
      IsValidUtf8("\xc2\x80 \xdf\xbf \xe0\xa0\x80 \xef\xbf\xbf \xf0\x90\x80\x80 \xf4\x8f\xbf\xbf"));
  EXPECT_TRUE(IsValidUtf8(std::string_view("\0", 1)));
  EXPECT_FALSE(IsValidUtf8("\x80"));
  EXPECT_FALSE(IsValidUtf8("\xc1\xbf"));          // overlong
  EXPECT_FALSE(IsValidUtf8("\xe0\x9f\xbf"));      // overlong
  EXPECT_FALSE(IsValidUtf8("\xed\xbf\xbf"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xf0\x8f\xbf\xbf"));  // overlong
  EXPECT_FALSE(IsValidUtf8("\xf5\x80\x80\x80"));  // beyond U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xe4\xb8"));          // truncated
  EXPECT_FALSE(IsValidUtf8("\xe4\x41\x80"));      // bad continuation
}

TEST(QuoteForMessageTest, EscapesAndTruncatesOnCharacterBoundaries) {
  EXPECT_EQ(QuoteForMessage("abc"), "\"abc\"");
  EXPECT_EQ(QuoteForMessage("a\"b\\\n\x01"), "\"a\\\"b\\\\\\n\\u0001\"");
  EXPECT_EQ(QuoteForMessage("a\xff"), "\"a\\xff\"");
  EXPECT_EQ(QuoteForMessage(std::string(100, 'x'), 10), "\"xxxxxxxxxx\"...");
  // "中" is three bytes: four of them do not fit in 10 bytes, three do.
  EXPECT_EQ(QuoteForMessage("中中中中", 10), "\"中中中\"...");
  EXPECT_EQ(QuoteForMessage("中中中", 9), "\"中中中\"");
}

TEST(DescribeJsonValueTest, NamesTypeAndValue) {
  EXPECT_EQ(DescribeJsonValue(json("x")), "string \"x\"");
  EXPECT_EQ(DescribeJsonValue(json(5)), "integer 5");
  EXPECT_EQ(DescribeJsonValue(json(uint64_t{7})), "integer 7");
  EXPECT_EQ(DescribeJsonValue(json(1.5)), "number 1.5");
  EXPECT_EQ(DescribeJsonValue(json(true)), "boolean true");
  EXPECT_EQ(DescribeJsonValue(json(nullptr)), "null");
  EXPECT_EQ(DescribeJsonValue(json::array({1})), "array of 1 element");
  EXPECT_EQ(DescribeJsonValue(json{{"a", 1}, {"b", 2}}), "object with 2 keys");
}

}  // namespace
}  // namespace ql
