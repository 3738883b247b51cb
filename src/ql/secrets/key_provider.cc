#include "ql/secrets/key_provider.h"

#include "ql/core/canonical_json.h"

namespace ql::secrets {

Status ValidateKeyId(std::string_view key_id) {
  bool printable = !key_id.empty() && key_id.size() <= kMaxKeyIdBytes;
  for (char c : key_id) printable = printable && c >= 0x21 && c <= 0x7e;
  if (!printable) {
    return InvalidArgument("key_id_invalid", "key id " + QuoteForMessage(key_id) + " must be 1.." +
                                                 std::to_string(kMaxKeyIdBytes) +
                                                 " printable ASCII characters without spaces");
  }
  return Status::Ok();
}

}  // namespace ql::secrets
