use super::*;
use crate::namespace::NamespaceRef;
use crate::schema::{
    SCHEMA_TABLE_NAME, SCHEMA_TABLE_NAME_ALT, TEMP_SCHEMA_TABLE_NAME, TEMP_SCHEMA_TABLE_NAME_ALT,
};
use crate::translate::catalog::CatalogContext;
use crate::translate::plan::{
    is_schema_table, merge_columns, resolve_unqualified_column, unqualified_column_sources,
    ColumnLookup, OuterQueryReference, ResolvedColumn,
};

/// The precedence of binding identifiers to columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BindingBehavior {
    /// `TryResultColumnsFirst` means that result columns (e.g. SELECT x AS y, ...) take precedence over canonical columns (e.g. SELECT x, y AS z, ...). This is the default behavior.
    TryResultColumnsFirst,
    /// `TryCanonicalColumnsFirst` means that canonical columns take precedence over result columns. This is used for e.g. WHERE clauses.
    TryCanonicalColumnsFirst,
    /// `ResultColumnsNotAllowed` means that referring to result columns is not allowed. This is used e.g. for DML statements.
    ResultColumnsNotAllowed,
    /// `AllowUnboundIdentifiers` means that unbound identifiers are allowed. This is used for INSERT ... ON CONFLICT DO UPDATE SET ... where binding is handled later than this phase.
    AllowUnboundIdentifiers,
}

/// The result of resolving the `<id>` half of a qualified `<tbl>.<id>`
/// reference against a single candidate table whose identifier already
/// matches `<tbl>`.
#[derive(Debug, Clone, Copy)]
pub(super) enum QualifiedMatch {
    /// `<id>` named a real column on the candidate table.
    Column {
        col_idx: usize,
        is_rowid_alias: bool,
    },
    /// `<id>` named the rowid (`rowid`/`oid`/`_rowid_`) of a btree.
    /// There is no column index — the result must become an
    /// `Expr::RowId`, not an `Expr::Column`.
    RowId,
}

/// Resolve `<id>` against a single table reference.
///
/// The caller is responsible for:
///   * filtering candidate refs down to those whose identifier matches `<tbl>`,
///   * detecting ambiguity across multiple candidate refs,
///   * applying any scope-specific USING/NATURAL dedup rules.
///
/// Returns:
///   * `Ok(Some(Column { .. }))` — `<id>` is a real column on `table`.
///   * `Ok(Some(RowId))` — `<id>` is a rowid alias on a rowid btree.
///   * `Ok(None)` — `<id>` is not present on this ref.
///   * `Err(_)` — `<id>` is a rowid alias but the btree has no rowid
///     (definitively invalid; reported as "no such column: <id>" per SQLite).
pub(super) fn resolve_qualified_on_ref(
    table: &Table,
    internal_id: TableInternalId,
    normalized_id: &str,
) -> Result<Option<QualifiedMatch>> {
    if let Some(col_idx) = table.columns().iter().position(|c| {
        c.name
            .as_ref()
            .is_some_and(|name| name.eq_ignore_ascii_case(normalized_id))
    }) {
        let col = table.columns().get(col_idx).unwrap();
        return Ok(Some(QualifiedMatch::Column {
            col_idx,
            is_rowid_alias: col.is_rowid_alias(),
        }));
    }

    match table {
        Table::BTree(btree) => {
            if parse_row_id(normalized_id, internal_id, || false)?.is_some() {
                if !btree.has_rowid {
                    crate::bail_parse_error!("no such column: {}", normalized_id);
                }
                return Ok(Some(QualifiedMatch::RowId));
            }
        }
        Table::Virtual(_) => {
            if parse_row_id(normalized_id, internal_id, || false)?.is_some() {
                return Ok(Some(QualifiedMatch::RowId));
            }
        }
        _ => {}
    }

    Ok(None)
}

/// The result of one qualified-name search in one table reference.
#[derive(Clone, Copy)]
enum QualifiedTableMatch {
    /// The qualifier does not name this table reference.
    NoTable,
    /// The qualifier names this table reference, but its column does not exist.
    NoColumn,
    /// The qualifier and column both match this table reference.
    Found(QualifiedMatch),
    /// More than one column in this table reference matches the name.
    Ambiguous,
}

/// The result of searching the current scope and its parent scopes.
#[derive(Clone, Copy)]
enum QualifiedNameMatch {
    /// No visible query scope contains the requested table.
    NoTable,
    /// A visible table exists, but its column does not exist.
    NoColumn,
    /// One visible column matches the requested name.
    Found(TableInternalId, QualifiedMatch),
    /// More than one visible column matches the requested name.
    Ambiguous,
}

