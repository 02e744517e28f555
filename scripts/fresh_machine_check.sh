#!/usr/bin/env bash
# The fresh-machine check: proves that the README's two commands work on a minimal Debian 12 that
# has nothing this machine has installed by hand.
#
#   bash scripts/fresh_machine_check.sh          # command 1 end to end, command 2 configured and
#                                                # built in part, run-time package tests only
#                                                # (KILN_TEST_BUILD_ONLY=1)
#   bash scripts/fresh_machine_check.sh --full   # command 1 end to end, command 2 end to end
#
# It bootstraps Debian 12 (`debootstrap --variant=minbase`) from the apt source this machine is
# configured with, clones the repository's HEAD into it (so only committed work is checked) and
# runs the commands there as root in a chroot with /proc, /sys and /dev bound (unmounted on exit,
# also on failure or Ctrl-C). Nothing is installed in the root before the commands run: not even
# git, which scripts/setup.sh must bring itself.
#
# Note [pristine root]: bootstrapping takes ~1 minute, so the freshly bootstrapped root is kept as
# a tarball (with its SHA-256) in $KILN_FRESH_CACHE and every run unpacks a new root from it; a root
# that an earlier run installed packages into is never reused. Downloaded .deb files are kept in
# the same cache and bound into the root's /var/cache/apt/archives: apt still decides from the
# signed package lists what to install and checks every file's hash, so the download cache saves
# time without hiding a missing package.
#
# Environment: KILN_FRESH_CACHE (default /var/cache/kiln-fresh), KILN_FRESH_WORK (the root is
# unpacked in $KILN_FRESH_WORK/root; default /var/tmp/kiln-fresh), KILN_FRESH_KEEP=1 keeps the root
# after a failure for inspection (it is deleted at the start of the next run either way).
set -euo pipefail

die() {
  echo "fresh-machine check: $*" >&2
  exit 1
}
repo=$(cd "$(dirname "$0")/.." && pwd)
full=0
case "${1:-}" in
  "") ;;
  --full) full=1 ;;
  -h | --help)
    sed -n '2,9p' "$0"
    exit 0
    ;;
  *) die "unknown argument '$1' (expected --full or nothing)" ;;
esac
[[ $EUID -eq 0 ]] || die "must run as root (it bootstraps a Debian root and chroots into it)"
[[ $(dpkg --print-architecture) == amd64 ]] || die "expects an amd64 Debian host"

cache=${KILN_FRESH_CACHE:-/var/cache/kiln-fresh}
work=${KILN_FRESH_WORK:-/var/tmp/kiln-fresh}
root=$work/root
suite=bookworm

t0=$SECONDS
stage_start=$SECONDS
stage() {
  echo "== fresh-machine check: $1"
  stage_start=$SECONDS
}
took() {
  local s=$((SECONDS - stage_start))
  echo "   ($1: $s s)"
  [[ -z ${KILN_STAGE_LOG:-} ]] || printf 'fresh-machine check: %s\t%s\n' "$1" "$s" >>"$KILN_STAGE_LOG"
}

# --- host tools -----------------------------------------------------------------------------------
for tool in debootstrap git tar sha256sum; do
  if ! command -v "$tool" >/dev/null; then
    echo "fresh-machine check: installing $tool on this host"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      debootstrap git tar coreutils >/dev/null
  fi
done

# --- the apt sources this machine uses (Debian's bookworm, -updates, -security) ------------------
# One line per (site, codename): "SITE CODENAME COMPONENT...".
mapfile -t sources < <(apt-get indextargets --format '$(SITE) $(CODENAME) $(COMPONENT)' \
  'Identifier: Packages' | awk -v s="$suite" '$2 == s || $2 == s "-updates" || $2 == s "-security"' |
  sort -u | awk '{k = $1 " " $2; c[k] = c[k] " " $3} END {for (k in c) print k c[k]}' | sort)
mirror=""
for line in "${sources[@]}"; do
  read -r site codename _ <<<"$line"
  [[ $codename == "$suite" ]] && mirror=$site
done
[[ -n $mirror ]] || die "this machine's apt sources have no '$suite' suite (apt-get indextargets)"

