use super::*;

/// Emit the start of the two-level loop for an `IN` search.
///
/// The outer loop reads one value from the `IN` list. The inner loop reads all
/// table or index rows that match that value.
/// The main loop and the unmatched-right read use this bytecode shape.
#[allow(clippy::too_many_arguments)]
pub(super) fn emit_in_seek_start(
    program: &mut ProgramBuilder,
    table_references: &TableReferences,
    resolver: &Resolver<'_>,
    index: Option<&Arc<Index>>,
    source: &InSeekSource,
    table_cursor_id: Option<CursorID>,
    index_cursor_id: Option<CursorID>,
    loop_start: BranchOffset,
    loop_end: BranchOffset,
) -> Result<InSeekMetadata> {
    let source_cursor_id =
        open_in_seek_source_cursor(program, table_references, resolver, index, source)?;
    program.emit_insn(Insn::NullRow {
        cursor_id: source_cursor_id,
    });
    program.emit_insn(Insn::Rewind {
        cursor_id: source_cursor_id,
        pc_if_empty: loop_end,
    });

    let outer_loop_start = program.allocate_label();
    program.preassign_label_to_next_insn(outer_loop_start);
    let seek_reg = program.alloc_register();
    program.emit_insn(Insn::Column {
        cursor_id: source_cursor_id,
        column: 0,
        dest: seek_reg,
        default: None,
    });

    let next_value = program.allocate_label();
    program.emit_insn(Insn::IsNull {
        reg: seek_reg,
        target_pc: next_value,
    });
    if index.is_none() {
        program.emit_insn(Insn::SeekRowid {
            cursor_id: table_cursor_id.expect("a rowid IN search must have a table cursor"),
            src_reg: seek_reg,
            target_pc: next_value,
        });
    } else {
        let index_cursor_id =
            index_cursor_id.expect("an indexed IN search must have an index cursor");
        program.emit_insn(Insn::SeekGE {
            cursor_id: index_cursor_id,
            start_reg: seek_reg,
            num_regs: 1,
            target_pc: next_value,
            is_index: true,
            eq_only: false,
            null_matching_mask: Default::default(),
        });
        program.preassign_label_to_next_insn(loop_start);
        program.emit_insn(Insn::IdxGT {
            cursor_id: index_cursor_id,
            start_reg: seek_reg,
            num_regs: 1,
            target_pc: next_value,
        });
        if let Some(table_cursor_id) = table_cursor_id {
            program.emit_deferred_seek(index_cursor_id, table_cursor_id);
        }
    }

    Ok(InSeekMetadata {
        ephemeral_cursor_id: source_cursor_id,
        outer_loop_start,
        next_val_label: next_value,
    })
}

/// Open or reuse the ephemeral cursor that supplies RHS values for an IN-seek.
///
/// Literal lists are materialized once into a unique ephemeral index so both
/// ordinary `Search::InSeek` and multi-index OR branches can drive repeated
/// equality seeks from the same bytecode pattern. IN-subqueries already have an
/// ephemeral cursor from subquery translation, so they are reused directly.
pub(super) fn open_in_seek_source_cursor(
    program: &mut ProgramBuilder,
    table_references: &TableReferences,
    resolver: &Resolver<'_>,
    index: Option<&Arc<Index>>,
    source: &InSeekSource,
) -> Result<CursorID> {
    match source {
        InSeekSource::LiteralList { values, affinity } => {
            let label_once_end = if values.iter().all(|value| value.is_constant(resolver)) {
                let label_once_end = program.allocate_label();
                program.emit_insn(Insn::Once {
                    target_pc_when_reentered: label_once_end,
                });
                Some(label_once_end)
            } else {
                None
            };
            let collation = index
                .as_ref()
                .and_then(|idx| idx.columns.first())
                .map_or(CollationSeq::Binary, |c| c.collation);
            let ephemeral_index = Arc::new(Index {
                name: String::new(),
                table_name: String::new(),
                root_page: 0,
                columns: crate::alloc::try_vec![IndexColumn {
                    name: String::new(),
                    order: SortOrder::Asc,
                    nulls_order: None,
                    pos_in_table: 0,
                    collation,
                    default: None,
                    expr: None,
                }]?,
                unique: true,
                ephemeral: true,
                has_rowid: false,
                where_clause: None,
                index_method: None,
                on_conflict: None,
                constraint_name: None,
            });
            let eph_cursor = program.alloc_cursor_id(CursorType::BTreeIndex(ephemeral_index));
            program.emit_insn(Insn::OpenEphemeral {
                cursor_id: eph_cursor,
                is_table: false,
            });
            let val_reg = program.alloc_register();
            let record_reg = program.alloc_register();
            let affinity_str = affinity.aff_mask().to_string();
            for value in values.iter() {
                translate_expr_no_constant_opt(
                    program,
                    Some(table_references),
                    value,
                    val_reg,
                    resolver,
                    NoConstantOptReason::InListEphemeral,
                )?;
                program.emit_insn(Insn::MakeRecord {
                    start_reg: to_u32(val_reg),
                    count: 1,
                    dest_reg: to_u32(record_reg),
                    index_name: None,
                    affinity_str: Some(affinity_str.clone()),
                });
                program.emit_insn(Insn::IdxInsert {
                    cursor_id: eph_cursor,
                    record_reg,
                    unpacked_start: Some(val_reg),
                    unpacked_count: Some(1),
                    flags: IdxInsertFlags::new().no_op_duplicate(),
                });
            }
            if let Some(label_once_end) = label_once_end {
                program.preassign_label_to_next_insn(label_once_end);
            }
            Ok(eph_cursor)
        }
        InSeekSource::Subquery { cursor_id } => Ok(*cursor_id),
    }
}

/// Emit the end of the two-level loop for an `IN` search.
pub(super) fn emit_in_seek_end(
    program: &mut ProgramBuilder,
    index_cursor_id: Option<CursorID>,
    loop_start: BranchOffset,
    meta: &InSeekMetadata,
) {
    if let Some(index_cursor_id) = index_cursor_id {
        // An index key can identify more than one row. The inner loop reads all
        // matching rows before the outer loop advances to the next `IN` value.
        program.emit_insn(Insn::Next {
            cursor_id: index_cursor_id,
            pc_if_next: loop_start,
            fullscan: false,
            is_index: false,
        });
    }
    program.preassign_label_to_next_insn(meta.next_val_label);
    program.emit_insn(Insn::Next {
        cursor_id: meta.ephemeral_cursor_id,
        pc_if_next: meta.outer_loop_start,
        fullscan: false,
        is_index: false,
    });
}