/// Rewrite ast::Expr in place, binding Column references/rewriting Expr::Id -> Expr::Column
/// using the provided TableReferences, and replacing anonymous parameters with internal named
/// ones
#[turso_macros::trace_stack]
pub fn bind_and_rewrite_expr<'a>(
    top_level_expr: &mut ast::Expr,
    mut referenced_tables: Option<&'a mut TableReferences>,
    result_columns: Option<&'a [ResultSetColumn]>,
    resolver: &Resolver<'_>,
    binding_behavior: BindingBehavior,
) -> Result<()> {
    walk_expr_mut(
        top_level_expr,
        &mut |expr: &mut ast::Expr| -> Result<WalkControl> {
            match expr {
                Expr::Id(id) => {
                    crate::stack::trace_stack!("bind_id");
                    let Some(referenced_tables) = &mut referenced_tables else {
                        if binding_behavior == BindingBehavior::AllowUnboundIdentifiers {
                            return Ok(WalkControl::Continue);
                        }
                        crate::bail_parse_error!("no such column: {}", id.as_str());
                    };
                    let normalized_id = normalize_ident(id.as_str());

                    if binding_behavior == BindingBehavior::TryResultColumnsFirst {
                        if let Some(result_columns) = result_columns {
                            for result_column in result_columns.iter() {
                                if let Some(alias) = &result_column.alias {
                                    if alias.eq_ignore_ascii_case(&normalized_id) {
                                        *expr = result_column.expr.clone();
                                        return Ok(WalkControl::Continue);
                                    }
                                }
                            }
                        }
                    }
                    let joined_tables = referenced_tables.joined_tables();
                    // First check joined tables
                    if let Some(resolved_column) =
                        resolve_unqualified_column(joined_tables, id.as_str())?
                    {
                        *expr = resolved_column.expr;
                        // FULL JOIN can make the merged value read several table columns.
                        for (table_id, column_index) in resolved_column.source_columns {
                            referenced_tables.mark_column_used(table_id, column_index);
                        }
                        return Ok(WalkControl::Continue);
                    }

                    // No real column matched. SQLite now tries rowid names before outer scopes.
                    for joined_table in joined_tables.iter() {
                        if let Table::BTree(btree) = &joined_table.table {
                            if let Some(row_id_expr) =
                                parse_row_id(&normalized_id, joined_tables[0].internal_id, || {
                                    joined_tables.len() != 1
                                })?
                            {
                                if !btree.has_rowid {
                                    crate::bail_parse_error!("no such column: {}", id.as_str());
                                }
                                *expr = row_id_expr;
                                return Ok(WalkControl::Continue);
                            }
                        } else if let Table::Virtual(_) = &joined_table.table {
                            if let Some(row_id_expr) =
                                parse_row_id(&normalized_id, joined_tables[0].internal_id, || {
                                    joined_tables.len() != 1
                                })?
                            {
                                *expr = row_id_expr;
                                return Ok(WalkControl::Continue);
                            }
                        }
                    }

                    // Then check outer query references, if we still didn't find something.
                    // Normally finding multiple matches for a non-qualified column is an error (column x is ambiguous)
                    // but in the case of subqueries, the inner query takes precedence.
                    // For example:
                    // SELECT * FROM t WHERE x = (SELECT x FROM t2)
                    // In this case, there is no ambiguity:
                    // - x in the outer query refers to t.x,
                    // - x in the inner query refers to t2.x.
                    //
                    // Ambiguity is only checked within the same scope depth. Once a match
                    // is found at depth N, deeper scopes (N+1, N+2, ...) are not checked.
                    if let Some(resolved_column) =
                        resolve_unqualified_outer_column(referenced_tables, &normalized_id)?
                    {
                        *expr = resolved_column.expr;
                        for (table_id, column_index) in resolved_column.source_columns {
                            referenced_tables.mark_column_used(table_id, column_index);
                        }
                        return Ok(WalkControl::Continue);
                    }

                    if binding_behavior == BindingBehavior::TryCanonicalColumnsFirst {
                        if let Some(result_columns) = result_columns {
                            for result_column in result_columns.iter() {
                                if let Some(alias) = &result_column.alias {
                                    if alias.eq_ignore_ascii_case(&normalized_id) {
                                        *expr = result_column.expr.clone();
                                        return Ok(WalkControl::Continue);
                                    }
                                }
                            }
                        }
                    }

                    // SQLite DQS misfeature: double-quoted identifiers fall back to string literals
                    // only when DQS is enabled for DML statements
                    if id.quoted_with('"') && resolver.dqs_dml.is_enabled() {
                        *expr = Expr::Literal(ast::Literal::String(id.as_literal()));
                        return Ok(WalkControl::Continue);
                    } else {
                        crate::bail_parse_error!("no such column: {}", id.as_str())
                    }
                }
                Expr::Qualified(tbl, id) => {
                    crate::stack::trace_stack!("bind_qualified");
                    // In SQLite, a qualifier without the requested column does
                    // not hide a matching column in an outer scope.
                    tracing::debug!("bind_and_rewrite_expr({:?}, {:?})", tbl, id);
                    let Some(referenced_tables) = &mut referenced_tables else {
                        if binding_behavior == BindingBehavior::AllowUnboundIdentifiers {
                            return Ok(WalkControl::Continue);
                        }
                        crate::bail_parse_error!(
                            "no such column: {}.{}",
                            tbl.as_str(),
                            id.as_str()
                        );
                    };
                    let normalized_table_name = normalize_ident(tbl.as_str());
                    let normalized_id = normalize_ident(id.as_str());

                    let qualified_match = resolve_qualified_name(
                        referenced_tables,
                        resolver,
                        None,
                        &normalized_table_name,
                        &normalized_id,
                    )?;

                    // --- Error reporting. ---
                    if matches!(qualified_match, QualifiedNameMatch::NoTable) {
                        // No scope contains a table with this identifier. Normally we
                        // report "no such table", but there is one case where SQLite
                        // reports "no such column" instead: when the identifier names a
                        // CTE that was preplanned for subquery FROM visibility and kept
                        // as a definition-only outer ref. The CTE *name* is valid in
                        // principle; it's the column access through it that isn't,
                        // because the CTE hasn't been brought into this scope's FROM.
                        // The `cte_id`/`cte_select` check restricts this to real CTE
                        // definition refs so any other future use of `cte_definition_only`
                        // still falls through to "no such table".
                        let is_definition_only_cte = referenced_tables
                            .find_outer_query_ref_by_identifier(&normalized_table_name)
                            .is_some_and(|outer_ref| {
                                outer_ref.cte_definition_only
                                    && (outer_ref.cte_id.is_some()
                                        || outer_ref.cte_select.is_some())
                            });
                        if is_definition_only_cte {
                            crate::bail_parse_error!(
                                "no such column: {}.{}",
                                tbl.as_str(),
                                id.as_str()
                            );
                        }
                        // Dot-notation fallback for struct/union field access (DuckDB-style precedence).
                        //
                        // For `a.b`, resolution order is:
                        //   1. a=table, b=column       (handled above — if we're here, this failed)
                        //   2. a=column, b=struct field (handled below)
                        //
                        // This means table references always win over struct field access.
                        // If a table `t` has a struct column also named `t` with field `x`,
                        // `t.x` resolves as table.column, not column.field. The user can
                        // disambiguate with an alias: `SELECT s.t.x FROM t AS s`.
                        //
                        // We do NOT reject ambiguous schemas at CREATE TABLE time because
                        // the combinatorial explosion (CREATE TYPE, CREATE TABLE, ALTER TABLE)
                        // makes that impractical. Deterministic precedence is sufficient.
                        let field_name = normalize_ident(id.as_str());
                        if let Some(m) = find_custom_type_column(
                            referenced_tables,
                            &normalized_table_name,
                            resolver,
                        )? {
                            *expr = make_field_access_expr(
                                m.table_id,
                                m.col_idx,
                                m.is_rowid_alias,
                                &field_name,
                                m.type_def,
                            );
                            referenced_tables.mark_column_used(m.table_id, m.col_idx);
                            return Ok(WalkControl::Continue);
                        }
                        crate::bail_parse_error!("no such table: {}", normalized_table_name);
                    }
                    match qualified_match {
                        QualifiedNameMatch::Found(table_id, column) => {
                            bind_qualified_name(expr, referenced_tables, table_id, column)
                        }
                        QualifiedNameMatch::Ambiguous => crate::bail_parse_error!(
                            "ambiguous column name: {}.{}",
                            tbl.as_str(),
                            id.as_str()
                        ),
                        QualifiedNameMatch::NoColumn => crate::bail_parse_error!(
                            "no such column: {}.{}",
                            tbl.as_str(),
                            id.as_str()
                        ),
                        QualifiedNameMatch::NoTable => unreachable!("handled above"),
                    }
                    return Ok(WalkControl::Continue);
                }
                Expr::DoublyQualified(db_name, tbl_name, col_name) => {
                    crate::stack::trace_stack!("bind_doubly_qualified");
                    // Clone the names upfront so we can reassign *expr later
                    // without lifetime conflicts.
                    let db_name_str = db_name.as_str().to_string();
                    let tbl_name_str = tbl_name.as_str().to_string();
                    let col_name_str = col_name.as_str().to_string();
                    let tbl_name_clone = tbl_name.clone();
                    let db_name_clone = db_name.clone();

                    let Some(referenced_tables) = &mut referenced_tables else {
                        if binding_behavior == BindingBehavior::AllowUnboundIdentifiers {
                            return Ok(WalkControl::Continue);
                        }
                        crate::bail_parse_error!(
                            "no such column: {}.{}.{}",
                            db_name_str,
                            tbl_name_str,
                            col_name_str
                        );
                    };
                    let normalized_col_name = normalize_ident(&col_name_str);

                    // DoublyQualified: `a.b.c` — DuckDB-style precedence:
                    //   1. a=database, b=table, c=column     (tried first)
                    //   2. a=table,    b=column, c=struct field  (fallback)
                    //
                    // Same principle as Qualified: schema-level references always win.
                    let qualified_name = ast::QualifiedName {
                        namespace: Some(db_name_clone),
                        name: tbl_name_clone,
                        alias: None,
                    };
                    let db_resolution = resolver.resolve_namespace(&qualified_name);

                    if let Ok(namespace) = db_resolution.as_ref() {
                        match resolve_qualified_name(
                            referenced_tables,
                            resolver,
                            Some(*namespace),
                            &tbl_name_str,
                            &normalized_col_name,
                        )? {
                            QualifiedNameMatch::Found(table_id, column) => {
                                bind_qualified_name(expr, referenced_tables, table_id, column);
                                return Ok(WalkControl::Continue);
                            }
                            QualifiedNameMatch::NoColumn => crate::bail_parse_error!(
                                "no such column: {}.{}.{}",
                                db_name_str,
                                tbl_name_str,
                                col_name_str
                            ),
                            QualifiedNameMatch::Ambiguous => crate::bail_parse_error!(
                                "ambiguous column name: {}.{}.{}",
                                db_name_str,
                                tbl_name_str,
                                col_name_str
                            ),
                            QualifiedNameMatch::NoTable => {}
                        }
                    }

                    // Try db.table.column interpretation first. If database resolves AND
                    // the table+column exist, use that. Otherwise fall through to
                    // table.column.field for struct/union field access.
                    let mut resolved_as_db_table_col = false;
                    if let Ok(namespace) = db_resolution {
                        let table = resolver.with_schema(namespace.database_id, |schema| {
                            schema.get_table(namespace.id, &tbl_name_str)
                        });

                        if let Some(table) = table {
                            let col_idx = table.columns().iter().position(|c| {
                                c.name.as_ref().is_some_and(|name| {
                                    name.eq_ignore_ascii_case(&normalized_col_name)
                                })
                            });

                            if let Some(col_idx) = col_idx {
                                let col = table.columns().get(col_idx).unwrap();
                                let is_rowid_alias = col.is_rowid_alias();
                                let normalized_tbl_name = normalize_ident(&tbl_name_str);
                                let matching_tbl = referenced_tables
                                    .find_table_and_internal_id_by_identifier(&normalized_tbl_name);

                                if let Some((tbl_id, _)) = matching_tbl {
                                    *expr = Expr::Column {
                                        database: None,
                                        table: tbl_id,
                                        column: col_idx,
                                        is_rowid_alias,
                                    };
                                    referenced_tables.mark_column_used(tbl_id, col_idx);
                                    resolved_as_db_table_col = true;
                                } else {
                                    // Table exists in database but not in FROM clause
                                    return Err(LimboError::ParseError(format!(
                                        "table {normalized_tbl_name} is not in FROM clause — \
                                         cross-database column references require the table to be explicitly joined"
                                    )));
                                }
                            }
                        }
                    }
                    if !resolved_as_db_table_col {
                        // db.table.column failed — try table.column.field for struct/union
                        let normalized_tbl_name = normalize_ident(&db_name_str);
                        let normalized_col = normalize_ident(&tbl_name_str);
                        let field_name = normalize_ident(&col_name_str);
                        let matching_tbl = referenced_tables
                            .find_table_and_internal_id_by_identifier(&normalized_tbl_name);
                        if let Some((tbl_id, tbl)) = matching_tbl {
                            let col_idx = tbl.columns().iter().position(|c| {
                                c.name
                                    .as_ref()
                                    .is_some_and(|n| n.eq_ignore_ascii_case(&normalized_col))
                            });
                            if let Some(col_idx) = col_idx {
                                let col = &tbl.columns()[col_idx];
                                let type_def =
                                    resolver.schema().get_type_def_unchecked(&col.ty_str);
                                let is_struct_or_union = type_def
                                    .map(|td| td.is_struct() || td.is_union())
                                    .unwrap_or(false);
                                if is_struct_or_union {
                                    *expr = make_field_access_expr(
                                        tbl_id,
                                        col_idx,
                                        col.is_rowid_alias(),
                                        &field_name,
                                        type_def.unwrap(),
                                    );
                                    referenced_tables.mark_column_used(tbl_id, col_idx);
                                    return Ok(WalkControl::Continue);
                                } else {
                                    // Column exists but is not a struct/union type
                                    return Err(LimboError::ParseError(format!(
                                        "column '{normalized_col}' is not a STRUCT or UNION type; \
                                         cannot access field '{field_name}'"
                                    )));
                                }
                            }
                        }
                        // Fallback (3): column.field.subfield for nested struct/union access
                        // Handles:
                        //   data.telegram.chat_id — UNION column, variant with struct type
                        //   data.sub.a            — STRUCT column, struct-typed field, sub-field
                        let col_name_norm = normalize_ident(&db_name_str);
                        let mid_name = normalize_ident(&tbl_name_str);
                        let leaf_field = normalize_ident(&col_name_str);
                        if let Some((nested_expr, tbl_id, col_idx)) =
                            try_resolve_nested_field_access(
                                referenced_tables,
                                &col_name_norm,
                                &mid_name,
                                &leaf_field,
                                resolver,
                            )?
                        {
                            *expr = nested_expr;
                            referenced_tables.mark_column_used(tbl_id, col_idx);
                        } else {
                            return Err(LimboError::ParseError(format!(
                                "no such column: {db_name_str}.{tbl_name_str}.{col_name_str}"
                            )));
                        }
                    }
                }
                Expr::FunctionCallStar { name, filter_over } => {
                    validate_function_tail(
                        name.as_str(),
                        0,
                        filter_over,
                        false,
                        &resolver.catalog,
                    )?;
                    // For functions that need star expansion (json_object, jsonb_object),
                    // expand the * to all columns from the referenced tables as key-value pairs
                    // This needs to happen during bind/rewrite so WHERE clauses can use these functions
                    if let Some(referenced_tables) = &mut referenced_tables {
                        if let Ok(Some(func)) = Func::resolve_function(name.as_str(), 0) {
                            if func.needs_star_expansion() {
                                // Only expand if there are actual tables - otherwise leave as
                                // FunctionCallStar so translate_expr can generate the error
                                let joined_tables = referenced_tables.joined_tables();
                                if !joined_tables.is_empty() {
                                    // Mark all columns as used so the optimizer doesn't
                                    // create partial covering indexes that would miss columns
                                    let joined_tables = referenced_tables.joined_tables_mut();
                                    for table in joined_tables.iter_mut() {
                                        for col_idx in 0..table.columns().len() {
                                            table.mark_column_used(col_idx);
                                        }
                                    }

                                    // Build arguments: alternating column_name (as string literal), column_value (as column reference)
                                    let mut args: Vec<Box<ast::Expr>> = Vec::new();

                                    let joined_tables = referenced_tables.joined_tables();
                                    for table in joined_tables.iter() {
                                        for (col_idx, col) in table.columns().iter().enumerate() {
                                            // Skip hidden columns (like rowid in some cases)
                                            if col.hidden() {
                                                continue;
                                            }

                                            // Add column name as a string literal
                                            let col_name = col.name.clone().unwrap_or_else(|| {
                                                format!("column{}", col_idx + 1)
                                            });
                                            let quoted_col_name = format!("'{col_name}'");
                                            args.push(Box::new(ast::Expr::Literal(
                                                ast::Literal::String(quoted_col_name),
                                            )));

                                            // Add column reference using Expr::Column
                                            args.push(Box::new(ast::Expr::Column {
                                                database: None,
                                                table: table.internal_id,
                                                column: col_idx,
                                                is_rowid_alias: col.is_rowid_alias(),
                                            }));
                                        }
                                    }

                                    // Replace FunctionCallStar with expanded FunctionCall
                                    *expr = ast::Expr::FunctionCall {
                                        name: name.clone(),
                                        distinctness: None,
                                        args,
                                        filter_over: filter_over.clone(),
                                        order_by: vec![],
                                        within_group: vec![],
                                    };
                                }
                            }
                        }
                    }
                }
                // Validate struct/union function calls at bind time.
                // Principle: compile-time checks belong in the earliest phase that
                // has enough context. Binding has the resolver (for custom-types
                // gate) and the raw AST args (for arity and literal checks).
                // Catching errors here avoids wasting optimizer and translation
                // cycles on invalid queries, and keeps the translate_expr match
                // arms focused on code generation.
                Expr::FunctionCall {
                    name,
                    args,
                    filter_over,
                    order_by,
                    ..
                } => {
                    validate_function_tail(
                        name.as_str(),
                        args.len(),
                        filter_over,
                        !order_by.is_empty(),
                        &resolver.catalog,
                    )?;
                    validate_custom_type_function_call(name.as_str(), args, resolver)?;
                }
                _ => {}
            }
            Ok(WalkControl::Continue)
        },
    )?;
    Ok(())
}

