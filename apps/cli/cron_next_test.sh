#!/bin/sh
# Runs the built `ql` binary: `ql cron next` output and exit codes.
# Usage: cron_next_test.sh /path/to/ql
set -u
QL="$1"
failures=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run NAME EXPECTED_EXIT ARGS... ; leaves stdout in $tmp/out and stderr in $tmp/err
run() {
  name="$1"
  want="$2"
  shift 2
  "$QL" "$@" >"$tmp/out" 2>"$tmp/err"
  got=$?
  if [ "$got" -ne "$want" ]; then
    echo "FAIL $name: exit $got, want $want; stderr: $(cat "$tmp/err")"
    failures=$((failures + 1))
    return 1
  fi
  return 0
}

expect_out() {
  if [ "$(cat "$tmp/out")" != "$2" ]; then
    echo "FAIL $1: stdout was:"
    cat "$tmp/out"
    echo "want:"
    echo "$2"
    failures=$((failures + 1))
  fi
}

expect_err_prefix() {
  case "$(cat "$tmp/err")" in
    "$2"*) ;;
    *) echo "FAIL $1: stderr '$(cat "$tmp/err")' does not start with '$2'"
       failures=$((failures + 1)) ;;
  esac
  if [ -s "$tmp/out" ]; then
    echo "FAIL $1: unexpected stdout: $(cat "$tmp/out")"
    failures=$((failures + 1))
  fi
}

# Spring forward in New York: the 02:30 job fires once at 03:00 EDT.
run spring_forward 0 cron next '30 2 * * *' --tz America/New_York \
  --from 2026-03-07T12:00:00-05:00 --count 3 &&
  expect_out spring_forward "2026-03-08T03:00:00-04:00
2026-03-09T02:30:00-04:00
2026-03-10T02:30:00-04:00"

# Fall back: an every-30-minutes job fires on both passes of 01:00-01:59.
run fall_back 0 cron next '*/30 * * * *' --tz US/Eastern --from 2026-11-01T04:45:00Z --count 5 &&
  expect_out fall_back "2026-11-01T01:00:00-04:00
2026-11-01T01:30:00-04:00
2026-11-01T01:00:00-05:00
2026-11-01T01:30:00-05:00
2026-11-01T02:00:00-05:00"

run six_fields 0 cron next '0 0 9 * * MON-FRI' --tz Asia/Shanghai --from 2026-01-02T09:00:00+08:00 \
  --count 2 &&
  expect_out six_fields "2026-01-05T09:00:00+08:00
2026-01-06T09:00:00+08:00"

# Defaults: five lines after now.
run default_count 0 cron next '* * * * * *' --tz Etc/UTC &&
  [ "$(wc -l <"$tmp/out")" -eq 5 ] || { echo "FAIL default_count: $(cat "$tmp/out")"; failures=$((failures + 1)); }

run bad_zone 2 cron next '0 0 * * *' --tz Mars/Base --from 2026-01-01T00:00:00Z &&
  expect_err_prefix bad_zone "error: timezone_unknown: unknown time zone 'Mars/Base'"
run wrong_case_zone 2 cron next '0 0 * * *' --tz asia/shanghai &&
  expect_err_prefix wrong_case_zone "error: timezone_unknown: "
run missing_zone 2 cron next '0 0 * * *' &&
  expect_err_prefix missing_zone "error: timezone_required: "
run localtime_zone 2 cron next '0 0 * * *' --tz localtime &&
  expect_err_prefix localtime_zone "error: timezone_invalid: "
run macro 2 cron next '@daily' --tz Asia/Shanghai &&
  expect_err_prefix macro "error: cron_macro_unsupported: "
run out_of_range 2 cron next '0 24 * * *' --tz Asia/Shanghai &&
  expect_err_prefix out_of_range "error: cron_value_out_of_range: hour field '24'"
run never_fires 2 cron next '0 0 30 2 *' --tz Asia/Shanghai &&
  expect_err_prefix never_fires "error: cron_never_fires: "
run bad_from 2 cron next '0 0 * * *' --tz Asia/Shanghai --from 2026-01-01 &&
  expect_err_prefix bad_from "error: invalid_timestamp: "
run count_zero 2 cron next '0 0 * * *' --tz Asia/Shanghai --count 0 &&
  expect_err_prefix count_zero "error: count_out_of_range: "
run count_too_big 2 cron next '0 0 * * *' --tz Asia/Shanghai --count 1001 &&
  expect_err_prefix count_too_big "error: count_out_of_range: "
run count_not_number 2 cron next '0 0 * * *' --tz Asia/Shanghai --count many &&
  expect_err_prefix count_not_number "error: invalid_usage: "
run unknown_flag 2 cron next '0 0 * * *' --tz Asia/Shanghai --zone x &&
  expect_err_prefix unknown_flag "error: invalid_usage: "
run unquoted 2 cron next 0 0 '*' '*' '*' --tz Asia/Shanghai &&
  expect_err_prefix unquoted "error: invalid_usage: "
run no_command 2 &&
  expect_err_prefix no_command "error: invalid_usage: "
run help 0 cron next --help

# With --json (before or after the command) errors are one JSON object on stderr.
run json_error 2 cron next '0 24 * * *' --tz Asia/Shanghai --json &&
  expect_err_prefix json_error '{"code":"cron_value_out_of_range","message":"hour field '"'"'24'"'"''
run json_usage_error 2 --json cron next '0 0 * * *' --tz Asia/Shanghai --count many &&
  expect_err_prefix json_usage_error '{"code":"invalid_usage","message":"'

# With --json the fire times are one object in the API's /cron/next shape.
run json_spring_forward 0 --json cron next '30 2 * * *' --tz America/New_York \
  --from 2026-03-07T12:00:00-05:00 --count 2 &&
  expect_out json_spring_forward '{
  "expression": "30 2 * * *",
  "fire_times": [
    {
      "at": "2026-03-08T07:00:00Z",
      "local": "2026-03-08T03:00:00-04:00"
    },
    {
      "at": "2026-03-09T06:30:00Z",
      "local": "2026-03-09T02:30:00-04:00"
    }
  ],
  "timezone": "America/New_York"
}'
run json_after 0 cron next '0 0 9 * * MON-FRI' --tz Asia/Shanghai --from 2026-01-02T09:00:00+08:00 \
  --count 1 --json &&
  expect_out json_after '{
  "expression": "0 0 9 * * MON-FRI",
  "fire_times": [
    {
      "at": "2026-01-05T01:00:00Z",
      "local": "2026-01-05T09:00:00+08:00"
    }
  ],
  "timezone": "Asia/Shanghai"
}'

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all ql cron next checks passed"
