#!/bin/bash -eu
# Builds every fuzz target of fuzz/ with cargo fuzz (address sanitizer, release with debug
# assertions) and puts each into $OUT beside its seed corpus and its libFuzzer options.
cd "$SRC/simclr/fuzz"
cargo fuzz build -O --debug-assertions
for target in $(cargo fuzz list); do
    cp "target/x86_64-unknown-linux-gnu/release/$target" "$OUT/"
    if [ -d "corpus/$target" ]; then
        (cd "corpus/$target" && zip -q -r "$OUT/${target}_seed_corpus.zip" .)
    fi
    if [ -f "options/$target.options" ]; then
        cp "options/$target.options" "$OUT/"
    fi
done