pub(crate) fn validate_function_tail(
    name: &str,
    arg_count: usize,
    filter_over: &ast::FunctionTail,
    has_order_by: bool,
    resolver: &CatalogContext,
) -> Result<()> {
    if !has_order_by && filter_over.filter_clause.is_none() && filter_over.over_clause.is_none() {
        return Ok(());
    }
    match resolver.resolve_function(name, arg_count)? {
        Some(Func::Agg(_) | Func::Window(_)) | None => Ok(()),
        Some(Func::External(func)) if func.func.is_aggregate() => Ok(()),
        _ if has_order_by => {
            crate::bail_parse_error!("ORDER BY may not be used with non-aggregate {}()", name)
        }
        _ if filter_over.over_clause.is_some() => {
            crate::bail_parse_error!("{} may not be used as a window function", name)
        }
        _ => crate::bail_parse_error!("FILTER may not be used with non-aggregate {}()", name),
    }
}

/// Bind an unqualified name to a column of an outer query, closest scope first.
///
/// Within one scope the outer query's USING rules apply, as they do in that
/// query itself (see [unqualified_column_sources]). In
/// `SELECT (SELECT a) FROM t1 FULL JOIN t2 USING(a)`, the inner `a` is the
/// merged value of `t1.a` and `t2.a`, not just `t1.a`.
fn resolve_unqualified_outer_column(
    table_references: &TableReferences,
    column_name: &str,
) -> Result<Option<ResolvedColumn>> {
    // Definition-only entries let a FROM clause find a CTE by name; the CTE's
    // columns are visible only after a FROM clause adds the table.
    let outer_refs: Vec<&OuterQueryReference> = table_references
        .outer_query_refs()
        .iter()
        .filter(|outer_ref| !outer_ref.cte_definition_only)
        .collect();
    let mut scope_depths: Vec<usize> = outer_refs.iter().map(|r| r.scope_depth).collect();
    scope_depths.sort_unstable();
    scope_depths.dedup();
    let is_rowid_name = crate::translate::planner::ROWID_STRS
        .iter()
        .any(|name| name.eq_ignore_ascii_case(column_name));
    for scope_depth in scope_depths {
        let scope: Vec<&OuterQueryReference> = outer_refs
            .iter()
            .copied()
            .filter(|outer_ref| outer_ref.scope_depth == scope_depth)
            .collect();
        let has_declared_column = is_rowid_name
            && scope.iter().any(|outer_ref| {
                !matches!(
                    lookup_unqualified_column(&outer_ref.table, column_name, false),
                    ColumnLookup::Missing
                )
            });
        let found = unqualified_column_sources(
            &scope,
            column_name,
            |outer_ref| outer_ref.join_info.as_ref(),
            |outer_ref| {
                lookup_unqualified_column(&outer_ref.table, column_name, !has_declared_column)
            },
        );
        if found.ambiguous {
            crate::bail_parse_error!("ambiguous column name: {}", column_name);
        }
        if found.sources.is_empty() {
            continue;
        }
        return Ok(Some(merge_columns(found.sources.into_iter().map(
            |(scope_index, column_index)| {
                let outer_ref = scope[scope_index];
                (outer_ref.internal_id, &outer_ref.table, column_index)
            },
        ))));
    }
    Ok(None)
}

