#include "ql/core/ids.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

#include "ql/testing/fake_clock.h"

namespace ql {
namespace {

using ::testing::HasSubstr;

// Fills every requested byte with one value, so the non-random bits can be read off exactly.
class ConstantRandom final : public RandomSource {
 public:
  explicit ConstantRandom(std::uint8_t byte) : byte_(byte) {}
  void Fill(std::span<std::uint8_t> out) override {
    for (auto& b : out) b = byte_;
  }

 private:
  std::uint8_t byte_;
};

// Hands out the given bytes in order.
class ScriptedRandom final : public RandomSource {
 public:
  explicit ScriptedRandom(std::vector<std::uint8_t> bytes) : bytes_(std::move(bytes)) {}
  void Fill(std::span<std::uint8_t> out) override {
    for (auto& b : out) b = bytes_.at(next_++);
  }

 private:
  std::vector<std::uint8_t> bytes_;
  size_t next_ = 0;
};

TEST(NewUuidV7Test, EncodesTimestampVersionAndVariant) {
  ConstantRandom zeros(0x00);
  EXPECT_EQ(NewUuidV7(0x0123456789ab, zeros), "01234567-89ab-7000-8000-000000000000");
  ConstantRandom ones(0xff);
  EXPECT_EQ(NewUuidV7(0x0123456789ab, ones), "01234567-89ab-7fff-bfff-ffffffffffff");
}

TEST(NewUuidV7Test, MatchesRfc9562ExampleLayout) {
  // RFC 9562 appendix A.6: 2022-02-22T19:22:22Z is 0x017F22E279B0 ms.
  ScriptedRandom random({0x0c, 0xc3, 0x18, 0xc4, 0xdc, 0x0c, 0x0c, 0x07, 0x39, 0x8f});
  EXPECT_EQ(NewUuidV7(0x017F22E279B0, random), "017f22e2-79b0-7cc3-98c4-dc0c0c07398f");
}

TEST(NewUuidV7Test, ClampsTimestampsOutsideFortyEightBits) {
  ConstantRandom zeros(0x00);
  EXPECT_EQ(NewUuidV7(-5, zeros), "00000000-0000-7000-8000-000000000000");
  EXPECT_EQ(NewUuidV7(int64_t{1} << 50, zeros), "ffffffff-ffff-7000-8000-000000000000");
}

TEST(NewUuidV7Test, LaterTimestampsSortLaterAsStrings) {
  testing::SeededRandom random(7);
  std::string previous = NewUuidV7(1'767'225'600'000, random);
  for (int64_t ms = 1'767'225'600'001; ms < 1'767'225'601'000; ++ms) {
    std::string id = NewUuidV7(ms, random);
    EXPECT_LT(previous, id);
    previous = id;
  }
}

TEST(NewUuidV7Test, UsesSeventyFourRandomBits) {
  testing::SeededRandom random(42);
  std::set<std::string> seen;
  // Bits that were 0 / 1 in at least one id, over the 16 bytes.
  std::vector<std::uint8_t> ever_one(16, 0), ever_zero(16, 0);
  for (int i = 0; i < 2000; ++i) {
    const std::string id = NewUuidV7(1'767'225'600'000, random);
    ASSERT_TRUE(IsCanonicalUuid(id)) << id;
    EXPECT_EQ(id[14], '7');
    EXPECT_THAT(std::string("89ab"), HasSubstr(std::string(1, id[19])));
    seen.insert(id);
    std::string hex;
    for (char c : id) {
      if (c != '-') hex.push_back(c);
    }
    for (int b = 0; b < 16; ++b) {
      const auto byte = static_cast<std::uint8_t>(std::stoi(hex.substr(2 * b, 2), nullptr, 16));
      ever_one[b] |= byte;
      ever_zero[b] |= static_cast<std::uint8_t>(~byte);
    }
  }
  EXPECT_EQ(seen.size(), 2000u);
  int random_bits = 0;
  for (int b = 6; b < 16; ++b) {
    random_bits += __builtin_popcount(ever_one[b] & ever_zero[b]);
  }
  EXPECT_EQ(random_bits, 74);
}

TEST(IsCanonicalUuidTest, AcceptsOnlyLowercaseHyphenatedForm) {
  EXPECT_TRUE(IsCanonicalUuid("017f22e2-79b0-7cc3-98c4-dc0c0c07398f"));
  EXPECT_TRUE(IsCanonicalUuid("00000000-0000-0000-0000-000000000000"));
  EXPECT_FALSE(IsCanonicalUuid("017F22E2-79B0-7CC3-98C4-DC0C0C07398F"));
  EXPECT_FALSE(IsCanonicalUuid("017f22e279b07cc398c4dc0c0c07398f"));
  EXPECT_FALSE(IsCanonicalUuid("017f22e2-79b07-cc3-98c4-dc0c0c07398f"));
  EXPECT_FALSE(IsCanonicalUuid("017f22e2-79b0-7cc3-98c4-dc0c0c07398"));
  EXPECT_FALSE(IsCanonicalUuid("017f22e2-79b0-7cc3-98c4-dc0c0c07398f0"));
  EXPECT_FALSE(IsCanonicalUuid("{17f22e2-79b0-7cc3-98c4-dc0c0c07398}"));
  EXPECT_FALSE(IsCanonicalUuid("017f22e2-79b0-7cc3-98c4-dc0c0c07398g"));
  EXPECT_FALSE(IsCanonicalUuid(""));
}

TEST(ValidateIdTest, NamesFieldAndValue) {
  EXPECT_TRUE(ValidateId("task_id", "017f22e2-79b0-7cc3-98c4-dc0c0c07398f").ok());
  Status s = ValidateId("task_id", "not-a-uuid");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.reason(), "invalid_id");
  EXPECT_THAT(s.message(), HasSubstr("task_id"));
  EXPECT_THAT(s.message(), HasSubstr("\"not-a-uuid\""));
}

TEST(ValidateIdTest, TruncatesLongValuesInTheMessage) {
  Status s = ValidateId("run_id", std::string(1000, 'x'));
  EXPECT_EQ(s.reason(), "invalid_id");
  EXPECT_LT(s.message().size(), 200u);
}

TEST(RandomHexTest, EncodesEachByteAsTwoLowercaseDigits) {
  ScriptedRandom random({0x00, 0xab, 0xff, 0x10});
  EXPECT_EQ(RandomHex(random, 4), "00abff10");
  EXPECT_EQ(RandomHex(random, 0), "");
  testing::SeededRandom seeded(1);
  const std::string token = RandomHex(seeded, 32);
  EXPECT_EQ(token.size(), 64u);
  EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(RandomHex(seeded, 32), token);
}

}  // namespace
}  // namespace ql

