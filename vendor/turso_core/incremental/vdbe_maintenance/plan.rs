use rustc_hash::{FxHashMap, FxHashSet};
use turso_parser::ast::{self, TableInternalId};

use super::output::NodeOutputContract;
use super::stream::{binding_rowid_metadata_width, DeltaIdentity};
use crate::function::{AggFunc, Func};
use crate::incremental::dag;
use crate::schema::BTreeTable;
use crate::sync::Arc;
use crate::translate::collate::{expr_collation, first_collation, CollationSeq};
use crate::translate::emitter::Resolver;
use crate::translate::expr::{expr_contains_nondeterministic_scalar_function, WalkControl};
use crate::translate::optimizer::optimize_plan;
use crate::translate::optimizer::unnest::rewrite_correlated_subqueries;
use crate::translate::plan::{
    Aggregate, JoinType, Plan, QueryDestination, SelectPlan, SubqueryState, TableReferences,
};
use crate::translate::planner::resolve_window_and_aggregate_functions;
use crate::translate::select::prepare_select_plan;
use crate::util::walk_expr_with_subqueries;
use crate::vdbe::affinity::Affinity;
use crate::vdbe::builder::{ProgramBuilder, ProgramBuilderOpts};
use crate::{Connection, LimboError, QueryMode, Result};

/// Whether an aggregate's accumulator must see each distinct argument value
/// exactly once, tracked through the value multiset table. MIN/MAX see each
/// value once by definition, so DISTINCT changes nothing for them — their
/// multiset participation is about extremes, not distinctness.
pub(super) fn tracks_distinct_values(agg: &Aggregate) -> bool {
    agg.distinctness.is_distinct() && !matches!(agg.func, AggFunc::Min | AggFunc::Max)
}

fn unsupported<T>(what: &str) -> Result<T> {
    Err(LimboError::ParseError(format!(
        "materialized views with {what} are not yet supported",
    )))
}

/// Validate an expression against the values and rowids published by one
/// operator edge.
///
/// Downstream expression compilation seeds exactly these expressions into
/// the translator's register cache. Validating the same contract here keeps
/// composition independent of the upstream operator kind: an aggregate
/// result remains usable through any number of linear operators, while a
/// source value that was not published cannot leak across the boundary.
fn validate_stream_expr(
    expr: &ast::Expr,
    schema: &dag::StreamSchema,
    binding_rowids: &[bool],
    unavailable_value: &str,
) -> Result<()> {
    walk_expr_with_subqueries(expr, &mut |e: &ast::Expr| {
        let published_value = schema.columns.iter().any(|column| {
            column
                .as_ref()
                .is_some_and(|published| crate::util::exprs_are_equivalent(published, e))
        });
        match e {
            ast::Expr::Subquery(_) | ast::Expr::Exists(_) | ast::Expr::InSelect { .. } => {
                return Err(LimboError::ParseError(
                    "materialized views with subqueries are not yet supported".to_string(),
                ));
            }
            ast::Expr::FunctionCall { name, args, .. } => {
                if matches!(
                    Func::resolve_function(name.as_str(), args.len()),
                    Ok(Some(Func::Agg(_)))
                ) {
                    if published_value {
                        return Ok(WalkControl::SkipChildren);
                    }
                    return unsupported("expressions over aggregate results");
                }
                if published_value {
                    return Ok(WalkControl::SkipChildren);
                }
            }
            ast::Expr::FunctionCallStar { name, .. } => {
                if matches!(
                    Func::resolve_function(name.as_str(), 0),
                    Ok(Some(Func::Agg(_)))
                ) {
                    if published_value {
                        return Ok(WalkControl::SkipChildren);
                    }
                    return unsupported("expressions over aggregate results");
                }
                if published_value {
                    return Ok(WalkControl::SkipChildren);
                }
            }
            ast::Expr::Variable(_) => {
                return Err(LimboError::ParseError(
                    "materialized views with bound parameters are not supported".to_string(),
                ));
            }
            ast::Expr::Id(_) | ast::Expr::Qualified(_, _) | ast::Expr::DoublyQualified(_, _, _) => {
                return Err(LimboError::InternalError(
                    "maintenance expression contains an unresolved identifier".to_string(),
                ));
            }
            ast::Expr::Column { .. } => {
                if !published_value {
                    return unsupported(unavailable_value);
                }
                return Ok(WalkControl::SkipChildren);
            }
            ast::Expr::RowId { table, .. } => {
                let available = published_value
                    || schema
                        .bindings
                        .iter()
                        .zip(binding_rowids.iter())
                        .any(|(binding, available)| binding.logical_id == *table && *available);
                if !available {
                    return unsupported("rowids not published by their input stream");
                }
                return Ok(WalkControl::SkipChildren);
            }
            _ if published_value => return Ok(WalkControl::SkipChildren),
            _ => {}
        }
        Ok(WalkControl::Continue)
    })
}

/// Reject collected aggregates the maintenance codegen cannot invert.
///
/// Aggregate recognition and deduplication use the planner's own collector
/// ([`resolve_window_and_aggregate_functions`]); this is only the IVM gate on
/// top of it.
fn validate_supported_aggregate(agg: &Aggregate) -> Result<()> {
    if !agg.order_by().is_empty() {
        return unsupported("ORDER BY in aggregates");
    }
    match agg.func {
        AggFunc::Count0
        | AggFunc::Count
        | AggFunc::Sum
        | AggFunc::Total
        | AggFunc::Avg
        | AggFunc::Min
        | AggFunc::Max => {}
        // GROUP_CONCAT and friends have no inverse and no multiset-based
        // retraction strategy.
        ref other => return unsupported(&format!("the {} aggregate", other.as_str())),
    }
    if agg.args.len() > 1 {
        return unsupported("multi-argument aggregates");
    }
    Ok(())
}

/// Lower the main query planner's bound relational plan into the maintenance
/// DAG. Parser spelling (aliases, stars, USING expansion, ordinal GROUP BY,
/// and compound arity) has already been resolved by this point.
fn build_dag_from_plan(plan: &Plan, resolver: &Resolver) -> Result<dag::MaintenanceDag> {
    let mut builder = dag::DagBuilder::new();
    let root = build_plan_dag_node(&mut builder, plan, resolver)?;
    builder.finish(root)
}

fn build_plan_dag_node(
    builder: &mut dag::DagBuilder,
    plan: &Plan,
    resolver: &Resolver,
) -> Result<dag::NodeId> {
    let root = match plan {
        Plan::Select(select) => build_select_plan_dag(builder, select, resolver)?,
        Plan::CompoundSelect {
            left, right_most, ..
        } => {
            let mut inputs = Vec::with_capacity(left.len() + 1);
            for (branch, _) in left {
                inputs.push(build_select_plan_dag(builder, branch, resolver)?);
            }
            inputs.push(build_select_plan_dag(builder, right_most, resolver)?);

            let operators: Vec<_> = left.iter().map(|(_, operator)| *operator).collect();
            let prefix_len = operators
                .iter()
                .rposition(|operator| *operator != ast::CompoundOperator::UnionAll)
                .map_or(0, |last_dedup| last_dedup + 2);
            let arity = right_most.result_columns.len();
            let key_columns = if prefix_len == 0 {
                Vec::new()
            } else {
                let branches = left
                    .iter()
                    .map(|(branch, _)| branch)
                    .chain(std::iter::once(right_most.as_ref()))
                    .take(prefix_len)
                    .collect::<Vec<_>>();
                (0..arity)
                    .map(|index| set_op_key_column(&branches, index, resolver))
                    .collect::<Result<Vec<_>>>()?
            };
            builder.push(dag::OpNode::SetOp {
                inputs,
                operators,
                arity,
                prefix_len,
                key_columns,
            })?
        }
        Plan::Delete(_) | Plan::Update(_) => {
            return Err(LimboError::InternalError(
                "materialized view planner produced a DML plan".to_string(),
            ));
        }
        Plan::RecursiveCte(_) => return unsupported("recursive CTEs"),
    };
    Ok(root)
}

fn synthesized_derived_table(
    name: &str,
    columns: crate::alloc::Vec<crate::schema::Column>,
) -> BTreeTable {
    BTreeTable::new(
        0,
        name.to_string(),
        crate::alloc::vec![],
        columns,
        crate::schema::BTreeCharacteristics::empty(),
        crate::alloc::vec![],
        crate::alloc::vec![],
        crate::alloc::vec![],
        None,
    )
}

