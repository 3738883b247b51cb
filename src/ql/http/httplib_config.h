#pragma once

// The one place that configures and includes cpp-httplib. Every translation unit that uses
// httplib (the server and its tests) includes this header instead of <httplib.h>, so all of
// them see the same limits: the library is header-only and its inline functions must be
// compiled identically everywhere. Not part of ql_http's public interface.

#if defined(CPPHTTPLIB_HTTPLIB_H)
#error "include ql/http/httplib_config.h instead of httplib.h"
#endif
#if defined(CPPHTTPLIB_ZLIB_SUPPORT) || defined(CPPHTTPLIB_BROTLI_SUPPORT)
#error "the API server is built without compression support"
#endif
#if !defined(QL_TLS) || (QL_TLS && !defined(CPPHTTPLIB_OPENSSL_SUPPORT))
#error "link ql_httplib: it sets QL_TLS and the matching cpp-httplib TLS define"
#endif

// Request line (method + target + version) and each header line, in bytes: longer ones are
// answered 414 / 400 and end the connection.
#define CPPHTTPLIB_REQUEST_URI_MAX_LENGTH 4096
#define CPPHTTPLIB_HEADER_MAX_LENGTH 8192
// Any line past this is not read further: the connection is closed without an answer. With the
// two limits above it bounds what one connection holds before its handler runs (third_party/
// README.md).
#define CPPHTTPLIB_MAX_LINE_LENGTH 16384
// Header lines and bytes of one request; past either the request is answered 400 and the
// connection ends. The API answers 431 past 100 client headers itself.
#define CPPHTTPLIB_HEADER_MAX_COUNT 128
#define CPPHTTPLIB_HEADER_TOTAL_MAX_LENGTH 65536
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

static_assert(CPPHTTPLIB_MAX_LINE_LENGTH > CPPHTTPLIB_REQUEST_URI_MAX_LENGTH &&
                  CPPHTTPLIB_MAX_LINE_LENGTH > CPPHTTPLIB_HEADER_MAX_LENGTH,
              "lines between the request-line / header limits and the line limit get an answer");
