//! Shell functions the guest test scripts share (busybox `sh`), prepended by [`script`].

const LIB: &str = r#"
set -eu

# busybox sh runs its own applets ahead of PATH: call the util-linux and e2fsprogs tools instead.
for tool in blkdiscard fstrim mke2fs; do
    eval "$tool() { /usr/sbin/$tool \"\$@\"; }"
done

# fio_verify DEV ENGINE JOBS MIB: JOBS concurrent random writers, each on its own MIB-MiB
# region, 4-64 KiB blocks, one job per vCPU in turn (so every hardware queue carries I/O);
# then every block is read back and its crc32c checked. Prints "FIO-OK DEV ENGINE".
fio_verify() {
    if ! fio --name="verify-$2" --filename="$1" --ioengine="$2" --direct=1 --iodepth=16 \
        --rw=randwrite --bsrange=4k-64k --numjobs="$3" --size="$4M" --offset_increment="$4M" \
        --cpus_allowed="0-$(($(nproc) - 1))" --cpus_allowed_policy=split \
        --verify=crc32c --verify_fatal=1 --verify_state_save=0 --group_reporting \
        >/tmp/fio.log 2>&1 || ! grep -q 'err= 0' /tmp/fio.log; then
        cat /tmp/fio.log
        echo "fio_verify $1 $2 failed"
        return 1
    fi
    echo "FIO-OK $1 $2"
}

# fill DEV BYTE: writes BYTE (e.g. 0xff) over all of DEV, bypassing the page cache.
fill() {
    quiet fio --name=fill --filename="$1" --rw=write --bs=1M --direct=1 --ioengine=libaio \
        --iodepth=4 --buffer_pattern="$2"
}

# holds DEV BYTE: whether every byte of DEV, read from the device, is BYTE.
holds() {
    quiet fio --name=check --filename="$1" --rw=read --bs=1M --direct=1 --ioengine=libaio \
        --iodepth=4 --verify=pattern --verify_pattern="$2"
}

# quiet CMD...: runs CMD, printing its output only if it fails.
quiet() {
    "$@" >/tmp/quiet.log 2>&1 || {
        status=$?
        cat /tmp/quiet.log
        return $status
    }
}

# show_queues DEV: "MQ DEV COUNT: hctx names" from /sys/block/DEV/mq.
show_queues() {
    echo "MQ $1 $(ls /sys/block/$1/mq | wc -l): $(echo $(ls /sys/block/$1/mq))"
}
"#;

/// `body` with the shared functions before it.
pub fn script(body: &str) -> String {
    format!("{LIB}\n{body}\n")
}