fn build_select_plan_dag(
    builder: &mut dag::DagBuilder,
    plan: &SelectPlan,
    resolver: &Resolver,
) -> Result<dag::NodeId> {
    if !plan.order_by.is_empty() {
        return unsupported("ORDER BY");
    }
    if plan.limit.is_some() || plan.offset.is_some() {
        return unsupported("LIMIT or OFFSET");
    }
    if !plan.values.is_empty() {
        return unsupported("VALUES");
    }
    if plan.window.is_some() {
        return unsupported("window functions");
    }
    if !plan.non_from_clause_subqueries.is_empty() {
        return unsupported("subqueries");
    }

    let joined_tables = plan.table_references.joined_tables();
    if joined_tables.is_empty() {
        return unsupported("SELECT without a FROM clause");
    }
    // The first table has no join; it behaves as the left side of the rest.
    let join_types = joined_tables
        .iter()
        .map(|table| {
            table
                .join_info
                .as_ref()
                .map_or(JoinType::Inner, |join| join.join_type)
        })
        .collect::<Vec<_>>();

    let mut inputs = Vec::with_capacity(joined_tables.len());
    for joined in joined_tables {
        let input = match &joined.table {
            crate::schema::Table::BTree(table) => builder.push(dag::OpNode::Scan {
                table: table.clone(),
                identifier: joined.identifier.clone(),
                logical_id: joined.internal_id,
            })?,
            crate::schema::Table::FromClauseSubquery(subquery) => {
                let input = build_plan_dag_node(builder, &subquery.plan, resolver)?;
                let table = Arc::new(synthesized_derived_table(
                    &subquery.name,
                    subquery.columns.clone(),
                ));
                builder.push(dag::OpNode::Alias {
                    input,
                    table,
                    identifier: joined.identifier.clone(),
                    logical_id: joined.internal_id,
                })?
            }
            crate::schema::Table::Virtual(_) => return unsupported("virtual-table FROM sources"),
            crate::schema::Table::RecursiveCteInput(_) => {
                return unsupported("recursive CTE inputs")
            }
        };
        inputs.push(input);
    }

    let binding_positions = joined_tables
        .iter()
        .enumerate()
        .map(|(position, table)| (table.internal_id, position))
        .collect::<FxHashMap<_, _>>();
    // The tables whose columns the join at `step` fills with NULLs.
    let nulls_filled_by = |step: usize| match join_types[step] {
        JoinType::LeftOuter => step..step + 1,
        JoinType::RightOuter => 0..step,
        JoinType::FullOuter => 0..step + 1,
        JoinType::Inner | JoinType::Semi | JoinType::Anti => 0..0,
    };
    // ON and USING terms belong to their join. A WHERE term may run below a
    // join only if no join from there on fills one of its tables with NULLs:
    // in `a RIGHT JOIN b ... WHERE a.x > b.y`, running the term on `a`
    // first would let `b` rows find no match and be padded instead of
    // being removed. Otherwise it runs after the last such join. On an inner
    // join, running a term after it and adding it to ON are the same.
    //
    // The table of a semi or anti join is invisible after its join, so every
    // term that reads it is part of that join's ON. The planner puts the
    // EXISTS subquery's WHERE terms there when it turns the subquery into a
    // join.
    let mut on_by_step = vec![Vec::new(); inputs.len()];
    let mut filters_by_step = vec![Vec::new(); inputs.len()];
    for term in &plan.where_clause {
        if let Some(origin) = term.origin.join_origin() {
            let step = *binding_positions
                .get(&origin.right_table())
                .ok_or_else(|| {
                    LimboError::InternalError(
                        "join predicate belongs to a table outside the FROM clause".to_string(),
                    )
                })?;
            let outer_join = matches!(
                join_types[step],
                JoinType::LeftOuter | JoinType::RightOuter | JoinType::FullOuter
            );
            if step == 0 || origin.is_outer() != outer_join {
                return Err(LimboError::InternalError(
                    "join predicate does not match the join that owns it".to_string(),
                ));
            }
            on_by_step[step].push(term.expr.clone());
            continue;
        }
        let positions = referenced_binding_positions(&term.expr, &binding_positions)?;
        let mut step = positions.iter().copied().max().unwrap_or(0);
        let reads_hidden_table =
            |position: usize| matches!(join_types[position], JoinType::Semi | JoinType::Anti);
        if positions
            .iter()
            .any(|position| reads_hidden_table(*position))
        {
            // Its table must be the last one the term reads, or a later join
            // would need a column that is already gone.
            if positions
                .iter()
                .any(|position| *position != step && reads_hidden_table(*position))
                || !reads_hidden_table(step)
            {
                return Err(LimboError::InternalError(
                    "a predicate reads a semi or anti join table outside that join".to_string(),
                ));
            }
            on_by_step[step].push(term.expr.clone());
            continue;
        }
        for later in step + 1..inputs.len() {
            let nulls = nulls_filled_by(later);
            if positions.iter().any(|position| nulls.contains(position)) {
                step = later;
            }
        }
        if step > 0 && join_types[step] == JoinType::Inner {
            on_by_step[step].push(term.expr.clone());
        } else {
            filters_by_step[step].push(term.expr.clone());
        }
    }

    let mut node = inputs[0];
    for step in 0..inputs.len() {
        if step > 0 {
            let pair = [node, inputs[step]];
            let on = std::mem::take(&mut on_by_step[step]);
            node = match join_types[step] {
                JoinType::Inner => builder.push(dag::OpNode::Join {
                    inputs: pair,
                    on,
                    kind: dag::JoinKind::Inner,
                })?,
                JoinType::LeftOuter => push_outer_join(builder, pair, on, true, false)?,
                JoinType::RightOuter => push_outer_join(builder, pair, on, false, true)?,
                JoinType::FullOuter => push_outer_join(builder, pair, on, true, true)?,
                JoinType::Semi => builder.push(dag::OpNode::Join {
                    inputs: pair,
                    on,
                    kind: dag::JoinKind::Semi,
                })?,
                JoinType::Anti => builder.push(dag::OpNode::Join {
                    inputs: pair,
                    on,
                    kind: dag::JoinKind::Anti,
                })?,
            };
        }
        if let Some(predicate) = combine_predicates(std::mem::take(&mut filters_by_step[step])) {
            node = builder.push(dag::OpNode::Filter {
                input: node,
                predicate,
            })?;
        }
    }

    if plan.group_by.is_some() || !plan.aggregates.is_empty() {
        let (group_exprs, group_keys, scalar) = if plan
            .group_by
            .as_ref()
            .is_some_and(|group_by| !group_by.exprs.is_empty())
        {
            let group_by = plan.group_by.as_ref().unwrap();
            let mut exprs = Vec::with_capacity(group_by.exprs.len());
            let mut keys = Vec::with_capacity(group_by.exprs.len());
            for expr in &group_by.exprs {
                keys.push(key_column(expr, &plan.table_references, resolver)?);
                exprs.push(expr.clone());
            }
            (exprs, keys, false)
        } else {
            // The one group of a scalar aggregate is the constant 0.
            (
                vec![ast::Expr::Literal(ast::Literal::Numeric("0".to_string()))],
                vec![dag::KeyColumn {
                    collation: CollationSeq::Binary,
                    ambiguous: false,
                }],
                true,
            )
        };

        let mut aggregates = hidden_count_aggregate(resolver)?;
        for aggregate in &plan.aggregates {
            let mut normalized = aggregate.clone();
            normalized.fraction_reg = None;
            aggregates.push(normalized);
        }
        let mut multiset_keys = Vec::with_capacity(aggregates.len());
        for aggregate in &aggregates {
            if !uses_multiset(aggregate) {
                multiset_keys.push(None);
                continue;
            }
            let argument = aggregate.args.first().ok_or_else(|| {
                LimboError::InternalError(
                    "a MIN/MAX or DISTINCT aggregate has no argument".to_string(),
                )
            })?;
            multiset_keys.push(Some(key_column(
                argument,
                &plan.table_references,
                resolver,
            )?));
        }
        node = builder.push(dag::OpNode::Aggregate {
            input: node,
            group_exprs,
            group_keys,
            aggregates,
            multiset_keys,
            scalar,
        })?;

        if let Some(having) = plan
            .group_by
            .as_ref()
            .and_then(|group_by| group_by.having.as_ref())
        {
            let normalized = having.to_vec();
            if let Some(predicate) = combine_predicates(normalized) {
                node = builder.push(dag::OpNode::Filter {
                    input: node,
                    predicate,
                })?;
            }
        }
    }

    let result_exprs = plan
        .result_columns
        .iter()
        .map(|column| column.expr.clone())
        .collect::<Vec<_>>();
    node = builder.push(dag::OpNode::Project {
        input: node,
        projections: result_exprs.clone(),
    })?;

    if plan.distinctness.is_distinct() {
        let group_keys = result_exprs
            .iter()
            .map(|expr| key_column(expr, &plan.table_references, resolver))
            .collect::<Result<Vec<_>>>()?;
        node = builder.push(dag::OpNode::Aggregate {
            input: node,
            group_exprs: result_exprs.clone(),
            group_keys,
            aggregates: hidden_count_aggregate(resolver)?,
            multiset_keys: vec![None],
            scalar: false,
        })?;
        node = builder.push(dag::OpNode::Project {
            input: node,
            projections: result_exprs,
        })?;
    }

    Ok(node)
}

