#!/bin/bash
# Runs the built `ql` binary: the bash completion script `ql completion bash` prints completes
# commands, subcommands and flags as bash would call it; zsh gets the same through bashcompinit.
# Usage: completion_test.sh /path/to/ql
set -u
QL="$1"
failures=0

script=$("$QL" completion bash) || { echo "FAIL: ql completion bash exited $?"; exit 1; }
eval "$script"

# complete WORDS... : sets COMPREPLY as bash would for the command line "WORDS" (the last word
# is the one being completed).
complete_line() {
  COMP_WORDS=("$@")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMPREPLY=()
  _ql
}

# expect NAME WORD... -- WANT... : each WANT is among the completions of WORD...
expect() {
  name="$1"
  shift
  words=()
  while [ "$1" != "--" ]; do words+=("$1"); shift; done
  shift
  complete_line "${words[@]}"
  for want in "$@"; do
    found=0
    for got in "${COMPREPLY[@]}"; do [ "$got" = "$want" ] && found=1; done
    if [ "$found" -ne 1 ]; then
      echo "FAIL $name: '$want' not offered for '${words[*]}' (got: ${COMPREPLY[*]})"
      failures=$((failures + 1))
    fi
  done
}

expect top ql "" -- task run trigger approval secret notify completion
expect prefix ql ta -- task
expect task ql task "" -- add list show edit enable disable rm
expect notify ql notify "" -- channel rule deliveries redeliver
expect notify-channel ql notify channel "" -- add list test rm
expect notify-channel-add-flags ql notify channel add ops --he -- --header
expect notify-rule-add-flags ql notify rule add --o -- --on
expect run-start-flags ql run start --w -- --wait
expect run-list-flags ql run list --s -- --since --status
expect edit-after-flag ql task edit greet --env A=1 --un -- --unset-env --unset-label
expect global ql task list --js -- --json
expect top-placement ql "" -- pool worker
expect pool ql pool "" -- list show grant revoke set
expect pool-grant-flags ql pool grant gpu --p -- --project
expect pool-set-flags ql pool set gpu --no -- --no-max-running
expect worker ql worker "" -- list show drain resume
expect task-add-placement ql task add t --wo -- --worker-label

if ! "$QL" completion zsh | head -1 | grep -q bashcompinit; then
  echo "FAIL: the zsh script does not load bashcompinit"
  failures=$((failures + 1))
fi
"$QL" completion fish >/dev/null 2>&1
if [ $? -ne 2 ]; then
  echo "FAIL: an unknown shell is not a usage error"
  failures=$((failures + 1))
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "completion: all passed"
