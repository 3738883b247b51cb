// ql-local maps OpenSSL only when it serves TLS. The OpenSSL functions its listener calls are
// defined here as forwarders to libssl.so.3, which is opened on first use; the executable is
// linked with --as-needed, so it has no NEEDED entry for libssl or libcrypto and an edge daemon
// on plain loopback HTTP never maps them (about 1.7 MiB of RSS). http::HttpServer::Create calls
// ql_load_tls_library before it builds a TLS listener, so a missing library is a clear start-up
// error rather than a failure inside a handshake. The check ql_local_maps_tls_only_when_serving
// fails when the listener starts calling an OpenSSL function not forwarded here (the linker then
// records libssl again).

#include <dlfcn.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace {

constexpr char kLibrary[] = "libssl.so.3";  // libcrypto.so.3 comes with it

std::once_flag g_once;
void* g_handle = nullptr;
std::string g_error;

void Open() {
  // RTLD_LOCAL: the library's symbols are reached only through dlsym, never in place of ours.
  g_handle = ::dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (g_handle == nullptr) {
    const char* why = ::dlerror();
    g_error = std::string(kLibrary) + ": " + (why != nullptr ? why : "unknown error");
  }
}

// Returns `name` from the library. Only reached after ql_load_tls_library succeeded (every caller
// is a TLS listener), so a failure here is a broken installation: say so and stop.
void* Symbol(const char* name) {
  std::call_once(g_once, Open);
  void* symbol = g_handle != nullptr ? ::dlsym(g_handle, name) : nullptr;
  if (symbol == nullptr) {
    std::fprintf(stderr, "ql-local: TLS function %s unavailable: %s\n", name,
                 g_handle == nullptr ? g_error.c_str() : "missing from the library");
    std::abort();
  }
  return symbol;
}

}  // namespace

extern "C" int ql_load_tls_library(char* error, size_t size) {
  std::call_once(g_once, Open);
  if (g_handle != nullptr) return 1;
  if (size > 0) std::snprintf(error, size, "%s", g_error.c_str());
  return 0;
}

// Defines `name` with OpenSSL's own declaration (from the headers above) as a call of the
// library's function, looked up once.
#define QL_TLS_FORWARD(ret, name, params, args)                         \
  extern "C" ret name params {                                          \
    static const auto fn = reinterpret_cast<ret(*) params>(Symbol(#name)); \
    return fn args;                                                     \
  }

QL_TLS_FORWARD(const SSL_METHOD*, TLS_server_method, (void), ())
QL_TLS_FORWARD(SSL_CTX*, SSL_CTX_new, (const SSL_METHOD* method), (method))
QL_TLS_FORWARD(void, SSL_CTX_free, (SSL_CTX * ctx), (ctx))
QL_TLS_FORWARD(long, SSL_CTX_ctrl, (SSL_CTX * ctx, int cmd, long larg, void* parg),
               (ctx, cmd, larg, parg))
QL_TLS_FORWARD(uint64_t, SSL_CTX_set_options, (SSL_CTX * ctx, uint64_t options), (ctx, options))
QL_TLS_FORWARD(void, SSL_CTX_set_verify, (SSL_CTX * ctx, int mode, SSL_verify_cb callback),
               (ctx, mode, callback))
QL_TLS_FORWARD(int, SSL_CTX_load_verify_locations,
               (SSL_CTX * ctx, const char* ca_file, const char* ca_path), (ctx, ca_file, ca_path))
QL_TLS_FORWARD(int, SSL_CTX_use_certificate_chain_file, (SSL_CTX * ctx, const char* file),
               (ctx, file))
QL_TLS_FORWARD(int, SSL_CTX_use_PrivateKey_file, (SSL_CTX * ctx, const char* file, int type),
               (ctx, file, type))
QL_TLS_FORWARD(SSL*, SSL_new, (SSL_CTX * ctx), (ctx))
QL_TLS_FORWARD(void, SSL_free, (SSL * ssl), (ssl))
QL_TLS_FORWARD(long, SSL_ctrl, (SSL * ssl, int cmd, long larg, void* parg), (ssl, cmd, larg, parg))
QL_TLS_FORWARD(void, SSL_set_bio, (SSL * ssl, BIO* rbio, BIO* wbio), (ssl, rbio, wbio))
QL_TLS_FORWARD(int, SSL_accept, (SSL * ssl), (ssl))
QL_TLS_FORWARD(int, SSL_read, (SSL * ssl, void* buf, int num), (ssl, buf, num))
QL_TLS_FORWARD(int, SSL_write, (SSL * ssl, const void* buf, int num), (ssl, buf, num))
QL_TLS_FORWARD(int, SSL_get_error, (const SSL* ssl, int ret), (ssl, ret))
QL_TLS_FORWARD(int, SSL_shutdown, (SSL * ssl), (ssl))
QL_TLS_FORWARD(long, BIO_ctrl, (BIO * bio, int cmd, long larg, void* parg), (bio, cmd, larg, parg))
// Asio's TLS stream (memory BIO pair, error strings, per-context and per-connection data).
QL_TLS_FORWARD(const SSL_METHOD*, TLS_method, (void), ())
QL_TLS_FORWARD(const SSL_METHOD*, TLS_client_method, (void), ())
QL_TLS_FORWARD(int, SSL_connect, (SSL * ssl), (ssl))
QL_TLS_FORWARD(int, SSL_get_shutdown, (const SSL* ssl), (ssl))
QL_TLS_FORWARD(void*, SSL_get_ex_data, (const SSL* ssl, int idx), (ssl, idx))
QL_TLS_FORWARD(int, SSL_set_ex_data, (SSL * ssl, int idx, void* data), (ssl, idx, data))
QL_TLS_FORWARD(void*, SSL_CTX_get_ex_data, (const SSL_CTX* ctx, int idx), (ctx, idx))
QL_TLS_FORWARD(int, SSL_CTX_set_ex_data, (SSL_CTX * ctx, int idx, void* data), (ctx, idx, data))
QL_TLS_FORWARD(SSL_verify_cb, SSL_CTX_get_verify_callback, (const SSL_CTX* ctx), (ctx))
QL_TLS_FORWARD(void*, SSL_CTX_get_default_passwd_cb_userdata, (SSL_CTX * ctx), (ctx))
QL_TLS_FORWARD(void, SSL_CTX_set_default_passwd_cb_userdata, (SSL_CTX * ctx, void* data),
               (ctx, data))
QL_TLS_FORWARD(int, BIO_new_bio_pair, (BIO * *bio1, size_t size1, BIO** bio2, size_t size2),
               (bio1, size1, bio2, size2))
QL_TLS_FORWARD(int, BIO_free, (BIO * bio), (bio))
QL_TLS_FORWARD(int, BIO_read, (BIO * bio, void* data, int length), (bio, data, length))
QL_TLS_FORWARD(int, BIO_write, (BIO * bio, const void* data, int length), (bio, data, length))
QL_TLS_FORWARD(size_t, BIO_ctrl_pending, (BIO * bio), (bio))
QL_TLS_FORWARD(void, ERR_clear_error, (void), ())
QL_TLS_FORWARD(unsigned long, ERR_get_error, (void), ())
QL_TLS_FORWARD(const char*, ERR_lib_error_string, (unsigned long error), (error))
QL_TLS_FORWARD(const char*, ERR_reason_error_string, (unsigned long error), (error))
