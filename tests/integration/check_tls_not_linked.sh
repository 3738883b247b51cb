#!/bin/sh
# Fails when the given executable records libssl or libcrypto as NEEDED: ql-local opens them only
# when it serves TLS (apps/local/tls_library.cc).
set -eu
bin="$1"
needed=$(readelf -d "$bin" | grep NEEDED | sed 's/.*\[\(.*\)\]/\1/' | tr '\n' ' ')
case "$needed" in
  *libssl*|*libcrypto*)
    echo "FAIL: $bin links the TLS library at start: $needed"
    echo "an OpenSSL function the listener calls is not forwarded in apps/local/tls_library.cc:"
    nm -D --undefined-only "$bin" | grep -E 'OPENSSL_3' || true
    exit 1 ;;
esac
echo "$needed"
echo "OK: $bin opens the TLS library only when it serves TLS"
