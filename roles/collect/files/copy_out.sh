#!/bin/sh
# Copy a node's log pack out of its training container onto the node, and remove it from the container even when
# the copy fails (mtt-train-ops, role collect). Exits with the copy's status.
# Usage: copy_out.sh CONTAINER PACK   (PACK: the same path in the container and on the node)
container=$1
pack=$2
docker cp "${container}:${pack}" "${pack}"
copied=$?
docker exec "${container}" rm -f -- "${pack}"
exit "${copied}"
