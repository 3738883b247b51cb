#!/usr/bin/env bash
# The escape suite: commands run by QingLong try to get out of their confinement, and must fail.
#
#   escape_suite.sh [--bin-dir DIR] [--postgres THROWAWAY_POSTGRES --roles-sql ROLES_SQL]
#                   [--rounds root,user,worker,worker-user] [--keep]
#
# Needs root (it starts ql-local as root, then as the system user `qlescape`, which it creates).
# Every attempt runs as the admin of a project `p2` (a principal holding only `admin` there),
# through `ql`, exactly as a user would. One line per attempt: PASS, FAIL or SKIP and its name;
# the exit status is 0 when nothing failed, 1 when something did, 77 when not run as root.
# See tests/escape/README.md.

set -u
set -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
BIN_DIR=$HERE/../../build/bin
POSTGRES=""
ROLES_SQL=$HERE/../../deploy/postgres/roles.sql
ROUNDS="root,user,worker,worker-user"
KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    --bin-dir) BIN_DIR=$2; shift 2 ;;
    --postgres) POSTGRES=$2; shift 2 ;;
    --roles-sql) ROLES_SQL=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    *) echo "usage: $0 [--bin-dir DIR] [--postgres FILE --roles-sql FILE] [--rounds LIST] [--keep]" >&2
       exit 2 ;;
  esac
done
BIN_DIR=$(cd "$BIN_DIR" && pwd) || exit 2
[ -n "$POSTGRES" ] || POSTGRES=$BIN_DIR/../tests/throwaway_postgres
QL=$BIN_DIR/ql
QL_LOCAL=$BIN_DIR/ql-local
ESCAPE_USER=qlescape

if [ "$(id -u)" != 0 ]; then
  echo "SKIP: the escape suite must run as root (it starts ql-local as root and as $ESCAPE_USER)"
  exit 77
fi
for tool in "$QL" "$QL_LOCAL"; do
  [ -x "$tool" ] || { echo "FAIL setup: $tool is missing"; exit 1; }
done
for tool in jq curl setpriv useradd /usr/bin/python3 git; do
  command -v "$tool" >/dev/null || { echo "FAIL setup: $tool is missing"; exit 1; }
done
PY=/usr/bin/python3

# ---- Bookkeeping ----------------------------------------------------------------------------

# Not below /tmp: every command gets a private /tmp, which would hide the data directories from
# it before the confinement's own covers are tried.
T=$(mktemp -d /var/lib/ql-escape.XXXXXX 2>/dev/null || mktemp -d "$HOME/ql-escape.XXXXXX")
chmod 0755 "$T"   # the unprivileged round's data directory lies below it
HOST_TMP_MARK=$(mktemp /tmp/ql-escape-hostmark.XXXXXX)
mkdir -m 0700 "$T/private"  # results, secrets and daemon output: no command may read them
# A directory anyone may write on the host (as /var/mail, /srv/shared or a spool may be): the host
# is read-only to every command, so none of them may put anything in it.
DROP=$T/drop
mkdir -p "$DROP"
chmod 1777 "$DROP"
PIDS=()           # processes this script started (ended by pid in cleanup)
PG_FD_OPEN=0
USER_CREATED=0    # 1: this run added $ESCAPE_USER and removes it at the end
PASSES=0
FAILURES=0
SKIPS=0
ROUND=""

cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null
  done
  for pid in "${PIDS[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  if [ "$PG_FD_OPEN" = 1 ]; then exec 7>&-; fi  # the PostgreSQL helper stops at end of input
  wait 2>/dev/null
  rm -f "$HOST_TMP_MARK"
  if [ "$USER_CREATED" = 1 ]; then userdel "$ESCAPE_USER" 2>/dev/null; fi
  if [ "$KEEP" = 1 ]; then echo "kept $T"; else rm -rf "$T"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

record() {  # record PASS|FAIL|SKIP NAME [DETAIL]
  local verdict=$1 name=$2 detail=${3:-}
  case "$verdict" in
    PASS) PASSES=$((PASSES + 1)) ;;
    FAIL) FAILURES=$((FAILURES + 1)) ;;
    SKIP) SKIPS=$((SKIPS + 1)) ;;
  esac
  if [ -n "$detail" ]; then
    printf '%s %s: %s — %s\n' "$verdict" "$ROUND" "$name" "$detail"
  else
    printf '%s %s: %s\n' "$verdict" "$ROUND" "$name"
  fi
}

rand_hex() { head -c "${1:-8}" /dev/urandom | od -An -tx1 | tr -d ' \n'; }

free_port() {
  "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

http_code() { curl -s -o /dev/null -m 5 -w '%{http_code}' "$1" 2>/dev/null; }

wait_http_ok() {  # URL SECONDS
  local i
  for i in $(seq 1 $(($2 * 10))); do
    [ "$(http_code "$1")" = 200 ] && return 0
    sleep 0.1
  done
  return 1
}

# A loopback HTTP server on the host that the ordinary commands fetch from.
HTTP_MARK="hello-from-the-host-$(rand_hex 6)"
mkdir -p "$T/www"
echo "$HTTP_MARK" >"$T/www/hello.txt"
HTTP_PORT=$(free_port)
"$PY" -m http.server "$HTTP_PORT" --bind 127.0.0.1 --directory "$T/www" >"$T/private/http.log" 2>&1 &
PIDS+=($!)

# ---- Leak detection -------------------------------------------------------------------------

# $SECRETS_FILE holds one secret per line: its bytes in hex and its name. A log, the daemon's
# output or any other file checked must contain none of them.
SECRETS_FILE=""
add_secret_bytes() { printf '%s %s\n' "$(od -An -tx1 | tr -d ' \n')" "$1" >>"$SECRETS_FILE"; }
add_secret_text() { printf '%s' "$2" | add_secret_bytes "$1"; }  # NAME TEXT
add_secret_file() { add_secret_bytes "$1" <"$2"; }               # NAME FILE

leaks_in() {  # FILE: prints the names of the secrets found in it; exit 0 when none is
  "$PY" - "$SECRETS_FILE" "$1" <<'PYEOF'
import sys
secrets = [l.split(None, 1) for l in open(sys.argv[1]) if l.strip()]
data = open(sys.argv[2], "rb").read()
found = [name.strip() for hexed, name in secrets if hexed and bytes.fromhex(hexed) in data]
if found:
    print(", ".join(found))
    sys.exit(1)
PYEOF
}

# ---- Talking to the server ------------------------------------------------------------------

URL=""
OWNER_TOKEN=""
ADMIN_TOKEN=""
ql_owner() { "$QL" --server "$URL" --token "$OWNER_TOKEN" "$@"; }
ql_admin() { "$QL" --server "$URL" --token "$ADMIN_TOKEN" --project p2 "$@"; }

declare -A TASK RUN ADD_ERROR
ORDER=()
RD=""  # this round's results directory

# attempt NAME COMMAND [task flags...]: adds a task as the p2 admin and starts a run of it.
attempt() {
  local name=$1 cmd=$2 out
  shift 2
  ORDER+=("$name")
  if ! out=$(ql_admin task add "$name" --shell "$cmd" --timeout 60s "$@" 2>&1); then
    ADD_ERROR[$name]=$out
    return
  fi
  TASK[$name]=$out
  if ! out=$(ql_admin run start "${TASK[$name]}" 2>&1); then
    ADD_ERROR[$name]="run start: $out"
    return
  fi
  RUN[$name]=$out
}

# rerun NAME: starts one more run of the task (its earlier run has ended).
rerun() {
  local name=$1
  RUN[$name]=$(ql_admin run start "${TASK[$name]}" 2>&1)
}

is_terminal() {
  case "$1" in succeeded | failed | cancelled | timed_out | skipped | recovery_required) return 0 ;; esac
  return 1
}

