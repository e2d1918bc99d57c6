//! The `hello` demo in the languages other than Rust (`guest/python/hello`,
//! `guest/js/hello`, `guest/c/hello`): two runs on one data directory share
//! the demo's bucket, so the counter goes up.

use crate::common::*;

/// What two runs of `name` on one data directory print, the first run
/// with `first` as its arguments and the second with `second`.
fn two_runs(name: &str, first: &[&str], second: &[&str]) -> [String; 2] {
    let dir = tempfile::tempdir().unwrap();
    [first, second].map(|args| {
        let out = run_cli(name, dir.path(), &[], args);
        let stdout = text(&out.stdout);
        assert!(
            out.status.success(),
            "{name}: {stdout}\n{}",
            text(&out.stderr)
        );
        stdout
    })
}

fn assert_counts(name: &str, said: &[String; 2]) {
    assert!(
        said[0].contains("This is the first run"),
        "{name}: {}",
        said[0]
    );
    assert!(
        said[1].contains("has now run 2 times"),
        "{name}: {}",
        said[1]
    );
}

/// Python and C greet their visitors and remember the latest ones.
#[test]
fn hello_python_and_c_count_their_runs_and_remember_visitors() {
    for name in ["hello-py", "hello-c"] {
        let said = two_runs(name, &["Ada"], &["Grace"]);
        assert_counts(name, &said);
        assert!(said[0].contains("Hello, Ada!"), "{name}: {}", said[0]);
        assert!(
            said[1].contains("visitors: Grace, Ada"),
            "{name}: {}",
            said[1]
        );
    }
}

/// JavaScript guests get no arguments: the counter only.
#[test]
fn hello_js_counts_its_runs() {
    let said = two_runs("hello-js", &[], &[]);
    assert_counts("hello-js", &said);
}
