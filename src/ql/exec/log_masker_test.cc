#include "ql/exec/log_masker.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace ql::exec {
namespace {

// Masks `input` in one piece the obvious way: mark every byte of every occurrence, then write
// one "***" per run of marked bytes.
std::string Reference(const std::string& input, const std::vector<std::string>& values) {
  std::vector<bool> covered(input.size(), false);
  for (const std::string& v : values) {
    if (v.size() < LogMasker::kMinMaskedBytes) continue;
    for (size_t at = input.find(v); at != std::string::npos; at = input.find(v, at + 1)) {
      for (size_t i = at; i < at + v.size(); ++i) covered[i] = true;
    }
  }
  std::string out;
  for (size_t i = 0; i < input.size(); ++i) {
    if (!covered[i]) {
      out.push_back(input[i]);
    } else if (i == 0 || !covered[i - 1]) {
      out += "***";
    }
  }
  return out;
}

// Feeds `input` to a masker in pieces cut at `cuts` (ascending offsets).
std::string Chunked(const std::string& input, const std::vector<std::string>& values,
                    const std::vector<size_t>& cuts) {
  LogMasker masker(values);
  std::string out;
  size_t from = 0;
  for (size_t cut : cuts) {
    masker.Write(std::string_view(input).substr(from, cut - from), out);
    from = cut;
  }
  masker.Write(std::string_view(input).substr(from), out);
  masker.Finish(out);
  return out;
}

std::string OneShot(const std::string& input, const std::vector<std::string>& values) {
  return Chunked(input, values, {});
}

TEST(LogMaskerTest, MasksEveryOccurrence) {
  const std::vector<std::string> values = {"hunter2-value"};
  EXPECT_EQ(OneShot("login with hunter2-value\n", values), "login with ***\n");
  EXPECT_EQ(OneShot("hunter2-value", values), "***");
  EXPECT_EQ(OneShot("a hunter2-value b hunter2-value c", values), "a *** b *** c");
  EXPECT_EQ(OneShot("hunter2-valu hunter2-val", values), "hunter2-valu hunter2-val");
  EXPECT_EQ(OneShot("", values), "");
}

TEST(LogMaskerTest, MasksValuesSplitAtEveryBoundary) {
  const std::vector<std::string> values = {"sk_live_4242", "cookie=abcdef"};
  const std::string input = "x sk_live_4242 y cookie=abcdef z sk_live_4242";
  const std::string expected = "x *** y *** z ***";
  ASSERT_EQ(OneShot(input, values), expected);
  for (size_t a = 0; a <= input.size(); ++a) {
    EXPECT_EQ(Chunked(input, values, {a}), expected) << "cut at " << a;
    for (size_t b = a; b <= input.size(); ++b) {
      EXPECT_EQ(Chunked(input, values, {a, b}), expected) << "cuts at " << a << ", " << b;
    }
  }
  std::vector<size_t> every_byte;
  for (size_t i = 1; i < input.size(); ++i) every_byte.push_back(i);
  EXPECT_EQ(Chunked(input, values, every_byte), expected);
}

TEST(LogMaskerTest, OverlappingAndNestedValuesHideEveryByte) {
  EXPECT_EQ(OneShot("xxabcdefghiyy", {"abcdef", "defghi"}), "xx***yy");
  EXPECT_EQ(OneShot("xxabcdefghiyy", {"defghi", "abcdef"}), "xx***yy");
  EXPECT_EQ(OneShot("[secret] [secretvalue]", {"secret", "secretvalue"}), "[***] [***]");
  EXPECT_EQ(OneShot("[abcdefgh] and more", {"abcdefgh", "cdef"}), "[***] and more");  // nested
  EXPECT_EQ(OneShot("abababab", {"abab"}), "***");           // occurrences overlap themselves
  EXPECT_EQ(OneShot("SECRSECR-SECR", {"SECR"}), "***-***");  // adjacent ones merge
  const std::string input = "..abcdefghij..";
  for (size_t a = 0; a <= input.size(); ++a) {
    EXPECT_EQ(Chunked(input, {"abcdefgh", "ghij"}, {a}), "..***..") << a;
  }
}

TEST(LogMaskerTest, IgnoresEmptyAndShortValues) {
  EXPECT_EQ(OneShot("on 1 abc yes", {"", "1", "on", "abc", "yes"}), "on 1 abc yes");
  EXPECT_FALSE(LogMasker({"", "abc"}).active());
  EXPECT_EQ(OneShot("the abcd is", {"abc", "abcd"}), "the *** is");
  EXPECT_TRUE(LogMasker({"abcd"}).active());
}

TEST(LogMaskerTest, HoldsBackOnlyLessThanTheLongestValue) {
  LogMasker masker({"0123456789", "abcd"});
  std::string out;
  masker.Write("hello world, this line is long", out);
  EXPECT_EQ(masker.held(), 9u);
  EXPECT_EQ(out, "hello world, this lin");
  masker.Write("!", out);
  EXPECT_EQ(masker.held(), 9u);
  masker.Finish(out);
  EXPECT_EQ(masker.held(), 0u);
  EXPECT_EQ(out, "hello world, this line is long!");

  LogMasker none;
  out.clear();
  none.Write("passes through", out);
  EXPECT_EQ(none.held(), 0u);
  EXPECT_EQ(out, "passes through");
}

TEST(LogMaskerTest, MatchesTheReferenceOnRandomStreams) {
  std::mt19937 random(20240611);
  const std::string alphabet = "abc-\n";
  auto text = [&](size_t length) {
    std::string s;
    for (size_t i = 0; i < length; ++i) s.push_back(alphabet[random() % alphabet.size()]);
    return s;
  };
  for (int round = 0; round < 2000; ++round) {
    std::vector<std::string> values;
    for (int i = 0, n = 1 + random() % 3; i < n; ++i) values.push_back(text(2 + random() % 7));
    const std::string input = text(random() % 80);
    std::vector<size_t> cuts;
    for (size_t at = 0; at < input.size(); at += 1 + random() % 9) cuts.push_back(at);
    ASSERT_EQ(Chunked(input, values, cuts), Reference(input, values))
        << "input " << input << " round " << round;
  }
}

}  // namespace
}  // namespace ql::exec
