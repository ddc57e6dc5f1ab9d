#!/usr/bin/env bash
# Builds the pstrain container images without a Docker daemon or a registry: buildah (chroot
# isolation) on a Debian 12 base made here with mmdebstrap, from the Debian mirror apt already uses.
#
#   1. installs buildah, podman, runc and mmdebstrap with apt-get, if missing;
#   2. makes the bases localhost/debian:12 (minbase) and localhost/debian:12-slim (minbase without
#      documentation, man pages and locales, as Docker Hub's slim images), which the Dockerfiles'
#      FROM lines resolve to; as in Docker Hub's, apt in them keeps no downloaded packages. They
#      are kept in the container storage: a later run reuses them;
#   3. builds deploy/docker/Dockerfile: localhost/pstrain:cpu (the C++ roles) and
#      localhost/pstrain:cpu-pytorch (plus Python, PyTorch and the pstrain package);
#   4. makes podman able to run them here: where a container cannot start because podman raises
#      its resource limits beyond what this machine allows, writes `default_ulimits = []` into
#      /etc/containers/containers.conf (and says so);
#   5. checks that pstrain:cpu holds no compiler and no -dev package, and prints the image sizes.
#
# The CUDA image (deploy/docker/Dockerfile.cuda, localhost/pstrain:cuda) needs NVIDIA's apt
# repository: it is built only with --cuda, and fails where that repository cannot be reached.
#
# Usage: scripts/build-images.sh [--cpu-only] [--cuda] [--rebuild-base] [--no-cache]
#   --cpu-only      build pstrain:cpu only (what tests/container_test.sh runs), not cpu-pytorch
#   --cuda          also build pstrain:cuda (Dockerfile.cuda)
#   --rebuild-base  make the Debian bases again (a fresh snapshot of the mirror) instead of reusing
#   --no-cache      rebuild every layer of the images (the bases are still reused)
# Needs root (rootful buildah and podman) and network access to the Debian mirror. Environment:
# CUDA_REPO overrides Dockerfile.cuda's NVIDIA repository, for a mirror of it.
set -euo pipefail

usage="usage: $0 [--cpu-only] [--cuda] [--rebuild-base] [--no-cache]  (--help: what each does)"
cpu_only=false
cuda=false
rebuild_base=false
no_cache=()
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu-only) cpu_only=true ;;
    --cuda) cuda=true ;;
    --rebuild-base) rebuild_base=true ;;
    --no-cache) no_cache=(--no-cache) ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-images: unknown argument '$1'; $usage" >&2; exit 2 ;;
  esac
  shift
done

log() { echo "build-images: $*"; }
die() { echo "build-images: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (rootful buildah and podman, mmdebstrap --mode=root); run it with sudo"
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Before anything long: can the CUDA image's packages be had?
cuda_repo=${CUDA_REPO:-$(sed -n 's/^ARG CUDA_REPO=//p' deploy/docker/Dockerfile.cuda)}
cuda_keyring=$(sed -n 's/^ARG CUDA_KEYRING=//p' deploy/docker/Dockerfile.cuda)
if $cuda && ! curl -fsSI --max-time 15 "$cuda_repo/$cuda_keyring" >/dev/null 2>&1; then
  die "NVIDIA's repository $cuda_repo cannot be reached from here, so pstrain:cuda cannot be built (CUDA_REPO: a mirror of it)"
fi

# --- 1. the tools ---
tools=(buildah podman runc mmdebstrap)
missing=()
for p in "${tools[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}"
fi

# --- 2. the Debian bases ---
# The bookworm suites apt uses here (main, updates, security), as one-line sources for the base's
# own sources.list; none found (another release here): mmdebstrap's default, deb.debian.org.
mirrors=()
# shellcheck disable=SC2016  # apt's own $(FIELD) syntax, not the shell's
targets=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT) $(IDENTIFIER)' 2>/dev/null || true)
while read -r uri suite; do
  mirrors+=("deb $uri $suite main")
done < <(awk '$2 ~ /^bookworm(-updates|-security)?$/ && $3 == "main" && $4 == "Packages" { print $1, $2 }' <<<"$targets" | sort -u -k2)
# As in Docker Hub's Debian images: apt keeps no downloaded packages, no binary caches and no
# translations, so that an `apt-get install` layer holds only what it installed.
mkdir "$tmp/apt"
cat >"$tmp/apt/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
echo 'Acquire::Languages "none";' >"$tmp/apt/docker-no-languages"
slim_excludes=('/usr/share/doc/*' '/usr/share/man/*' '/usr/share/info/*' '/usr/share/groff/*'
  '/usr/share/lintian/*' '/usr/share/linda/*' '/usr/share/locale/*')

