use crate::namespace::NamespaceRef;
use crate::sync::Arc;
use crate::{turso_assert, turso_assert_greater_than_or_equal};

use super::plan::NamedWindowBound;
use super::{
    expr::{walk_expr, walk_expr_mut},
    plan::{
        alias_or_stored_name, left_using_column_sources, merge_columns, query_output_columns,
        resolve_unqualified_column, Aggregate, ColumnUsedMask, Distinctness, EvalAt,
        IterationDirection, JoinInfo, JoinOrderMember, JoinOrigin, JoinType as PlanJoinType,
        JoinedTable, Operation, OuterQueryReference, Plan, QueryDestination, ResolvedColumn,
        ResultSetColumn, Scan, TableReferences, WhereTerm, WhereTermOrigin,
    },
    select::{prepare_select_plan, prepare_select_plan_from_arms},
};
use crate::translate::plan::BitSet;
use crate::translate::{
    emitter::Resolver,
    expr::{
        expr_contains_function_that_changes_within_statement,
        expr_contains_nondeterministic_scalar_function, expr_vector_size, unwrap_parens,
        BindingBehavior, WalkControl,
    },
    plan::{NonFromClauseSubquery, SubqueryState},
    subquery::outer_query_refs_for_correlated_subquery,
};
use crate::{
    ast::Limit,
    function::Func,
    schema::{
        ParenthesizedJoinColumn, ParenthesizedJoinColumnSource, ParenthesizedJoinColumnVisibility,
        Table,
    },
    util::{exprs_are_equivalent, normalize_ident},
    Result,
};
use crate::{
    function::{AccumulatorFunc, AggFunc, WindowFunc},
    translate::expr::bind_and_rewrite_expr,
};
use crate::{
    translate::plan::{Window, WindowFunction},
    vdbe::builder::ProgramBuilder,
};
use smallvec::SmallVec;
use turso_parser::ast::{
    self, As, Expr, FromClause, JoinType, Materialized, Over, QualifiedName, Select,
    TableInternalId, With,
};

/// Data needed to plan each reference to a CTE separately.
///
/// Separate plans prevent two references from accidentally sharing table IDs
/// or cursor IDs unless the CTE is deliberately materialized once.
struct CteDefinition {
    /// Identifies materialized results shared by references to this CTE.
    cte_id: usize,
    /// Normalized CTE name.
    name: String,
    /// SELECT syntax used to build a plan for each reference.
    select: Select,
    /// Explicit column names from `WITH t(a, b) AS (...)`.
    explicit_columns: Vec<String>,
    /// Other CTE definitions referenced by this CTE.
    referenced_cte_indices: SmallVec<[usize; 2]>,
    /// True when `AS MATERIALIZED` requires one stored result.
    materialize_hint: bool,
    /// The CTE body contains a reference to its own name.
    references_itself: bool,
}

fn collect_cte_definitions(with: With, program: &mut ProgramBuilder) -> Result<Vec<CteDefinition>> {
    let mut definitions = Vec::with_capacity(with.ctes.len());
    let mut referenced_table_names_by_cte = Vec::with_capacity(with.ctes.len());

    for cte in with.ctes {
        let name = normalize_ident(cte.tbl_name.as_str());
        if definitions
            .iter()
            .any(|definition: &CteDefinition| definition.name == name)
        {
            crate::bail_parse_error!("duplicate WITH table name: {}", cte.tbl_name.as_str());
        }

        let mut referenced_table_names = Vec::new();
        collect_from_clause_table_refs(&cte.select, &mut referenced_table_names);
        let references_itself = RecursiveRefCounter { cte_name: &name }
            .count_select(&cte.select, &mut RecursiveRefScope::new())
            > 0;
        referenced_table_names_by_cte.push(referenced_table_names);
        definitions.push(CteDefinition {
            cte_id: program.alloc_cte_id(),
            name,
            select: cte.select,
            explicit_columns: cte
                .columns
                .iter()
                .map(|column| normalize_ident(column.col_name.as_str()))
                .collect(),
            referenced_cte_indices: SmallVec::new(),
            materialize_hint: cte.materialized == Materialized::Yes,
            references_itself,
        });
    }

    for (cte_index, referenced_table_names) in referenced_table_names_by_cte.iter().enumerate() {
        definitions[cte_index].referenced_cte_indices = definitions
            .iter()
            .enumerate()
            .filter(|(candidate_index, definition)| {
                *candidate_index != cte_index && referenced_table_names.contains(&definition.name)
            })
            .map(|(candidate_index, _)| candidate_index)
            .collect();
    }
    Ok(definitions)
}

/// Collect the table names that a SELECT, its subqueries, and its nested WITH
/// clauses read in a FROM clause. Used to find the CTEs that a query reads.
fn collect_from_clause_table_refs(select: &Select, out: &mut Vec<String>) {
    if let Some(with) = &select.with {
        for cte in &with.ctes {
            collect_from_clause_table_refs(&cte.select, out);
        }
    }
    collect_from_select_body(&select.body, out);
    collect_subquery_table_refs_in_select_exprs(select, out);
}

fn collect_from_select_body(body: &ast::SelectBody, out: &mut Vec<String>) {
    collect_from_one_select(&body.select, out);
    for compound in &body.compounds {
        collect_from_one_select(&compound.select, out);
    }
}

fn collect_from_one_select(one: &ast::OneSelect, out: &mut Vec<String>) {
    match one {
        ast::OneSelect::Select { from, .. } => {
            if let Some(from_clause) = from {
                collect_from_select_table(&from_clause.select, out);
                for join in &from_clause.joins {
                    collect_from_select_table(&join.table, out);
                }
            }
        }
        ast::OneSelect::Values(_) => {}
    }
}

/// Counts references to a recursive CTE's own name the way SQLite's name
/// resolution does:
/// - a nested `WITH` that redefines the name shadows it for that subtree, and
/// - references inside a nested CTE body only count when that CTE is itself
///   referenced (an unused nested CTE that mentions the recursive table does
///   not make the query recursive), weighted by how many references its body
///   contains.
struct RecursiveRefCounter<'a> {
    cte_name: &'a str,
}

/// Names visible at the current point, innermost last. Each entry carries the
/// number of recursive references that using the name implies: 0 for a name
/// that shadows the recursive table, and the body's own reference count for
/// any other nested CTE.
type RecursiveRefScope = Vec<(String, usize)>;

impl RecursiveRefCounter<'_> {
    /// The number of recursive references implied by referring to `name`.
    fn name_weight(&self, name: &str, scope: &RecursiveRefScope) -> usize {
        for (scope_name, weight) in scope.iter().rev() {
            if scope_name == name {
                return *weight;
            }
        }
        usize::from(name == self.cte_name)
    }

    /// Brings the CTEs of a nested `WITH` into scope with their reference
    /// weights. The caller is responsible for truncating `scope` afterwards.
    fn push_nested_ctes(&self, with: Option<&With>, scope: &mut RecursiveRefScope) {
        let Some(with) = with else {
            return;
        };
        for cte in &with.ctes {
            let name = normalize_ident(cte.tbl_name.as_str());
            // The CTE's own name is visible inside its body, where it refers
            // to the nested CTE itself rather than the recursive table.
            scope.push((name, 0));
            let weight = self.count_select(&cte.select, scope);
            scope.last_mut().expect("scope entry pushed above").1 = weight;
        }
    }

    fn count_select(&self, select: &Select, scope: &mut RecursiveRefScope) -> usize {
        let scope_base = scope.len();
        self.push_nested_ctes(select.with.as_ref(), scope);
        let mut count = self.count_one_select(&select.body.select, scope);
        for compound in &select.body.compounds {
            count += self.count_one_select(&compound.select, scope);
        }
        for sorted in &select.order_by {
            count += self.count_expr(&sorted.expr, scope);
        }
        if let Some(limit) = &select.limit {
            count += self.count_expr(&limit.expr, scope);
            if let Some(offset) = &limit.offset {
                count += self.count_expr(offset, scope);
            }
        }
        scope.truncate(scope_base);
        count
    }

    fn count_one_select(&self, one: &ast::OneSelect, scope: &mut RecursiveRefScope) -> usize {
        match one {
            ast::OneSelect::Select {
                columns,
                from,
                where_clause,
                group_by,
                window_clause,
                ..
            } => {
                let mut count = 0;
                if let Some(from) = from {
                    count += self.count_from_table(&from.select, scope);
                    for join in &from.joins {
                        count += self.count_from_table(&join.table, scope);
                        if let Some(ast::JoinConstraint::On(expr)) = &join.constraint {
                            count += self.count_expr(expr, scope);
                        }
                    }
                }
                for column in columns {
                    if let ast::ResultColumn::Expr(expr, _) = column {
                        count += self.count_expr(expr, scope);
                    }
                }
                if let Some(expr) = where_clause {
                    count += self.count_expr(expr, scope);
                }
                if let Some(group_by) = group_by {
                    for expr in &group_by.exprs {
                        count += self.count_expr(expr, scope);
                    }
                    if let Some(having) = &group_by.having {
                        count += self.count_expr(having, scope);
                    }
                }
                for window_def in window_clause {
                    count += self.count_window(&window_def.window, scope);
                }
                count
            }
            ast::OneSelect::Values(rows) => rows
                .iter()
                .flatten()
                .map(|expr| self.count_expr(expr, scope))
                .sum(),
        }
    }

    fn count_from_table(&self, table: &ast::SelectTable, scope: &mut RecursiveRefScope) -> usize {
        match table {
            ast::SelectTable::Table(name, _, _) => {
                if name.namespace.is_none() {
                    self.name_weight(&normalize_ident(name.name.as_str()), scope)
                } else {
                    0
                }
            }
            ast::SelectTable::TableCall(name, args, _) => {
                let mut count = if name.namespace.is_none() {
                    self.name_weight(&normalize_ident(name.name.as_str()), scope)
                } else {
                    0
                };
                for arg in args {
                    count += self.count_expr(arg, scope);
                }
                count
            }
            ast::SelectTable::Select {
                select: subselect, ..
            } => self.count_select(subselect, scope),
            ast::SelectTable::Sub(from, _) => {
                let mut count = self.count_from_table(&from.select, scope);
                for join in &from.joins {
                    count += self.count_from_table(&join.table, scope);
                    if let Some(ast::JoinConstraint::On(expr)) = &join.constraint {
                        count += self.count_expr(expr, scope);
                    }
                }
                count
            }
        }
    }

    fn count_window(&self, window: &ast::Window, scope: &mut RecursiveRefScope) -> usize {
        let mut count = 0;
        for expr in &window.partition_by {
            count += self.count_expr(expr, scope);
        }
        for sorted in &window.order_by {
            count += self.count_expr(&sorted.expr, scope);
        }
        if let Some(frame_clause) = &window.frame_clause {
            for bound in std::iter::once(&frame_clause.start).chain(frame_clause.end.as_ref()) {
                if let ast::FrameBound::Following(expr) | ast::FrameBound::Preceding(expr) = bound {
                    count += self.count_expr(expr, scope);
                }
            }
        }
        count
    }

    fn count_expr(&self, expr: &Expr, scope: &mut RecursiveRefScope) -> usize {
        let mut count = 0;
        let _ = walk_expr(expr, &mut |node: &Expr| -> Result<WalkControl> {
            match node {
                Expr::Exists(select) | Expr::Subquery(select) => {
                    count += self.count_select(select, scope);
                    Ok(WalkControl::SkipChildren)
                }
                Expr::InSelect { rhs, .. } => {
                    count += self.count_select(rhs, scope);
                    // The walker does not descend into the subquery, only the
                    // left-hand side expression.
                    Ok(WalkControl::Continue)
                }
                _ => Ok(WalkControl::Continue),
            }
        });
        count
    }

    /// Returns `(top_level_from_count, total_count)` for one arm of a
    /// recursive CTE body: direct references to the recursive table in the
    /// arm's FROM clause, and all references reachable from the arm.
    fn count_arm(&self, one: &ast::OneSelect, scope: &mut RecursiveRefScope) -> (usize, usize) {
        fn count_direct_in_from_table(
            counter: &RecursiveRefCounter,
            table: &ast::SelectTable,
            scope: &RecursiveRefScope,
        ) -> usize {
            match table {
                ast::SelectTable::Table(name, _, _) | ast::SelectTable::TableCall(name, _, _) => {
                    if name.namespace.is_some() {
                        return 0;
                    }
                    let name = normalize_ident(name.name.as_str());
                    // A direct reference only counts when nothing shadows the
                    // recursive table's name.
                    usize::from(
                        name == counter.cte_name
                            && !scope.iter().any(|(scope_name, _)| *scope_name == name),
                    )
                }
                ast::SelectTable::Select { .. } => 0,
                ast::SelectTable::Sub(from, _) => {
                    count_direct_in_from_table(counter, &from.select, scope)
                        + from
                            .joins
                            .iter()
                            .map(|join| count_direct_in_from_table(counter, &join.table, scope))
                            .sum::<usize>()
                }
            }
        }

        let top_level_from_count = if let ast::OneSelect::Select {
            from: Some(from), ..
        } = one
        {
            count_direct_in_from_table(self, &from.select, scope)
                + from
                    .joins
                    .iter()
                    .map(|join| count_direct_in_from_table(self, &join.table, scope))
                    .sum::<usize>()
        } else {
            0
        };
        let total_count = self.count_one_select(one, scope);
        (top_level_from_count, total_count)
    }
}

fn collect_from_select_table(table: &ast::SelectTable, out: &mut Vec<String>) {
    match table {
        ast::SelectTable::Table(qualified_name, _, _) => {
            if qualified_name.namespace.is_none() {
                out.push(normalize_ident(qualified_name.name.as_str()));
            }
        }
        ast::SelectTable::TableCall(qualified_name, args, _) => {
            if qualified_name.namespace.is_none() {
                out.push(normalize_ident(qualified_name.name.as_str()));
            }
            for arg in args {
                collect_subquery_table_refs_in_expr(arg, out);
            }
        }
        ast::SelectTable::Select {
            select: subselect, ..
        } => {
            collect_from_clause_table_refs(subselect, out);
        }
        ast::SelectTable::Sub(from_clause, _) => {
            collect_from_select_table(&from_clause.select, out);
            for join in &from_clause.joins {
                collect_from_select_table(&join.table, out);
                if let Some(ast::JoinConstraint::On(expr)) = &join.constraint {
                    collect_subquery_table_refs_in_expr(expr, out);
                }
            }
        }
    }
}

