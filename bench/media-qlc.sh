#!/bin/sh
# Evidence for "media aware": one emulated QLC drive (sim:qlc, P4320-class,
# 64 KiB IU) written (a) with 4 KiB random writes at full span and (b) with the
# same user writes as 4 KiB puts through masse (fast tier on sim:optane).
# Prints device WAF, host WAF, NAND writes and erases per user byte, and the
# latency of 4 KiB reads issued during the writes, side by side; writes
# bench/results/media-qlc.{json,md}. Virtual time: deterministic, the figures
# are the model's (docs/media.md), independent of this machine's load.
set -eu
cd "$(dirname "$0")/.."
nice -n 10 cargo build --release -p masse-cli >/dev/null
exec flock /tmp/masse-bench.lock ./target/release/masse media-bench \
    --qlc "${QLC:-2GiB}" --optane "${OPTANE:-1GiB}" --out bench/results "$@"
