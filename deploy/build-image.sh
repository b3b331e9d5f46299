#!/usr/bin/env bash
# Builds the `engram:dev` image on a machine with no registry access: the image is FROM scratch
# and holds only the engram binary, exactly the shared libraries `ldd` says it loads (with the
# dynamic loader), a passwd/group entry for the non-root user 65532, and the /data and /tmp
# directories. `deploy/Dockerfile` is the standard multi-stage build for machines that can pull
# base images.
#
#   deploy/build-image.sh                      release build, tag engram:dev
#   deploy/build-image.sh --profile debug      reuse the debug build the tests made (faster)
#   deploy/build-image.sh --binary PATH --tag engram:test
set -euo pipefail
cd "$(dirname "$0")/.."

profile=release
tag=engram:dev
bin=""
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --binary) bin=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "build-image.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

if [ -z "$bin" ]; then
  case "$profile" in
    release) cargo build --release -p engram-cli; bin=target/release/engram ;;
    debug) cargo build -p engram-cli; bin=target/debug/engram ;;
    *) echo "build-image.sh: --profile must be release or debug" >&2; exit 2 ;;
  esac
fi
[ -x "$bin" ] || { echo "build-image.sh: $bin is not an executable" >&2; exit 1; }
command -v docker >/dev/null || { echo "build-image.sh: docker is not installed" >&2; exit 1; }

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
root="$ctx/root"
mkdir -p "$root/etc" "$ctx/data" "$ctx/tmp"
chmod 1777 "$ctx/tmp"
# Debug symbols are not needed at run time; the release binary is already lean.
strip --strip-debug -o "$root/engram" "$bin"

# Every library the binary loads, and the loader itself, at the paths it expects them.
libs=$(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' | sort -u)
[ -n "$libs" ] || { echo "build-image.sh: ldd listed no libraries for $bin" >&2; exit 1; }
for lib in $libs; do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done

printf 'root:x:0:0:root:/:/engram\nengram:x:65532:65532:engram:/data:/engram\n' >"$root/etc/passwd"
printf 'root:x:0:\nengram:x:65532:\n' >"$root/etc/group"

cat >"$ctx/Dockerfile" <<'EOF'
FROM scratch
COPY root/ /
COPY --chown=65532:65532 data/ /data/
COPY tmp/ /tmp/
USER 65532:65532
ENV ENGRAM_LISTEN=0.0.0.0:7001 \
    ENGRAM_DATA_DIR=/data \
    NO_COLOR=1
EXPOSE 7001
VOLUME ["/data"]
HEALTHCHECK --interval=5s --timeout=3s --start-period=5s --retries=3 \
  CMD ["/engram", "health", "--service", "engram.live"]
ENTRYPOINT ["/engram"]
CMD ["serve"]
EOF

docker build --quiet --tag "$tag" \
  --label "org.opencontainers.image.title=engram" \
  --label "org.opencontainers.image.description=Replicated, verifiable memory for agents" \
  "$ctx" >/dev/null
size=$(docker image inspect "$tag" --format '{{.Size}}')
echo "built $tag from $bin: $(echo "$libs" | wc -l) shared libraries, $((size / 1024 / 1024)) MiB"
