#!/bin/sh
# The vmtest guest's /init (busybox sh). In: the initramfs (latency-daemon, xtask, busybox) and
# `vmt.secs=S vmt.port=TTY [vmt.smoke=1] [vmt.stall=1] [vmt.throttle=1 [vmt.beside=1]]` on the kernel command
# line; out: `@@ PHASE uptime=…` markers on the console and every result as `@@begin NAME` …
# `@@end NAME RC` sections on the data port (x86_64: ttyS1, arm64: ttyAMA1), then power off. A
# smoke boot writes `meta` only.
# Order matters under TCG: `check` alone, then every configuration attached at once, and only
# then the load (spinners would starve the verifier), stopped before anything is printed.
/bin/busybox mkdir -p /proc /sys /dev /tmp
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sysfs /sys
/bin/busybox mount -t devtmpfs devtmpfs /dev 2>/dev/null
/bin/busybox --install -s /bin
export PATH=/bin
mark() { read -r up _ < /proc/uptime; echo "@@ $1 uptime=$up"; }
mark init
mount -t tmpfs tmpfs /tmp
mount -t tracefs tracefs /sys/kernel/tracing
mount -t debugfs debugfs /sys/kernel/debug
mount -t bpf bpf /sys/fs/bpf
mount -t cgroup2 cgroup2 /sys/fs/cgroup
ip link set lo up
# run_delay is kept only with delay accounting on (5.14+ has the switch; 5.10 keeps it anyway).
[ -e /proc/sys/kernel/task_delayacct ] && echo 1 > /proc/sys/kernel/task_delayacct
SECS=3
PORT=ttyS1
SMOKE=0
STALL=0
THROTTLE=0
BESIDE=0
for word in $(cat /proc/cmdline); do
  case $word in
    vmt.secs=*) SECS=${word#vmt.secs=} ;;
    vmt.port=*) PORT=${word#vmt.port=} ;;
    vmt.smoke=*) SMOKE=${word#vmt.smoke=} ;;
    vmt.stall=*) STALL=${word#vmt.stall=} ;;
    vmt.throttle=*) THROTTLE=${word#vmt.throttle=} ;;
    vmt.beside=*) BESIDE=${word#vmt.beside=} ;;
  esac
done
CPUS=$(nproc)
exec 3> /dev/$PORT
# NAME FILE [RC]: one section; gzipped in base64 where busybox has both (sections.rs).
GZ=0
command -v gzip > /dev/null && command -v base64 > /dev/null && GZ=1
put() {
  if [ $GZ = 1 ]; then
    echo "@@begin $1 gzip" >&3
    [ -s "$2" ] && gzip -c "$2" | base64 >&3
  else
    echo "@@begin $1" >&3
    cat "$2" >&3 2>/dev/null
  fi
  echo "@@end $1 $3" >&3
}
now() { read -r up _ < /proc/uptime; echo "$up"; }
# Our programs in the kernel's symbol table (JIT'ed BPF programs are listed there by name).
progs() { grep -c ' bpf_prog_[0-9a-f]*_sched_' /proc/kallsyms; }

{
  echo "release $(uname -r)"
  echo "cpus $CPUS"
  echo "secs $SECS"
  echo "delayacct $(cat /proc/sys/kernel/task_delayacct 2>/dev/null || echo absent)"
  echo "jit_kallsyms $(cat /proc/sys/net/core/bpf_jit_kallsyms 2>/dev/null || echo absent)"
  echo "machine $(uname -m)"
  echo "btf $(wc -c < /sys/kernel/btf/vmlinux 2>/dev/null || echo absent)"
  echo "binaries $(cd /bin && ls latency-daemon xtask 2>/dev/null | tr '\n' ' ')"
} > /tmp/meta

if [ "$SMOKE" = 1 ]; then
  put meta /tmp/meta
  echo "@@done" >&3
  mark done
  exec 3>&-
  poweroff -f
fi

mark check
latency-daemon check > /tmp/check.out 2>&1
echo $? > /tmp/check.rc
mark checked

# NAME ARGS…: one configuration in the background; its log says `attached` once it is.
start() {
  name=$1; shift
  now > /tmp/$name.t0
  latency-daemon "$@" > /tmp/$name.out 2> /tmp/$name.err &
  echo $! > /tmp/$name.pid
}
CONFIGS="record record-rq run run-per-task run-alerting run-core"
RUN="run --interval 500ms --window 1s --listen"
mark attach
start record record --duration 10m --json
start record-rq record --duration 10m --json --clock run-queue
start run $RUN 127.0.0.1:9101
start run-per-task $RUN 127.0.0.1:9102 --per-task --irq-tracepoints
start run-alerting $RUN 127.0.0.1:9103 --alert-max-delay 5ms --throttle-hooks=false
start run-core $RUN 127.0.0.1:9104 --per-cgroup=false
# Each one's attach time to the tenth of a second: all are looked at every round.
i=0
while [ $i -lt 1500 ]; do
  pending=0
  for name in $CONFIGS; do
    [ -e /tmp/$name.t1 ] && continue
    if grep -q attached /tmp/$name.err; then
      now > /tmp/$name.t1
    elif kill -0 "$(cat /tmp/$name.pid)" 2>/dev/null; then
      pending=1
    fi
  done
  [ $pending = 0 ] && break
  i=$((i + 1))
  sleep 0.1
done
progs > /tmp/progs.attached
mark attached

# The load: 2×CPUs spinners and CPUs 1 ms sleepers, each crew in a cgroup of its own, started
# together by a line on a FIFO and parked when done until the FIFO closes.
mkdir /sys/fs/cgroup/vmt-sleepers /sys/fs/cgroup/vmt-spinners
mkfifo /tmp/io.go /tmp/spin.go
WL="--secs $SECS --json --wait-for-go"
sh -c "echo \$\$ > /sys/fs/cgroup/vmt-sleepers/cgroup.procs; exec xtask workload io --threads $CPUS $WL" \
  < /tmp/io.go > /tmp/io.json 2> /tmp/io.err &
IO=$!
sh -c "echo \$\$ > /sys/fs/cgroup/vmt-spinners/cgroup.procs; exec xtask workload compete --threads $((2 * CPUS)) $WL" \
  < /tmp/spin.go > /tmp/spin.json 2> /tmp/spin.err &
SPIN=$!
exec 4> /tmp/io.go 5> /tmp/spin.go
mark load
echo go >&4
echo go >&5
i=0
until grep -q '"finished"' /tmp/io.json && grep -q '"finished"' /tmp/spin.json; do
  i=$((i + 1)); [ $i -gt 600 ] && break
  # A crew that is gone (no load binary for this architecture) never finishes.
  { kill -0 $IO && kill -0 $SPIN; } 2>/dev/null || break
  sleep 0.1
done
mark loaded
# Two windows, so the services' last closed window holds the whole load; then scrape. Meanwhile,
# on CPU 0 with the crews parked, the BPF programs' symbols out of /proc/kallsyms for the throttle
# scene's account (a read of seconds under emulation).
[ "$THROTTLE" = 1 ] && { taskset 1 grep ' bpf_prog_' /proc/kallsyms > /tmp/bpf.syms & SYMS=$!; }
sleep 2.2
[ -n "$SYMS" ] && wait $SYMS
port=9101
for name in run run-per-task run-alerting run-core; do
  wget -q -O /tmp/$name.prom http://127.0.0.1:$port/metrics
  echo $? > /tmp/$name.scrape
  port=$((port + 1))
done
# The stall (vmt.stall=1): a 3 s SCHED_FIFO spinner on CPU 1 and a victim woken there, watched
# through `run`'s /api/v1/waits and /metrics; the crews are parked, so nothing of theirs waits.
if [ "$STALL" = 1 ]; then
  mark stall
  # The stall's own alerting service, started for it: it alerts on waits over 100 ms in the stall's
  # cgroup only and keeps captures (every one its alerts take, and one asked for through the
  # stall), so nothing else it sees takes one first and the scenes after it run without it. No
  # interval between captures: another alert of the cgroup (its harness thread preempted on CPU 0,
  # say) may fire first, and its capture must not hold back the stall's.
  # Its threshold, 100 ms, is far above the harness's own waits in the cgroup (up to 14 ms seen:
  # at 5 ms one fired the cgroup's wakeup alert first, and the stall only updated it).
  printf '[alert_cgroup_max_delay]\n"/vmt-stall" = "100ms"\n' > /tmp/stall.toml
  start run-stall $RUN 127.0.0.1:9105 --config /tmp/stall.toml --capture-dir /tmp/captures --capture-events 1024 \
    --capture-demand 4s --capture-interval 0s --capture-cpu-interval 0s
  i=0
  until grep -q attached /tmp/run-stall.err; do
    i=$((i + 1)); [ $i -gt 600 ] && break
    kill -0 "$(cat /tmp/run-stall.pid)" 2>/dev/null || break
    sleep 0.1
  done
  # Every CPU through the stall, asked for as a user would (4 s: the spin's 3 s and the victim's
  # run after it). The stall in its cgroup; both services pinned away from the stalled CPU.
  latency-daemon capture --pid "$(cat /tmp/run-stall.pid)" 2> /tmp/stall.capture.err
  mkdir /sys/fs/cgroup/vmt-stall
  sh -c "echo \$\$ > /sys/fs/cgroup/vmt-stall/cgroup.procs; exec xtask vmtest --guest-stall 127.0.0.1:9101 \
    --guest-stall-pid $(cat /tmp/run.pid) --guest-stall-pid $(cat /tmp/run-stall.pid)" > /tmp/stall.json 2> /tmp/stall.err
  echo $? > /tmp/stall.rc
  rmdir /sys/fs/cgroup/vmt-stall
  # The alert's capture (named by the CPU and the victim's tid) once rewritten with the wait's
  # end, and the one on demand.
  VICTIM=$(sed -n 's/.*"victim_tid":\([0-9]*\).*/\1/p' /tmp/stall.json)
  i=0
  until grep -q "capture rewritten with its later readings: /api/v1/captures/capture-[0-9]*-cpu[0-9]*-tid$VICTIM\.pftrace" \
    /tmp/run-stall.err \
    && grep -q "capture on demand written" /tmp/run-stall.err; do
    i=$((i + 1)); [ $i -gt 100 ] && break
    sleep 0.1
  done
  kill -TERM "$(cat /tmp/run-stall.pid)"
  wait "$(cat /tmp/run-stall.pid)"
  echo $? > /tmp/run-stall.rc
  # The traces as they are where `put` gzips (binary-safe), else in base64.
  keep() {
    [ -e "$1" ] || return
    if [ $GZ = 1 ]; then cp "$1" "$2"; else base64 "$1" > "$2"; fi
  }
  for f in /tmp/captures/*-demand.pftrace; do keep "$f" /tmp/stall.demand; done
  [ -n "$VICTIM" ] && for f in /tmp/captures/capture-*-cpu*-tid$VICTIM.pftrace; do keep "$f" /tmp/stall.capture; done
  mark stalled
fi
# The loop's threads: `TID RUN_DELAY_NS` each (schedstat's second field), and their states, once each.
waited() {
  for t in /proc/$LOOP/task/*; do read -r _ rd _ < $t/schedstat && echo "${t##*/} $rd"; done
}
states() {
  for t in /proc/$LOOP/task/*; do s=$(cat $t/stat) && s=${s##*) } && echo "${s%% *}"; done | sort -u | tr -d '\n'
}
# The throttle scenes (vmt.throttle=1, throttle.rs's SCENES): `scene NAME LIMITED TASK SECS
# [beside]` runs a busy loop pinned to CPU 1 for SECS in cgroup TASK, LIMITED (TASK itself, or its
# parent, as a pod's limit is) allowed 10 ms per 100 ms (CPU_MAX); with `beside`, an unlimited busy
# neighbour on CPU 1 meanwhile. Written down: LIMITED's cpu.max and cpu.stat before and after,
# TASK's cpu.stat.local (6.8+), the loop's own account and `run`'s /metrics two drains after it (the
# cgroups are new: nothing of them before). The process starts outside the cgroup and moves in once
# ready: loading it under the limit would have its threads wait through the same throttles side by
# side. It moves out once every thread is asleep after the last report, before its release: its
# exit is not the scene's. At both moves, each thread's run_delay (`waited`): what each waited in
# the cgroup. With the kernel's BPF run-time accounting on during the first scene, `run`'s programs
# by name (from their tags in kallsyms): runs and ns in them during it.
scene() {
  name=$1; L=/sys/fs/cgroup$2; T=/sys/fs/cgroup$3; secs=$4; beside=$5
  mark "$name"
  mkfifo /tmp/$name.go
  {
    grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control || echo +cpu > /sys/fs/cgroup/cgroup.subtree_control
    mkdir $L && echo "10000 100000" > $L/cpu.max
    if [ "$T" != "$L" ]; then echo +cpu > $L/cgroup.subtree_control && mkdir $T; fi
    cat $L/cpu.max > /tmp/$name.max
    cat $L/cpu.stat > /tmp/$name.stat0
  } 2> /tmp/$name.err
  if [ "$beside" = beside ]; then
    taskset 2 sh -c 'while :; do :; done' &
    NEIGHBOUR=$!
  fi
  taskset 2 xtask workload cpu --threads 1 --secs "$secs" --json --wait-for-go \
    < /tmp/$name.go > /tmp/$name.json 2>> /tmp/$name.err &
  LOOP=$!
  exec 6> /tmp/$name.go
  i=0
  until grep -q '"ready"' /tmp/$name.json || [ $i -gt 100 ]; do i=$((i + 1)); sleep 0.1; done
  waited > /tmp/$name.tasks0
  echo $LOOP > $T/cgroup.procs 2>> /tmp/$name.err
  echo go >&6
  i=0
  until grep -q '"finished"' /tmp/$name.json || [ $i -gt 100 ]; do i=$((i + 1)); sleep 0.1; done
  i=0
  until [ "$(states)" = S ] || [ $i -gt 50 ]; do i=$((i + 1)); sleep 0.1; done
  waited > /tmp/$name.tasks1
  echo $LOOP > /sys/fs/cgroup/cgroup.procs 2>> /tmp/$name.err
  exec 6>&-
  wait $LOOP
  echo $? > /tmp/$name.rc
  [ -n "$NEIGHBOUR" ] && kill $NEIGHBOUR && wait $NEIGHBOUR 2>/dev/null
  NEIGHBOUR=
  sleep 1.2
  cat $L/cpu.stat > /tmp/$name.stat1
  cat $T/cpu.stat.local > /tmp/$name.local 2>/dev/null
  wget -q -O /tmp/$name.prom http://127.0.0.1:9101/metrics 2>> /tmp/$name.err
  wget -q -O /tmp/$name.blind http://127.0.0.1:9103/metrics 2>> /tmp/$name.err
  mark "$name-done"
}
if [ "$THROTTLE" = 1 ]; then
  echo 1 > /proc/sys/kernel/bpf_stats_enabled 2>/dev/null
  scene throttle /vmt-throttled /vmt-throttled 2
  # A program's fd (not its link's, which names the program too) counts its runs; its name is
  # its tag's symbol in /tmp/bpf.syms (read above).
  for info in /proc/"$(cat /tmp/run.pid)"/fdinfo/*; do
    grep -q '^run_cnt:' "$info" 2>/dev/null || continue
    tag=$(awk '/^prog_tag:/ { print $2 }' "$info")
    name=$(grep -m 1 " bpf_prog_${tag}_" /tmp/bpf.syms | awk '{ sub(/^bpf_prog_[0-9a-f]*_/, "", $3); print $3 }')
    echo "${name:-?} $(awk '/^run_time_ns:/ { t = $2 } /^run_cnt:/ { c = $2 } END { print t + 0, c + 0 }' "$info")"
  done > /tmp/throttle.bpf
  echo 0 > /proc/sys/kernel/bpf_stats_enabled 2>/dev/null
  scene pod /vmt-pod /vmt-pod/task 1
  # The neighbour scene in one guest per source of the throttled part (vmtest's BESIDE_KERNELS).
  [ "$BESIDE" = 1 ] && scene beside /vmt-beside /vmt-beside 1 beside
fi
# Stop while the crews are still parked: records report, services detach.
for name in $CONFIGS; do
  case $name in record*) kill -INT "$(cat /tmp/$name.pid)" ;; *) kill -TERM "$(cat /tmp/$name.pid)" ;; esac
done
for name in $CONFIGS; do
  wait "$(cat /tmp/$name.pid)"
  echo $? > /tmp/$name.rc
done
# The kernel's run_delay and voluntary switches of every crew thread now that nothing of theirs
# is in flight (each thread's own last reading comes before its report, which may still cost
# it a wait).
for task in /proc/$IO/task/* /proc/$SPIN/task/*; do
  blocked=$(grep ^voluntary_ctxt_switches $task/status)
  echo "${task##*/} $(cat $task/schedstat) ${blocked##*[!0-9]}"
done > /tmp/schedstat
exec 4>&- 5>&-
wait $IO $SPIN
mark stopped
# Programs are freed after an RCU grace period: give them a moment (each look is a read of
# /proc/kallsyms, a second or two under emulation: the last one is the answer).
i=0
left=$(progs)
while [ "$left" != 0 ] && [ $i -lt 30 ]; do i=$((i + 1)); sleep 0.1; left=$(progs); done
echo "$left" > /tmp/progs.after
ls -l /proc/[0-9]*/fd 2>/dev/null | grep -c 'bpf-prog' > /tmp/fds.after

# A kernel without BTF (Debian's before 5.10): hide this one's and ask again; both must say so
# in one line and exit 1.
mount -t tmpfs nobtf /sys/kernel/btf
latency-daemon check > /tmp/nobtf-check.out 2>&1
echo $? > /tmp/nobtf-check.rc
latency-daemon run --listen 127.0.0.1:9109 > /tmp/nobtf-run.out 2>&1
echo $? > /tmp/nobtf-run.rc
umount /sys/kernel/btf

put meta /tmp/meta
put check /tmp/check.out "$(cat /tmp/check.rc)"
for name in $CONFIGS; do
  put "$name.out" /tmp/$name.out "$(cat /tmp/$name.rc)"
  put "$name.err" /tmp/$name.err
  echo "$(cat /tmp/$name.t0) $(cat /tmp/$name.t1 2>/dev/null)" > /tmp/$name.times
  put "$name.times" /tmp/$name.times
done
for name in run run-per-task run-alerting run-core; do
  put "$name.prom" /tmp/$name.prom "$(cat /tmp/$name.scrape)"
done
if [ "$STALL" = 1 ]; then
  put stall /tmp/stall.json "$(cat /tmp/stall.rc)"
  put stall.err /tmp/stall.err
  put stall.capture /tmp/stall.capture
  put stall.demand /tmp/stall.demand
  put stall.demand.err /tmp/stall.capture.err
  put run-stall.err /tmp/run-stall.err "$(cat /tmp/run-stall.rc)"
fi
if [ "$THROTTLE" = 1 ]; then
  put throttle.bpf /tmp/throttle.bpf
  for name in throttle pod beside; do
    for part in max stat0 stat1 local prom blind err tasks0 tasks1; do put "$name.$part" /tmp/$name.$part; done
    put $name.json /tmp/$name.json "$(cat /tmp/$name.rc)"
  done
fi
put workload-io /tmp/io.json
put workload-spin /tmp/spin.json
put schedstat /tmp/schedstat
put progs.attached /tmp/progs.attached
put progs.after /tmp/progs.after
put fds.after /tmp/fds.after
put nobtf-check /tmp/nobtf-check.out "$(cat /tmp/nobtf-check.rc)"
put nobtf-run /tmp/nobtf-run.out "$(cat /tmp/nobtf-run.rc)"
echo "@@done" >&3
mark done
exec 3>&-
poweroff -f
