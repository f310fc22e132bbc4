#!/bin/sh
# Prepare, on a Debian machine with apt, what scripts/gpu/check.sh needs on a GPU
# machine of another image (CUDA with nvcc, PyTorch, cuDNN; no Debian -dev
# packages; nothing to download): the Debian runtime libraries the GPU check
# links (kept as .deb files, unpacked there) and the -dev packages' headers
# (unpacked here), and titan-train built here with what it links.  The GPU
# check builds only what the GPU tests and benchmarks link (make GPU_CHECK=1):
# OpenBLAS, oneDNN, cmocka, CUDA; nothing else.
#
#   make && make build/tests/shard/test_gen build/tests/comm/test_comm_nccl build/tests/comm/bench_comm \
#	build/tests/fluxtrain/test_fluxtrain
#   sh scripts/gpu/prepare.sh [DIR]      DIR defaults to .gpu-deps (ignored by git)
#
# Then name DIR in the device call's carry list; check.sh finds it there.
set -eu

dest=${1:-.gpu-deps}
# Runtime libraries, unpacked on the GPU machine: OpenBLAS (the CPU reference the
# tests compare with) and its Fortran runtime, cmocka; make in case the image
# has none.
RUNTIME="libopenblas0-pthread libgfortran5 libquadmath0 libcmocka0 make"
# titan-train runs there as built here (that image has no -dev packages for
# MPI, oneDNN, zstd or jansson to build it with): the programs below, stripped,
# and the runtime libraries they link beyond RUNTIME's (Open MPI with what its
# components load, and openmpi-bin's mpirun and orted, which a singleton
# starts too; check.sh points OPAL_PREFIX at the unpacked copy).  The comm
# stage's NCCL test and bandwidth benchmark are carried the same way (the
# GPU_CHECK build leaves lib/comm out).  CUDA's libraries (cuBLASLt, cuDNN,
# NCCL) come from the GPU machine's own.
TRAIN_RUNTIME="libzstd1 libjansson4 libdnnl2 libgomp1 ocl-icd-libopencl1 libopenmpi3 openmpi-common
	openmpi-bin libpmix2 libmunge2 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7 libudev1 zlib1g"
TRAIN_PROGRAMS="bin/titan-train bin/titan-shard build/tests/shard/test_gen build/tests/comm/test_comm_nccl
	build/tests/comm/bench_comm build/tests/fluxtrain/test_fluxtrain"
# Headers only: cblas.h, cmocka.h, OpenSSL's for lib/core's sha256.c, oneDNN's
# for the CPU backend's bf16 products, jansson's for the model families' HF
# config writers (their libraries are in TRAIN_RUNTIME).
DEV="libopenblas-pthread-dev libcmocka-dev libssl-dev libdnnl-dev libjansson-dev"

command -v apt-get >/dev/null || { echo "prepare.sh: needs apt-get (a Debian machine)" >&2; exit 1; }
for f in $TRAIN_PROGRAMS; do
	[ -x "$f" ] || { echo "prepare.sh: no $f: build first (make; make $f)" >&2; exit 1; }
done
rm -rf "$dest"
mkdir -p "$dest/debs" "$dest/include" "$dest/.dev"
# apt-get download writes into the current folder; as root it warns that _apt
# cannot write there, which is harmless.
(cd "$dest/debs" && apt-get download $RUNTIME $TRAIN_RUNTIME 2>&1 |
	grep -v '^W: Download is performed unsandboxed' >&2 || true)
(cd "$dest/.dev" && apt-get download $DEV 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2 || true)
for p in $RUNTIME $TRAIN_RUNTIME; do
	ls "$dest/debs/${p}_"*.deb >/dev/null 2>&1 || { echo "prepare.sh: could not download $p" >&2; exit 1; }
done
for d in "$dest"/.dev/*.deb; do
	dpkg-deb -x "$d" "$dest/.dev/root"
done
inc=$dest/.dev/root/usr/include
cp "$inc/x86_64-linux-gnu/openblas-pthread/cblas.h" \
	"$inc/x86_64-linux-gnu/openblas-pthread/openblas_config.h" "$dest/include/"
cp "$inc/cmocka.h" "$inc/cmocka_pbc.h" "$dest/include/"
cp -r "$inc/openssl" "$dest/include/"
cp "$inc"/dnnl*.h "$dest/include/"
cp -r "$inc/oneapi" "$dest/include/"
cp "$inc/jansson.h" "$inc/jansson_config.h" "$dest/include/"
cp "$inc/x86_64-linux-gnu/openssl/"*.h "$dest/include/openssl/"
rm -rf "$dest/.dev"
for f in $TRAIN_PROGRAMS; do
	mkdir -p "$dest/$(dirname "$f")"
	strip -o "$dest/$f" "$f"
done
# The Flux trainer's stage reads the cc12m test shard and the test tokenizer
# (3 MB; ../shared is not carried): DIR/fixtures is its TITAN_FIXTURES.
fixtures=${TITAN_FIXTURES:-../shared/fixtures}
for fx in torchtitan_assets/cc12m_test tokenizers/torchtitan_test; do
	if [ -d "$fixtures/$fx" ]; then
		mkdir -p "$dest/fixtures/$(dirname "$fx")"
		cp -r "$fixtures/$fx" "$dest/fixtures/$fx"
	else
		echo "prepare.sh: no fixture $fixtures/$fx: the flux-train stage will skip" >&2
	fi
done

# cuDNN's headers of this machine's CUDA, for a GPU machine whose cuDNN came
# without them (a pip wheel's library): the backend API is stable across 9.x.
cuda=${CUDA_HOME:-/usr/local/cuda}
if ls "$cuda"/include/cudnn*.h >/dev/null 2>&1; then
	mkdir -p "$dest/include/cudnn"
	cp "$cuda"/include/cudnn*.h "$dest/include/cudnn/"
fi

{
	echo "# made by scripts/gpu/prepare.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	for d in "$dest"/debs/*.deb; do
		dpkg-deb -W --showformat='${Package} ${Version}\n' "$d"
	done
} >"$dest/MANIFEST"
echo "prepare.sh: $dest holds $(du -sh "$dest" | cut -f1)" \
	"($(ls "$dest"/debs | wc -l) packages, $(find "$dest/include" -type f | wc -l) headers)"
