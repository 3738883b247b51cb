#include "ql/core/secret_ref.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "ql/core/store_commands.h"

namespace ql {
namespace {

using ::testing::HasSubstr;

constexpr char kProject[] = "0190a5b2-7c3e-7a1b-8c4d-5e6f708192a5";

// Returns a ref text whose payload is `json` verbatim.
std::string RefOf(const std::string& json) {
  return std::string(kSecretRefPrefix) + Base64UrlEncode(json);
}

std::string ReasonOf(std::string_view text) { return DecodeSecretRef(text).status().reason(); }

TEST(SecretRefTest, EncodesCanonicalJsonAndRoundTrips) {
  SecretRef ref{kProject, "API_KEY", std::nullopt};
  Result<std::string> text = EncodeSecretRef(ref);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  // Refs are stored in immutable task revisions: the spelling is fixed.
  EXPECT_EQ(*text, RefOf(R"({"name":"API_KEY","projectId":")" + std::string(kProject) + R"("})"));
  EXPECT_EQ(*DecodeSecretRef(*text), ref);

  ref.version = 12;
  text = EncodeSecretRef(ref);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, RefOf(R"({"name":"API_KEY","projectId":")" + std::string(kProject) +
                         R"(","version":12})"));
  EXPECT_EQ(*DecodeSecretRef(*text), ref);
  EXPECT_TRUE(LooksLikeSecretRef(*text));
  EXPECT_FALSE(LooksLikeSecretRef("API_KEY"));
}

TEST(SecretRefTest, ValidatesNames) {
  for (const char* good : {"A", "_", "api_key", "Api.Key-2", "a0123456789"}) {
    EXPECT_TRUE(ValidateSecretName(good).ok()) << good;
  }
  EXPECT_TRUE(ValidateSecretName(std::string(128, 'a')).ok());
  for (std::string bad :
       {std::string(), std::string(129, 'a'), std::string("1abc"), std::string("-abc"),
        std::string(".abc"), std::string("a b"), std::string("a/b"), std::string("a:b"),
        std::string("caf\xc3\xa9"), std::string("a\0b", 3)}) {
    Status s = ValidateSecretName(bad);
    EXPECT_EQ(s.reason(), "secret_name_invalid") << bad;
    EXPECT_THAT(s.message(), HasSubstr("secret name")) << bad;
  }
}

TEST(SecretRefTest, EncodeRefusesInvalidFields) {
  EXPECT_EQ(EncodeSecretRef({"not-a-uuid", "A", std::nullopt}).status().reason(),
            "secret_ref_project_invalid");
  EXPECT_EQ(EncodeSecretRef({kProject, "9A", std::nullopt}).status().reason(),
            "secret_name_invalid");
  EXPECT_EQ(EncodeSecretRef({kProject, "A", 0}).status().reason(), "secret_ref_version_invalid");
  EXPECT_EQ(EncodeSecretRef({kProject, "A", -3}).status().reason(), "secret_ref_version_invalid");
}

TEST(SecretRefTest, RefusesMalformedText) {
  const std::string good = *EncodeSecretRef({kProject, "A", 1});
  EXPECT_EQ(ReasonOf(""), "secret_ref_malformed");
  EXPECT_EQ(ReasonOf("API_KEY"), "secret_ref_malformed");
  EXPECT_EQ(ReasonOf("qlsecret:v2:" + good.substr(kSecretRefPrefix.size())),
            "secret_ref_malformed");
  EXPECT_EQ(ReasonOf("QLSECRET:v1:" + good.substr(kSecretRefPrefix.size())),
            "secret_ref_malformed");
  EXPECT_EQ(ReasonOf(std::string(kSecretRefPrefix)), "secret_ref_malformed");
  EXPECT_EQ(ReasonOf(good + "="), "secret_ref_malformed");  // padding
  EXPECT_EQ(ReasonOf(good + "!"), "secret_ref_malformed");  // outside the alphabet
  EXPECT_EQ(ReasonOf(good + " "), "secret_ref_malformed");  // trailing space
  EXPECT_EQ(ReasonOf(good.substr(0, good.size() - 1)), "secret_ref_malformed");  // cut
  EXPECT_EQ(ReasonOf(RefOf("[1]")), "secret_ref_malformed");
  EXPECT_EQ(ReasonOf(RefOf(R"("A")")), "secret_ref_malformed");
  EXPECT_EQ(ReasonOf(RefOf(R"({"name":"A",)")), "secret_ref_malformed");
  EXPECT_EQ(
      ReasonOf(RefOf(R"({"name":"A","name":"B","projectId":")" + std::string(kProject) + R"("})")),
      "secret_ref_malformed");  // duplicate key
  EXPECT_EQ(ReasonOf(std::string(kSecretRefPrefix) + std::string(2000, 'A')),
            "secret_ref_malformed");
  Status s = DecodeSecretRef("API_KEY").status();
  EXPECT_THAT(s.message(), HasSubstr("\"API_KEY\""));
  EXPECT_THAT(s.message(), HasSubstr("qlsecret:v1:"));
}

TEST(SecretRefTest, RefusesWrongFields) {
  const std::string p = std::string(kProject);
  EXPECT_EQ(ReasonOf(RefOf(R"({"name":"A","projectId":")" + p + R"(","extra":1})")),
            "secret_ref_unknown_field");
  EXPECT_EQ(ReasonOf(RefOf(R"({"projectId":")" + p + R"("})")), "secret_ref_field_type");
  EXPECT_EQ(ReasonOf(RefOf(R"({"name":"A"})")), "secret_ref_field_type");
  EXPECT_EQ(ReasonOf(RefOf(R"({"name":7,"projectId":")" + p + R"("})")), "secret_ref_field_type");
  EXPECT_EQ(ReasonOf(RefOf(R"({"name":"A","projectId":")" + p + R"(","version":"2"})")),
            "secret_ref_field_type");
  EXPECT_EQ(ReasonOf(RefOf(R"({"name":"A","projectId":")" + p + R"(","version":null})")),
            "secret_ref_field_type");
  EXPECT_EQ(ReasonOf(RefOf(R"({"name":"A","projectId":")" + p + R"(","version":1.5})")),
            "secret_ref_malformed");  // not an integer: refused by the strict parser
  EXPECT_EQ(ReasonOf(RefOf(R"({"name":"A","projectId":")" + p + R"(","version":0})")),
            "secret_ref_version_invalid");
  EXPECT_EQ(ReasonOf(RefOf(R"({"name":"1A","projectId":")" + p + R"("})")), "secret_name_invalid");
  EXPECT_EQ(ReasonOf(RefOf(R"({"name":"A","projectId":"0190A5B2-7C3E-7A1B-8C4D-5E6F708192A5"})")),
            "secret_ref_project_invalid");
}

TEST(SecretRefTest, RefusesSecondSpellings) {
  const std::string p = std::string(kProject);
  // Same content as a canonical ref, spelled differently: key order, whitespace, an escape.
  for (const std::string& json :
       {R"({"projectId":")" + p + R"(","name":"A"})", R"({"name":"A", "projectId":")" + p + R"("})",
        R"({"name":"\u0041","projectId":")" + p + R"("})"}) {
    Status s = DecodeSecretRef(RefOf(json)).status();
    EXPECT_EQ(s.reason(), "secret_ref_not_canonical") << json;
    EXPECT_THAT(s.message(), HasSubstr(*EncodeSecretRef({kProject, "A", std::nullopt}))) << json;
  }
}

}  // namespace
}  // namespace ql