# --- mounts: every mount under the root is ours and is undone on exit -----------------------------
mounts_under_root() { awk -v r="$root" '$2 == r || index($2, r "/") == 1 {print $2}' /proc/mounts; }
unmount_all() {
  local m
  # Deepest first; a lazy unmount if something still holds a mount busy.
  for m in $(mounts_under_root | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done
}
remove_root() {
  unmount_all
  if [[ -n $(mounts_under_root) ]]; then
    die "refusing to delete $root: still mounted: $(mounts_under_root | tr '\n' ' ')"
  fi
  rm -rf --one-file-system "$root"
}
status=1
on_exit() {
  unmount_all
  if [[ $status -ne 0 && ${KILN_FRESH_KEEP:-0} == 1 ]]; then
    echo "fresh-machine check: FAILED; the root is kept at $root"
  elif [[ -d $root ]]; then
    remove_root
  fi
  echo "== fresh-machine check: $([[ $status -eq 0 ]] && echo passed || echo FAILED) in $((SECONDS - t0)) s"
}
trap 'on_exit' EXIT
trap 'exit 130' INT TERM

# --- a pristine root ------------------------------------------------------------------------------
stage "pristine Debian 12 root"
mkdir -p "$cache/archives/partial" "$work"
key=$(echo "$suite minbase $mirror" | sha256sum | cut -c1-12)
tarball=$cache/$suite-minbase-$key.tar
if [[ -f $tarball && -f $tarball.sha256 ]] && ! (cd "$cache" && sha256sum --quiet -c "$tarball.sha256"); then
  echo "fresh-machine check: $tarball does not match its checksum; bootstrapping again"
  rm -f "$tarball" "$tarball.sha256"
fi
[[ -d $root ]] && remove_root
if [[ ! -f $tarball ]]; then
  echo "debootstrap --variant=minbase $suite from $mirror"
  debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    die "debootstrap failed; see $work/debootstrap.log"
  tar -C "$root" --numeric-owner -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
  (cd "$cache" && sha256sum "$(basename "$tarball")" >"$tarball.sha256")
  echo "bootstrapped and saved as $tarball"
else
  mkdir -p "$root"
  tar -C "$root" --numeric-owner -xpf "$tarball"
  echo "unpacked from $tarball ($(cut -c1-16 "$tarball.sha256")...)"
fi
# What a new machine has besides the bootstrap: name resolution and this machine's apt sources.
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
rm -f "$root/etc/apt/sources.list"
{
  for line in "${sources[@]}"; do
    read -r site codename components <<<"$line"
    printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: %s\n' "$site" "$codename" "$components"
    printf 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n'
  done
} >"$root/etc/apt/sources.list.d/debian.sources"
took "root"

mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys" && mount --make-rslave "$root/sys"
mount --rbind /dev "$root/dev" && mount --make-rslave "$root/dev"
mount --bind "$cache/archives" "$root/var/cache/apt/archives"
# Note [compiler cache in the root]: the host's compiler cache (scripts/ccache.sh) is bound where
# the root's own builds look for it. The root still compiles with its own g++, against its own
# headers: ccache answers a compile only when the compiler (its size and mtime) and every file the
# source includes hash as they did when the entry was made, and runs the real compiler otherwise,
# so a header whose package setup.sh does not install still fails the build here. The cache saves
# the compile time, not a single check. KILN_FRESH_NO_CCACHE=1 leaves it out (a cold build).
if [[ ${KILN_FRESH_NO_CCACHE:-0} != 1 ]]; then
  host_ccache=${KILN_CCACHE_DIR:-${HOME:-/root}/.cache/kiln-ccache}
  mkdir -p "$host_ccache" "$root/root/.cache/kiln-ccache"
  mount --bind "$host_ccache" "$root/root/.cache/kiln-ccache"
  echo "compiler cache: $host_ccache bound into the root"
fi

# --- the repository, as a new user gets it -------------------------------------------------------
git clone --quiet "$repo" "$root/root/kiln"
echo "cloned $(git -C "$root/root/kiln" log -1 --format='%h %s' | cut -c1-80)"

in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    /bin/bash -c "cd /root/kiln && $1"
}

# Runs a command in the root, its output shown and kept in $work/<log>; fails naming the log.
run_in_root() {
  local log=$work/$1 rc
  set +e
  in_root "$2" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  set -e
  [[ $rc -eq 0 ]] || die "'$2' failed in the fresh root (exit $rc); its output is in $log"
}

stage "README command 1 (bash scripts/train.sh)"
run_in_root command1.log "bash scripts/train.sh"
grep -q -i "test accuracy" "$work/command1.log" || die "command 1 printed no test accuracy"
for f in checkpoint model.safetensors history.csv curves.svg metrics.json summary.txt; do
  [[ -e $root/root/kiln/out/cnn/$f ]] || die "command 1 did not write out/cnn/$f"
done
took "command 1"

if [[ $full == 1 ]]; then
  stage "README command 2 (bash scripts/test.sh)"
  run_in_root command2.log "bash scripts/test.sh"
  took "command 2"
else
  stage "README command 2, both builds configured, one program per dependency set built, the run-time packages' tests (KILN_TEST_BUILD_ONLY=1 bash scripts/test.sh)"
  run_in_root command2.log "KILN_TEST_BUILD_ONLY=1 bash scripts/test.sh"
  took "command 2 (build only, run-time package tests)"
fi
status=0
