//! Prints `ready` and exits. Imports nothing but WASI, so `alk-host run` and
//! `wasmtime run` can both run it: the baseline of the start-up benchmark.

fn main() {
    println!("ready");
}
