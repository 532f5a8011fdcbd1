#!/usr/bin/env bash
# Build the local cluster's container images, from Debian's packages and this repository only
# (no registry is needed), as docker archives under .cluster/images (an ignored build output;
# $CLUSTER_IMAGES overrides it) that `ctr -n k8s.io images import FILE` loads into containerd:
#
#   base          docker.io/library/sweeper-debian-base:bookworm   debootstrap minbase + python3
#   trial-runner  docker.io/library/sweeper-trial-runner:VERSION   ./Dockerfile on that base,
#                 WITH_TORCH=0 (VERSION: setup.cfg's)
#   postgres      docker.io/library/sweeper-postgres:15-bookworm   Debian's PostgreSQL 15 with the
#                 official image's contract (tools/cluster/images/postgres.Containerfile)
#   test-runner   docker.io/library/sweeper-test-runner:local       the trial runner + tests/
#                 (tools/cluster/images/test-runner.Containerfile), for the test suite only
#   dashboard     docker.io/library/sweeper-optuna-dashboard:0.21.0  optuna-dashboard with the
#                 contract of upstream's ghcr.io image (tools/cluster/images/dashboard.Containerfile)
#   katib-mnist   docker.io/library/sweeper-katib-mnist:local   the base (python3, no sweeper) with a
#                 stand-in for Katib's MNIST example script at its path
#                 (tools/cluster/images/katib-mnist.Containerfile), for the test of command
#                 trials in any image
#   pause         registry.k8s.io/pause:3.10  k8s.io/kubernetes's build/pause/linux/pause.c
#                 (3.10.2 in v1.36.3), static, on scratch; containerd's sandbox_image must name it
#
#   tools/cluster/images.sh [base|trial-runner|test-runner|postgres|dashboard|katib-mnist|pause]...
#   (no name: all)
#
# Prints the archives' paths on stdout, one per line; progress goes to stderr and each build's
# output to .cluster/buildah/logs/NAME.log. A stamp of each image's inputs (the files that go
# into it, this script, and the base image for the two built on it) makes a second run a no-op;
# a changed input rebuilds that image only. All builder state stays under .cluster/ (buildah's
# storage in .cluster/buildah, debootstrap's packages and root filesystem in
# .cluster/debootstrap), never in /var/lib/containers, so clones of the repository never share
# it. buildah keeps the trial runner's dependency layer, so a code change rebuilds in seconds.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
HERE="$ROOT/tools/cluster"
SELF="$HERE/images.sh"
CLUSTER="$ROOT/.cluster"
OUT_REAL="$(realpath -m "${CLUSTER_IMAGES:-$CLUSTER/images}")"

SUITE=bookworm
BASE_PACKAGES=python3,python3-venv,python3-pip,python-is-python3,ca-certificates
PG_MAJOR=15
PAUSE_VERSION=3.10.2

die() { echo "cluster-images: $*" >&2; exit 1; }
say() { echo "cluster-images: $*" >&2; }