/// Find one column by its unqualified name.
///
/// A parenthesized join can keep several source columns with the same name.
/// Hidden source copies do not take part in an unqualified lookup.
pub(in crate::translate) fn find_unqualified_column(
    table: &Table,
    column_name: &str,
) -> Result<Option<usize>> {
    find_unqualified_column_with_rowid(table, column_name, true)
}

fn find_unqualified_column_with_rowid(
    table: &Table,
    column_name: &str,
    include_rowid: bool,
) -> Result<Option<usize>> {
    match lookup_unqualified_column(table, column_name, include_rowid) {
        ColumnLookup::Found(column_index) => Ok(Some(column_index)),
        ColumnLookup::Missing => Ok(None),
        ColumnLookup::Ambiguous => {
            crate::bail_parse_error!("ambiguous column name: {}", column_name)
        }
    }
}

/// Like [find_unqualified_column_with_rowid], but reports an ambiguous name
/// instead of failing, so a later RIGHT JOIN USING can still replace it.
pub(in crate::translate) fn lookup_unqualified_column(
    table: &Table,
    column_name: &str,
    include_rowid: bool,
) -> ColumnLookup {
    let Some(join_columns) = table.parenthesized_join_columns() else {
        return match table.get_column_by_name(column_name) {
            Some((column_index, _)) => ColumnLookup::Found(column_index),
            None => ColumnLookup::Missing,
        };
    };
    let candidates = join_columns.iter().enumerate().filter(|(_, join_column)| {
        join_column.source.matches_column_name(column_name)
            && if join_column.source.is_rowid() {
                include_rowid
            } else {
                join_column.visibility != ParenthesizedJoinColumnVisibility::QualifiedOnly
            }
    });
    match pick_parenthesized_join_column(candidates) {
        Ok(Some(column_index)) => ColumnLookup::Found(column_index),
        Ok(None) => ColumnLookup::Missing,
        Err(()) => ColumnLookup::Ambiguous,
    }
}

