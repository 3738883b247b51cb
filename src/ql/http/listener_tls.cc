#include "ql/http/listener_tls.h"

namespace ql {

bool TlsAvailable() { return QL_TLS != 0; }

}  // namespace ql
