//! Connecting: an unreachable server or a wrong password, and the
//! sessions' settings.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_one_busy_line_without_the_password() {
    let url = "postgres://alk:hunter2-secret@127.0.0.1:1/postgres";
    match PostgresEngine::connect_url(url).await {
        Err(AlkError::Busy(m)) => {
            assert!(
                m.starts_with("cannot reach postgres at 127.0.0.1:1: "),
                "{m}"
            );
            assert!(!m.contains("hunter2") && !m.contains('\n'), "{m}");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("connected to port 1"),
    }
    let wrong = alk_pg_cluster::test_url().replace("alk-test-secret", "wrong-secret");
    match PostgresEngine::connect_url(&wrong).await {
        Err(AlkError::Busy(m)) => {
            assert!(m.contains("password authentication failed"), "{m}");
            assert!(!m.contains("wrong-secret"), "{m}");
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("logged in with a wrong password"),
    }
}

/// `relaxed` is the sessions' `synchronous_commit = off`; `full` leaves the
/// server's setting (on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relaxed_durability_turns_synchronous_commit_off_for_the_engines_sessions() {
    for (relaxed, want) in [(true, "off"), (false, "on")] {
        let e = PostgresEngine::connect(options(&fresh_schema()).relaxed(relaxed))
            .await
            .unwrap();
        let conn = e.inner.conn().await.unwrap();
        let row = conn
            .query_one("SHOW synchronous_commit", &[])
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), want, "relaxed = {relaxed}");
    }
}
