#!/bin/sh
# systemd-container.sh WORK UNIT CONFIG BINARY STATE NSS
#
# Runs as PID 1 of new PID, mount, UTS and cgroup namespaces inside a test's
# network namespace (TestSystemdUnit), and becomes systemd there, so that
# deploy/m2hod.service runs under a real service manager without touching
# the host's. The system it boots has the host's binaries and libraries, but
# only the units below: a few empty targets for the service's default
# dependencies and the unit under test, whose output goes to WORK/out
# (systemd's own goes nowhere: the test asks systemctl).
#
#   WORK    the test's scratch directory (the overlay of /etc lives there)
#   UNIT    the unit file, installed as /etc/systemd/system/m2hod.service
#   CONFIG  installed as /etc/m2ho/m2hod.yaml
#   BINARY  installed as /usr/local/bin/m2hod
#   STATE   copied to /var/lib/private/m2ho, the unit's state directory
#   NSS     "systemd" keeps the host's name service switch, "files" drops
#           nss-systemd from it
set -eu
work=$1 unit=$2 config=$3 binary=$4 state=$5 nss=$6

# Nothing mounted here reaches the host.
mount --make-rprivate /
mount -t proc proc /proc
# The kernel's tunables stay read-only, as container managers mount them:
# systemd then leaves the host's sysctls and devices alone.
mount --bind /proc/sys /proc/sys
mount -o remount,bind,ro /proc/sys
mount --bind /sys /sys
mount -o remount,bind,ro /sys
mount -t bpf bpf /sys/fs/bpf

# /etc gets an overlay so that the configuration goes in without changing
# the host's, and empty unit directories hide the host's and the
# distribution's units.
mkdir -p "$work/etc-upper" "$work/etc-work" "$work/out"
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$work/etc-upper,workdir=$work/etc-work" /etc
for dir in /etc/systemd/system /lib/systemd/system /usr/local/bin /run /var/lib /var/tmp; do
	mount -t tmpfs -o mode=0755 tmpfs "$dir"
done
if [ "$nss" = files ]; then
	# as on images without libnss-systemd, whose names of transient users
	# resolve nowhere
	sed -i 's/ systemd\b//' /etc/nsswitch.conf
fi
install -D -m 0644 "$config" /etc/m2ho/m2hod.yaml
install -m 0644 "$unit" /etc/systemd/system/m2hod.service
install -m 0755 "$binary" /usr/local/bin/m2hod
install -d -m 0700 /var/lib/private
cp -r "$state" /var/lib/private/m2ho
mkdir -p /run/m2ho-test /run/systemd/system/m2hod.service.d
mount --bind "$work/out" /run/m2ho-test

units=/run/systemd/system
for target in m2ho-test sysinit basic network-online shutdown; do
	printf '[Unit]\nDefaultDependencies=no\n' >"$units/$target.target"
done
# Without journald, the daemon's log goes to a file the test reads.
printf '[Service]\nStandardOutput=append:/run/m2ho-test/m2hod.log\nStandardError=inherit\n' \
	>"$units/m2hod.service.d/output.conf"

# Last, since WORK usually lies in /tmp.
mount -t tmpfs -o mode=1777 tmpfs /tmp
chmod 1777 /var/tmp
# The test placed this process in the container's cgroup; a cgroup
# namespace unshared now makes that cgroup systemd's root.
exec unshare --cgroup sh -c 'mount -t cgroup2 cgroup2 /sys/fs/cgroup &&
	exec env container=m2ho-test /lib/systemd/systemd --unit=m2ho-test.target --log-target=null' </dev/null
