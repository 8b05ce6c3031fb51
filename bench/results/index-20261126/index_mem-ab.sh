#!/bin/bash
# Interleaved A/B of the index: old (16-byte slots, growth 1.25) vs new (packed, 1.125).
for i in 1 2 3; do
  for mode in "" "--presize"; do
    for b in index_mem_base index_mem_c; do
      out=$(/tmp/$b --keys 20000000 --threads 1 $mode)
      ins=$(echo "$out" | awk '/^insert:/{print $2}')
      hit=$(echo "$out" | awk '/^get \(hits\)/{print $3}')
      mis=$(echo "$out" | awk '/^get \(misses\)/{print $3}')
      bpk=$(echo "$out" | awk '/^bytes\/key/{print $2}')
      echo "$i ${mode:-grown} $b bpk=$bpk insert=$ins hit=$hit miss=$mis"
    done
  done
done
