#pragma once

// The one place that configures and includes cpp-httplib. Every translation unit that uses
// httplib (the server and its tests) includes this header instead of <httplib.h>, so all of
// them see the same limits: the library is header-only and its inline functions must be
// compiled identically everywhere. Not part of ql_http's public interface.

#if defined(CPPHTTPLIB_HTTPLIB_H)
#error "include ql/http/httplib_config.h instead of httplib.h"
#endif
#if defined(CPPHTTPLIB_OPENSSL_SUPPORT) || defined(CPPHTTPLIB_ZLIB_SUPPORT) || \
    defined(CPPHTTPLIB_BROTLI_SUPPORT)
#error "the API server is built without TLS and compression support"
#endif

// Request line (method + target + version) and each header line, in bytes.
#define CPPHTTPLIB_REQUEST_URI_MAX_LENGTH 4096
#define CPPHTTPLIB_HEADER_MAX_LENGTH 8192
// Default worker count; ApiServerOptions::threads overrides it at run time.
#define CPPHTTPLIB_THREAD_POOL_COUNT 4
// Requests served on one keep-alive connection and how long an idle one holds a worker.
#define CPPHTTPLIB_KEEPALIVE_MAX_COUNT 32
#define CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND 2
// Bodies are read through our own bounded reader; this is the backstop for anything else.
#define CPPHTTPLIB_PAYLOAD_MAX_LENGTH (size_t{1} << 20)
#define CPPHTTPLIB_FORM_URL_ENCODED_PAYLOAD_MAX_LENGTH (size_t{1} << 20)
#define CPPHTTPLIB_LISTEN_BACKLOG 64
#define CPPHTTPLIB_TCP_NODELAY true
// A peer that went away must cost an EPIPE, not the process (no reliance on SIGPIPE being
// ignored process-wide).
#define CPPHTTPLIB_SEND_FLAGS MSG_NOSIGNAL

#include <cpp-httplib/httplib.h>  // IWYU pragma: export