# await_run QL_FUNCTION RUN_ID: waits (at most 20 s) until one run has ended.
await_run() {
  local i
  for i in $(seq 1 100); do
    is_terminal "$("$1" --json run show "$2" 2>/dev/null | jq -r .status)" && return 0
    sleep 0.2
  done
}

# wait_runs NAME...: polls the project's run list until each run has ended (at most 120 s), then
# saves each run's `ql run show --json` and log in $RD.
wait_runs() {
  local name deadline=$((SECONDS + 120)) pending listing
  while :; do
    listing=$(ql_admin --json run list --limit 1000 2>/dev/null |
      jq -r '.items[] | "\(.id) \(.status)"') || listing=""
    pending=0
    for name in "$@"; do
      [ -n "${RUN[$name]:-}" ] || continue
      local status
      status=$(printf '%s\n' "$listing" | awk -v id="${RUN[$name]}" '$1 == id {print $2}')
      is_terminal "$status" || pending=$((pending + 1))
    done
    [ "$pending" = 0 ] && break
    [ $SECONDS -ge $deadline ] && break
    sleep 0.3
  done
  for name in "$@"; do
    [ -n "${RUN[$name]:-}" ] || continue
    ql_admin --json run show "${RUN[$name]}" >"$RD/$name.show.json" 2>"$RD/$name.show.err"
    ql_admin run log "${RUN[$name]}" >"$RD/$name.log" 2>"$RD/$name.log.err"
  done
}

run_field() { jq -r "$2 // empty" "$RD/$1.show.json" 2>/dev/null; }
run_status() { run_field "$1" .status; }
run_error() { run_field "$1" .error_code; }
run_confinement() {
  jq -r '[.events[]?.payload.confinement? // empty] | last // empty' "$RD/$1.show.json" 2>/dev/null
}

# ---- Verdicts -------------------------------------------------------------------------------

WHY=""
# The common part of every escape check: the run ended, its command ran (unless `nostart` is
# allowed: the set-up refused it), it printed no ESCAPED line and its log holds no secret.
escape_ok() {
  local name=$1 allow=${2:-} status
  if [ -n "${ADD_ERROR[$name]:-}" ]; then
    if [ "$allow" = nostart ]; then return 0; fi
    WHY="could not add or start the task: ${ADD_ERROR[$name]}"
    return 1
  fi
  status=$(run_status "$name")
  if ! is_terminal "$status"; then WHY="run ${RUN[$name]} did not end (status '$status')"; return 1; fi
  if ! grep -q '^BEGIN$' "$RD/$name.log" 2>/dev/null && [ "$allow" != nostart ]; then
    WHY="the command did not run: $(run_field "$name" .error_code) $(run_field "$name" .error_summary)"
    return 1
  fi
  if grep -a -q 'ESCAPED' "$RD/$name.log"; then
    WHY=$(grep -a -m1 -o 'ESCAPED.*' "$RD/$name.log" | cut -c1-200)
    return 1
  fi
  local leak
  if ! leak=$(leaks_in "$RD/$name.log"); then WHY="its log holds: $leak"; return 1; fi
  return 0
}

# judge NAME [nostart] [CHECK...]: each CHECK is a shell expression that sets WHY when false.
judge() {
  local name=$1 allow=""
  shift
  if [ "${1:-}" = nostart ]; then allow=nostart; shift; fi
  WHY=""
  if ! escape_ok "$name" "$allow"; then record FAIL "$name" "$WHY"; return; fi
  local check
  for check in "$@"; do
    WHY=""
    if ! eval "$check"; then record FAIL "$name" "${WHY:-$check}"; return; fi
  done
  if [ -n "${ADD_ERROR[$name]:-}" ]; then
    record PASS "$name" "refused: $(printf '%s' "${ADD_ERROR[$name]}" | head -1 | cut -c1-120)"
  elif ! grep -q '^BEGIN$' "$RD/$name.log"; then
    record PASS "$name" "not started: $(run_field "$name" .error_summary | cut -c1-120)"
  else
    record PASS "$name"
  fi
}

# judge_ok NAME CHECK...: an ordinary command that must succeed.
judge_ok() {
  local name=$1 check
  shift
  if [ -n "${ADD_ERROR[$name]:-}" ]; then record FAIL "$name" "${ADD_ERROR[$name]}"; return; fi
  if [ "$(run_status "$name")" != succeeded ]; then
    record FAIL "$name" "run $(run_status "$name"): $(run_error "$name") $(run_field "$name" .error_summary); log: $(tr '\n' ' ' <"$RD/$name.log" | cut -c1-200)"
    return
  fi
  for check in "$@"; do
    WHY=""
    if ! eval "$check"; then record FAIL "$name" "${WHY:-$check}"; return; fi
  done
  record PASS "$name"
}

