//! Host glue of the `schedule` interface: translates, then calls
//! [`alk_store::schedule::Schedules`].

use std::sync::Arc;

use alk_store::AlkError;
use alk_store::schedule::{RunnerOptions, ScheduleRow};
use alk_store::time::wait_deadline;

use crate::bindings::alk::store::queue::{Payload, SendOptions};
use crate::bindings::alk::store::schedule::{self, RunReport, ScheduleError, ScheduleInfo};
use crate::bindings::alk::store::types::Error;
use crate::ctx::AlkCtxView;
use crate::error::CallError;
use crate::queue::{from_store, options, to_store, wit_options};

capability_linker!("schedule", schedule);

/// The WIT form of an error of a scheduling call.
fn schedule_error(e: AlkError) -> ScheduleError {
    match e {
        AlkError::InvalidSpec(m) => ScheduleError::InvalidSpec(m),
        AlkError::LeadershipLost(m) => ScheduleError::LeadershipLost(m),
        other => ScheduleError::Store(Error::from(other)),
    }
}

fn schedule_info(row: ScheduleRow) -> ScheduleInfo {
    ScheduleInfo {
        name: row.name,
        spec: row.spec,
        every_ms: row.every_ms,
        queue: row.queue,
        payload: from_store(row.payload),
        options: wit_options(row.options),
        next_fire_ms: row.next_due.max(0) as u64,
    }
}

impl schedule::Host for AlkCtxView<'_> {
    async fn schedule(
        &mut self,
        name: String,
        spec: String,
        queue: String,
        payload: Payload,
        opts: SendOptions,
    ) -> wasmtime::Result<Result<(), ScheduleError>> {
        let now = self.ctx.now();
        let schedules = match self.ctx.schedules().await {
            Ok(s) => s,
            Err(e) => return Ok(Err(schedule_error(e))),
        };
        Ok(schedules
            .schedule(
                &name,
                &spec,
                &queue,
                &to_store(payload),
                &options(opts),
                now,
            )
            .await
            .map_err(schedule_error))
    }

    async fn unschedule(&mut self, name: String) -> Result<bool, CallError> {
        Ok(self.ctx.schedules().await?.unschedule(&name).await?)
    }

    async fn get(&mut self, name: String) -> Result<Option<ScheduleInfo>, CallError> {
        Ok(self
            .ctx
            .schedules()
            .await?
            .get(&name)
            .await?
            .map(schedule_info))
    }

    async fn list(&mut self) -> Result<Vec<ScheduleInfo>, CallError> {
        Ok(self
            .ctx
            .schedules()
            .await?
            .list()
            .await?
            .into_iter()
            .map(schedule_info)
            .collect())
    }

    async fn run(
        &mut self,
        duration_ms: u64,
    ) -> wasmtime::Result<Result<RunReport, ScheduleError>> {
        let schedules = match self.ctx.schedules().await {
            Ok(s) => s,
            Err(e) => return Ok(Err(schedule_error(e))),
        };
        let options = RunnerOptions::default();
        let clock: Arc<dyn alk_store::Clock> = self.ctx.clock.clone();
        let until = wait_deadline(duration_ms);
        Ok(schedules
            .run(&options, clock, tokio::time::sleep_until(until))
            .await
            .map(|r| RunReport {
                led: r.led,
                fired: r.fired,
            })
            .map_err(schedule_error))
    }
}
