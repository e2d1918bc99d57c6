//! Conformance cases of notification channels.

use std::time::Duration;

use crate::engine::Engine;
use crate::error::AlkError;
use crate::notify::Channels;

/// A listener sees a notification sent after it attached, even before it
/// waits; a wait with nothing sent times out.
pub async fn notify_wakes_a_listener_attached_before(engine: &dyn Engine) {
    let c = Channels::open(engine).unwrap();
    let mut l = c.listen("ch").unwrap();
    c.notify("ch").unwrap();
    assert!(
        l.wait(Some(tokio::time::Instant::now() + Duration::from_secs(5)))
            .await
    );
    assert!(
        !l.wait(Some(
            tokio::time::Instant::now() + Duration::from_millis(30)
        ))
        .await
    );
    assert!(matches!(
        c.notify("__alkstore_x"),
        Err(AlkError::ReservedName(_))
    ));
}
