#!/bin/sh
# After removal systemd forgets the unit; a running m2hod was stopped by
# the operator, or keeps running until it is.
set -e
if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
