//! Imports `alk:test/nowhere`, which no host provides: `alk-host run`
//! must refuse it, naming the interface.

wit_bindgen::generate!({
    inline: "
        package alk:test;
        interface nowhere {
            ping: func() -> u32;
        }
        world foreign {
            import nowhere;
        }
    ",
    world: "alk:test/foreign",
});

fn main() {
    println!("{}", alk::test::nowhere::ping());
}
