#!/bin/sh
# Imports the node's images (KV2_IMAGES in guest/guest.env) into containerd's k8s.io namespace:
# run by the guest's init (cgroupfs driver) or by the kv2-images unit (systemd driver).
set -eu
. "$1/guest.env"
for a in $KV2_IMAGES; do
    "$KV2_CONTAINERD_BIN/ctr" --address /run/containerd/containerd.sock -n k8s.io images import "$a" >/dev/null || {
        echo "kv2-images: ctr import $a failed" >&2
        exit 1
    }
done
echo "kv2-images: images imported at uptime $(cut -d' ' -f1 /proc/uptime)"
