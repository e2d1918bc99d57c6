//! The schedules of the memory engine, which fire into its queues.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;

use super::{Queues, lock, queue_of};
use crate::error::AlkResult;
use crate::jobs::Stamp;
use crate::schedule::{ScheduleEngine, ScheduleRow};

/// The schedules; firing sends to the engine's queues.
pub(super) struct MemSchedules {
    pub(super) rows: Mutex<BTreeMap<String, ScheduleRow>>,
    pub(super) queues: Queues,
}

#[async_trait]
impl ScheduleEngine for MemSchedules {
    async fn put(&self, row: &ScheduleRow) -> AlkResult<()> {
        let mut rows = lock(&self.rows);
        let mut row = row.clone();
        if let Some(old) = rows.get(&row.name)
            && old.every_ms == row.every_ms
        {
            row.next_due = old.next_due;
        }
        rows.insert(row.name.clone(), row);
        Ok(())
    }

    async fn remove(&self, name: &str) -> AlkResult<bool> {
        Ok(lock(&self.rows).remove(name).is_some())
    }

    async fn get(&self, name: &str) -> AlkResult<Option<ScheduleRow>> {
        Ok(lock(&self.rows).get(name).cloned())
    }

    async fn list(&self) -> AlkResult<Vec<ScheduleRow>> {
        Ok(lock(&self.rows).values().cloned().collect())
    }

    async fn fire(
        &self,
        name: &str,
        due: i64,
        next: i64,
        stamps: &[Stamp],
        now: i64,
    ) -> AlkResult<bool> {
        let mut rows = lock(&self.rows);
        let Some(row) = rows.get_mut(name).filter(|r| r.next_due == due) else {
            return Ok(false);
        };
        let queue = queue_of(&self.queues, &row.queue);
        let mut q = lock(&queue.0);
        for stamp in stamps {
            q.send(std::slice::from_ref(&row.payload), stamp, now);
        }
        row.next_due = next;
        Ok(true)
    }
}