log_has() {  # NAME EXTENDED-REGEX
  grep -a -E -q -- "$2" "$RD/$1.log" && return 0
  WHY="log lacks /$2/: $(tr '\n' ' ' <"$RD/$1.log" | cut -c1-200)"
  return 1
}
log_lacks() {
  grep -a -E -q -- "$2" "$RD/$1.log" || return 0
  WHY="log has /$2/: $(grep -a -E -m1 -- "$2" "$RD/$1.log" | cut -c1-160)"
  return 1
}
host_absent() {  # PATH...
  local p
  for p in "$@"; do
    if [ -e "$p" ] || [ -L "$p" ]; then WHY="$p exists on the host"; return 1; fi
  done
  return 0
}
error_is() {  # NAME CODE...
  local got code
  got=$(run_error "$1")
  shift
  for code in "$@"; do [ "$got" = "$code" ] && return 0; done
  WHY="error_code '$got', want $*"
  return 1
}
status_is() {
  [ "$(run_status "$1")" = "$2" ] && return 0
  WHY="status '$(run_status "$1")', want $2"
  return 1
}
daemon_alive() {  # the daemon process lives and /livez answers
  if ! kill -0 "$DAEMON_PID" 2>/dev/null; then WHY="the daemon (pid $DAEMON_PID) is gone"; return 1; fi
  if [ "$(http_code "$URL/livez")" != 200 ]; then WHY="/livez does not answer 200"; return 1; fi
  return 0
}
no_host_process() {  # PATTERN (a unique marker in a command line)
  local i pids
  for i in $(seq 1 20); do
    pids=$(pgrep -f -- "$1" | grep -v "^$$\$" || true)
    [ -z "$pids" ] && return 0
    sleep 0.1
  done
  WHY="process(es) $pids left on the host: $(ps -o pid,user,args -p "$(echo $pids | tr ' ' ,)" | tail -n +2 | head -3 | tr '\n' ';')"
  for i in $pids; do LEFTOVER+=("$i"); done
  return 1
}
LEFTOVER=()
db_untouched() {  # DB MARK: no appended bytes and no table of a command in the database
  if grep -a -q "QLESCAPE-DBWRITE-$2" "$1" "$1-wal" 2>/dev/null; then
    WHY="the command's bytes are in the database"
    return 1
  fi
  local tables
  tables=$("$PY" -c 'import sqlite3, sys
c = sqlite3.connect("file:" + sys.argv[1] + "?mode=ro", uri=True)
print(" ".join(r[0] for r in c.execute("select name from sqlite_master where name like ?", ("qlescape%",))))' "$1" 2>&1)
  [ -z "$tables" ] && return 0
  WHY="the database has: $tables"
  return 1
}
same_text() {  # NOW BEFORE WHAT
  [ "$1" = "$2" ] && return 0
  WHY="$3 changed"
  return 1
}
clean_file() {  # FILE: holds no secret
  local leak
  leak=$(leaks_in "$1") && return 0
  WHY="$1 holds: $leak"
  return 1
}
not_host_init() {  # NAME: the init the command sees is not the host's PID 1
  local host inside
  host=$(tr '\0' ' ' </proc/1/cmdline)
  inside=$(sed -n 's/^init: //p' "$RD/$1.log")
  [ "$inside" != "$host" ] && return 0
  WHY="/proc/1 inside is the host's init ($host)"
  return 1
}
uid_in_range() {  # NAME FIRST LAST
  local uid
  uid=$(sed -n 's/^uid=\([0-9]*\) .*/\1/p' "$RD/$1.log")
  [ -n "$uid" ] && [ "$uid" -ge "$2" ] && [ "$uid" -le "$3" ] && return 0
  WHY="uid '$uid' outside $2-$3"
  return 1
}

# ---- The commands ---------------------------------------------------------------------------

# Every escape command starts with this: BEGIN (proof it ran) and try_read, which prints
# "ESCAPED: read PATH" (and the bytes) when PATH yields anything.
PRE='echo BEGIN
try_read() {
  c=$(head -c 512 "$1" 2>/dev/null | od -An -tx1 | tr -d " \n")
  if [ -n "$c" ]; then echo "ESCAPED: read $1"; echo "$c"; head -c 512 "$1"; echo; fi
}
'

# escape_attempts DATA DAEMON_PID MARK OTHER_TASK_ID: the attempts, each one task of p2.
escape_attempts() {
  local D=$1 DP=$2 M=$3 OT=$4

  # The daemon's files, by relative and absolute path.
  attempt owner-token-relative "$PRE"'
try_read ../../owner.token
try_read ../../../owner.token
ls -la ../.. 2>&1'
  attempt owner-token-absolute "$PRE
try_read $D/owner.token
ls -la $D 2>&1"
  attempt secret-key "$PRE
try_read ../../secret.key
try_read $D/secret.key
od -An -tx1 $D/secret.key 2>&1"
  attempt database-read "$PRE
try_read $D/db/qinglong.db
try_read $D/db/qinglong.db-wal
python3 -c 'import sqlite3; c = sqlite3.connect(\"file:$D/db/qinglong.db?mode=ro\", uri=True); print(\"ESCAPED tables\", c.execute(\"select name from sqlite_master\").fetchall())' 2>&1 | tail -1"
  attempt database-write "$PRE
echo QLESCAPE-DBW\"\"RITE-$M >>$D/db/qinglong.db && echo 'ESCAPED: appended to the database'
python3 -c 'import sqlite3; c = sqlite3.connect(\"$D/db/qinglong.db\"); c.execute(\"create table qlescape_$M (x)\"); c.commit(); print(\"ESCAPED created a table\")' 2>&1 | tail -1"
  attempt plant-in-data-dir "$PRE
echo x >$D/planted-$M && echo 'ESCAPED: planted in the data directory'
echo x >../../planted2-$M && echo 'ESCAPED: planted via ../..'
mkdir $D/work/planted-$M && echo 'ESCAPED: made a directory in work/'
mkdir ../planted3-$M && echo 'ESCAPED: made a directory beside the working directory'
mkdir -p $D/log/planted-$M && echo 'ESCAPED: made a directory in log/'
true"
  attempt list-work-dirs "$PRE
ls -la .. $D/work 2>&1
ls -a .. $D/work $D/run $D/log 2>/dev/null | grep -q $OT && echo 'ESCAPED: sees the other task directory $OT'
ls $D/run 2>/dev/null | grep -q . && echo 'ESCAPED: sees attempt directories'
true"
  attempt other-project-files "$PRE
try_read ../$OT/secret-default.txt
try_read $D/work/$OT/secret-default.txt
cat ../$OT/* $D/work/$OT/* 2>&1 | head -5
find $D/log -type f 2>/dev/null | head -3 | while read f; do try_read \$f; done
true"
  attempt daemon-environ "$PRE
try_read /proc/$DP/environ
try_read /proc/$DP/cmdline
cat /proc/$DP/environ 2>&1 | tr '\0' '\n' | head -3"
  attempt daemon-proc-root "$PRE
ls /proc/$DP/root/ >/dev/null 2>&1 && echo 'ESCAPED: /proc/$DP/root is listable'
try_read /proc/$DP/root$D/owner.token
try_read /proc/$DP/cwd/owner.token
ls -la /proc/$DP/fd 2>&1 | head -3"
  attempt kill-daemon-0 "$PRE
kill -0 $DP && echo 'ESCAPED: kill -0 reached the daemon'
true"
  attempt kill-daemon-term "$PRE
kill -TERM $DP && echo 'ESCAPED: SIGTERM sent to the daemon'
kill -KILL $DP && echo 'ESCAPED: SIGKILL sent to the daemon'
kill -STOP $DP && echo 'ESCAPED: SIGSTOP sent to the daemon'
true"
  attempt kill-everything "$PRE
kill -9 -1 2>&1
sleep 0.2
echo 'survived kill -9 -1'"
  attempt ptrace-daemon "$PRE
try_read /proc/$DP/mem
dd if=/proc/$DP/mem bs=1 count=1 skip=4194304 2>&1 | tail -1
if command -v gdb >/dev/null; then
  gdb -q -nx -batch -p $DP -ex 'info proc' 2>&1 | grep -E 'exe = |process $DP' && echo 'ESCAPED: gdb attached to the daemon'
  gdb -q -nx -batch -p 1 -ex 'info proc' 2>&1 | grep -E 'exe = ' && echo 'ESCAPED: gdb attached to the namespace init'
fi
if command -v strace >/dev/null; then
  timeout 3 strace -p $DP 2>&1 | grep -i 'attached' && echo 'ESCAPED: strace attached to the daemon'
fi
true"
  attempt setuid-binaries "$PRE
for bin in su sudo passwd mount newgrp chsh; do ls -l \$(command -v \$bin 2>/dev/null) 2>/dev/null; done
su root -c 'id -u; cat $D/owner.token' </dev/null 2>&1 | head -2
command -v sudo >/dev/null && sudo -n cat $D/owner.token 2>&1 | head -2
passwd -S root 2>&1 | grep -E '^root (P|L|NP) ' && echo 'ESCAPED: passwd read the shadow entry'
true"
  attempt unshare-user-read "$PRE
unshare -r sh -c 'id -u; cat $D/owner.token $D/secret.key' 2>&1 | head -3
true"
  attempt unshare-umount-cover "$PRE
unshare -rm sh -c 'umount -l $D 2>&1 || umount $D 2>&1; ls $D; cat $D/owner.token' 2>&1 | head -5
unshare -rm sh -c 'umount -l ../.. 2>&1; cat ../../owner.token' 2>&1 | head -3
true"
  attempt unshare-umount-proc "$PRE
unshare -rm sh -c 'umount -l /proc 2>&1; ls /proc' 2>/dev/null | grep -qx $DP && echo 'ESCAPED: the host /proc (daemon pid $DP) is visible'
unshare -rmpf --mount-proc sh -c 'ls /proc' 2>/dev/null | grep -qx $DP && echo 'ESCAPED: a new /proc shows the daemon'
true"
  attempt unshare-remount-rw "$PRE
unshare -rm sh -c 'mount -o remount,bind,rw / 2>&1; mount -o remount,bind,rw /etc 2>&1; mount -o remount,rw $D 2>&1; touch /etc/qlescape-rw-$M && echo ESCAPED-etc; echo x > $D/planted-rw-$M && echo ESCAPED-data' 2>&1 | head -6
true"
  attempt chroot-and-mount "$PRE
chroot / true 2>&1 && echo 'ESCAPED: chroot worked'
mkdir -p /tmp/m
mount -t tmpfs none /tmp/m 2>&1 && echo 'ESCAPED: mount worked'
mount --bind / /tmp/m 2>&1 && echo 'ESCAPED: bind mount worked'
umount -l $D 2>&1 && echo 'ESCAPED: umount of the cover worked'
true"
  attempt write-system-dirs "$PRE
for p in /etc/qlescape-$M /usr/qlescape-$M /usr/bin/qlescape-$M /root/qlescape-$M /qlescape-$M /var/qlescape-$M $DROP/qlescape-$M; do
  echo x >\$p 2>/dev/null && echo \"ESCAPED: wrote \$p\"
done
true"
  attempt read-shadow "$PRE
try_read /etc/shadow
try_read /etc/gshadow
true"
  attempt write-sys-and-proc-sys "$PRE
# Each value is written back unchanged: harmless even if the write went through.
for f in /proc/sys/vm/overcommit_memory /proc/sys/kernel/randomize_va_space /proc/sys/kernel/pid_max /proc/sys/net/ipv4/ip_forward /sys/class/net/lo/mtu /sys/kernel/mm/transparent_hugepage/enabled; do
  [ -e \$f ] || continue
  v=\$(cat \$f | sed 's/.*\\[\\(.*\\)\\].*/\\1/')
  printf '%s\\n' \"\$v\" >\$f 2>/dev/null && echo \"ESCAPED: wrote \$f\"
done
for f in /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/memory/cgroup.procs /sys/fs/cgroup/pids/cgroup.procs /sys/fs/cgroup/unified/cgroup.procs; do
  [ -e \$f ] && echo \$\$ >\$f 2>/dev/null && echo \"ESCAPED: left the cgroup through \$f\"
done
true"
  attempt inherited-descriptors "$PRE
for f in /proc/\$\$/fd/*; do
  t=\$(readlink \$f)
  echo \"\$f -> \$t\"
  case \$t in $D*|*socket:*|*qinglong.db*|*secret.key*|*owner.token*) echo \"ESCAPED: descriptor \$f is \$t\" ;; esac
done"
  attempt hidden-logs-and-records "$PRE
ls -la $D/log $D/run 2>&1 | head -5
find $D -maxdepth 3 2>/dev/null | grep -v '^$D\$' | grep -v '^$D/work' | head -5 | sed 's/^/ESCAPED: sees /'
true"
  attempt symlink-out "$PRE
ln -s ../../secret.key out.log
ln -s $D/secret.key key.link
ln -s $D/owner.token token.link
ln -s $D/db/qinglong.db db.link
cat out.log key.link token.link 2>&1 | head -c 300
ls -la"
  attempt hardlink-out "$PRE
ln ../../secret.key hard.key 2>&1 && echo 'ESCAPED: hard link to ../../secret.key'
ln $D/secret.key hard2.key 2>&1 && echo 'ESCAPED: hard link to secret.key'
ln $D/owner.token hard.token 2>&1 && echo 'ESCAPED: hard link to owner.token'
ln $D/db/qinglong.db hard.db 2>&1 && echo 'ESCAPED: hard link to the database'
true"
  attempt proc-1-is-own-init "$PRE
echo \"init: \$(tr '\\0' ' ' </proc/1/cmdline 2>&1)\"
try_read /proc/1/environ
echo \"processes: \$(ls -d /proc/[0-9]* | wc -l)\"
echo \"host pid visible: \$(ls -d /proc/$DP 2>/dev/null | wc -l)\""
  attempt identity "$PRE
echo \"uid=\$(id -u) gid=\$(id -g) groups=\$(id -G)\"
cat /proc/self/uid_map"
  attempt capabilities "$PRE
grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status"
  attempt private-tmp "$PRE
echo $M >/tmp/qlescape-tmp-$M && echo 'wrote private tmp'
ls /tmp | head -20
ls /tmp | grep -q ql-escape-hostmark && echo 'ESCAPED: sees the host /tmp'
true"
  attempt leftover-process "$PRE
setsid nohup sleep 2999.$LEFT_MARK >/dev/null 2>&1 &
( setsid sh -c 'sleep 2998.$LEFT_MARK & exit 0' & ) >/dev/null 2>&1
sleep 0.5
echo started"
  attempt memory-bomb "$PRE
python3 -c 'x = b\"x\" * (1536 << 20); print(\"ESCAPED: allocated\", len(x))'"
  attempt fork-bomb "$PRE
python3 -c '
import os, time
n = 0
for i in range(300):
    if os.fork() == 0:
        time.sleep(30)
        os._exit(0)
    n += 1
print(\"ESCAPED: forked\", n)
'"
  attempt open-files "$PRE
echo \"ulimit -n: \$(ulimit -n)\"
python3 -c '
fs = []
try:
    for i in range(200):
        fs.append(open(\"/dev/null\"))
    print(\"ESCAPED: opened\", len(fs))
except OSError as e:
    print(\"opened\", len(fs), \"then:\", e)
'
(ulimit -n 100000 2>/dev/null && echo 'ESCAPED: raised the open files limit') || true"
  attempt cpu-burn "$PRE
while :; do :; done"
  # A task without network: only a loopback interface of its own, the suite's HTTP server on the
  # host's loopback out of reach.
  attempt network-none "$PRE
echo \"interfaces: \$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\\n' ' ')\"
echo \"sys: \$(ls /sys/class/net | tr '\\n' ' ')\"
curl -s -m 3 http://127.0.0.1:$HTTP_PORT/hello.txt && echo 'ESCAPED: reached the host loopback'
python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), 2)' 2>/dev/null && echo 'ESCAPED: reached the internet'
true" --network none
  # A task that asks to run unconfined, on an installation that does not allow it.
  attempt unconfined-refused "$PRE
id -u; cat \"$D/owner.token\" && echo 'ESCAPED: unconfined'" --isolation none
  # Working directories the admin names (--workdir): into the data directory, another task's
  # directory, /etc and the init's view of /proc.
  wd_cmd() {  # NAME: the files it writes are named after the attempt
    local W=$M-$1
    printf '%s' "$PRE
pwd
ls -la 2>&1 | head -12
for f in owner.token secret.key qinglong.db secret-default.txt ../owner.token ../../owner.token ../secret.key ../../secret.key ../db/qinglong.db .$D/owner.token .$D/secret.key .$D/db/qinglong.db; do try_read \$f; done
ls ../*/secret-default.txt ../../work/*/secret-default.txt .$D/work/*/secret-default.txt 2>/dev/null | while read f; do try_read \$f; done
# Whatever else is readable from here goes to the log, where the leak check looks for secrets.
find . .. -xdev -maxdepth 4 -type f 2>/dev/null | head -300 | while read f; do head -c 400 \$f 2>/dev/null | sed 's/ESCAPED/escaped/g'; echo; done
echo x >qlescape-wd-$W 2>/dev/null && echo 'wrote into the working directory'
echo x >$DROP/qlescape-wd-$W 2>/dev/null && echo 'ESCAPED: wrote into $DROP on the host'
echo x >.$DROP/qlescape-wd2-$W 2>/dev/null && echo 'ESCAPED: wrote into .$DROP on the host'
ls ./tmp 2>/dev/null | grep -q ql-escape-hostmark && echo 'ESCAPED: sees the host /tmp'
true"
  }
  attempt workdir-data-dir "$(wd_cmd workdir-data-dir)" --workdir "$D"
  attempt workdir-db-dir "$(wd_cmd workdir-db-dir)" --workdir "$D/db"
  attempt workdir-log-dir "$(wd_cmd workdir-log-dir)" --workdir "$D/log"
  attempt workdir-run-dir "$(wd_cmd workdir-run-dir)" --workdir "$D/run"
  attempt workdir-other-task "$(wd_cmd workdir-other-task)" --workdir "$D/work/$OT"
  attempt workdir-etc "$(wd_cmd workdir-etc)" --workdir /etc
  attempt workdir-root "$(wd_cmd workdir-root)" --workdir /
  attempt workdir-proc-self-cwd "$(wd_cmd workdir-proc-self-cwd)" --workdir /proc/self/cwd
  attempt workdir-proc-1-root "$(wd_cmd workdir-proc-1-root)" --workdir /proc/1/root$D
  attempt workdir-link-data "$(wd_cmd workdir-link-data)" --workdir "$LINKS_DIR/link-data"
  attempt workdir-link-db "$(wd_cmd workdir-link-db)" --workdir "$LINKS_DIR/link-db"
  attempt workdir-link-log "$(wd_cmd workdir-link-log)" --workdir "$LINKS_DIR/link-log"
  attempt workdir-link-other-task "$(wd_cmd workdir-link-other-task)" --workdir "$LINKS_DIR/link-other"
  local fd
  for fd in 3 4 5 6 7 8 9; do
    attempt "workdir-proc-self-fd-$fd" "$(wd_cmd "workdir-proc-self-fd-$fd")" --workdir "/proc/self/fd/$fd"
  done
}