/// Collect table references from subqueries embedded in expressions.
fn collect_subquery_table_refs_in_select_exprs(select: &Select, out: &mut Vec<String>) {
    collect_subquery_table_refs_in_one_select(&select.body.select, out);
    for compound in &select.body.compounds {
        collect_subquery_table_refs_in_one_select(&compound.select, out);
    }

    for sorted in &select.order_by {
        collect_subquery_table_refs_in_expr(&sorted.expr, out);
    }

    if let Some(limit) = &select.limit {
        collect_subquery_table_refs_in_expr(&limit.expr, out);
        if let Some(offset) = &limit.offset {
            collect_subquery_table_refs_in_expr(offset, out);
        }
    }
}

fn collect_subquery_table_refs_in_one_select(one: &ast::OneSelect, out: &mut Vec<String>) {
    match one {
        ast::OneSelect::Select {
            columns,
            where_clause,
            group_by,
            window_clause,
            ..
        } => {
            for column in columns {
                if let ast::ResultColumn::Expr(expr, _) = column {
                    collect_subquery_table_refs_in_expr(expr, out);
                }
            }
            if let Some(expr) = where_clause {
                collect_subquery_table_refs_in_expr(expr, out);
            }
            if let Some(group_by) = group_by {
                for expr in &group_by.exprs {
                    collect_subquery_table_refs_in_expr(expr, out);
                }
                if let Some(having) = &group_by.having {
                    collect_subquery_table_refs_in_expr(having, out);
                }
            }
            collect_subquery_table_refs_in_window_clause(window_clause, out);
            if let ast::OneSelect::Select {
                from: Some(from), ..
            } = one
            {
                for join in &from.joins {
                    if let Some(ast::JoinConstraint::On(expr)) = &join.constraint {
                        collect_subquery_table_refs_in_expr(expr, out);
                    }
                }
            }
        }
        ast::OneSelect::Values(rows) => {
            for row in rows {
                for expr in row {
                    collect_subquery_table_refs_in_expr(expr, out);
                }
            }
        }
    }
}

pub fn collect_subquery_table_refs_in_window_clause(
    window_clause: &[ast::WindowDef],
    out: &mut Vec<String>,
) {
    for window_def in window_clause {
        for expr in &window_def.window.partition_by {
            collect_subquery_table_refs_in_expr(expr, out);
        }
        for sorted in &window_def.window.order_by {
            collect_subquery_table_refs_in_expr(&sorted.expr, out);
        }
    }
}

pub fn collect_subquery_table_refs_in_expr(expr: &Expr, out: &mut Vec<String>) {
    let _ = walk_expr(expr, &mut |node: &Expr| -> Result<WalkControl> {
        match node {
            Expr::Exists(select) | Expr::Subquery(select) => {
                collect_from_clause_table_refs(select, out);
                Ok(WalkControl::SkipChildren)
            }
            Expr::InSelect { rhs, .. } => {
                collect_from_clause_table_refs(rhs, out);
                Ok(WalkControl::SkipChildren)
            }
            _ => Ok(WalkControl::Continue),
        }
    });
}

/// Valid ways to refer to the rowid of a btree table.
pub const ROWID_STRS: [&str; 3] = ["rowid", "_rowid_", "oid"];

/// This function walks the expression tree and identifies aggregate
/// and window functions.
///
/// # Window functions
/// - If `windows` is `Some`, window functions will be resolved against the
///   provided set of windows or added to it if not present.
/// - If `windows` is `None`, any encountered window function is treated
///   as a misuse and results in a parse error.
///
/// # Aggregates
/// Aggregate functions are always allowed. They are collected in `aggs`.
///
/// # Returns
/// - `Ok(true)` if at least one aggregate function was found.
/// - `Ok(false)` if no aggregates were found.
/// - `Err(..)` if an invalid function usage is detected (e.g., window
///   function encountered while `windows` is `None`).
pub fn resolve_window_and_aggregate_functions(
    top_level_expr: &Expr,
    resolver: &Resolver,
    aggs: &mut Vec<Aggregate>,
    mut windows: Option<&mut Vec<Window>>,
    named_windows: &mut [crate::translate::plan::NamedWindowDef],
) -> Result<bool> {
    let mut contains_aggregates = false;
    walk_expr(top_level_expr, &mut |expr: &Expr| -> Result<WalkControl> {
        match expr {
            Expr::FunctionCall {
                name,
                args,
                distinctness,
                filter_over,
                order_by,
                within_group,
            } => {
                let ordered_set_func = ordered_set_agg_func(&normalize_ident(name.as_str()));

                if !within_group.is_empty() {
                    let new_agg = build_ordered_set_aggregate(
                        name,
                        args,
                        distinctness.as_ref(),
                        order_by,
                        within_group,
                        filter_over,
                        ordered_set_func,
                    )?;
                    add_aggregate_if_not_exists(
                        aggs,
                        expr,
                        &new_agg.args,
                        Distinctness::NonDistinct,
                        new_agg.func,
                        filter_over.filter_clause.as_deref().cloned(),
                    )?;
                    contains_aggregates = true;
                    return Ok(WalkControl::SkipChildren);
                }

                // Ordered-set aggregates are only meaningful with WITHIN GROUP. mode() in
                // particular has no plain-aggregate form, so reject it early with a clear error.
                if matches!(ordered_set_func, Some(AggFunc::Mode)) {
                    crate::bail_parse_error!(
                        "mode() requires a WITHIN GROUP (ORDER BY ...) clause"
                    );
                }

                if !order_by.is_empty() && filter_over.over_clause.is_some() {
                    crate::bail_parse_error!(
                        "ORDER BY may not be used with non-aggregate {}()",
                        name.as_str()
                    );
                }
                let args_count = args.len();
                let distinctness = Distinctness::from_ast(distinctness.as_ref());

                match Func::resolve_function(name.as_str(), args_count)? {
                    Some(Func::Agg(f)) => {
                        if let Some(over_clause) = filter_over.over_clause.as_ref() {
                            link_with_window(
                                windows.as_deref_mut(),
                                named_windows,
                                resolver,
                                expr,
                                AccumulatorFunc::Agg(f),
                                over_clause,
                                filter_over.filter_clause.as_deref(),
                                distinctness,
                            )?;
                        } else {
                            add_aggregate_if_not_exists(
                                aggs,
                                expr,
                                args,
                                distinctness,
                                f,
                                filter_over.filter_clause.as_deref().cloned(),
                            )?;
                            contains_aggregates = true;
                        }
                        return Ok(WalkControl::SkipChildren);
                    }
                    Some(Func::Window(f)) => {
                        if let Some(over_clause) = filter_over.over_clause.as_ref() {
                            link_with_window(
                                windows.as_deref_mut(),
                                named_windows,
                                resolver,
                                expr,
                                AccumulatorFunc::Window(f),
                                over_clause,
                                filter_over.filter_clause.as_deref(),
                                distinctness,
                            )?;
                        } else {
                            crate::bail_parse_error!("misuse of window function {}()", f);
                        }
                        return Ok(WalkControl::SkipChildren);
                    }
                    None => {
                        if let Some(f) = resolver
                            .catalog
                            .symbol_table
                            .resolve_function(name.as_str(), args_count)
                        {
                            let func = AggFunc::External(f.func.clone().into());
                            if f.func.is_aggregate() {
                                if let Some(over_clause) = filter_over.over_clause.as_ref() {
                                    link_with_window(
                                        windows.as_deref_mut(),
                                        named_windows,
                                        resolver,
                                        expr,
                                        AccumulatorFunc::Agg(func),
                                        over_clause,
                                        filter_over.filter_clause.as_deref(),
                                        distinctness,
                                    )?;
                                } else {
                                    add_aggregate_if_not_exists(
                                        aggs,
                                        expr,
                                        args,
                                        distinctness,
                                        func,
                                        filter_over.filter_clause.as_deref().cloned(),
                                    )?;
                                    contains_aggregates = true;
                                }
                                return Ok(WalkControl::SkipChildren);
                            }
                        }
                    }
                    _ => {}
                }
                if !order_by.is_empty() {
                    crate::bail_parse_error!(
                        "ORDER BY may not be used with non-aggregate {}()",
                        name.as_str()
                    );
                }
            }
            Expr::FunctionCallStar { name, filter_over } => {
                match Func::resolve_function(name.as_str(), 0)? {
                    Some(Func::Agg(f)) => {
                        if let Some(over_clause) = filter_over.over_clause.as_ref() {
                            link_with_window(
                                windows.as_deref_mut(),
                                named_windows,
                                resolver,
                                expr,
                                AccumulatorFunc::Agg(f),
                                over_clause,
                                filter_over.filter_clause.as_deref(),
                                Distinctness::NonDistinct,
                            )?;
                        } else {
                            add_aggregate_if_not_exists(
                                aggs,
                                expr,
                                &[],
                                Distinctness::NonDistinct,
                                f,
                                filter_over.filter_clause.as_deref().cloned(),
                            )?;
                            contains_aggregates = true;
                        }
                        return Ok(WalkControl::SkipChildren);
                    }
                    Some(Func::Window(f)) => {
                        if let Some(over_clause) = filter_over.over_clause.as_ref() {
                            link_with_window(
                                windows.as_deref_mut(),
                                named_windows,
                                resolver,
                                expr,
                                AccumulatorFunc::Window(f),
                                over_clause,
                                filter_over.filter_clause.as_deref(),
                                Distinctness::NonDistinct,
                            )?;
                        } else {
                            crate::bail_parse_error!("misuse of window function {}()", f);
                        }
                        return Ok(WalkControl::SkipChildren);
                    }
                    Some(func) => {
                        // Check if the function supports (*) syntax using centralized logic
                        if func.supports_star_syntax() {
                            return Ok(WalkControl::Continue);
                        } else {
                            crate::bail_parse_error!(
                                "wrong number of arguments to function {}()",
                                name.as_str()
                            );
                        }
                    }
                    None => {
                        if let Some(f) = resolver
                            .catalog
                            .symbol_table
                            .resolve_function(name.as_str(), 0)
                        {
                            let func = AggFunc::External(f.func.clone().into());
                            if f.func.is_aggregate() {
                                if let Some(over_clause) = filter_over.over_clause.as_ref() {
                                    link_with_window(
                                        windows.as_deref_mut(),
                                        named_windows,
                                        resolver,
                                        expr,
                                        AccumulatorFunc::Agg(func),
                                        over_clause,
                                        filter_over.filter_clause.as_deref(),
                                        Distinctness::NonDistinct,
                                    )?;
                                } else {
                                    add_aggregate_if_not_exists(
                                        aggs,
                                        expr,
                                        &[],
                                        Distinctness::NonDistinct,
                                        func,
                                        filter_over.filter_clause.as_deref().cloned(),
                                    )?;
                                    contains_aggregates = true;
                                }
                                return Ok(WalkControl::SkipChildren);
                            }
                        } else {
                            crate::bail_parse_error!("no such function: {}", name.as_str());
                        }
                    }
                }
            }
            _ => {}
        }

        Ok(WalkControl::Continue)
    })?;

    Ok(contains_aggregates)
}

#[allow(clippy::too_many_arguments)]
fn link_with_window(
    windows: Option<&mut Vec<Window>>,
    named_windows: &mut [crate::translate::plan::NamedWindowDef],
    resolver: &Resolver,
    expr: &Expr,
    func: AccumulatorFunc,
    over_clause: &Over,
    filter_clause: Option<&Expr>,
    distinctness: Distinctness,
) -> Result<()> {
    if distinctness.is_distinct() {
        crate::bail_parse_error!("DISTINCT is not supported for window functions");
    }
    if let AccumulatorFunc::Agg(AggFunc::External(_)) = &func {
        let name = match expr {
            Expr::FunctionCall { name, .. } | Expr::FunctionCallStar { name, .. } => name.as_str(),
            _ => "extension aggregate",
        };
        crate::bail_parse_error!(
            "{name}() is an extension aggregate and cannot be used as a window function"
        );
    }
    // FILTER decides which input rows contribute to a running aggregate, so
    // it is only meaningful for aggregating window functions. Non-aggregate
    // ones (`row_number`/`lag`/`lead`) have nothing to filter.
    if matches!(func, AccumulatorFunc::Window(_)) && filter_clause.is_some() {
        crate::bail_parse_error!("FILTER clause may only be used with aggregate window functions");
    }
    expr_vector_size(expr)?;
    if let Some(windows) = windows {
        // An inline `OVER (base ...)` chains to a named window from the
        // SELECT's WINDOW clause (sqlite3WindowUpdate, window.c:676). Any
        // named window is a candidate here, and a missing base is an error
        // — unlike WINDOW-clause chaining, which only sees earlier defs.
        let over_effective: std::borrow::Cow<'_, ast::Over> = match over_clause {
            ast::Over::Window(window) if window.base.is_some() => std::borrow::Cow::Owned(
                ast::Over::Window(chain_inline_window_base(window, named_windows, windows)?),
            ),
            _ => std::borrow::Cow::Borrowed(over_clause),
        };
        let over_clause: &ast::Over = &over_effective;
        // Pick each function's effective frame (sqlite3WindowUpdate,
        // window.c:687-725):
        // - Built-ins with a coerced frame (rank, row_number, ...) ignore
        //   the user clause entirely — including its validation, so a
        //   user EXCLUDE or unsupported shape is dropped, not rejected.
        // - Everything else honors the user clause, defaulting to
        //   RANGE UNBOUNDED PRECEDING TO CURRENT ROW.
        // Functions whose effective frames differ can't share one buffer
        // pass (window.c:1679), so they land in separate `Window` entries.
        let has_coerced_frame = matches!(
            &func,
            AccumulatorFunc::Window(w) if w.coerced_frame().is_some()
        );
        let user_frame = if has_coerced_frame {
            None
        } else {
            match over_clause {
                ast::Over::Window(window) => crate::translate::plan::validate_frame_clause(
                    &window.frame_clause,
                    window.order_by.len(),
                )?,
                ast::Over::Name(name) => {
                    // Named windows store their FRAME clause on the
                    // `NamedWindowDef`. Look it up and validate the
                    // clause as this function's user_frame.
                    let window_name = normalize_ident(name.as_str());
                    let def = named_windows
                        .iter()
                        .rfind(|d| d.name == window_name)
                        .ok_or_else(|| {
                            crate::LimboError::ParseError(format!("no such window: {window_name}"))
                        })?;
                    // `bound` may already be `None` (taken on an earlier
                    // attachment), but the def's order_by length we
                    // need for validation lives on `bound`. After take
                    // we know a sister resolved Window exists with the
                    // same order_by length.
                    let order_by_len = match def.bound.as_ref() {
                        Some(b) => b.order_by.len(),
                        None => windows
                            .iter()
                            .rfind(|w| w.name.as_ref() == Some(&window_name))
                            .expect("sister Window exists after def bound was taken")
                            .order_by
                            .len(),
                    };
                    crate::translate::plan::validate_frame_clause(
                        &def.user_frame_clause,
                        order_by_len,
                    )?
                }
            }
        };
        let effective_frame = resolve_effective_frame(&func, user_frame)?;
        let window = resolve_window(windows, named_windows, over_clause, effective_frame)?;
        // Two equivalent window expressions can share one `WindowFunction`
        // entry unless they contain nondeterministic calls like `random()`,
        // which SQLite evaluates separately at each SQL occurrence.
        let deduplicate = !expr_contains_nondeterministic_scalar_function(expr, resolver)?;
        if deduplicate
            && window
                .functions
                .iter()
                .any(|f| exprs_are_equivalent(&f.original_expr, expr))
        {
            return Ok(());
        }
        window.functions.push(WindowFunction {
            func,
            original_expr: expr.clone(),
            rewritten: None,
        });
    } else {
        let func_name = match &func {
            AccumulatorFunc::Agg(f) => f.as_str().to_string(),
            AccumulatorFunc::Window(f) => f.to_string(),
        };
        crate::bail_parse_error!("misuse of window function {}()", func_name);
    }
    Ok(())
}

