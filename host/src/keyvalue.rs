//! Host glue of `wasi:keyvalue`: both drafts (`0.2.0-draft`, what wasmtime
//! and its test programs use, and `0.2.0-draft2`, what Spin uses), served
//! over the same buckets as `alk:store/kv`.
//!
//! A store identifier names a bucket (`""` is the default bucket,
//! `default` unless configured otherwise); every call goes through
//! [`alk_store::kv::Bucket`], so the rules, limits and engines are those of
//! `alk:store/kv`. Errors: an identifier that cannot name a bucket is
//! `no-such-store`, a reserved one `access-denied`, everything else
//! `other("<alk error case>: <message>")`. docs/keyvalue.md lists every
//! difference from other hosts.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use wasmtime::component::Resource;

use alk_store::{AlkError, Clock};
use alk_store::kv::{Bucket as Store, Expected};
use alk_store::limits::{MAX_BATCH, MAX_READ_BYTES, MAX_SCAN_LIMIT};

use crate::bindings::keyvalue::{draft, draft2};
use crate::ctx::{AlkCtxView, Slot};
use crate::{AlkView, HasAlk};

/// The bucket a store identifier of `""` opens unless configured otherwise.
pub const DEFAULT_BUCKET: &str = "default";

/// Whether `name` can name a bucket (for a default bucket given by
/// configuration).
pub fn check_bucket_name(name: &str) -> alk_store::AlkResult<()> {
    alk_store::names::check_name("bucket", name)
}

/// Most `list-keys` cursors of `0.2.0-draft` (plain numbers) one instance
/// keeps; the oldest is forgotten past this, and passing it back then is an
/// error that says to list again.
const MAX_LIST_CURSORS: usize = 1024;

/// Most bytes one `get-many` answer holds (keys and values); a larger
/// answer is refused: ask for fewer keys at a time.
const MAX_GET_MANY_BYTES: usize = 4 * MAX_READ_BYTES;

/// An open bucket, as held in the instance's resource table (either
/// draft).
#[derive(Debug)]
pub struct Bucket {
    store: Store,
    _slot: Slot,
}

/// A compare-and-swap in progress (`0.2.0-draft2`): the key, the value
/// read and what the swap expects to find.
#[derive(Debug)]
pub struct Cas {
    store: Store,
    key: String,
    /// The value read, when `expected` does not hold it already.
    value: Option<Vec<u8>>,
    expected: Expected,
    _slot: Slot,
    _held: CasSlot,
}

impl Cas {
    /// The value read.
    fn current(&self) -> Option<Vec<u8>> {
        match &self.expected {
            Expected::Value(v) => Some(v.clone()),
            _ => self.value.clone(),
        }
    }
}

/// Most compare-and-swaps one instance holds open at once: each keeps a
/// value of up to the value limit in host memory.
pub const MAX_OPEN_CAS: usize = 64;