ESCAPE_NAMES_WORKDIR="workdir-data-dir workdir-db-dir workdir-log-dir workdir-run-dir workdir-other-task workdir-link-data workdir-link-db workdir-link-log workdir-link-other-task workdir-etc workdir-root workdir-proc-self-cwd workdir-proc-1-root workdir-proc-self-fd-3 workdir-proc-self-fd-4 workdir-proc-self-fd-5 workdir-proc-self-fd-6 workdir-proc-self-fd-7 workdir-proc-self-fd-8 workdir-proc-self-fd-9"

ordinary_attempts() {
  attempt ok-pipeline "seq 1 100 | awk '{s+=\$1} END {print s}'"
  attempt ok-python "python3 -c 'print(6*7)'"
  attempt ok-git "set -e
git init -q .
git config user.email escape@example.invalid
git config user.name escape
echo one >file.txt
git add file.txt
git commit -q -m first
echo \"commits=\$(git rev-list --count HEAD)\""
  attempt ok-files-across-runs "if [ -f state.txt ]; then echo \"second run read: \$(cat state.txt)\"; else echo from-the-first-run >state.txt; echo 'first run wrote state.txt'; fi"
  attempt ok-curl-loopback "curl -fsS http://127.0.0.1:$HTTP_PORT/hello.txt"
  attempt ok-tmp "set -e
f=\$(mktemp)
echo tmp-works >\$f
cat \$f
echo x >/var/tmp/x && echo var-tmp-works
df -h /tmp | tail -1"
  attempt ok-home-and-env "echo \"home=\$HOME pwd=\$(pwd) run=\$QL_RUN_ID\"; test -w \"\$HOME\" && echo home-writable"
}