/// Build an outer join from simpler operators: the inner join, plus the
/// NULL-padded anti join of each side whose unmatched rows are kept.
///
/// ```text
/// A LEFT JOIN B  = (A JOIN B) UNION ALL pad(A ANTI JOIN B)
/// A RIGHT JOIN B = (A JOIN B) UNION ALL pad(B ANTI JOIN A)
/// A FULL JOIN B  = both padded branches
/// ```
fn push_outer_join(
    builder: &mut dag::DagBuilder,
    inputs: [dag::NodeId; 2],
    on: Vec<ast::Expr>,
    keep_left_rows: bool,
    keep_right_rows: bool,
) -> Result<dag::NodeId> {
    let no_columns = Arc::new(dag::StreamSchema {
        columns: Vec::new(),
        bindings: Vec::new(),
    });
    let mut branches = vec![builder.push(dag::OpNode::Join {
        inputs,
        on: on.clone(),
        kind: dag::JoinKind::Inner,
    })?];
    for (keep, side) in [(keep_left_rows, 0), (keep_right_rows, 1)] {
        if !keep {
            continue;
        }
        let other = inputs[1 - side];
        let unmatched = builder.push(dag::OpNode::Join {
            inputs: [inputs[side], other],
            on: on.clone(),
            kind: dag::JoinKind::Anti,
        })?;
        // The NULL columns take the other side's place in the joined row.
        let other_columns = builder.output_schema(other).clone();
        let (before, after) = if side == 0 {
            (no_columns.clone(), other_columns)
        } else {
            (other_columns, no_columns.clone())
        };
        branches.push(builder.push(dag::OpNode::Pad {
            input: unmatched,
            before,
            after,
        })?);
    }
    let arity = builder.output_schema(branches[0]).len();
    builder.push(dag::OpNode::SetOp {
        operators: vec![ast::CompoundOperator::UnionAll; branches.len() - 1],
        inputs: branches,
        arity,
        prefix_len: 0,
        key_columns: Vec::new(),
    })
}

fn combine_predicates(mut predicates: Vec<ast::Expr>) -> Option<ast::Expr> {
    let first = predicates.pop()?;
    Some(predicates.into_iter().fold(first, |right, left| {
        ast::Expr::Binary(Box::new(left), ast::Operator::And, Box::new(right))
    }))
}

/// The FROM positions of the tables an expression reads.
fn referenced_binding_positions(
    expr: &ast::Expr,
    binding_positions: &FxHashMap<TableInternalId, usize>,
) -> Result<Vec<usize>> {
    let mut positions = Vec::new();
    walk_expr_with_subqueries(expr, &mut |node| {
        let binding = match node {
            ast::Expr::Column { table, .. } | ast::Expr::RowId { table, .. } => Some(*table),
            ast::Expr::Id(_) | ast::Expr::Qualified(_, _) | ast::Expr::DoublyQualified(_, _, _) => {
                return Err(LimboError::InternalError(
                    "maintenance predicate contains an unresolved identifier".to_string(),
                ));
            }
            _ => None,
        };
        if let Some(binding) = binding {
            let position = binding_positions.get(&binding).ok_or_else(|| {
                LimboError::InternalError(
                    "maintenance predicate references a binding outside its FROM clause"
                        .to_string(),
                )
            })?;
            positions.push(*position);
        }
        Ok(WalkControl::Continue)
    })?;
    Ok(positions)
}

fn hidden_count_aggregate(resolver: &Resolver) -> Result<Vec<Aggregate>> {
    let count_star = ast::Expr::FunctionCallStar {
        name: ast::Name::exact("count".to_string()),
        filter_over: ast::FunctionTail {
            filter_clause: None,
            over_clause: None,
        },
    };
    let mut aggregates = Vec::new();
    resolve_window_and_aggregate_functions(&count_star, resolver, &mut aggregates, None, &mut [])?;
    Ok(aggregates)
}

/// The key column a stateful operator uses for `expr`.
fn key_column(
    expr: &ast::Expr,
    tables: &TableReferences,
    resolver: &Resolver,
) -> Result<dag::KeyColumn> {
    let collation = supported_key_collation(expr_collation(expr, Some(tables), resolver)?)?;
    Ok(dag::KeyColumn {
        collation,
        ambiguous: collation != CollationSeq::Binary || stored_affinity(expr, tables).is_none(),
    })
}

/// The key column of compound result column `index` over the deduplicated
/// `branches`. The collation is the first explicit one, as in SQLite. Under
/// BINARY a class holds one exact value only when no branch can produce an
/// integer that another branch produces as an equal real.
fn set_op_key_column(
    branches: &[&SelectPlan],
    index: usize,
    resolver: &Resolver,
) -> Result<dag::KeyColumn> {
    let collation = supported_key_collation(first_collation(
        branches.iter().map(|branch| {
            (
                &branch.result_columns[index].expr,
                Some(&branch.table_references),
            )
        }),
        resolver,
    )?)?;
    let affinities = branches
        .iter()
        .map(|branch| stored_affinity(&branch.result_columns[index].expr, &branch.table_references))
        .collect::<Vec<_>>();
    let mixes_integers_and_reals =
        affinities.contains(&Some(Affinity::Integer)) && affinities.contains(&Some(Affinity::Real));
    Ok(dag::KeyColumn {
        collation,
        ambiguous: collation != CollationSeq::Binary
            || affinities.contains(&None)
            || mixes_integers_and_reals,
    })
}

/// Hidden tables store their keys with the collation in their DDL, so a key
/// collation has to be one that DDL can name.
fn supported_key_collation(collation: CollationSeq) -> Result<CollationSeq> {
    if collation.is_custom() {
        return unsupported("custom collations on grouping or dedup keys");
    }
    Ok(collation)
}

/// The affinity of the base-table column `expr` reads, when that affinity
/// keeps BINARY-equal stored values identical: INTEGER and NUMERIC store an
/// integral number as an integer (reported as INTEGER), REAL stores every
/// number as a real, and TEXT stores numbers as text. `None` for anything
/// else (an expression, a derived-table column, or a column without such an
/// affinity), which may hold both the integer 2 and the real 2.0.
fn stored_affinity(expr: &ast::Expr, tables: &TableReferences) -> Option<Affinity> {
    match expr {
        ast::Expr::RowId { .. } => Some(Affinity::Integer),
        ast::Expr::Column { table, column, .. } => {
            let joined = tables.find_joined_table_by_internal_id(*table)?;
            let crate::schema::Table::BTree(table) = &joined.table else {
                return None;
            };
            match table.columns().get(*column)?.affinity() {
                Affinity::Integer | Affinity::Numeric => Some(Affinity::Integer),
                Affinity::Real => Some(Affinity::Real),
                Affinity::Text => Some(Affinity::Text),
                Affinity::Blob | Affinity::None => None,
            }
        }
        _ => None,
    }
}

/// A hidden state/multiset table a view needs, fully named with its CREATE
/// SQL. The single source of truth for the DDL the CREATE program emits.
#[derive(Debug, Clone)]
pub(crate) struct HiddenTableDef {
    pub(crate) table_name: String,
    pub(crate) create_sql: String,
    pub(crate) primary_key_index: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AuxiliaryStatePurpose {
    AggregateMultiset { aggregate_index: usize },
    AggregateGroupMembers,
    MatchCounts,
    SetOpIdentity,
    SetOpMembers,
}

#[derive(Debug, Clone)]
struct AuxiliaryTableDef {
    purpose: AuxiliaryStatePurpose,
    table: HiddenTableDef,
}

/// Persistent storage and output contract assigned to one DAG node.
///
/// `state_table` is the operator's primary integral. Auxiliary tables have an
/// explicit operator-local purpose: each aggregate value multiset owns its
/// own collation-bearing index, while semi/anti joins and mixed set operations each
/// own one bookkeeping table. `arrangement_table` is the node's explicitly
/// materialized output integral when a downstream join or terminal sink needs
/// a one-rowid identity and the operator has no native arrangement.
#[derive(Debug, Clone)]
pub(super) struct OperatorStateDef {
    pub(super) node_id: dag::NodeId,
    pub(super) output: NodeOutputContract,
    pub(super) state_table: Option<HiddenTableDef>,
    auxiliary_tables: Vec<AuxiliaryTableDef>,
    pub(super) arrangement_table: Option<HiddenTableDef>,
}

impl OperatorStateDef {
    fn exposes_arrangement(&self, node: &dag::OpNode) -> bool {
        node_has_native_arrangement(node) || self.arrangement_table.is_some()
    }

    pub(super) fn state_table_name(&self) -> Result<&str> {
        self.state_table
            .as_ref()
            .map(|table| table.table_name.as_str())
            .ok_or_else(|| {
                LimboError::InternalError(format!(
                    "maintenance DAG node {} has no primary state table",
                    self.node_id
                ))
            })
    }