/// Decide the frame a function actually runs with, given any user-written
/// FRAME clause. Mirrors SQLite's `sqlite3WindowUpdate` policy at
/// `window.c:687-725`: the eight listed built-ins (row_number, rank,
/// dense_rank, percent_rank, cume_dist, ntile, lead, lag) ignore the
/// user clause and run with their coerced frame; aggregates and
/// first_value / last_value / nth_value honor whatever the user wrote
/// and default to RANGE UNBOUNDED PRECEDING TO CURRENT ROW.
fn resolve_effective_frame(
    func: &AccumulatorFunc,
    user_frame: Option<crate::translate::plan::Frame>,
) -> Result<crate::translate::plan::Frame> {
    use crate::translate::plan::Frame;
    use turso_parser::ast::{FrameBound, FrameMode};

    // Built-ins with a coerced frame ignore the user clause entirely
    // (`Some(_)` from `coerced_frame()`). The rest honor it.
    if let AccumulatorFunc::Window(w) = func {
        if let Some(coerced) = w.coerced_frame() {
            return Ok(coerced);
        }
    }

    let Some(frame) = user_frame else {
        return Ok(Frame {
            mode: FrameMode::Range,
            start: FrameBound::UnboundedPreceding,
            end: FrameBound::CurrentRow,
            exclude: None,
        });
    };
    // min/max use SQLite's per-function sorted-index strategy.
    // group_concat and json_group_* maintain removable-prefix state in
    // their aggregate payloads, matching their SQLite xInverse behavior.
    // first_value / nth_value don't need xInverse — they're WINDOWFUNCNOOP
    // (window.c:591) and read positionally from csr_app at output time, so
    // any frame shape works as long as the frame-index counters are
    // tracked. last_value's inverse is the frame-row count decrement
    // (window.c:505-522).
    let supports_sliding = matches!(
        func,
        AccumulatorFunc::Agg(
            AggFunc::Sum
                | AggFunc::Total
                | AggFunc::Count
                | AggFunc::Count0
                | AggFunc::Avg
                | AggFunc::Min
                | AggFunc::Max
                | AggFunc::GroupConcat
                | AggFunc::StringAgg,
        ) | AccumulatorFunc::Window(
            WindowFunc::FirstValue | WindowFunc::NthValue | WindowFunc::LastValue
        )
    );
    #[cfg(feature = "json")]
    let supports_sliding = supports_sliding
        || matches!(
            func,
            AccumulatorFunc::Agg(
                AggFunc::JsonGroupObject
                    | AggFunc::JsonbGroupObject
                    | AggFunc::JsonGroupArray
                    | AggFunc::JsonbGroupArray
            )
        );
    // Anything but an UNBOUNDED PRECEDING start makes the frame shrink
    // from the left, firing xInverse.
    let moving_start = !matches!(frame.start, FrameBound::UnboundedPreceding);
    if moving_start && frame.exclude.is_none() && !supports_sliding {
        crate::bail_parse_error!(
            "{}() does not yet support window frames with a moving start; \
             use a frame with UNBOUNDED PRECEDING start",
            func.as_str()
        );
    }
    Ok(frame)
}

/// Resolve the `Window` a function call should be attached to, given the
/// function's coerced frame. Two functions can share a `Window` only when
/// their OVER clauses are equivalent AND their coerced frames match —
/// functions with the same OVER but conflicting frames get separate
/// `Window` entries so each compiles to its own ephemeral-table pass.
/// Merge an inline `OVER (base ...)` window spec with its named base
/// window (sqlite3WindowChain, window.c:1276). The spec may not:
/// - have its own PARTITION BY,
/// - add ORDER BY when the base already has one,
/// - chain to a base that carries an explicit frame.
///
/// The result inherits the base's PARTITION BY (and its ORDER BY when the
/// spec has none), keeps its own frame clause, and drops the base ref.
fn chain_inline_window_base(
    window: &ast::Window,
    named_windows: &[crate::translate::plan::NamedWindowDef],
    windows: &[Window],
) -> Result<ast::Window> {
    let base = window.base.as_ref().expect("caller checked base.is_some()");
    let base_name = normalize_ident(base.as_str());
    let Some(base_def) = named_windows.iter().rfind(|d| d.name == base_name) else {
        crate::bail_parse_error!("no such window: {}", base_name);
    };
    if !window.partition_by.is_empty() {
        crate::bail_parse_error!("cannot override PARTITION clause of window: {}", base_name);
    }
    // The base's bound clauses move into the first `Window` attached under
    // its name, so read them from wherever they currently live.
    let (base_partition, base_order) = match base_def.bound.as_ref() {
        Some(bound) => (bound.partition_by.clone(), bound.order_by.clone()),
        None => {
            let sister = windows
                .iter()
                .rfind(|w| w.name.as_deref() == Some(base_name.as_str()))
                .expect("sister Window must exist after the named def's bound was taken");
            (sister.partition_by.clone(), sister.order_by.clone())
        }
    };
    if !base_order.is_empty() && !window.order_by.is_empty() {
        crate::bail_parse_error!("cannot override ORDER BY clause of window: {}", base_name);
    }
    if base_def.user_frame_clause.is_some() {
        crate::bail_parse_error!(
            "cannot override frame specification of window: {}",
            base_name
        );
    }
    let mut merged = window.clone();
    merged.base = None;
    merged.partition_by = base_partition.into_iter().map(Box::new).collect();
    if merged.order_by.is_empty() {
        merged.order_by = base_order
            .into_iter()
            .map(|(expr, order, nulls)| ast::SortedColumn {
                expr: Box::new(expr),
                order: Some(order),
                nulls,
            })
            .collect();
    }
    Ok(merged)
}

fn resolve_window<'a>(
    windows: &'a mut Vec<Window>,
    named_windows: &mut [crate::translate::plan::NamedWindowDef],
    over_clause: &Over,
    frame: crate::translate::plan::Frame,
) -> Result<&'a mut Window> {
    match over_clause {
        Over::Window(window) => {
            if let Some(idx) = windows.iter().position(|w| w.is_equivalent(window, &frame)) {
                return Ok(&mut windows[idx]);
            }
            windows.push(Window::new_unnamed(window, frame)?);
            Ok(windows.last_mut().expect("just pushed, so must exist"))
        }
        Over::Name(name) => {
            let window_name = normalize_ident(name.as_str());
            // Reuse an existing resolved entry with the same name AND
            // frame so functions sharing one coerced frame fold into one
            // ephemeral-table pass. SQLite uses the most recent
            // definition when names collide, so iterate in reverse.
            if let Some(idx) = windows
                .iter()
                .rposition(|w| w.name.as_ref() == Some(&window_name) && w.frame == frame)
            {
                return Ok(&mut windows[idx]);
            }
            // Need a new resolved entry. Verify the name exists.
            let def = named_windows
                .iter_mut()
                .rfind(|d| d.name == window_name)
                .ok_or_else(|| {
                    crate::LimboError::ParseError(format!("no such window: {window_name}"))
                })?;
            // First attachment under this name takes ownership of the
            // bound exprs. Subsequent distinct-frame
            // attachments deep-clone from a sister resolved Window —
            // the first attachment guarantees one exists.
            let bound = match def.bound.take() {
                Some(bound) => bound,
                None => {
                    let sister = windows
                        .iter()
                        .rfind(|w| w.name.as_ref() == Some(&window_name))
                        .expect("sister Window must exist after the named def was taken");
                    NamedWindowBound {
                        partition_by: sister.partition_by.clone(),
                        order_by: sister.order_by.clone(),
                    }
                }
            };
            windows.push(Window::from_named_bound(window_name, bound, frame));
            Ok(windows.last_mut().expect("just pushed, so must exist"))
        }
    }
}

fn add_aggregate_if_not_exists(
    aggs: &mut Vec<Aggregate>,
    expr: &Expr,
    args: &[Box<Expr>],
    distinctness: Distinctness,
    func: AggFunc,
    filter_expr: Option<ast::Expr>,
) -> Result<()> {
    if distinctness.is_distinct() && args.len() != 1 {
        crate::bail_parse_error!("DISTINCT aggregate functions must have exactly one argument");
    }
    if aggs
        .iter()
        .all(|a| !exprs_are_equivalent(&a.original_expr, expr))
    {
        aggs.push(Aggregate::new(func, args, expr, distinctness, filter_expr));
    }
    Ok(())
}

/// Maps a normalized function name to the ordered-set [`AggFunc`] it implements, if any.
/// Ordered-set aggregates are written `f(direct_args) WITHIN GROUP (ORDER BY x)`.
fn ordered_set_agg_func(normalized_name: &str) -> Option<AggFunc> {
    match normalized_name {
        "mode" => Some(AggFunc::Mode),
        "percentile_cont" => Some(AggFunc::PercentileCont),
        "percentile_disc" => Some(AggFunc::PercentileDisc),
        _ => None,
    }
}

struct OrderedSetAggregate {
    func: AggFunc,
    // Matches `add_aggregate_if_not_exists`, which consumes `&[Box<Expr>]`.
    #[allow(clippy::vec_box)]
    args: Vec<Box<Expr>>,
}

/// Validates a `WITHIN GROUP (ORDER BY ...)` ordered-set aggregate and rewrites it into a
/// uniform argument list for the rest of the pipeline: `[value]` for `mode`, or
/// `[value, fraction]` for the percentile functions. `value` is the single ORDER BY
/// expression; `fraction` is the direct argument.
fn build_ordered_set_aggregate(
    name: &ast::Name,
    args: &[Box<Expr>],
    distinctness: Option<&ast::Distinctness>,
    order_by: &[ast::SortedColumn],
    within_group: &[ast::SortedColumn],
    filter_over: &ast::FunctionTail,
    ordered_set_func: Option<AggFunc>,
) -> Result<OrderedSetAggregate> {
    let Some(func) = ordered_set_func else {
        crate::bail_parse_error!(
            "WITHIN GROUP is not supported for function {}()",
            name.as_str()
        );
    };
    if filter_over.over_clause.is_some() {
        crate::bail_parse_error!(
            "ordered-set aggregate {}() may not be used as a window function",
            name.as_str()
        );
    }
    if distinctness.is_some() {
        crate::bail_parse_error!(
            "DISTINCT is not supported for ordered-set aggregate {}()",
            name.as_str()
        );
    }
    if !order_by.is_empty() {
        crate::bail_parse_error!(
            "{}() does not accept an argument ORDER BY together with WITHIN GROUP",
            name.as_str()
        );
    }
    if within_group.len() != 1 {
        crate::bail_parse_error!(
            "WITHIN GROUP for {}() must specify exactly one ORDER BY expression",
            name.as_str()
        );
    }
    let sort_col = &within_group[0];
    if matches!(sort_col.order, Some(ast::SortOrder::Desc)) || sort_col.nulls.is_some() {
        crate::bail_parse_error!(
            "DESC and NULLS ordering inside WITHIN GROUP are not supported yet"
        );
    }
    let expected_direct_args = match func {
        AggFunc::Mode => 0,
        _ => 1, // percentile_cont / percentile_disc take the fraction
    };
    if args.len() != expected_direct_args {
        crate::bail_parse_error!("wrong number of arguments to function {}()", name.as_str());
    }
    let mut new_args: Vec<Box<Expr>> = Vec::with_capacity(args.len() + 1);
    new_args.push(sort_col.expr.clone());
    new_args.extend(args.iter().cloned());
    Ok(OrderedSetAggregate {
        func,
        args: new_args,
    })
}

