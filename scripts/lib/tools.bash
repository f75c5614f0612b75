# The tools the scripts install when they are missing (sourced).

# The nightly toolchain: rustdoc JSON and cargo fuzz need it.
need_nightly() {
    if ! rustup toolchain list | grep -q '^nightly'; then
        echo "installing the nightly toolchain" >&2
        rustup toolchain install nightly --profile minimal
    fi
}

# cargo-fuzz, with the nightly toolchain it runs under.
need_cargo_fuzz() {
    need_nightly
    if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
        echo "installing cargo-fuzz" >&2
        cargo install cargo-fuzz --locked
    fi
}

# cargo-nextest, which scripts/test runs the tests with.
need_cargo_nextest() {
    if ! cargo nextest --version >/dev/null 2>&1; then
        echo "installing cargo-nextest" >&2
        cargo install cargo-nextest --locked
    fi
}
