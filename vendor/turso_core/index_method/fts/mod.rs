//! Full-text search index method: Tantivy over segment-registry storage.
//!
//! Storage model (format v2, see [`format`]): writers only ever add
//! immutable segments; the only shared mutable state is the segment
//! registry, and registry entries are ordinary MVCC-versioned rows in the
//! backing B-tree. Each transaction's view of the index is its snapshot's
//! view of the registry, appends by different transactions commute, and
//! rollback is automatic. A delete inserts a tombstone row (a row that
//! marks a document as deleted) keyed by the document's identity. A merge
//! keeps that identity, so deletes and merges do not conflict either. A
//! merge is the only operation that deletes rows of other transactions.
//! A merge first deletes the registry row of every segment it wants. Under
//! MVCC that delete conflicts when another merge already deleted the row,
//! so the two merges never rewrite the same segment.
//!
//! Under MVCC this allows multiple `BEGIN CONCURRENT` transactions to write
//! the same FTS index concurrently. In WAL mode the same format runs with
//! degenerate concurrency: the pager write lock serializes writers.

#[cfg(not(nightly))]
use crate::alloc::TursoVecInExt;
use crate::alloc::{DynAllocator, DynVec, TursoFromIterator};
use crate::sync::{Arc, Weak};
use crate::types::IOResultOr;
use crate::{
    index_method::{
        parse_patterns, BackingColumn, BackingIndex, BackingSchema, BackingStore, BackingStoreOp,
        BackingTable, IndexMethod, IndexMethodAttachment, IndexMethodConfiguration,
        IndexMethodContext, IndexMethodCursor, IndexMethodDefinition,
    },
    return_if_io,
    schema::IndexColumn,
    storage::btree::CursorTrait,
    translate::collate::CollationSeq,
    turso_assert,
    types::{IOResult, KeyInfo, SeekKey, SeekOp, SeekResult},
    vdbe::Register,
    Connection, LimboError, Result, Value,
};
use parking_lot::Mutex;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::{
    cell::RefCell,
    sync::atomic::{AtomicU64, AtomicUsize, Ordering},
};
use tantivy::{
    directory::RamDirectory,
    fastfield::Column,
    index::SegmentId,
    indexer::{AddOperation, SegmentWriter},
    query::{EnableScoring, Query, Scorer},
    schema::{
        Field, FieldType, IndexRecordOption, JsonObjectOptions, OwnedValue, Schema,
        TextFieldIndexing, TextOptions,
    },
    tokenizer::{
        NgramTokenizer, RawTokenizer, SimpleTokenizer, TextAnalyzer, TokenStream,
        WhitespaceTokenizer,
    },
    DocAddress, DocSet, Index, IndexReader, IndexSettings, Searcher, SegmentReader,
    TantivyDocument, Term, TERMINATED,
};
use turso_parser::ast::{self, Select, SortOrder};
use uncased::UncasedStr;

mod directory;
mod format;
mod rows;

use directory::{BuildDirectory, FileBytes, SnapshotDirectory};
use format::{
    alive_bitset_bytes, document_tombstone_path, parse_document_identity, parse_segment_id,
    segment_chunk_path, segment_chunk_prefix, segment_registry_path, synthesize_meta_json,
    tombstone_del_file_name, with_tantivy_footer, ControlRecord, DocumentIdentity, FtsControl,
    LoadedSegment, SegmentData, SegmentDescriptor, SegmentFileEntry, SegmentIdentities,
    SegmentMetaSpec, FTS2_CONTROL_PATH, FTS2_PATH_PREFIX, FTS2_SEGMENT_PREFIX, FTS2_TOMB_PREFIX,
    FTS_STORAGE_FORMAT_VERSION,
};
use rows::{
    chunk_rows, row_fields, seek_key_for_path, PathTarget, PendingRow, RowDeleter, RowInserter,
    SegmentClaimer,
};

/// Name identifier for the FTS index method, used in `CREATE INDEX ... USING fts`.
pub const FTS_INDEX_METHOD_NAME: &str = "fts";

/// The schema objects of one FTS index: one internal table and one key-only
/// index over `(path, chunk_no, bytes)`.
struct FtsStore {
    schema: BackingSchema,
}

impl FtsStore {
    fn new(index_name: &str) -> Self {
        let table = BackingTable::new(
            format!("fts_dir_{index_name}"),
            vec![
                BackingColumn::new("path", crate::schema::Type::Text),
                BackingColumn::new("chunk_no", crate::schema::Type::Integer),
                BackingColumn::new("bytes", crate::schema::Type::Blob),
            ],
        );
        let index = BackingIndex::on_backing_table(
            &table,
            format!("{}_key", table.table_name()),
            vec![
                "path".to_string(),
                "chunk_no".to_string(),
                "bytes".to_string(),
            ],
            vec![key_info(), key_info(), key_info()],
        );
        Self {
            schema: BackingSchema::new(vec![table], vec![index]),
        }
    }

    fn index(&self) -> &BackingIndex {
        &self.schema.indexes[0]
    }

    fn table_name(&self) -> String {
        self.schema.tables[0].table_name()
    }
}

fn key_info() -> KeyInfo {
    KeyInfo {
        collation: CollationSeq::Binary,
        sort_order: SortOrder::Asc,
        nulls_order: None,
    }
}

/// Memory budget for Tantivy's per-segment writer arena.
pub const DEFAULT_MEMORY_BUDGET_BYTES: usize = 64 * 1024 * 1024;

/// Chunk size (512 KiB) for splitting segment files into backing rows.
pub const DEFAULT_CHUNK_SIZE: usize = 512 * 1024;

/// Documents and tombstones buffered before an intra-statement flush builds
/// an immutable segment. Statement end always flushes whatever is buffered.
pub const BATCH_COMMIT_SIZE: usize = 1000;

/// Longest accepted `fts_match` / MATCH query string, in bytes.
const FTS_MAX_QUERY_BYTES: usize = 16 * 1024;

/// Deepest accepted parenthesis nesting in a query string. Guards Tantivy's
/// recursive parser against stack overflow.
const FTS_MAX_QUERY_NESTING: usize = 64;

/// Maximum assembled searchers retained per FTS attachment. Entries are
/// keyed by the visible segment set (plus per-segment tombstone state), so
/// any snapshot seeing the same set shares one entry.
const FTS_MAX_CACHED_SEARCHERS: usize = 4;

/// Aggregate resident byte budget for the shared per-segment cache.
///
/// This bounds only what is *retained for reuse* after a statement
/// finishes. It is not a bound on live memory: a cursor keeps every visible
/// segment resident while it runs, however large the index is, because
/// Tantivy reads through synchronous callbacks that cannot fall back to
/// storage I/O.
const FTS_MAX_RETAINED_CACHE_BYTES: usize = 192 * 1024 * 1024;

#[cfg(any(feature = "test_helper", feature = "simulator"))]
crate::thread::thread_local! {
    static FTS_RETAINED_CACHE_BYTES_OVERRIDE: core::cell::Cell<Option<usize>> =
        const { core::cell::Cell::new(None) };
}

/// Set the byte limit for cache data kept between statements on the current thread.
/// Tests can reach the limit without indexes that use hundreds of MiB.
/// Pass `None` to restore the default.
#[cfg(any(feature = "test_helper", feature = "simulator"))]
pub fn set_fts_retained_cache_bytes_for_test(bytes: Option<usize>) {
    FTS_RETAINED_CACHE_BYTES_OVERRIDE.with(|cell| cell.set(bytes));
}

fn fts_max_retained_cache_bytes() -> usize {
    #[cfg(any(feature = "test_helper", feature = "simulator"))]
    if let Some(bytes) = FTS_RETAINED_CACHE_BYTES_OVERRIDE.with(|cell| cell.get()) {
        return bytes;
    }
    FTS_MAX_RETAINED_CACHE_BYTES
}

/// Mint distinct on-disk index incarnations within one process.
static NEXT_FTS_INDEX_INCARNATION: AtomicU64 = AtomicU64::new(1);
/// Gives distinct document identity ranges to cursors that have no IO
/// (unit tests without a connection). Each segment build takes a range
/// of `1 << 64` identities.
static NEXT_FTS_IDENTITY_BASE: AtomicU64 = AtomicU64::new(1);
/// Distinguishes cursor instances within a process so a cursor can recognize
/// its own claim on the per-index writer slot across re-entrant calls.
static NEXT_FTS_CURSOR_INSTANCE: AtomicU64 = AtomicU64::new(1);

const ROWID_FIELD: &str = "rowid";
/// Fast fields that hold each document's identity. The index assigns it
/// when it first indexes the document, every merge copies it, and it is
/// the key of the document's tombstone.
const IDENTITY_HI_FIELD: &str = "doc_identity_hi";
const IDENTITY_LO_FIELD: &str = "doc_identity_lo";

// Thread-local tokenizer cache to avoid creating a new tokenizer for each call.
// TextAnalyzer is not Send/Sync, so we use thread_local storage.
crate::thread::thread_local! {
    static FTS_TOKENIZER: RefCell<TextAnalyzer> = RefCell::new(
        TextAnalyzer::builder(SimpleTokenizer::default())
            .filter(tantivy::tokenizer::LowerCaser)
            .build()
    );
}

/// Highlight matching terms in text by wrapping them with tags.
///
/// Standalone function that can be used without an FTS index.
/// It tokenizes both the query and text using Tantivy's default tokenizer,
/// finds matching terms, and wraps them with the specified tags.
pub fn fts_highlight(text: &str, query: &str, before_tag: &str, after_tag: &str) -> String {
    if text.is_empty() || query.is_empty() {
        return text.to_string();
    }

    FTS_TOKENIZER.with(|tokenizer| {
        let mut tokenizer = tokenizer.borrow_mut();

        // Extract query terms (lowercased)
        let query_terms: HashSet<String> = {
            let mut terms = HashSet::default();
            let mut query_stream = tokenizer.token_stream(query);
            while let Some(token) = query_stream.next() {
                terms.insert(token.text.to_string());
            }
            terms
        };
        if query_terms.is_empty() {
            return text.to_string();
        }

        // Tokenize the text and track positions of matching tokens
        let match_ranges: Vec<(usize, usize)> = {
            let mut ranges = Vec::new();
            let mut text_stream = tokenizer.token_stream(text);
            while let Some(token) = text_stream.next() {
                if query_terms.contains(&token.text) {
                    ranges.push((token.offset_from, token.offset_to));
                }
            }
            ranges
        };

        if match_ranges.is_empty() {
            return text.to_string();
        }

        // Optimized string building: pre-calculate size and build forward
        let extra_len = match_ranges.len() * (before_tag.len() + after_tag.len());
        let mut result = String::with_capacity(text.len() + extra_len);
        let mut last_end = 0;

        for (start, end) in &match_ranges {
            // Validate UTF-8 boundaries
            if *start > text.len()
                || *end > text.len()
                || !text.is_char_boundary(*start)
                || !text.is_char_boundary(*end)
            {
                continue;
            }

            // Append text before this match
            if *start > last_end {
                result.push_str(&text[last_end..*start]);
            }

            // Append highlighted match
            result.push_str(before_tag);
            result.push_str(&text[*start..*end]);
            result.push_str(after_tag);

            last_end = *end;
        }

        // Append remaining text after last match
        if last_end < text.len() {
            result.push_str(&text[last_end..]);
        }

        result
    })
}

/// Parse field weights from a string like "body=2.0,title=1.0"
/// Returns a HashMap mapping column names to tantivy 'boost factors'
fn parse_field_weights(weights_str: &str, columns: &[IndexColumn]) -> Result<HashMap<String, f32>> {
    let mut weights = HashMap::default();

    if weights_str.is_empty() {
        return Ok(weights);
    }

    // Get valid column names for validation
    let valid_columns: HashSet<&str> = columns.iter().map(|c| c.name.as_str()).collect();

    // Parse format: "col1=1.5,col2=2.0"
    for entry in split_weights(weights_str) {
        let (col_name, weight_str) = entry?;

        // Validate column exists in index
        if !valid_columns.contains(col_name) {
            return Err(LimboError::ParseError(format!(
                "unknown column '{}' in weights. Valid columns: {}",
                col_name,
                columns
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }

        let weight: f32 = weight_str.parse().map_err(|_| {
            LimboError::ParseError(format!(
                "invalid weight value '{weight_str}' for column '{col_name}'. Expected a number (e.g., 2.0)",
            ))
        })?;
        if !weight.is_finite() || weight <= 0.0 {
            return Err(LimboError::ParseError(format!(
                "weight for column '{col_name}' must be finite and positive, got {weight}",
            )));
        }

        weights.insert(col_name.to_string(), weight);
    }

    Ok(weights)
}

/// Factory for creating FTS index attachments.
#[derive(Debug)]
pub struct FtsIndexMethod;

impl IndexMethod for FtsIndexMethod {
    fn attach(&self, cfg: &IndexMethodConfiguration) -> Result<Arc<dyn IndexMethodAttachment>> {
        let attachment = FtsIndexAttachment::new(cfg.clone())?;
        Ok(Arc::new(attachment))
    }

    fn rename_column_in_with_clause(
        &self,
        with_clause: &mut [(ast::Name, Box<ast::Expr>)],
        from: &str,
        to: &str,
    ) -> Result<()> {
        let Some((_, value)) = with_clause
            .iter_mut()
            .find(|(key, _)| key.as_str().eq_ignore_ascii_case("weights"))
        else {
            return Ok(());
        };
        let ast::Expr::Literal(ast::Literal::String(weights)) = value.as_mut() else {
            return Ok(());
        };
        let entries = split_weights(weights).collect::<Result<Vec<_>>>()?;
        if !entries
            .iter()
            .any(|(column, _)| column.eq_ignore_ascii_case(from))
        {
            return Ok(());
        }
        let renamed: Vec<(&str, &str)> = entries
            .into_iter()
            .map(|(column, weight)| {
                if column.eq_ignore_ascii_case(from) {
                    (to, weight)
                } else {
                    (column, weight)
                }
            })
            .collect();
        let renamed_weights = format!(
            "'{}'",
            crate::util::escape_sql_string_literal(
                &renamed
                    .iter()
                    .map(|(column, weight)| format!("{column}={weight}"))
                    .collect::<Vec<_>>()
                    .join(",")
            )
        );
        if !split_weights(&renamed_weights)
            .collect::<Result<Vec<_>>>()
            .is_ok_and(|read_back| read_back == renamed)
        {
            return Err(LimboError::ParseError(format!(
                "cannot rename column {from} to \"{to}\": the name cannot be written in FTS weights"
            )));
        }
        *weights = renamed_weights;
        Ok(())
    }
}

/// Splits a weights value like 'title=2.0, body=1.0' into (column, weight) pairs
fn split_weights(weights: &str) -> impl Iterator<Item = Result<(&str, &str)>> + '_ {
    weights
        .trim_matches(|c| c == '\'' || c == '"')
        .split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
        .map(|part| {
            let (column, weight) = part.split_once('=').ok_or_else(|| {
                LimboError::ParseError(format!(
                    "invalid weight format '{part}'. Expected 'column=weight' (e.g., 'title=2.0')",
                ))
            })?;
            Ok((column.trim(), weight.trim()))
        })
}

/// The single cursor allowed to flush this FTS index for a given connection.
///
/// One statement can open two write cursors over the same index — a trigger
/// whose body writes the FTS-indexed table it fired on. Their buffered
/// deletes would tombstone the same postings twice and their buffers would
/// not see each other's documents, so the second writer is refused with a
/// `Raise(Abort)` error and the statement rolls back cleanly.
///
/// The slot guards intra-statement reentrancy only. Cross-transaction
/// writers need no exclusion: they append disjoint segment rows (WAL mode
/// additionally serializes them through the pager write lock).
#[derive(Debug)]
struct FtsWriterSlot {
    connection: Weak<Connection>,
    cursor_instance: u64,
}

#[derive(Debug, Default)]
struct FtsRuntimeStats {
    /// Immutable segments built by this attachment (one per flush boundary).
    segment_builds: AtomicUsize,
    /// Searcher-cache lookups / hits / misses.
    read_cache_lookups: AtomicUsize,
    read_cache_hits: AtomicUsize,
    read_cache_misses: AtomicUsize,
    /// Segments whose chunks were loaded from backing storage (byte-cache
    /// misses).
    segment_loads: AtomicUsize,
    /// Segments a merge got, and segments a merge skipped because another
    /// merge held them.
    merge_segments_claimed: AtomicUsize,
    merge_segments_skipped: AtomicUsize,
}

/// Shared per-segment byte cache: segment id → resident file bytes.
///
/// A segment's bytes never change, so entries need no snapshot identity and
/// are shared by every connection. Uncommitted segments may be inserted by
/// their writing transaction: their ids are unguessable and only
/// discoverable through visible registry rows, so other snapshots can never
/// look them up; rollback purges them.
#[derive(Debug, Default)]
struct SegmentByteCache {
    /// Least recently used first.
    entries: Vec<(SegmentId, Arc<SegmentData>)>,
}

impl SegmentByteCache {
    fn total_bytes(&self) -> usize {
        self.entries.iter().fold(0usize, |total, (_, data)| {
            total.saturating_add(data.total_bytes)
        })
    }

    fn get(&mut self, id: &SegmentId) -> Option<Arc<SegmentData>> {
        if fts_max_retained_cache_bytes() == 0 {
            self.entries.clear();
            return None;
        }
        let position = self.entries.iter().position(|(entry, _)| entry == id)?;
        let entry = self.entries.remove(position);
        let data = Arc::clone(&entry.1);
        self.entries.push(entry);
        Some(data)
    }

    fn put(&mut self, id: SegmentId, data: Arc<SegmentData>, budget: usize) {
        if budget == 0 {
            self.entries.clear();
            return;
        }
        self.entries.retain(|(entry, _)| *entry != id);
        self.entries.push((id, data));
        // Always keep the newest entry; evict older ones to fit the budget.
        while self.entries.len() > 1 && self.total_bytes() > budget {
            self.entries.remove(0);
        }
    }

    fn remove(&mut self, id: &SegmentId) {
        self.entries.retain(|(entry, _)| entry != id);
    }
}

/// Cache identity of one assembled searcher: the visible segment set with
/// each segment's tombstone state. Exact comparison — a wrong reuse would
/// silently produce wrong query results.
type SearcherKey = Vec<(SegmentId, u32, BTreeSet<u32>)>;

fn searcher_key(segments: &[LoadedSegment]) -> SearcherKey {
    let mut key: SearcherKey = segments
        .iter()
        .map(|segment| {
            (
                segment.id(),
                segment.descriptor.max_doc,
                segment.deleted.clone(),
            )
        })
        .collect();
    key.sort_by_key(|(id, _, _)| id.uuid_string());
    key
}

struct SearcherCacheEntry {
    key: SearcherKey,
    index: Index,
    reader: IndexReader,
    parser: Arc<tantivy::query::QueryParser>,
    rowid_readers: Arc<[Column<i64>]>,
}

#[derive(Default)]
struct SearcherCache {
    /// Least recently used first.
    entries: Vec<SearcherCacheEntry>,
}

impl SearcherCache {
    fn get(&mut self, key: &SearcherKey) -> Option<&SearcherCacheEntry> {
        if fts_max_retained_cache_bytes() == 0 {
            self.entries.clear();
            return None;
        }
        let position = self.entries.iter().position(|entry| &entry.key == key)?;
        let entry = self.entries.remove(position);
        self.entries.push(entry);
        self.entries.last()
    }

    fn put(&mut self, entry: SearcherCacheEntry) {
        if fts_max_retained_cache_bytes() == 0 {
            self.entries.clear();
            return;
        }
        self.entries.retain(|existing| existing.key != entry.key);
        self.entries.push(entry);
        while self.entries.len() > FTS_MAX_CACHED_SEARCHERS {
            self.entries.remove(0);
        }
    }

    fn purge_segments(&mut self, ids: &[SegmentId]) {
        self.entries
            .retain(|entry| !entry.key.iter().any(|(id, _, _)| ids.contains(id)));
    }
}

/// Attachment-level shared state.
#[derive(Default)]
struct FtsShared {
    segment_bytes: Mutex<SegmentByteCache>,
    searchers: Mutex<SearcherCache>,
    /// The one cursor currently allowed to flush this index per connection.
    writer_slot: Mutex<Option<FtsWriterSlot>>,
    /// Throwaway index used only to mint `SegmentMeta` values for
    /// synthesized `meta.json` content.
    scratch: Mutex<Option<Index>>,
    /// Heuristic count of visible segments: bumped by segment-appending
    /// publishes, reset by merges, reconciled by every full registry scan.
    /// Only used to decide whether the write-path auto-merge should pay for
    /// the real scan — never for correctness (the merge recomputes the true
    /// visible set from its own snapshot). May drift on rollbacks or across
    /// processes; the next scan or merge corrects it.
    visible_segment_estimate: AtomicUsize,
    stats: FtsRuntimeStats,
}

impl std::fmt::Debug for FtsShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FtsShared").finish_non_exhaustive()
    }
}