/// One open compare-and-swap counted against [`MAX_OPEN_CAS`].
#[derive(Debug)]
struct CasSlot(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for CasSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// The per-instance `wasi:keyvalue` state: the default bucket and the
/// cursors of `0.2.0-draft` listings.
#[derive(Debug, Clone)]
pub(crate) struct KeyvalueState {
    pub(crate) default_bucket: String,
    cursors: Arc<Mutex<ListCursors>>,
    cas_open: Arc<std::sync::atomic::AtomicUsize>,
}

impl KeyvalueState {
    pub(crate) fn new(default_bucket: String) -> Self {
        KeyvalueState {
            default_bucket,
            cursors: Default::default(),
            cas_open: Default::default(),
        }
    }
}

/// `0.2.0-draft` cursors are numbers; each names the last key of a page.
#[derive(Debug, Default)]
struct ListCursors {
    next: u64,
    /// (cursor, bucket, last key), oldest first.
    held: VecDeque<(u64, String, String)>,
}

impl ListCursors {
    fn hand_out(&mut self, bucket: &str, last_key: String) -> u64 {
        // Numbers are never reused within an instance; starting at 1 keeps
        // a guest's `0` from ever meaning a position.
        self.next += 1;
        if self.held.len() == MAX_LIST_CURSORS {
            self.held.pop_front();
        }
        self.held
            .push_back((self.next, bucket.to_string(), last_key));
        self.next
    }

    /// The key cursor `cursor` of `bucket` names. A cursor can be passed
    /// back any number of times, until it is one of the oldest past
    /// [`MAX_LIST_CURSORS`].
    fn key_of(&self, bucket: &str, cursor: u64) -> Result<String, AlkError> {
        self.held
            .iter()
            .find(|(c, b, _)| *c == cursor && b == bucket)
            .map(|(_, _, key)| key.clone())
            .ok_or_else(|| {
                AlkError::InvalidArgument(format!(
                    "cursor {cursor} is not one this instance handed out for bucket {bucket:?}, or is older than the last {MAX_LIST_CURSORS} cursors; list the keys again without a cursor"
                ))
            })
    }
}

/// The alk error case, as `types.error` spells it, and its message.
fn case_and_text(e: &AlkError) -> (&'static str, String) {
    match e {
        AlkError::InvalidName(m) => ("invalid-name", m.clone()),
        AlkError::ReservedName(m) => ("reserved-name", m.clone()),
        AlkError::InvalidArgument(m) => ("invalid-argument", m.clone()),
        AlkError::PayloadTooLarge { .. } => ("payload-too-large", e.to_string()),
        AlkError::StaleReceipt(m) => ("stale-receipt", m.clone()),
        AlkError::TransactionAborted(m) => ("transaction-aborted", m.clone()),
        AlkError::Busy(m) => ("busy", m.clone()),
        AlkError::StoreSetup { .. } => ("store-setup", e.to_string()),
        AlkError::InvalidSpec(m) | AlkError::LeadershipLost(m) => ("invalid-argument", m.clone()),
        AlkError::Internal(m) => {
            tracing::error!(target: "alk", "internal failure reported to a guest: {m}");
            ("internal", m.clone())
        }
    }
}

/// The text of `other(…)`: `<case>: <message>`.
pub fn other_text(e: &AlkError) -> String {
    let (case, text) = case_and_text(e);
    format!("{case}: {text}")
}

/// What an `open` failure becomes, in either draft's error type.
enum OpenFailure {
    NoSuchStore,
    AccessDenied,
    Other(String),
}

fn open_failure(identifier: &str, e: AlkError) -> OpenFailure {
    match e {
        // The guest asked for the default store: the host's configuration,
        // not the guest, is at fault, and the text says so.
        e @ (AlkError::InvalidName(_) | AlkError::ReservedName(_)) if identifier.is_empty() => {
            tracing::warn!(target: "alk", "wasi:keyvalue open(\"\"): the configured default bucket is not usable: {e}");
            OpenFailure::Other(format!(
                "{} (the bucket this host opens for the store \"\"; the host's operator sets it with --keyvalue-bucket or keyvalue_default_bucket)",
                other_text(&e)
            ))
        }
        AlkError::InvalidName(m) => {
            tracing::debug!(target: "alk", "wasi:keyvalue open({identifier:?}): no such store: {m}");
            OpenFailure::NoSuchStore
        }
        AlkError::ReservedName(m) => {
            tracing::debug!(target: "alk", "wasi:keyvalue open({identifier:?}): access denied: {m}");
            OpenFailure::AccessDenied
        }
        e => OpenFailure::Other(other_text(&e)),
    }
}

impl AlkCtxView<'_> {
    async fn kv_open(&mut self, identifier: &str) -> Result<Bucket, OpenFailure> {
        let name = if identifier.is_empty() {
            self.ctx.keyvalue.default_bucket.clone()
        } else {
            identifier.to_string()
        };
        let slot = self
            .ctx
            .slot("bucket")
            .map_err(|e| OpenFailure::Other(other_text(&e)))?;
        let store = Store::open(&*self.ctx.engine, &name, self.ctx.limits.kv)
            .await
            .map_err(|e| open_failure(identifier, e))?;
        Ok(Bucket { store, _slot: slot })
    }

    fn kv_store(&self, bucket: &Resource<Bucket>) -> wasmtime::Result<Store> {
        Ok(self.table.get(bucket)?.store.clone())
    }
}

/// One page of keys after `after`: the keys, and the last one when more
/// follow.
async fn kv_list(
    store: &Store,
    after: Option<String>,
    now: i64,
) -> Result<(Vec<String>, Option<String>), AlkError> {
    let cursor = after.as_deref().map(|k| alk_store::kv::cursor_after("", k));
    // Keys only: no value is read, so a page is 1,000 keys however large
    // the values are.
    let page = store
        .scan_keys("", cursor.as_deref(), MAX_SCAN_LIMIT, now)
        .await?;
    let keys = page.keys;
    let more = page.next_cursor.is_some();
    let last = if more { keys.last().cloned() } else { None };
    Ok((keys, last))
}

