#include "ql/exec/attempt_files.h"

#include <gtest/gtest.h>

#include <string>

namespace ql::exec::internal {
namespace {

TEST(AttemptSecretsTest, RoundTripsBytesExactly) {
  LaunchSpec spec;
  EXPECT_EQ(EncodeSecrets(spec), "");
  EXPECT_EQ(EncodedSecretsSize(spec), 0u);
  spec.secret_environment = {{"API_TOKEN", std::string("v\xff\x01:=", 5)}, {"EMPTY", ""}};
  spec.mask_values = {"mask-one", "", std::string(300, 'm')};
  const std::string encoded = EncodeSecrets(spec);
  EXPECT_EQ(EncodedSecretsSize(spec), encoded.size());
  Result<AttemptSecrets> decoded = DecodeSecrets(encoded);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->environment, spec.secret_environment);
  EXPECT_EQ(decoded->mask_values, spec.mask_values);
}

TEST(AttemptSecretsTest, RefusesAnythingElse) {
  LaunchSpec spec;
  spec.secret_environment = {{"A", "secret-value"}};
  spec.mask_values = {"mask"};
  const std::string encoded = EncodeSecrets(spec);
  for (size_t cut = 0; cut < encoded.size(); ++cut) {
    Result<AttemptSecrets> decoded = DecodeSecrets(encoded.substr(0, cut));
    // Cutting exactly between two entries leaves a shorter but well-formed list.
    if (decoded.ok()) {
      EXPECT_LT(decoded->environment.size() + decoded->mask_values.size(), 2u) << cut;
      continue;
    }
    EXPECT_EQ(decoded.status().reason(), "exec_corrupt_record") << cut;
  }
  std::string other_kind = encoded;
  other_kind[other_kind.find('M')] = 'X';
  EXPECT_EQ(DecodeSecrets(other_kind).status().reason(), "exec_corrupt_record");
  EXPECT_EQ(DecodeSecrets("not secrets").status().reason(), "exec_corrupt_record");
}

}  // namespace
}  // namespace ql::exec::internal