/// Search the current query first, then search the nearest outer query.
fn resolve_qualified_name(
    table_references: &TableReferences,
    resolver: &Resolver<'_>,
    namespace: Option<NamespaceRef>,
    table_name: &str,
    column_name: &str,
) -> Result<QualifiedNameMatch> {
    let use_nearest_table_only = resolver
        .catalog
        .dialect
        .qualified_column_uses_nearest_table_only();
    let mut table_found = false;
    let mut found = None;
    for joined_table in table_references.joined_tables() {
        let candidate = match_qualified_name_in_table(
            &joined_table.table,
            joined_table.internal_id,
            qualifier_names_table(
                &joined_table.table,
                &joined_table.identifier,
                joined_table.has_alias,
                joined_table.namespace.database_id,
                table_name,
                namespace.is_some(),
            ),
            database_id_to_match(&joined_table.table, joined_table.namespace, namespace),
            table_name,
            column_name,
        )?;
        match candidate {
            QualifiedTableMatch::NoTable => continue,
            QualifiedTableMatch::NoColumn => table_found = true,
            QualifiedTableMatch::Ambiguous => return Ok(QualifiedNameMatch::Ambiguous),
            QualifiedTableMatch::Found(column) => {
                table_found = true;
                if found.is_some() {
                    let duplicate_is_merged = matches!(column, QualifiedMatch::Column { .. })
                        && joined_table
                            .join_info
                            .as_ref()
                            .is_some_and(|join| join.merges_column(column_name));
                    if !duplicate_is_merged {
                        return Ok(QualifiedNameMatch::Ambiguous);
                    }
                } else {
                    found = Some((joined_table.internal_id, column));
                }
            }
        }
    }
    if let Some((table_id, column)) = found {
        return Ok(QualifiedNameMatch::Found(table_id, column));
    }
    if table_found && use_nearest_table_only {
        return Ok(QualifiedNameMatch::NoColumn);
    }

    let mut nearest_scope = None;
    let mut ambiguous = false;
    for outer_ref in table_references.outer_query_refs() {
        if outer_ref.cte_definition_only {
            continue;
        }
        if nearest_scope.is_some_and(|scope| outer_ref.scope_depth > scope) {
            continue;
        }
        let candidate = match_qualified_name_in_table(
            &outer_ref.table,
            outer_ref.internal_id,
            qualifier_names_table(
                &outer_ref.table,
                &outer_ref.identifier,
                outer_ref.has_alias,
                outer_ref.namespace.database_id,
                table_name,
                namespace.is_some(),
            ),
            database_id_to_match(&outer_ref.table, outer_ref.namespace, namespace),
            table_name,
            column_name,
        )?;
        if matches!(candidate, QualifiedTableMatch::NoColumn) && !use_nearest_table_only {
            table_found = true;
            continue;
        }
        if matches!(candidate, QualifiedTableMatch::NoTable) {
            continue;
        }
        if nearest_scope.is_none_or(|scope| outer_ref.scope_depth < scope) {
            nearest_scope = Some(outer_ref.scope_depth);
            found = None;
            ambiguous = false;
        }
        match candidate {
            QualifiedTableMatch::Ambiguous => ambiguous = true,
            QualifiedTableMatch::Found(column) if found.is_some() => {
                let duplicate_is_merged = matches!(
                    column,
                    QualifiedMatch::Column { col_idx, .. }
                        if outer_ref_merges_column(outer_ref, col_idx)
                );
                ambiguous |= !duplicate_is_merged;
            }
            QualifiedTableMatch::Found(column) => {
                found = Some((outer_ref.internal_id, column));
            }
            QualifiedTableMatch::NoTable | QualifiedTableMatch::NoColumn => {}
        }
    }

    if ambiguous {
        Ok(QualifiedNameMatch::Ambiguous)
    } else if let Some((table_id, column)) = found {
        Ok(QualifiedNameMatch::Found(table_id, column))
    } else if table_found || nearest_scope.is_some() {
        Ok(QualifiedNameMatch::NoColumn)
    } else {
        Ok(QualifiedNameMatch::NoTable)
    }
}