/// The values of `keys`, in order, every key answered.
async fn kv_get_many(
    store: &Store,
    keys: &[String],
    clock: &dyn Clock,
) -> Result<Vec<Option<Vec<u8>>>, AlkError> {
    if keys.len() > MAX_BATCH {
        return Err(AlkError::InvalidArgument(format!(
            "get-many takes at most {MAX_BATCH} keys, not {}",
            keys.len()
        )));
    }
    let mut out: Vec<Option<Vec<u8>>> = Vec::with_capacity(keys.len());
    let mut bytes = 0usize;
    while out.len() < keys.len() {
        let part = store.get_many(&keys[out.len()..], clock.now_ms()).await?;
        if part.is_empty() {
            return Err(AlkError::Internal("get-many answered no key".into()));
        }
        for (key, value) in keys[out.len()..].iter().zip(&part) {
            bytes += key.len() + value.as_ref().map_or(0, Vec::len);
        }
        if bytes > MAX_GET_MANY_BYTES {
            return Err(AlkError::PayloadTooLarge {
                what: "get-many answer",
                size: bytes as u64,
                limit: MAX_GET_MANY_BYTES as u64,
            });
        }
        out.extend(part);
    }
    Ok(out)
}

/// Adds both `wasi:keyvalue` drafts to `linker`, reaching the context
/// through [`AlkView`].
pub fn add_to_linker<T: AlkView + 'static>(
    linker: &mut wasmtime::component::Linker<T>,
) -> wasmtime::Result<()> {
    add_to_linker_with(linker, |t: &mut T| t.alk())
}

/// Adds both `wasi:keyvalue` drafts to `linker`, reaching the context
/// through `get`.
pub fn add_to_linker_with<T: Send + 'static>(
    linker: &mut wasmtime::component::Linker<T>,
    get: fn(&mut T) -> AlkCtxView<'_>,
) -> wasmtime::Result<()> {
    draft::api::store::add_to_linker::<T, HasAlk>(linker, get)?;
    draft::api::atomics::add_to_linker::<T, HasAlk>(linker, get)?;
    draft::api::batch::add_to_linker::<T, HasAlk>(linker, get)?;
    draft2::api::store::add_to_linker::<T, HasAlk>(linker, get)?;
    draft2::api::atomics::add_to_linker::<T, HasAlk>(linker, get)?;
    draft2::api::batch::add_to_linker::<T, HasAlk>(linker, get)?;
    Ok(())
}