/// Plans one use of a CTE.
///
/// Each use gets separate table and cursor IDs unless it shares materialized rows.
#[allow(clippy::too_many_arguments)]
fn plan_cte(
    cte_definition_index: usize,
    cte_definitions: &[CteDefinition],
    base_outer_query_refs: &[OuterQueryReference],
    resolver: &Resolver,
    program: &mut ProgramBuilder,
    connection: &Arc<crate::Connection>,
    validate_explicit_column_count: bool,
) -> Result<JoinedTable> {
    let cte_definition = &cte_definitions[cte_definition_index];
    if program.is_cte_being_defined(&cte_definition.name) {
        crate::bail_parse_error!("circular reference: {}", cte_definition.name);
    }

    // Plan only the other CTEs this definition names. Planning every preceding
    // CTE here would repeatedly plan the same transitive dependencies.
    program.push_cte_being_defined(cte_definition.name.clone());
    let outer_query_refs: Result<Vec<OuterQueryReference>> = (|| {
        let mut outer_query_refs = base_outer_query_refs.to_vec();
        for &referenced_cte_index in &cte_definition.referenced_cte_indices {
            let referenced_cte_name = &cte_definitions[referenced_cte_index].name;
            if outer_query_refs
                .iter()
                .any(|reference| &reference.identifier == referenced_cte_name)
            {
                continue;
            }
            let referenced_cte_table = plan_cte(
                referenced_cte_index,
                cte_definitions,
                base_outer_query_refs,
                resolver,
                program,
                connection,
                false,
            )?;
            outer_query_refs.push(OuterQueryReference {
                identifier: referenced_cte_table.identifier.clone(),
                has_alias: referenced_cte_table.has_alias,
                internal_id: referenced_cte_table.internal_id,
                table: referenced_cte_table.table.clone(),
                namespace: referenced_cte_table.namespace,
                join_info: None,
                col_used_mask: ColumnUsedMask::default(),
                cte_select: None,
                cte_explicit_columns: vec![],
                cte_id: Some(cte_definitions[referenced_cte_index].cte_id),
                // This entry only lets the body's FROM clause find the sibling
                // CTE by name; its columns become visible when a FROM clause
                // actually adds the table.
                cte_definition_only: true,
                rowid_referenced: false,
                outer_join_may_null_extend: false,
                scope_depth: 0,
            });
        }
        Ok(outer_query_refs)
    })();
    program.pop_cte_being_defined();
    let outer_query_refs = outer_query_refs?;

    let cte_query_plan = if cte_definition.references_itself {
        prepare_recursive_cte_plan(
            cte_definition,
            resolver,
            program,
            &outer_query_refs,
            connection,
        )?
    } else {
        // A non-recursive CTE cannot read a table or view with the same name.
        // Keep that name hidden while planning so the lookup reports a circular reference.
        program.push_cte_being_defined(cte_definition.name.clone());
        let plan = prepare_select_plan(
            cte_definition.select.clone(),
            resolver,
            program,
            &outer_query_refs,
            QueryDestination::placeholder_for_subquery(),
            connection,
        );
        program.pop_cte_being_defined();
        plan?
    };

    let explicit_columns = if cte_definition.explicit_columns.is_empty() {
        None
    } else {
        Some(cte_definition.explicit_columns.as_slice())
    };

    // SQLite defers explicit column-count validation until the CTE is actually
    // referenced, so preplanned visibility-only copies must not raise here.
    if validate_explicit_column_count {
        if let Some(columns) = explicit_columns {
            let result_column_count = cte_query_plan.select_result_columns().len();
            if columns.len() != result_column_count {
                crate::bail_parse_error!(
                    "table {} has {} columns but {} column names were provided",
                    cte_definition.name,
                    result_column_count,
                    columns.len()
                );
            }
        }
    }

    match cte_query_plan {
        Plan::Select(_) | Plan::CompoundSelect { .. } | Plan::RecursiveCte(_) => {
            JoinedTable::new_subquery_from_plan(
                cte_definition.name.clone(),
                cte_query_plan,
                None,
                program.table_reference_counter.next(),
                explicit_columns,
                Some(cte_definition.cte_id),
                cte_definition.materialize_hint,
                resolver,
            )
        }
        Plan::Delete(_) | Plan::Update(_) => {
            crate::bail_parse_error!("DELETE/UPDATE queries are not supported in CTEs")
        }
    }
}

fn prepare_recursive_cte_plan(
    cte_definition: &CteDefinition,
    resolver: &Resolver,
    program: &mut ProgramBuilder,
    outer_query_refs: &[OuterQueryReference],
    connection: &Arc<crate::Connection>,
) -> Result<Plan> {
    let select = &cte_definition.select;
    let mut first_recursive_query_index = None;
    let ref_counter = RecursiveRefCounter {
        cte_name: &cte_definition.name,
    };
    // Nested CTEs defined at the body level are visible in every arm; bring
    // them into scope so shadowing and use-through-nested-CTE references are
    // counted the way name resolution will see them.
    let mut ref_scope = RecursiveRefScope::new();
    ref_counter.push_nested_ctes(select.with.as_ref(), &mut ref_scope);
    for (query_index, query) in std::iter::once(&select.body.select)
        .chain(
            select
                .body
                .compounds
                .iter()
                .map(|compound| &compound.select),
        )
        .enumerate()
    {
        let (top_level_from_count, total_count) = ref_counter.count_arm(query, &mut ref_scope);
        if first_recursive_query_index.is_none() && total_count == 0 {
            continue;
        }
        if query_index == 0 {
            crate::bail_parse_error!("circular reference: {}", cte_definition.name);
        }
        first_recursive_query_index.get_or_insert(query_index);
        if top_level_from_count == 0 {
            crate::bail_parse_error!("circular reference: {}", cte_definition.name);
        }
        if top_level_from_count > 1 {
            crate::bail_parse_error!(
                "multiple references to recursive table: {}",
                cte_definition.name
            );
        }
        if total_count > top_level_from_count {
            crate::bail_parse_error!("multiple recursive references: {}", cte_definition.name);
        }
    }
    let Some(first_recursive_query_index) = first_recursive_query_index else {
        return Err(crate::LimboError::InternalError(format!(
            "recursive CTE {} has no recursive query",
            cte_definition.name
        )));
    };

    let recursive_compound_operator =
        select.body.compounds[first_recursive_query_index - 1].operator;
    let union_all = match recursive_compound_operator {
        ast::CompoundOperator::UnionAll => true,
        ast::CompoundOperator::Union => false,
        ast::CompoundOperator::Except | ast::CompoundOperator::Intersect => {
            crate::bail_parse_error!(
                "recursive CTEs must use UNION ALL or UNION between the initial and recursive queries"
            );
        }
    };
    for compound in select
        .body
        .compounds
        .iter()
        .skip(first_recursive_query_index)
    {
        if compound.operator != recursive_compound_operator {
            crate::bail_parse_error!("recursive CTE queries must use the same UNION operator");
        }
    }

    let initial_query = prepare_select_plan_from_arms(
        select.body.select.clone(),
        select.body.compounds[..first_recursive_query_index - 1]
            .iter()
            .cloned(),
        select.with.clone(),
        vec![],
        None,
        resolver,
        program,
        outer_query_refs,
        QueryDestination::placeholder_for_subquery(),
        connection,
    )?;

    let explicit_columns = (!cte_definition.explicit_columns.is_empty())
        .then_some(cte_definition.explicit_columns.as_slice());
    if let Some(columns) = explicit_columns {
        let result_column_count = initial_query.select_result_columns().len();
        if columns.len() != result_column_count {
            crate::bail_parse_error!(
                "table {} has {} values for {} columns",
                cte_definition.name,
                result_column_count,
                columns.len()
            );
        }
    }

    let input_table = JoinedTable::new_recursive_cte_input(
        cte_definition.name.clone(),
        &initial_query,
        program.table_reference_counter.next(),
        explicit_columns,
        resolver,
    )?;
    let input_table_id = input_table.internal_id;

    let mut recursive_query_outer_refs = outer_query_refs.to_vec();
    recursive_query_outer_refs.push(OuterQueryReference {
        identifier: cte_definition.name.clone(),
        has_alias: false,
        internal_id: input_table.internal_id,
        table: input_table.table,
        namespace: input_table.namespace,
        join_info: None,
        col_used_mask: ColumnUsedMask::default(),
        cte_select: None,
        cte_explicit_columns: cte_definition.explicit_columns.clone(),
        cte_id: None,
        cte_definition_only: false,
        rowid_referenced: false,
        outer_join_may_null_extend: false,
        scope_depth: 0,
    });

    let recursive_query = prepare_select_plan_from_arms(
        select.body.compounds[first_recursive_query_index - 1]
            .select
            .clone(),
        select.body.compounds[first_recursive_query_index..]
            .iter()
            .map(|compound| ast::CompoundSelect {
                operator: ast::CompoundOperator::UnionAll,
                select: compound.select.clone(),
            }),
        select.with.clone(),
        vec![],
        None,
        resolver,
        program,
        &recursive_query_outer_refs,
        QueryDestination::placeholder_for_subquery(),
        connection,
    )?;

    if initial_query.select_result_columns().len() != recursive_query.select_result_columns().len()
    {
        crate::bail_parse_error!(
            "SELECTs to the left and right of {} do not have the same number of result columns",
            recursive_compound_operator
        );
    }
    reject_aggregates_and_windows_in_recursive_query(&recursive_query)?;

    let queue_order = super::select::resolve_recursive_cte_queue_order(
        &select.order_by,
        &initial_query,
        &recursive_query,
        resolver,
    )?;
    let (limit, offset) = select
        .limit
        .clone()
        .map_or(Ok((None, None)), |limit| parse_limit(limit, resolver))?;

    Ok(Plan::RecursiveCte(Box::new(
        super::plan::RecursiveCtePlan {
            name: cte_definition.name.clone(),
            initial_query: Box::new(initial_query),
            recursive_query: Box::new(recursive_query),
            input_table_id,
            union_all,
            limit,
            offset,
            queue_order,
            query_destination: QueryDestination::placeholder_for_subquery(),
        },
    )))
}

fn reject_aggregates_and_windows_in_recursive_query(query: &Plan) -> Result<()> {
    match query {
        Plan::Select(select) => {
            if !select.aggregates.is_empty() || select.group_by.is_some() {
                crate::bail_parse_error!("recursive aggregate queries not supported");
            }
            if select.window.is_some() {
                crate::bail_parse_error!("cannot use window functions in recursive queries");
            }
        }
        Plan::CompoundSelect {
            left, right_most, ..
        } => {
            if left
                .iter()
                .any(|(select, _)| !select.aggregates.is_empty() || select.group_by.is_some())
                || !right_most.aggregates.is_empty()
                || right_most.group_by.is_some()
            {
                crate::bail_parse_error!("recursive aggregate queries not supported");
            }
            if left.iter().any(|(select, _)| select.window.is_some()) || right_most.window.is_some()
            {
                crate::bail_parse_error!("cannot use window functions in recursive queries");
            }
        }
        Plan::RecursiveCte(_) | Plan::Delete(_) | Plan::Update(_) => {
            return Err(crate::LimboError::InternalError(
                "recursive CTE query is not a SELECT".to_string(),
            ));
        }
    }
    Ok(())
}

/// Plan CTEs from a WITH clause and add them as outer query references.
/// This is used by DML statements (DELETE, UPDATE) to make CTEs available
/// for subqueries in WHERE and SET clauses.
#[turso_macros::trace_stack]
pub fn plan_ctes_as_outer_refs(
    with: Option<With>,
    subquery_table_refs: &[String],
    resolver: &Resolver,
    program: &mut ProgramBuilder,
    table_references: &mut TableReferences,
    connection: &Arc<crate::Connection>,
) -> Result<()> {
    let Some(with) = with else {
        return Ok(());
    };

    let cte_definitions = collect_cte_definitions(with, program)?;
    add_ctes_read_by_subqueries_as_outer_refs(
        &cte_definitions,
        subquery_table_refs,
        resolver,
        program,
        table_references,
        connection,
    )
}

fn parse_from_clause_table(
    table: ast::SelectTable,
    resolver: &Resolver,
    program: &mut ProgramBuilder,
    table_references: &mut TableReferences,
    vtab_predicates: &mut Vec<Expr>,
    cte_definitions: &[CteDefinition],
    connection: &Arc<crate::Connection>,
) -> Result<()> {
    match table {
        ast::SelectTable::Table(qualified_name, maybe_alias, indexed) => parse_table(
            table_references,
            resolver,
            program,
            cte_definitions,
            vtab_predicates,
            &qualified_name,
            maybe_alias.as_ref(),
            &[],
            indexed,
            connection,
        ),
        ast::SelectTable::Select {
            select: subselect,
            alias: maybe_alias,
            lateral,
        } => {
            let lateral = lateral && !table_references.joined_tables().is_empty();
            let mut outer_query_refs_for_subquery: Vec<OuterQueryReference> = if lateral {
                outer_query_refs_for_correlated_subquery(table_references)?
                    .into_iter()
                    .collect()
            } else {
                table_references.outer_query_refs().to_vec()
            };
            // Make the parent's CTEs visible while planning this inline subquery.
            let base_outer_query_refs_for_subquery = base_outer_refs_for_cte_planning(
                table_references.outer_query_refs(),
                cte_definitions,
            );
            let mut subquery_table_refs = Vec::new();
            collect_from_clause_table_refs(&subselect, &mut subquery_table_refs);
            let ctes_read = ctes_read_by(cte_definitions, &subquery_table_refs);
            for (cte_definition_index, cte_definition) in cte_definitions.iter().enumerate() {
                if !ctes_read[cte_definition_index] {
                    continue;
                }
                let name_used_by_table_on_the_left = outer_query_refs_for_subquery
                    .iter()
                    .any(|reference| reference.identifier == cte_definition.name);
                if name_used_by_table_on_the_left && !lateral {
                    continue;
                }
                // This plan only makes the name visible. A later FROM lookup performs
                // the real CTE use and validates its explicit column list.
                let cte_table = plan_cte(
                    cte_definition_index,
                    cte_definitions,
                    &base_outer_query_refs_for_subquery,
                    resolver,
                    program,
                    connection,
                    false,
                )?;
                outer_query_refs_for_subquery.push(OuterQueryReference {
                    identifier: cte_definition.name.clone(),
                    has_alias: false,
                    internal_id: cte_table.internal_id,
                    namespace: cte_table.namespace,
                    table: cte_table.table,
                    join_info: None,
                    col_used_mask: ColumnUsedMask::default(),
                    cte_select: (!cte_definition.references_itself)
                        .then(|| cte_definition.select.clone()),
                    cte_explicit_columns: cte_definition.explicit_columns.clone(),
                    cte_id: Some(cte_definition.cte_id),
                    cte_definition_only: name_used_by_table_on_the_left,
                    rowid_referenced: false,
                    outer_join_may_null_extend: false,
                    scope_depth: 0,
                });
            }

            let subplan = if lateral {
                prepare_lateral_subquery_plan(
                    subselect,
                    resolver,
                    program,
                    &outer_query_refs_for_subquery,
                    connection,
                )?
            } else {
                prepare_select_plan(
                    subselect,
                    resolver,
                    program,
                    &outer_query_refs_for_subquery,
                    QueryDestination::placeholder_for_subquery(),
                    connection,
                )?
            };
            match &subplan {
                Plan::Select(_) | Plan::CompoundSelect { .. } | Plan::RecursiveCte(_) => {}
                Plan::Delete(_) | Plan::Update(_) => {
                    crate::bail_parse_error!(
                        "DELETE/UPDATE queries are not supported in FROM clause subqueries"
                    );
                }
            }
            let cur_table_index = table_references.joined_tables().len();
            let identifier = maybe_alias
                .as_ref()
                .map(|a| normalize_ident(a.name().as_str()))
                .unwrap_or_else(|| format!("(subquery-{cur_table_index})"));
            let mut joined_table = JoinedTable::new_subquery_from_plan(
                identifier,
                subplan,
                None,
                program.table_reference_counter.next(),
                None,  // No explicit columns for regular subqueries
                None,  // Regular inline subqueries don't have a CTE identity
                false, // No materialize hint for inline subqueries
                resolver,
            )?;
            joined_table.has_alias = maybe_alias.is_some();
            table_references.add_joined_table(joined_table);
            Ok(())
        }
        ast::SelectTable::TableCall(qualified_name, args, maybe_alias) => parse_table(
            table_references,
            resolver,
            program,
            cte_definitions,
            vtab_predicates,
            &qualified_name,
            maybe_alias.as_ref(),
            &args,
            None, // table-valued functions don't support INDEXED BY
            connection,
        ),
        ast::SelectTable::Sub(from_clause, maybe_alias) if from_clause.joins.is_empty() => {
            // SQLite unwraps a one-source group. An outer alias replaces the
            // alias inside the parentheses, including when the outer alias is absent.
            let table = replace_select_table_alias(*from_clause.select, maybe_alias);
            parse_from_clause_table(
                table,
                resolver,
                program,
                table_references,
                vtab_predicates,
                cte_definitions,
                connection,
            )
        }
        ast::SelectTable::Sub(from_clause, maybe_alias) => {
            // SQLite represents a parenthesized join group as a SELECT * subquery.
            // It names an unaliased group "(join-N)" in query plans.
            let alias = maybe_alias.unwrap_or_else(|| {
                ast::As::As(ast::Name::exact(format!(
                    "(join-{})",
                    table_references.joined_tables().len()
                )))
            });
            let join_select = ast::Select {
                with: None,
                body: ast::SelectBody {
                    select: ast::OneSelect::Select {
                        distinctness: None,
                        columns: vec![ast::ResultColumn::Star],
                        from: Some(from_clause),
                        where_clause: None,
                        group_by: None,
                        window_clause: Vec::new(),
                    },
                    compounds: Vec::new(),
                },
                order_by: Vec::new(),
                limit: None,
            };
            parse_from_clause_table(
                ast::SelectTable::Select {
                    select: join_select,
                    alias: Some(alias),
                    lateral: false,
                },
                resolver,
                program,
                table_references,
                vtab_predicates,
                cte_definitions,
                connection,
            )?;
            let table = table_references
                .joined_tables_mut()
                .last_mut()
                .expect("the nested SELECT added one table");
            keep_parenthesized_join_columns(table, resolver)
        }
    }
}

