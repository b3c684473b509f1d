#!/bin/bash
# vmtest --deb's checker (bash, in the Debian root; vmtest-deb-check.service runs it after the
# unit under test). In: UNIT, HOST and PORT (where the unit's daemon serves, from its
# /etc/latency-daemon.toml) in its environment; out: `@@ deb KEY=VALUE` lines and the unit's journal
# as `@@ deb journal LINE` on the console, `@@ deb done`, then the machine powers off. systemd.rs
# parses and judges the lines; this script judges nothing.
exec > /dev/console 2>&1
mark() { echo "@@ deb $*"; }
up() { read -r u _ < /proc/uptime; echo "$u"; }
# The exposition over bash's /dev/tcp: minbase has no curl. A subshell, so that a refused
# connection fails the scrape, not the script.
scrape() {
  (
    exec 3<>"/dev/tcp/$HOST/$PORT" || exit 1
    printf 'GET /metrics HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' "$HOST" >&3
    cat <&3
  ) 2>/dev/null
}
# "SERIES TOTAL" of runqlat_delay_seconds_count in one scrape.
counts() { scrape | tr -d '\r' | awk '/^runqlat_delay_seconds_count[{ ]/ { n++; s += $NF } END { print n+0, s+0 }'; }

mark "checker_uptime=$(up)"
mark "uname=$(uname -r)"
started=$SECONDS
served=
# Until it serves, or it has failed three times (Restart=on-failure would go on forever).
while [ $((SECONDS - started)) -lt 150 ]; do
  if scrape | head -n 1 | grep -q ' 200'; then served=$(up); break; fi
  [ "$(systemctl show -p NRestarts --value "$UNIT")" -ge 3 ] 2>/dev/null && break
  sleep 1
done
mark "served_uptime=${served:-never}"
series=0
total=0
if [ -n "$served" ]; then
  # The first window may close before any delay is counted: wait for a nonzero total, a while.
  for _ in $(seq 30); do
    read -r series total < <(counts)
    [ "${total%%.*}" != 0 ] && [ -n "$total" ] && break
    sleep 2
  done
  mark "counted_uptime=$(up)"
fi
mark "metrics_series=${series:-0}"
mark "metrics_count=${total:-0}"

# One `systemctl show`, so that every field is of the same moment; the process is read at once.
state=$(systemctl show -p ActiveState -p SubState -p Result -p MainPID -p ExecMainStatus -p NRestarts \
  -p ExecMainStartTimestampMonotonic -p ActiveEnterTimestampMonotonic -p LimitMEMLOCK "$UNIT")
pid=$(echo "$state" | sed -n 's/^MainPID=//p')
# Only a serving process is the daemon for sure: one restarting may not have exec'd it yet.
if [ -n "$served" ] && [ -n "$pid" ] && [ "$pid" != 0 ]; then
  exe=$(readlink "/proc/$pid/exe")
  sha=$(sha256sum < "/proc/$pid/exe" | cut -d' ' -f1)
  status=$(grep -E '^(Uid|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' "/proc/$pid/status")
fi
echo "$state" | while read -r line; do mark "$line"; done
if [ -n "$exe" ]; then
  mark "exe=$exe"
  mark "sha256=$sha"
  mark "version=$("$exe" --version 2>&1 | head -n 1)"
  echo "$status" | while IFS=: read -r key value; do mark "$key=$(echo $value)"; done
fi
mark "failed_units=$(systemctl list-units --failed --plain --no-legend | awk '{ printf "%s ", $1 }')"
journalctl -u "$UNIT" --no-pager -o cat | tail -n 20 | sed 's/^/@@ deb journal /'
mark done
systemctl poweroff --no-block
