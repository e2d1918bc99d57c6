//! Wakes across hosts: `LISTEN/NOTIFY` on one dedicated connection per
//! engine.
//!
//! Every topic this host signals is sent as the payload of a notification
//! on the schema's channel (`alk_wake_<schema>`; topics are far below the
//! 8000-byte payload limit); every notification from another session is
//! delivered to this host's waiters. Signals are batched: one `NOTIFY`
//! statement at most every millisecond carries every topic signalled since
//! the last one (each distinct topic once). The host's own
//! notifications come back on the same connection and are ignored by the
//! sender's backend id.
//!
//! When the connection breaks, the task reconnects with backoff, and after
//! reconnecting wakes every waiter once (a signal may have been missed
//! meanwhile): waiters re-read the store, so nothing waits on a lost wake.
//! The task also re-measures the clock offset every minute.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use alk_store::wake::{WakeSink, WakeTransport, Wakes};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, NoTls};

use crate::clock::Clockwork;
use crate::conn::describe_pg;

// The statements of this module (each listed by name in
// `sql::STATEMENTS`, which a test checks against the format document).

/// Wakes other hosts: one notification per topic `$2` on channel `$1`.
pub const NOTIFY: &str = "SELECT pg_notify($1, t) FROM unnest($2::text[]) AS t";

/// What the wake task is asked to do.
enum Out {
    /// Tell the other hosts about a topic.
    Signal(String),
    /// Report back once everything asked before was done.
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// Signals to send, and the sink to deliver others' to.
struct PgWakes {
    outbox: mpsc::UnboundedSender<Out>,
    sink: Arc<Mutex<Option<WakeSink>>>,
}

impl WakeTransport for PgWakes {
    fn announce(&self, topic: &str) {
        // The task ends only when every sender is gone: this cannot fail
        // while `self` exists, and a lost signal is only a delay anyway.
        let _ = self.outbox.send(Out::Signal(topic.to_string()));
    }

    fn flush(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'static>> {
        let (done, flushed) = tokio::sync::oneshot::channel();
        let sent = self.outbox.send(Out::Flush(done)).is_ok();
        Box::pin(async move {
            if sent {
                let _ = flushed.await;
            }
        })
    }

    fn start(&self, sink: WakeSink) -> std::io::Result<()> {
        *self.sink.lock().unwrap_or_else(|p| p.into_inner()) = Some(sink);
        Ok(())
    }
}

/// Starts the wake task of an engine; the [`Wakes`] its stores share. The
/// first connection is made (and `LISTEN` in force) before this returns, so
/// a host that goes on to wait misses nothing sent after it started.
pub(crate) async fn start(
    config: tokio_postgres::Config,
    channel: String,
    clock: Arc<Clockwork>,
    target: String,
) -> Result<Wakes, tokio_postgres::Error> {
    let link = open(&config, &channel, &clock).await?;
    let (outbox, rx) = mpsc::unbounded_channel();
    let sink = Arc::new(Mutex::new(None));
    tokio::spawn(run(config, channel, clock, target, rx, sink.clone(), link));
    Ok(Wakes::new(Arc::new(PgWakes { outbox, sink })))
}

/// A listening connection.
struct Link {
    client: tokio_postgres::Client,
    notes: mpsc::UnboundedReceiver<tokio_postgres::Notification>,
    driver: tokio::task::JoinHandle<()>,
    own_pid: i32,
}

/// Connects, listens on `channel`, learns its own backend id and measures
/// the clock.
async fn open(
    config: &tokio_postgres::Config,
    channel: &str,
    clock: &Clockwork,
) -> Result<Link, tokio_postgres::Error> {
    let (client, mut connection) = config.connect(NoTls).await?;
    let (notes_tx, notes) = mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(Ok(message)) = messages.next().await {
            if let AsyncMessage::Notification(n) = message
                && notes_tx.send(n).is_err()
            {
                break;
            }
        }
    });
    let setup = async {
        client.batch_execute(&format!("LISTEN {channel}")).await?;
        let pid: i32 = client
            .query_one("SELECT pg_backend_pid()", &[])
            .await?
            .try_get(0)?;
        clock.measure(&client).await?;
        Ok::<i32, tokio_postgres::Error>(pid)
    };
    match setup.await {
        Ok(own_pid) => Ok(Link {
            client,
            notes,
            driver,
            own_pid,
        }),
        Err(e) => {
            driver.abort();
            Err(e)
        }
    }
}

fn deliver(sink: &Mutex<Option<WakeSink>>, topic: Option<&str>) {
    let sink = sink.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(sink) = sink.as_ref() {
        match topic {
            Some(t) => sink.deliver(t),
            None => sink.deliver_all(),
        }
    }
}

/// The shortest time between two NOTIFY statements of one host: signals
/// that come closer together share one.
const NOTIFY_WINDOW: Duration = Duration::from_millis(1);