/// Whether `<tbl>` in `<tbl>.<col>` names the FROM item `table_reference_name`.
///
/// Like SQLite's `isValidSchemaTableName()`, the schema table without an alias
/// can be named by either `sqlite_schema` or `sqlite_master`, whichever name
/// FROM used. The temp schema table accepts the temp names, and also the main
/// names when the column has a database qualifier. With an alias, only the
/// alias names the table.
fn qualifier_names_table(
    table: &Table,
    table_reference_name: &str,
    has_alias: bool,
    table_database_id: usize,
    table_name: &str,
    has_database_qualifier: bool,
) -> bool {
    if has_alias || !is_schema_table(table) {
        return table_reference_name.eq_ignore_ascii_case(table_name);
    }
    let main_names = [SCHEMA_TABLE_NAME, SCHEMA_TABLE_NAME_ALT];
    let temp_names = [TEMP_SCHEMA_TABLE_NAME, TEMP_SCHEMA_TABLE_NAME_ALT];
    let names_main_table = main_names
        .iter()
        .any(|name| name.eq_ignore_ascii_case(table_name));
    let names_temp_table = temp_names
        .iter()
        .any(|name| name.eq_ignore_ascii_case(table_name));
    if table_database_id == crate::TEMP_DB_ID {
        names_temp_table || (has_database_qualifier && names_main_table)
    } else {
        names_main_table
    }
}

/// A schema name that matches the table's own database is already satisfied,
/// so the table can then be matched by its alias.
fn database_id_to_match(
    table: &Table,
    table_namespace: NamespaceRef,
    namespace: Option<NamespaceRef>,
) -> Option<usize> {
    if namespace == Some(table_namespace) && matches!(table, Table::BTree(_) | Table::Virtual(_)) {
        None
    } else {
        namespace.map(|namespace| namespace.database_id)
    }
}

/// Whether the join that added this outer table merged the column with USING.
fn outer_ref_merges_column(outer_ref: &OuterQueryReference, column_index: usize) -> bool {
    let Some(join_info) = outer_ref.join_info.as_ref() else {
        return false;
    };
    outer_ref.table.columns()[column_index]
        .name
        .as_deref()
        .is_some_and(|name| join_info.merges_column(name))
}

/// Match a qualified name against one table reference.
///
/// SQLite lets an outer query refer to tables inside a parenthesized join.
/// If no inner column matches, the query can use the group's alias.
fn match_qualified_name_in_table(
    table: &Table,
    table_id: TableInternalId,
    qualifier_names_table: bool,
    database_id: Option<usize>,
    table_name: &str,
    column_name: &str,
) -> Result<QualifiedTableMatch> {
    if let Some(join_columns) = table.parenthesized_join_columns() {
        let mut table_columns = join_columns
            .iter()
            .enumerate()
            .filter(|(_, join_column)| join_column.source.matches_table(database_id, table_name))
            .peekable();
        let table_found = table_columns.peek().is_some();
        let candidates = table_columns
            .filter(|(_, join_column)| join_column.source.matches_column_name(column_name));
        let Ok(column) = pick_parenthesized_join_column(candidates) else {
            return Ok(QualifiedTableMatch::Ambiguous);
        };
        if let Some(col_idx) = column {
            return Ok(QualifiedTableMatch::Found(QualifiedMatch::Column {
                col_idx,
                is_rowid_alias: table.columns()[col_idx].is_rowid_alias(),
            }));
        }
        if table_found && !qualifier_names_table {
            return Ok(QualifiedTableMatch::NoColumn);
        }
    }

    if database_id.is_some() || !qualifier_names_table {
        return Ok(QualifiedTableMatch::NoTable);
    }
    Ok(
        match resolve_qualified_on_ref(table, table_id, column_name)? {
            Some(column) => QualifiedTableMatch::Found(column),
            None => QualifiedTableMatch::NoColumn,
        },
    )
}

/// A real column wins over an implicit rowid. Two real columns, or two
/// implicit rowids without a real column, make the name ambiguous.
fn pick_parenthesized_join_column<'a>(
    candidates: impl Iterator<Item = (usize, &'a ParenthesizedJoinColumn)>,
) -> std::result::Result<Option<usize>, ()> {
    let mut real_column = None;
    let mut rowid_column = None;
    let mut rowid_is_ambiguous = false;
    for (column_index, join_column) in candidates {
        if join_column.source.is_rowid() {
            rowid_is_ambiguous |= rowid_column.replace(column_index).is_some();
        } else if real_column.replace(column_index).is_some() {
            return Err(());
        }
    }
    if real_column.is_none() && rowid_is_ambiguous {
        return Err(());
    }
    Ok(real_column.or(rowid_column))
}

/// Replace a qualified name with its bound column and record the read.
fn bind_qualified_name(
    expr: &mut Expr,
    table_references: &mut TableReferences,
    table_id: TableInternalId,
    column: QualifiedMatch,
) {
    match column {
        QualifiedMatch::Column {
            col_idx,
            is_rowid_alias,
        } => {
            *expr = Expr::Column {
                database: None,
                table: table_id,
                column: col_idx,
                is_rowid_alias,
            };
            tracing::debug!("rewritten to column");
            table_references.mark_column_used(table_id, col_idx);
        }
        QualifiedMatch::RowId => {
            *expr = Expr::RowId {
                database: None,
                table: table_id,
            };
            tracing::debug!("rewritten to rowid");
            table_references.mark_rowid_referenced(table_id);
        }
    }
}

/// Extract a string literal value from an expression that has already been
/// validated as `Expr::Literal(Literal::String(_))` during bind-time checks.
pub(super) fn extract_string_literal(expr: &ast::Expr) -> crate::Result<String> {
    match expr {
        ast::Expr::Literal(ast::Literal::String(s)) => Ok(s.trim_matches('\'').to_string()),
        _ => crate::bail_parse_error!("expected a string literal argument"),
    }
}

/// Resolve the UnionDef for a column expression. Returns the variant names list
/// and optionally resolves a tag name to its numeric index.
/// Used by union_value, union_tag, union_extract function translation.
///
/// In the DML index-maintenance path (INSERT with expression indexes),
/// `referenced_tables` is `None` and columns use `SELF_TABLE`. We fall back
/// to the Resolver's `SelfTableContext::ForDML` to obtain column metadata.
/// Resolve the TypeDef for a column expression (Column or DML self-table column).
pub(super) fn resolve_typedef_from_column(
    expr: &ast::Expr,
    referenced_tables: Option<&TableReferences>,
    resolver: &Resolver,
) -> Option<Arc<TypeDef>> {
    let ty_str = match expr {
        ast::Expr::Column { table, column, .. } => {
            resolve_column_type_str(*table, *column, referenced_tables, resolver)?
        }
        ast::Expr::Variable(var) => var.col_type.as_ref()?.to_string(),
        _ => return None,
    };
    let td = resolver.schema().get_type_def_unchecked(&ty_str)?;
    Some(Arc::clone(td))
}

