//! The Python `hello` demo (`guest/python/hello`, built on the `alk_store`
//! package): two runs on one data directory share its bucket.

use crate::common::*;

#[test]
fn hello_python_counts_its_runs_on_one_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let mut said = Vec::new();
    for visitor in ["Ada", "Grace"] {
        let out = run_cli("hello-py", dir.path(), &[], &[visitor]);
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
        assert!(stdout.contains(&format!("Hello, {visitor}!")), "{stdout}");
        said.push(stdout);
    }
    assert!(said[0].contains("This is the first run"), "{}", said[0]);
    assert!(said[1].contains("has now run 2 times"), "{}", said[1]);
    assert!(said[1].contains("visitors: Grace, Ada"), "{}", said[1]);
}
