#!/usr/bin/env bash
# `make images`: the koord-webhook and koord-applier images as OCI archives, built offline.
#
#   images/build.sh            release build of both binaries, then one archive per image
#
# Image names: ${KOORD_IMAGE_REPO:-ghcr.io/koord-qos}/<binary>:<crate version>, the names
# manifests/ references (checked below, so the two cannot drift apart). Each image is the
# binary plus exactly the shared libraries ldd reports for it (glibc, libgcc_s, libm and the
# loader), an /etc/passwd and nothing else: no shell, no package manager. images/Dockerfile
# builds the same layout from distroless for a CI with a registry.
#
# Output: ${KOORD_IMAGE_OUT:-<cargo target dir>/images}/<binary>-<version>.oci.tar, and one
# line per image on stdout: "<name> <archive>". Load one with
#   ctr -n k8s.io images import <archive>
#
# Environment: KOORD_IMAGE_REPO, KOORD_IMAGE_OUT, KOORD_IMAGE_BIN_DIR (prebuilt binaries:
# skip cargo), KOORD_IMAGE_PGO=1 (the webhook built with profile-guided optimization by
# webhook/benches/pgo.sh, which needs llvm-profdata and h2load: what release images ship;
# the applier stays a plain release build), CARGO, CARGO_TARGET_DIR.
set -Eeuo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
PROG=images/build.sh
die() { echo "$PROG: error: $*" >&2; exit 1; }
log() { echo "$PROG: $*" >&2; }

CARGO=${CARGO:-cargo}
for tool in "$CARGO" python3 ldd strip; do
    command -v "$tool" >/dev/null || die "$tool not found"
done

meta=$("$CARGO" metadata --no-deps --format-version 1 --manifest-path "$repo/Cargo.toml") ||
    die "cargo metadata failed"
read -r version target_dir < <(python3 -c '
import json, sys
m = json.load(sys.stdin)
v = {p["name"]: p["version"] for p in m["packages"]}
assert v["koord-webhook"] == v["koord-applier"], v
print(v["koord-webhook"], m["target_directory"])' <<<"$meta") || die "cannot read the crate version"

registry=${KOORD_IMAGE_REPO:-ghcr.io/koord-qos}
out=${KOORD_IMAGE_OUT:-$target_dir/images}
mkdir -p "$out"

if [[ -n ${KOORD_IMAGE_BIN_DIR:-} ]]; then
    bin=$KOORD_IMAGE_BIN_DIR
    log "using prebuilt binaries from $bin"
else
    log "cargo build --release -p koord-webhook -p koord-applier"
    (cd "$repo" && "$CARGO" build --release -p koord-webhook -p koord-applier) ||
        die "cargo build failed"
    bin=$target_dir/release
fi
pgo_bin=
if [[ ${KOORD_IMAGE_PGO:-0} == 1 ]]; then
    log "webhook/benches/pgo.sh (profile-guided koord-webhook)"
    # pgo.sh prints the webhook's binary, then the floor's; read both (no early-closed pipe).
    pgo_out=$(cd "$repo" && webhook/benches/pgo.sh) || die "PGO build failed"
    pgo_bin=$repo/${pgo_out%%$'\n'*}
fi

revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

passwd_root='root:x:0:0:root:/root:/sbin/nologin\n'
passwd_nonroot='nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n'

# image BINARY USER PORTS... : one archive; the binary is stripped of debug info (the release
# profile keeps line tables for perf; the image does not need them).
image() {
    local name=$1 user=$2
    shift 2
    local ref="$registry/$name:$version" archive="$out/$name-$version.oci.tar"
    local from=$bin/$name
    [[ $name == koord-webhook && -n $pgo_bin ]] && from=$pgo_bin
    [[ -x $from ]] || die "$from is missing"
    strip --strip-debug -o "$stage/$name" "$from"
    local args=(--name "$ref" --out "$archive"
        --add "$stage/$name:/usr/local/bin/$name:0755" --with-libs "/usr/local/bin/$name"
        --entrypoint "[\"/usr/local/bin/$name\"]"
        --user "$user"
        --label "org.opencontainers.image.title=$name"
        --label "org.opencontainers.image.version=$version"
        --label "org.opencontainers.image.revision=$revision"
        --label "org.opencontainers.image.licenses=Apache-2.0")
    local p
    for p in "$@"; do args+=(--port "$p"); done
    if [[ $user == 0:0 ]]; then
        args+=(--text "/etc/passwd=$passwd_root" --text "/etc/group=root:x:0:\n")
    else
        args+=(--text "/etc/passwd=$passwd_root$passwd_nonroot"
            --text "/etc/group=root:x:0:\nnonroot:x:65532:\n" --dir /home/nonroot:0755)
    fi
    python3 "$here/oci.py" "${args[@]}" >/dev/null || die "assembling $ref failed"
    log "$ref -> $archive ($(du -h "$archive" | cut -f1))"
    echo "$ref $archive"
}

# The webhook runs as an unprivileged user (the Deployment also says runAsNonRoot/65532).
image koord-webhook 65532:65532 9443/tcp 8080/tcp
# The applier is root in the image; the DaemonSet drops every capability but the three it
# needs (DAC_OVERRIDE, SYS_NICE, SYS_PTRACE).
image koord-applier 0:0 9316/tcp

# manifests/ must reference exactly these names (with another registry, an overlay's
# `images:` entry renames them; see tests/node/README.md).
if [[ $registry != ghcr.io/koord-qos ]]; then
    log "KOORD_IMAGE_REPO=$registry: manifests/ still reference ghcr.io/koord-qos/*:$version"
    exit 0
fi
for name in koord-webhook koord-applier; do
    want="$registry/$name:$version"
    mapfile -t refs < <(grep -rhoE "image:[[:space:]]*[^[:space:]]*${name}[^[:space:]]*" "$repo/manifests" |
        sed -E 's/^image:[[:space:]]*//')
    [[ ${#refs[@]} -gt 0 ]] || die "manifests/ has no image reference for $name"
    for r in "${refs[@]}"; do
        [[ $r == "$want" ]] || die "manifests/ references $r but the build makes $want"
    done
done
