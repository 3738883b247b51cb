#include "ql/testing/test_pki.h"

#include <cstdio>
#include <fstream>
#include <string>

namespace ql::testing {
namespace {

// Runs `command` through the shell; Internal `pki_failed` with its output when it fails.
Status Run(const std::string& command) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return Internal("pki_failed", "cannot run: " + command);
  std::string output;
  char buffer[512];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  const int rc = ::pclose(pipe);
  if (rc != 0) return Internal("pki_failed", command + " failed: " + output);
  return Status();
}

Status Write(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out.good()) return Internal("pki_failed", "cannot write " + path);
  return Status();
}

// A self-signed CA named `name` in `dir`: name.pem and name.key.
Status MakeCa(const std::string& dir, const std::string& name) {
  return Run(
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 "
      "-subj /CN=" +
      name +
      " -addext basicConstraints=critical,CA:TRUE "
      "-addext keyUsage=critical,keyCertSign,cRLSign "
      "-keyout '" +
      dir + "/" + name + ".key' -out '" + dir + "/" + name + ".pem'");
}

// A leaf `name` in `dir` signed by the CA `ca`, with the extensions in `extensions`.
Status MakeLeaf(const std::string& dir, const std::string& ca, const std::string& name,
                const std::string& subject, const std::string& extensions) {
  const std::string base = dir + "/" + name;
  QL_RETURN_IF_ERROR(Write(base + ".ext", extensions));
  QL_RETURN_IF_ERROR(
      Run("openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
          "-subj /CN=" +
          subject + " -keyout '" + base + ".key' -out '" + base + ".csr'"));
  return Run("openssl x509 -req -in '" + base + ".csr' -CA '" + dir + "/" + ca + ".pem' -CAkey '" +
             dir + "/" + ca + ".key' -CAcreateserial -days 2 -extfile '" + base + ".ext' -out '" +
             base + ".pem'");
}

}  // namespace

Result<TestPki> MakeTestPki(const std::string& dir) {
  QL_RETURN_IF_ERROR(MakeCa(dir, "ca"));
  QL_RETURN_IF_ERROR(MakeCa(dir, "other-ca"));
  QL_RETURN_IF_ERROR(MakeLeaf(dir, "ca", "server", "localhost",
                              "basicConstraints=CA:FALSE\n"
                              "keyUsage=critical,digitalSignature\n"
                              "extendedKeyUsage=serverAuth\n"
                              "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\n"));
  QL_RETURN_IF_ERROR(MakeLeaf(dir, "ca", "client", "ql-test-client",
                              "basicConstraints=CA:FALSE\n"
                              "keyUsage=critical,digitalSignature\n"
                              "extendedKeyUsage=clientAuth\n"));
  QL_RETURN_IF_ERROR(MakeLeaf(dir, "ca", "cn-only", "localhost",
                              "basicConstraints=CA:FALSE\n"
                              "keyUsage=critical,digitalSignature\n"
                              "extendedKeyUsage=serverAuth\n"));
  return TestPki{dir + "/ca.pem",     dir + "/server.pem",   dir + "/server.key",
                 dir + "/client.pem", dir + "/client.key",   dir + "/other-ca.pem",
                 dir + "/cn-only.pem", dir + "/cn-only.key"};
}

}  // namespace ql::testing