# ---- One ql-local round ---------------------------------------------------------------------

DAEMON_PID=""
LEFT_MARK=""
LINKS_DIR=""

ensure_escape_user() {  # creates $ESCAPE_USER when missing (removed again at exit)
  if ! id "$ESCAPE_USER" >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin "$ESCAPE_USER" ||
      { record FAIL setup "cannot create the user $ESCAPE_USER"; return 1; }
    USER_CREATED=1
  fi
}

local_round() {  # ROUND-NAME: root or user
  ROUND=$1
  # The data directory where a command could look for it; the suite's own files out of reach.
  local base=$T/private/$ROUND
  local D=$T/$ROUND/data
  RD=$base/results
  mkdir -p "$D" "$RD"
  SECRETS_FILE=$base/secrets
  : >"$SECRETS_FILE"
  TASK=() RUN=() ADD_ERROR=() ORDER=()

  local port env_secret
  port=$(free_port)
  URL="http://127.0.0.1:$port"
  env_secret="daemon-env-secret-$(rand_hex 10)"
  local serve=("$QL_LOCAL" serve --data "$D" --listen "127.0.0.1:$port" --shutdown-wait 2
               --command-memory-mib 256 --command-pids 64 --command-open-files 64
               --command-cpu-seconds 3)
  local want_level
  if [ "$ROUND" = root ]; then
    want_level=full
    env QL_ESCAPE_DAEMON_SECRET="$env_secret" "${serve[@]}" >"$base/daemon.log" 2>&1 &
  else
    want_level=user-namespace
    ensure_escape_user || return
    chown -R "$ESCAPE_USER:" "$D"
    chmod 0700 "$D"
    env QL_ESCAPE_DAEMON_SECRET="$env_secret" HOME=/ \
      setpriv --reuid="$ESCAPE_USER" --regid="$ESCAPE_USER" --init-groups \
      "${serve[@]}" >"$base/daemon.log" 2>&1 &
  fi
  DAEMON_PID=$!
  PIDS+=("$DAEMON_PID")
  if ! wait_http_ok "$URL/readyz" 30; then
    record FAIL setup "ql-local did not become ready: $(tail -5 "$base/daemon.log" | tr '\n' ' ')"
    return
  fi

  # The level it names, at start and on /readyz and /api/v1/status.
  local banner level
  banner=$(grep -m1 '^command isolation:' "$base/daemon.log")
  level=$(curl -s "$URL/readyz" | jq -r '.command_isolation.level // empty')
  OWNER_TOKEN=$(cat "$D/owner.token")
  local status_level
  status_level=$(curl -s -H "Authorization: Bearer $OWNER_TOKEN" "$URL/api/v1/status" |
    jq -r '.command_isolation.level // empty')
  if [ "$level" = "$want_level" ] && [ "$status_level" = "$want_level" ] &&
     printf '%s' "$banner" | grep -q "^command isolation: $want_level"; then
    record PASS "isolation level $want_level" "$banner"
  else
    record FAIL "isolation level $want_level" "readyz '$level', status '$status_level', banner '$banner'"
    record SKIP "escape attempts" "not run: below $want_level every command runs as the daemon's user"
    return
  fi

  # Secrets no command may print.
  add_secret_text "the owner token" "$OWNER_TOKEN"
  add_secret_text "the owner token's digest" "$(printf '%s' "$OWNER_TOKEN" | sha256sum | cut -d' ' -f1)"
  add_secret_file "secret.key" "$D/secret.key"
  add_secret_text "secret.key in hex" "$(od -An -tx1 "$D/secret.key" | tr -d ' \n')"
  add_secret_text "secret.key in base64" "$(base64 -w0 "$D/secret.key")"
  add_secret_text "the daemon's environment" "$env_secret"
  add_secret_text "root's /etc/shadow entry" "$(head -1 /etc/shadow)"
  add_secret_text "the database header (SQLite format 3)" "SQLite format 3"
  local default_mark="default-project-secret-$(rand_hex 10)"
  local default_log_mark="default-project-log-$(rand_hex 10)"
  local default_env_mark="default-project-env-$(rand_hex 10)"
  add_secret_text "the default project's file" "$default_mark"
  add_secret_text "the default project's log" "$default_log_mark"
  add_secret_text "the default project's task environment" "$default_env_mark"

  # The project p2, its admin (nothing else) and the admin's token.
  local out
  if ! out=$(ql_owner project add p2 2>&1) ||
     ! out=$(ql_owner principal add escaper 2>&1) ||
     ! out=$(ql_owner --project p2 role grant escaper admin 2>&1) ||
     ! ADMIN_TOKEN=$(ql_owner token create --principal escaper 2>&1 | tail -1); then
    record FAIL setup "governance: $out"
    return
  fi
  local who
  who=$(ql_admin --json whoami 2>&1)
  if [ "$(printf '%s' "$who" | jq -r '[.projects[] | "\(.slug)=\(.role)"] | join(",")')" != "p2=admin" ] ||
     [ "$(printf '%s' "$who" | jq -r '.installation_role // "none"')" != none ]; then
    record FAIL setup "the admin's roles are not exactly admin of p2: $who"
    return
  fi

  # A task of the default project (the owner's) leaves a file in its working directory.
  local other_task other_run
  other_task=$(ql_owner task add default-writer --timeout 30s --env "DEFAULT_SECRET=$default_env_mark" --shell \
    "echo $default_mark >secret-default.txt; chmod 0644 secret-default.txt; echo $default_log_mark; echo BEGIN") ||
    { record FAIL setup "default task: $other_task"; return; }
  other_run=$(ql_owner run start "$other_task")
  await_run ql_owner "$other_run"
  if [ ! -s "$D/work/$other_task/secret-default.txt" ]; then
    record FAIL setup "the default project's task left no file in $D/work/$other_task"
    return
  fi

  # A command of p2 leaves links in its own directory; later tasks name them as --workdir (a
  # path the server cannot tell points into the data directory).
  local links_task links_run
  links_task=$(ql_admin task add plant-links --timeout 30s --shell \
    "ln -s $D link-data; ln -s $D/db link-db; ln -s $D/log link-log; ln -s $D/work/$other_task link-other; ls -la") ||
    { record FAIL setup "plant-links: $links_task"; return; }
  links_run=$(ql_admin run start "$links_task")
  await_run ql_admin "$links_run"
  if [ ! -L "$D/work/$links_task/link-data" ]; then
    record FAIL setup "plant-links left no links in $D/work/$links_task"
    return
  fi
  LINKS_DIR=$D/work/$links_task

  # Everything at once (the daemon runs four commands at a time).
  LEFT_MARK=$(od -An -tu4 -N4 /dev/urandom | tr -d ' ')
  local M
  M=$(rand_hex 6)
  local shadow_before
  shadow_before=$(sha256sum /etc/shadow)
  escape_attempts "$D" "$DAEMON_PID" "$M" "$other_task"
  ordinary_attempts
  wait_runs "${ORDER[@]}"

  # A second run of the same task finds what the first one left.
  rerun ok-files-across-runs
  local first_log=$RD/ok-files-across-runs.first.log
  cp "$RD/ok-files-across-runs.log" "$first_log" 2>/dev/null
  wait_runs ok-files-across-runs

  # ---- Verdicts: escapes
  judge owner-token-relative
  judge owner-token-absolute
  judge secret-key
  judge database-read
  judge database-write "db_untouched '$D/db/qinglong.db' '$M'"
  judge plant-in-data-dir \
    "host_absent '$D/planted-$M' '$D/planted2-$M' '$D/work/planted-$M' '$D/work/planted3-$M' '$D/log/planted-$M'"
  judge list-work-dirs
  judge other-project-files
  judge daemon-environ
  judge daemon-proc-root
  judge kill-daemon-0 daemon_alive
  judge kill-daemon-term daemon_alive
  judge kill-everything daemon_alive "log_has kill-everything 'survived'"
  judge ptrace-daemon daemon_alive
  judge setuid-binaries
  judge unshare-user-read
  judge unshare-umount-cover
  judge unshare-umount-proc
  judge unshare-remount-rw "host_absent /etc/qlescape-rw-$M '$D/planted-rw-$M'"
  judge chroot-and-mount
  judge write-system-dirs \
    "host_absent /etc/qlescape-$M /usr/qlescape-$M /usr/bin/qlescape-$M /root/qlescape-$M /qlescape-$M /var/qlescape-$M '$DROP/qlescape-$M'"
  judge read-shadow "same_text \"\$(sha256sum /etc/shadow)\" '$shadow_before' /etc/shadow"
  judge write-sys-and-proc-sys
  judge inherited-descriptors
  judge hidden-logs-and-records
  judge symlink-out "clean_file '$base/daemon.log'"
  judge hardlink-out \
    "host_absent '$D/work/${TASK[hardlink-out]:-none}/hard.key' '$D/work/${TASK[hardlink-out]:-none}/hard2.key' '$D/work/${TASK[hardlink-out]:-none}/hard.token' '$D/work/${TASK[hardlink-out]:-none}/hard.db'"
  judge proc-1-is-own-init \
    "log_has proc-1-is-own-init '^processes: [1-9]\$'" \
    "log_has proc-1-is-own-init '^host pid visible: 0\$'" \
    "not_host_init proc-1-is-own-init"
  if [ "$ROUND" = root ]; then
    judge identity \
      "log_has identity '^uid=19[0-9]{8} gid=19[0-9]{8} groups=19[0-9]{8}\$'" \
      "uid_in_range identity 1900000000 1900065535"
  else
    local escape_uid
    escape_uid=$(id -u "$ESCAPE_USER")
    judge identity \
      "log_lacks identity '^uid=0 '" \
      "log_has identity '^ *[0-9]+ +$escape_uid +1\$'"
  fi
  judge capabilities \
    "log_has capabilities '^CapEff:[[:space:]]+0+\$'" \
    "log_has capabilities '^CapPrm:[[:space:]]+0+\$'" \
    "log_has capabilities '^CapBnd:[[:space:]]+0+\$'" \
    "log_has capabilities '^CapAmb:[[:space:]]+0+\$'" \
    "log_has capabilities '^NoNewPrivs:[[:space:]]+1\$'"
  judge private-tmp "log_has private-tmp 'wrote private tmp'" "host_absent /tmp/qlescape-tmp-$M"
  judge leftover-process "no_host_process 'sleep 2999.$LEFT_MARK'" "no_host_process 'sleep 2998.$LEFT_MARK'"

  # Limits.
  if [ "$ROUND" = root ]; then
    judge memory-bomb "status_is memory-bomb failed" "error_is memory-bomb memory_limit_exceeded" daemon_alive
  else
    # Without a cgroup the memory limit is RLIMIT_AS: the allocation fails inside the command.
    judge memory-bomb "status_is memory-bomb failed" \
      "error_is memory-bomb memory_limit_exceeded || log_has memory-bomb 'MemoryError'" daemon_alive
  fi
  if [ "$ROUND" = user ] && run_confinement fork-bomb | grep -q 'pids 64 (rlimit'; then
    # No cgroup at user-namespace level: RLIMIT_NPROC of the attempt's user namespace refuses
    # the forks; nothing tells which limit failed the command, so its code is its exit status.
    judge fork-bomb "status_is fork-bomb failed" "log_has fork-bomb 'Resource temporarily unavailable|BlockingIOError'" daemon_alive
  else
    judge fork-bomb "status_is fork-bomb failed" "error_is fork-bomb pids_limit_exceeded" daemon_alive
  fi
  judge open-files "log_has open-files '^ulimit -n: 64\$'" "log_has open-files 'Too many open files'"
  judge cpu-burn "status_is cpu-burn failed" "error_is cpu-burn cpu_limit_exceeded"

  # --workdir into the daemon's files.
  local name
  for name in $ESCAPE_NAMES_WORKDIR; do
    local W=$M-$name
    judge "$name" nostart \
      "host_absent '$DROP/qlescape-wd-$W' '$DROP/qlescape-wd2-$W' '$D/qlescape-wd-$W' '$D/db/qlescape-wd-$W' '$D/log/qlescape-wd-$W' '$D/run/qlescape-wd-$W' '$D/work/$other_task/qlescape-wd-$W' /etc/qlescape-wd-$W /qlescape-wd-$W"
  done

  judge network-none "log_has network-none '^interfaces: lo \$'" "log_has network-none '^sys: lo \$'"
  judge unconfined-refused nostart "status_is unconfined-refused failed" \
    "error_is unconfined-refused confinement_unavailable"

  # The record of an attempt says how it was confined.
  local conf
  conf=$(run_confinement identity)
  if printf '%s' "$conf" | grep -q 'namespaces mnt+pid+ipc' && printf '%s' "$conf" | grep -q 'no_new_privs' &&
     ql_admin run show "${RUN[identity]}" 2>/dev/null | grep -q 'confinement'; then
    record PASS "confinement recorded" "$conf"
  else
    record FAIL "confinement recorded" "run show has '$conf'"
  fi

  # ---- Verdicts: ordinary commands
  judge_ok ok-pipeline "log_has ok-pipeline '^5050\$'"
  judge_ok ok-python "log_has ok-python '^42\$'"
  judge_ok ok-git "log_has ok-git '^commits=1\$'"
  judge_ok ok-files-across-runs \
    "grep -q 'first run wrote state.txt' '$first_log' || { WHY='first run: \$(cat $first_log)'; false; }" \
    "log_has ok-files-across-runs '^second run read: from-the-first-run\$'"
  judge_ok ok-curl-loopback "log_has ok-curl-loopback '^$HTTP_MARK\$'"
  judge_ok ok-tmp "log_has ok-tmp '^tmp-works\$'" "log_has ok-tmp '^var-tmp-works\$'"
  judge_ok ok-home-and-env "log_has ok-home-and-env '^home=/.* pwd=/.* run=.+'" "log_has ok-home-and-env '^home-writable\$'"

  # The daemon survived all of it and never printed a secret.
  WHY=""
  if daemon_alive && leaks_in "$base/daemon.log" >/dev/null; then
    record PASS "daemon alive, its output clean"
  else
    record FAIL "daemon alive, its output clean" "${WHY:-its output holds a secret}"
  fi

  kill -TERM "$DAEMON_PID" 2>/dev/null
  for i in $(seq 1 100); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.1; done
  wait "$DAEMON_PID" 2>/dev/null
}

