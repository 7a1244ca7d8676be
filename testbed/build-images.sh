#!/usr/bin/env bash
# Build the testbed's two images locally from Debian packages (debootstrap + docker import); never pull.
#
#   mtt-testbed-node:<hash>               a cluster-host stand-in: sshd, its own dockerd, python3
#   mtt-training-suite-standin:<hash>     the training image stand-in: sshd, python3, torch CPU, megatron-core
#   mtt-training-suite-standin:<hash>-megatron-<tree>
#                                         the same with a Megatron-LM tree at /home/Megatron-LM (its dataset
#                                         helpers unbuilt, as the vendor's) and the CPU patch at the vendor's
#                                         /home/megatron-lm-musa-patch (entry point examples/llama3/pretrain_gpt.py)
#
# <hash> is a content hash of the image's recipe (testbed/images/<name>/ and this script), so an image is
# rebuilt exactly when its recipe changes and is otherwise taken from the local Docker cache. <tree> is the
# content hash of the Megatron-LM tree in third_party/Megatron-LM (`make megatron-src`), when there is one. The
# stand-in is also saved as a tar archive (docker save) in the cache directory, ready for a node's `docker load`.
#
# Usage: sudo testbed/build-images.sh            build what is missing (needs root, dockerd, network to the mirror)
#        testbed/build-images.sh --print         print the tags and archive path as JSON; builds nothing
#        sudo testbed/build-images.sh --force    rebuild even when the tags exist
# Env:   TESTBED_CACHE   cache directory (default: testbed/.cache): wheels, .deb files, image archives
#        DEBIAN_MIRROR   Debian mirror (default: the bookworm mirror of this machine's apt sources)
#        PIP_DOWNLOAD_ARGS  extra `pip download` arguments, e.g. "--extra-index-url https://download.pytorch.org/whl/cpu"
#        PYTHON          python with pip that downloads the stand-in's wheels (default: the repository's .venv,
#                        else python3; sudo's PATH usually lacks the venv)
#        MEGATRON_TREE   the Megatron-LM tree the stand-in installs (default: third_party/Megatron-LM; none when
#                        it has no pretrain_gpt.py)
set -euo pipefail

readonly SUITE=bookworm
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly SCRIPT_DIR
readonly RECIPES="${SCRIPT_DIR}/images"
readonly CACHE="${TESTBED_CACHE:-${SCRIPT_DIR}/.cache}"
if [[ -z ${PYTHON:-} ]]; then
  if [[ -x ${SCRIPT_DIR}/../.venv/bin/python ]]; then PYTHON="${SCRIPT_DIR}/../.venv/bin/python"; else PYTHON=python3; fi
fi
readonly PYTHON
# image name -> recipe directory
declare -rA RECIPE_OF=(
  [mtt-testbed-node]=node
  [mtt-training-suite-standin]=training-suite-standin
)
readonly STANDIN=mtt-training-suite-standin
MEGATRON_TREE="${MEGATRON_TREE:-${SCRIPT_DIR}/../third_party/Megatron-LM}"
[[ -f ${MEGATRON_TREE}/pretrain_gpt.py ]] || MEGATRON_TREE=""
readonly MEGATRON_TREE
# what a build leaves in a tree and the image rebuilds: not part of the tree's hash, not copied
readonly TREE_BUILD_OUTPUTS=(--exclude=__pycache__ --exclude='*.pyc' --exclude='*.so')

