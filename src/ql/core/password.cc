#include "ql/core/password.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <set>

namespace ql {
namespace {

// Passwords of at least kMinPasswordBytes that lead the public lists of leaked passwords
// (compared case-insensitively); shorter ones are refused by length already.
constexpr std::array<std::string_view, 60> kCommon = {
    "123456789012",     "1234567890123",    "12345678901234",   "123456789123",
    "1234567891011",    "111111111111",     "000000000000",     "123123123123",
    "121212121212",     "112233445566",     "123456123456",     "qwertyuiop12",
    "qwertyuiop123",    "qwertyuiopasdf",   "qwerty123456",     "qwertyqwerty",
    "1q2w3e4r5t6y",     "1qaz2wsx3edc",     "zaq12wsxcde3",     "1qaz2wsx3edc4rfv",
    "q1w2e3r4t5y6",     "asdfghjkl123",     "asdfghjklzxc",     "zxcvbnm12345",
    "password1234",     "password12345",    "password123456",   "passwordpassword",
    "password123!",     "password@123",     "p@ssw0rd1234",     "passw0rd1234",
    "iloveyou1234",     "iloveyou123456",   "administrator",    "administrator1",
    "adminadmin123",    "admin1234567",     "admin123456789",   "rootroot1234",
    "welcome12345",     "welcome123456",    "letmein12345",     "changeme1234",
    "abcdefghijkl",     "abcdefg12345",     "abc123456789",     "abcd12345678",
    "football1234",     "baseball1234",     "superman1234",     "sunshine1234",
    "princess1234",     "dragon123456",     "monkey123456",     "qinglong1234",
    "qinglong123456",   "woaini1314520",    "5201314520",       "aa123456789a",
};

bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

Status CheckPasswordPolicy(std::string_view password, std::string_view principal_name) {
  if (password.size() < kMinPasswordBytes) {
    return InvalidArgument("password_too_short", "a password needs at least " +
                                                     std::to_string(kMinPasswordBytes) +
                                                     " characters");
  }
  if (password.size() > kMaxPasswordBytes) {
    return InvalidArgument("password_too_long", "a password has at most " +
                                                    std::to_string(kMaxPasswordBytes) + " bytes");
  }
  if (!ValidUtf8(password)) {
    return InvalidArgument("password_invalid_utf8", "a password must be valid UTF-8 text");
  }
  const std::set<char> distinct(password.begin(), password.end());
  const std::string lower = Lower(password);
  if (distinct.size() <= 3) {
    return InvalidArgument("password_too_common",
                           "the password repeats too few characters; choose a longer phrase");
  }
  if (!principal_name.empty() && lower.find(Lower(principal_name)) != std::string::npos &&
      principal_name.size() * 2 >= password.size()) {
    return InvalidArgument("password_too_common", "the password is mostly the principal's name");
  }
  if (std::find(kCommon.begin(), kCommon.end(), lower) != kCommon.end()) {
    return InvalidArgument("password_too_common",
                           "the password is among the commonest leaked passwords");
  }
  return Status::Ok();
}

}  // namespace ql
