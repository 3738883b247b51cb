#pragma once

// A throwaway certificate authority for TLS tests, made with the `openssl` command-line tool.

#include <string>

#include "ql/core/status.h"

namespace ql::testing {

struct TestPki {
  std::string ca_cert;      // the CA that signed the certificates below
  std::string server_cert;  // for localhost, 127.0.0.1 and ::1
  std::string server_key;
  std::string client_cert;  // a client certificate (CN ql-test-client)
  std::string client_key;
  std::string other_ca_cert;  // an unrelated CA: verifying with it must fail
  // A server certificate the CA signed for CN=localhost with no subjectAltName: a client that
  // checks names against SANs only must refuse it.
  std::string cn_only_cert;
  std::string cn_only_key;
};

// Creates the files of a TestPki in the existing directory `dir` (P-256 keys, valid for two
// days). Internal `pki_failed` with the tool's output when a step fails.
Result<TestPki> MakeTestPki(const std::string& dir);

}  // namespace ql::testing