impl FtsShared {
    /// The scratch index exists because tantivy only hands out `SegmentMeta`
    /// values through an `Index`'s segment inventory
    /// (`Index::new_segment_meta`), and the read path needs one per visible
    /// segment to synthesize the `meta.json` a `SnapshotDirectory` serves.
    /// It is an empty in-RAM index with this attachment's schema: nothing is
    /// ever written to or read from it, and one instance is shared by every
    /// cursor of the attachment.
    fn scratch_index(&self, schema: &Schema) -> Result<Index> {
        let mut scratch = self.scratch.lock();
        if let Some(index) = scratch.as_ref() {
            return Ok(index.clone());
        }
        let index = Index::create(
            RamDirectory::create(),
            schema.clone(),
            IndexSettings::default(),
        )
        .map_err(|e| LimboError::InternalError(format!("FTS scratch index: {e}")))?;
        *scratch = Some(index.clone());
        Ok(index)
    }
}

/// FTS index attachment that holds configuration and creates cursors.
#[derive(Debug)]
pub struct FtsIndexAttachment {
    /// Internal configuration
    cfg: IndexMethodConfiguration,
    /// Tantivy schema for the FTS index
    schema: Schema,
    /// Tantivy field for the rowid column
    rowid_field: Field,
    /// Tantivy fields for the document identity
    identity_hi_field: Field,
    identity_lo_field: Field,
    /// Schema fields for each indexed column
    indexed_fields: Vec<(IndexColumn, Field)>,
    /// Parsed query patterns for FTS queries
    patterns: Vec<Select>,
    /// Weights for each field in FTS scoring, from the WITH clause.
    field_weights: HashMap<String, f32>,
    /// (min_gram, max_gram) for the ngram tokenizer, from the WITH clause
    /// `min_gram`/`max_gram` keys. [DEFAULT_NGRAM_WINDOW] unless configured.
    ngram_window: (usize, usize),
    shared: Arc<FtsShared>,
}

/// Supported tokenizer names for FTS indexes
pub const SUPPORTED_TOKENIZERS: &[&str] = &[
    "default",    // Tantivy default: lowercase + punctuation split + 40 char limit
    "en_stem",    // Like default, plus English stemming ("running" matches "runs")
    "raw",        // No tokenization - exact match only
    "simple",     // Basic whitespace/punctuation split
    "whitespace", // Split on whitespace only
    "ngram",      // N-gram tokenizer (2-3 chars by default)
];

/// Supported keys in the WITH clause of an FTS index
pub const SUPPORTED_WITH_KEYS: &[&str] = &[
    "tokenizer",
    "weights",
    "min_gram",
    "max_gram",
    "json_fields",
    "json_tokenizer",
];

/// Ngram window used when `min_gram`/`max_gram` are not given.
pub const DEFAULT_NGRAM_WINDOW: (usize, usize) = (2, 3);

impl FtsIndexAttachment {
    #[aristo::intent(
        "Every WITH clause key this constructor accepts is also consumed by it: \
         a key outside the supported list is an error, and lookups go through \
         one case-folded map so a mis-cased key cannot slip past. Adding a key \
         to the supported list without reading it from that map recreates the \
         accepted-but-ignored failure this guards against — the DDL succeeds \
         but the index silently gets different semantics than it asked for.",
        verify = "neural",
        id = "fts_with_keys_all_validated_and_consumed"
    )]
    pub fn new(cfg: IndexMethodConfiguration) -> Result<Self> {
        // Validate WITH clause keys the same way bad values are validated:
        // a typo like `tokenzier` must be an error, not a silently different
        // index. Keys are matched case-insensitively.
        let mut parameters: HashMap<&UncasedStr, &Value> = HashMap::default();
        for (key, value) in &cfg.parameters {
            let key_uncased = UncasedStr::new(key);
            if !SUPPORTED_WITH_KEYS
                .iter()
                .any(|supported| UncasedStr::new(supported) == key_uncased)
            {
                return Err(LimboError::ParseError(format!(
                    "unsupported FTS WITH parameter '{}'. Supported parameters: {}",
                    key,
                    SUPPORTED_WITH_KEYS.join(", ")
                )));
            }
            if parameters.insert(key_uncased, value).is_some() {
                return Err(LimboError::ParseError(format!(
                    "duplicate FTS WITH parameter '{key}'"
                )));
            }
        }

        // Parse tokenizer from WITH clause parameters, default to "default"
        // The parser may include surrounding quotes in the value, so we strip them
        let tokenizer_name = parameters
            .get(UncasedStr::new("tokenizer"))
            .and_then(|v| match v {
                Value::Text(t) => {
                    let s = t.to_string();
                    // Strip surrounding single or double quotes if present
                    let trimmed = s.trim_matches(|c| c == '\'' || c == '"');
                    Some(trimmed.to_string())
                }
                _ => None,
            })
            .unwrap_or_else(|| "default".to_string());

        // Validate tokenizer name
        if !SUPPORTED_TOKENIZERS.contains(&tokenizer_name.as_str()) {
            return Err(LimboError::ParseError(format!(
                "unsupported FTS tokenizer '{}'. Supported tokenizers: {}",
                tokenizer_name,
                SUPPORTED_TOKENIZERS.join(", ")
            )));
        }

        let json_columns = parse_json_fields(
            parameters.get(UncasedStr::new("json_fields")).copied(),
            &cfg.columns,
        )?;
        let json_tokenizer = match parameters.get(UncasedStr::new("json_tokenizer")) {
            None => tokenizer_name.as_str(),
            Some(Value::Text(value)) => {
                if json_columns.is_empty() {
                    return Err(LimboError::ParseError(
                        "FTS json_tokenizer requires json_fields".into(),
                    ));
                }
                value.as_str().trim_matches(|c| c == '\'' || c == '"')
            }
            Some(_) => {
                return Err(LimboError::ParseError(
                    "FTS json_tokenizer must be text".into(),
                ))
            }
        };
        if !SUPPORTED_TOKENIZERS.contains(&json_tokenizer) {
            return Err(LimboError::ParseError(format!(
                "unsupported FTS json_tokenizer '{json_tokenizer}'"
            )));
        }

        // Parse the ngram window: WITH (tokenizer = 'ngram', min_gram = 1, max_gram = 3)
        let parse_gram = |key: &str| -> Result<Option<usize>> {
            let Some(value) = parameters.get(UncasedStr::new(key)) else {
                return Ok(None);
            };
            match value {
                Value::Numeric(crate::numeric::Numeric::Integer(v)) if *v >= 1 => {
                    Ok(Some(usize::try_from(*v).expect("checked to be positive")))
                }
                _ => Err(LimboError::ParseError(format!(
                    "FTS WITH parameter '{key}' must be a positive integer"
                ))),
            }
        };
        let min_gram = parse_gram("min_gram")?;
        let max_gram = parse_gram("max_gram")?;
        if (min_gram.is_some() || max_gram.is_some())
            && tokenizer_name != "ngram"
            && json_tokenizer != "ngram"
        {
            return Err(LimboError::ParseError(
                "FTS min_gram and max_gram require tokenizer = 'ngram' or json_tokenizer = 'ngram'"
                    .into(),
            ));
        }
        let ngram_window = (
            min_gram.unwrap_or(DEFAULT_NGRAM_WINDOW.0),
            max_gram.unwrap_or(DEFAULT_NGRAM_WINDOW.1),
        );
        if ngram_window.0 > ngram_window.1 {
            return Err(LimboError::ParseError(format!(
                "FTS ngram window is invalid: min_gram ({}) is greater than max_gram ({})",
                ngram_window.0, ngram_window.1
            )));
        }

        // Parse field weights from WITH clause: weights='body=2.0,title=1.0'
        let field_weights = if let Some(weights_value) = parameters.get(UncasedStr::new("weights"))
        {
            let weights_str = match weights_value {
                Value::Text(t) => t.as_str(),
                _ => "",
            };
            parse_field_weights(weights_str, &cfg.columns)?
        } else {
            HashMap::default()
        };

        // Build Tantivy schema (no Directory or Index creation yet)
        let mut schema_builder = Schema::builder();

        // Use FAST field for rowid to enable efficient columnar access during query result retrieval.
        // This avoids loading full documents from the .store file just to get the rowid.
        let rowid_field = schema_builder.add_i64_field(
            ROWID_FIELD,
            tantivy::schema::INDEXED | tantivy::schema::FAST,
        );
        let identity_hi_field =
            schema_builder.add_u64_field(IDENTITY_HI_FIELD, tantivy::schema::FAST);
        let identity_lo_field =
            schema_builder.add_u64_field(IDENTITY_LO_FIELD, tantivy::schema::FAST);

        let mut indexed_fields = Vec::with_capacity(cfg.columns.len());
        for col in &cfg.columns {
            let is_json = json_columns.contains(&col.name);
            let tokenizer = if is_json {
                json_tokenizer
            } else {
                &tokenizer_name
            };
            let indexing = TextFieldIndexing::default()
                .set_tokenizer(tokenizer)
                .set_index_option(IndexRecordOption::WithFreqsAndPositions);
            let field = if is_json {
                let options = JsonObjectOptions::default()
                    .set_indexing_options(indexing)
                    .set_fast(None);
                schema_builder.add_json_field(&col.name, options)
            } else {
                schema_builder.add_text_field(
                    &col.name,
                    TextOptions::default().set_indexing_options(indexing),
                )
            };
            indexed_fields.push((col.clone(), field));
        }

        let schema = schema_builder.build();

        // Build query patterns for FTS
        // Order matters: more specific patterns should come first
        let cols = cfg
            .columns
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(", ");

        // Pattern 0: score with ORDER BY DESC LIMIT
        let score_pattern = format!(
            "SELECT fts_score({}, ?) as score FROM {} ORDER BY score DESC LIMIT ?",
            cols, cfg.table_name
        );
        // Pattern 1: combined + ORDER BY DESC + LIMIT (most specific)
        let combined_ordered_limit = format!(
            "SELECT fts_score({}, ?1) as score FROM {} WHERE fts_match({}, ?1) ORDER BY score DESC LIMIT ?",
            cols, cfg.table_name, cols
        );
        // Pattern 2: combined + ORDER BY DESC (no LIMIT)
        let combined_ordered = format!(
            "SELECT fts_score({}, ?1) as score FROM {} WHERE fts_match({}, ?1) ORDER BY score DESC",
            cols, cfg.table_name, cols
        );
        // Pattern 3: combined + LIMIT (no ORDER BY)
        let combined_limit = format!(
            "SELECT fts_score({}, ?1) as score FROM {} WHERE fts_match({}, ?1) LIMIT ?",
            cols, cfg.table_name, cols
        );
        // Pattern 4: combined (no ORDER BY, no LIMIT)
        let combined = format!(
            "SELECT fts_score({}, ?1) as score FROM {} WHERE fts_match({}, ?1)",
            cols, cfg.table_name, cols
        );
        // Pattern 5: match + LIMIT
        let match_limit = format!(
            "SELECT * FROM {} WHERE fts_match({}, ?) LIMIT ?",
            cfg.table_name, cols
        );
        // Pattern 6: match (no LIMIT)
        let match_pattern = format!(
            "SELECT * FROM {} WHERE fts_match({}, ?)",
            cfg.table_name, cols
        );
        let patterns = parse_patterns(&[
            &score_pattern,          // 0
            &combined_ordered_limit, // 1
            &combined_ordered,       // 2
            &combined_limit,         // 3
            &combined,               // 4
            &match_limit,            // 5
            &match_pattern,          // 6
        ])?;
        Ok(Self {
            cfg,
            schema,
            rowid_field,
            identity_hi_field,
            identity_lo_field,
            indexed_fields,
            patterns,
            field_weights,
            ngram_window,
            shared: Arc::new(FtsShared::default()),
        })
    }
}

fn parse_json_fields(value: Option<&Value>, columns: &[IndexColumn]) -> Result<HashSet<String>> {
    let mut names = HashSet::default();
    let Some(value) = value else {
        return Ok(names);
    };
    let Value::Text(value) = value else {
        return Err(LimboError::ParseError(
            "FTS json_fields must be a comma-separated list of indexed columns".into(),
        ));
    };
    let value = value.as_str().trim_matches(|c| c == '\'' || c == '"');
    for name in value.split(',').map(str::trim) {
        if name.is_empty() {
            return Err(LimboError::ParseError(
                "empty column name in FTS json_fields".into(),
            ));
        }
        let column = columns
            .iter()
            .find(|col| col.name.eq_ignore_ascii_case(name))
            .ok_or_else(|| LimboError::ParseError(format!("unknown FTS JSON column '{name}'")))?;
        if !names.insert(column.name.clone()) {
            return Err(LimboError::ParseError(format!(
                "duplicate FTS JSON column '{name}'"
            )));
        }
    }
    Ok(names)
}

impl IndexMethodAttachment for FtsIndexAttachment {
    fn definition<'a>(&'a self) -> IndexMethodDefinition<'a> {
        IndexMethodDefinition {
            method_name: FTS_INDEX_METHOD_NAME,
            table_name: &self.cfg.table_name,
            index_name: &self.cfg.index_name,
            patterns: &self.patterns,
            backing_btree: false,
            // Unordered match queries stream directly from Tantivy scorers.
            // UPDATE/DELETE must therefore collect stable rowids before writes.
            results_materialized: false,
            mvcc_support: super::IndexMethodMvccSupport::TransactionalBackingStore,
        }
    }

    fn init(&self) -> Result<Box<dyn IndexMethodCursor>> {
        Ok(Box::new(FtsCursor::new(self)))
    }

    fn backing_schema(&self) -> BackingSchema {
        FtsStore::new(&self.cfg.index_name).schema
    }

    fn result_column(
        &self,
        pattern: &ast::Expr,
        parameters: &HashMap<i32, ast::Expr>,
    ) -> Option<Box<ast::Expr>> {
        let mut result = crate::util::try_substitute_parameters(pattern, parameters)?;
        let ast::Expr::FunctionCall { name, args, .. } = result.as_mut() else {
            return Some(result);
        };
        if !name.as_str().eq_ignore_ascii_case("fts_score") {
            return Some(result);
        }
        let ast::Expr::Literal(ast::Literal::String(fields)) =
            parameters.get(&crate::util::FTS_FIELD_PARAMETER)?
        else {
            return None;
        };
        let mut selected = Vec::new();
        for field in fields.trim_matches('\'').split(',') {
            selected.push(args.get(field.parse::<usize>().ok()?)?.clone());
        }
        selected.push(args.last()?.clone());
        *args = selected;
        Some(result)
    }
}

