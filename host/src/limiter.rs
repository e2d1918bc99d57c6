//! Host glue of the `limiter` interface: translates, then calls
//! [`alk_store::rate::Limiters`], which checks the name and the take and
//! asks the engine.

use crate::bindings::alk::store::limiter;
use crate::bindings::alk::store::queue::{RateLimit, Taken};
use crate::ctx::AlkCtxView;
use crate::error::CallError;
use crate::queue::{rate, taken};

capability_linker!("limiter", limiter);

impl limiter::Host for AlkCtxView<'_> {
    async fn try_take(
        &mut self,
        name: String,
        n: u32,
        settings: RateLimit,
    ) -> Result<Taken, CallError> {
        let now = self.ctx.now();
        let limiters = self.ctx.limiters().await?;
        Ok(taken(
            limiters.try_take(&name, &rate(settings), n, now).await?,
        ))
    }
}
