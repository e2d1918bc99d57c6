//! Several `alk-host run` processes on one data directory, or one database.

use std::collections::HashMap;
use std::process::Stdio;

use crate::common::*;

const PROCESSES: usize = 4;
const KEYS: usize = 600;

fn conditional_set_has_exactly_one_winner_per_key_across_processes(store: &Store) {
    // Create the bucket first so every racer starts on the same store.
    let out = run_cli("kv-tool", store, &[], &["set", "race", "warmup", "x"]);
    assert!(out.status.success());
    let children: Vec<_> = (0..PROCESSES)
        .map(|w| {
            alk_host()
                .arg("run")
                .arg(guest("kv-race"))
                .args(store.store_args())
                .args(["--", "race", &KEYS.to_string(), &format!("w{w}")])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn alk-host")
        })
        .collect();
    let mut winners: HashMap<String, Vec<String>> = HashMap::new();
    for (w, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        let stdout = text(&out.stdout);
        assert!(
            out.status.success(),
            "racer w{w} failed: {stdout}{}",
            text(&out.stderr)
        );
        let wins: Vec<&str> = stdout
            .lines()
            .filter_map(|l| l.strip_prefix("win "))
            .collect();
        let done: usize = stdout
            .lines()
            .find_map(|l| l.strip_prefix("done "))
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(wins.len(), done);
        for key in wins {
            winners
                .entry(key.to_string())
                .or_default()
                .push(format!("w{w}"));
        }
    }
    assert_eq!(winners.len(), KEYS, "some keys had no winner");
    for (key, who) in &winners {
        assert_eq!(who.len(), 1, "{key} won by {who:?}");
    }
    // The store agrees with what each winner was told.
    let out = run_cli("kv-tool", store, &[], &["scan", "race", "k"]);
    let stored: HashMap<String, String> = text(&out.stdout)
        .lines()
        .map(|l| {
            let (k, v) = l.split_once('=').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect();
    assert_eq!(stored.len(), KEYS);
    for (key, who) in &winners {
        assert_eq!(&stored[key], &who[0], "{key}");
    }
}

on_every_engine! {
    conditional_set_has_exactly_one_winner_per_key_across_processes;
}