/// Pattern indices for FTS queries
const FTS_PATTERN_SCORE: i64 = 0;
const FTS_PATTERN_COMBINED_ORDERED_LIMIT: i64 = 1;
const FTS_PATTERN_COMBINED_ORDERED: i64 = 2;
const FTS_PATTERN_COMBINED_LIMIT: i64 = 3;
const FTS_PATTERN_COMBINED: i64 = 4;
pub(crate) const FTS_PATTERN_MATCH_LIMIT: i64 = 5;
pub(crate) const FTS_PATTERN_MATCH: i64 = 6;

fn bounded_query_limit(limit: Option<i64>, live_docs: u64) -> usize {
    let live_docs = usize::try_from(live_docs).unwrap_or(usize::MAX);
    match limit {
        Some(0) => 0,
        Some(limit) if limit > 0 => usize::try_from(limit).unwrap_or(usize::MAX).min(live_docs),
        // A negative LIMIT means unlimited in SQLite.
        Some(_) | None => live_docs,
    }
}

// ============================ cursor ============================

/// One document buffered for the next segment build.
struct BufferedDoc {
    rowid: i64,
    doc: TantivyDocument,
}

/// In-memory effects to apply once a publish's rows are durably staged.
enum PublishApply {
    /// Nothing beyond the rows themselves (the control row).
    Nothing,
    /// A statement flush: append the new segment (if any) to the visible
    /// set. Tombstones were already applied to `segments` at delete() time.
    AppendSegment(Option<LoadedSegment>),
    /// Merge: the visible set becomes exactly these segments.
    ReplaceSegments(Vec<LoadedSegment>),
}

/// A resumable row publication: delete rows, then insert rows, then apply
/// the in-memory effects exactly once.
struct PendingPublish {
    inserter: Option<RowInserter>,
    deleter: Option<RowDeleter>,
    apply: PublishApply,
}