/// The two drafts differ only in a few types; the glue is written once per
/// draft with this macro over the draft's module.
macro_rules! store_glue {
    ($glue:ident, $m:ident, cursor: $cursor:ty, item: $item:ty, after: $after:path, hand_out: $hand_out:path, make_item: $make_item:path) => {
        mod $glue {
            use super::*;
            use crate::bindings::keyvalue::$m::api::store::{self, Error, Host, HostBucket};

            pub(super) fn other(e: AlkError) -> Error {
                Error::Other(other_text(&e))
            }

            pub(super) fn open_error(f: OpenFailure) -> Error {
                match f {
                    OpenFailure::NoSuchStore => Error::NoSuchStore,
                    OpenFailure::AccessDenied => Error::AccessDenied,
                    OpenFailure::Other(m) => Error::Other(m),
                }
            }

            impl Host for AlkCtxView<'_> {
                async fn open(
                    &mut self,
                    identifier: String,
                ) -> wasmtime::Result<Result<Resource<Bucket>, Error>> {
                    match self.kv_open(&identifier).await {
                        Ok(b) => Ok(Ok(self.table.push(b)?)),
                        Err(f) => Ok(Err(open_error(f))),
                    }
                }
            }

            impl HostBucket for AlkCtxView<'_> {
                async fn get(
                    &mut self,
                    bucket: Resource<Bucket>,
                    key: String,
                ) -> wasmtime::Result<Result<Option<Vec<u8>>, Error>> {
                    let store = self.kv_store(&bucket)?;
                    Ok(store.get(&key, self.ctx.now()).await.map_err(other))
                }

                async fn set(
                    &mut self,
                    bucket: Resource<Bucket>,
                    key: String,
                    value: Vec<u8>,
                ) -> wasmtime::Result<Result<(), Error>> {
                    let store = self.kv_store(&bucket)?;
                    Ok(store
                        .set(&key, &value, None, self.ctx.now())
                        .await
                        .map_err(other))
                }

                async fn delete(
                    &mut self,
                    bucket: Resource<Bucket>,
                    key: String,
                ) -> wasmtime::Result<Result<(), Error>> {
                    let store = self.kv_store(&bucket)?;
                    Ok(store.delete(&key).await.map_err(other))
                }

                async fn exists(
                    &mut self,
                    bucket: Resource<Bucket>,
                    key: String,
                ) -> wasmtime::Result<Result<bool, Error>> {
                    let store = self.kv_store(&bucket)?;
                    Ok(store.exists(&key, self.ctx.now()).await.map_err(other))
                }

                async fn list_keys(
                    &mut self,
                    bucket: Resource<Bucket>,
                    cursor: Option<$cursor>,
                ) -> wasmtime::Result<Result<store::KeyResponse, Error>> {
                    let store = self.kv_store(&bucket)?;
                    let after = match cursor.map(|c| $after(self, &store, c)).transpose() {
                        Ok(after) => after,
                        Err(e) => return Ok(Err(other(e))),
                    };
                    Ok(match kv_list(&store, after, self.ctx.now()).await {
                        Ok((keys, last)) => Ok(store::KeyResponse {
                            keys,
                            cursor: last.map(|k| $hand_out(self, &store, k)),
                        }),
                        Err(e) => Err(other(e)),
                    })
                }

                async fn drop(&mut self, bucket: Resource<Bucket>) -> wasmtime::Result<()> {
                    self.table.delete(bucket)?;
                    Ok(())
                }
            }

            use crate::bindings::keyvalue::$m::api::batch;

            impl batch::Host for AlkCtxView<'_> {
                async fn get_many(
                    &mut self,
                    bucket: Resource<Bucket>,
                    keys: Vec<String>,
                ) -> wasmtime::Result<Result<Vec<$item>, Error>> {
                    let store = self.kv_store(&bucket)?;
                    Ok(
                        match kv_get_many(&store, &keys, &*self.ctx.clock()).await {
                            Ok(values) => Ok(keys
                                .into_iter()
                                .zip(values)
                                .map(|(k, v)| $make_item(k, v))
                                .collect()),
                            Err(e) => Err(other(e)),
                        },
                    )
                }

                async fn set_many(
                    &mut self,
                    bucket: Resource<Bucket>,
                    key_values: Vec<(String, Vec<u8>)>,
                ) -> wasmtime::Result<Result<(), Error>> {
                    let store = self.kv_store(&bucket)?;
                    Ok(store
                        .set_many(&key_values, None, self.ctx.now())
                        .await
                        .map_err(other))
                }

                async fn delete_many(
                    &mut self,
                    bucket: Resource<Bucket>,
                    keys: Vec<String>,
                ) -> wasmtime::Result<Result<(), Error>> {
                    let store = self.kv_store(&bucket)?;
                    Ok(store.delete_many(&keys).await.map_err(other))
                }
            }
        }
    };
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

// `0.2.0-draft`: numeric cursors (kept per instance, each naming the last
// key of a page), `get-many` entries `option<tuple<key, value>>`, unsigned
// increments.

fn draft_after(view: &AlkCtxView<'_>, store: &Store, cursor: u64) -> Result<String, AlkError> {
    lock(&view.ctx.keyvalue.cursors).key_of(store.name(), cursor)
}

fn draft_hand_out(view: &AlkCtxView<'_>, store: &Store, last_key: String) -> u64 {
    lock(&view.ctx.keyvalue.cursors).hand_out(store.name(), last_key)
}

fn draft_item(key: String, value: Option<Vec<u8>>) -> Option<(String, Vec<u8>)> {
    value.map(|v| (key, v))
}

store_glue!(draft_glue, draft, cursor: u64, item: Option<(String, Vec<u8>)>,
    after: draft_after, hand_out: draft_hand_out, make_item: draft_item);

impl draft::api::atomics::Host for AlkCtxView<'_> {
    async fn increment(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
        delta: u64,
    ) -> wasmtime::Result<Result<u64, draft::api::store::Error>> {
        let store = self.kv_store(&bucket)?;
        let clock = self.ctx.clock();
        Ok(store
            .increment(&key, delta as i128, 0..=u64::MAX as i128, &*clock)
            .await
            .map(|n| n as u64)
            .map_err(draft_glue::other))
    }
}