pub(super) fn resolve_union_from_column(
    expr: &ast::Expr,
    referenced_tables: Option<&TableReferences>,
    resolver: &Resolver,
) -> Option<Arc<TypeDef>> {
    resolve_typedef_from_column(expr, referenced_tables, resolver).filter(|td| td.is_union())
}

/// Resolve the struct TypeDef that an expression evaluates to.
///
/// Handles column references (direct struct column),
/// `union_extract(...)` (variant's struct type), and
/// `struct_extract(...)` (field's struct type for nested extraction).
pub(super) fn resolve_struct_from_expr(
    expr: &ast::Expr,
    referenced_tables: Option<&TableReferences>,
    resolver: &Resolver,
) -> Option<Arc<TypeDef>> {
    match expr {
        ast::Expr::Column { .. } => resolve_typedef_from_column(expr, referenced_tables, resolver)
            .filter(|td| td.is_struct()),
        ast::Expr::FunctionCall { name, args, .. } => {
            let normalized = crate::util::normalize_ident(name.as_str());
            match normalized.as_str() {
                // union_extract(col, 'tag') → variant's type
                "union_extract" if args.len() == 2 => {
                    let tag_name = extract_string_literal(&args[1]).ok()?;
                    let union_td =
                        resolve_union_from_column(&args[0], referenced_tables, resolver)?;
                    let (_, variant) = union_td.find_union_variant(&tag_name)?;
                    let struct_td = resolver
                        .schema()
                        .get_type_def_unchecked(&variant.type_name)?;
                    if struct_td.is_struct() {
                        Some(Arc::clone(struct_td))
                    } else {
                        None
                    }
                }
                // struct_extract(expr, 'field') → field's type (if it's a struct)
                "struct_extract" if args.len() == 2 => {
                    let field_name = extract_string_literal(&args[1]).ok()?;
                    let parent_td =
                        resolve_struct_from_expr(&args[0], referenced_tables, resolver)?;
                    let (_, field_def) = parent_td.find_struct_field(&field_name)?;
                    let field_td = resolver
                        .schema()
                        .get_type_def_unchecked(&field_def.type_name)?;
                    if field_td.is_struct() {
                        Some(Arc::clone(field_td))
                    } else {
                        None
                    }
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// Get the type string for a column
pub(super) fn resolve_column_type_str(
    table: ast::TableInternalId,
    column: usize,
    referenced_tables: Option<&TableReferences>,
    resolver: &Resolver,
) -> Option<String> {
    if let Some(rt) = referenced_tables {
        if let Some((_, tbl)) = rt.find_table_by_internal_id(table) {
            return Some(tbl.columns().get(column)?.ty_str.clone());
        }
    }
    if table.is_self_table() {
        return resolver.self_table_column_type_str(column);
    }
    None
}

/// Result of finding a column with a custom (struct/union) type across joined tables.
pub(super) struct CustomTypeColumnMatch<'a> {
    table_id: TableInternalId,
    col_idx: usize,
    is_rowid_alias: bool,
    type_def: &'a crate::schema::TypeDef,
}

/// Search all joined tables for a column named `col_name` with a struct/union type.
/// Errors on ambiguity (>1 match). Returns `None` if no match.
#[turso_macros::trace_stack]
pub(super) fn find_custom_type_column<'a>(
    referenced_tables: &TableReferences,
    col_name: &str,
    resolver: &'a Resolver<'a>,
) -> crate::Result<Option<CustomTypeColumnMatch<'a>>> {
    let mut result: Option<CustomTypeColumnMatch<'a>> = None;
    let mut match_count = 0usize;
    for joined_table in referenced_tables.joined_tables().iter() {
        let cols = joined_table.table.columns();
        if let Some(col_idx) = cols.iter().position(|c| {
            c.name
                .as_ref()
                .is_some_and(|n| n.eq_ignore_ascii_case(col_name))
        }) {
            let col = &cols[col_idx];
            let type_def = resolver.schema().get_type_def_unchecked(&col.ty_str);
            let is_struct_or_union = type_def
                .map(|td| td.is_struct() || td.is_union())
                .unwrap_or(false);
            if is_struct_or_union {
                match_count += 1;
                result = Some(CustomTypeColumnMatch {
                    table_id: joined_table.internal_id,
                    col_idx,
                    is_rowid_alias: col.is_rowid_alias(),
                    type_def: type_def.unwrap(),
                });
            }
        }
    }
    if match_count > 1 {
        crate::bail_parse_error!(
            "ambiguous column reference: '{}' — multiple tables have a struct/union column with this name",
            col_name
        );
    }
    Ok(result)
}

/// Build an `Expr::FieldAccess { base: Expr::Column { ... }, field, resolved }` node,
/// pre-resolving the field index via `resolve_field_access`.
pub(super) fn make_field_access_expr(
    table_id: TableInternalId,
    col_idx: usize,
    is_rowid_alias: bool,
    field_name: &str,
    td: &crate::schema::TypeDef,
) -> Expr {
    let resolved = resolve_field_access(td, field_name);
    Expr::FieldAccess {
        base: Box::new(Expr::Column {
            database: None,
            table: table_id,
            column: col_idx,
            is_rowid_alias,
        }),
        field: ast::Name::from_bytes(field_name.as_bytes()),
        resolved,
    }
}

/// Try to resolve `col_name.mid_name.leaf_name` as 2-level deep field access
/// (e.g. `data.telegram.chat_id` where `data` is a UNION column, `telegram` is
/// a variant with struct type, and `chat_id` is a struct field).
///
/// Returns the nested FieldAccess expr plus table_id/col_idx for `mark_column_used`.
pub(super) fn try_resolve_nested_field_access<'a>(
    referenced_tables: &TableReferences,
    col_name: &str,
    mid_name: &str,
    leaf_name: &str,
    resolver: &'a Resolver<'a>,
) -> crate::Result<Option<(Expr, TableInternalId, usize)>> {
    let m = find_custom_type_column(referenced_tables, col_name, resolver)?;
    let Some(m) = m else {
        return Ok(None);
    };
    let td = m.type_def;

    // Resolve the inner type name reached via mid_name:
    // Case A: UNION column — mid_name is a variant tag
    // Case B: STRUCT column — mid_name is a struct field
    let inner_type_name = td
        .find_union_variant(mid_name)
        .map(|(_, v)| v.type_name.as_str())
        .or_else(|| {
            td.find_struct_field(mid_name)
                .map(|(_, f)| f.type_name.as_str())
        });

    let has_leaf = inner_type_name
        .and_then(|tn| resolver.schema().get_type_def_unchecked(tn))
        .is_some_and(|itd| itd.find_struct_field(leaf_name).is_some());

    if !has_leaf {
        return Ok(None);
    }

    let nested_expr = Expr::FieldAccess {
        base: Box::new(Expr::FieldAccess {
            base: Box::new(Expr::Column {
                database: None,
                table: m.table_id,
                column: m.col_idx,
                is_rowid_alias: m.is_rowid_alias,
            }),
            field: ast::Name::from_bytes(mid_name.as_bytes()),
            resolved: None,
        }),
        field: ast::Name::from_bytes(leaf_name.as_bytes()),
        resolved: None,
    };

    Ok(Some((nested_expr, m.table_id, m.col_idx)))
}

/// Resolve a field/variant name against a TypeDef to produce a FieldAccessResolution.
pub(super) fn resolve_field_access(
    td: &crate::schema::TypeDef,
    field_name: &str,
) -> Option<ast::FieldAccessResolution> {
    if let Some((idx, _)) = td.find_struct_field(field_name) {
        Some(ast::FieldAccessResolution::StructField { field_index: idx })
    } else if let Some((tag_idx, _)) = td.find_union_variant(field_name) {
        Some(ast::FieldAccessResolution::UnionVariant { tag_index: tag_idx })
    } else {
        None
    }
}

/// Recursively resolve the output TypeDef of an expression.
///
/// For `Expr::Column`, returns the column's declared custom type.
/// For `Expr::FieldAccess`, recurses into the base to find the parent type,
/// then looks up what type the accessed field/variant produces.
/// Returns `None` for expressions that don't produce a known custom type.
pub(super) fn resolve_expr_output_type<'a>(
    expr: &ast::Expr,
    referenced_tables: Option<&TableReferences>,
    resolver: &'a Resolver<'a>,
) -> crate::Result<&'a crate::schema::TypeDef> {
    match expr {
        ast::Expr::Column { table, column, .. } => {
            let Some(referenced_tables) = referenced_tables else {
                crate::bail_parse_error!("cannot resolve type: no table context");
            };
            let Some((_is_outer, tbl)) = referenced_tables.find_table_by_internal_id(*table) else {
                crate::bail_parse_error!("cannot resolve type: table not found");
            };
            let col = &tbl.columns()[*column];
            let Some(td) = resolver.schema().get_type_def_unchecked(&col.ty_str) else {
                crate::bail_parse_error!(
                    "column '{}' has type '{}' which is not a known struct or union type",
                    col.name.as_deref().unwrap_or("?"),
                    col.ty_str
                );
            };
            Ok(td)
        }
        ast::Expr::FieldAccess { base, field, .. } => {
            let parent_td = resolve_expr_output_type(base, referenced_tables, resolver)?;
            let field_name = normalize_ident(field.as_str());
            // Find what type this field/variant produces
            let inner_type_name =
                if let Some((_, variant)) = parent_td.find_union_variant(&field_name) {
                    &variant.type_name
                } else if let Some((_, f)) = parent_td.find_struct_field(&field_name) {
                    &f.type_name
                } else {
                    let kind = if parent_td.is_union() {
                        "variant"
                    } else {
                        "field"
                    };
                    crate::bail_parse_error!("no such {} '{}' in type", kind, field_name);
                };
            let Some(td) = resolver.schema().get_type_def_unchecked(inner_type_name) else {
                crate::bail_parse_error!(
                    "'{}' resolves to type '{}' which is not a known type",
                    field_name,
                    inner_type_name
                );
            };
            Ok(td)
        }
        _ => {
            crate::bail_parse_error!("expression does not produce a known custom type");
        }
    }
}