/// Keep the source columns that SQLite stores for a parenthesized join.
///
/// A normal `SELECT *` removes duplicate `USING` columns and all rowids.
/// SQLite keeps those values because an outer query can use qualified names.
fn keep_parenthesized_join_columns(table: &mut JoinedTable, resolver: &Resolver) -> Result<()> {
    let Table::FromClauseSubquery(subquery) = &mut table.table else {
        unreachable!("a parenthesized join must produce a subquery table");
    };
    let subquery = Arc::make_mut(subquery);
    let Plan::Select(plan) = subquery.plan.as_mut() else {
        unreachable!("a parenthesized join must produce one SELECT plan");
    };

    let source_tables = plan.table_references.joined_tables();
    let mut result_columns = Vec::new();
    let mut join_columns = crate::alloc::vec![];
    let mut used_columns = Vec::new();

    for (table_index, source_table) in source_tables.iter().enumerate() {
        let next_using = source_tables
            .get(table_index + 1)
            .and_then(|next| next.join_info.as_ref())
            .map(|join| join.using.as_slice())
            .unwrap_or_default();

        // SQLite stores one canonical value before the source columns on both
        // sides of `USING`. Outer unqualified names find this value first.
        for using_name in next_using {
            let column_name = using_name.as_str();
            let resolved = resolve_unqualified_column(source_tables, column_name)?
                .expect("USING already proved that the column exists");
            used_columns.extend(resolved.source_columns);
            result_columns.push(parenthesized_join_result_column(resolved.expr, column_name));
            join_columns.push(ParenthesizedJoinColumn {
                source: ParenthesizedJoinColumnSource::Using {
                    column_name: column_name.to_string(),
                },
                visibility: ParenthesizedJoinColumnVisibility::Visible,
            });
        }

        let hidden_by_using = |column_name: &str| {
            source_table
                .join_info
                .as_ref()
                .is_some_and(|join| join.merges_column(column_name))
                || next_using
                    .iter()
                    .any(|name| name.as_str().eq_ignore_ascii_case(column_name))
        };

        let database_id = matches!(source_table.table, Table::BTree(_) | Table::Virtual(_))
            .then_some(source_table.namespace.database_id);
        let source_join_columns = source_table.table.parenthesized_join_columns();
        for (column_index, column) in source_table.columns().iter().enumerate() {
            let Some(column_name) = column.name.as_deref() else {
                continue;
            };
            let mut join_column = match source_join_columns {
                // SQLite does not copy rowid entries through a second join group.
                Some(saved) if saved[column_index].source.is_rowid() => continue,
                Some(saved) => saved[column_index].clone(),
                None if column.hidden() => continue,
                None => ParenthesizedJoinColumn {
                    source: ParenthesizedJoinColumnSource::Table {
                        database_id,
                        table_name: alias_or_stored_name(source_table).to_string(),
                        column_name: column_name.to_string(),
                    },
                    visibility: ParenthesizedJoinColumnVisibility::Visible,
                },
            };
            if hidden_by_using(column_name) {
                join_column.visibility = ParenthesizedJoinColumnVisibility::QualifiedOnly;
            }
            result_columns.push(parenthesized_join_result_column(
                Expr::Column {
                    database: None,
                    table: source_table.internal_id,
                    column: column_index,
                    is_rowid_alias: column.is_rowid_alias(),
                },
                column_name,
            ));
            join_columns.push(join_column);
            used_columns.push((source_table.internal_id, column_index));
        }

        let has_rowid = match &source_table.table {
            Table::BTree(btree) => btree.has_rowid,
            Table::Virtual(_) => true,
            Table::FromClauseSubquery(_) | Table::RecursiveCteInput(_) => false,
        };
        if !has_rowid {
            continue;
        }
        // SQLite uses the first rowid alias that is not a declared column.
        if let Some(rowid_name) = ["_ROWID_", "ROWID", "OID"]
            .into_iter()
            .find(|name| source_table.table.get_column_by_name(name).is_none())
        {
            result_columns.push(parenthesized_join_result_column(
                Expr::RowId {
                    database: None,
                    table: source_table.internal_id,
                },
                rowid_name,
            ));
            join_columns.push(ParenthesizedJoinColumn {
                source: ParenthesizedJoinColumnSource::RowId {
                    database_id,
                    table_name: alias_or_stored_name(source_table).to_string(),
                },
                visibility: ParenthesizedJoinColumnVisibility::Visible,
            });
        }
    }

    plan.result_columns = result_columns;
    for (table_id, column_index) in used_columns {
        plan.table_references
            .mark_column_used(table_id, column_index);
    }

    subquery.columns = query_output_columns(&subquery.plan, None, resolver)?;
    assert_eq!(subquery.columns.len(), join_columns.len());
    for column_index in 0..subquery.columns.len() {
        let original_name = subquery.columns[column_index]
            .name
            .clone()
            .expect("each generated join column has an alias");
        let mut column_name = original_name.clone();
        let mut suffix = 0;
        let base_name = original_name
            .rsplit_once(':')
            .filter(|(_, suffix)| suffix.chars().all(|ch| ch.is_ascii_digit()))
            .map_or(original_name.as_str(), |(base, _)| base);
        while let Some(previous_index) =
            subquery.columns[..column_index].iter().position(|column| {
                column
                    .name
                    .as_deref()
                    .is_some_and(|name| name.eq_ignore_ascii_case(&column_name))
            })
        {
            // SQLite omits every later collision from `*`. It also hides a
            // repeated merged value from bare-name lookup. An unrelated source
            // column stays visible to lookup and makes the bare name ambiguous.
            if join_columns[previous_index].source.is_using() {
                let join_column = &mut join_columns[column_index];
                if join_column.source.is_using() {
                    join_column.visibility = ParenthesizedJoinColumnVisibility::QualifiedOnly;
                } else if join_column.visibility != ParenthesizedJoinColumnVisibility::QualifiedOnly
                {
                    join_column.visibility = ParenthesizedJoinColumnVisibility::HiddenFromStar;
                }
            }
            suffix += 1;
            column_name = format!("{base_name}:{suffix}");
        }
        subquery.columns[column_index].name = Some(column_name);
    }
    subquery.parenthesized_join_columns = Some(join_columns);
    Ok(())
}

fn parenthesized_join_result_column(expr: Expr, column_name: &str) -> ResultSetColumn {
    ResultSetColumn {
        expr,
        alias: Some(column_name.to_string()),
        implicit_column_name: None,
        contains_aggregates: false,
    }
}

fn prepare_lateral_subquery_plan(
    select: Select,
    resolver: &Resolver,
    program: &mut ProgramBuilder,
    outer_query_refs: &[OuterQueryReference],
    connection: &Arc<crate::Connection>,
) -> Result<Plan> {
    resolver.begin_collecting_aggregates_from_subqueries();
    let plan = prepare_select_plan(
        select,
        resolver,
        program,
        outer_query_refs,
        QueryDestination::placeholder_for_subquery(),
        connection,
    );
    let aggregates_of_the_enclosing_query = resolver.take_aggregates_from_subqueries();
    let plan = plan?;
    if !aggregates_of_the_enclosing_query.is_empty() {
        crate::bail_parse_error!(
            "aggregate functions are not allowed in FROM clause of their own query level"
        );
    }
    Ok(plan)
}