ALL=(base trial-runner test-runner postgres dashboard katib-mnist pause)
want=("$@")
[[ ${#want[@]} -gt 0 ]] || want=("${ALL[@]}")
for name in "${want[@]}"; do
	case "$name" in
		base | trial-runner | test-runner | postgres | dashboard | katib-mnist | pause) ;;
		*) die "unknown image '$name'; the images are: ${ALL[*]}" ;;
	esac
done

need() { command -v "$1" >/dev/null 2>&1 || die "$1 is not installed; install it: apt-get install $2"; }
[[ "$(id -u)" == 0 ]] || die "debootstrap and buildah's chroot isolation need root; run it as root (sudo $0)"
need buildah buildah
needs_base=0
for name in "${want[@]}"; do
	if [[ "$name" != pause ]]; then
		needs_base=1
		need debootstrap debootstrap
	else
		need gcc gcc
		need strip binutils
		need go golang-go
		[[ -f "$(gcc -print-file-name=libc.a)" ]] || die "gcc has no static C library (libc.a) for the pause binary; install it: apt-get install libc6-dev"
	fi
done

# Everything below runs in a private mount namespace: every mount buildah makes (and the one
# below) disappears with the script, whatever way it ends. buildah 1.28 (containers/image) keeps
# a blob info cache in /var/lib/containers/cache for root, with no option to move it; an
# overlay on /var/lib, seen only in this namespace, puts it in .cluster/buildah/var-lib.
if [[ "${CLUSTER_IMAGES_NAMESPACE:-}" != "$$" ]]; then
	need unshare util-linux
	# shellcheck disable=SC2016  # $$ is the inner shell's, which exec keeps for this script
	CLUSTER_IMAGES_NAMESPACE=self exec unshare --mount --propagation private -- \
		bash -c 'CLUSTER_IMAGES_NAMESPACE=$$ exec "$0" "$@"' "$SELF" "$@"
fi

VERSION="$(awk -F' *= *' '/^version *=/{print $2; exit}' "$ROOT/setup.cfg")"
[[ -n "$VERSION" ]] || die "no version in setup.cfg's [metadata]"
BASE_REF=docker.io/library/sweeper-debian-base:$SUITE
TRIAL_REF=docker.io/library/sweeper-trial-runner:$VERSION
TEST_REF=docker.io/library/sweeper-test-runner:local
POSTGRES_REF=docker.io/library/sweeper-postgres:$PG_MAJOR-$SUITE
DASHBOARD_VERSION=0.21.0  # manifests/dashboard.yaml's upstream image tag, setup.cfg's version
DASHBOARD_REF=docker.io/library/sweeper-optuna-dashboard:$DASHBOARD_VERSION
PAUSE_REF=registry.k8s.io/pause:3.10
KATIB_MNIST_REF=docker.io/library/sweeper-katib-mnist:local

# The Debian mirror the machine's apt uses (deb822 .sources or one-line .list), else Debian's CDN.
apt_uri() {  # SUFFIX (debian or debian-security)
	{
		awk '/^URIs:/{for (i = 2; i <= NF; i++) print $i}' /etc/apt/sources.list.d/*.sources 2>/dev/null
		awk '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z+]+:\/\//) {print $i; break}}' \
			/etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null
	} | grep -E "^https?://[^ ]*/$1/?\$" | head -1 | sed 's#/$##' || true
}
MIRROR="${CLUSTER_DEBIAN_MIRROR:-$(apt_uri debian)}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
SECURITY_MIRROR="$(apt_uri debian-security)"
SECURITY_MIRROR="${SECURITY_MIRROR:-http://deb.debian.org/debian-security}"

# overlay where the kernel has it and .cluster is not itself on overlayfs (overlay on overlay
# fails on older kernels); vfs (a full copy per layer: slower, bigger) otherwise. Each driver
# has its own storage, so switching never mixes them.
mkdir -p "$CLUSTER/buildah/var-lib/upper" "$CLUSTER/buildah/var-lib/work" "$OUT_REAL"
if [[ -z "${CLUSTER_BUILDAH_DRIVER:-}" ]]; then
	CLUSTER_BUILDAH_DRIVER=vfs
	if grep -qw overlay /proc/filesystems && [[ "$(stat -f -c %T "$CLUSTER")" != overlayfs ]]; then
		CLUSTER_BUILDAH_DRIVER=overlay
	fi
fi
mount -t overlay cluster-images \
	-o "lowerdir=/var/lib,upperdir=$CLUSTER/buildah/var-lib/upper,workdir=$CLUSTER/buildah/var-lib/work" /var/lib \
	|| die "cannot mount an overlay on /var/lib in this script's mount namespace (see above)"
# The builds see .cluster at VIEW (a bind mount, in this namespace only): tests/cluster's
# `down` SIGKILLs every process whose command line names .cluster (its leftover check), and
# image builds (debootstrap, buildah, pip under it) are not the cluster's processes.
VIEW=/var/lib/sweeper-cluster-images
mkdir -p "$VIEW"
mount --bind "$CLUSTER" "$VIEW"
in_view() { if [[ "$1" == "$CLUSTER" || "$1" == "$CLUSTER"/* ]]; then echo "$VIEW${1#"$CLUSTER"}"; else echo "$1"; fi; }
real() { if [[ "$1" == "$VIEW" || "$1" == "$VIEW"/* ]]; then echo "$CLUSTER${1#"$VIEW"}"; else echo "$1"; fi; }
OUT="$(in_view "$OUT_REAL")"
STATE="$VIEW/buildah"
DEBOOTSTRAP_DIR="$VIEW/debootstrap"
LOGS="$STATE/logs"
mkdir -p "$LOGS" "$DEBOOTSTRAP_DIR"
B=(buildah --root "$STATE/$CLUSTER_BUILDAH_DRIVER" --runroot "$STATE/run-$CLUSTER_BUILDAH_DRIVER"
	--storage-driver "$CLUSTER_BUILDAH_DRIVER")
# Image copies and layer diffs are staged in TMPDIR (/var/tmp by default).
export TMPDIR="$STATE/tmp"
mkdir -p "$TMPDIR"
export BUILDAH_ISOLATION=chroot

# RUN steps reach PyPI over TLS; where the build machine reaches it through an intercepting
# proxy with a CA of its own, they trust what the machine trusts: its CA bundle is mounted over
# the image's for the RUN steps only (the images keep Debian's bundle).
BUD_TLS=()
for f in "${SSL_CERT_FILE:-}" /etc/ssl/certs/ca-certificates.crt; do
	if [[ -n "$f" && -f "$f" ]]; then
		BUD_TLS=(--volume "$(realpath "$f"):/etc/ssl/certs/ca-certificates.crt:ro")
		break
	fi
done

# One run at a time per clone: two would race on the storage and the archives.
exec 9>"$STATE/images.lock"
if ! flock -n 9; then
	say "another images.sh is building in this clone; waiting for it"
	flock 9
fi

container=""  # the working container of the base build, removed on any exit
cleanup() {
	[[ -z "$container" ]] || "${B[@]}" rm "$container" >/dev/null 2>&1 || true
	rm -f "$TMPDIR"/*.tar.tmp 2>/dev/null || true
}
trap cleanup EXIT

# Run a build step with its output in the image's log; on failure show the log's tail.
logged() {  # NAME STEP CMD...
	local name="$1" step="$2"; shift 2
	echo "+ $step: $*" >>"$LOGS/$name.log"
	if ! "$@" >>"$LOGS/$name.log" 2>&1; then
		tail -n 25 "$LOGS/$name.log" >&2
		die "building $name failed in $step (full log: $(real "$LOGS/$name.log"))"
	fi
}

# A hash of files' paths (relative to the repository) and contents, with extra strings.
inputs_hash() {  # FILE... -- STRING...
	local files=() f
	while [[ $# -gt 0 && "$1" != -- ]]; do files+=("$1"); shift; done
	[[ $# -gt 0 ]] && shift
	{
		for f in "${files[@]}"; do
			[[ -f "$f" ]] || continue
			printf '%s %s\n' "${f#"$ROOT"/}" "$(sha256sum <"$f" | cut -d' ' -f1)"
		done
		printf '%s\n' "$@"
	} | sha256sum | cut -c1-32
}

stamp_of() { echo "$OUT/.$1.stamp"; }
archive_of() { echo "$OUT/$1.tar"; }
fresh() {  # NAME HASH: the archive exists and was built from these inputs
	[[ -s "$(archive_of "$1")" && -f "$(stamp_of "$1")" && "$(cat "$(stamp_of "$1")")" == "$2" ]]
}

# Write IMAGE (in the storage) to NAME's archive under the reference REF, then its stamp.
export_archive() {  # NAME REF HASH
	local name="$1" ref="$2" hash="$3" tmp="$TMPDIR/$1.tar.tmp"
	rm -f "$tmp"
	logged "$name" "buildah push" "${B[@]}" push --quiet "$ref" "docker-archive:$tmp:$ref"
	mv -f "$tmp" "$(archive_of "$name")"
	echo "$hash" >"$(stamp_of "$name")"
}

# The image ID (config digest) a docker archive holds.
archive_image_id() {
	tar -xOf "$1" manifest.json | grep -o '"Config":"[^"]*"' | head -1 | sed 's/.*:"\(sha256:\)\{0,1\}\([0-9a-f]*\)\(\.json\)\{0,1\}"/\2/'
}

# The base image must be in the storage as its archive has it (a wiped storage, or an archive
# built by another run, is loaded from the archive).
ensure_base_in_storage() {
	local want have
	want="$(archive_image_id "$(archive_of base)")"
	have="$("${B[@]}" images --no-trunc --format '{{.ID}}' "$BASE_REF" 2>/dev/null | head -1 || true)"
	if [[ "${have#sha256:}" != "$want" ]]; then
		say "loading the base image from $(real "$(archive_of base)")"
		logged base "buildah pull" "${B[@]}" pull --quiet "docker-archive:$(archive_of base)"
		"${B[@]}" tag "$want" "$BASE_REF" >/dev/null
	fi
}

base_hash() { inputs_hash "$SELF" -- "$SUITE" "$BASE_PACKAGES"; }

build_base() {
	local hash
	hash="$(base_hash)"
	fresh base "$hash" && return 0
	local start=$SECONDS key rootfs c mnt
	: >"$LOGS/base.log"
	# The root filesystem is cached by what debootstrap is asked for (and its packages, in
	# debs/, by name and version), so a change of this script alone does not run it again.
	key="$(printf '%s\n' "$SUITE" minbase "$BASE_PACKAGES" | sha256sum | cut -c1-16)"
	rootfs="$DEBOOTSTRAP_DIR/rootfs-$SUITE-$key"
	if [[ ! -d "$rootfs" ]]; then
		say "debootstrap $SUITE (minbase, $BASE_PACKAGES) from $MIRROR"
		rm -rf "$rootfs.tmp"
		mkdir -p "$DEBOOTSTRAP_DIR/debs"
		logged base debootstrap debootstrap --variant=minbase --include="$BASE_PACKAGES" \
			--cache-dir="$DEBOOTSTRAP_DIR/debs" "$SUITE" "$rootfs.tmp" "$MIRROR"
		mv "$rootfs.tmp" "$rootfs"
	fi
	say "building $BASE_REF"
	# Every other image in the storage derives from the previous base (or is the pause image,
	# rebuilt in a second): drop them with it, so the storage does not grow with each rebuild.
	"${B[@]}" rm --all >/dev/null 2>&1 || true
	"${B[@]}" rmi --all --force >/dev/null 2>&1 || true
	c="$("${B[@]}" from --quiet scratch)"; container="$c"
	mnt="$("${B[@]}" mount "$c")"
	cp -a "$rootfs/." "$mnt/"
	find "$mnt/dev" "$mnt/proc" "$mnt/sys" "$mnt/run" "$mnt/tmp" -mindepth 1 -delete
	# What Debian's own container images set up: no daemons started by package scripts, no
	# package caches or translations kept, no documentation installed (copyright files stay).
	printf '#!/bin/sh\n# no daemons in a container image build\nexit 101\n' >"$mnt/usr/sbin/policy-rc.d"
	chmod 0755 "$mnt/usr/sbin/policy-rc.d"
	cat >"$mnt/etc/apt/apt.conf.d/docker-clean" <<-'EOF'
		DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
		APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
		Dir::Cache::pkgcache "";
		Dir::Cache::srcpkgcache "";
	EOF
	echo 'Acquire::Languages "none";' >"$mnt/etc/apt/apt.conf.d/docker-no-languages"
	echo 'Acquire::GzipIndexes "true";' >"$mnt/etc/apt/apt.conf.d/docker-gzip-indexes"
	echo 'Apt::AutoRemove::SuggestsImportant "false";' >"$mnt/etc/apt/apt.conf.d/docker-autoremove-suggests"
	cat >"$mnt/etc/dpkg/dpkg.cfg.d/docker-excludes" <<-'EOF'
		path-exclude /usr/share/doc/*
		path-include /usr/share/doc/*/copyright
		path-exclude /usr/share/man/*
		path-exclude /usr/share/info/*
		path-exclude /usr/share/locale/*
		path-include /usr/share/locale/locale.alias
		path-exclude /usr/share/lintian/*
	EOF
	rm -f "$mnt/etc/apt/sources.list"
	cat >"$mnt/etc/apt/sources.list.d/debian.sources" <<-EOF
		Types: deb
		URIs: $MIRROR
		Suites: $SUITE $SUITE-updates
		Components: main
		Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

		Types: deb
		URIs: $SECURITY_MIRROR
		Suites: $SUITE-security
		Components: main
		Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
	EOF
	# The point releases and security fixes published since the packages debootstrap took.
	logged base "apt-get upgrade" "${B[@]}" run --isolation chroot --network host "$c" -- sh -c \
		'apt-get update && DEBIAN_FRONTEND=noninteractive apt-get -y upgrade && apt-get clean'
	find "$mnt/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
	find "$mnt/usr/share/doc" -mindepth 1 -type d -empty -delete
	rm -rf "$mnt"/usr/share/man/* "$mnt"/usr/share/info/* "$mnt"/var/lib/apt/lists/* \
		"$mnt"/var/cache/apt/*.bin "$mnt"/var/cache/apt/archives/*.deb "$mnt"/var/cache/debconf/*-old \
		"$mnt"/var/log/apt/* "$mnt"/var/log/dpkg.log "$mnt"/var/log/alternatives.log \
		"$mnt"/var/log/bootstrap.log
	find "$mnt/usr/share/locale" -mindepth 1 -maxdepth 1 -not -name locale.alias -exec rm -rf {} +
	# The runtime provides these; none of the build machine's may stay in the image.
	: >"$mnt/etc/resolv.conf"
	echo localhost >"$mnt/etc/hostname"
	"${B[@]}" umount "$c" >/dev/null
	"${B[@]}" config --cmd bash --env LANG=C.UTF-8 \
		--label "org.opencontainers.image.title=sweeper-debian-base" \
		--label "org.opencontainers.image.description=Debian $SUITE minbase with python3 (tools/cluster/images.sh)" \
		"$c"
	logged base "buildah commit" "${B[@]}" commit --quiet --squash --rm "$c" "$BASE_REF"
	container=""
	export_archive base "$BASE_REF" "$hash"
	say "base built in $((SECONDS - start)) s"
}

# What the trial runner's build copies, as the working tree has it (tracked and untracked files
# git does not ignore; deleted ones are skipped).
trial_runner_files() {
	local f
	for f in Dockerfile .dockerignore setup.cfg pyproject.toml README.md; do echo "$ROOT/$f"; done
	if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
		git -C "$ROOT" ls-files -z --cached --others --exclude-standard -- sweeper trial_runner \
			| sort -zu | tr '\0' '\n' | sed "s#^#$ROOT/#"
	else
		find "$ROOT/sweeper" "$ROOT/trial_runner" -type f -not -path '*/__pycache__/*' | sort
	fi
}

build_trial_runner() {
	local hash files=()
	mapfile -t files < <(trial_runner_files)
	hash="$(inputs_hash "$SELF" "${files[@]}" -- "$(cat "$(stamp_of base)")" "$TRIAL_REF")"
	fresh trial-runner "$hash" && return 0
	local start=$SECONDS
	: >"$LOGS/trial-runner.log"
	ensure_base_in_storage
	say "building $TRIAL_REF from Dockerfile (BASE_IMAGE=$BASE_REF, WITH_TORCH=0)"
	logged trial-runner "buildah bud" "${B[@]}" bud --layers --pull=never --isolation chroot --network host \
		"${BUD_TLS[@]}" \
		--file "$ROOT/Dockerfile" --build-arg "BASE_IMAGE=$BASE_REF" --build-arg WITH_TORCH=0 \
		--tag "$TRIAL_REF" "$ROOT"
	# The previous build's image and code layers, now nameless and unused (the dependency
	# layer's image is the new one's parent, so it stays: the next build reuses it).
	"${B[@]}" rmi --prune >/dev/null 2>&1 || true
	export_archive trial-runner "$TRIAL_REF" "$hash"
	say "trial-runner built in $((SECONDS - start)) s"
}

# The test layer's context: tests/ as the working tree has it, without caches.
test_runner_files() {
	git -C "$ROOT" ls-files -z --cached --others --exclude-standard -- tests \
		| sort -zu | tr '\0' '\n' | sed "s#^#$ROOT/#"
}

build_test_runner() {
	local hash files=() dir="$HERE/images"
	mapfile -t files < <(test_runner_files)
	hash="$(inputs_hash "$SELF" "$dir/test-runner.Containerfile" "${files[@]}" \
		-- "$(cat "$(stamp_of trial-runner)")" "$TEST_REF")"
	fresh test-runner "$hash" && return 0
	local start=$SECONDS ctx="$STATE/test-runner-context" f
	: >"$LOGS/test-runner.log"
	rm -rf "$ctx" && mkdir -p "$ctx"
	for f in "${files[@]}"; do
		[[ -f "$f" ]] || continue
		mkdir -p "$ctx/$(dirname "${f#"$ROOT"/}")" && cp "$f" "$ctx/${f#"$ROOT"/}"
	done
	say "building $TEST_REF (the trial runner + tests/)"
	logged test-runner "buildah bud" "${B[@]}" bud --pull=never --isolation chroot \
		--file "$dir/test-runner.Containerfile" --build-arg "BASE_IMAGE=$TRIAL_REF" \
		--tag "$TEST_REF" "$ctx"
	"${B[@]}" rmi --prune >/dev/null 2>&1 || true
	export_archive test-runner "$TEST_REF" "$hash"
	say "test-runner built in $((SECONDS - start)) s"
}

# Build NAME (tagged REF) on the base image from CONTAINERFILE in CONTEXT, with buildah bud's
# extra ARGS, and export its archive under its inputs' HASH.
build_on_base() {  # NAME REF HASH CONTAINERFILE CONTEXT WHAT ARGS...
	local name="$1" ref="$2" hash="$3" file="$4" context="$5" what="$6" start=$SECONDS
	shift 6
	: >"$LOGS/$name.log"
	ensure_base_in_storage
	say "building $ref ($what)"
	logged "$name" "buildah bud" "${B[@]}" bud --pull=never --isolation chroot "$@" \
		--file "$file" --build-arg "BASE_IMAGE=$BASE_REF" --tag "$ref" "$context"
	"${B[@]}" rmi --prune >/dev/null 2>&1 || true
	export_archive "$name" "$ref" "$hash"
	say "$name built in $((SECONDS - start)) s"
}

build_postgres() {
	local hash dir="$HERE/images"
	hash="$(inputs_hash "$SELF" "$dir/postgres.Containerfile" "$dir/postgres-entrypoint.sh" \
		-- "$(cat "$(stamp_of base)")" "$POSTGRES_REF")"
	fresh postgres "$hash" && return 0
	build_on_base postgres "$POSTGRES_REF" "$hash" "$dir/postgres.Containerfile" "$dir" \
		"Debian's postgresql-$PG_MAJOR" --layers --network host
}

build_dashboard() {
	local hash dir="$HERE/images" optuna
	optuna="$(awk -F'==' '/^[[:space:]]*optuna==/{print $2; exit}' "$ROOT/setup.cfg")"
	[[ -n "$optuna" ]] || die "no optuna==VERSION pin in setup.cfg"
	hash="$(inputs_hash "$SELF" "$dir/dashboard.Containerfile" \
		-- "$(cat "$(stamp_of base)")" "$DASHBOARD_REF" "$optuna")"
	fresh dashboard "$hash" && return 0
	build_on_base dashboard "$DASHBOARD_REF" "$hash" "$dir/dashboard.Containerfile" "$dir" \
		"optuna-dashboard $DASHBOARD_VERSION, optuna $optuna, from PyPI" \
		--layers --network host "${BUD_TLS[@]}" --build-arg "OPTUNA_VERSION=$optuna" \
		--build-arg "DASHBOARD_VERSION=$DASHBOARD_VERSION"
}

build_katib_mnist() {
	local hash dir="$HERE/images"
	hash="$(inputs_hash "$SELF" "$dir/katib-mnist.Containerfile" "$dir/katib-mnist/mnist.py" \
		-- "$(cat "$(stamp_of base)")" "$KATIB_MNIST_REF")"
	fresh katib-mnist "$hash" && return 0
	build_on_base katib-mnist "$KATIB_MNIST_REF" "$hash" "$dir/katib-mnist.Containerfile" \
		"$dir/katib-mnist" "a stand-in for Katib's MNIST example, no sweeper"
}

build_pause() {
	local src
	src="$(cd "$HERE/k8s" && go list -m -f '{{.Dir}}' k8s.io/kubernetes 2>/dev/null)" || src=""
	if [[ -z "$src" || ! -f "$src/build/pause/linux/pause.c" ]]; then
		say "k8s.io/kubernetes is not in the module cache; downloading it (go mod download)"
		(cd "$HERE/k8s" && go mod download k8s.io/kubernetes) >&2 \
			|| die "go mod download k8s.io/kubernetes failed in tools/cluster/k8s"
		src="$(cd "$HERE/k8s" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
	fi
	local c_file="$src/build/pause/linux/pause.c" hash
	[[ -f "$c_file" ]] || die "$c_file is missing from the k8s.io/kubernetes module"
	hash="$(inputs_hash "$SELF" "$c_file" "$HERE/images/pause.Containerfile" \
		-- "$(gcc --version | head -1)" "$PAUSE_REF" "$PAUSE_VERSION")"
	fresh pause "$hash" && return 0
	local start=$SECONDS ctx="$STATE/pause-context"
	: >"$LOGS/pause.log"
	say "building $PAUSE_REF from $c_file"
	rm -rf "$ctx" && mkdir -p "$ctx"
	# As build/pause/Makefile compiles it (CFLAGS there), with this build's version string.
	logged pause gcc gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_VERSION-sweeper" \
		-o "$ctx/pause" "$c_file"
	logged pause strip strip "$ctx/pause"
	logged pause "buildah bud" "${B[@]}" bud --pull=never --isolation chroot \
		--file "$HERE/images/pause.Containerfile" --tag "$PAUSE_REF" "$ctx"
	"${B[@]}" rmi --prune >/dev/null 2>&1 || true
	export_archive pause "$PAUSE_REF" "$hash"
	say "pause built in $((SECONDS - start)) s"
}

if [[ $needs_base == 1 ]]; then
	build_base
fi
for name in "${want[@]}"; do
	case "$name" in
		trial-runner) build_trial_runner ;;
		test-runner) build_trial_runner; build_test_runner ;;
		postgres) build_postgres ;;
		dashboard) build_dashboard ;;
		katib-mnist) build_katib_mnist ;;
		pause) build_pause ;;
	esac
	real "$(archive_of "$name")"
done