log() { printf '[build-images] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# Content hash of an image's recipe: every file of its recipe directory (path, exec bit, content), this script,
# and the Debian suite. The mirror is left out: any mirror serves the same packages.
recipe_hash() {
  local dir="${RECIPES}/${RECIPE_OF[$1]}"
  [[ -d ${dir} ]] || die "no recipe directory ${dir}"
  {
    echo "suite=${SUITE}"
    sha256sum "${SCRIPT_DIR}/build-images.sh" | cut -d' ' -f1
    (cd "${dir}" && find . -name __pycache__ -prune -o -type f -print0 | LC_ALL=C sort -z | while IFS= read -r -d '' f; do
      printf '%s %s %s\n' "$(sha256sum <"${f}" | cut -d' ' -f1)" "$([[ -x ${f} ]] && echo x || echo -)" "${f}"
    done)
  } | sha256sum | cut -c1-12
}

# Content hash of the Megatron-LM tree (paths and contents, build outputs left out); empty without a tree.
megatron_hash() {
  [[ -n ${MEGATRON_TREE} ]] || return 0
  (cd "${MEGATRON_TREE}" && find . \( -name __pycache__ -o -name '*.pyc' -o -name '*.so' \) -prune -o -type f -print0 \
    | LC_ALL=C sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-12
}

# The image's version: its recipe hash, and for the stand-in the Megatron tree's hash when it installs one.
image_version() {
  local version tree
  version=$(recipe_hash "$1")
  if [[ $1 == "${STANDIN}" ]]; then
    tree=$(megatron_hash)
    [[ -z ${tree} ]] || version+="-megatron-${tree}"
  fi
  echo "${version}"
}
image_tag() { echo "$1:$(image_version "$1")"; }
archive_path() { echo "${CACHE}/images/$1-$(image_version "$1").tar"; }

print_json() {
  printf '{"node_image": "%s", "standin_image": "%s", "standin_archive": "%s", "standin_megatron_tree": "%s"}\n' \
    "$(image_tag mtt-testbed-node)" "$(image_tag "${STANDIN}")" "$(archive_path "${STANDIN}")" "$(megatron_hash)"
}

# The bookworm mirror of this machine's apt sources (deb822 *.sources or one-line *.list).
detect_mirror() {
  local uri
  uri=$(awk -v suite="${SUITE}" 'BEGIN { RS = "" }
    { uris = ""; hit = 0
      n = split($0, lines, "\n")
      for (i = 1; i <= n; i++) {
        if (lines[i] ~ /^URIs:/) { sub(/^URIs:[ \t]*/, "", lines[i]); split(lines[i], u, /[ \t]+/); uris = u[1] }
        if (lines[i] ~ /^Suites:/) { m = split(lines[i], s, /[ \t]+/); for (j = 2; j <= m; j++) if (s[j] == suite) hit = 1 }
      }
      if (hit && uris != "") { print uris; exit }
    }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  if [[ -z ${uri} ]]; then
    uri=$(awk -v suite="${SUITE}" '$1 == "deb" {
        i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
        if ($(i + 1) == suite) { print $i; exit }
      }' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
  fi
  [[ -n ${uri} ]] || die "no '${SUITE}' mirror in /etc/apt/sources.list*; set DEBIAN_MIRROR"
  echo "${uri}"
}

# Lines of a list file without comments and blank lines.
list_of() { sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^$/d' "$1"; }

# --- build state, cleaned up on exit ---------------------------------------------------------------------------
WORKDIR=""
cleanup() {
  [[ -n ${WORKDIR} && -d ${WORKDIR} ]] || return 0
  local mnt
  # unmount everything under the work directory, deepest first, before deleting anything
  while read -r mnt; do umount "${mnt}" 2>/dev/null || umount -l "${mnt}"; done \
    < <(awk -v root="${WORKDIR}/" 'index($2, root) == 1 { print $2 }' /proc/mounts | sort -r)
  if awk -v root="${WORKDIR}/" 'index($2, root) == 1 { found = 1 } END { exit !found }' /proc/mounts; then
    log "WARNING: mounts remain under ${WORKDIR}; not deleting it"
  else
    rm -rf "${WORKDIR}"
  fi
  WORKDIR=""
}
trap cleanup EXIT

# Download the stand-in's pinned wheels into the cache (this machine's pip configuration applies). The image's
# python is Debian bookworm's: CPython 3.11, glibc 2.36.
fetch_wheels() {
  local requirements="$1" dest="${CACHE}/wheels" platforms=(--platform manylinux2014_x86_64) glibc_minor
  # pip takes --platform tags literally: list every manylinux tag that glibc 2.36 can run
  for glibc_minor in $(seq 17 36); do platforms+=(--platform "manylinux_2_${glibc_minor}_x86_64"); done
  mkdir -p "${dest}"
  log "downloading wheels for ${requirements} into ${dest}"
  # shellcheck disable=SC2086 # PIP_DOWNLOAD_ARGS is a list of words by design
  "${PYTHON}" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version 3.11 --implementation cp "${platforms[@]}" \
    ${PIP_DOWNLOAD_ARGS:-} -d "${dest}" -r "${requirements}" \
    2> >(grep -v "^WARNING: Location '.*' is ignored" >&2)
}

build_image() {
  local name="$1" tag="$2"
  local recipe="${RECIPES}/${RECIPE_OF[${name}]}"
  local started=${SECONDS} mirror root
  mirror="${DEBIAN_MIRROR:-$(detect_mirror)}"
  mkdir -p "${CACHE}/debs/partial"
  WORKDIR=$(mktemp -d /var/tmp/mtt-testbed-build.XXXXXX)
  root="${WORKDIR}/rootfs"

  log "${tag}: debootstrap ${SUITE} (minbase) from ${mirror}"
  debootstrap --variant=minbase --cache-dir="${CACHE}/debs" "${SUITE}" "${root}" "${mirror}" \
    >"${WORKDIR}/debootstrap.log" 2>&1 || { tail -n 30 "${WORKDIR}/debootstrap.log" >&2; die "debootstrap failed"; }

  # Keep documentation and translations out of the image, and keep services from starting in the chroot.
  cat >"${root}/etc/dpkg/dpkg.cfg.d/01-mtt-testbed-nodoc" <<'EOF'
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
path-exclude=/usr/share/lintian/*
EOF
  printf '#!/bin/sh\nexit 101\n' >"${root}/usr/sbin/policy-rc.d"
  chmod 755 "${root}/usr/sbin/policy-rc.d"
  cp /etc/resolv.conf "${root}/etc/resolv.conf"
  mount -t proc proc "${root}/proc"
  mount --bind "${CACHE}/debs" "${root}/var/cache/apt/archives"

  local packages
  mapfile -t packages < <(list_of "${recipe}/packages.txt")
  log "${tag}: apt-get install ${packages[*]}"
  chroot "${root}" /usr/bin/env DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 sh -c \
    'apt-get -qq -o Acquire::Retries=3 update && apt-get -qq -o Acquire::Retries=3 install -y --no-install-recommends "$@"' \
    apt "${packages[@]}" >"${WORKDIR}/apt.log" 2>&1 || { tail -n 30 "${WORKDIR}/apt.log" >&2; die "apt-get failed"; }

  if [[ -d ${recipe}/rootfs ]]; then
    tar -C "${recipe}/rootfs" --exclude=__pycache__ --owner=0 --group=0 -cf - . | tar -C "${root}" -xf -
  fi
  if [[ ${name} == "${STANDIN}" && -n ${MEGATRON_TREE} ]]; then
    log "${tag}: Megatron-LM tree ${MEGATRON_TREE} -> /home/Megatron-LM"
    mkdir -p "${root}/home/Megatron-LM"
    tar -C "${MEGATRON_TREE}" "${TREE_BUILD_OUTPUTS[@]}" --owner=0 --group=0 -cf - . | tar -C "${root}/home/Megatron-LM" -xf -
  fi
  if [[ -f ${recipe}/requirements.txt ]]; then
    fetch_wheels "${recipe}/requirements.txt"
    cp "${recipe}/requirements.txt" "${root}/tmp/requirements.txt"
    cp -a "${CACHE}/wheels" "${root}/tmp/wheels"
  fi
  if [[ -f ${recipe}/customize.sh ]]; then
    log "${tag}: customize.sh"
    cp "${recipe}/customize.sh" "${root}/tmp/customize.sh"
    chroot "${root}" /usr/bin/env LANG=C.UTF-8 /bin/sh /tmp/customize.sh >"${WORKDIR}/customize.log" 2>&1 \
      || { tail -n 30 "${WORKDIR}/customize.log" >&2; die "customize.sh failed"; }
    tail -n 3 "${WORKDIR}/customize.log" >&2
  fi

  # Trim: package lists, caches, logs, host keys (each container makes its own), build helpers.
  umount "${root}/var/cache/apt/archives" "${root}/proc"
  rm -rf "${root}"/var/lib/apt/lists/* "${root}"/var/cache/apt/*.bin "${root}"/var/cache/debconf/*-old \
    "${root}"/var/log/*.log "${root}"/var/log/apt/* "${root}"/root/.cache "${root}"/tmp/* "${root}"/tmp/.[!.]* \
    "${root}"/etc/ssh/ssh_host_* "${root}/usr/sbin/policy-rc.d"
  : >"${root}/etc/machine-id"
  : >"${root}/etc/resolv.conf"

  local changes=() line
  while IFS= read -r line; do changes+=(--change "${line}"); done < <(list_of "${recipe}/image-config.txt")
  changes+=(--change "LABEL org.mtt-train-ops.testbed.recipe-hash=${tag##*:}")
  if [[ ${name} == "${STANDIN}" && -n ${MEGATRON_TREE} ]]; then
    changes+=(--change "LABEL org.mtt-train-ops.testbed.megatron-tree=$(megatron_hash)")
  fi
  log "${tag}: docker import"
  tar --numeric-owner --xattrs -C "${root}" --exclude='./dev/*' -cf - . \
    | docker import "${changes[@]}" --message "mtt-train-ops testbed ${name} (debootstrap ${SUITE})" - "${tag}" >/dev/null
  cleanup
  log "${tag}: built in $((SECONDS - started))s, $(image_size "${tag}")"
}

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }
image_size() { docker image inspect -f '{{.Size}}' "$1" | awk '{ printf "%.0f MiB", $1 / 1048576 }'; }

# Remove this image name's tags other than the current one (old recipes), when no container uses them.
prune_old_tags() {
  local name="$1" keep="$2" ref
  while read -r ref; do
    [[ ${ref} == "${keep}" ]] && continue
    docker image rm "${ref}" >/dev/null 2>&1 && log "removed old image ${ref}" || true
  done < <(docker image ls --format '{{.Repository}}:{{.Tag}}' "${name}")
}

save_archive() {
  local tag="$1" archive="$2" started=${SECONDS}
  mkdir -p "$(dirname "${archive}")"
  # a cached archive counts only when it holds the image the tag names now: an image built again (an emptied
  # engine, --force) keeps its tag but not its ID, and the nodes would load the older build
  local want held
  want=$(docker image inspect -f '{{.Id}}' "${tag}")
  if [[ -s ${archive} ]]; then
    held=$(python3 "${SCRIPT_DIR}/../roles/container/files/archive_image_ids.py" "${archive}" "${tag}" || true)
    if [[ ${held} == *"\"${want}\""* ]]; then
      log "${archive}: present (cached)"
      return
    fi
    log "${archive}: holds ${held:-no readable image} for ${tag}, not ${want}: saving it again"
  fi
  log "${tag}: docker save -> ${archive}"
  docker save -o "${archive}.partial" "${tag}"
  mv "${archive}.partial" "${archive}"
  # archives of older recipes of the same image
  find "$(dirname "${archive}")" -maxdepth 1 -name "${tag%%:*}-*.tar" ! -name "$(basename "${archive}")" -delete
  log "${archive}: saved in $((SECONDS - started))s, $(du -h "${archive}" | cut -f1)"
}

main() {
  local force=0
  case "${1:-}" in
    --print) print_json; return ;;
    --force) force=1 ;;
    "") ;;
    *) die "unknown argument '$1' (use --print or --force)" ;;
  esac
  [[ ${EUID} -eq 0 ]] || die "run as root (debootstrap, chroot, mount)"
  docker info >/dev/null 2>&1 || die "dockerd does not answer; run testbed/host-setup.sh first"
  command -v debootstrap >/dev/null || die "debootstrap is missing; run testbed/host-setup.sh first"
  mkdir -p "${CACHE}"
  exec 9>"${CACHE}/build.lock"
  flock -n 9 || { log "another build holds ${CACHE}/build.lock; waiting"; flock 9; }

  local name tag
  for name in mtt-testbed-node "${STANDIN}"; do
    tag=$(image_tag "${name}")
    if ((force == 0)) && image_exists "${tag}"; then
      log "${tag}: present (cached), $(image_size "${tag}")"
    else
      build_image "${name}" "${tag}"
    fi
    prune_old_tags "${name}" "${tag}"
  done
  ((force == 0)) || rm -f "$(archive_path "${STANDIN}")"
  save_archive "$(image_tag "${STANDIN}")" "$(archive_path "${STANDIN}")"
  print_json
}

main "$@"