# make_base TAG [MMDEBSTRAP OPTION...]: imports a bookworm minbase as localhost/debian:TAG, unless
# there is one already (and no --rebuild-base).
make_base() {
  local tag=$1 tar="$tmp/base.tar" from start
  shift
  if ! $rebuild_base && podman image exists "localhost/debian:$tag"; then
    log "base localhost/debian:$tag: reusing the one made $(podman image inspect --format '{{.Created}}' "localhost/debian:$tag" | cut -d. -f1)"
    return
  fi
  from="${mirrors[*]}"
  log "base localhost/debian:$tag: mmdebstrap bookworm from ${from:-deb.debian.org, the default}"
  start=$(date +%s)
  # merged-usr: the /usr merge without the usrmerge package and the Perl it pulls in. The caches
  # go by hand: with docker-clean in place mmdebstrap's clean-up no longer finds them.
  # shellcheck disable=SC2016  # $1 is the hook's: the chroot
  if ! nice -n 10 mmdebstrap --quiet --mode=root --variant=minbase \
      --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
      --customize-hook="copy-in $tmp/apt/docker-clean $tmp/apt/docker-no-languages /etc/apt/apt.conf.d" \
      --customize-hook='rm -f "$1"/var/cache/apt/*.bin' \
      "$@" bookworm "$tar" "${mirrors[@]}" >"$tmp/mmdebstrap.log" 2>&1; then
    cat "$tmp/mmdebstrap.log" >&2
    die "mmdebstrap failed (see above)"
  fi
  podman import --quiet --change 'CMD ["bash"]' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    "$tar" "localhost/debian:$tag" >/dev/null
  rm -f "$tar"
  log "base localhost/debian:$tag: made in $(($(date +%s) - start)) s"
}
make_base 12
slim_options=()
for pattern in "${slim_excludes[@]}"; do slim_options+=(--dpkgopt="path-exclude=$pattern"); done
# dpkg applies them in order: the include after the excludes keeps the licences.
make_base 12-slim "${slim_options[@]}" --dpkgopt='path-include=/usr/share/doc/*/copyright'

# --- 3. the images ---
# The build context: a snapshot of the files git sees (tracked, and untracked but not ignored), so
# that every target compiles the same sources even while someone edits the tree, and the layer
# cache lets the second target reuse the first one's build stage. Outside a git checkout: the tree.
context=$repo
if git -C "$repo" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  context=$tmp/context
  mkdir "$context"
  git -C "$repo" ls-files -z --cached --others --exclude-standard |
    grep -z -v -x -F -f <(git -C "$repo" ls-files --deleted) |
    tar -C "$repo" --null --files-from=- -cf - | tar -C "$context" -xf -
fi

# build FILE TAG [BUILDAH OPTION...]: builds FILE (relative to the repository root) from the
# context into localhost/pstrain:TAG.
build() {
  local file=$1 tag=$2 start
  shift 2
  log "building localhost/pstrain:$tag from $file"
  start=$(date +%s)
  nice -n 10 buildah bud --isolation=chroot --layers --force-rm --pull=never "${no_cache[@]}" \
    -f "$context/$file" -t "localhost/pstrain:$tag" "$@" "$context" ||
    die "building localhost/pstrain:$tag failed (see above)"
  log "built localhost/pstrain:$tag in $(($(date +%s) - start)) s"
}
build deploy/docker/Dockerfile cpu --target cpu
$cpu_only || build deploy/docker/Dockerfile cpu-pytorch --target cpu-pytorch

if $cuda; then
  build deploy/docker/Dockerfile.cuda cuda --build-arg "CUDA_REPO=$cuda_repo"
else
  log "pstrain:cuda not built (--cuda builds it): Dockerfile.cuda installs the CUDA runtime from NVIDIA's repository, $cuda_repo"
fi

# --- 4. running containers here ---
# Podman (rootful) raises RLIMIT_NOFILE and RLIMIT_NPROC in every container by default; where the
# machine denies root CAP_SYS_RESOURCE (some VMs and sandboxes) no container starts ("error setting
# rlimit type 7: operation not permitted"). An empty default_ulimits keeps the caller's limits.
probe() { podman run --rm --network=none localhost/debian:12-slim true 2>&1; }
if ! out=$(probe); then
  conf=/etc/containers/containers.conf
  if ! grep -q 'error setting rlimit' <<<"$out"; then
    echo "$out" >&2
    die "podman cannot run a container here (see above); the images are built"
  fi
  if grep -Eq '^[[:space:]]*default_ulimits' "$conf" 2>/dev/null; then
    die "podman cannot set the containers' resource limits here and $conf already sets default_ulimits: make it 'default_ulimits = []' under [containers]"
  fi
  if grep -q '^\[containers\]' "$conf" 2>/dev/null; then
    sed -i 's/^\[containers\]$/&\ndefault_ulimits = []/' "$conf"
  else
    printf '[containers]\n# Written by pstrain scripts/build-images.sh: this machine does not let podman raise\n# the containers'"'"' resource limits; they keep the limits podman runs with.\ndefault_ulimits = []\n' >>"$conf"
  fi
  log "podman could not raise the containers' resource limits here; wrote 'default_ulimits = []' under [containers] in $conf"
  probe >/dev/null || die "podman still cannot run a container here: $(probe)"
fi

# --- 5. what was built ---
# gcc-12-base and libgcc-s1 are the C++ runtime's, not a compiler.
for tag in cpu $($cpu_only || echo cpu-pytorch); do
  dev=$(podman run --rm --network=none "localhost/pstrain:$tag" dpkg-query -W -f='${Package}\n' |
    grep -E -- '-dev$|^(gcc|g\+\+|cpp|clang|binutils|build-essential)(-|$)' | grep -v -- '-base$' || true)
  [ -z "$dev" ] || die "localhost/pstrain:$tag holds build packages: ${dev//$'\n'/ }"
  log "localhost/pstrain:$tag holds no compiler and no -dev package"
done
log "images:"
podman image ls --format '  {{.Repository}}:{{.Tag}}  {{.Size}}' | grep -E '/(pstrain|debian):' | sort
