//! `wasi:keyvalue` guests (both drafts) on alk's buckets: wasmtime's own
//! test program's steps through the CLI, the draft2 behaviour, and races
//! and paging across OS processes, on the file engine (both kv formats) and
//! on Postgres.

use std::collections::BTreeMap;

use crate::common::*;

fn ok_run(name: &str, store: &(impl StoreArgs + ?Sized), extra: &[&str], args: &[&str]) -> String {
    let out = run_cli(name, store, extra, args);
    assert!(
        out.status.success(),
        "{name} {args:?} failed ({}):\n{}\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// The value of `key` in `bucket`, read through `alk:store/kv`.
fn alk_get(store: &(impl StoreArgs + ?Sized), bucket: &str, key: &str) -> String {
    ok_run("kv-tool", store, &[], &["get", bucket, key])
        .trim_end()
        .to_string()
}

/// wasmtime's `keyvalue_main` steps, by a guest that knows only
/// `wasi:keyvalue@0.2.0-draft`, through `alk-host run`; what it wrote is
/// alk data, visible through `alk:store/kv` in the default bucket.
fn wasmtimes_keyvalue_main_passes_and_its_data_is_alk_data(store: &Store) {
    // wasmtime's test host presets `atomics_key = "5"`.
    ok_run(
        "kv-tool",
        store,
        &[],
        &["set", "default", "atomics_key", "5"],
    );
    let out = ok_run("keyvalue-draft", store, &[], &["main"]);
    assert_eq!(out.trim(), "ok");
    assert_eq!(alk_get(store, "default", "atomics_key"), "6");
    assert_eq!(alk_get(store, "default", "b1"), "v1");
    for gone in ["a1", "c1", "hello"] {
        assert_eq!(alk_get(store, "default", gone), "(absent)");
    }
    let scan = ok_run("kv-tool", store, &[], &["scan", "default", ""]);
    assert_eq!(scan.lines().collect::<Vec<_>>(), ["atomics_key=6", "b1=v1"]);
    // `--keyvalue-bucket` moves the store "" elsewhere; other identifiers
    // name their bucket.
    ok_run(
        "kv-tool",
        store,
        &[],
        &["set", "elsewhere", "atomics_key", "41"],
    );
    let out = run_cli(
        "keyvalue-draft",
        store,
        &["--keyvalue-bucket", "elsewhere"],
        &["increment", "", "atomics_key", "1"],
    );
    assert_eq!(text(&out.stdout).trim(), "42", "{}", text(&out.stderr));
    assert_eq!(alk_get(store, "elsewhere", "atomics_key"), "42");
    let out = ok_run("keyvalue-draft", store, &[], &["open", "no/such"]);
    assert_eq!(out.trim(), "error: Error::NoSuchStore");
}

/// The draft2 steps docs/keyvalue.md describes.
fn draft2_behaves_as_documented(store: &Store) {
    let out = ok_run("keyvalue-draft2", store, &[], &["check", "d2"]);
    let steps: Vec<&str> = out.lines().collect();
    assert_eq!(
        steps,
        [
            "ok set-get-exists-delete",
            "ok increment-is-signed-decimal-text",
            "ok compare-and-swap-wins-once-and-retries",
            "ok get-many-answers-every-key",
            "ok list-keys-pages-with-string-cursors",
            "ok errors-name-the-alk-case",
            "done"
        ]
    );
    assert_eq!(alk_get(store, "d2", "n"), "-3");
    assert_eq!(alk_get(store, "d2", "c"), "3");
}

on_every_engine! {
    wasmtimes_keyvalue_main_passes_and_its_data_is_alk_data;
    draft2_behaves_as_documented;
}

/// The same on `localkv.v2` buckets, where compare-and-swap compares
/// versions, and on the in-memory engine.
#[test]
fn keyvalue_guests_pass_on_localkv_v2_buckets_and_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    ok_run(
        "kv-tool",
        dir.path(),
        &["--new-kv", "v2"],
        &["set", "default", "atomics_key", "5"],
    );
    ok_run(
        "kv-tool",
        dir.path(),
        &["--new-kv", "v2"],
        &["set", "d2", "x", "y"],
    );
    ok_run("kv-tool", dir.path(), &[], &["delete", "d2", "x"]);
    let out = ok_run("keyvalue-draft", dir.path(), &[], &["main"]);
    assert_eq!(out.trim(), "ok");
    let out = ok_run("keyvalue-draft2", dir.path(), &[], &["check", "d2"]);
    assert!(out.ends_with("done\n"), "{out}");
    for bucket in ["default", "d2"] {
        let file = dir.path().join(format!("kv/{bucket}/localkv.sqlite"));
        let meta = sqlite_schema("store", &file);
        assert_eq!(
            meta["meta"],
            serde_json::json!([["format", "localkv.v2"]]),
            "{bucket}: {meta}"
        );
        assert_eq!(meta["integrity"], "ok");
    }
    let engine = std::sync::Arc::new(alk_store::memory::MemoryEngine::new());
    let mem = || alk_host::AlkCtx::builder().engine(engine.clone()).build();
    let out = run_lib("keyvalue-draft2", mem(), &["check", "d2"]);
    assert_eq!(out.exit_code(), 0, "{}", text(&out.stderr));
    assert!(text(&out.stdout).ends_with("done\n"));
}

/// Four processes compare-and-swap the same keys, round after round: each
/// round has exactly one winner, and the key holds the winner's id.
fn cas_races_have_one_winner_per_round(store: &Store, extra: &[&str]) {
    const ROUNDS: usize = 60;
    // Even rounds start from a value, odd ones from an absent key.
    let out = ok_run("keyvalue-draft2", store, extra, &["fill", "race", "0"]);
    assert_eq!(out.trim(), "filled 0");
    for r in (0..ROUNDS).step_by(2) {
        ok_run(
            "kv-tool",
            store,
            &[],
            &["set", "race", &format!("race-{r}"), "start"],
        );
    }
    let rounds = ROUNDS.to_string();
    let children: Vec<_> = (0..4)
        .map(|i| {
            spawn_guest(
                store,
                "keyvalue-draft2",
                &["cas-race", "race", &rounds, &format!("p{i}")],
            )
        })
        .collect();
    let mut winners: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (i, child) in children.into_iter().enumerate() {
        let out = finish(child, &format!("racer p{i}"));
        assert!(out.ends_with("done\n"), "{out}");
        for r in out.lines().filter_map(|l| l.strip_prefix("won ")) {
            winners
                .entry(r.parse().unwrap())
                .or_default()
                .push(format!("p{i}"));
        }
    }
    for r in 0..ROUNDS {
        let won = winners.get(&r).cloned().unwrap_or_default();
        assert_eq!(won.len(), 1, "round {r}: winners {won:?}");
        assert_eq!(
            alk_get(store, "race", &format!("race-{r}")),
            won[0],
            "round {r}"
        );
    }
}

/// Increments from four processes, both drafts, all count.
fn increments_from_four_processes_all_count(store: &Store) {
    let children: Vec<_> = (0..4)
        .map(|i| {
            if i % 2 == 0 {
                spawn_guest(
                    store,
                    "keyvalue-draft2",
                    &["increment", "n", "c", "50", "1"],
                )
            } else {
                spawn_guest(store, "keyvalue-draft", &["increment", "n", "c", "50"])
            }
        })
        .collect();
    for (i, child) in children.into_iter().enumerate() {
        finish(child, &format!("incrementer {i}"));
    }
    assert_eq!(alk_get(store, "n", "c"), "200");
}

/// A listing pages through 3,000 keys while three processes keep storing
/// and deleting keys among them: every key present throughout is listed
/// exactly once, in order, with either draft's cursor.
fn paging_sees_every_stable_key_once_while_others_write(store: &Store) {
    let out = ok_run("keyvalue-draft2", store, &[], &["fill", "pages", "3000"]);
    assert_eq!(out.trim(), "filled 3000");
    let writers: Vec<_> = (0..3)
        .map(|i| {
            spawn_guest(
                store,
                "keyvalue-draft2",
                &["churn", "pages", "400", &i.to_string()],
            )
        })
        .collect();
    let listers = [
        spawn_guest(store, "keyvalue-draft2", &["list", "pages", "150"]),
        spawn_guest(store, "keyvalue-draft", &["list", "pages"]),
        spawn_guest(store, "keyvalue-draft2", &["list", "pages", "0"]),
    ];
    let want: Vec<String> = (0..3000).map(|i| format!("s-{i:05}")).collect();
    for (i, child) in listers.into_iter().enumerate() {
        let out = finish(child, &format!("lister {i}"));
        let keys: Vec<&str> = out.lines().filter(|l| !l.starts_with("listed ")).collect();
        assert!(
            keys.windows(2).all(|w| w[0] < w[1]),
            "lister {i}: keys out of order or repeated"
        );
        let stable: Vec<&str> = keys
            .iter()
            .copied()
            .filter(|k| !k.ends_with("-churn"))
            .collect();
        assert_eq!(stable, want, "lister {i}: the stable keys, each once");
        assert!(out.ends_with(&format!("listed {}\n", keys.len())));
    }
    for (i, child) in writers.into_iter().enumerate() {
        assert_eq!(finish(child, &format!("writer {i}")).trim(), "churned 400");
    }
}

#[test]
fn cas_races_have_one_winner_per_round_across_4_processes_on_localkv_v1() {
    cas_races_have_one_winner_per_round(&Store::dir(), &[]);
}

#[test]
fn cas_races_have_one_winner_per_round_across_4_processes_on_localkv_v2() {
    // The first process creates the bucket as v2; the racers, started
    // without the option, use it as v2 because the file says so.
    cas_races_have_one_winner_per_round(&Store::dir(), &["--new-kv", "v2"]);
}

#[test]
fn cas_races_have_one_winner_per_round_across_4_processes_on_postgres() {
    cas_races_have_one_winner_per_round(&Store::postgres(), &[]);
}

on_every_engine! {
    increments_from_four_processes_all_count;
    paging_sees_every_stable_key_once_while_others_write;
}

/// An embedder's default bucket that is no valid or allowed bucket name:
/// `open("")` fails with a text that blames the host's setting, other
/// stores still open, and nothing is created for the bad name.
#[test]
fn a_misconfigured_default_bucket_is_reported_as_the_hosts_setting() {
    for (bad, case) in [("a/b", "invalid-name"), ("__alkstore_x", "reserved-name")] {
        let dir = tempfile::tempdir().unwrap();
        let ctx = || {
            alk_host::AlkCtx::builder()
                .data_dir(dir.path())
                .keyvalue_default_bucket(bad)
                .build()
        };
        let out = run_lib("keyvalue-draft", ctx(), &["open", ""]);
        let said = text(&out.stdout);
        assert_eq!(out.exit_code(), 0, "{said}{}", text(&out.stderr));
        assert!(
            said.starts_with(&format!("error: Error::Other(\"{case}: "))
                && said.contains("--keyvalue-bucket"),
            "{bad}: {said}"
        );
        let out = run_lib("keyvalue-draft", ctx(), &["open", "fine"]);
        assert_eq!(text(&out.stdout).trim(), "opened", "{bad}");
        assert!(!dir.path().join("kv/a").exists());
    }
}