#[allow(clippy::too_many_arguments)]
fn parse_table(
    table_references: &mut TableReferences,
    resolver: &Resolver,
    program: &mut ProgramBuilder,
    cte_definitions: &[CteDefinition],
    vtab_predicates: &mut Vec<Expr>,
    qualified_name: &QualifiedName,
    maybe_alias: Option<&As>,
    args: &[Box<Expr>],
    indexed: Option<ast::Indexed>,
    connection: &Arc<crate::Connection>,
) -> Result<()> {
    let normalized_qualified_name = normalize_ident(qualified_name.name.as_str());
    let table_name = &qualified_name.name;

    if qualified_name.namespace.is_none() {
        // Each CTE use gets its own table and cursor IDs unless it shares materialized rows.
        if let Some(cte_definition_index) = cte_definitions
            .iter()
            .position(|definition| definition.name == normalized_qualified_name)
        {
            if !args.is_empty() {
                crate::bail_parse_error!("'{}' is not a function", table_name.as_str());
            }
            let planning_outer_query_refs = base_outer_refs_for_cte_planning(
                table_references.outer_query_refs(),
                cte_definitions,
            );
            // Only a real FROM/JOIN use should report an explicit column-count mismatch.
            let mut cte_table = plan_cte(
                cte_definition_index,
                cte_definitions,
                &planning_outer_query_refs,
                resolver,
                program,
                connection,
                true,
            )?;

            // If there's an alias provided, update the identifier to use that alias
            if let Some(a) = maybe_alias {
                cte_table.identifier = normalize_ident(a.name().as_str());
                cte_table.has_alias = true;
            }

            // Mark the pre-planned outer_query_ref as "CTE definition only" so it is
            // still available for CTE lookup in subquery FROM clauses (e.g.
            // EXISTS (SELECT 1 FROM <cte_name> ...)), but no longer participates in
            // column resolution. Column resolution now goes through the joined_table
            // which has the alias (if any) or the original name.
            table_references.mark_outer_query_ref_cte_definition_only(&normalized_qualified_name);

            table_references.add_joined_table(cte_table);
            return Ok(());
        }

        // A non-recursive CTE cannot read its own name, even when a table or view
        // with that name exists.
        if program.is_cte_being_defined(&normalized_qualified_name) {
            crate::bail_parse_error!("circular reference: {}", table_name.as_str());
        }

        // A CTE can read another CTE defined by the surrounding WITH clause.
        if let Some(outer_ref) =
            table_references.find_cte_outer_query_ref_by_identifier(&normalized_qualified_name)
        {
            if !args.is_empty() {
                if matches!(outer_ref.table, Table::RecursiveCteInput(_)) {
                    // SQLite resolves the recursive self-reference as a plain
                    // table with zero table-valued-function parameters.
                    crate::bail_parse_error!(
                        "too many arguments on {}() - max 0",
                        table_name.as_str()
                    );
                }
                crate::bail_parse_error!("'{}' is not a function", table_name.as_str());
            }
            let alias = maybe_alias.map(|a| normalize_ident(a.name().as_str()));
            let cte_select_syntax = outer_ref.cte_select.clone();
            let cte_explicit_columns = outer_ref.cte_explicit_columns.clone();
            let cte_id = outer_ref.cte_id;
            let outer_table = outer_ref.table.clone();
            let materialize_hint = match &outer_table {
                Table::FromClauseSubquery(subquery) => subquery.materialize_hint(),
                _ => false,
            };

            if let Some(cte_select) = cte_select_syntax {
                // Plan each use separately so two uses do not receive the same
                // table or cursor IDs.
                let cte_query_plan = prepare_select_plan(
                    cte_select,
                    resolver,
                    program,
                    table_references.outer_query_refs(),
                    QueryDestination::placeholder_for_subquery(),
                    connection,
                )?;
                let explicit_columns = if cte_explicit_columns.is_empty() {
                    None
                } else {
                    Some(cte_explicit_columns.as_slice())
                };
                // SQLite reports an explicit column-count mismatch only when the CTE is used.
                if let Some(columns) = explicit_columns {
                    let result_column_count = cte_query_plan.select_result_columns().len();
                    if columns.len() != result_column_count {
                        crate::bail_parse_error!(
                            "table {} has {} columns but {} column names were provided",
                            normalized_qualified_name,
                            result_column_count,
                            columns.len()
                        );
                    }
                }
                let mut joined_table = JoinedTable::new_subquery_from_plan(
                    normalized_qualified_name.clone(),
                    cte_query_plan,
                    None,
                    program.table_reference_counter.next(),
                    explicit_columns,
                    cte_id,
                    materialize_hint,
                    resolver,
                )?;
                if let Some(alias) = alias {
                    joined_table.identifier = alias;
                    joined_table.has_alias = true;
                }
                table_references.add_joined_table(joined_table);
            } else {
                // All recursive arms read the same one-row pseudo-cursor.
                let internal_id = if matches!(outer_table, Table::RecursiveCteInput(_)) {
                    outer_ref.internal_id
                } else {
                    program.table_reference_counter.next()
                };
                table_references.add_joined_table(JoinedTable {
                    op: Operation::default_scan_for(&outer_table),
                    unmatched_right_rows_plan: None,
                    table: outer_table,
                    has_alias: alias.is_some(),
                    identifier: alias.unwrap_or(normalized_qualified_name),
                    internal_id,
                    join_info: None,
                    col_used_mask: ColumnUsedMask::default(),
                    column_use_counts: Vec::new(),
                    expression_index_usages: Vec::new(),
                    namespace: NamespaceRef::root_of(crate::MAIN_DB_ID),
                    indexed: None,
                    plan_estimate: None,
                });
            }
            return Ok(());
        }
    }

    // Resolve table using connection's with_schema method
    let namespace = resolver.resolve_queried_table(qualified_name)?;
    let database_id = namespace.database_id;
    let table = resolver.with_schema(database_id, |schema| {
        schema.get_table(namespace.id, table_name.as_str())
    });

    if let Some(table) = table {
        let alias = maybe_alias.map(|a| normalize_ident(a.name().as_str()));
        let internal_id = program.table_reference_counter.next();
        let tbl_ref = if let Table::Virtual(tbl) = table.as_ref() {
            transform_args_into_where_terms(args, internal_id, vtab_predicates, table.as_ref())?;
            Table::Virtual(tbl.clone())
        } else if let Table::BTree(table) = table.as_ref() {
            if !args.is_empty() {
                crate::bail_parse_error!("'{}' is not a function", table_name.as_str());
            }
            Table::BTree(table.clone())
        } else {
            return Err(crate::LimboError::InvalidArgument(
                "Table type not supported".to_string(),
            ));
        };
        table_references.add_joined_table(JoinedTable {
            op: Operation::default_scan_for(&tbl_ref),
            unmatched_right_rows_plan: None,
            table: tbl_ref,
            has_alias: alias.is_some(),
            identifier: alias.unwrap_or(normalized_qualified_name),
            internal_id,
            join_info: None,
            col_used_mask: ColumnUsedMask::default(),
            column_use_counts: Vec::new(),
            expression_index_usages: Vec::new(),
            namespace,
            indexed,
            plan_estimate: None,
        });
        return Ok(());
    };

    let regular_view = resolver.with_schema(database_id, |schema| {
        schema.get_view(namespace.id, table_name.as_str())
    });
    if let Some(view) = regular_view {
        // Views are essentially query aliases, so just Expand the view as a subquery.
        let has_alias = maybe_alias.is_some();
        let view_alias = maybe_alias
            .map(|a| normalize_ident(a.name().as_str()))
            .unwrap_or_else(|| normalize_ident(table_name.as_str()));

        // A persistent view's unqualified table names resolve within the
        // view's own database (`database_id`, where `get_view` found it
        // above), never through a TEMP table that happens to share a source
        // table's name - matching SQLite's view schema fixer (`fix.c`,
        // sqlite3FixSelect/sqlite3FixSrcList): a view's unqualified names are
        // fixed to the database it was created in, not resolved TEMP-first
        // like an ordinary top-level query.
        let view_plan = resolver.with_view_scope(namespace, view.name.clone(), || {
            program.with_view_expansion(database_id, &view.name, |program| {
                prepare_select_plan(
                    view.select_stmt.clone(),
                    resolver,
                    program,
                    table_references.outer_query_refs(),
                    QueryDestination::placeholder_for_subquery(),
                    connection,
                )
            })
        })?;
        let mut joined_table = JoinedTable::new_subquery_from_plan(
            view_alias,
            view_plan,
            None,
            program.table_reference_counter.next(),
            (!view.explicit_columns.is_empty()).then_some(view.explicit_columns.as_slice()),
            None,
            false,
            resolver,
        )?;
        joined_table.has_alias = has_alias;
        table_references.add_joined_table(joined_table);
        return Ok(());
    }

    let view = resolver.with_schema(database_id, |schema| {
        schema.get_materialized_view(namespace.id, table_name.as_str())
    });
    if let Some(view) = view {
        // Every materialized view carries an explicit storage-version marker,
        // including circuits with no stateful operators.
        let has_compatible_storage = resolver.with_schema(database_id, |schema| {
            schema.has_compatible_materialized_view_storage(namespace.id, table_name.as_str())
        });

        if !has_compatible_storage {
            use crate::incremental::view::DBSP_CIRCUIT_VERSION;
            return Err(crate::LimboError::InternalError(format!(
                "Materialized view '{table_name}' has an incompatible version. \n\
                 The current version is {DBSP_CIRCUIT_VERSION}, but the view was created with a different version. \n\
                 Please DROP and recreate the view to use it."
            )));
        }

        // Check if this materialized view has persistent storage
        let view_guard = view.lock();
        let root_page = view_guard.get_root_page();

        if root_page == 0 {
            drop(view_guard);
            return Err(crate::LimboError::InternalError(
                "Materialized view has no storage allocated".to_string(),
            ));
        }

        // This is a materialized view with storage - treat it as a regular BTree table
        // Create a BTreeTable from the view's metadata
        let columns = view_guard.column_schema.flat_columns()?;
        let btree_table = Arc::new(crate::schema::BTreeTable::new(
            root_page,
            view_guard.name().to_string(),
            crate::alloc::vec![],
            columns,
            crate::schema::BTreeCharacteristics::HAS_ROWID,
            crate::alloc::vec![],
            crate::alloc::vec![],
            crate::alloc::vec![],
            None,
        ));
        drop(view_guard);

        let alias = maybe_alias.map(|a| normalize_ident(a.name().as_str()));

        table_references.add_joined_table(JoinedTable {
            op: Operation::Scan(Scan::BTreeTable {
                iter_dir: IterationDirection::Forwards,
                index: None,
            }),
            unmatched_right_rows_plan: None,
            table: Table::BTree(btree_table),
            has_alias: alias.is_some(),
            identifier: alias.unwrap_or(normalized_qualified_name),
            internal_id: program.table_reference_counter.next(),
            join_info: None,
            col_used_mask: ColumnUsedMask::default(),
            column_use_counts: Vec::new(),
            expression_index_usages: Vec::new(),
            namespace,
            indexed: None,
            plan_estimate: None,
        });
        return Ok(());
    }

    // Query-backed CTEs become FROM-clause subqueries.
    // For other types of tables in the outer query references, we do not add them as joined tables,
    // because the query can simply _reference_ them in e.g. the SELECT columns or the WHERE clause,
    // but it's not part of the join order.
    if qualified_name.namespace.is_none() {
        if let Some(outer_ref) =
            table_references.find_cte_outer_query_ref_by_identifier(&normalized_qualified_name)
        {
            if matches!(outer_ref.table, Table::FromClauseSubquery(_)) {
                table_references.add_joined_table(JoinedTable {
                    op: Operation::default_scan_for(&outer_ref.table),
                    unmatched_right_rows_plan: None,
                    table: outer_ref.table.clone(),
                    identifier: outer_ref.identifier.clone(),
                    has_alias: outer_ref.has_alias,
                    internal_id: program.table_reference_counter.next(),
                    join_info: None,
                    col_used_mask: ColumnUsedMask::default(),
                    column_use_counts: Vec::new(),
                    expression_index_usages: Vec::new(),
                    namespace,
                    indexed: None,
                    plan_estimate: None,
                });
                return Ok(());
            }
        }
    }

    // Check if this is an incompatible view
    let is_incompatible = resolver.with_schema(database_id, |schema| {
        schema.is_incompatible_view(namespace.id, &normalized_qualified_name)
    });

    if is_incompatible {
        use crate::incremental::view::DBSP_CIRCUIT_VERSION;
        crate::bail_parse_error!(
            "Materialized view '{}' has an incompatible version. \n\
             The view was created with a different DBSP version than the current version ({}). \n\
             Please DROP and recreate the view to use it.",
            normalized_qualified_name,
            DBSP_CIRCUIT_VERSION
        );
    }

    // A view row whose stored SQL failed to parse at schema load
    let is_broken_view = resolver.with_schema(database_id, |schema| {
        schema.is_broken_view(namespace.id, &normalized_qualified_name)
    });

    if is_broken_view {
        crate::bail_parse_error!(
            "view '{}' could not be loaded: its SQL in sqlite_schema does not parse. \n\
             Use DROP VIEW to remove it, then recreate it.",
            normalized_qualified_name
        );
    }

    crate::bail_parse_error!(
        "no such table: {}",
        crate::util::table_name_for_error(qualified_name)
    );
}

fn transform_args_into_where_terms(
    args: &[Box<Expr>],
    internal_id: TableInternalId,
    predicates: &mut Vec<Expr>,
    table: &Table,
) -> Result<()> {
    let mut args_iter = args.iter();
    let mut hidden_count = 0;
    for (i, col) in table.columns().iter().enumerate() {
        if !col.hidden() {
            continue;
        }
        hidden_count += 1;

        if let Some(arg_expr) = args_iter.next() {
            let column_expr = Expr::Column {
                database: None,
                table: internal_id,
                column: i,
                is_rowid_alias: col.is_rowid_alias(),
            };
            // SQLite always uses equality, including for NULL. Unary plus keeps
            // the hidden column's affinity from changing the argument.
            let expr = Expr::Binary(
                column_expr.into(),
                ast::Operator::Equals,
                Expr::Unary(ast::UnaryOperator::Positive, arg_expr.clone()).into(),
            );
            predicates.push(expr);
        }
    }

    if args_iter.next().is_some() {
        return Err(crate::LimboError::ParseError(format!(
            "Too many arguments for {}: expected at most {}, got {}",
            table.get_name(),
            hidden_count,
            hidden_count + 1 + args_iter.count()
        )));
    }

    Ok(())
}

