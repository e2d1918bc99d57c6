//! The dashboard in a real browser: Debian's Chromium, headless, driven
//! over WebDriver (ChromeDriver) by `fantoccini`. It reads the counts,
//! redrives a dead letter through the page (confirming the dialog), and a
//! guest then receives the message. The page is saved as a screenshot
//! (`target/screenshots/dashboard.png`).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{ClientBuilder, Locator};

use crate::common::{self, Killed, Store};
use crate::operators::{dashboard, populate};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn an_operator_redrives_a_dead_letter_in_a_real_browser() {
    let store = Store::dir();
    populate(&store);
    let d = dashboard(&store, &["--addr", "127.0.0.1:0"]);
    let port = free_port();
    let driver = Killed(
        Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver (Debian's chromium-driver; .ci/run installs it)"),
    );
    let profile = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let shot = rt.block_on(async {
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    "--window-size=1400,1000",
                    format!("--user-data-dir={}", profile.path().display()),
                ],
            }),
        );
        // ChromeDriver takes a moment to listen.
        let deadline = Instant::now() + Duration::from_secs(60);
        let c = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            match ClientBuilder::new(connector)
                .capabilities(caps.clone())
                .connect(&format!("http://127.0.0.1:{port}"))
                .await
            {
                Ok(c) => break c,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("no WebDriver session: {e}"),
            }
        };
        c.goto(&format!("http://{}/", d.addr)).await.unwrap();
        // The page redraws what changed every 2 s: each step finds its
        // element afresh, and tries again when it was redrawn under it.
        let text_of = |css: &'static str| {
            let c = c.clone();
            async move {
                let deadline = Instant::now() + Duration::from_secs(60);
                loop {
                    if let Ok(e) = c.find(Locator::Css(css)).await
                        && let Ok(t) = e.text().await
                    {
                        return t;
                    }
                    assert!(Instant::now() < deadline, "no {css} on the page");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        let click = |css: &'static str| {
            let c = c.clone();
            async move {
                let deadline = Instant::now() + Duration::from_secs(60);
                loop {
                    if let Ok(e) = c.find(Locator::Css(css)).await
                        && e.click().await.is_ok()
                    {
                        return;
                    }
                    assert!(Instant::now() < deadline, "cannot click {css}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        assert_eq!(text_of("tr[data-queue='orders'] td.waiting").await, "2");
        assert_eq!(text_of("tr[data-queue='orders'] td.delayed").await, "1");
        assert_eq!(text_of("tr[data-queue='orders'] td.dead-count").await, "1");
        // Open the queue, its dead letters, and redrive the one there.
        click("tr[data-queue='orders']").await;
        text_of("#qname").await;
        click("#show-dead").await;
        click("button.redrive").await;
        let question = c.get_alert_text().await.unwrap();
        assert!(question.contains("orders"), "{question}");
        c.accept_alert().await.unwrap();
        // The page refreshes: no dead letter is left.
        let deadline = Instant::now() + Duration::from_secs(30);
        while text_of("tr[data-queue='orders'] td.dead-count").await != "0" {
            assert!(
                Instant::now() < deadline,
                "the dead letter is still counted"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let shot = c.screenshot().await.unwrap();
        c.close().await.unwrap();
        shot
    });
    drop(driver);
    let dir = common::root().join("target").join("screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("dashboard.png");
    std::fs::write(&path, &shot).unwrap();
    assert!(shot.starts_with(b"\x89PNG"), "the screenshot is not a PNG");
    println!("screenshot: {}", path.display());
    // A guest receives the redriven message.
    let out = common::run_cli("queue-tool", &store, &[], &["receive", "orders", "10"]);
    assert!(out.status.success(), "{}", common::text(&out.stderr));
    assert!(
        common::text(&out.stdout).lines().any(|l| l.ends_with(" a")),
        "{}",
        common::text(&out.stdout)
    );
}
