//! Exports one function of its own world and nothing a host calls:
//! neither `alk-host run` nor `alk-host serve` can use it.

wit_bindgen::generate!({
    inline: "
        package alk:test;
        world library {
            export add: func(a: u32, b: u32) -> u32;
        }
    ",
    world: "alk:test/library",
});

struct Library;

impl Guest for Library {
    fn add(a: u32, b: u32) -> u32 {
        a.wrapping_add(b)
    }
}

export!(Library);