/// Build a stable outer-scope reference set for CTE planning.
/// Current WITH-scope CTE entries are excluded to avoid cloning/replanning cascades.
fn base_outer_refs_for_cte_planning(
    refs: &[OuterQueryReference],
    cte_definitions: &[CteDefinition],
) -> Vec<OuterQueryReference> {
    refs.iter()
        .filter(|r| !cte_definitions.iter().any(|cte| cte.name == r.identifier))
        .cloned()
        .map(|mut r| {
            if matches!(r.table, Table::FromClauseSubquery(_)) {
                r.cte_select = None;
            }
            r
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
#[turso_macros::trace_stack]
pub fn parse_from(
    from: Option<FromClause>,
    resolver: &Resolver,
    program: &mut ProgramBuilder,
    with: Option<With>,
    table_refs_outside_from: &[String],
    out_where_clause: &mut Vec<WhereTerm>,
    vtab_predicates: &mut Vec<Expr>,
    table_references: &mut TableReferences,
    connection: &Arc<crate::Connection>,
) -> Result<()> {
    let mut cte_definitions = Vec::new();
    let mut shadowed_outer_ctes = Vec::new();

    if let Some(with) = with {
        cte_definitions = collect_cte_definitions(with, program)?;

        // This WITH clause's definitions shadow same-named CTEs from outer
        // scopes that are still being planned, so references to those names
        // here are not circular.
        let shadowing_names = cte_definitions
            .iter()
            .map(|definition| definition.name.clone())
            .collect::<Vec<_>>();
        shadowed_outer_ctes = program.mask_shadowed_ctes_being_defined(&shadowing_names);

        add_ctes_read_by_subqueries_as_outer_refs(
            &cte_definitions,
            table_refs_outside_from,
            resolver,
            program,
            table_references,
            connection,
        )?;
    }

    // Process FROM clause if present
    if let Some(from_owned) = from {
        let mut select_owned = from_owned.select;
        let mut joins_owned = from_owned.joins;
        // SQLite removes an unaliased group when it starts the FROM clause.
        // Keep the inner joins before the joins that follow the group.
        while let ast::SelectTable::Sub(inner, None) = *select_owned {
            select_owned = inner.select;
            joins_owned.splice(0..0, inner.joins);
        }
        // SQLite enables strict USING checks for the whole FROM list.
        // A RIGHT or FULL JOIN can appear after the USING clause that needs the check.
        let has_right_or_full_join = joins_owned
            .iter()
            .any(|join| PlanJoinType::from_join_operator(&join.operator).keeps_right_rows());
        parse_from_clause_table(
            *select_owned,
            resolver,
            program,
            table_references,
            vtab_predicates,
            &cte_definitions,
            connection,
        )?;

        for join in joins_owned.into_iter() {
            parse_join(
                join,
                resolver,
                program,
                &cte_definitions,
                out_where_clause,
                vtab_predicates,
                table_references,
                connection,
                has_right_or_full_join,
            )?;
        }
    }

    program.unmask_shadowed_ctes_being_defined(shadowed_outer_ctes);
    Ok(())
}

/// Plans the CTEs that subqueries read and adds them as outer query references.
/// Like SQLite, a CTE that nothing reads is never planned, so errors in its body
/// are not reported.
fn add_ctes_read_by_subqueries_as_outer_refs(
    cte_definitions: &[CteDefinition],
    subquery_table_refs: &[String],
    resolver: &Resolver,
    program: &mut ProgramBuilder,
    table_references: &mut TableReferences,
    connection: &Arc<crate::Connection>,
) -> Result<()> {
    let base_outer_query_refs =
        base_outer_refs_for_cte_planning(table_references.outer_query_refs(), cte_definitions);
    let ctes_read = ctes_read_by(cte_definitions, subquery_table_refs);
    for (cte_definition_index, cte_definition) in cte_definitions.iter().enumerate() {
        if !ctes_read[cte_definition_index] {
            continue;
        }
        let joined_table = plan_cte(
            cte_definition_index,
            cte_definitions,
            &base_outer_query_refs,
            resolver,
            program,
            connection,
            false,
        )?;
        table_references.add_outer_query_reference(OuterQueryReference {
            identifier: cte_definition.name.clone(),
            has_alias: false,
            internal_id: joined_table.internal_id,
            namespace: joined_table.namespace,
            table: joined_table.table,
            join_info: None,
            col_used_mask: ColumnUsedMask::default(),
            cte_select: (!cte_definition.references_itself).then(|| cte_definition.select.clone()),
            cte_explicit_columns: cte_definition.explicit_columns.clone(),
            cte_id: Some(cte_definition.cte_id),
            // This entry only lets a nested FROM clause find the CTE name.
            cte_definition_only: true,
            rowid_referenced: false,
            outer_join_may_null_extend: false,
            scope_depth: 0,
        });
    }

    Ok(())
}

/// Returns, for each CTE, whether a query that reads the tables named in
/// `table_refs` reads it, either directly or through another CTE.
fn ctes_read_by(cte_definitions: &[CteDefinition], table_refs: &[String]) -> Vec<bool> {
    let mut read = vec![false; cte_definitions.len()];
    let mut pending: Vec<usize> = cte_definitions
        .iter()
        .enumerate()
        .filter(|(_, definition)| table_refs.contains(&definition.name))
        .map(|(index, _)| index)
        .collect();
    while let Some(index) = pending.pop() {
        if !read[index] {
            read[index] = true;
            pending.extend_from_slice(&cte_definitions[index].referenced_cte_indices);
        }
    }
    read
}

fn replace_select_table_alias(table: ast::SelectTable, alias: Option<ast::As>) -> ast::SelectTable {
    match table {
        ast::SelectTable::Table(name, _, indexed) => ast::SelectTable::Table(name, alias, indexed),
        ast::SelectTable::TableCall(name, args, _) => {
            ast::SelectTable::TableCall(name, args, alias)
        }
        ast::SelectTable::Select {
            select, lateral, ..
        } => ast::SelectTable::Select {
            select,
            alias,
            lateral,
        },
        ast::SelectTable::Sub(from, _) => ast::SelectTable::Sub(from, alias),
    }
}

#[turso_macros::trace_stack]
pub fn parse_where(
    where_clause: Option<&Expr>,
    table_references: &mut TableReferences,
    result_columns: Option<&[ResultSetColumn]>,
    out_where_clause: &mut Vec<WhereTerm>,
    resolver: &Resolver,
) -> Result<()> {
    if let Some(where_expr) = where_clause {
        let start_idx = out_where_clause.len();
        break_predicate_at_and_boundaries(where_expr, out_where_clause);
        for expr in out_where_clause[start_idx..].iter_mut() {
            rewrite_between_exprs(&mut expr.expr)?;
            bind_and_rewrite_expr(
                &mut expr.expr,
                Some(table_references),
                result_columns,
                resolver,
                BindingBehavior::TryCanonicalColumnsFirst,
            )?;
        }
        // BETWEEN in WHERE is rewritten to binary terms here so each side can be
        // considered independently by constraint extraction and range planning.
        // Re-break any ANDs that were created so they become separate WhereTerms for
        // constraint extraction.
        let mut i = start_idx;
        while i < out_where_clause.len() {
            if matches!(
                &out_where_clause[i].expr,
                Expr::Binary(_, ast::Operator::And, _)
            ) {
                let term = out_where_clause.remove(i);
                let mut new_terms: Vec<WhereTerm> = Vec::new();
                break_predicate_at_and_boundaries(&term.expr, &mut new_terms);
                // Preserve the source from the original term.
                for new_term in new_terms.iter_mut() {
                    new_term.origin = term.origin;
                }
                let count = new_terms.len();
                for (j, new_term) in new_terms.into_iter().enumerate() {
                    out_where_clause.insert(i + j, new_term);
                }
                i += count;
            } else {
                i += 1;
            }
        }
        Ok(())
    } else {
        Ok(())
    }
}

pub fn rewrite_between_exprs(expr: &mut Expr) -> Result<()> {
    walk_expr_mut(expr, &mut |e: &mut Expr| -> Result<WalkControl> {
        if let Expr::Between {
            lhs,
            not,
            start,
            end,
        } = e
        {
            let lhs_expr = std::mem::take(lhs.as_mut());
            let start_expr = std::mem::take(start.as_mut());
            let end_expr = std::mem::take(end.as_mut());

            let (lower, upper, combine_op) = if *not {
                (
                    Expr::Binary(
                        Box::new(lhs_expr.clone()),
                        ast::Operator::Less,
                        Box::new(start_expr),
                    ),
                    Expr::Binary(
                        Box::new(lhs_expr),
                        ast::Operator::Greater,
                        Box::new(end_expr),
                    ),
                    ast::Operator::Or,
                )
            } else {
                (
                    Expr::Binary(
                        Box::new(lhs_expr.clone()),
                        ast::Operator::GreaterEquals,
                        Box::new(start_expr),
                    ),
                    Expr::Binary(
                        Box::new(lhs_expr),
                        ast::Operator::LessEquals,
                        Box::new(end_expr),
                    ),
                    ast::Operator::And,
                )
            };
            *e = Expr::Binary(Box::new(lower), combine_op, Box::new(upper));
        }
        Ok(WalkControl::Continue)
    })?;
    Ok(())
}

/**
  Returns the earliest point at which a WHERE term can be evaluated.
  For expressions referencing tables, this is the innermost loop that contains a row for each
  table referenced in the expression.
  For expressions not referencing any tables (e.g. constants), this is before the main loop is
  opened, because they do not need any table data.
*/
pub fn determine_where_to_eval_term(
    term: &WhereTerm,
    join_order: &[JoinOrderMember],
    subqueries: &[NonFromClauseSubquery],
    table_references: Option<&TableReferences>,
    resolver: &Resolver,
) -> Result<EvalAt> {
    let mut eval_at =
        determine_where_to_eval_expr(&term.expr, join_order, subqueries, table_references)?;
    // A term like `random() < 0` reads no tables but gives a different answer each time, so like
    // SQLite we run it once per row of the outermost loop instead of once before the loops.
    // A call with the wrong number of arguments fails to resolve here. Callers drop a term whose
    // placement fails, so leave that error to the normal translation of the term instead.
    let changes_per_call =
        expr_contains_function_that_changes_within_statement(&term.expr, resolver).unwrap_or(false);
    if changes_per_call && !join_order.is_empty() {
        eval_at = eval_at.max(EvalAt::Loop(0));
    }
    if let Some(origin) = term.origin.join_origin() {
        // A materialized hash input can remove an inner join's right table.
        // The ON term then runs when all of its remaining tables are ready.
        if let Some(join_loop) =
            loop_index_for_table_row(origin.right_table(), join_order, table_references)
        {
            eval_at = eval_at.max(EvalAt::Loop(join_loop));
        } else if origin.is_outer() {
            // If the outer join's right table is absent, do not schedule its ON term in this plan.
            eval_at = eval_at.max(EvalAt::Loop(usize::MAX));
        }
    }
    let Some(table_references) = table_references else {
        return Ok(eval_at);
    };
    let referenced_tables = table_mask_from_expr(&term.expr, table_references, subqueries)?;

    if term.origin.join_origin().is_none() {
        // A WHERE condition that reads a table to the left of a RIGHT JOIN must
        // run in that join's row body. The unmatched scan enters the same body
        // with every table on the left set to NULL. A term that changes per call
        // must also run there, so that unmatched rows check it too.
        for (right_table_index, right_table) in table_references.joined_tables().iter().enumerate()
        {
            if !right_table
                .join_info
                .as_ref()
                .is_some_and(JoinInfo::keeps_right_rows)
            {
                continue;
            }
            let reads_left_table = changes_per_call
                || referenced_tables
                    .iter()
                    .any(|table_index| table_index < right_table_index);
            if reads_left_table {
                let loop_index = join_order
                    .iter()
                    .position(|table| table.table_id == right_table.internal_id)
                    .expect("right join table must be in the join order");
                eval_at = eval_at.max(EvalAt::Loop(loop_index));
            }
        }
    }

    Ok(eval_at)
}

/// A bitmask representing a set of tables in a query plan.
/// Tables are numbered by their index in [SelectPlan::joined_tables].
/// In the bitmask, the first bit is unused so that a mask with all zeros
/// can represent "no tables".
///
/// E.g. table 0 is represented by bit index 1, table 1 by bit index 2, etc.
///
/// Usage in Join Optimization
///
/// In join optimization, [TableMask] is used to:
/// - Generate subsets of tables for dynamic programming in join optimization
/// - Ensure tables are joined in valid orders (e.g., respecting LEFT JOIN order)
///
/// Usage with constraints (WHERE clause)
///
/// [TableMask] helps determine:
/// - Which tables are referenced in a constraint
/// - When a constraint can be applied as a join condition (all referenced tables must be on the left side of the table being joined)
///
/// Note that although [TableReference]s contain an internal ID as well, in join order optimization
/// the [TableMask] refers to the index of the table in the original join order, not the internal ID.
/// This is simply because we want to represent the tables as a contiguous set of bits, and the internal ID
/// might not be contiguous after e.g. subquery unnesting or other transformations.
pub type TableMask = BitSet;

/// Returns a [TableMask] representing the tables referenced in the given expression.
///
/// This includes outer references from subqueries, even if the subquery plan has
/// already been consumed, by relying on the cached outer reference ids.
/// Used in the optimizer for constraint analysis.
pub fn table_mask_from_expr(
    top_level_expr: &Expr,
    table_references: &TableReferences,
    subqueries: &[NonFromClauseSubquery],
) -> Result<TableMask> {
    let mut mask = TableMask::default();
    walk_expr(top_level_expr, &mut |expr: &Expr| -> Result<WalkControl> {
        match expr {
            Expr::Column { table, .. } | Expr::RowId { table, .. } => {
                if let Some(table_idx) = table_references
                    .joined_tables()
                    .iter()
                    .position(|t| t.internal_id == *table)
                {
                    mask.set(table_idx)?;
                } else if table_references
                    .find_outer_query_ref_by_internal_id(*table)
                    .is_none()
                {
                    // Tables from outer query scopes are guaranteed to be 'in scope' for this query,
                    // so they don't need to be added to the table mask. However, if the table is not found
                    // in the outer scope either, then it's an invalid reference.
                    crate::bail_parse_error!("table not found in joined_tables");
                }
            }
            // Given something like WHERE t.a = (SELECT ...), we can only evaluate that expression
            // when all both table 't' and all outer scope tables referenced by the subquery OR its nested subqueries are in scope.
            // Hence, the tables referenced in subqueries must be added to the table mask.
            Expr::SubqueryResult { subquery_id, .. } => {
                let Some(subquery) = subqueries.iter().find(|s| s.internal_id == *subquery_id)
                else {
                    crate::bail_parse_error!("subquery not found");
                };
                match &subquery.state {
                    SubqueryState::Unevaluated { plan } => {
                        let outer_ref_ids = plan.as_ref().unwrap().used_outer_query_ref_ids();
                        for outer_ref_id in &outer_ref_ids {
                            if let Some(table_idx) = table_references
                                .joined_tables()
                                .iter()
                                .position(|t| t.internal_id == *outer_ref_id)
                            {
                                mask.set(table_idx)?;
                            }
                        }
                    }
                    SubqueryState::Evaluated { outer_ref_ids, .. } => {
                        // Now hash-join plans can now translate some correlated subqueries early, we
                        // still revisit those predicates even though the plan has already been consumed.
                        // Without this cache we'd panic or lose the knowledge that an outer table was required.
                        //
                        // Example: `SELECT t.a FROM t WHERE t.a = (SELECT MAX(x.a) FROM x WHERE x.b = t.b)`.
                        // The outer expression `x.b = t.b` is visited after the subquery is translated,
                        // so we need cached `outer_ref_ids` to realize that `t` must already be in scope.
                        for outer_ref_id in outer_ref_ids {
                            if let Some(table_idx) = table_references
                                .joined_tables()
                                .iter()
                                .position(|t| t.internal_id == *outer_ref_id)
                            {
                                mask.set(table_idx)?;
                            }
                        }
                    }
                }
            }
            _ => {}
        }
        Ok(WalkControl::Continue)
    })?;

    Ok(mask)
}

pub fn expr_reads_an_outer_query(
    top_level_expr: &Expr,
    table_references: &TableReferences,
    subqueries: &[NonFromClauseSubquery],
) -> Result<bool> {
    let is_outer_query_table = |table_id: &TableInternalId| {
        table_references
            .find_outer_query_ref_by_internal_id(*table_id)
            .is_some()
    };
    let mut reads_an_outer_query = false;
    walk_expr(top_level_expr, &mut |expr: &Expr| -> Result<WalkControl> {
        match expr {
            Expr::Column { table, .. } | Expr::RowId { table, .. } => {
                reads_an_outer_query |= is_outer_query_table(table);
            }
            Expr::SubqueryResult { subquery_id, .. } => {
                let Some(subquery) = subqueries.iter().find(|s| s.internal_id == *subquery_id)
                else {
                    crate::bail_parse_error!("subquery not found");
                };
                reads_an_outer_query |= match &subquery.state {
                    SubqueryState::Unevaluated { plan } => plan.as_ref().is_some_and(|plan| {
                        plan.used_outer_query_ref_ids()
                            .iter()
                            .any(is_outer_query_table)
                    }),
                    SubqueryState::Evaluated { outer_ref_ids, .. } => {
                        outer_ref_ids.iter().any(is_outer_query_table)
                    }
                };
            }
            _ => {}
        }
        Ok(WalkControl::Continue)
    })?;
    Ok(reads_an_outer_query)
}

/// Determines the earliest loop where an expression can be safely evaluated.
///
/// When a referenced table is not found in `join_order`, we check if it's a hash-join
/// build table and map the condition to the probe loop where its rows are produced.
/// Subquery references are also respected, even after their plans are consumed.
pub fn determine_where_to_eval_expr(
    top_level_expr: &Expr,
    join_order: &[JoinOrderMember],
    subqueries: &[NonFromClauseSubquery],
    table_references: Option<&TableReferences>,
) -> Result<EvalAt> {
    // If the expression references no tables, it can be evaluated before any table loops are opened.
    let mut eval_at: EvalAt = EvalAt::BeforeLoop;
    walk_expr(top_level_expr, &mut |expr: &Expr| -> Result<WalkControl> {
        match expr {
            Expr::Column { table, .. } | Expr::RowId { table, .. } => {
                let Some(join_idx) = loop_index_for_table_row(*table, join_order, table_references)
                else {
                    // Must be an outer query reference; in that case, the table is already in scope.
                    return Ok(WalkControl::Continue);
                };
                eval_at = eval_at.max(EvalAt::Loop(join_idx));
            }
            // Given something like WHERE t.a = (SELECT ...), we can only evaluate that expression
            // when all both table 't' and all outer scope tables referenced by the subquery OR its nested subqueries are in scope.
            Expr::SubqueryResult { subquery_id, .. } => {
                let Some(subquery) = subqueries.iter().find(|s| s.internal_id == *subquery_id)
                else {
                    crate::bail_parse_error!("subquery not found");
                };
                match &subquery.state {
                    SubqueryState::Evaluated { evaluated_at, .. } => {
                        eval_at = eval_at.max(*evaluated_at);
                    }
                    SubqueryState::Unevaluated { .. } => {
                        eval_at = eval_at.max(subquery.get_eval_at(join_order, table_references)?);
                        return Ok(WalkControl::Continue);
                    }
                }
            }
            _ => {}
        }
        Ok(WalkControl::Continue)
    })?;

    Ok(eval_at)
}

/// Find the loop that makes a table row available.
///
/// A hash-build table has no loop. Its row becomes available when the probe reads the hash payload.
fn loop_index_for_table_row(
    table_id: TableInternalId,
    join_order: &[JoinOrderMember],
    table_references: Option<&TableReferences>,
) -> Option<usize> {
    join_order
        .iter()
        .position(|table| table.table_id == table_id)
        .or_else(|| {
            let tables = table_references?;
            join_order.iter().position(|member| {
                let probe_table = &tables.joined_tables()[member.original_idx];
                let Operation::HashJoin(hash_join) = &probe_table.op else {
                    return false;
                };
                tables.joined_tables()[hash_join.build_table_idx].internal_id == table_id
            })
        })
}

#[allow(clippy::too_many_arguments)]
fn parse_join(
    join: ast::JoinedSelectTable,
    resolver: &Resolver,
    program: &mut ProgramBuilder,
    cte_definitions: &[CteDefinition],
    out_where_clause: &mut Vec<WhereTerm>,
    vtab_predicates: &mut Vec<Expr>,
    table_references: &mut TableReferences,
    connection: &Arc<crate::Connection>,
    has_right_or_full_join: bool,
) -> Result<()> {
    let ast::JoinedSelectTable {
        operator: join_operator,
        table,
        constraint,
    } = join;

    parse_from_clause_table(
        table.as_ref().clone(),
        resolver,
        program,
        table_references,
        vtab_predicates,
        cte_definitions,
        connection,
    )?;
    let lateral_reference = left_table_read_by_rightmost_table(table_references).map(str::to_owned);

    let is_cross = matches!(join_operator, ast::JoinOperator::TypedJoin(Some(jt)) if jt.contains(JoinType::CROSS));

    let plan_join_type = PlanJoinType::from_join_operator(&join_operator);
    if let Some(table) = lateral_reference
        .as_ref()
        .filter(|_| plan_join_type.keeps_right_rows())
    {
        crate::bail_parse_error!(
            "invalid reference to FROM-clause entry for table \"{table}\": \
             the combining JOIN type must be INNER or LEFT for a LATERAL reference"
        );
    }
    if lateral_reference.is_some() && has_right_or_full_join {
        crate::bail_parse_error!(
            "RIGHT and FULL joins are not supported in a FROM clause with a LATERAL subquery \
             that reads a table on its left"
        );
    }
    let natural = matches!(
        join_operator,
        ast::JoinOperator::TypedJoin(Some(join_type))
            if join_type.contains(JoinType::NATURAL)
    );
    let outer = !matches!(plan_join_type, PlanJoinType::Inner);

    if natural && constraint.is_some() {
        crate::bail_parse_error!("a NATURAL join may not have an ON or USING clause");
    }

    // SQLite allows duplicate table names/aliases in FROM clauses.
    // Ambiguity is detected later during column resolution.
    let rightmost_table = table_references.joined_tables().last().unwrap();
    let join_origin = JoinOrigin::new(rightmost_table.internal_id, outer);
    let constraint = if natural {
        turso_assert_greater_than_or_equal!(table_references.joined_tables().len(), 2);
        // NATURAL JOIN is first transformed into a USING join with the common columns
        let mut distinct_names: Vec<ast::Name> = vec![];
        // TODO: O(n^2) maybe not great for large tables or big multiway joins
        // SQLite doesn't use HIDDEN columns for NATURAL joins: https://www3.sqlite.org/src/info/ab09ef427181130b
        for right_col in rightmost_table.columns().iter().filter(|col| !col.hidden()) {
            let mut found_match = false;
            for left_table in table_references
                .joined_tables()
                .iter()
                .take(table_references.joined_tables().len() - 1)
            {
                for left_col in left_table.columns().iter().filter(|col| !col.hidden()) {
                    if left_col
                        .name
                        .as_deref()
                        .zip(right_col.name.as_deref())
                        .is_some_and(|(l, r)| l.eq_ignore_ascii_case(r))
                    {
                        // SQLite keeps the right column's spelling in the generated USING list.
                        distinct_names.push(ast::Name::exact(
                            right_col.name.clone().expect("column name is None"),
                        ));
                        found_match = true;
                        break;
                    }
                }
                if found_match {
                    break;
                }
            }
        }
        if distinct_names.is_empty() {
            None // No common columns = cross join
        } else {
            Some(ast::JoinConstraint::Using(distinct_names))
        }
    } else {
        constraint
    };

    let mut using = vec![];

    if let Some(constraint) = constraint {
        match constraint {
            ast::JoinConstraint::On(ref expr) => {
                let start_idx = out_where_clause.len();
                break_predicate_at_and_boundaries(expr, out_where_clause);
                for predicate in out_where_clause[start_idx..].iter_mut() {
                    predicate.origin = WhereTermOrigin::Join(join_origin);
                    bind_and_rewrite_expr(
                        &mut predicate.expr,
                        Some(table_references),
                        None,
                        resolver,
                        BindingBehavior::TryResultColumnsFirst,
                    )?;
                }
            }
            ast::JoinConstraint::Using(distinct_names) => {
                // USING join is replaced with a list of equality predicates
                for distinct_name in distinct_names.iter() {
                    let name_normalized = normalize_ident(distinct_name.as_str());
                    let cur_table_idx = table_references.joined_tables().len() - 1;
                    let left_tables = &table_references.joined_tables()[..cur_table_idx];
                    turso_assert!(!left_tables.is_empty());
                    let right_table = table_references.joined_tables().last().unwrap();
                    // SQLite checks the right side before it checks ambiguity on the left.
                    // This order decides which error an invalid USING clause reports.
                    let Some((right_col_idx, right_col)) =
                        right_table.columns().iter().enumerate().find(|(_, col)| {
                            col.name
                                .as_deref()
                                .is_some_and(|name| name.eq_ignore_ascii_case(&name_normalized))
                        })
                    else {
                        crate::bail_parse_error!(
                            "cannot join using column {} - column not present in both tables",
                            distinct_name.as_str()
                        );
                    };
                    // SQLite compares the new table with all earlier copies merged by USING.
                    let Some(left_column) = find_left_using_column(
                        left_tables,
                        distinct_name.as_str(),
                        natural,
                        has_right_or_full_join,
                    )?
                    else {
                        crate::bail_parse_error!(
                            "cannot join using column {} - column not present in both tables",
                            distinct_name.as_str()
                        );
                    };
                    let expr = Expr::Binary(
                        Box::new(left_column.expr),
                        ast::Operator::Equals,
                        Box::new(Expr::Column {
                            database: None,
                            table: right_table.internal_id,
                            column: right_col_idx,
                            is_rowid_alias: right_col.is_rowid_alias(),
                        }),
                    );

                    for (left_table_id, left_col_idx) in left_column.source_columns {
                        table_references.mark_column_used(left_table_id, left_col_idx);
                    }
                    let right_table: &mut JoinedTable = table_references
                        .joined_tables_mut()
                        .get_mut(cur_table_idx)
                        .unwrap();
                    right_table.mark_column_used(right_col_idx);
                    out_where_clause.push(WhereTerm {
                        expr,
                        origin: WhereTermOrigin::Join(join_origin),
                        consumed: false,
                    });
                }
                using = distinct_names;
            }
        }
    }

    assert!(table_references.joined_tables().len() >= 2);
    let last_idx = table_references.joined_tables().len() - 1;
    let rightmost_table = table_references
        .joined_tables_mut()
        .get_mut(last_idx)
        .unwrap();
    rightmost_table.join_info = Some(JoinInfo {
        join_type: plan_join_type,
        using,
        no_reorder: is_cross,
        lateral: lateral_reference.is_some(),
    });

    Ok(())
}

/// Find the left operand for one USING equality term.
///
/// SQLite merges all earlier copies when a RIGHT or FULL JOIN exists anywhere
/// in the FROM list. It also rejects an unmerged duplicate in that mode.
fn find_left_using_column(
    tables: &[JoinedTable],
    column_name: &str,
    ignore_hidden_columns: bool,
    has_right_or_full_join: bool,
) -> Result<Option<ResolvedColumn>> {
    let matches = left_using_column_sources(
        tables,
        column_name,
        has_right_or_full_join,
        |table| table.join_info.as_ref(),
        |table| {
            // NATURAL ignores hidden columns. An explicit USING clause can name one.
            table.columns().iter().position(|column| {
                (!ignore_hidden_columns || !column.hidden())
                    && column
                        .name
                        .as_deref()
                        .is_some_and(|name| name.eq_ignore_ascii_case(column_name))
            })
        },
    )?;
    if matches.is_empty() {
        // The caller reports SQLite's "column not present in both tables" error.
        return Ok(None);
    }
    Ok(Some(merge_columns(matches.into_iter().map(
        |(table_index, column_index)| {
            let table = &tables[table_index];
            (table.internal_id, &table.table, column_index)
        },
    ))))
}

fn left_table_read_by_rightmost_table(table_references: &TableReferences) -> Option<&str> {
    let (last_table, tables_on_its_left) = table_references
        .joined_tables()
        .split_last()
        .expect("the joined table was just added");
    let Table::FromClauseSubquery(subquery) = &last_table.table else {
        return None;
    };
    let read_table_ids = subquery.plan.used_outer_query_ref_ids();
    tables_on_its_left
        .iter()
        .find(|table| read_table_ids.contains(&table.internal_id))
        .map(|table| table.identifier.as_str())
}

pub(crate) fn append_vtab_predicates_to_where_clause(
    vtab_predicates: &mut Vec<Expr>,
    table_references: &mut TableReferences,
    result_columns: &[ResultSetColumn],
    out_where_clause: &mut Vec<WhereTerm>,
    resolver: &Resolver,
) -> Result<()> {
    for mut expr in vtab_predicates.drain(..) {
        bind_and_rewrite_expr(
            &mut expr,
            Some(table_references),
            Some(result_columns),
            resolver,
            BindingBehavior::TryCanonicalColumnsFirst,
        )?;

        // SQLite treats a table-function argument as an ON term for that table.
        // This keeps the term with the table when a later RIGHT JOIN adds NULL rows.
        let table_function = vtab_predicate_table_id(&expr)
            .expect("a table-function argument must constrain its hidden column");
        let table_reference = table_references
            .find_joined_table_by_internal_id(table_function)
            .expect("a table-function argument must have a table reference");
        let join = JoinOrigin::new(
            table_function,
            table_reference
                .join_info
                .as_ref()
                .is_some_and(JoinInfo::is_outer),
        );
        out_where_clause.push(WhereTerm {
            expr,
            origin: WhereTermOrigin::TableFunction(join),
            consumed: false,
        });
    }
    Ok(())
}

/// Get the source table from `hidden_column = +(argument)`.
fn vtab_predicate_table_id(expr: &Expr) -> Option<TableInternalId> {
    match expr {
        Expr::Binary(lhs, ast::Operator::Equals, rhs)
            if matches!(rhs.as_ref(), Expr::Unary(ast::UnaryOperator::Positive, _)) =>
        {
            match lhs.as_ref() {
                Expr::Column { table, .. } => Some(*table),
                _ => None,
            }
        }
        _ => None,
    }
}
pub fn break_predicate_at_and_boundaries<T: From<Expr>>(
    predicate: &Expr,
    out_predicates: &mut Vec<T>,
) {
    // Unwrap single-element parenthesized expressions recursively: ((expr)) -> expr.
    // This is semantically equivalent since single-element Parenthesized is purely
    // syntactic grouping. Multi-element Parenthesized (row values like (x, y)) are
    // left as-is by unwrap_parens.
    let predicate = unwrap_parens(predicate).unwrap_or(predicate);
    match predicate {
        Expr::Binary(left, ast::Operator::And, right) => {
            break_predicate_at_and_boundaries(left, out_predicates);
            break_predicate_at_and_boundaries(right, out_predicates);
        }
        _ => {
            out_predicates.push(predicate.clone().into());
        }
    }
}

pub fn parse_row_id<F>(
    column_name: &str,
    table_id: TableInternalId,
    fn_check: F,
) -> Result<Option<Expr>>
where
    F: FnOnce() -> bool,
{
    if ROWID_STRS
        .iter()
        .any(|s| s.eq_ignore_ascii_case(column_name))
    {
        if fn_check() {
            crate::bail_parse_error!("ROWID is ambiguous");
        }

        return Ok(Some(Expr::RowId {
            database: None, // TODO: support different databases
            table: table_id,
        }));
    }
    Ok(None)
}

#[allow(clippy::type_complexity)]
#[turso_macros::trace_stack]
pub fn parse_limit(
    mut limit: Limit,
    resolver: &Resolver,
) -> Result<(Option<Box<Expr>>, Option<Box<Expr>>)> {
    bind_and_rewrite_expr(
        &mut limit.expr,
        None,
        None,
        resolver,
        BindingBehavior::TryResultColumnsFirst,
    )?;
    if let Some(ref mut off_expr) = limit.offset {
        bind_and_rewrite_expr(
            off_expr,
            None,
            None,
            resolver,
            BindingBehavior::TryResultColumnsFirst,
        )?;
    }
    Ok((Some(limit.expr), limit.offset))
}
