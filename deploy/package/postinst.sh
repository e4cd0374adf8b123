#!/bin/sh
# The unit is installed disabled; systemd only learns that it exists.
# Under dpkg --root (DPKG_ROOT set) the host's systemd is not the one of
# the tree being installed.
set -e
if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