    fn auxiliary_table_name(&self, purpose: AuxiliaryStatePurpose) -> Result<&str> {
        self.auxiliary_tables
            .iter()
            .find(|table| table.purpose == purpose)
            .map(|table| table.table.table_name.as_str())
            .ok_or_else(|| {
                LimboError::InternalError(format!(
                    "maintenance DAG node {} has no {purpose:?} table",
                    self.node_id
                ))
            })
    }

    pub(super) fn aggregate_multiset_table_name(&self, aggregate_index: usize) -> Result<&str> {
        self.auxiliary_table_name(AuxiliaryStatePurpose::AggregateMultiset { aggregate_index })
    }

    pub(super) fn aggregate_group_members_table_name(&self) -> Result<&str> {
        self.auxiliary_table_name(AuxiliaryStatePurpose::AggregateGroupMembers)
    }

    pub(super) fn match_counts_table_name(&self) -> Result<&str> {
        self.auxiliary_table_name(AuxiliaryStatePurpose::MatchCounts)
    }

    pub(super) fn set_op_identity_table_name(&self) -> Result<&str> {
        self.auxiliary_table_name(AuxiliaryStatePurpose::SetOpIdentity)
    }

    pub(super) fn set_op_members_table_name(&self) -> Result<&str> {
        self.auxiliary_table_name(AuxiliaryStatePurpose::SetOpMembers)
    }

    fn hidden_tables(&self) -> impl Iterator<Item = &HiddenTableDef> {
        self.state_table
            .iter()
            .chain(self.auxiliary_tables.iter().map(|table| &table.table))
            .chain(self.arrangement_table.iter())
    }
}

/// Node-indexed inventory shared by CREATE and maintenance code generation.
///
/// The vector has exactly one entry per DAG node, so codegen cannot recover
/// storage by reclassifying a branch or reconstructing a name.
#[derive(Debug, Clone)]
pub(super) struct OperatorStateCatalog {
    nodes: Vec<OperatorStateDef>,
}

impl OperatorStateCatalog {
    pub(super) fn for_node(&self, node_id: dag::NodeId) -> Result<&OperatorStateDef> {
        let state = self.nodes.get(node_id).ok_or_else(|| {
            LimboError::InternalError(format!(
                "maintenance state catalog has no DAG node {node_id}"
            ))
        })?;
        if state.node_id != node_id {
            return Err(LimboError::InternalError(format!(
                "maintenance state catalog entry {} is stored at node {node_id}",
                state.node_id
            )));
        }
        Ok(state)
    }

    fn hidden_tables(&self) -> impl Iterator<Item = &HiddenTableDef> {
        self.nodes.iter().flat_map(OperatorStateDef::hidden_tables)
    }
}

/// The single CREATE/compile-time description of an incremental view.
///
/// Validation builds the DAG once, storage is derived from that DAG, and
/// codegen consumes the same representation. Keeping these together prevents
/// the accepted-query set, hidden schema, and bytecode dispatcher from
/// evolving as three independent shape classifiers.
pub(crate) struct MaintenancePlan {
    dag: dag::MaintenanceDag,
    operator_states: OperatorStateCatalog,
    output_arity: usize,
    version_marker: HiddenTableDef,
}

impl MaintenancePlan {
    pub(super) fn dag(&self) -> &dag::MaintenanceDag {
        &self.dag
    }

    pub(super) fn operator_states(&self) -> &OperatorStateCatalog {
        &self.operator_states
    }

    pub(crate) fn output_arity(&self) -> usize {
        self.output_arity
    }

    pub(crate) fn hidden_tables(&self) -> impl Iterator<Item = &HiddenTableDef> {
        std::iter::once(&self.version_marker).chain(self.operator_states.hidden_tables())
    }

