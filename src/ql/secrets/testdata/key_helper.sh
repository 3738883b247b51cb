#!/bin/sh
# A test helper for the exec key provider (docs/secret-providers.md). It does not encrypt: a
# "wrapped" key is the text "wrapped-by:<key id>:" followed by the data key, so the tests can
# check what the provider sent. The first argument picks a behaviour:
#   ok          answer as the protocol says; unwrap refuses (exit 3) a key id it did not wrap
#   fail        print a message on stderr and exit 3
#   hang [FILE] never answer (after writing its pid, also its process group id, to FILE)
#   hang-closed close stdout and stderr, then never exit
#   garbage     answer with something that is not JSON
#   short-key   unwrap answers a 16-byte key
#   other-key   unwrap answers 32 bytes that are not the data key
#   signal      kill itself with SIGKILL
#   record FILE save the request in FILE, then behave as ok
set -eu
mode=$1
request=$(cat)
if [ "$mode" = record ]; then
  printf '%s\n' "$request" > "$2"
  mode=ok
fi
field() { printf '%s' "$request" | sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p"; }
op=$(field op)
key_id=$(field key_id)
case $mode in
  fail) echo "kms: access denied for $key_id" >&2; exit 3 ;;
  hang) if [ $# -ge 2 ]; then echo $$ > "$2"; fi; sleep 60; exit 0 ;;
  hang-closed) exec >&- 2>&-; sleep 60; exit 0 ;;
  garbage) echo "this is not JSON"; exit 0 ;;
  signal) kill -9 $$ ;;
esac
prefix="wrapped-by:$key_id:"
if [ "$op" = wrap ]; then
  ct=$( { printf '%s' "$prefix"; field plaintext_b64 | base64 -d; } | base64 -w0)
  printf '{"ciphertext_b64":"%s"}\n' "$ct"
  exit 0
fi
wrapped=$(field ciphertext_b64)
got_prefix=$(printf '%s' "$wrapped" | base64 -d | head -c ${#prefix})
if [ "$got_prefix" != "$prefix" ]; then
  echo "unknown key $key_id" >&2
  exit 3
fi
case $mode in
  short-key) key=$(head -c 16 /dev/zero | base64 -w0) ;;
  other-key) key=$(head -c 32 /dev/zero | base64 -w0) ;;
  *) key=$(printf '%s' "$wrapped" | base64 -d | tail -c +$((${#prefix} + 1)) | base64 -w0) ;;
esac
printf '{"plaintext_b64":"%s"}\n' "$key"