# ---- The worker round -----------------------------------------------------------------------

worker_round() {  # AS: root (round "worker") or user (round "worker-user": ql-worker as
                  # $ESCAPE_USER, commands confined in a user namespace)
  local as=$1
  ROUND=worker
  [ "$as" = user ] && ROUND=worker-user
  local base=$T/private/$ROUND
  local WT=$T/$ROUND   # the worker's token, key and work directory
  RD=$base/results
  mkdir -p "$RD" "$WT"
  SECRETS_FILE=$base/secrets
  : >"$SECRETS_FILE"
  TASK=() RUN=() ADD_ERROR=() ORDER=()
  local cluster=$BIN_DIR/ql-cluster worker=$BIN_DIR/ql-worker
  if [ ! -x "$cluster" ] || [ ! -x "$worker" ] || [ ! -x "$POSTGRES" ] || [ ! -f "$ROLES_SQL" ]; then
    record SKIP "worker round" "needs ql-cluster, ql-worker and throwaway_postgres ($POSTGRES)"
    return
  fi
  # A throwaway PostgreSQL: it lives while its standard input (fd 7) stays open.
  mkfifo "$base/pg.in"
  "$POSTGRES" "$ROLES_SQL" <"$base/pg.in" >"$base/pg.json" 2>"$base/pg.err" &
  PIDS+=($!)
  exec 7>"$base/pg.in"
  PG_FD_OPEN=1
  local i
  for i in $(seq 1 600); do [ -s "$base/pg.json" ] && break; sleep 0.1; done
  if [ ! -s "$base/pg.json" ]; then
    record FAIL setup "PostgreSQL did not start: $(tail -3 "$base/pg.err" | tr '\n' ' ')"
    return
  fi
  export QL3_POSTGRES_ALLOW_INSECURE=true
  local runtime admin workerdb migration
  runtime=$(jq -r .runtime "$base/pg.json")
  admin=$(jq -r .admin "$base/pg.json")
  workerdb=$(jq -r .worker "$base/pg.json")
  migration=$(jq -r .migration "$base/pg.json")
  local out
  if ! out=$("$cluster" migrate --database-url "$migration" 2>&1); then
    record FAIL setup "migrate: $out"; return
  fi
  OWNER_TOKEN=$("$cluster" token create owner --database-url "$admin" 2>&1 | tail -1)
  local worker_token
  worker_token=$("$cluster" worker-token create escape-worker --database-url "$admin" 2>&1 | tail -1)
  # The token file readable by anyone (only the confinement hides it), the key file 0600 (the
  # key provider insists), both in a directory anyone may enter.
  local token_file=$WT/worker.token key_file=$WT/secret.key wd=$WT/worker-data
  printf '%s\n' "$worker_token" >"$token_file"
  chmod 0644 "$token_file"
  (umask 077; head -c 32 /dev/urandom >"$key_file")
  add_secret_text "the worker token" "$worker_token"
  add_secret_file "the worker's key" "$key_file"
  add_secret_text "the worker's key in hex" "$(od -An -tx1 "$key_file" | tr -d ' \n')"
  add_secret_text "the worker's key in base64" "$(base64 -w0 "$key_file")"
  add_secret_text "the owner token" "$OWNER_TOKEN"

  local port wport
  port=$(free_port)
  wport=$(free_port)
  URL="http://127.0.0.1:$port"
  "$cluster" serve --database-url "$runtime" --admin-database-url "$admin" \
    --worker-database-url "$workerdb" --listen "127.0.0.1:$port" \
    --worker-listen "127.0.0.1:$wport" --secret-key-file "$key_file" --shutdown-wait 2 \
    >"$base/cluster.log" 2>&1 &
  CLUSTER_PID=$!
  PIDS+=("$CLUSTER_PID")
  if ! wait_http_ok "$URL/readyz" 60; then
    record FAIL setup "ql-cluster did not become ready: $(tail -5 "$base/cluster.log" | tr '\n' ' ')"
    return
  fi
  local worker_cmd=("$worker" --control "http://127.0.0.1:$wport" --token-file "$token_file"
                    --slots 4 --work-dir "$wd" --secret-key-file "$key_file")
  local want_level=full
  if [ "$as" = root ]; then
    "${worker_cmd[@]}" >"$base/worker.log" 2>&1 &
  else
    want_level=user-namespace
    ensure_escape_user || return
    chown -R "$ESCAPE_USER:" "$WT"
    HOME=/ setpriv --reuid="$ESCAPE_USER" --regid="$ESCAPE_USER" --init-groups \
      "${worker_cmd[@]}" >"$base/worker.log" 2>&1 &
  fi
  local worker_pid=$!
  PIDS+=("$worker_pid")
  for i in $(seq 1 100); do grep -q 'command isolation:' "$base/worker.log" && break; sleep 0.1; done
  local banner
  banner=$(grep -m1 -o 'command isolation:.*' "$base/worker.log")
  if printf '%s' "$banner" | grep -q "^command isolation: $want_level"; then
    record PASS "isolation level $want_level" "$banner"
  else
    record FAIL "isolation level $want_level" "worker says '$banner'"
    return
  fi

  # p2 and its admin, as in the local rounds.
  if ! out=$(ql_owner project add p2 2>&1) ||
     ! out=$(ql_owner principal add escaper 2>&1) ||
     ! out=$(ql_owner --project p2 role grant escaper admin 2>&1) ||
     ! ADMIN_TOKEN=$(ql_owner token create --principal escaper 2>&1 | tail -1); then
    record FAIL setup "governance: $out"
    return
  fi

  attempt worker-token-file "$PRE
try_read $token_file
ls -la $(dirname "$token_file") 2>&1 | head -5"
  attempt worker-key-file "$PRE
try_read $key_file
od -An -tx1 $key_file 2>&1"
  attempt worker-work-dir "$PRE
ls -la $wd $wd/run $wd/log 2>&1 | head -8
ls $wd/run 2>/dev/null | grep -q . && echo 'ESCAPED: sees attempt records'
try_read $wd/command-uids
try_read $wd/worker.lock
echo x >$wd/planted && echo 'ESCAPED: planted in the work directory'
true"
  attempt worker-kill "$PRE
kill -0 $worker_pid && echo 'ESCAPED: kill -0 reached the worker'
try_read /proc/$worker_pid/environ
true"
  local M
  M=$(rand_hex 6)
  local wcmd="$PRE
pwd
for f in worker.token secret.key command-uids ../worker.token ../secret.key ../../worker.token ../../secret.key .$token_file .$key_file; do try_read \$f; done
find . .. -xdev -maxdepth 4 -type f 2>/dev/null | head -300 | while read f; do head -c 400 \$f 2>/dev/null | sed 's/ESCAPED/escaped/g'; echo; done
echo x >$DROP/qlescape-worker-\$QL_RUN_ID 2>/dev/null && echo 'ESCAPED: wrote into $DROP on the host'
true"
  attempt worker-workdir-token-dir "$wcmd" --workdir "$WT"
  attempt worker-workdir-work-dir "$wcmd" --workdir "$wd"
  attempt worker-workdir-root "$wcmd" --workdir /
  attempt identity "$PRE
echo \"uid=\$(id -u) gid=\$(id -g)\"
cat /proc/self/uid_map"
  attempt capabilities "$PRE
grep -E '^(CapEff|CapBnd|NoNewPrivs):' /proc/self/status"
  attempt ok-pipeline "seq 1 100 | awk '{s+=\$1} END {print s}'"
  wait_runs "${ORDER[@]}"

  judge worker-token-file
  judge worker-key-file
  judge worker-work-dir "host_absent '$wd/planted'"
  judge worker-kill 'kill -0 '"$worker_pid"' 2>/dev/null || { WHY="the worker is gone"; false; }'
  local name
  for name in worker-workdir-token-dir worker-workdir-work-dir worker-workdir-root; do
    judge "$name" nostart "host_absent '$DROP/qlescape-worker-${RUN[$name]:-none}'"
  done
  if [ "$as" = root ]; then
    judge identity "log_has identity '^uid=19[0-9]{8} gid=19[0-9]{8}\$'"
  else
    # The project's uid inside, mapped onto the worker's own user outside: never root.
    local escape_uid
    escape_uid=$(id -u "$ESCAPE_USER")
    judge identity "log_lacks identity '^uid=0 '" "log_has identity '^ *[0-9]+ +$escape_uid +1\$'"
  fi
  judge capabilities "log_has capabilities '^CapEff:[[:space:]]+0+\$'" \
    "log_has capabilities '^CapBnd:[[:space:]]+0+\$'" "log_has capabilities '^NoNewPrivs:[[:space:]]+1\$'"
  judge_ok ok-pipeline "log_has ok-pipeline '^5050\$'"
  if leaks_in "$base/worker.log" >/dev/null && leaks_in "$base/cluster.log" >/dev/null; then
    record PASS "worker and cluster output clean"
  else
    record FAIL "worker and cluster output clean" "a secret is in worker.log or cluster.log"
  fi
  # The next worker round starts its own PostgreSQL and control plane.
  local pid
  for pid in "$worker_pid" "$CLUSTER_PID"; do
    kill -TERM "$pid" 2>/dev/null
    for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
  exec 7>&-
  PG_FD_OPEN=0
}

# ---- Main -----------------------------------------------------------------------------------

START=$SECONDS
case ",$ROUNDS," in *,root,*) local_round root ;; esac
case ",$ROUNDS," in *,user,*) local_round user ;; esac
case ",$ROUNDS," in *,worker,*) worker_round root ;; esac
case ",$ROUNDS," in *,worker-user,*) worker_round user ;; esac
# Any leftover of a failed leftover-process check is ended by pid.
for pid in "${LEFTOVER[@]}"; do kill -KILL "$pid" 2>/dev/null; done

echo "escape suite: $PASSES passed, $FAILURES failed, $SKIPS skipped in $((SECONDS - START)) s"
[ "$FAILURES" -eq 0 ]