    /// For each view column: the collation under which the value it shows
    /// was chosen among several values that compare equal, or `None` when
    /// the value is exact. These are the values SQL leaves open, such as
    /// which of 'a' and 'A' a NOCASE GROUP BY key or MIN shows (see
    /// `members`). A column is chosen when it is an ambiguous key column of
    /// a GROUP BY, DISTINCT or deduplicating compound operator, or the
    /// result of MIN/MAX over an ambiguous value, reached through operators
    /// that pass the value on unchanged. A value computed from a chosen
    /// value is not reported.
    #[cfg(feature = "test_helper")]
    pub(crate) fn chosen_value_collations(&self) -> Vec<Option<CollationSeq>> {
        let dag = &self.dag;
        let mut chosen: Vec<Vec<Option<CollationSeq>>> = Vec::with_capacity(dag.nodes.len());
        // The collation of input column `expr` when it passes on a chosen
        // value unchanged.
        let passed_on = |chosen: &[Vec<Option<CollationSeq>>], input: dag::NodeId, expr| {
            dag.output_schema(input)
                .columns
                .iter()
                .position(|column| {
                    column
                        .as_ref()
                        .is_some_and(|column| crate::util::exprs_are_equivalent(column, expr))
                })
                .and_then(|position| chosen[input][position])
        };
        for (node_id, node) in dag.nodes.iter().enumerate() {
            let width = dag.output_schema(node_id).len();
            let columns = match node {
                dag::OpNode::Scan { .. } => vec![None; width],
                dag::OpNode::Filter { input, .. } | dag::OpNode::Alias { input, .. } => {
                    chosen[*input].clone()
                }
                dag::OpNode::Project { input, projections } => projections
                    .iter()
                    .map(|projection| passed_on(&chosen, *input, projection))
                    .collect(),
                dag::OpNode::Join {
                    inputs,
                    kind: dag::JoinKind::Inner,
                    ..
                } => [&chosen[inputs[0]], &chosen[inputs[1]]]
                    .into_iter()
                    .flatten()
                    .copied()
                    .collect(),
                dag::OpNode::Join { inputs, .. } => chosen[inputs[0]].clone(),
                dag::OpNode::Pad {
                    input,
                    before,
                    after,
                } => std::iter::repeat_n(None, before.len())
                    .chain(chosen[*input].iter().copied())
                    .chain(std::iter::repeat_n(None, after.len()))
                    .collect(),
                dag::OpNode::Aggregate {
                    input,
                    group_exprs,
                    group_keys,
                    aggregates,
                    multiset_keys,
                    ..
                } => {
                    // A key or MIN/MAX value is chosen here when its class can
                    // hold several exact values, and otherwise stays chosen
                    // when its input column was.
                    let chosen_value = |expr, key: dag::KeyColumn| {
                        if key.ambiguous {
                            Some(key.collation)
                        } else {
                            passed_on(&chosen, *input, expr)
                        }
                    };
                    group_exprs
                        .iter()
                        .zip(group_keys)
                        .map(|(expr, key)| chosen_value(expr, *key))
                        .chain(
                            aggregates
                                .iter()
                                .zip(multiset_keys)
                                .map(|(aggregate, key)| {
                                    match (&aggregate.func, key, aggregate.args.first()) {
                                        (
                                            AggFunc::Min | AggFunc::Max,
                                            Some(key),
                                            Some(argument),
                                        ) => chosen_value(argument, *key),
                                        _ => None,
                                    }
                                }),
                        )
                        .collect()
                }
                dag::OpNode::SetOp {
                    inputs,
                    key_columns,
                    ..
                } => (0..width)
                    .map(|index| {
                        key_columns
                            .get(index)
                            .filter(|key| key.ambiguous)
                            .map(|key| key.collation)
                            .or_else(|| inputs.iter().find_map(|input| chosen[*input][index]))
                    })
                    .collect(),
            };
            chosen.push(columns);
        }
        chosen.swap_remove(dag.root)
    }
}

/// Validate a view and build its executable maintenance plan.
pub(crate) fn plan_view(
    view_name: &str,
    select: &ast::Select,
    resolver: &Resolver,
    connection: &Arc<Connection>,
) -> Result<MaintenancePlan> {
    let mut planner_program = ProgramBuilder::new_for_subprogram(
        QueryMode::Normal,
        None,
        ProgramBuilderOpts::new(8, 32, 8),
        connection.mvcc_enabled(),
    );
    let mut relational_plan = prepare_select_plan(
        select.clone(),
        resolver,
        &mut planner_program,
        &[],
        QueryDestination::ResultRows,
        connection,
    )?;
    unnest_correlated_subqueries(&mut relational_plan, resolver)?;
    // Lower the same optimized plan regular execution runs. Maintenance does
    // not depend on its access paths: no operator state depends on the order
    // in which a query would meet the rows.
    optimize_plan(&mut planner_program, &mut relational_plan, resolver)?;
    let dag = build_dag_from_plan(&relational_plan, resolver)?;
    let operator_states = plan_operator_states(view_name, &dag, resolver)?;
    let output_arity = dag.root_schema().len();
    let version_marker = version_marker_table(view_name);
    Ok(MaintenancePlan {
        dag,
        operator_states,
        output_arity,
        version_marker,
    })
}

/// Turn every correlated subquery the regular planner can rewrite into a join
/// (EXISTS and IN into semi joins, NOT EXISTS into anti joins, scalar
/// aggregates into LEFT JOINs), in this plan and in every FROM-clause
/// subquery.
///
/// The regular optimizer chooses between a correlated subquery and its
/// rewrite by cost. Maintenance cannot run a correlated subquery, and the
/// view's plan is rebuilt whenever the schema changes, so the choice must not
/// depend on cost: a new index could otherwise make an accepted view
/// impossible to maintain.
fn unnest_correlated_subqueries(plan: &mut Plan, resolver: &Resolver) -> Result<()> {
    match plan {
        Plan::Select(select) => unnest_select_subqueries(select, resolver),
        Plan::CompoundSelect {
            left, right_most, ..
        } => {
            for (branch, _) in left.iter_mut() {
                unnest_select_subqueries(branch, resolver)?;
            }
            unnest_select_subqueries(right_most, resolver)
        }
        Plan::Delete(_) | Plan::Update(_) | Plan::RecursiveCte(_) => Ok(()),
    }
}

fn unnest_select_subqueries(plan: &mut SelectPlan, resolver: &Resolver) -> Result<()> {
    // Inner queries first: a subquery whose own FROM or WHERE holds another
    // subquery can only become a join after that one has.
    for subquery in &mut plan.non_from_clause_subqueries {
        if let SubqueryState::Unevaluated {
            plan: Some(inner), ..
        } = &mut subquery.state
        {
            unnest_correlated_subqueries(inner, resolver)?;
        }
    }
    for table in plan.table_references.joined_tables_mut() {
        if let crate::schema::Table::FromClauseSubquery(subquery) = &mut table.table {
            unnest_correlated_subqueries(&mut Arc::make_mut(subquery).plan, resolver)?;
        }
    }
    rewrite_correlated_subqueries(plan, resolver)?;
    Ok(())
}

fn version_marker_table(view_name: &str) -> HiddenTableDef {
    let table_name = crate::incremental::view::dbsp_version_marker_table_name(view_name);
    let table_ident = crate::util::quote_identifier(&table_name);
    HiddenTableDef {
        create_sql: format!("CREATE TABLE {table_ident} (version INTEGER)"),
        table_name,
        primary_key_index: false,
    }
}

/// Validate one fully planned node.
///
/// Planning visits nodes in topological order and calls this immediately
/// after assigning the node's identity, state, and arrangement contract.
/// Validation therefore cannot accept a shape that has no physical contract,
/// and it may inspect only contracts already established for declared inputs.
fn validate_planned_node(
    dag: &dag::MaintenanceDag,
    node_id: dag::NodeId,
    operator_states: &OperatorStateCatalog,
    resolver: &Resolver,
) -> Result<()> {
    let node = &dag.nodes[node_id];
    let check_expr =
        |expr: &ast::Expr, input: dag::NodeId, unavailable_value: &str| -> Result<()> {
            if changes_between_statements(expr, resolver)? {
                return unsupported("non-deterministic expressions");
            }
            let input = &operator_states.for_node(input)?.output;
            validate_stream_expr(
                expr,
                &input.schema,
                &input.binding_rowids,
                unavailable_value,
            )
        };
    match node {
        dag::OpNode::Scan { table, .. } => {
            if !table.has_rowid {
                return unsupported("WITHOUT ROWID base tables");
            }
            if table.has_virtual_columns {
                return unsupported("base tables with virtual generated columns");
            }
        }
        dag::OpNode::Filter { input, predicate } => {
            // HAVING is the only filter placed directly on an aggregate.
            let unavailable_value = if matches!(dag.nodes[*input], dag::OpNode::Aggregate { .. }) {
                "HAVING referencing columns outside GROUP BY"
            } else {
                "filters reading columns that their input does not provide"
            };
            check_expr(predicate, *input, unavailable_value)?
        }
        dag::OpNode::Project { input, projections } => {
            for expr in projections {
                check_expr(expr, *input, "non-aggregate result columns not in GROUP BY")?;
            }
        }
        dag::OpNode::Alias { .. } | dag::OpNode::Pad { .. } => {}
        dag::OpNode::Join { inputs, on, kind } => {
            for &input in inputs {
                if !operator_states
                    .for_node(input)?
                    .exposes_arrangement(&dag.nodes[input])
                {
                    return Err(LimboError::InternalError(format!(
                        "join input DAG node {input} has no declared arrangement"
                    )));
                }
            }
            let input_contracts = [
                &operator_states.for_node(inputs[0])?.output,
                &operator_states.for_node(inputs[1])?.output,
            ];
            if *kind != dag::JoinKind::Inner
                && !matches!(
                    input_contracts[0].published_identity,
                    DeltaIdentity::BindingRowids(1) | DeltaIdentity::OperatorRowid
                )
            {
                return Err(LimboError::InternalError(format!(
                    "semi or anti join input DAG node {} is not identified by one rowid",
                    inputs[0]
                )));
            }
            // ON reads both inputs, also when the join outputs only the first.
            let joined_schema = dag::StreamSchema {
                columns: input_contracts
                    .iter()
                    .flat_map(|input| input.schema.columns.iter().cloned())
                    .collect(),
                bindings: input_contracts
                    .iter()
                    .flat_map(|input| input.schema.bindings.iter().cloned())
                    .collect(),
            };
            let joined_rowids = input_contracts
                .iter()
                .flat_map(|input| input.binding_rowids.iter().copied())
                .collect::<Vec<_>>();
            for expr in on {
                if changes_between_statements(expr, resolver)? {
                    return unsupported("non-deterministic expressions");
                }
                validate_stream_expr(
                    expr,
                    &joined_schema,
                    &joined_rowids,
                    "join predicates referencing values outside their input stream",
                )?;
            }
        }
        dag::OpNode::SetOp {
            inputs,
            operators,
            arity,
            prefix_len,
            key_columns,
        } => {
            if inputs.len() != operators.len() + 1
                || *prefix_len > inputs.len()
                || *prefix_len == 1
                || inputs
                    .iter()
                    .any(|input| dag.output_schema(*input).len() != *arity)
            {
                return Err(LimboError::InternalError(
                    "composable set-op has inconsistent physical metadata".to_string(),
                ));
            }
            if (*prefix_len == 0 && !key_columns.is_empty())
                || (*prefix_len > 0 && key_columns.len() != *arity)
            {
                return Err(LimboError::InternalError(
                    "composable set-op has an invalid collation layout".to_string(),
                ));
            }
            if key_columns.iter().any(|key| key.collation.is_custom()) {
                return unsupported("custom collations on grouping or dedup keys");
            }
            if *prefix_len == 0
                && operators
                    .iter()
                    .any(|operator| *operator != ast::CompoundOperator::UnionAll)
            {
                return Err(LimboError::InternalError(
                    "pure UNION ALL DAG has a non-UNION ALL operator".to_string(),
                ));
            }
        }
        dag::OpNode::Aggregate {
            input,
            group_exprs,
            group_keys,
            aggregates,
            multiset_keys,
            ..
        } => {
            if group_exprs.len() != group_keys.len()
                || aggregates.len() != multiset_keys.len()
                || aggregates
                    .iter()
                    .zip(multiset_keys)
                    .any(|(aggregate, key)| uses_multiset(aggregate) != key.is_some())
            {
                return Err(LimboError::InternalError(
                    "aggregate DAG has inconsistent collation metadata".to_string(),
                ));
            }
            if group_keys
                .iter()
                .chain(multiset_keys.iter().flatten())
                .any(|key| key.collation.is_custom())
            {
                return unsupported("custom collations on aggregate state keys");
            }
            for expr in group_exprs {
                check_expr(
                    expr,
                    *input,
                    "grouping expressions referencing values outside their input stream",
                )?;
            }
            for aggregate in aggregates {
                validate_supported_aggregate(aggregate)?;
                for expr in &aggregate.args {
                    check_expr(
                        expr,
                        *input,
                        "aggregate arguments referencing values outside their input stream",
                    )?;
                }
                if let Some(expr) = &aggregate.filter_expr {
                    check_expr(
                        expr,
                        *input,
                        "aggregate filters referencing values outside their input stream",
                    )?;
                }
            }
        }
    }
    Ok(())
}

/// Whether `expr` can give a different value in a later statement than it gave
/// when a row was added to the view: a non-deterministic function, or
/// `CURRENT_DATE`, `CURRENT_TIME` or `CURRENT_TIMESTAMP`. Those literals are
/// fixed within one statement, so the shared helper treats them as
/// deterministic, but a view keeps its rows across statements.
fn changes_between_statements(expr: &ast::Expr, resolver: &Resolver) -> Result<bool> {
    if expr_contains_nondeterministic_scalar_function(expr, resolver)? {
        return Ok(true);
    }
    let mut found = false;
    crate::util::walk_expr_with_subqueries(expr, &mut |node| -> Result<WalkControl> {
        if matches!(
            node,
            ast::Expr::Literal(
                ast::Literal::CurrentDate
                    | ast::Literal::CurrentTime
                    | ast::Literal::CurrentTimestamp
            )
        ) {
            found = true;
        }
        Ok(WalkControl::Continue)
    })?;
    Ok(found)
}

fn validate_terminal_delta_identity(
    operator_states: &OperatorStateCatalog,
    node_id: dag::NodeId,
) -> Result<()> {
    match operator_states.for_node(node_id)?.output.published_identity {
        DeltaIdentity::BindingRowids(1) | DeltaIdentity::OperatorRowid => Ok(()),
        DeltaIdentity::BindingRowids(_) | DeltaIdentity::OperatorKey(_) => unsupported(
            "a root delta with composite identity without an explicit materialized sink",
        ),
    }
}

fn plan_node_output(
    schema: Arc<dag::StreamSchema>,
    node: &dag::OpNode,
    prior_states: &[OperatorStateDef],
) -> Result<NodeOutputContract> {
    let prior_output = |input: dag::NodeId| {
        prior_states
            .get(input)
            .map(|state| &state.output)
            .ok_or_else(|| {
                LimboError::InternalError(format!(
                    "maintenance DAG input node {input} has no output contract"
                ))
            })
    };
    let (emitted_identity, binding_rowids): (DeltaIdentity, Arc<[bool]>) = match node {
        dag::OpNode::Scan { table, .. } => (
            DeltaIdentity::BindingRowids(1),
            vec![table.has_rowid].into(),
        ),
        dag::OpNode::Filter { input, .. } | dag::OpNode::Project { input, .. } => {
            let upstream = prior_output(*input)?;
            (upstream.published_identity, upstream.binding_rowids.clone())
        }
        // A derived-table alias introduces one new SQL namespace. The source
        // transport key still distinguishes rows, but it is not the alias's
        // SQL rowid.
        dag::OpNode::Alias { input, .. } => {
            let upstream = prior_output(*input)?;
            let identity = match upstream.published_identity {
                DeltaIdentity::BindingRowids(width) => DeltaIdentity::OperatorKey(width),
                identity => identity,
            };
            (identity, vec![false].into())
        }
        dag::OpNode::Join {
            inputs,
            kind: dag::JoinKind::Inner,
            ..
        } => {
            let inputs = [prior_output(inputs[0])?, prior_output(inputs[1])?];
            let identity = if inputs
                .iter()
                .all(|input| matches!(input.published_identity, DeltaIdentity::BindingRowids(_)))
            {
                DeltaIdentity::BindingRowids(
                    inputs
                        .iter()
                        .map(|input| input.published_identity.width())
                        .sum(),
                )
            } else {
                // Opaque pair for non-binding inputs.
                DeltaIdentity::OperatorKey(2)
            };
            let mut provenance = Vec::new();
            for input in &inputs {
                provenance.extend_from_slice(&input.binding_rowids);
            }
            (identity, provenance.into())
        }
        // A semi or anti join outputs rows of its first input unchanged, so
        // they keep that input's identity.
        dag::OpNode::Join {
            inputs,
            kind: dag::JoinKind::Semi | dag::JoinKind::Anti,
            ..
        } => {
            let rows = prior_output(inputs[0])?;
            (rows.published_identity, rows.binding_rowids.clone())
        }
        // The NULL columns publish a NULL rowid for each binding they stand for.
        dag::OpNode::Pad {
            input,
            before,
            after,
        } => {
            let upstream = prior_output(*input)?;
            let identity = match upstream.published_identity {
                DeltaIdentity::BindingRowids(width) => DeltaIdentity::OperatorKey(width),
                identity => identity,
            };
            let rowids = std::iter::repeat_n(true, before.bindings.len())
                .chain(upstream.binding_rowids.iter().copied())
                .chain(std::iter::repeat_n(true, after.bindings.len()))
                .collect::<Vec<_>>();
            (identity, rowids.into())
        }
        // These operators may retain source expressions as output values, but
        // they do not preserve a one-to-one source-row namespace.
        dag::OpNode::Aggregate { input, .. } => (
            DeltaIdentity::OperatorRowid,
            vec![false; prior_output(*input)?.binding_rowids.len()].into(),
        ),
        dag::OpNode::SetOp {
            inputs, prefix_len, ..
        } => {
            let first = inputs.first().ok_or_else(|| {
                LimboError::InternalError("set-op DAG must have at least one input".to_string())
            })?;
            if *prefix_len > 0 {
                (
                    DeltaIdentity::OperatorRowid,
                    vec![false; prior_output(*first)?.binding_rowids.len()].into(),
                )
            } else {
                // Pure UNION ALL namespaces every branch's packed identity. A
                // binding's rowid survives when every branch publishes it for
                // the same binding, as the branches of an outer join do.
                let mut rowids = vec![true; schema.bindings.len()];
                for input in inputs {
                    let branch = prior_output(*input)?;
                    if branch.schema.bindings.len() != schema.bindings.len() {
                        rowids.fill(false);
                        continue;
                    }
                    for (index, available) in rowids.iter_mut().enumerate() {
                        *available &= branch.binding_rowids[index]
                            && branch.schema.bindings[index].logical_id
                                == schema.bindings[index].logical_id;
                    }
                }
                (DeltaIdentity::OperatorKey(2), rowids.into())
            }
        }
    };
    if binding_rowids.len() != schema.bindings.len() {
        return Err(LimboError::InternalError(
            "maintenance output rowid provenance does not match its bindings".to_string(),
        ));
    }
    Ok(NodeOutputContract {
        schema,
        binding_rowids,
        emitted_identity,
        published_identity: emitted_identity,
    })
}

fn node_has_native_arrangement(node: &dag::OpNode) -> bool {
    matches!(
        node,
        dag::OpNode::Scan { .. } | dag::OpNode::Aggregate { .. }
    )
}

fn node_is_join_input(dag: &dag::MaintenanceDag, node_id: dag::NodeId) -> bool {
    dag.nodes.iter().any(|node| {
        matches!(
            node,
            dag::OpNode::Join { inputs, .. } if inputs.contains(&node_id)
        )
    })
}

/// Whether a semi or anti join keeps or drops this node's rows. It looks each
/// row up by rowid, so the node must publish a one-rowid identity.
fn node_rows_are_looked_up_by_rowid(dag: &dag::MaintenanceDag, node_id: dag::NodeId) -> bool {
    dag.nodes.iter().any(|node| {
        matches!(
            node,
            dag::OpNode::Join {
                inputs,
                kind: dag::JoinKind::Semi | dag::JoinKind::Anti,
                ..
            } if inputs[0] == node_id
        )
    })
}

/// Whether this node must persist its output integral for a downstream join
/// or terminal sink.
///
/// This demand is derived from DAG edges once and shared by validation,
/// hidden-table creation, and codegen. Pure UNION ALL uses a branch id plus
/// packed upstream identity, so even branches with different identity widths
/// expose one fixed arrangement key.
fn node_requires_output_arrangement(
    dag: &dag::MaintenanceDag,
    node_id: dag::NodeId,
    emitted_identity: DeltaIdentity,
) -> bool {
    if matches!(dag.nodes[node_id], dag::OpNode::SetOp { prefix_len: 0, .. }) {
        return true;
    }
    // Preserve binding rowids through consumers that may reference them.
    // Composite identities are normalized only when they reach a terminal
    // sink or must back a downstream join arrangement.
    if node_id == dag.root
        && !matches!(
            emitted_identity,
            DeltaIdentity::BindingRowids(1) | DeltaIdentity::OperatorRowid
        )
    {
        return true;
    }
    if !node_is_join_input(dag, node_id) || node_has_native_arrangement(&dag.nodes[node_id]) {
        return false;
    }
    true
}

/// Build the persistent-state inventory in DAG order.
///
/// Aggregate and deduplicating set operators own their native integral.
/// Joins and pure UNION ALL publish through ordinary output arrangements, so
/// storage selection depends only on node and edge contracts.
fn plan_operator_states(
    view_name: &str,
    dag: &dag::MaintenanceDag,
    resolver: &Resolver,
) -> Result<OperatorStateCatalog> {
    use crate::incremental::view::DBSP_CIRCUIT_VERSION;

    let mut catalog = OperatorStateCatalog {
        nodes: Vec::with_capacity(dag.nodes.len()),
    };
    let mut hidden_names = FxHashSet::default();
    for (node_id, node) in dag.nodes.iter().enumerate() {
        let mut output =
            plan_node_output(dag.output_schema(node_id).clone(), node, &catalog.nodes)?;
        let needs_state = node_requires_primary_state(dag, node_id);
        let state_table = if needs_state {
            let table_name = format!(
                "{}{DBSP_CIRCUIT_VERSION}_{view_name}__n{node_id}",
                crate::schema::DBSP_TABLE_PREFIX,
            );
            Some(HiddenTableDef {
                create_sql: state_table_sql(&table_name, node)?,
                table_name,
                primary_key_index: true,
            })
        } else {
            None
        };
        let auxiliary_tables = plan_auxiliary_tables(
            view_name,
            node_id,
            node,
            dag.output_schema(node_id).len(),
            &output.binding_rowids,
        );
        let arrangement_table =
            if node_requires_output_arrangement(dag, node_id, output.emitted_identity) {
                let identity_width = output.emitted_identity.width();
                let table_name = format!(
                    "{}{DBSP_CIRCUIT_VERSION}_{view_name}__n{node_id}",
                    crate::schema::DBSP_ARRANGEMENT_TABLE_PREFIX,
                );
                Some(HiddenTableDef {
                    create_sql: arrangement_table_sql(
                        &table_name,
                        identity_width,
                        dag.output_schema(node_id).len(),
                        binding_rowid_metadata_width(
                            output.emitted_identity,
                            &output.binding_rowids,
                        ),
                    )?,
                    table_name,
                    primary_key_index: true,
                })
            } else {
                None
            };
        if arrangement_table.is_some()
            && (node_id == dag.root || node_rows_are_looked_up_by_rowid(dag, node_id))
        {
            output.published_identity = DeltaIdentity::OperatorRowid;
        }
        let state = OperatorStateDef {
            node_id,
            output,
            state_table,
            auxiliary_tables,
            arrangement_table,
        };
        for table in state.hidden_tables() {
            if !hidden_names.insert(table.table_name.clone()) {
                return Err(LimboError::InternalError(format!(
                    "duplicate maintenance state table {}",
                    table.table_name
                )));
            }
        }
        catalog.nodes.push(state);
        validate_planned_node(dag, node_id, &catalog, resolver)?;
    }
    validate_terminal_delta_identity(&catalog, dag.root)?;
    Ok(catalog)
}

fn plan_auxiliary_tables(
    view_name: &str,
    node_id: dag::NodeId,
    node: &dag::OpNode,
    output_width: usize,
    binding_rowids: &[bool],
) -> Vec<AuxiliaryTableDef> {
    use crate::incremental::view::DBSP_CIRCUIT_VERSION;

    let table_name = |suffix: &str| {
        format!(
            "{}{DBSP_CIRCUIT_VERSION}_{view_name}__n{node_id}{suffix}",
            crate::schema::DBSP_MULTISET_TABLE_PREFIX,
        )
    };
    let table = |purpose, table_name: String, create_sql| AuxiliaryTableDef {
        purpose,
        table: HiddenTableDef {
            table_name,
            create_sql,
            primary_key_index: true,
        },
    };

    match node {
        dag::OpNode::Aggregate {
            group_keys,
            multiset_keys,
            ..
        } => {
            let mut tables = multiset_keys
                .iter()
                .enumerate()
                .filter_map(|(aggregate_index, value_key)| {
                    value_key.map(|value_key| {
                        let table_name = table_name(&format!("__a{aggregate_index}"));
                        let create_sql =
                            aggregate_multiset_table_sql(&table_name, group_keys, value_key);
                        table(
                            AuxiliaryStatePurpose::AggregateMultiset { aggregate_index },
                            table_name,
                            create_sql,
                        )
                    })
                })
                .collect::<Vec<_>>();
            if group_keys.iter().any(|key| key.ambiguous) {
                let table_name = table_name("__g");
                let create_sql = class_members_table_sql(&table_name, group_keys);
                tables.push(table(
                    AuxiliaryStatePurpose::AggregateGroupMembers,
                    table_name,
                    create_sql,
                ));
            }
            tables
        }
        dag::OpNode::Join {
            kind: dag::JoinKind::Semi | dag::JoinKind::Anti,
            ..
        } => {
            let table_name = table_name("");
            let payload_width = output_width
                + binding_rowids
                    .iter()
                    .filter(|available| **available)
                    .count();
            vec![AuxiliaryTableDef {
                purpose: AuxiliaryStatePurpose::MatchCounts,
                table: HiddenTableDef {
                    create_sql: match_counts_table_sql(&table_name, payload_width),
                    table_name,
                    // Rows are keyed by the input row's rowid, which is also
                    // this table's rowid.
                    primary_key_index: false,
                },
            }]
        }
        dag::OpNode::SetOp {
            operators,
            prefix_len,
            key_columns,
            ..
        } if *prefix_len > 0 => {
            let mut tables = Vec::new();
            if *prefix_len < operators.len() + 1 {
                let table_name = table_name("");
                tables.push(table(
                    AuxiliaryStatePurpose::SetOpIdentity,
                    table_name.clone(),
                    set_op_identity_table_sql(&table_name),
                ));
            }
            if key_columns.iter().any(|key| key.ambiguous) {
                let table_name = table_name("__r");
                tables.push(table(
                    AuxiliaryStatePurpose::SetOpMembers,
                    table_name.clone(),
                    class_members_table_sql(&table_name, key_columns),
                ));
            }
            tables
        }
        _ => Vec::new(),
    }
}

fn arrangement_table_sql(
    table_name: &str,
    identity_width: usize,
    value_width: usize,
    binding_rowid_width: usize,
) -> Result<String> {
    if identity_width == 0 {
        return Err(LimboError::InternalError(
            "an output arrangement requires a non-empty stable identity".to_string(),
        ));
    }
    let table_ident = crate::util::quote_identifier(table_name);
    let mut columns = (0..identity_width)
        .map(|i| format!("i{i}"))
        .collect::<Vec<_>>();
    columns.extend((0..value_width).map(|i| format!("c{i}")));
    // Rows are keyed by their identity and the exact record of their values
    // (see `members::emit_exact_value_record`), so the integer 2 and the
    // real 2.0 are two rows, as in the z-set.
    let mut key = columns[..identity_width].to_vec();
    key.push("exact".to_string());
    columns.extend((0..binding_rowid_width).map(|i| format!("r{i}")));
    columns.push("mult".to_string());
    columns.push("exact".to_string());
    Ok(format!(
        "CREATE TABLE {table_ident} ({}, PRIMARY KEY ({}))",
        columns.join(", "),
        key.join(", ")
    ))
}

fn node_requires_primary_state(dag: &dag::MaintenanceDag, node_id: dag::NodeId) -> bool {
    match &dag.nodes[node_id] {
        dag::OpNode::Aggregate { .. } => true,
        dag::OpNode::SetOp { prefix_len, .. } => *prefix_len > 0,
        _ => false,
    }
}

/// The CREATE TABLE statement for a view's internal state table.
///
/// For a GROUP BY view: one row per live group, holding the group-key values
/// and each payload aggregate's persisted state, with the PRIMARY KEY over
/// the group columns giving the automatic group-lookup index. MIN/MAX
/// aggregates contribute no columns here — their state is the value multiset
/// table.
///
/// For a compound view with a dedup prefix: one row per distinct content
/// key, holding one signed count per prefix branch (the visibility fold
/// reads them). A trailing UNION ALL suffix keeps its
/// (branch, source-identity, multiplicity) rows in its identity table; pure
/// UNION ALL is stateless branch composition.
///
/// In each case the state row's rowid is the operator output identity.
///
/// Declared column types are empty so nothing coerces the stored values.
fn state_table_sql(state_table_name: &str, node: &dag::OpNode) -> Result<String> {
    let state_table_ident = crate::util::quote_identifier(state_table_name);
    match node {
        dag::OpNode::Aggregate {
            group_exprs,
            group_keys,
            aggregates,
            ..
        } => {
            let mut columns = Vec::new();
            for (i, key) in group_keys.iter().enumerate() {
                columns.push(format!("g{i}{}", collate_clause(key.collation)));
            }
            for i in 0..aggregates.len() {
                columns.push(format!("v{i}"));
            }
            for (i, agg) in aggregates.iter().enumerate() {
                if let Some(width) = super::aggregate::ivm_payload_width(&agg.func) {
                    for j in 0..width {
                        columns.push(format!("a{i}_{j}"));
                    }
                }
            }
            let key: Vec<String> = (0..group_exprs.len()).map(|i| format!("g{i}")).collect();
            Ok(format!(
                "CREATE TABLE {state_table_ident} ({}, PRIMARY KEY ({}))",
                columns.join(", "),
                key.join(", ")
            ))
        }
        dag::OpNode::SetOp {
            arity,
            prefix_len,
            key_columns,
            ..
        } => {
            if *prefix_len == 0 {
                return Err(LimboError::InternalError(
                    "pure UNION ALL is a stateless branch composition".to_string(),
                ));
            }
            let mut columns: Vec<String> = (0..*arity)
                .map(|i| format!("c{i}{}", collate_clause(key_columns[i].collation)))
                .collect();
            for i in 0..*prefix_len {
                columns.push(format!("cnt{i}"));
            }
            let key: Vec<String> = (0..*arity).map(|i| format!("c{i}")).collect();
            Ok(format!(
                "CREATE TABLE {state_table_ident} ({}, PRIMARY KEY ({}))",
                columns.join(", "),
                key.join(", ")
            ))
        }
        _ => Err(LimboError::InternalError(
            "this DAG operator has no state table".to_string(),
        )),
    }
}

/// Whether an aggregate keeps per-value state in the multiset table: MIN/MAX
/// (to find the next extreme after a retraction) and DISTINCT aggregates (to
/// step the accumulator only on first occurrence of a value).
pub(super) fn uses_multiset(agg: &Aggregate) -> bool {
    matches!(agg.func, AggFunc::Min | AggFunc::Max) || tracks_distinct_values(agg)
}

/// One aggregate's value multiset: one row per (group, value) with its
/// multiplicity. A table per aggregate lets the value-key index carry that
/// argument's own collation. For MIN/MAX the key ordering makes a group's
/// extreme an index seek; for DISTINCT aggregates the rows decide which
/// values the aggregate sees.
///
/// A value whose class can hold several exact values (see
/// [`dag::KeyColumn::ambiguous`]) is keyed by its exact value: the `val`
/// class column is followed by the member columns (`member_column_names`).
fn aggregate_multiset_table_sql(
    multiset_table_name: &str,
    group_keys: &[dag::KeyColumn],
    value_key: dag::KeyColumn,
) -> String {
    let multiset_table_ident = crate::util::quote_identifier(multiset_table_name);
    let mut key = Vec::with_capacity(group_keys.len() + 4);
    let mut columns = Vec::with_capacity(group_keys.len() + 5);
    for (i, group_key) in group_keys.iter().enumerate() {
        columns.push(format!("g{i}{}", collate_clause(group_key.collation)));
        key.push(format!("g{i}"));
    }
    columns.push(format!("val{}", collate_clause(value_key.collation)));
    key.push("val".to_string());
    if value_key.ambiguous {
        let members = member_column_names(1);
        columns.extend(members.iter().cloned());
        key.extend(members);
    }
    columns.push("mult".to_string());
    format!(
        "CREATE TABLE {multiset_table_ident} ({}, PRIMARY KEY ({}))",
        columns.join(", "),
        key.join(", ")
    )
}

/// The exact values in each class of an operator's collated key, with their
/// counts: `(class.., member columns.., mult)`.
///
/// `class` columns compare under the key's collations and hold the member's
/// own values. Index order lists each class's members smallest-first, which
/// is the member the operator shows (see `vdbe_maintenance::members`).
fn class_members_table_sql(table_name: &str, keys: &[dag::KeyColumn]) -> String {
    let table_ident = crate::util::quote_identifier(table_name);
    let mut key = (0..keys.len()).map(|i| format!("c{i}")).collect::<Vec<_>>();
    let mut columns = keys
        .iter()
        .enumerate()
        .map(|(i, column)| format!("c{i}{}", collate_clause(column.collation)))
        .collect::<Vec<_>>();
    let members = member_column_names(keys.len());
    columns.extend(members.iter().cloned());
    key.extend(members);
    columns.push("mult".to_string());
    format!(
        "CREATE TABLE {table_ident} ({}, PRIMARY KEY ({}))",
        columns.join(", "),
        key.join(", ")
    )
}

/// The member columns that follow the class columns of `width` values in a
/// member table: `raw..`, the values compared under BINARY; `type..`, their
/// `typeof()`; and `exact`, the record of the values. See
/// `members::emit_member_columns`.
fn member_column_names(width: usize) -> Vec<String> {
    (0..width)
        .map(|i| format!("raw{i}"))
        .chain((0..width).map(|i| format!("type{i}")))
        .chain(std::iter::once("exact".to_string()))
        .collect()
}

/// A compound view's trailing UNION ALL branches: a multiset of
/// (branch, packed source identity), each row's rowid doubling as its view
/// rowid. Packing keeps the table independent of each branch's identity width.
fn set_op_identity_table_sql(table_name: &str) -> String {
    let table_ident = crate::util::quote_identifier(table_name);
    format!(
        "CREATE TABLE {table_ident} (branch, source_identity, mult, PRIMARY KEY (branch, source_identity))"
    )
}

/// A semi or anti join's state, one row per input row, stored under that row's
/// rowid: the row's multiplicity, its number of ON matches, the weight it
/// currently has in the output, and the output image published with that
/// weight (needed to retract it after the input row is gone).
fn match_counts_table_sql(table_name: &str, payload_width: usize) -> String {
    let table_ident = crate::util::quote_identifier(table_name);
    let payload = (0..payload_width)
        .map(|i| format!(", c{i}"))
        .collect::<String>();
    format!("CREATE TABLE {table_ident} (present, matches, published{payload})")
}

/// The `COLLATE` clause for a hidden-table key column, empty for the
/// default binary comparison. The name round-trips through
/// [`CollationSeq::new`] when the generated DDL is parsed back; custom
/// collations (which do not) are rejected at classify time.
fn collate_clause(collation: CollationSeq) -> String {
    match collation {
        CollationSeq::Binary => String::new(),
        other => format!(" COLLATE \"{}\"", other.name()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn test_table() -> Arc<BTreeTable> {
        Arc::new(BTreeTable::new(
            1,
            "t".to_string(),
            crate::alloc::vec![],
            crate::alloc::vec![],
            crate::schema::BTreeCharacteristics::HAS_ROWID,
            crate::alloc::vec![],
            crate::alloc::vec![],
            crate::alloc::vec![],
            None,
        ))
    }

    fn sum_expr(column: usize) -> ast::Expr {
        ast::Expr::FunctionCall {
            name: ast::Name::exact("sum".to_string()),
            distinctness: None,
            args: vec![Box::new(ast::Expr::Column {
                database: None,
                table: TableInternalId::from(1),
                column,
                is_rowid_alias: false,
            })],
            order_by: Vec::new(),
            within_group: Vec::new(),
            filter_over: ast::FunctionTail {
                filter_clause: None,
                over_clause: None,
            },
        }
    }

    fn abs_expr(column: usize) -> ast::Expr {
        ast::Expr::FunctionCall {
            name: ast::Name::exact("abs".to_string()),
            distinctness: None,
            args: vec![Box::new(ast::Expr::Column {
                database: None,
                table: TableInternalId::from(1),
                column,
                is_rowid_alias: false,
            })],
            order_by: Vec::new(),
            within_group: Vec::new(),
            filter_over: ast::FunctionTail {
                filter_clause: None,
                over_clause: None,
            },
        }
    }

    #[test]
    fn expression_validation_depends_only_on_published_values() {
        let sum = sum_expr(0);
        let input = NodeOutputContract {
            schema: Arc::new(dag::StreamSchema {
                columns: vec![Some(sum.clone())],
                bindings: Vec::new(),
            }),
            binding_rowids: Vec::<bool>::new().into(),
            emitted_identity: DeltaIdentity::OperatorRowid,
            published_identity: DeltaIdentity::OperatorRowid,
        };
        let expression = ast::Expr::Binary(
            Box::new(sum),
            ast::Operator::Add,
            Box::new(ast::Expr::Literal(ast::Literal::Numeric("1".to_string()))),
        );

        validate_stream_expr(
            &expression,
            &input.schema,
            &input.binding_rowids,
            "unpublished value",
        )
        .unwrap();

        let error = validate_stream_expr(
            &sum_expr(1),
            &input.schema,
            &input.binding_rowids,
            "unpublished value",
        )
        .unwrap_err();
        assert!(error
            .to_string()
            .contains("expressions over aggregate results"));
    }

    #[test]
    fn expression_validation_stops_at_published_scalar_functions() {
        let published = abs_expr(0);
        let input = NodeOutputContract {
            schema: Arc::new(dag::StreamSchema {
                columns: vec![Some(published.clone())],
                bindings: Vec::new(),
            }),
            binding_rowids: Vec::<bool>::new().into(),
            emitted_identity: DeltaIdentity::OperatorRowid,
            published_identity: DeltaIdentity::OperatorRowid,
        };

        validate_stream_expr(
            &published,
            &input.schema,
            &input.binding_rowids,
            "unpublished value",
        )
        .unwrap();
    }

    #[test]
    fn node_output_contract_reuses_dag_schema() {
        let table = test_table();
        let schema = Arc::new(dag::StreamSchema {
            columns: Vec::new(),
            bindings: vec![dag::StreamBinding {
                table: table.clone(),
                identifier: "t".to_string(),
                logical_id: TableInternalId::from(1),
            }],
        });
        let node = dag::OpNode::Scan {
            table,
            identifier: "t".to_string(),
            logical_id: TableInternalId::from(1),
        };

        let output = plan_node_output(schema.clone(), &node, &[]).unwrap();

        assert!(Arc::ptr_eq(&output.schema, &schema));
        assert_eq!(output.emitted_identity, DeltaIdentity::BindingRowids(1));
        assert_eq!(output.binding_rowids.as_ref(), &[true]);
    }
}