namespace ql {
namespace {

TEST(UniqueIdPrefixLengthTest, IsOnePastTheLongestSharedPrefixAndAtLeastTheMinimum) {
  const std::string a = "019ca86a-3a60-78bc-be53-37cf59c55371";
  const std::string b = "019ca86a-3a61-7000-8000-000000000000";
  const std::string c = "019ca86b-0000-7000-8000-000000000000";
  const std::vector<std::string> all = {a, b, c};
  EXPECT_EQ(UniqueIdPrefixLength(a, all), 13u);  // "019ca86a-3a60"
  EXPECT_EQ(UniqueIdPrefixLength(b, all), 13u);
  EXPECT_EQ(UniqueIdPrefixLength(c, all), 8u);  // differs within the first 8: 8 still
  EXPECT_EQ(UniqueIdPrefixLength(a, {a}), 8u);  // alone (itself does not count)
  EXPECT_EQ(UniqueIdPrefixLength(a, {}), 8u);
  EXPECT_EQ(UniqueIdPrefixLength(a, {a}, 4), 4u);
}

TEST(UniqueIdPrefixLengthTest, NeverEndsOnADash) {
  const std::string a = "019ca86a-3a60-78bc-be53-37cf59c55371";
  EXPECT_EQ(UniqueIdPrefixLength(a, {a, "019ca86a-4000-7000-8000-000000000000"}), 10u);
  EXPECT_EQ(UniqueIdPrefixLength(a, {}, 9), 10u);  // 9 would end on the dash
  EXPECT_EQ(UniqueIdPrefixLength(a, {a, "019ca86a-3a60-78bc-be53-37cf59c55370"}), 36u);
}

}  // namespace
}  // namespace ql
