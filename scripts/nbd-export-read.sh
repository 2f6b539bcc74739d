#!/usr/bin/env bash
# Reads a 1 GiB raw image of random bytes on /dev/shm through vbmq's NBD export (export-begin,
# no guest writing) and through qemu-storage-daemon's NBD export of the same file, with nbdcopy
# to null:, twice each, alternating; prints MiB/s and the server's CPU ticks (1/100 s) per GiB.
# Until `vbmq bench` measures exports (issue 34), this is the comparison. Usage:
#   scripts/nbd-export-read.sh target/release/vbmq
set -euo pipefail
vbmq=$1
dir=$(mktemp -d /dev/shm/vbmq-nbd-read.XXXXXX)
vpid='' qpid=''
cleanup() {
    [[ -n $vpid ]] && kill "$vpid" 2>/dev/null
    [[ -n $qpid ]] && kill "$qpid" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
wait_socket() { while [[ ! -S $1 ]]; do sleep 0.1; done; }
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

head -c 1G /dev/urandom >"$dir/a.raw"
"$vbmq" serve --control "$dir/ctl.sock" --disk "socket=$dir/a.sock,path=$dir/a.raw" 2>"$dir/vbmq.log" &
vpid=$!
wait_socket "$dir/a.sock"
"$vbmq" ctl --control "$dir/ctl.sock" export-begin "$dir/a.sock" "unix:$dir/v.nbd" >/dev/null
qemu-storage-daemon \
    --blockdev "driver=file,node-name=f,filename=$dir/a.raw,cache.direct=off,read-only=on,locking=off" \
    --nbd-server "addr.type=unix,addr.path=$dir/q.nbd" \
    --export type=nbd,id=e,node-name=f,name= &
qpid=$!
wait_socket "$dir/q.nbd"
for round in 1 2; do
    for server in vbmq qsd; do
        if [[ $server == vbmq ]]; then pid=$vpid sock=v.nbd; else pid=$qpid sock=q.nbd; fi
        before=$(ticks "$pid")
        start=$(date +%s.%N)
        nbdcopy "nbd+unix:///?socket=$dir/$sock" null:
        end=$(date +%s.%N)
        after=$(ticks "$pid")
        printf '%s round %s: %.0f MiB/s, server CPU %s ticks/GiB\n' "$server" "$round" \
            "$(echo "1024 / ($end - $start)" | bc -l)" "$((after - before))"
    done
done