// `0.2.0-draft2`: string cursors (alk's scan cursors of the empty prefix),
// `get-many` entries `tuple<key, option<value>>`, signed increments,
// compare-and-swap.

fn draft2_after(view: &AlkCtxView<'_>, _: &Store, cursor: String) -> Result<String, AlkError> {
    let _ = view;
    alk_store::kv::cursor_key(&cursor, "")
}

fn draft2_hand_out(_: &AlkCtxView<'_>, _: &Store, last_key: String) -> String {
    alk_store::kv::cursor_after("", &last_key)
}

fn draft2_item(key: String, value: Option<Vec<u8>>) -> (String, Option<Vec<u8>>) {
    (key, value)
}

store_glue!(draft2_glue, draft2, cursor: String, item: (String, Option<Vec<u8>>),
    after: draft2_after, hand_out: draft2_hand_out, make_item: draft2_item);

use crate::bindings::keyvalue::draft2::api::atomics as atomics2;
use crate::bindings::keyvalue::draft2::api::store::Error as Error2;

impl AlkCtxView<'_> {
    /// Reads `key` for a compare-and-swap.
    async fn cas_read(&mut self, store: Store, key: String) -> Result<Cas, AlkError> {
        let slot = self.ctx.slot("compare-and-swap")?;
        let counter = self.ctx.keyvalue.cas_open.clone();
        let held = CasSlot(counter.clone());
        if counter.fetch_add(1, std::sync::atomic::Ordering::AcqRel) >= MAX_OPEN_CAS {
            return Err(AlkError::InvalidArgument(format!(
                "this instance holds {MAX_OPEN_CAS} compare-and-swaps, the most it may; swap or drop some first"
            )));
        }
        let (current, expected) = store.read_for_swap(&key, self.ctx.now()).await?;
        let value = match expected {
            Expected::Value(_) => None,
            _ => current,
        };
        Ok(Cas {
            store,
            key,
            value,
            expected,
            _slot: slot,
            _held: held,
        })
    }
}

impl atomics2::Host for AlkCtxView<'_> {
    async fn increment(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
        delta: i64,
    ) -> wasmtime::Result<Result<i64, Error2>> {
        let store = self.kv_store(&bucket)?;
        let clock = self.ctx.clock();
        Ok(store
            .increment(
                &key,
                delta as i128,
                i64::MIN as i128..=i64::MAX as i128,
                &*clock,
            )
            .await
            .map(|n| n as i64)
            .map_err(draft2_glue::other))
    }

    async fn swap(
        &mut self,
        cas: Resource<Cas>,
        value: Vec<u8>,
    ) -> wasmtime::Result<Result<(), atomics2::CasError>> {
        let cas = self.table.delete(cas)?;
        let now = self.ctx.now();
        match cas.store.swap(&cas.key, &cas.expected, &value, now).await {
            Ok(true) => Ok(Ok(())),
            Ok(false) => {
                // Lost: a fresh reading, for the guest to retry with.
                let Cas {
                    store,
                    key,
                    _slot,
                    _held,
                    ..
                } = cas;
                // The old reading's places go back first.
                drop((_slot, _held));
                match self.cas_read(store, key).await {
                    Ok(fresh) => Ok(Err(atomics2::CasError::CasFailed(self.table.push(fresh)?))),
                    Err(e) => Ok(Err(atomics2::CasError::StoreError(draft2_glue::other(e)))),
                }
            }
            Err(e) => Ok(Err(atomics2::CasError::StoreError(draft2_glue::other(e)))),
        }
    }
}

impl atomics2::HostCas for AlkCtxView<'_> {
    async fn new(
        &mut self,
        bucket: Resource<Bucket>,
        key: String,
    ) -> wasmtime::Result<Result<Resource<Cas>, Error2>> {
        let store = self.kv_store(&bucket)?;
        match self.cas_read(store, key).await {
            Ok(cas) => Ok(Ok(self.table.push(cas)?)),
            Err(e) => Ok(Err(draft2_glue::other(e))),
        }
    }

    async fn current(
        &mut self,
        cas: Resource<Cas>,
    ) -> wasmtime::Result<Result<Option<Vec<u8>>, Error2>> {
        Ok(Ok(self.table.get(&cas)?.current()))
    }

    async fn drop(&mut self, cas: Resource<Cas>) -> wasmtime::Result<()> {
        self.table.delete(cas)?;
        Ok(())
    }
}
