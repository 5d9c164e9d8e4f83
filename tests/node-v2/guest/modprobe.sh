#!/bin/sh
# The guest kernel's module loader (/proc/sys/kernel/modprobe) and the init's: UML's modules
# live in the user-mode-linux package's own tree, not under the (read-only, host's) /lib/modules,
# so every load goes through modprobe -d with that tree bind-mounted under /run/kmod.
exec /usr/sbin/modprobe -d /run/kmod "$@"
