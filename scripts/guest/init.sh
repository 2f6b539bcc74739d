#!/bin/busybox sh
# /init of the throwaway test guest (packed by build-initramfs.sh). Loads the virtio and ext4
# modules, waits for every virtio-blk disk, runs /test.sh (appended to the initramfs by the test
# harness), prints its exit status after a marker line the harness looks for, and powers off.
/bin/busybox mkdir -p /proc /sys /dev /tmp /mnt /run
/bin/busybox --install -s /bin
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1

modules="/lib/modules/$(uname -r)"
# Progress goes to the console so that a guest stuck in a driver shows where.
while read -r module; do
    echo "vbmq-init: insmod $module"
    insmod "$modules/$module" || echo "vbmq-init: insmod $module failed"
done </etc/modules.order

# The harness gives the disks as virtio-blk PCI functions (legacy 0x1001, modern 0x1042).
expected=0
for dev in /sys/bus/pci/devices/*; do
    [ "$(cat "$dev/vendor")" = 0x1af4 ] || continue
    case "$(cat "$dev/device")" in 0x1001 | 0x1042) expected=$((expected + 1)) ;; esac
done
waited=0
while [ "$(ls /sys/block | grep -c '^vd')" -lt "$expected" ] && [ "$waited" -lt 300 ]; do
    sleep 0.1
    waited=$((waited + 1))
done

echo "vbmq-init: $(ls /sys/block | grep -c '^vd') of $expected disks after $((waited / 10)) s"
echo "VBMQ-GUEST-BEGIN"
if [ -f /test.sh ]; then
    sh /test.sh
    status=$?
else
    echo "vbmq-init: no /test.sh in the initramfs"
    status=127
fi
echo "VBMQ-GUEST-EXIT $status"
sync
poweroff -f