/// How often the wake connection measures the clock (and so finds out
/// that it is dead).
const CHECK_EVERY: Duration = Duration::from_secs(60);

/// How long the wake connection may take to answer before it is taken
/// for dead and made again.
const CALL_LIMIT: Duration = Duration::from_secs(5);

/// Longest pause between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

async fn run(
    config: tokio_postgres::Config,
    channel: String,
    clock: Arc<Clockwork>,
    target: String,
    mut outbox: mpsc::UnboundedReceiver<Out>,
    sink: Arc<Mutex<Option<WakeSink>>>,
    first: Link,
) {
    let mut backoff = Duration::from_millis(50);
    let mut first = Some(first);
    // Whether signals may have been missed since the last connection.
    let mut down = false;
    loop {
        let link = match first.take() {
            Some(link) => link,
            None => match open(&config, &channel, &clock).await {
                Ok(link) => link,
                Err(e) => {
                    if !down {
                        tracing::warn!(target: "alk", "wake connection to postgres at {target} failed: {}; waiters fall back to re-reading", describe_pg(&e));
                        down = true;
                    }
                    // Signals meanwhile cannot be sent: drop them (hints
                    // only), and stop when the engine is gone.
                    let pause = tokio::time::sleep(backoff);
                    tokio::pin!(pause);
                    loop {
                        tokio::select! {
                            _ = &mut pause => break,
                            t = outbox.recv() => match t {
                                None => return,
                                // Nothing can be sent now: done as far as
                                // it goes.
                                Some(Out::Flush(done)) => { let _ = done.send(()); }
                                Some(Out::Signal(_)) => {}
                            },
                        }
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            },
        };
        let Link {
            client,
            mut notes,
            driver,
            own_pid,
        } = link;
        if down {
            tracing::info!(target: "alk", "wake connection to postgres at {target} is back");
            // Whatever was signalled while disconnected is lost: wake every
            // waiter once, to re-read.
            deliver(&sink, None);
        }
        backoff = Duration::from_millis(50);
        let mut last_notify: Option<tokio::time::Instant> = None;
        let mut tick = tokio::time::interval(CHECK_EVERY);
        tick.tick().await;
        loop {
            tokio::select! {
                n = notes.recv() => match n {
                    Some(n) if n.process_id() == own_pid => {}
                    Some(n) => deliver(&sink, Some(n.payload())),
                    None => break,
                },
                t = outbox.recv() => {
                    let Some(first) = t else {
                        driver.abort();
                        return;
                    };
                    // At most one NOTIFY per window: a host committing in a
                    // tight loop sends one notification for many commits
                    // (each is a commit on the server), at the price of up
                    // to one window of extra wake latency.
                    if let Some(at) = last_notify {
                        tokio::time::sleep_until(at + NOTIFY_WINDOW).await;
                    }
                    // Everything waiting goes in one round trip; flushes
                    // are answered after it.
                    let (mut topics, mut flushes) = (Vec::new(), Vec::new());
                    let mut next = Some(first);
                    while let Some(out) = next.take() {
                        match out {
                            Out::Signal(t) if !topics.contains(&t) => topics.push(t),
                            Out::Signal(_) => {}
                            Out::Flush(done) => flushes.push(done),
                        }
                        if topics.len() < 256 {
                            next = outbox.try_recv().ok();
                        }
                    }
                    if !topics.is_empty() {
                        last_notify = Some(tokio::time::Instant::now());
                    }
                    let outcome = if topics.is_empty() {
                        Ok(Ok(0))
                    } else {
                        tokio::time::timeout(
                            CALL_LIMIT,
                            client.execute(NOTIFY, &[&channel, &topics]),
                        )
                        .await
                    };
                    for done in flushes {
                        let _ = done.send(());
                    }
                    match outcome {
                        Ok(Ok(_)) => {}
                        // The server refused this one (a full notification
                        // queue, say): these signals are lost, the
                        // connection is fine.
                        Ok(Err(e)) if !client.is_closed() => {
                            tracing::warn!(target: "alk", "postgres at {target} refused a wake: {}", describe_pg(&e));
                        }
                        Ok(Err(e)) => {
                            tracing::warn!(target: "alk", "wake connection to postgres at {target}: {}", describe_pg(&e));
                            break;
                        }
                        Err(_) => {
                            tracing::warn!(target: "alk", "wake connection to postgres at {target} does not answer; reconnecting");
                            break;
                        }
                    }
                }
                _ = tick.tick() => {
                    // Also how a silently dead connection is found.
                    match tokio::time::timeout(CALL_LIMIT, clock.measure(&client)).await {
                        Ok(Ok(())) => {}
                        Ok(Err(_)) if !client.is_closed() => {}
                        _ => break,
                    }
                }
            }
        }
        driver.abort();
        down = true;
    }
}