/// Driver states for the open/scan machine. Everything that must survive
/// an I/O yield inside one state lives in the variant; scan results shared
/// across states live in scratch fields on the cursor
/// (`scan_descriptors`, `scan_tombs`, `scan_data`).
#[derive(Debug)]
enum FtsState {
    /// Initial state.
    Init,
    /// Seeking the v2 control row, which marks a v2 store.
    SeekControl,
    /// Advancing after the control seek returned `TryAdvance`.
    AdvanceToControl,
    /// Positioned at (or after) where the control row would be.
    ReadControl,
    /// No control row: rewinding to tell an empty store from one written
    /// by the pre-registry FTS implementation (which is refused).
    ProbeFormat { rewound: bool },
    /// Range-scanning the visible `(SEGMENT, *)` registry rows.
    ScanSegments { seeked: bool, advance_pending: bool },
    /// Range-scanning the visible tombstone rows.
    ScanTombs { seeked: bool, advance_pending: bool },
    /// Loading chunk rows for visible segments absent from the byte cache.
    /// `queue` holds indices into `scan_descriptors`.
    LoadChunks {
        queue: Vec<usize>,
        pos: usize,
        /// file_ord -> (chunk_no -> bytes) for the segment at `queue[pos]`.
        chunks: HashMap<u32, HashMap<i64, Vec<u8>>>,
        seeked: bool,
        advance_pending: bool,
    },
    /// Assembling the Tantivy view over the loaded segment set.
    BuildIndex,
    /// Snapshot (or format probe) complete.
    Ready,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum OptimizeState {
    #[default]
    Start,
    Open,
    LoadSnapshot,
    Flush,
    PublishFlush,
    Claim,
    PublishMerge,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum StatementCommitState {
    #[default]
    Start,
    PublishFlush {
        auto_merge: bool,
    },
    CheckMerge,
    LoadSnapshot {
        threshold: usize,
    },
    Claim,
    PublishMerge,
    Finish,
}

/// Streaming query support: one segment's scorer plus its rowid column.
struct FtsStreamingSegment {
    scorer: Box<dyn Scorer>,
    rowids: Column<i64>,
    alive: Option<tantivy::fastfield::AliveBitSet>,
}

struct FtsHitStream {
    segments: Vec<FtsStreamingSegment>,
    segment_pos: usize,
    remaining: usize,
    scores_enabled: bool,
    current: Option<(f32, i64)>,
}

impl FtsHitStream {
    fn advance(&mut self) -> Result<bool> {
        self.current = None;
        if self.remaining == 0 {
            return Ok(false);
        }

        while let Some(segment) = self.segments.get_mut(self.segment_pos) {
            let doc_id = segment.scorer.doc();
            if doc_id == TERMINATED {
                self.segment_pos += 1;
                continue;
            }
            let score = self.scores_enabled.then(|| segment.scorer.score());
            segment.scorer.advance();

            if segment
                .alive
                .as_ref()
                .is_some_and(|alive| alive.is_deleted(doc_id))
            {
                continue;
            }
            let rowid = segment.rowids.first(doc_id).ok_or_else(|| {
                LimboError::InternalError("FTS: rowid fast field missing value".into())
            })?;
            self.current = Some((score.unwrap_or(0.0), rowid));
            self.remaining -= 1;
            return Ok(true);
        }

        Ok(false)
    }
}

/// Cursor for executing FTS operations (queries, inserts, deletes).
///
/// A write cursor never opens a Tantivy `IndexWriter`: it buffers documents
/// and builds one immutable segment per flush boundary through
/// `SegmentWriter`, then publishes the segment by inserting registry and
/// chunk rows through the ordinary (MVCC-aware) backing cursor. Insert-only
/// statements never load the existing index at all.
pub struct FtsCursor {
    allocator: DynAllocator,
    schema: Schema,
    rowid_field: Field,
    identity_hi_field: Field,
    identity_lo_field: Field,
    /// (min_gram, max_gram) window for the ngram tokenizer
    ngram_window: (usize, usize),
    indexed_fields: Vec<(IndexColumn, Field)>,
    /// The user-visible index name, for error messages.
    index_name: String,
    store: FtsStore,
    /// Pre-computed default fields for QueryParser (avoids rebuilding Vec per query)
    default_fields: Vec<Field>,
    /// Pre-computed (Field, boost) pairs for QueryParser (avoids re-iterating per query)
    field_boosts: Vec<(Field, f32)>,
    shared: Arc<FtsShared>,
    /// This cursor's identity in [`FtsWriterSlot`] claims.
    cursor_instance_id: u64,
    /// Weak so a cursor parked on its connection does not keep the
    /// connection alive (see `IndexMethodContext::connection`).
    connection: Option<Weak<Connection>>,
    database_id: Option<usize>,
    fts_dir_cursor: Option<Box<dyn CursorTrait>>,
    /// A create or a drop of the backing store that is in progress. It is
    /// `Some` only while the operation waits at an I/O yield.
    pending_store_op: Option<BackingStoreOp>,
    backing: Option<BackingStore>,

    control: Option<FtsControl>,
    /// The snapshot's visible segment set (descriptors + resident bytes +
    /// tombstone state), including this transaction's own published
    /// segments. Valid once `snapshot_loaded`.
    segments: Vec<LoadedSegment>,
    snapshot_loaded: bool,

    // Scratch for the open/scan machine.
    scan_descriptors: Vec<SegmentDescriptor>,
    /// Identities of every visible tombstone row.
    scan_tombs: HashSet<DocumentIdentity>,
    scan_data: HashMap<SegmentId, Arc<SegmentData>>,
    /// When true, `open` stops after format detection instead of loading
    /// the snapshot (the insert fast path).
    probe_only: bool,

    // Assembled Tantivy view.
    index: Option<Index>,
    reader: Option<IndexReader>,
    searcher: Option<Searcher>,
    cached_parser: Option<Arc<tantivy::query::QueryParser>>,
    rowid_readers: Arc<[Column<i64>]>,

    // Write buffers.
    doc_buffer: Vec<BufferedDoc>,
    /// Identities of the documents deleted since the last flush. The next
    /// flush writes them as tombstone rows. The same tombstones are already
    /// in `segments[..].deleted`, which this transaction's own reads use.
    pending_tombstone_rows: Vec<DocumentIdentity>,
    /// Row publication in flight (statement flush, control row, or merge).
    publish: Option<PendingPublish>,
    /// A merge that is still claiming its input segments.
    merge_claim: Option<SegmentClaimer>,
    optimize_state: OptimizeState,
    statement_commit_state: StatementCommitState,
    /// Segment ids this transaction published into the shared byte cache;
    /// purged on rollback.
    own_published: Vec<SegmentId>,

    state: FtsState,
    /// True while `open_write` is driving the shared open state machine.
    opening_for_write: bool,
    /// True once this cursor holds the per-connection writer slot.
    holds_writer_slot: bool,

    // Query iteration.
    current_hits: Vec<(f32, DocAddress, i64)>,
    streaming_hits: Option<FtsHitStream>,
    hit_pos: usize,
    current_pattern: i64,
}

impl FtsCursor {
    /// Creates a new FTS cursor with the given configuration.
    fn new(attachment: &FtsIndexAttachment) -> Self {
        let store = FtsStore::new(&attachment.cfg.index_name);
        let indexed_fields = attachment.indexed_fields.clone();
        let default_fields: Vec<Field> = indexed_fields.iter().map(|(_, f)| *f).collect();
        let field_boosts: Vec<(Field, f32)> = indexed_fields
            .iter()
            .filter_map(|(col, field)| {
                attachment
                    .field_weights
                    .get(&col.name)
                    .map(|&boost| (*field, boost))
            })
            .collect();
        Self {
            allocator: DynAllocator::default(),
            schema: attachment.schema.clone(),
            rowid_field: attachment.rowid_field,
            identity_hi_field: attachment.identity_hi_field,
            identity_lo_field: attachment.identity_lo_field,
            ngram_window: attachment.ngram_window,
            indexed_fields,
            index_name: attachment.cfg.index_name.clone(),
            store,
            default_fields,
            field_boosts,
            shared: Arc::clone(&attachment.shared),
            cursor_instance_id: NEXT_FTS_CURSOR_INSTANCE.fetch_add(1, Ordering::Relaxed),
            connection: None,
            database_id: None,
            fts_dir_cursor: None,
            pending_store_op: None,
            backing: None,
            control: None,
            segments: Vec::new(),
            snapshot_loaded: false,
            scan_descriptors: Vec::new(),
            scan_tombs: HashSet::default(),
            scan_data: HashMap::default(),
            probe_only: false,
            index: None,
            reader: None,
            searcher: None,
            cached_parser: None,
            rowid_readers: Arc::default(),
            doc_buffer: Vec::new(),
            pending_tombstone_rows: Vec::new(),
            publish: None,
            merge_claim: None,
            optimize_state: OptimizeState::Start,
            statement_commit_state: StatementCommitState::Start,
            own_published: Vec::new(),
            state: FtsState::Init,
            opening_for_write: false,
            holds_writer_slot: false,
            current_hits: Vec::new(),
            streaming_hits: None,
            hit_pos: 0,
            current_pattern: FTS_PATTERN_SCORE,
        }
    }

    fn pending_op_count(&self) -> usize {
        self.doc_buffer.len() + self.pending_tombstone_rows.len()
    }

    fn is_publishing(&self) -> bool {
        self.publish.is_some()
    }

    /// Claim the per-index writer slot for this cursor, or refuse if another
    /// cursor on the same connection already holds it. See [`FtsWriterSlot`].
    fn claim_writer_slot(&mut self) -> Result<()> {
        if self.holds_writer_slot {
            return Ok(());
        }
        let conn = self
            .connection
            .as_ref()
            .and_then(Weak::upgrade)
            .ok_or_else(|| {
                LimboError::InternalError("FTS cursor claimed writer slot before open".to_string())
            })?;
        {
            let mut slot = self.shared.writer_slot.lock();
            if let Some(claim) = slot.as_ref() {
                let same_live_connection = claim
                    .connection
                    .upgrade()
                    .is_some_and(|owner| Arc::ptr_eq(&owner, &conn));
                if same_live_connection && claim.cursor_instance != self.cursor_instance_id {
                    // Raise(Abort) so the whole statement rolls back: the
                    // refused write may sit mid-statement (a trigger body),
                    // and its base rows must not commit without their index
                    // entries.
                    return Err(LimboError::Raise(
                        turso_parser::ast::ResolveType::Abort,
                        "statement already has an open writer on this FTS index; \
                         a trigger cannot write the FTS-indexed table its firing \
                         statement is writing"
                            .to_string(),
                    ));
                }
                // A claim from another (or dead) connection: cross-connection
                // writers append disjoint segments and need no exclusion, so
                // this claim is stale for us. Replace it.
            }
            *slot = Some(FtsWriterSlot {
                connection: Arc::downgrade(&conn),
                cursor_instance: self.cursor_instance_id,
            });
        }
        self.holds_writer_slot = true;
        Ok(())
    }

    /// Release the writer slot if this cursor holds it. Idempotent.
    fn release_writer_slot(&mut self) {
        self.holds_writer_slot = false;
        let mut slot = self.shared.writer_slot.lock();
        if slot
            .as_ref()
            .is_some_and(|claim| claim.cursor_instance == self.cursor_instance_id)
        {
            *slot = None;
        }
    }

    /// Open the backing B-tree cursor for the FTS row store.
    fn open_cursor(&mut self, conn: &Arc<Connection>, database_id: usize) -> Result<()> {
        if self.fts_dir_cursor.is_some() {
            return Ok(());
        }
        let backing =
            BackingStore::lookup(conn, database_id, self.store.index())?.ok_or_else(|| {
                LimboError::InternalError(format!(
                    "FTS backing store {} not found",
                    self.store.table_name()
                ))
            })?;
        self.fts_dir_cursor = Some(backing.open_cursor()?);
        self.backing = Some(backing);
        Ok(())
    }

    /// Register custom tokenizers with a Tantivy index.
    fn register_tokenizers(&self, index: &Index) {
        let tokenizers = index.tokenizers();
        tokenizers.register("raw", RawTokenizer::default());
        tokenizers.register("simple", SimpleTokenizer::default());
        tokenizers.register("whitespace", WhitespaceTokenizer::default());
        // Full n-grams for substring matching (not prefix-only). The window
        // comes from the WITH clause `min_gram`/`max_gram` keys and was
        // validated at CREATE INDEX time, so construction cannot fail here.
        let (min_gram, max_gram) = self.ngram_window;
        if let Ok(ngram) = NgramTokenizer::new(min_gram, max_gram, false) {
            // Lowercase the n-grams so matching is case-insensitive, like the
            // other tokenizers.
            let analyzer = TextAnalyzer::builder(ngram)
                .filter(tantivy::tokenizer::LowerCaser)
                .build();
            tokenizers.register("ngram", analyzer);
        }
    }

    fn build_query_parser(&self, index: &Index) -> Arc<tantivy::query::QueryParser> {
        let mut parser = tantivy::query::QueryParser::for_index(index, self.default_fields.clone());
        for &(field, boost) in &self.field_boosts {
            parser.set_field_boost(field, boost);
        }
        Arc::new(parser)
    }

    /// Assemble the Tantivy view (index, reader, searcher, parser) over the
    /// cursor's in-memory segment set, consulting the shared searcher cache
    /// first. Pure CPU work — every byte is already resident.
    fn build_snapshot_view(&mut self, publish_to_cache: bool) -> Result<()> {
        let key = searcher_key(&self.segments);
        self.shared
            .stats
            .read_cache_lookups
            .fetch_add(1, Ordering::Relaxed);
        if let Some(entry) = self.shared.searchers.lock().get(&key) {
            self.shared
                .stats
                .read_cache_hits
                .fetch_add(1, Ordering::Relaxed);
            self.searcher = Some(entry.reader.searcher());
            self.index = Some(entry.index.clone());
            self.reader = Some(entry.reader.clone());
            self.cached_parser = Some(Arc::clone(&entry.parser));
            self.rowid_readers = Arc::clone(&entry.rowid_readers);
            return Ok(());
        }
        self.shared
            .stats
            .read_cache_misses
            .fetch_add(1, Ordering::Relaxed);

        let mut files: HashMap<PathBuf, FileBytes> = HashMap::default();
        for segment in &self.segments {
            for (name, data) in &segment.data.files {
                files.insert(PathBuf::from(name), Arc::clone(data));
            }
            if !segment.deleted.is_empty() {
                // Serve the tombstone set as the segment's `.del` file so
                // the alive filter is enforced at the SegmentReader level
                // and every query path honors it.
                let bytes = with_tantivy_footer(alive_bitset_bytes(
                    segment.descriptor.max_doc,
                    &segment.deleted,
                    &self.allocator,
                )?)?;
                files.insert(
                    PathBuf::from(tombstone_del_file_name(&segment.id())),
                    Arc::new(bytes),
                );
            }
        }
        let scratch = self.shared.scratch_index(&self.schema)?;
        let specs: Vec<SegmentMetaSpec> =
            self.segments.iter().map(LoadedSegment::meta_spec).collect();
        let meta_json = synthesize_meta_json(&scratch, &self.schema, &specs, &self.allocator)?;
        let directory = SnapshotDirectory::new(files, meta_json);
        let index = Index::open(directory)
            .map_err(|e| LimboError::InternalError(format!("FTS snapshot open: {e}")))?;
        self.register_tokenizers(&index);
        let reader = index
            .reader_builder()
            // Manual reload policy: this directory's `watch` cannot deliver
            // callbacks, so the default on-commit policy would never fire.
            .reload_policy(tantivy::ReloadPolicy::Manual)
            .try_into()
            .map_err(|e: tantivy::TantivyError| LimboError::InternalError(e.to_string()))?;
        let parser = self.build_query_parser(&index);
        let searcher = reader.searcher();
        let rowid_readers: Arc<[Column<i64>]> = searcher
            .segment_readers()
            .iter()
            .map(|segment| {
                segment
                    .fast_fields()
                    .i64(ROWID_FIELD)
                    .map_err(|e| LimboError::InternalError(format!("FTS fast field error: {e}")))
            })
            .collect::<Result<_>>()?;
        if publish_to_cache {
            self.shared.searchers.lock().put(SearcherCacheEntry {
                key,
                index: index.clone(),
                reader: IndexReader::clone(&reader),
                parser: Arc::clone(&parser),
                rowid_readers: Arc::clone(&rowid_readers),
            });
        }
        self.searcher = Some(searcher);
        self.index = Some(index);
        self.reader = Some(reader);
        self.cached_parser = Some(parser);
        self.rowid_readers = rowid_readers;
        Ok(())
    }

    /// Whether this cursor's assembled view may enter the shared searcher
    /// cache. A view containing this transaction's own uncommitted segments
    /// is keyed by ids other snapshots cannot construct, so sharing it is
    /// harmless — but it would waste a cache slot; keep only clean views.
    fn view_is_cacheable(&self) -> bool {
        self.own_published.is_empty()
            && self.doc_buffer.is_empty()
            && self.pending_tombstone_rows.is_empty()
    }

    /// Invalidate the assembled view after the segment set changed.
    fn invalidate_snapshot_view(&mut self) {
        self.index = None;
        self.reader = None;
        self.searcher = None;
        self.cached_parser = None;
        self.rowid_readers = Arc::default();
    }

    /// Make sure `self.searcher` reflects the current in-memory segment set.
    fn ensure_searcher(&mut self) -> Result<()> {
        if self.searcher.is_some() {
            return Ok(());
        }
        let cacheable = self.view_is_cacheable();
        self.build_snapshot_view(cacheable)
    }

    /// Drive the open/scan state machine until the snapshot (or, with
    /// `probe_only`, just the format detection) is complete.
    ///
    /// The machine runs three range scans over the backing rows — registry
    /// descriptors, tombstones, then chunks of segments the byte cache does
    /// not hold — and assembles the Tantivy view from the result. A store
    /// with no control row is either empty or was written by the
    /// pre-registry FTS implementation; the latter is refused with a
    /// rebuild hint, since that layout is not readable by this code.
    fn drive_open(&mut self) -> IOResultOr<()> {
        let conn = self
            .connection
            .as_ref()
            .and_then(Weak::upgrade)
            .ok_or_else(|| {
                LimboError::InternalError("FTS cursor has no live connection".to_string())
            })?;
        let database_id = self.database_id.ok_or_else(|| {
            LimboError::InternalError("FTS database id is not initialized".to_string())
        })?;
        loop {
            match &mut self.state {
                FtsState::Init => {
                    self.open_cursor(&conn, database_id)?;
                    self.scan_descriptors.clear();
                    self.scan_tombs.clear();
                    self.scan_data.clear();
                    self.state = FtsState::SeekControl;
                }
                FtsState::SeekControl => {
                    let cursor = self.fts_dir_cursor.as_mut().ok_or_else(|| {
                        LimboError::InternalError("cursor not initialized".into())
                    })?;
                    let seek_key = seek_key_for_path(FTS2_CONTROL_PATH)?;
                    let seek_result = return_if_io!(cursor.seek(
                        SeekKey::IndexKey(seek_key.as_record_ref()),
                        SeekOp::GE { eq_only: false },
                    ));
                    self.state = match seek_result {
                        SeekResult::NotFound => FtsState::ProbeFormat { rewound: false },
                        SeekResult::TryAdvance => FtsState::AdvanceToControl,
                        SeekResult::Found => FtsState::ReadControl,
                    };
                }
                FtsState::AdvanceToControl => {
                    let cursor = self.fts_dir_cursor.as_mut().ok_or_else(|| {
                        LimboError::InternalError("cursor not initialized".into())
                    })?;
                    return_if_io!(cursor.next());
                    self.state = if cursor.has_record() {
                        FtsState::ReadControl
                    } else {
                        FtsState::ProbeFormat { rewound: false }
                    };
                }
                FtsState::ReadControl => {
                    let cursor = self.fts_dir_cursor.as_mut().ok_or_else(|| {
                        LimboError::InternalError("cursor not initialized".into())
                    })?;
                    if !cursor.has_record() {
                        self.state = FtsState::ProbeFormat { rewound: false };
                        continue;
                    }
                    let record = return_if_io!(cursor.record()).ok_or_else(|| {
                        LimboError::Corrupt("FTS cursor has no record payload".into())
                    })?;
                    let (path, _, bytes) = row_fields(record)?;
                    if path != FTS2_CONTROL_PATH {
                        self.state = FtsState::ProbeFormat { rewound: false };
                        continue;
                    }
                    self.control = Some(match FtsControl::decode(&bytes)? {
                        ControlRecord::Current(control) => control,
                        ControlRecord::OtherVersion(format_version) => {
                            return Err(self.unsupported_format_error(format_version).into());
                        }
                    });
                    if self.probe_only {
                        // Insert fast path: the store is v2; nothing else
                        // needs loading to append segments.
                        self.state = FtsState::Ready;
                        return Ok(IOResult::Done(()));
                    }
                    self.state = FtsState::ScanSegments {
                        seeked: false,
                        advance_pending: false,
                    };
                }
                FtsState::ProbeFormat { rewound } => {
                    let cursor = self.fts_dir_cursor.as_mut().ok_or_else(|| {
                        LimboError::InternalError("cursor not initialized".into())
                    })?;
                    if !*rewound {
                        return_if_io!(cursor.rewind());
                        *rewound = true;
                    }
                    if !cursor.has_record() {
                        // Empty store with no control row. `create()` always
                        // stages the control row in the same transaction as
                        // the table, so this only happens when the backing
                        // table was recreated behind the index's back. A read
                        // sees an empty index; a write must not append
                        // segments the reader will later refuse for lacking
                        // a control row.
                        if self.opening_for_write {
                            return Err(LimboError::Corrupt(format!(
                                "FTS index {name} has a backing store with no control row \
                                 and cannot be written; rebuild it with `DROP INDEX {name}` \
                                 followed by `CREATE INDEX ... USING fts`",
                                name = self.index_name
                            ))
                            .into());
                        }
                        self.segments.clear();
                        self.snapshot_loaded = true;
                        self.state = FtsState::BuildIndex;
                        continue;
                    }
                    let record = return_if_io!(cursor.record()).ok_or_else(|| {
                        LimboError::Corrupt("FTS cursor has no record payload".into())
                    })?;
                    let (path, _, _) = row_fields(record)?;
                    if path.starts_with(FTS2_PATH_PREFIX) {
                        // v2 rows must be accompanied by the control row,
                        // which sorts inside the same scan range and was not
                        // found.
                        return Err(LimboError::Corrupt(
                            "FTS v2 store has rows but no control record".into(),
                        )
                        .into());
                    }
                    // Rows without the `fts2/` prefix were written by the
                    // pre-registry FTS implementation (a whole Tantivy
                    // directory keyed by file name). That layout is not
                    // supported; the index has to be rebuilt from the base
                    // table. `DROP INDEX` does not open the store, so the
                    // rebuild always works.
                    return Err(LimboError::InvalidArgument(format!(
                        "FTS index {name} was created by an older version of Turso \
                         and its storage format is no longer supported; rebuild it \
                         with `DROP INDEX {name}` followed by `CREATE INDEX ... USING fts`",
                        name = self.index_name
                    ))
                    .into());
                }
                FtsState::ScanSegments {
                    seeked,
                    advance_pending,
                } => {
                    let cursor = self.fts_dir_cursor.as_mut().ok_or_else(|| {
                        LimboError::InternalError("cursor not initialized".into())
                    })?;
                    if !*seeked {
                        let seek_key = seek_key_for_path(FTS2_SEGMENT_PREFIX)?;
                        let seek_result = return_if_io!(cursor.seek(
                            SeekKey::IndexKey(seek_key.as_record_ref()),
                            SeekOp::GE { eq_only: false },
                        ));
                        *seeked = true;
                        match seek_result {
                            SeekResult::NotFound => {
                                self.state = FtsState::ScanTombs {
                                    seeked: false,
                                    advance_pending: false,
                                };
                                continue;
                            }
                            SeekResult::TryAdvance => {
                                *advance_pending = true;
                            }
                            SeekResult::Found => {}
                        }
                    }
                    if *advance_pending {
                        return_if_io!(cursor.next());
                        *advance_pending = false;
                    }
                    if !cursor.has_record() {
                        self.state = FtsState::ScanTombs {
                            seeked: false,
                            advance_pending: false,
                        };
                        continue;
                    }
                    let record = return_if_io!(cursor.record()).ok_or_else(|| {
                        LimboError::Corrupt("FTS cursor has no record payload".into())
                    })?;
                    let (path, _, bytes) = row_fields(record)?;
                    let Some(uuid) = path.strip_prefix(FTS2_SEGMENT_PREFIX) else {
                        // Rows sit in key order and nothing sorts between
                        // the segment and tombstone ranges, so the only
                        // legitimate range end is a tombstone row (or no
                        // row at all, handled above). Anything else is a
                        // corrupted registry row; stopping silently here
                        // would drop every segment after it.
                        if !path.starts_with(FTS2_TOMB_PREFIX) {
                            return Err(LimboError::Corrupt(format!(
                                "FTS registry scan hit an unrecognized row: {path}"
                            ))
                            .into());
                        }
                        self.state = FtsState::ScanTombs {
                            seeked: false,
                            advance_pending: false,
                        };
                        continue;
                    };
                    let segment_id = parse_segment_id(uuid)?;
                    let descriptor = SegmentDescriptor::decode(segment_id, &bytes)?;
                    // Duplicate segment ids in one searcher trip a
                    // SearcherGeneration assert inside Tantivy; dedupe the
                    // registry scan defensively.
                    if self
                        .scan_descriptors
                        .iter()
                        .all(|existing| existing.segment_id != segment_id)
                    {
                        self.scan_descriptors.push(descriptor);
                    } else {
                        let existing = self
                            .scan_descriptors
                            .iter()
                            .find(|existing| existing.segment_id == segment_id);
                        tracing::error!(
                            segment = %segment_id.uuid_string(),
                            identical = existing == Some(&descriptor),
                            existing = ?existing,
                            duplicate = ?descriptor,
                            "duplicate FTS registry row; keeping the first"
                        );
                    }
                    *advance_pending = true;
                }
                FtsState::ScanTombs {
                    seeked,
                    advance_pending,
                } => {
                    let cursor = self.fts_dir_cursor.as_mut().ok_or_else(|| {
                        LimboError::InternalError("cursor not initialized".into())
                    })?;
                    if !*seeked {
                        let seek_key = seek_key_for_path(FTS2_TOMB_PREFIX)?;
                        let seek_result = return_if_io!(cursor.seek(
                            SeekKey::IndexKey(seek_key.as_record_ref()),
                            SeekOp::GE { eq_only: false },
                        ));
                        *seeked = true;
                        match seek_result {
                            SeekResult::NotFound => {
                                self.state = self.chunk_load_state();
                                continue;
                            }
                            SeekResult::TryAdvance => {
                                *advance_pending = true;
                            }
                            SeekResult::Found => {}
                        }
                    }
                    if *advance_pending {
                        return_if_io!(cursor.next());
                        *advance_pending = false;
                    }
                    if !cursor.has_record() {
                        self.state = self.chunk_load_state();
                        continue;
                    }
                    let record = return_if_io!(cursor.record()).ok_or_else(|| {
                        LimboError::Corrupt("FTS cursor has no record payload".into())
                    })?;
                    let (path, _, _) = row_fields(record)?;
                    let Some(identity) = path.strip_prefix(FTS2_TOMB_PREFIX) else {
                        // Tombstones are the last v2 range; no row
                        // legitimately follows them. A mismatch mid-scan is
                        // a corrupted tombstone row, and stopping silently
                        // would resurrect every deleted doc after it.
                        return Err(LimboError::Corrupt(format!(
                            "FTS tombstone scan hit an unrecognized row: {path}"
                        ))
                        .into());
                    };
                    self.scan_tombs.insert(parse_document_identity(identity)?);
                    *advance_pending = true;
                }
                FtsState::LoadChunks {
                    queue,
                    pos,
                    chunks,
                    seeked,
                    advance_pending,
                } => {
                    let Some(descriptor_idx) = queue.get(*pos).copied() else {
                        self.state = FtsState::BuildIndex;
                        continue;
                    };
                    let segment_id = self.scan_descriptors[descriptor_idx].segment_id;
                    let prefix = segment_chunk_prefix(&segment_id);
                    let cursor = self.fts_dir_cursor.as_mut().ok_or_else(|| {
                        LimboError::InternalError("cursor not initialized".into())
                    })?;
                    if !*seeked {
                        let seek_key = seek_key_for_path(&prefix)?;
                        let seek_result = return_if_io!(cursor.seek(
                            SeekKey::IndexKey(seek_key.as_record_ref()),
                            SeekOp::GE { eq_only: false },
                        ));
                        *seeked = true;
                        if matches!(seek_result, SeekResult::TryAdvance) {
                            *advance_pending = true;
                        }
                    }
                    if *advance_pending {
                        return_if_io!(cursor.next());
                        *advance_pending = false;
                    }
                    let mut segment_done = !cursor.has_record();
                    if !segment_done {
                        let record = return_if_io!(cursor.record()).ok_or_else(|| {
                            LimboError::Corrupt("FTS cursor has no record payload".into())
                        })?;
                        let (path, chunk_no, bytes) = row_fields(record)?;
                        match path.strip_prefix(prefix.as_str()) {
                            Some(file_ord) => {
                                let file_ord: u32 = file_ord.parse().map_err(|_| {
                                    LimboError::Corrupt(format!(
                                        "FTS chunk row has malformed file ordinal: {path}"
                                    ))
                                })?;
                                if chunks
                                    .entry(file_ord)
                                    .or_default()
                                    .insert(chunk_no, bytes)
                                    .is_some()
                                {
                                    return Err(LimboError::Corrupt(format!(
                                        "duplicate FTS chunk {path}:{chunk_no}"
                                    ))
                                    .into());
                                }
                                *advance_pending = true;
                            }
                            None => segment_done = true,
                        }
                    }
                    if segment_done {
                        let descriptor = &self.scan_descriptors[descriptor_idx];
                        let files = assemble_segment_files(
                            descriptor,
                            std::mem::take(chunks),
                            &self.allocator,
                        )?;
                        let data = Arc::new(segment_data_from_files(
                            &self.shared,
                            &self.schema,
                            descriptor.segment_id,
                            descriptor.max_doc,
                            files,
                            &self.allocator,
                        )?);
                        self.shared
                            .stats
                            .segment_loads
                            .fetch_add(1, Ordering::Relaxed);
                        self.shared.segment_bytes.lock().put(
                            descriptor.segment_id,
                            Arc::clone(&data),
                            fts_max_retained_cache_bytes(),
                        );
                        self.scan_data.insert(descriptor.segment_id, data);
                        *pos += 1;
                        *seeked = false;
                        *advance_pending = false;
                    }
                }
                FtsState::BuildIndex => {
                    if !self.snapshot_loaded {
                        // Adopt the scan results as the visible set.
                        let descriptors = std::mem::take(&mut self.scan_descriptors);
                        let tombs = std::mem::take(&mut self.scan_tombs);
                        let mut data_by_id = std::mem::take(&mut self.scan_data);
                        let mut applied_tombstones = 0usize;
                        self.segments = descriptors
                            .into_iter()
                            .map(|descriptor| {
                                let id = descriptor.segment_id;
                                let data = data_by_id.remove(&id).ok_or_else(|| {
                                    LimboError::Corrupt(format!(
                                        "FTS segment {} has a registry row but no loaded data",
                                        id.uuid_string()
                                    ))
                                })?;
                                // A tombstone names a document, not a
                                // segment. Find the position of each visible
                                // tombstone in this segment. A merge can
                                // move the document after the delete.
                                let deleted = data.identities.tombstoned_positions(&tombs);
                                applied_tombstones += deleted.len();
                                Ok(LoadedSegment::new(descriptor, data, deleted))
                            })
                            .collect::<Result<Vec<_>>>()?;
                        if applied_tombstones < tombs.len() {
                            // A tombstone that names no visible document.
                            // A merge deletes the tombstones of the
                            // documents it drops, and nobody can delete a
                            // document twice, because the base row
                            // conflicts. So only a bug or a damaged store
                            // produces these. Skipping them is harmless,
                            // but they must not vanish silently.
                            tracing::warn!(
                                tombstones = tombs.len(),
                                applied = applied_tombstones,
                                "FTS store has tombstone rows naming no visible document"
                            );
                        }
                        self.snapshot_loaded = true;
                        // A full scan is ground truth for the auto-merge
                        // trigger heuristic; reconcile any drift.
                        self.shared
                            .visible_segment_estimate
                            .store(self.segments.len(), Ordering::Relaxed);
                    }
                    self.ensure_searcher()?;
                    self.state = FtsState::Ready;
                    return Ok(IOResult::Done(()));
                }
                FtsState::Ready => {
                    return Ok(IOResult::Done(()));
                }
            }
        }
    }

    /// The state that loads chunk rows for scanned descriptors the byte
    /// cache does not already hold. Cache hits are collected here.
    fn chunk_load_state(&mut self) -> FtsState {
        let mut queue = Vec::new();
        let mut cache = self.shared.segment_bytes.lock();
        for (idx, descriptor) in self.scan_descriptors.iter().enumerate() {
            match cache.get(&descriptor.segment_id) {
                Some(data) => {
                    self.scan_data.insert(descriptor.segment_id, data);
                }
                None => queue.push(idx),
            }
        }
        FtsState::LoadChunks {
            queue,
            pos: 0,
            chunks: HashMap::default(),
            seeked: false,
            advance_pending: false,
        }
    }

    /// The error for a store whose control row has another format version.
    /// The code never reads or converts such a store. The user must rebuild
    /// the index from the base table. `DROP INDEX` does not open the store,
    /// so the rebuild always works.
    fn unsupported_format_error(&self, format_version: u32) -> LimboError {
        let age = if format_version < FTS_STORAGE_FORMAT_VERSION {
            "an older"
        } else {
            "a newer"
        };
        LimboError::InvalidArgument(format!(
            "FTS index {name} was created by {age} version of Turso (storage format \
             {format_version}, this version reads format {FTS_STORAGE_FORMAT_VERSION}) \
             and its storage format is not supported; rebuild it with \
             `DROP INDEX {name}` followed by `CREATE INDEX ... USING fts`",
            name = self.index_name
        ))
    }

    /// Load the snapshot view if this cursor skipped it (the insert fast
    /// path). Needed before the first delete or same-transaction query.
    fn ensure_snapshot_loaded(&mut self) -> IOResultOr<()> {
        if self.snapshot_loaded {
            return Ok(IOResult::Done(()));
        }
        if matches!(self.state, FtsState::Ready) {
            // The fast path stopped after format detection; resume with the
            // registry scan (the control row is already decoded).
            self.state = FtsState::ScanSegments {
                seeked: false,
                advance_pending: false,
            };
        }
        self.probe_only = false;
        self.drive_open()
    }

    /// Make sure that the backing store exists. The first `create` creates
    /// it. Every later open finds it in the schema and does not run DDL.
    fn ensure_backing_store(&mut self, context: &IndexMethodContext) -> IOResultOr<()> {
        if self.pending_store_op.is_none() {
            self.pending_store_op = Some(context.create_backing_schema(&self.store.schema)?);
        }
        let op = self.pending_store_op.as_mut().expect("set above");
        return_if_io!(op.step());
        self.pending_store_op = None;
        Ok(IOResult::Done(()))
    }

    /// Mint a fresh on-disk index incarnation. Drawn from the IO's random
    /// source when the cursor is attached to a database: two processes
    /// creating the same index in different files get different values,
    /// and the simulator's seeded IO hands out the same value on the same
    /// seed, so a seeded run replays byte for byte. Without an IO
    /// (connection-less unit tests) a process-local counter keeps values
    /// distinct.
    fn mint_index_incarnation(&self) -> u64 {
        let root = self.backing.as_ref().map_or(0, BackingStore::root_page) as u64;
        let entropy = self
            .io_random_u64()
            .unwrap_or_else(|| NEXT_FTS_INDEX_INCARNATION.fetch_add(1, Ordering::Relaxed));
        (root.rotate_left(32) ^ entropy).max(1)
    }

    /// One 64-bit draw from the pager's IO random source, if the cursor is
    /// attached to a database.
    fn io_random_u64(&self) -> Option<u64> {
        self.connection
            .as_ref()
            .and_then(Weak::upgrade)
            .zip(self.database_id)
            .and_then(|(conn, database_id)| conn.get_pager_from_database_index(&database_id).ok())
            .map(|pager| pager.io.generate_random_number() as u64)
    }

    /// Mint the id of a segment this cursor is about to build. The id is
    /// the key prefix of every backing row, so it decides B-tree layout;
    /// drawing it from the IO random source keeps seeded simulator runs
    /// replaying byte for byte (tantivy's own ids come from OS entropy).
    /// Without an IO, tantivy's random id is used.
    fn mint_segment_id(&self) -> SegmentId {
        let (Some(hi), Some(lo)) = (self.io_random_u64(), self.io_random_u64()) else {
            return SegmentId::generate_random();
        };
        let value = (u128::from(hi) << 64) | u128::from(lo);
        SegmentId::from_uuid_string(&format!("{value:032x}"))
            .expect("32 hex digits are a valid simple uuid")
    }

    /// Choose the first identity of the segment this cursor is about to
    /// build. Document `n` of the build gets `base + n`. Two random u64 draws
    /// form a 128-bit base for each build. The draws come from the
    /// same IO random source as segment ids, so seeded runs replay.
    fn mint_identity_base(&self) -> DocumentIdentity {
        let (Some(hi), Some(lo)) = (self.io_random_u64(), self.io_random_u64()) else {
            return DocumentIdentity::new(
                u128::from(NEXT_FTS_IDENTITY_BASE.fetch_add(1, Ordering::Relaxed)) << 64,
            );
        };
        DocumentIdentity::new((u128::from(hi) << 64) | u128::from(lo))
    }

    /// Build one immutable segment from the buffered documents (if any) and
    /// stage its rows, plus any pending tombstone rows, for publication.
    fn stage_flush(&mut self) -> Result<()> {
        turso_assert!(
            self.publish.is_none(),
            "FTS staged a flush while a publication is in flight"
        );
        let mut inserts = Vec::new();
        let mut new_segment = None;
        if !self.doc_buffer.is_empty() {
            let (segment, rows) = self.build_segment()?;
            if let Some(segment) = segment {
                inserts.extend(rows);
                self.own_published.push(segment.id());
                self.shared.segment_bytes.lock().put(
                    segment.id(),
                    Arc::clone(&segment.data),
                    fts_max_retained_cache_bytes(),
                );
                new_segment = Some(segment);
            }
        }
        for identity in self.pending_tombstone_rows.drain(..) {
            inserts.push(PendingRow {
                path: document_tombstone_path(identity),
                chunk_no: 0,
                bytes: Vec::new(),
            });
        }
        self.doc_buffer.clear();
        if inserts.is_empty() && new_segment.is_none() {
            return Ok(());
        }
        self.publish = Some(PendingPublish {
            inserter: Some(RowInserter::new(inserts)),
            deleter: None,
            apply: PublishApply::AppendSegment(new_segment),
        });
        Ok(())
    }

    /// Serialize the buffered documents into one immutable segment through
    /// a private `BuildDirectory`, and return it with its backing rows.
    ///
    /// This is what `IndexWriter`'s worker thread does internally, minus the
    /// `SegmentUpdater` handoff: no `meta.json` write reaches storage, no
    /// `.managed.json`, no lock file, no merge. Returns `None` when the
    /// buffer produced no documents.
    fn build_segment(&mut self) -> Result<(Option<LoadedSegment>, Vec<PendingRow>)> {
        let build_dir = BuildDirectory::new(self.allocator.clone());
        // `Index::create` writes the initial meta.json into the build
        // directory's in-memory slot; it never reaches the B-tree.
        let index = Index::create(
            build_dir.clone(),
            self.schema.clone(),
            IndexSettings::default(),
        )
        .map_err(|e| build_dir.write_error(e, "FTS build index"))?;
        // The segment writer pulls tokenizers off `segment.index()`, so the
        // build index needs the same registrations as the read side.
        self.register_tokenizers(&index);
        let segment_id = self.mint_segment_id();
        let segment = index.segment(index.new_segment_meta(segment_id, 0));
        let mut writer = SegmentWriter::for_segment(DEFAULT_MEMORY_BUDGET_BYTES, segment)
            .map_err(|e| build_dir.write_error(e, "FTS segment writer"))?;
        let identity_base = self.mint_identity_base();
        let mut added = 0u32;
        for buffered in self.doc_buffer.drain(..) {
            let mut document = buffered.doc;
            let identity = identity_base.plus(added).raw();
            document.add_u64(self.identity_hi_field, (identity >> 64) as u64);
            document.add_u64(self.identity_lo_field, identity as u64);
            writer
                .add_document(AddOperation {
                    // Opstamps are never persisted in segment data; they only
                    // order deletes inside IndexWriter, which does not exist
                    // here.
                    opstamp: 0,
                    document,
                })
                .map_err(|e| build_dir.write_error(e, "FTS add_document"))?;
            added += 1;
        }
        let max_doc = writer.max_doc();
        turso_assert!(
            max_doc == added,
            "FTS segment writer must assign one position per added document"
        );
        if max_doc == 0 {
            return Ok((None, Vec::new()));
        }
        writer
            .finalize()
            .map_err(|e| build_dir.write_error(e, "FTS segment finalize"))?;
        self.shared
            .stats
            .segment_builds
            .fetch_add(1, Ordering::Relaxed);

        let identities = SegmentIdentities::new(
            (0..max_doc)
                .map(|position| identity_base.plus(position))
                .collect(),
        );
        let captured = build_dir.captured_files();
        segment_rows_from_files(segment_id, max_doc, captured, identities)
    }

    /// Drive the in-flight publication (row deletions, then row inserts,
    /// then in-memory effects exactly once).
    fn drive_publish(&mut self) -> IOResultOr<()> {
        let Some(publish) = self.publish.as_mut() else {
            return Ok(IOResult::Done(()));
        };
        let cursor = self
            .fts_dir_cursor
            .as_mut()
            .ok_or_else(|| LimboError::InternalError("cursor not initialized".into()))?;
        if let Some(deleter) = publish.deleter.as_mut() {
            return_if_io!(deleter.step(cursor.as_mut()));
            publish.deleter = None;
        }
        if let Some(inserter) = publish.inserter.as_mut() {
            return_if_io!(inserter.step(cursor.as_mut()));
            publish.inserter = None;
        }
        let publish = self.publish.take().expect("publication checked above");
        match publish.apply {
            PublishApply::Nothing => {}
            PublishApply::AppendSegment(new_segment) => {
                if let Some(segment) = new_segment {
                    self.segments.push(segment);
                    self.shared
                        .visible_segment_estimate
                        .fetch_add(1, Ordering::Relaxed);
                }
                self.invalidate_snapshot_view();
            }
            PublishApply::ReplaceSegments(segments) => {
                self.segments = segments;
                self.shared
                    .visible_segment_estimate
                    .store(self.segments.len(), Ordering::Relaxed);
                self.invalidate_snapshot_view();
            }
        }
        Ok(IOResult::Done(()))
    }

    /// Start a merge of `candidates`: claim their registry rows first, in
    /// snapshot order. `drive_merge_claim` finishes the claim and stages the
    /// merge of the segments this transaction got.
    fn stage_merge_claim(&mut self, candidates: &HashSet<SegmentId>) {
        let ordered = self
            .segments
            .iter()
            .map(LoadedSegment::id)
            .filter(|id| candidates.contains(id));
        self.merge_claim = Some(SegmentClaimer::new(ordered));
    }

    /// Finish the claim staged by `stage_merge_claim`, then build one
    /// segment out of the claimed segments and stage its publication. A
    /// segment another merge holds stays out. When every candidate is
    /// taken, nothing is staged and the merge is a no-op. Resumable: the
    /// claim survives an I/O yield.
    fn drive_merge_claim(&mut self) -> IOResultOr<()> {
        let Some(claimer) = self.merge_claim.as_mut() else {
            return Ok(IOResult::Done(()));
        };
        let cursor = self
            .fts_dir_cursor
            .as_mut()
            .ok_or_else(|| LimboError::InternalError("cursor not initialized".into()))?;
        return_if_io!(claimer.step(cursor.as_mut()));
        let claimer = self.merge_claim.take().expect("claim checked above");
        let (claimed, taken) = claimer.into_outcome();
        self.shared
            .stats
            .merge_segments_claimed
            .fetch_add(claimed.len(), Ordering::Relaxed);
        self.shared
            .stats
            .merge_segments_skipped
            .fetch_add(taken.len(), Ordering::Relaxed);
        if claimed.is_empty() {
            tracing::debug!(
                taken = taken.len(),
                "FTS merge: another merge holds every candidate segment, skipping"
            );
            return Ok(IOResult::Done(()));
        }
        if !taken.is_empty() {
            tracing::debug!(
                claimed = claimed.len(),
                taken = taken.len(),
                "FTS merge: another merge holds some candidate segments, merging the rest"
            );
        }
        self.stage_merge_of_segments(&claimed.into_iter().collect())?;
        Ok(IOResult::Done(()))
    }

    /// Merge the given claimed segments into one (compacting tombstones
    /// away) and stage the result for publication: delete the chunk and
    /// tombstone rows of every claimed segment, insert the merged segment's
    /// rows, keep the rest untouched. The caller already deleted the
    /// registry rows of the claimed segments through `drive_merge_claim`,
    /// holds the writer slot, and drives the staged publication afterwards.
    fn stage_merge_of_segments(&mut self, candidate_ids: &HashSet<SegmentId>) -> Result<()> {
        self.ensure_searcher()?;
        let index = self
            .index
            .as_ref()
            .ok_or_else(|| LimboError::InternalError("FTS index not initialized".into()))?;
        // Merge inputs come from the snapshot view, whose synthesized
        // `.del` files carry this snapshot's tombstones — the merge compacts
        // deletes away for free. The merger silently drops inputs whose
        // meta claims zero live docs, which is exactly what retiring a
        // fully-tombstoned segment needs.
        let input_metas = index
            .searchable_segment_metas()
            .map_err(|e| LimboError::InternalError(format!("FTS optimize: {e}")))?;
        let input_segments: Vec<tantivy::Segment> = input_metas
            .iter()
            .filter(|meta| candidate_ids.contains(&meta.id()))
            .map(|meta| index.segment(meta.clone()))
            .collect();
        let build_dir = BuildDirectory::new(self.allocator.clone());
        let live_total: u64 = self
            .segments
            .iter()
            .filter(|segment| candidate_ids.contains(&segment.id()))
            .map(LoadedSegment::live_docs)
            .sum();
        let merged = if live_total > 0 {
            let merged_index = tantivy::indexer::merge_filtered_segments(
                &input_segments,
                IndexSettings::default(),
                vec![None; input_segments.len()],
                build_dir.clone(),
            )
            .map_err(|e| build_dir.write_error(e, "FTS merge failed"))?;
            let merged_metas = merged_index
                .searchable_segment_metas()
                .map_err(|e| LimboError::InternalError(format!("FTS merged metas: {e}")))?;
            let merged_meta = merged_metas
                .first()
                .ok_or_else(|| LimboError::InternalError("FTS merge produced no segment".into()))?;
            // `merge_filtered_segments` names its output after an OS-random
            // id; re-key the files to a minted one (see `mint_segment_id`).
            // Segment file bytes never embed the id, only the names do.
            let segment_id = self.mint_segment_id();
            let captured =
                rename_segment_files(build_dir.captured_files(), &merged_meta.id(), &segment_id)?;
            // The merge copied every surviving document's identity fast
            // field with the document. Read the merged segment's
            // identities back from that field.
            let identities = read_segment_identities(
                &self.shared.scratch_index(&self.schema)?,
                &self.schema,
                segment_id,
                merged_meta.max_doc(),
                captured.clone(),
                &self.allocator,
            )?;
            let (segment, rows) =
                segment_rows_from_files(segment_id, merged_meta.max_doc(), captured, identities)?;
            self.shared
                .stats
                .segment_builds
                .fetch_add(1, Ordering::Relaxed);
            segment.map(|segment| (segment, rows))
        } else {
            // Every visible document is tombstoned: retire everything and
            // publish nothing.
            None
        };

        // Delete the input rows: the chunk rows of every merged segment
        // (the claim already deleted the descriptor rows), plus the
        // tombstones of exactly the documents this merge dropped. Old
        // snapshots still see them through their MVCC version chains until
        // garbage collection passes them. Segments outside the candidate
        // set stay untouched.
        //
        // Tombstones of documents the merge kept stay. A tombstone that a
        // concurrent transaction adds against an input segment stays too.
        // Both name the document by identity, and the merged segment keeps
        // that identity, so a reader of the merged segment still applies
        // them. Deleting a dropped document's tombstone cannot lose a
        // concurrent delete either. The document's base row is already
        // deleted at this snapshot, so a transaction that deletes it again
        // conflicts on the base row and never commits.
        let mut deletes = Vec::new();
        let mut new_segments = Vec::new();
        for segment in &self.segments {
            let id = segment.id();
            if candidate_ids.contains(&id) {
                deletes.push(PathTarget::Prefix(segment_chunk_prefix(&id)));
                deletes.extend(
                    segment
                        .tombstoned_identities()
                        .map(|identity| PathTarget::Exact(document_tombstone_path(identity))),
                );
                self.shared.segment_bytes.lock().remove(&id);
            } else {
                new_segments.push(segment.clone());
            }
        }
        let mut inserts = Vec::new();
        if let Some((segment, rows)) = merged {
            tracing::debug!(
                inputs = candidate_ids.len(),
                survivors = new_segments.len(),
                merged_docs = segment.descriptor.max_doc,
                "FTS merge: merged candidate segments"
            );
            inserts = rows;
            self.own_published.push(segment.id());
            self.shared.segment_bytes.lock().put(
                segment.id(),
                Arc::clone(&segment.data),
                fts_max_retained_cache_bytes(),
            );
            new_segments.push(segment);
        }
        self.publish = Some(PendingPublish {
            inserter: Some(RowInserter::new(inserts)),
            deleter: Some(RowDeleter::new(deletes)),
            apply: PublishApply::ReplaceSegments(new_segments),
        });
        Ok(())
    }

    /// Which visible segments the write-path merge should rewrite (B2):
    /// - a segment at least half tombstoned is always a candidate —
    ///   rewriting reclaims its dead space no matter how big it is;
    /// - otherwise candidates are every clean segment at or below the
    ///   smallest size layer holding at least two of them, so one huge
    ///   segment is not rewritten on every trigger.
    ///
    /// Returns an empty set when nothing is worth rewriting (no pair of
    /// mergeable clean segments and no tombstone-heavy segment).
    fn auto_merge_candidates(&self) -> HashSet<SegmentId> {
        /// ParadeDB-style size layers. Segments at or past the last
        /// boundary never merge on size grounds.
        const FTS_MERGE_LAYER_BYTES: [u64; 4] = [100 << 10, 1 << 20, 100 << 20, 1 << 30];
        fn segment_bytes(segment: &LoadedSegment) -> u64 {
            segment.descriptor.files.iter().map(|file| file.size).sum()
        }

        let mut candidates: HashSet<SegmentId> = self
            .segments
            .iter()
            .filter(|segment| {
                segment.descriptor.max_doc > 0
                    && segment.deleted.len() as u64 * 2 >= u64::from(segment.descriptor.max_doc)
            })
            .map(LoadedSegment::id)
            .collect();
        for ceiling in FTS_MERGE_LAYER_BYTES {
            let group: Vec<SegmentId> = self
                .segments
                .iter()
                .filter(|segment| {
                    !candidates.contains(&segment.id()) && segment_bytes(segment) <= ceiling
                })
                .map(LoadedSegment::id)
                .collect();
            if group.len() >= 2 {
                candidates.extend(group);
                return candidates;
            }
        }
        // No clean tier is mergeable; rewriting only pays off if a
        // tombstone-heavy segment reclaims space.
        candidates
    }

    /// Complete any in-flight or due batch publication before a mutation.
    /// The VDBE retries the current instruction when an operation returns
    /// `IOResult::IO`, so this must finish before Tantivy state changes.
    fn flush_gate(&mut self) -> IOResultOr<()> {
        if self.is_publishing() {
            return_if_io!(self.drive_publish());
        }
        // `>=`, not `==`: a delete can push several tombstones past the gate
        // in one step (one per live posting for the rowid), so the count can
        // legitimately overshoot the batch size between gates.
        if self.pending_op_count() >= BATCH_COMMIT_SIZE {
            self.stage_flush()?;
            return_if_io!(self.drive_publish());
        }
        Ok(IOResult::Done(()))
    }

    /// Locate every live posting for `rowid` across the in-memory segment
    /// set. One rowid-term lookup per segment, checked against the
    /// transaction's own tombstone state (the searcher's alive bitsets may
    /// lag behind tombstones applied since the view was built).
    fn live_postings_for_rowid(&mut self, rowid: i64) -> Result<Vec<(SegmentId, u32)>> {
        if self.segments.is_empty() {
            return Ok(Vec::new());
        }
        self.ensure_searcher()?;
        let searcher = self
            .searcher
            .as_ref()
            .expect("searcher built by ensure_searcher");
        let segments_by_id: HashMap<_, _> = self
            .segments
            .iter()
            .map(|segment| (segment.id(), segment))
            .collect();
        let term = Term::from_field_i64(self.rowid_field, rowid);
        let mut hits = Vec::new();
        for segment_reader in searcher.segment_readers() {
            let segment_id = segment_reader.segment_id();
            let Some(segment) = segments_by_id.get(&segment_id) else {
                continue;
            };
            let inverted = segment_reader
                .inverted_index(self.rowid_field)
                .map_err(|e| LimboError::InternalError(format!("FTS rowid lookup: {e}")))?;
            let Some(mut postings) = inverted
                .read_postings(&term, IndexRecordOption::Basic)
                .map_err(|e| LimboError::InternalError(format!("FTS rowid postings: {e}")))?
            else {
                continue;
            };
            loop {
                let doc_id = postings.doc();
                if doc_id == TERMINATED {
                    break;
                }
                // Raw postings are not alive-filtered; consult the
                // transaction's own tombstone state.
                if !segment.deleted.contains(&doc_id) {
                    hits.push((segment_id, doc_id));
                }
                postings.advance();
            }
        }
        Ok(hits)
    }

    fn constant_integer_expression(expr: &turso_parser::ast::Expr) -> Option<i64> {
        match expr {
            turso_parser::ast::Expr::Parenthesized(expressions) if expressions.len() == 1 => {
                Self::constant_integer_expression(&expressions[0])
            }
            _ => match crate::util::parse_signed_number(expr).ok()? {
                Value::Numeric(crate::numeric::Numeric::Integer(value)) => Some(value),
                Value::Numeric(crate::numeric::Numeric::Float(value)) => {
                    crate::util::cast_real_to_integer(f64::from(value)).ok()
                }
                Value::Null | Value::Text(_) | Value::Blob(_) => None,
            },
        }
    }

    /// Purge this transaction's published-but-uncommitted segments from the
    /// shared caches (rollback paths).
    fn purge_own_published(&mut self) {
        if self.own_published.is_empty() {
            return;
        }
        let mut bytes = self.shared.segment_bytes.lock();
        for id in &self.own_published {
            bytes.remove(id);
        }
        drop(bytes);
        self.shared
            .searchers
            .lock()
            .purge_segments(&self.own_published);
        self.own_published.clear();
    }

    /// Reset every piece of per-transaction state. Used by abort, rollback,
    /// savepoint rollback (coarse: the next access rescans from the
    /// correctly reverted backing rows), and close.
    fn reset_to_init(&mut self) {
        self.release_writer_slot();
        self.doc_buffer.clear();
        self.pending_tombstone_rows.clear();
        self.publish = None;
        self.merge_claim = None;
        self.optimize_state = OptimizeState::Start;
        self.statement_commit_state = StatementCommitState::Start;
        self.segments.clear();
        self.snapshot_loaded = false;
        self.scan_descriptors.clear();
        self.scan_tombs.clear();
        self.scan_data.clear();
        self.control = None;
        self.invalidate_snapshot_view();
        self.fts_dir_cursor = None;
        self.backing = None;
        self.current_hits.clear();
        self.streaming_hits = None;
        self.hit_pos = 0;
        self.probe_only = false;
        self.opening_for_write = false;
        self.state = FtsState::Init;
    }
}

/// Load one segment's resident state from its assembled files: the bytes
/// and the document identities read from the identity fast field.
fn segment_data_from_files(
    shared: &FtsShared,
    schema: &Schema,
    segment_id: SegmentId,
    max_doc: u32,
    files: HashMap<String, FileBytes>,
    allocator: &DynAllocator,
) -> Result<SegmentData> {
    let by_path = files
        .iter()
        .map(|(name, bytes)| (PathBuf::from(name), Arc::clone(bytes)))
        .collect();
    let identities = read_segment_identities(
        &shared.scratch_index(schema)?,
        schema,
        segment_id,
        max_doc,
        by_path,
        allocator,
    )?;
    Ok(SegmentData::new(files, identities))
}

/// Read every document's identity out of one segment's fast field, in
/// position order. This opens the segment alone through a synthesized
/// snapshot view. No tombstones apply, because a reader needs the
/// identities of deleted documents to find their positions.
fn read_segment_identities(
    scratch: &Index,
    schema: &Schema,
    segment_id: SegmentId,
    max_doc: u32,
    files: HashMap<PathBuf, FileBytes>,
    allocator: &DynAllocator,
) -> Result<SegmentIdentities> {
    let spec = SegmentMetaSpec::new(segment_id, max_doc, 0);
    let meta_json = synthesize_meta_json(scratch, schema, &[spec], allocator)?;
    let directory = SnapshotDirectory::new(files, meta_json);
    let index = Index::open(directory)
        .map_err(|e| LimboError::InternalError(format!("FTS segment open: {e}")))?;
    let meta = index
        .searchable_segment_metas()
        .map_err(|e| LimboError::InternalError(format!("FTS segment metas: {e}")))?
        .into_iter()
        .next()
        .ok_or_else(|| LimboError::InternalError("FTS segment view has no segment".into()))?;
    let reader = SegmentReader::open(&index.segment(meta))
        .map_err(|e| LimboError::InternalError(format!("FTS segment reader: {e}")))?;
    let hi = reader.fast_fields().u64(IDENTITY_HI_FIELD).map_err(|e| {
        LimboError::Corrupt(format!(
            "FTS segment {} has no document identity high column; rebuild the index: {e}",
            segment_id.uuid_string()
        ))
    })?;
    let lo = reader.fast_fields().u64(IDENTITY_LO_FIELD).map_err(|e| {
        LimboError::Corrupt(format!(
            "FTS segment {} has no document identity low column; rebuild the index: {e}",
            segment_id.uuid_string()
        ))
    })?;
    let by_position = (0..max_doc)
        .map(|position| {
            hi.first(position)
                .zip(lo.first(position))
                .map(|(hi, lo)| DocumentIdentity::new((u128::from(hi) << 64) | u128::from(lo)))
                .ok_or_else(|| {
                    LimboError::Corrupt(format!(
                        "FTS segment {} document {position} has no identity",
                        segment_id.uuid_string()
                    ))
                })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(SegmentIdentities::new(by_position))
}

/// Assemble one segment's files from its scanned chunk rows, validating
/// them against the descriptor.
fn assemble_segment_files(
    descriptor: &SegmentDescriptor,
    mut chunks: HashMap<u32, HashMap<i64, Vec<u8>>>,
    allocator: &DynAllocator,
) -> Result<HashMap<String, FileBytes>> {
    let mut files: HashMap<String, FileBytes> = HashMap::default();
    for (file_ord, entry) in descriptor.files.iter().enumerate() {
        let file_ord = file_ord as u32;
        let chunk_map = chunks.remove(&file_ord).ok_or_else(|| {
            LimboError::Corrupt(format!(
                "FTS segment {} is missing chunks for file {}",
                descriptor.segment_id.uuid_string(),
                entry.name
            ))
        })?;
        if chunk_map.len() != entry.num_chunks as usize {
            return Err(LimboError::Corrupt(format!(
                "FTS segment file {} has {} chunks but the descriptor records {}",
                entry.name,
                chunk_map.len(),
                entry.num_chunks
            )));
        }
        let assembled = assemble_chunks(std::path::Path::new(&entry.name), chunk_map, allocator)?;
        if assembled.len() as u64 != entry.size {
            return Err(LimboError::Corrupt(format!(
                "FTS segment file {} has {} bytes but the descriptor records {}",
                entry.name,
                assembled.len(),
                entry.size
            )));
        }
        files.insert(entry.name.clone(), assembled);
    }
    if !chunks.is_empty() {
        return Err(LimboError::Corrupt(format!(
            "FTS segment {} stores chunks for files absent from its descriptor",
            descriptor.segment_id.uuid_string()
        )));
    }
    Ok(files)
}

/// Concatenate one file's chunk rows (`chunk_no` → bytes) into whole bytes.
#[turso_macros::allocation_site(crate::alloc::FtsAllocationSite::AssembleBuffer)]
fn assemble_chunks(
    path: &std::path::Path,
    mut chunks: HashMap<i64, Vec<u8>>,
    allocator: &DynAllocator,
) -> Result<FileBytes> {
    let max_chunk =
        chunks.keys().max().copied().ok_or_else(|| {
            LimboError::Corrupt(format!("FTS file {} has no chunks", path.display()))
        })?;
    if max_chunk < 0 {
        return Err(LimboError::Corrupt(format!(
            "FTS file {} has a negative chunk number",
            path.display()
        )));
    }
    let total = chunks.values().try_fold(0usize, |total, chunk| {
        total
            .checked_add(chunk.len())
            .ok_or(LimboError::OutOfMemory)
    })?;
    let mut assembled = DynVec::try_with_capacity_in(total, allocator.clone())?;
    for chunk_no in 0..=max_chunk {
        let data = chunks.remove(&chunk_no).ok_or_else(|| {
            LimboError::Corrupt(format!(
                "FTS file {} is missing chunk {}",
                path.display(),
                chunk_no
            ))
        })?;
        assembled.try_extend(data)?;
    }
    if !chunks.is_empty() {
        // Keys outside `0..=max_chunk` (a negative chunk number next to
        // valid ones) were counted into `total` but never written.
        return Err(LimboError::Corrupt(format!(
            "FTS file {} has chunk numbers outside 0..={}",
            path.display(),
            max_chunk
        )));
    }
    turso_assert!(
        assembled.len() == total,
        "FTS chunk assembly must write exactly the bytes it counted"
    );
    Ok(Arc::new(assembled))
}

/// Turn a built segment's captured files into a `LoadedSegment` plus its
/// descriptor and chunk rows.
/// Re-key captured segment files from segment id `from` to `to`. Tantivy
/// names every component `<segment uuid>.<ext>`; the bytes never carry the
/// id, so a rename is all a merged segment needs to take a minted id.
fn rename_segment_files(
    files: HashMap<PathBuf, FileBytes>,
    from: &SegmentId,
    to: &SegmentId,
) -> Result<HashMap<PathBuf, FileBytes>> {
    let from = from.uuid_string();
    let to = to.uuid_string();
    files
        .into_iter()
        .map(|(path, bytes)| {
            let rest = path
                .to_str()
                .and_then(|name| name.strip_prefix(from.as_str()))
                .ok_or_else(|| {
                    LimboError::InternalError(format!(
                        "FTS merge wrote a file that is not named after its segment: {}",
                        path.display()
                    ))
                })?;
            Ok((PathBuf::from(format!("{to}{rest}")), bytes))
        })
        .collect()
}

fn segment_rows_from_files(
    segment_id: SegmentId,
    max_doc: u32,
    captured: HashMap<PathBuf, FileBytes>,
    identities: SegmentIdentities,
) -> Result<(Option<LoadedSegment>, Vec<PendingRow>)> {
    let mut file_names: Vec<String> = captured
        .keys()
        .filter_map(|path| path.to_str().map(str::to_string))
        .collect();
    // Deterministic file order keeps descriptors stable.
    file_names.sort();
    let mut inserts = Vec::new();
    let mut entries = Vec::new();
    let mut data_files: HashMap<String, FileBytes> = HashMap::default();
    for (file_ord, name) in file_names.into_iter().enumerate() {
        let bytes = captured
            .get(std::path::Path::new(&name))
            .expect("name enumerated from this map");
        let file_ord = u32::try_from(file_ord)
            .map_err(|_| LimboError::InternalError("FTS segment has too many files".into()))?;
        let chunk_path = segment_chunk_path(&segment_id, file_ord);
        let rows = chunk_rows(&chunk_path, bytes, DEFAULT_CHUNK_SIZE);
        entries.push(SegmentFileEntry {
            name: name.clone(),
            size: bytes.len() as u64,
            num_chunks: rows.len() as u32,
        });
        inserts.extend(rows);
        data_files.insert(name, Arc::clone(bytes));
    }
    let descriptor = SegmentDescriptor {
        segment_id,
        max_doc,
        files: entries,
    };
    inserts.push(PendingRow {
        path: segment_registry_path(&segment_id),
        chunk_no: 0,
        bytes: descriptor.encode()?,
    });
    let segment = LoadedSegment::new(
        descriptor,
        Arc::new(SegmentData::new(data_files, identities)),
        BTreeSet::new(),
    );
    Ok((Some(segment), inserts))
}

/// Test helper: delete every row of an FTS index's backing store, leaving a
/// store that exists but has no control row. Drive `step` to completion
/// inside a write transaction. Only reachable state this simulates: the
/// backing table recreated behind the index's back.
#[cfg(feature = "test_helper")]
pub struct FtsBackingRowWiper {
    cursor: Box<dyn CursorTrait>,
    deleter: RowDeleter,
}

#[cfg(feature = "test_helper")]
impl FtsBackingRowWiper {
    pub fn new(conn: &Arc<Connection>, database_id: usize, index_name: &str) -> Result<Self> {
        let cursor = BackingStore::lookup(conn, database_id, FtsStore::new(index_name).index())?
            .ok_or_else(|| {
                LimboError::InternalError(format!("FTS backing store for {index_name} not found"))
            })?
            .open_cursor()?;
        Ok(Self {
            cursor,
            // Every path is a prefix match for the empty string.
            deleter: RowDeleter::new(vec![PathTarget::Prefix(String::new())]),
        })
    }

    pub fn step(&mut self) -> IOResultOr<()> {
        self.deleter.step(self.cursor.as_mut())
    }
}

/// Test helper: enumerate every raw row of an FTS index's backing store as
/// `(path, chunk_no, byte_len, fnv64-of-bytes)`. Drive `step` to completion
/// inside a read transaction; rows land in `rows` in key order, including
/// physical duplicates the reader normally dedupes.
#[cfg(feature = "test_helper")]
pub struct FtsBackingRowDumper {
    cursor: Box<dyn CursorTrait>,
    started: bool,
    advance_pending: bool,
    pub rows: Vec<(String, i64, usize, u64)>,
}

#[cfg(feature = "test_helper")]
impl FtsBackingRowDumper {
    pub fn new(conn: &Arc<Connection>, database_id: usize, index_name: &str) -> Result<Self> {
        let cursor = BackingStore::lookup(conn, database_id, FtsStore::new(index_name).index())?
            .ok_or_else(|| {
                LimboError::InternalError(format!("FTS backing store for {index_name} not found"))
            })?
            .open_cursor()?;
        Ok(Self {
            cursor,
            started: false,
            advance_pending: false,
            rows: Vec::new(),
        })
    }

    pub fn step(&mut self) -> IOResultOr<()> {
        loop {
            if !self.started {
                return_if_io!(self.cursor.rewind());
                self.started = true;
            }
            if self.advance_pending {
                return_if_io!(self.cursor.next());
                self.advance_pending = false;
            }
            if !self.cursor.has_record() {
                return Ok(IOResult::Done(()));
            }
            let record = return_if_io!(self.cursor.record()).ok_or_else(|| {
                LimboError::Corrupt("FTS dump cursor has no record payload".into())
            })?;
            let (path, chunk_no, bytes) = row_fields(record)?;
            let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |hash, byte| {
                (hash ^ u64::from(*byte)).wrapping_mul(0x100_0000_01b3)
            });
            self.rows.push((path, chunk_no, bytes.len(), hash));
            self.advance_pending = true;
        }
    }
}

// ============================ trait impl ============================

impl Drop for FtsCursor {
    fn drop(&mut self) {
        self.release_writer_slot();
        let is_publishing = self.is_publishing();
        if self.pending_op_count() != 0 || is_publishing {
            tracing::error!(
                pending_ops = self.pending_op_count(),
                is_publishing,
                "FTS cursor dropped before explicit statement finalization"
            );
            debug_assert!(
                crate::thread::panicking(),
                "FTS cursor dropped with pending persistence work"
            );
        }
    }
}

impl IndexMethodCursor for FtsCursor {
    /// Creates the FTS index storage (internal BTree table for segment
    /// rows) and stages the v2 control row.
    fn create(&mut self, context: &IndexMethodContext) -> IOResultOr<()> {
        let conn = context.connection()?;
        let database_id = context.database().id;
        self.allocator = conn.get_source_database(database_id).allocators.fts.clone();
        self.database_id = Some(database_id);
        self.connection = Some(Arc::downgrade(&conn));
        if self.is_publishing() {
            return_if_io!(self.drive_publish());
            return Ok(IOResult::Done(()));
        }
        return_if_io!(self.ensure_backing_store(context));
        self.open_cursor(&conn, database_id)?;
        self.claim_writer_slot()?;
        let control = FtsControl::new(self.mint_index_incarnation());
        self.publish = Some(PendingPublish {
            inserter: Some(RowInserter::new(vec![PendingRow {
                path: FTS2_CONTROL_PATH.to_string(),
                chunk_no: 0,
                bytes: control.encode(),
            }])),
            deleter: None,
            apply: PublishApply::Nothing,
        });
        self.control = Some(control);
        // A fresh index has an empty visible set; the CREATE INDEX
        // statement's population inserts can proceed without a scan.
        self.segments.clear();
        self.snapshot_loaded = true;
        self.state = FtsState::Ready;
        return_if_io!(self.drive_publish());
        Ok(IOResult::Done(()))
    }

    /// Destroys the FTS index, dropping all storage and clearing caches.
    fn destroy(&mut self, context: &IndexMethodContext) -> IOResultOr<()> {
        let conn = context.connection()?;
        let database_id = context.database().id;
        self.allocator = conn.get_source_database(database_id).allocators.fts.clone();
        self.database_id = Some(database_id);
        self.connection = Some(Arc::downgrade(&conn));
        if let Some(op) = self.pending_store_op.as_mut() {
            return_if_io!(op.step());
            self.pending_store_op = None;
            self.state = FtsState::Init;
            return Ok(IOResult::Done(()));
        }
        tracing::debug!(
            "FTS destroy: dropping internal storage {}",
            self.store.table_name()
        );

        self.open_cursor(&conn, database_id)?;
        self.claim_writer_slot()?;

        // Drop in-memory state and shared caches. The drop is not committed
        // yet, but a recreated index mints fresh segment ids, so no stale
        // cache entry can ever validate against it; clearing is safe and
        // frees the bytes immediately.
        self.segments.clear();
        self.snapshot_loaded = false;
        self.invalidate_snapshot_view();
        self.fts_dir_cursor = None;
        self.backing = None;
        self.control = None;
        *self.shared.segment_bytes.lock() = SegmentByteCache::default();
        *self.shared.searchers.lock() = SearcherCache::default();

        let mut op = context.drop_backing_schema(&self.store.schema)?;
        if let IOResult::IO(io) = op.step()? {
            self.pending_store_op = Some(op);
            return Ok(IOResult::IO(io));
        }

        self.state = FtsState::Init;
        Ok(IOResult::Done(()))
    }

    /// Opens the index for reading: scan the visible registry rows at this
    /// snapshot and assemble a searcher over exactly those segments.
    fn open_read(&mut self, context: &IndexMethodContext) -> IOResultOr<()> {
        let conn = context.connection()?;
        let database_id = context.database().id;
        self.allocator = conn.get_source_database(database_id).allocators.fts.clone();
        self.database_id = Some(database_id);
        self.connection = Some(Arc::downgrade(&conn));
        if matches!(self.state, FtsState::Ready) {
            return self.ensure_snapshot_loaded();
        }
        self.probe_only = false;
        self.drive_open()
    }

    /// Opens the index for writing. Pure inserts only need to know the
    /// store's format — they append segments without reading the index —
    /// so this stops after format detection.
    fn open_write(&mut self, context: &IndexMethodContext) -> IOResultOr<()> {
        let conn = context.connection()?;
        let database_id = context.database().id;
        self.allocator = conn.get_source_database(database_id).allocators.fts.clone();
        self.database_id = Some(database_id);
        self.connection = Some(Arc::downgrade(&conn));
        self.opening_for_write = true;
        if matches!(self.state, FtsState::Ready) {
            return Ok(IOResult::Done(()));
        }
        return_if_io!(self.ensure_backing_store(context));
        if !self.snapshot_loaded {
            self.probe_only = true;
        }
        let result = self.drive_open();
        if !matches!(result, Ok(IOResult::IO(_))) {
            self.probe_only = false;
            self.opening_for_write = false;
        }
        result
    }

    /// Buffers a document for the next segment build. Values are indexed
    /// columns followed by rowid.
    fn insert(&mut self, values: &[Register]) -> IOResultOr<()> {
        self.claim_writer_slot()?;
        return_if_io!(self.flush_gate());

        // Last register is rowid
        let rowid_reg = values.last().ok_or_else(|| {
            LimboError::InternalError("FTS insert requires at least rowid".into())
        })?;
        let rowid = match rowid_reg {
            Register::Value(Value::Numeric(crate::numeric::Numeric::Integer(i))) => *i,
            _ => {
                return Err(LimboError::InternalError("FTS rowid must be integer".into()).into());
            }
        };

        let mut doc = TantivyDocument::default();
        doc.add_i64(self.rowid_field, rowid);

        for ((col, field), reg) in self.indexed_fields.iter().zip(&values[..values.len() - 1]) {
            if matches!(
                self.schema.get_field_entry(*field).field_type(),
                FieldType::JsonObject(_)
            ) {
                add_json_value(&mut doc, *field, &col.name, reg)?;
                continue;
            }
            match reg {
                Register::Value(Value::Text(t)) => {
                    doc.add_text(*field, t.as_str());
                }
                Register::Value(Value::Null) => continue,
                // Coerce every non-NULL value to text before tokenizing, the
                // way FTS5's sqlite3_value_text() does. Skipping them would
                // make the index silently miss rows a plain scan matches.
                Register::Value(value) => {
                    if let Some(text) = value.cast_text() {
                        doc.add_text(*field, &text);
                    }
                }
                _ => continue,
            }
        }

        self.doc_buffer.push(BufferedDoc { rowid, doc });
        Ok(IOResult::Done(()))
    }

    /// Deletes a document by rowid. If the buffer still holds it, drop it
    /// from the buffer. Otherwise write a tombstone for every live posting
    /// it has in the visible segment set. The tombstone names the
    /// document's identity, so it stays valid when a concurrent merge moves
    /// the document to another segment. Nothing here needs to block a merge.
    fn delete(&mut self, values: &[Register]) -> IOResultOr<()> {
        self.claim_writer_slot()?;
        return_if_io!(self.flush_gate());
        // A delete must see the visible segment set; the insert fast path
        // skips loading it.
        return_if_io!(self.ensure_snapshot_loaded());

        // Last register is rowid
        let rowid_reg = values.last().ok_or_else(|| {
            LimboError::InternalError("FTS delete requires at least rowid".into())
        })?;
        let rowid = match rowid_reg {
            Register::Value(Value::Numeric(crate::numeric::Numeric::Integer(i))) => *i,
            _ => {
                return Err(LimboError::InternalError("FTS rowid must be integer".into()).into());
            }
        };

        // The transaction's own unflushed documents are simply un-buffered.
        self.doc_buffer.retain(|buffered| buffered.rowid != rowid);

        // Postings in visible segments get tombstone rows, applied to the
        // in-memory set immediately (own-write visibility) and queued as
        // rows for the next flush.
        let postings = self.live_postings_for_rowid(rowid)?;
        for (segment_id, doc_id) in postings {
            if let Some(segment) = self
                .segments
                .iter_mut()
                .find(|segment| segment.id() == segment_id)
            {
                if segment.deleted.insert(doc_id) {
                    let identity =
                        segment.data.identities.identity_of(doc_id).ok_or_else(|| {
                            LimboError::Corrupt(format!(
                                "FTS segment {} document {doc_id} has no identity",
                                segment_id.uuid_string()
                            ))
                        })?;
                    self.pending_tombstone_rows.push(identity);
                }
            }
        }

        Ok(IOResult::Done(()))
    }

    /// Starts an FTS query. Parses the query string and executes the search.
    /// Returns true if there are results, false otherwise.
    fn query_start(&mut self, values: &[Register]) -> IOResultOr<bool> {
        self.ensure_searcher()?;
        let searcher = self
            .searcher
            .as_ref()
            .expect("FTS searcher initialized immediately above");
        if values.len() < 2 {
            return Err(LimboError::InternalError(
                "FTS query_start: expected pattern id and query string".into(),
            )
            .into());
        }

        // values[0] = pattern index
        let pattern_idx = match &values[0] {
            Register::Value(Value::Numeric(crate::numeric::Numeric::Integer(i))) => *i,
            _ => FTS_PATTERN_SCORE,
        };
        self.current_pattern = pattern_idx;

        // Determine the optional SQL LIMIT captured by the selected pattern.
        let limit_raw = match pattern_idx {
            // Patterns without LIMIT fetch every live document that matches.
            FTS_PATTERN_MATCH | FTS_PATTERN_COMBINED | FTS_PATTERN_COMBINED_ORDERED => None,
            // Patterns with LIMIT use the captured value.
            FTS_PATTERN_SCORE
            | FTS_PATTERN_MATCH_LIMIT
            | FTS_PATTERN_COMBINED_LIMIT
            | FTS_PATTERN_COMBINED_ORDERED_LIMIT => Some(if values.len() > 2 {
                // Coerce with the same rules as a plain LIMIT (MustBeInt):
                // numeric text and integral reals become integers; anything
                // else is a datatype mismatch, never a silent default.
                let coerced = match &values[2] {
                    Register::Value(Value::Numeric(crate::numeric::Numeric::Integer(i))) => {
                        Some(*i)
                    }
                    Register::Value(Value::Numeric(crate::numeric::Numeric::Float(f))) => {
                        crate::util::cast_real_to_integer(f64::from(*f)).ok()
                    }
                    Register::Value(Value::Text(text)) => {
                        match crate::util::checked_cast_text_to_numeric(text.as_str(), true) {
                            Ok(Value::Numeric(crate::numeric::Numeric::Integer(i))) => Some(i),
                            Ok(Value::Numeric(crate::numeric::Numeric::Float(f))) => {
                                crate::util::cast_real_to_integer(f64::from(f)).ok()
                            }
                            _ => None,
                        }
                    }
                    _ => None,
                };
                coerced
                    .ok_or_else(|| LimboError::Constraint("datatype mismatch (19)".to_string()))?
            } else {
                return Err(LimboError::InternalError(
                    "FTS query_start: LIMIT pattern selected but no limit value captured"
                        .to_string(),
                )
                .into());
            }),
            _ => {
                return Err(LimboError::InternalError(format!(
                    "FTS query_start: unknown pattern {pattern_idx}"
                ))
                .into());
            }
        };

        self.current_hits.clear();
        self.streaming_hits = None;
        self.hit_pos = 0;
        let query_str = match values[1].get_value() {
            Value::Null => return Ok(IOResult::Done(false)),
            query => query.to_string(),
        };

        let fields = match values.last().map(Register::get_value) {
            Some(Value::Text(fields)) => fields.as_str(),
            _ => {
                return Err(LimboError::InternalError(
                    "FTS query_start: missing indexed fields".into(),
                )
                .into())
            }
        };
        let selected_fields = fields
            .split(',')
            .map(|field| {
                field
                    .parse::<usize>()
                    .ok()
                    .and_then(|i| self.default_fields.get(i).copied())
                    .ok_or_else(|| {
                        LimboError::InternalError("FTS query_start: invalid field".into())
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        let parser = if selected_fields.len() == self.default_fields.len() {
            Arc::clone(
                self.cached_parser
                    .as_ref()
                    .expect("parser built with the searcher"),
            )
        } else {
            let mut parser = tantivy::query::QueryParser::for_index(
                self.index.as_ref().expect("index built with the searcher"),
                selected_fields,
            );
            for &(field, boost) in &self.field_boosts {
                parser.set_field_boost(field, boost);
            }
            Arc::new(parser)
        };

        // Bound the query string before it reaches Tantivy's recursive
        // parser: a few KiB of nested parentheses would otherwise burn
        // minutes of CPU or overflow the stack (an abort no catch_unwind
        // contains). `parse_query_lenient` uses the non-backtracking parse
        // path, so nesting inside these bounds stays linear.
        if query_str.len() > FTS_MAX_QUERY_BYTES {
            return Err(LimboError::InternalError(format!(
                "FTS query is too long ({} bytes; the limit is {FTS_MAX_QUERY_BYTES})",
                query_str.len()
            ))
            .into());
        }
        let mut depth = 0usize;
        for byte in query_str.bytes() {
            match byte {
                b'(' => {
                    depth += 1;
                    if depth > FTS_MAX_QUERY_NESTING {
                        return Err(LimboError::InternalError(format!(
                            "FTS query nests deeper than {FTS_MAX_QUERY_NESTING} parentheses"
                        ))
                        .into());
                    }
                }
                b')' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        let (query, parse_errors) = parser.parse_query_lenient(&query_str);
        if let Some(error) = parse_errors.first() {
            return Err(LimboError::InternalError(format!("FTS parse error: {error:?}")).into());
        }

        // TopDocs keeps a heap proportional to its limit. Cap that heap at the
        // number of live documents: this preserves unlimited-query semantics
        // and prevents a huge SQL LIMIT from allocating beyond the largest
        // possible result set.
        let limit = bounded_query_limit(limit_raw, searcher.num_docs());
        if limit == 0 {
            return Ok(IOResult::Done(false));
        }

        // Unordered patterns can walk Tantivy's per-segment scorers directly.
        // This keeps memory constant for the common MATCH path. Global score
        // ordering still uses TopDocs because it inherently needs a top-k heap.
        let streaming_scores = match pattern_idx {
            FTS_PATTERN_MATCH | FTS_PATTERN_MATCH_LIMIT => Some(false),
            FTS_PATTERN_COMBINED | FTS_PATTERN_COMBINED_LIMIT => Some(true),
            _ => None,
        };
        if let Some(scores_enabled) = streaming_scores {
            let scoring = if scores_enabled {
                EnableScoring::enabled_from_searcher(searcher)
            } else {
                EnableScoring::disabled_from_searcher(searcher)
            };
            let weight = query
                .weight(scoring)
                .map_err(|e| LimboError::InternalError(format!("FTS query weight error: {e}")))?;
            let mut segments = Vec::with_capacity(searcher.segment_readers().len());
            for (segment_ord, segment_reader) in searcher.segment_readers().iter().enumerate() {
                let scorer = weight
                    .scorer(segment_reader, 1.0)
                    .map_err(|e| LimboError::InternalError(format!("FTS scorer error: {e}")))?;
                segments.push(FtsStreamingSegment {
                    scorer,
                    rowids: self.rowid_readers[segment_ord].clone(),
                    alive: segment_reader.alive_bitset().cloned(),
                });
            }
            let mut stream = FtsHitStream {
                segments,
                segment_pos: 0,
                remaining: limit,
                scores_enabled,
                current: None,
            };
            let has_result = stream.advance()?;
            self.streaming_hits = Some(stream);
            return Ok(IOResult::Done(has_result));
        }

        // A global score ordering with no effective LIMIT: TopDocs would
        // eagerly allocate per-segment heaps sized to the whole corpus before
        // scoring a single document. Walk the scorers and sort what actually
        // matched instead, so memory is proportional to the matches.
        if limit >= searcher.num_docs() as usize {
            let weight = query
                .weight(EnableScoring::enabled_from_searcher(searcher))
                .map_err(|e| LimboError::InternalError(format!("FTS query weight error: {e}")))?;
            for (segment_ord, segment_reader) in searcher.segment_readers().iter().enumerate() {
                let mut scorer = weight
                    .scorer(segment_reader, 1.0)
                    .map_err(|e| LimboError::InternalError(format!("FTS scorer error: {e}")))?;
                let rowids = &self.rowid_readers[segment_ord];
                let alive = segment_reader.alive_bitset();
                loop {
                    let doc_id = scorer.doc();
                    if doc_id == TERMINATED {
                        break;
                    }
                    let score = scorer.score();
                    scorer.advance();
                    if alive.is_some_and(|alive| alive.is_deleted(doc_id)) {
                        continue;
                    }
                    let rowid = rowids.first(doc_id).ok_or_else(|| {
                        LimboError::InternalError("FTS: rowid fast field missing value".into())
                    })?;
                    self.current_hits.push((
                        score,
                        DocAddress::new(segment_ord as u32, doc_id),
                        rowid,
                    ));
                }
            }
            self.current_hits
                .sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap_or(std::cmp::Ordering::Equal));
            return Ok(IOResult::Done(!self.current_hits.is_empty()));
        }

        let top_docs = searcher
            .search(
                &query,
                &tantivy::collector::TopDocs::with_limit(limit).order_by_score(),
            )
            .map_err(|e| LimboError::InternalError(format!("FTS search error: {e}")))?;

        // Group results by segment for efficient fast field access.
        // This avoids creating a new fast field reader for each document.
        let mut by_segment: HashMap<u32, Vec<(f32, tantivy::DocAddress)>> = HashMap::default();
        for (score, doc_addr) in top_docs {
            by_segment
                .entry(doc_addr.segment_ord)
                .or_default()
                .push((score, doc_addr));
        }

        // Process each segment's results with a single fast field reader.
        // Fast fields provide columnar O(1) access to rowids without loading full documents.
        for (segment_ord, hits) in by_segment {
            let rowid_reader = &self.rowid_readers[segment_ord as usize];

            for (score, doc_addr) in hits {
                let rowid = rowid_reader.first(doc_addr.doc_id).ok_or_else(|| {
                    LimboError::InternalError("FTS: rowid fast field missing value".into())
                })?;
                self.current_hits.push((score, doc_addr, rowid));
            }
        }

        // Re-sort by score since we grouped by segment (preserves original ranking order)
        self.current_hits
            .sort_by(|a, b| b.0.partial_cmp(&a.0).unwrap_or(std::cmp::Ordering::Equal));

        Ok(IOResult::Done(!self.current_hits.is_empty()))
    }

    /// Advances to the next query result. Returns true if more results exist.
    fn query_next(&mut self) -> IOResultOr<bool> {
        if let Some(stream) = &mut self.streaming_hits {
            return Ok(IOResult::Done(stream.advance()?));
        }
        if self.hit_pos >= self.current_hits.len() {
            return Ok(IOResult::Done(false));
        }
        self.hit_pos += 1;
        Ok(IOResult::Done(self.hit_pos < self.current_hits.len()))
    }

    /// Returns the column value for the current result (score or match indicator).
    fn query_column(&mut self, idx: usize) -> IOResultOr<Value> {
        // Column 0 is the score for score queries, or 1 (true) for match queries.
        // Column 1 is the score for match queries.
        if idx != 0
            && !(idx == 1
                && matches!(
                    self.current_pattern,
                    FTS_PATTERN_MATCH | FTS_PATTERN_MATCH_LIMIT
                ))
        {
            return Err(LimboError::InternalError("FTS: column out of bounds".into()).into());
        }

        match self.current_pattern {
            FTS_PATTERN_MATCH | FTS_PATTERN_MATCH_LIMIT => {
                if self
                    .streaming_hits
                    .as_ref()
                    .is_some_and(|stream| stream.current.is_none())
                    || (self.streaming_hits.is_none() && self.hit_pos >= self.current_hits.len())
                {
                    return Err(LimboError::InternalError(
                        "FTS: query_column out of bounds".into(),
                    )
                    .into());
                }
                if idx == 0 {
                    return Ok(IOResult::Done(Value::from_i64(1)));
                }
                let score = if let Some(stream) = &self.streaming_hits {
                    stream.current.unwrap().0
                } else {
                    self.current_hits[self.hit_pos].0
                };
                Ok(IOResult::Done(Value::from_f64(score as f64)))
            }
            FTS_PATTERN_SCORE
            | FTS_PATTERN_COMBINED
            | FTS_PATTERN_COMBINED_LIMIT
            | FTS_PATTERN_COMBINED_ORDERED
            | FTS_PATTERN_COMBINED_ORDERED_LIMIT => {
                // For fts_score and combined patterns, return the actual score
                let score = if let Some(stream) = &self.streaming_hits {
                    stream.current.map(|(score, _)| score).ok_or_else(|| {
                        LimboError::InternalError("FTS: query_column out of bounds".into())
                    })?
                } else {
                    self.current_hits
                        .get(self.hit_pos)
                        .map(|(score, _, _)| *score)
                        .ok_or_else(|| {
                            LimboError::InternalError("FTS: query_column out of bounds".into())
                        })?
                };
                Ok(IOResult::Done(Value::from_f64(score as f64)))
            }
            _ => {
                // Unknown pattern - return score as default
                let (score, _, _) = self.current_hits.get(self.hit_pos).ok_or_else(|| {
                    LimboError::InternalError("FTS: query_column out of bounds".into())
                })?;
                Ok(IOResult::Done(Value::from_f64(*score as f64)))
            }
        }
    }

    /// Returns the rowid for the current query result.
    fn query_rowid(&mut self) -> IOResultOr<Option<i64>> {
        if let Some(stream) = &self.streaming_hits {
            return Ok(IOResult::Done(stream.current.map(|(_, rowid)| rowid)));
        }
        if self.hit_pos >= self.current_hits.len() {
            return Ok(IOResult::Done(None));
        }
        let (_, _, rowid) = self.current_hits[self.hit_pos];
        Ok(IOResult::Done(Some(rowid)))
    }

    /// Builds and publishes the statement's segment and tombstone rows
    /// before the statement savepoint is released. If the flush published a
    /// new segment and the visible set exceeds `PRAGMA fts_merge_threshold`,
    /// merges it down in the same transaction (skipped silently on
    /// maintenance contention).
    fn stage_statement_commit(&mut self, _context: &IndexMethodContext) -> IOResultOr<()> {
        loop {
            match self.statement_commit_state {
                StatementCommitState::Start => {
                    let mut auto_merge = false;
                    if !self.is_publishing() && self.pending_op_count() > 0 {
                        self.stage_flush()?;
                        auto_merge = matches!(
                            self.publish.as_ref().map(|publish| &publish.apply),
                            Some(PublishApply::AppendSegment(Some(_)))
                        );
                    }
                    self.statement_commit_state = StatementCommitState::PublishFlush { auto_merge };
                    crate::mvcc::yield_points::inject_io_yield!(
                        _context,
                        crate::index_method::IndexMethodYieldPoint::FtsStatementFlushStaged
                    );
                }
                StatementCommitState::PublishFlush { auto_merge } => {
                    return_if_io!(self.drive_publish());
                    self.statement_commit_state = if auto_merge {
                        StatementCommitState::CheckMerge
                    } else {
                        StatementCommitState::Finish
                    };
                }
                StatementCommitState::CheckMerge => {
                    let Some(conn) = self.connection.as_ref().and_then(Weak::upgrade) else {
                        self.statement_commit_state = StatementCommitState::Finish;
                        continue;
                    };
                    let threshold = conn.get_fts_merge_threshold();
                    self.statement_commit_state = if threshold <= 0
                        || self
                            .shared
                            .visible_segment_estimate
                            .load(Ordering::Relaxed)
                            .max(self.segments.len())
                            <= threshold as usize
                    {
                        StatementCommitState::Finish
                    } else {
                        StatementCommitState::LoadSnapshot {
                            threshold: threshold as usize,
                        }
                    };
                }
                StatementCommitState::LoadSnapshot { threshold } => {
                    return_if_io!(self.ensure_snapshot_loaded());
                    if self.segments.len() <= threshold {
                        self.statement_commit_state = StatementCommitState::Finish;
                        continue;
                    }
                    let candidates = self.auto_merge_candidates();
                    if candidates.is_empty() {
                        self.statement_commit_state = StatementCommitState::Finish;
                        continue;
                    }
                    self.stage_merge_claim(&candidates);
                    self.statement_commit_state = StatementCommitState::Claim;
                    crate::mvcc::yield_points::inject_io_yield!(
                        _context,
                        crate::index_method::IndexMethodYieldPoint::FtsAutoMergeClaimStaged
                    );
                }
                StatementCommitState::Claim => {
                    return_if_io!(self.drive_merge_claim());
                    self.statement_commit_state = StatementCommitState::PublishMerge;
                    crate::mvcc::yield_points::inject_io_yield!(
                        _context,
                        crate::index_method::IndexMethodYieldPoint::FtsAutoMergeStaged
                    );
                }
                StatementCommitState::PublishMerge => {
                    return_if_io!(self.drive_publish());
                    self.statement_commit_state = StatementCommitState::Finish;
                }
                StatementCommitState::Finish => {
                    self.release_writer_slot();
                    self.statement_commit_state = StatementCommitState::Start;
                    return Ok(IOResult::Done(()));
                }
            }
        }
    }

    fn abort_statement(&mut self, _context: &IndexMethodContext) {
        // The statement's backing rows (if any were staged) are undone by
        // the engine's savepoint rollback; drop the in-memory mirror and
        // rescan on the next access.
        self.purge_own_published();
        self.reset_to_init();
    }

    fn on_transaction_committed(&mut self, _context: &IndexMethodContext) {
        // Own segments are durable now; the shared byte cache entries stay.
        self.own_published.clear();
    }

    fn on_transaction_rolled_back(&mut self, _context: &IndexMethodContext) {
        self.purge_own_published();
        self.reset_to_init();
    }

    fn on_savepoint_rolled_back(&mut self, _context: &IndexMethodContext) {
        // Correct but coarse: the hook carries no savepoint identity, so we
        // cannot tell whether the rollback reverted rows this cursor's view
        // depends on. Discard everything; the next FTS access reloads from
        // the (correctly reverted) backing B-tree.
        self.purge_own_published();
        self.reset_to_init();
    }

    fn close(&mut self, _context: &IndexMethodContext) {
        if self.pending_op_count() != 0 || self.is_publishing() {
            // close() is the explicit "discard whatever is left" hook, so it
            // owns this decision: log it loudly, then normalize the cursor so
            // Drop has nothing left to enforce.
            tracing::error!(
                pending_ops = self.pending_op_count(),
                is_publishing = self.is_publishing(),
                "closing FTS cursor with unprepared writes; discarding them"
            );
        }
        self.reset_to_init();
    }

    /// Merge the visible segments into one and drop the deleted documents.
    /// Call it with `OPTIMIZE INDEX idx_name`. This is the only operation
    /// that touches rows of other transactions. The merge first deletes the
    /// registry row of every segment it wants; a segment whose row another
    /// merge already deleted stays out (see `SegmentClaimer`), so two merges
    /// never publish the same document twice. Deletes need no such lock,
    /// because their tombstones name documents by identity, and the merged
    /// segment keeps that identity.
    fn optimize(&mut self, context: &IndexMethodContext) -> IOResultOr<()> {
        let conn = context.connection()?;
        let database_id = context.database().id;
        self.allocator = conn.get_source_database(database_id).allocators.fts.clone();
        self.database_id = Some(database_id);
        self.connection = Some(Arc::downgrade(&conn));

        loop {
            match self.optimize_state {
                OptimizeState::Start => {
                    return_if_io!(self.drive_publish());
                    if matches!(self.state, FtsState::Ready) {
                        self.optimize_state = OptimizeState::LoadSnapshot;
                    } else {
                        return_if_io!(self.ensure_backing_store(context));
                        self.optimize_state = OptimizeState::Open;
                    }
                }
                OptimizeState::Open => {
                    self.opening_for_write = true;
                    let result = self.drive_open();
                    if !matches!(result, Ok(IOResult::IO(_))) {
                        self.opening_for_write = false;
                    }
                    return_if_io!(result);
                    self.optimize_state = OptimizeState::LoadSnapshot;
                }
                OptimizeState::LoadSnapshot => {
                    self.claim_writer_slot()?;
                    return_if_io!(self.ensure_snapshot_loaded());
                    self.optimize_state = OptimizeState::Flush;
                }
                OptimizeState::Flush => {
                    if self.pending_op_count() > 0 {
                        self.stage_flush()?;
                    }
                    self.optimize_state = OptimizeState::PublishFlush;
                    crate::mvcc::yield_points::inject_io_yield!(
                        context,
                        crate::index_method::IndexMethodYieldPoint::FtsOptimizeFlushStaged
                    );
                }
                OptimizeState::PublishFlush => {
                    return_if_io!(self.drive_publish());
                    let total_tombstones: usize =
                        self.segments.iter().map(|s| s.deleted.len()).sum();
                    if self.segments.len() <= 1 && total_tombstones == 0 {
                        self.optimize_state = OptimizeState::Start;
                        return Ok(IOResult::Done(()));
                    }
                    let all_visible = self.segments.iter().map(LoadedSegment::id).collect();
                    self.stage_merge_claim(&all_visible);
                    self.optimize_state = OptimizeState::Claim;
                    crate::mvcc::yield_points::inject_io_yield!(
                        context,
                        crate::index_method::IndexMethodYieldPoint::FtsOptimizeClaimStaged
                    );
                }
                OptimizeState::Claim => {
                    return_if_io!(self.drive_merge_claim());
                    self.optimize_state = OptimizeState::PublishMerge;
                    crate::mvcc::yield_points::inject_io_yield!(
                        context,
                        crate::index_method::IndexMethodYieldPoint::FtsOptimizeMergeStaged
                    );
                }
                OptimizeState::PublishMerge => {
                    return_if_io!(self.drive_publish());
                    self.optimize_state = OptimizeState::Start;
                    return Ok(IOResult::Done(()));
                }
            }
        }
    }

    /// Estimates the cost of executing a query with the given pattern.
    ///
    /// FTS queries are typically very selective (returning a small fraction of rows).
    fn estimate_cost(
        &self,
        context: &crate::index_method::IndexMethodCostContext<'_>,
    ) -> Option<crate::index_method::IndexMethodCostEstimate> {
        // FTS is typically very selective - assume ~1% of rows match
        // This is a conservative estimate; real selectivity depends on query terms
        let selectivity = 0.01;
        let estimated_matches = (context.base_table_rows * selectivity).max(1.0).ceil() as u64;
        let literal_limit = if matches!(
            context.pattern_idx as i64,
            FTS_PATTERN_SCORE
                | FTS_PATTERN_COMBINED_ORDERED_LIMIT
                | FTS_PATTERN_COMBINED_LIMIT
                | FTS_PATTERN_MATCH_LIMIT
        ) {
            context
                .arguments
                .get(1)
                .and_then(Self::constant_integer_expression)
        } else {
            None
        };
        let estimated_rows = match literal_limit {
            Some(0) => 0,
            Some(limit) if limit > 0 => estimated_matches.min(limit as u64),
            // A negative LIMIT means "unlimited" in SQLite. Runtime
            // expressions are unknown at planning time and stay conservative.
            Some(_) | None => estimated_matches,
        };

        let globally_ranked = matches!(
            context.pattern_idx as i64,
            FTS_PATTERN_SCORE | FTS_PATTERN_COMBINED_ORDERED_LIMIT | FTS_PATTERN_COMBINED_ORDERED
        );
        let streaming_limit = matches!(
            context.pattern_idx as i64,
            FTS_PATTERN_COMBINED_LIMIT | FTS_PATTERN_MATCH_LIMIT
        );
        let scores_matches = !matches!(
            context.pattern_idx as i64,
            FTS_PATTERN_MATCH | FTS_PATTERN_MATCH_LIMIT
        );
        let visited_matches = if streaming_limit {
            estimated_rows
        } else {
            estimated_matches
        };
        let scored_matches = if scores_matches {
            if globally_ranked {
                estimated_matches
            } else {
                visited_matches
            }
        } else {
            0
        };

        // Cost model:
        // - Load cost: the dominant real cost. A cold query materializes the
        //   visible segments in memory, linear in index bytes. Segments
        //   resident in the shared byte cache make the load warm.
        // - Base cost: logarithmic in vocabulary size (approximated by table size)
        // - Posting traversal: stops at LIMIT for unordered streaming patterns
        // - Scoring: omitted for MATCH-only patterns
        // - Top-k materialization: required only for global score ordering
        let retained_bytes = self.shared.segment_bytes.lock().total_bytes();
        const ESTIMATED_INDEX_BYTES_PER_ROW: f64 = 64.0;
        const PAGE_BYTES: f64 = 4096.0;
        let load_cost = if retained_bytes > 0 {
            // Resident segments make reuse likely; charge a token amount.
            retained_bytes as f64 / PAGE_BYTES * 0.01
        } else {
            (context.base_table_rows * ESTIMATED_INDEX_BYTES_PER_ROW) / PAGE_BYTES
        };
        let base_cost = context.base_table_rows.max(1.0).ln() * 10.0;
        let traversal_cost = visited_matches as f64 * 0.05;
        let scoring_cost = scored_matches as f64 * 0.05;
        let materialization_cost = if globally_ranked {
            estimated_rows as f64 * 0.05
        } else {
            0.0
        };

        Some(crate::index_method::IndexMethodCostEstimate {
            estimated_cost: load_cost
                + base_cost
                + traversal_cost
                + scoring_cost
                + materialization_cost,
            estimated_rows,
        })
    }

    #[cfg(feature = "test_helper")]
    fn test_stats(&self) -> Result<Option<crate::index_method::IndexMethodTestStats>> {
        let stats = &self.shared.stats;
        let format_version = self.control.as_ref().map(|_| FTS_STORAGE_FORMAT_VERSION);
        let file_count: usize = self
            .segments
            .iter()
            .map(|segment| segment.descriptor.files.len())
            .sum();
        Ok(Some(crate::index_method::IndexMethodTestStats {
            storage_format_version: format_version,
            index_incarnation: self.control.as_ref().map(|c| c.index_incarnation),
            // The transactional manifest is gone in format v2: the visible
            // registry rows are the manifest.
            manifest_generation: None,
            manifest_file_count: self.snapshot_loaded.then_some(file_count),
            storage_file_count: file_count,
            segment_count: self.snapshot_loaded.then_some(self.segments.len()),
            cached_connection_count: Some(self.shared.searchers.lock().entries.len()),
            cached_bytes: Some(self.shared.segment_bytes.lock().total_bytes()),
            cache_admission_rejections: None,
            // Writers are transaction-private in format v2; there is no
            // shared retained writer.
            cached_writer: Some(false),
            tantivy_writer_constructions: Some(stats.segment_builds.load(Ordering::Relaxed)),
            writer_cache_lookups: None,
            writer_cache_hits: None,
            writer_cache_validation_failures: None,
            writer_cache_rollback_discards: None,
            writer_cache_misses: None,
            read_cache_lookups: Some(stats.read_cache_lookups.load(Ordering::Relaxed)),
            read_cache_hits: Some(stats.read_cache_hits.load(Ordering::Relaxed)),
            read_cache_misses: Some(stats.read_cache_misses.load(Ordering::Relaxed)),
            // In format v2 the registry scan is cheap and runs per
            // snapshot; the expensive part is loading segment bytes, which
            // the shared byte cache avoids. Report byte loads here.
            full_snapshot_loads: Some(stats.segment_loads.load(Ordering::Relaxed)),
            manifest_validation_hits: None,
            manifest_validation_misses: None,
            merge_segments_claimed: Some(stats.merge_segments_claimed.load(Ordering::Relaxed)),
            merge_segments_skipped: Some(stats.merge_segments_skipped.load(Ordering::Relaxed)),
        }))
    }
}

fn add_json_value(
    doc: &mut TantivyDocument,
    field: Field,
    column: &str,
    value: &Register,
) -> Result<()> {
    let text = match value {
        Register::Value(Value::Null) => return Ok(()),
        Register::Value(Value::Text(text)) => text.as_str(),
        _ => {
            return Err(LimboError::InvalidArgument(format!(
                "FTS JSON column '{column}' requires JSON text or NULL"
            )))
        }
    };
    let object: Option<serde_json::Map<String, serde_json::Value>> = serde_json::from_str(text)
        .map_err(|error| {
            LimboError::InvalidArgument(format!(
                "invalid JSON object in FTS column '{column}': {error}"
            ))
        })?;
    if let Some(object) = object {
        doc.add_field_value(field, &OwnedValue::from(object));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