/// Validates custom-type function calls (arrays, structs, unions) at bind time.
///
/// Compile-time checks belong in the earliest phase that has enough context.
/// Binding has the resolver (for the custom-types gate) and the raw AST args
/// (for arity and literal checks). Catching errors here avoids wasting
/// optimizer and translation cycles on invalid queries, and keeps the
/// translate_expr match arms focused purely on register allocation and codegen.
pub(super) fn validate_custom_type_function_call(
    name: &str,
    args: &[Box<ast::Expr>],
    resolver: &Resolver<'_>,
) -> Result<()> {
    let normalized = crate::util::normalize_ident(name);
    match normalized.as_str() {
        // Arrays
        "array" | "array_element" | "array_set_element" | "array_length" | "array_append"
        | "array_prepend" | "array_cat" | "array_remove" | "array_contains" | "array_position"
        | "array_slice" | "string_to_array" | "array_to_string" | "array_overlap"
        | "array_contains_all" => {
            resolver.require_custom_types("Array features")?;
        }
        // Structs
        "struct_pack" => {
            resolver.require_custom_types("Struct features")?;
        }
        "struct_extract" => {
            resolver.require_custom_types("Struct features")?;
            if args.len() != 2 {
                crate::bail_parse_error!("struct_extract() requires exactly 2 arguments");
            }
            if !matches!(&*args[1], ast::Expr::Literal(ast::Literal::String(_))) {
                crate::bail_parse_error!(
                    "struct_extract() second argument must be a string literal"
                );
            }
        }
        // Unions
        "union_value" => {
            resolver.require_custom_types("Union features")?;
            if args.len() != 2 {
                crate::bail_parse_error!("union_value() requires exactly 2 arguments");
            }
            if !matches!(&*args[0], ast::Expr::Literal(ast::Literal::String(_))) {
                crate::bail_parse_error!("union_value() first argument must be a string literal");
            }
        }
        "union_tag" => {
            resolver.require_custom_types("Union features")?;
            if args.len() != 1 {
                crate::bail_parse_error!("union_tag() requires exactly 1 argument");
            }
        }
        "union_extract" => {
            resolver.require_custom_types("Union features")?;
            if args.len() != 2 {
                crate::bail_parse_error!("union_extract() requires exactly 2 arguments");
            }
            if !matches!(&*args[1], ast::Expr::Literal(ast::Literal::String(_))) {
                crate::bail_parse_error!(
                    "union_extract() second argument must be a string literal"
                );
            }
        }
        _ => {}
    }
    Ok(())
}
