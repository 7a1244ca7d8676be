#!/bin/sh
# Run on a node by roles/health_check: the kernel log's NVIDIA Xid lines, with their ISO times (trainops.health
# keeps those since the node's last check). A node that may not read its kernel log prints "UNREADABLE <why>" and
# exits 0: the check then says it could not look, rather than failing the playbook.
if ! log=$(dmesg --time-format iso 2>&1); then
  echo "UNREADABLE $log" | head -n 1
  exit 0
fi
printf '%s\n' "$log" | grep -F "NVRM: Xid" || true
